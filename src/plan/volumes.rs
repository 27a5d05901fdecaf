//! Which PVCs a request restores, each with the PodVolumeBackup that holds its data.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::core::SelectorExt;

use crate::api::{DataRestoreSpec, PodVolumeBackup, PodVolumePhase};
use crate::labels::PVC_NAME_ANNOTATION;

use super::{Invalid, label_selector, parse_pvc_key};

/// The PVC key (`namespace/name`) a PodVolumeBackup covers, if its volume is a PVC.
pub(super) fn pvc_of(pvb: &PodVolumeBackup) -> Option<String> {
    let name = pvb
        .metadata
        .annotations
        .as_ref()?
        .get(PVC_NAME_ANNOTATION)?;
    let namespace = pvb.spec.pod.namespace.as_deref()?;
    Some(format!("{namespace}/{name}"))
}

/// Picks, for every PVC in the backup, the PodVolumeBackup to restore from: a Completed
/// one, the newest when several pods mounted the claim.
pub(crate) fn completed_by_pvc(pvbs: &[PodVolumeBackup]) -> BTreeMap<String, &PodVolumeBackup> {
    let mut best: BTreeMap<String, &PodVolumeBackup> = BTreeMap::new();
    for pvb in pvbs {
        if pvb.phase() != Some(PodVolumePhase::Completed) {
            continue;
        }
        let Some(key) = pvc_of(pvb) else { continue };
        let done = |p: &PodVolumeBackup| {
            p.status
                .as_ref()
                .and_then(|s| s.completion_timestamp.clone())
                .map(|t| t.0)
        };
        match best.get(&key) {
            Some(current) if done(current) >= done(pvb) => {}
            _ => {
                best.insert(key, pvb);
            }
        }
    }
    best
}

/// The field a selected PVC comes from, for messages: its `spec.pvcs` entry if it has
/// one, else the namespaces and selector that matched it.
pub(crate) fn selection_field(spec: &DataRestoreSpec, key: &str) -> String {
    if let Some(i) = spec.pvcs.iter().position(|k| k == key) {
        return format!("spec.pvcs[{i}]");
    }
    match (spec.included_namespaces.is_empty(), spec.selector.is_some()) {
        (false, true) => "spec.includedNamespaces and spec.selector".into(),
        (false, false) => "spec.includedNamespaces".into(),
        _ => "spec.selector".into(),
    }
}

/// The PVCs to restore, in `namespace/name` order, each with its PodVolumeBackup
/// (borrowed: a thousand copies of them were the largest part of validating a thousand
/// PVCs).
pub(crate) fn select_volumes<'a>(
    spec: &DataRestoreSpec,
    backup_name: &str,
    pvbs: &'a [PodVolumeBackup],
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
) -> Result<Vec<(String, &'a PodVolumeBackup)>, Invalid> {
    if spec.pvcs.is_empty() && spec.included_namespaces.is_empty() && spec.selector.is_none() {
        return Err(Invalid::one(
            "spec.pvcs, spec.includedNamespaces and spec.selector are all empty, so no PVC is selected: set at least one",
        ));
    }
    let in_backup = completed_by_pvc(pvbs);
    let mut errors = Vec::new();
    let mut chosen: BTreeMap<String, &PodVolumeBackup> = BTreeMap::new();

    for (i, key) in spec.pvcs.iter().enumerate() {
        if let Err(message) = parse_pvc_key(key) {
            errors.push(format!("spec.pvcs[{i}]: {message}"));
            continue;
        }
        match in_backup.get(key) {
            Some(pvb) => {
                chosen.insert(key.clone(), pvb);
            }
            None => errors.push(format!(
                "spec.pvcs[{i}]: {}",
                not_in_backup(key, backup_name, pvbs)
            )),
        }
    }

    if !spec.included_namespaces.is_empty() || spec.selector.is_some() {
        let selector = spec
            .selector
            .as_ref()
            .map(label_selector)
            .transpose()
            .map_err(|message| Invalid::one(format!("spec.selector: {message}")))?;
        let no_labels = BTreeMap::new();
        let mut matched_any = false;
        for (key, pvb) in &in_backup {
            let (namespace, _) = parse_pvc_key(key).expect("keys are built as namespace/name");
            if !spec.included_namespaces.is_empty()
                && !spec.included_namespaces.iter().any(|n| n == namespace)
            {
                continue;
            }
            if let Some(selector) = &selector {
                let labels = pvcs
                    .get(key)
                    .and_then(|p| p.metadata.labels.as_ref())
                    .unwrap_or(&no_labels);
                if !selector.matches(labels) {
                    continue;
                }
            }
            matched_any = true;
            chosen.insert(key.clone(), pvb);
        }
        if !matched_any && spec.pvcs.is_empty() {
            let field = selection_field(spec, "");
            errors.push(format!(
                "{field}: no file-system-backed PVC in backup \"{backup_name}\" matches; see what the backup holds with: refill backup describe {backup_name}"
            ));
        }
    }

    for key in chosen.keys() {
        if !pvcs.contains_key(key) {
            errors.push(format!(
                "{}: PVC {key} does not exist now; refill restores into existing PVCs only: create the PVC first (a Velero restore of it puts back the claim and its data)",
                selection_field(spec, key)
            ));
        }
    }

    if errors.is_empty() {
        Ok(chosen.into_iter().collect())
    } else {
        Err(Invalid { errors })
    }
}

