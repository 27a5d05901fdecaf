//! Validation of a DataRestore: read what the plan needs, then decide with
//! [`crate::plan::plan`]. Shared by the controller and `refill restore create --dry-run`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{Backup, DataRestore, PodVolumeBackup, Schedule};
use crate::labels;
use crate::mounts::Mounts;
use crate::observe;
use crate::plan::{self, BackupChoice, Facts, Invalid, Plan, resolve_backup, select_volumes};

pub use crate::plan::{ConsumerAction, Placement, PlannedConsumer, PlannedVolume};

#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// The request itself is wrong; retrying will not help.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// Reading the cluster failed; worth retrying.
    #[error("reading the cluster failed: {0}")]
    Kube(#[from] kube::Error),
}

/// Validates `dr` against the cluster as it is now and returns what would be done.
/// Reads only. `mounts` is the controller's index of mounting pods, if it has one.
pub async fn plan(
    client: &Client,
    mounts: Option<&Mounts>,
    dr: &DataRestore,
) -> Result<Plan, ValidateError> {
    let facts = gather(client, mounts, dr).await?;
    Ok(plan::plan(&dr.spec, &facts)?)
}

async fn gather(
    client: &Client,
    mounts: Option<&Mounts>,
    dr: &DataRestore,
) -> Result<Facts, ValidateError> {
    let namespace = dr.namespace().unwrap_or_else(|| "velero".into());
    let own_uid = dr.uid().unwrap_or_default();
    let backup = find_backup(client, &namespace, dr).await?;
    let backup_name = backup.name_any();

    let selector = format!(
        "{}={}",
        labels::BACKUP_NAME,
        labels::label_value(&backup_name)
    );
    let pvbs: Vec<PodVolumeBackup> = Api::<PodVolumeBackup>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        // A backup deleted and taken again under the same name leaves PVBs of both.
        .filter(
            |p| match (p.labels().get(labels::BACKUP_UID), backup.uid()) {
                (Some(label), Some(uid)) => *label == uid,
                _ => true,
            },
        )
        .collect();

    // Only namespaces the backup holds PVCs of can contribute volumes.
    let mut pvcs = BTreeMap::new();
    let backup_namespaces: BTreeSet<String> = pvbs
        .iter()
        .filter_map(|p| p.spec.pod.namespace.clone())
        .collect();
    for ns in &backup_namespaces {
        let wanted = dr
            .spec
            .pvcs
            .iter()
            .any(|k| k.starts_with(&format!("{ns}/")))
            || dr.spec.included_namespaces.contains(ns)
            || (dr.spec.included_namespaces.is_empty() && dr.spec.selector.is_some());
        if !wanted {
            continue;
        }
        let list = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await?;
        for pvc in list.items {
            pvcs.insert(format!("{ns}/{}", pvc.name_any()), pvc);
        }
    }

    let mut facts = Facts {
        backup: Some(backup),
        pod_volume_backups: pvbs,
        pvcs,
        ..Default::default()
    };
    // Without a valid selection the plan fails anyway; it says why.
    let Ok(selected) = select_volumes(
        &dr.spec,
        &backup_name,
        &facts.pod_volume_backups,
        &facts.pvcs,
    ) else {
        return Ok(facts);
    };

    let mut claims_by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, _) in &selected {
        let pvc = &facts.pvcs[key];
        let spec = pvc.spec.clone().unwrap_or_default();
        if let Some(pv) = spec.volume_name.as_deref()
            && let Some(pv) = Api::<PersistentVolume>::all(client.clone())
                .get_opt(pv)
                .await?
        {
            facts.pvs.insert(pv.name_any(), pv);
        }
        if let Some(class) = spec.storage_class_name.as_deref().filter(|c| !c.is_empty())
            && !facts.storage_classes.contains_key(class)
            && let Some(sc) = Api::<StorageClass>::all(client.clone())
                .get_opt(class)
                .await?
        {
            facts.storage_classes.insert(class.to_string(), sc);
        }
        let (ns, name) = key
            .split_once('/')
            .expect("selected keys are namespace/name");
        claims_by_ns
            .entry(ns.to_string())
            .or_default()
            .push(name.to_string());
    }
    if !dr.spec.candidate_nodes.is_empty() {
        let nodes = Api::<Node>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await?;
        facts.nodes = nodes.items.iter().map(|n| n.name_any()).collect();
    }
    for other in Api::<DataRestore>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await?
    {
        let status = other.status.clone().unwrap_or_default();
        if other.uid().as_deref() == Some(own_uid.as_str()) || status.phase.is_terminal() {
            continue;
        }
        for volume in &status.volumes {
            facts
                .held_by_others
                .insert(volume.pvc.clone(), other.name_any());
        }
    }
    for (ns, claims) in &claims_by_ns {
        let claims: Vec<&str> = claims.iter().map(String::as_str).collect();
        facts
            .consumers
            .extend(observe::consumers(client, mounts, ns, &claims, &own_uid).await?);
    }
    Ok(facts)
}

async fn find_backup(
    client: &Client,
    namespace: &str,
    dr: &DataRestore,
) -> Result<Backup, ValidateError> {
    let choice = BackupChoice::from_spec(&dr.spec)?;
    // A schedule is resolved once; later passes keep the backup recorded in status.
    let recorded = dr.status.as_ref().and_then(|s| s.backup_name.clone());
    let backups: Api<Backup> = Api::namespaced(client.clone(), namespace);
    let backup = match (&choice, recorded.as_ref()) {
        (BackupChoice::Named(name), _) | (BackupChoice::Schedule(_), Some(name)) => {
            let found = backups.get_opt(name).await?;
            let named = BackupChoice::Named(name.clone());
            resolve_backup(&named, namespace, found.as_ref(), false, &[])?
        }
        (BackupChoice::Schedule(schedule), None) => {
            let exists = Api::<Schedule>::namespaced(client.clone(), namespace)
                .get_opt(schedule)
                .await?
                .is_some();
            let selector = format!(
                "{}={}",
                labels::SCHEDULE_NAME,
                labels::label_value(schedule)
            );
            let list = backups
                .list(&ListParams::default().labels(&selector))
                .await?;
            resolve_backup(&choice, namespace, None, exists, &list.items)?
        }
    };
    Ok(backup)
}