fn not_in_backup(key: &str, backup_name: &str, pvbs: &[PodVolumeBackup]) -> String {
    let unfinished: Vec<String> = pvbs
        .iter()
        .filter(|p| pvc_of(p).as_deref() == Some(key))
        .map(|p| {
            format!(
                "{} is {}",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.phase()
                    .map(|ph| format!("{ph:?}"))
                    .unwrap_or_else(|| "without a phase".into())
            )
        })
        .collect();
    if unfinished.is_empty() {
        format!(
            "PVC {key} is not in backup \"{backup_name}\" as a file-system backup (no PodVolumeBackup); refill can restore only file-system-backed volumes: check the name, or pick a backup that holds it (refill backup describe {backup_name})"
        )
    } else {
        format!(
            "PVC {key} has no Completed PodVolumeBackup in backup \"{backup_name}\" ({}); its data cannot be restored from this backup: pick another backup",
            unfinished.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PodVolumeBackupSpec, PodVolumeBackupStatus};
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn pvb(name: &str, ns: &str, pvc: &str, phase: PodVolumePhase) -> PodVolumeBackup {
        let mut p = PodVolumeBackup::new(
            name,
            PodVolumeBackupSpec {
                pod: ObjectReference {
                    namespace: Some(ns.into()),
                    name: Some("pod".into()),
                    ..Default::default()
                },
                volume: "data".into(),
                ..Default::default()
            },
        );
        p.metadata.annotations = Some([(PVC_NAME_ANNOTATION.to_string(), pvc.to_string())].into());
        p.status = Some(PodVolumeBackupStatus {
            phase: Some(phase),
            snapshot_id: Some(format!("snap-{name}")),
            ..Default::default()
        });
        p
    }

    fn pvc(ns: &str, name: &str, labels: &[(&str, &str)]) -> (String, PersistentVolumeClaim) {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some(ns.into());
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        (format!("{ns}/{name}"), p)
    }

    fn world() -> (
        Vec<PodVolumeBackup>,
        BTreeMap<String, PersistentVolumeClaim>,
    ) {
        (
            vec![
                pvb("a", "shop", "db", PodVolumePhase::Completed),
                pvb("b", "shop", "cache", PodVolumePhase::Completed),
                pvb("c", "blog", "files", PodVolumePhase::Completed),
                pvb("d", "blog", "broken", PodVolumePhase::Failed),
            ],
            [
                pvc("shop", "db", &[("tier", "gold")]),
                pvc("shop", "cache", &[]),
                pvc("blog", "files", &[("tier", "gold")]),
                pvc("blog", "broken", &[]),
                pvc("blog", "new", &[]),
            ]
            .into(),
        )
    }

    fn keys<'a>(selected: &'a [(String, &'a PodVolumeBackup)]) -> Vec<&'a str> {
        selected.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn names_namespaces_and_selectors_combine() {
        let (pvbs, pvcs) = world();
        let spec = DataRestoreSpec {
            pvcs: vec!["blog/files".into()],
            included_namespaces: vec!["shop".into()],
            selector: Some(LabelSelector {
                match_labels: Some([("tier".to_string(), "gold".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let selected = select_volumes(&spec, "b1", &pvbs, &pvcs).unwrap();
        assert_eq!(keys(&selected), vec!["blog/files", "shop/db"]);
        assert_eq!(selected[1].1.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn a_named_pvc_outside_the_backup_is_refused_clearly() {
        let (pvbs, pvcs) = world();
        let spec = DataRestoreSpec {
            pvcs: vec!["blog/new".into(), "blog/broken".into(), "nonsense".into()],
            ..Default::default()
        };
        let err = select_volumes(&spec, "b1", &pvbs, &pvcs).unwrap_err();
        assert_eq!(err.errors.len(), 3, "{err}");
        assert!(
            err.errors[0].contains("PVC blog/new is not in backup \"b1\""),
            "{err}"
        );
        assert!(
            err.errors[1].contains("no Completed PodVolumeBackup")
                && err.errors[1].contains("d is Failed"),
            "{err}"
        );
        assert!(err.errors[2].contains("namespace/name"), "{err}");
    }

    #[test]
    fn a_pvc_gone_since_the_backup_is_refused() {
        let (pvbs, mut pvcs) = world();
        pvcs.remove("shop/cache");
        let spec = DataRestoreSpec {
            included_namespaces: vec!["shop".into()],
            ..Default::default()
        };
        let err = select_volumes(&spec, "b1", &pvbs, &pvcs).unwrap_err();
        assert!(
            err.errors[0].contains("PVC shop/cache does not exist now"),
            "{err}"
        );
    }

    #[test]
    fn selecting_nothing_is_an_error() {
        let (pvbs, pvcs) = world();
        assert!(select_volumes(&DataRestoreSpec::default(), "b1", &pvbs, &pvcs).is_err());
        let spec = DataRestoreSpec {
            included_namespaces: vec!["elsewhere".into()],
            ..Default::default()
        };
        let err = select_volumes(&spec, "b1", &pvbs, &pvcs).unwrap_err();
        assert!(err.errors[0].contains("no file-system-backed PVC"), "{err}");
    }
}
