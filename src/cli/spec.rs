//! Turning `restore create` flags into a DataRestore, checking each on the way.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use crate::api::{DataRestore, DataRestoreSpec, GitOpsSpec, PathRestore, RestoreHelperOverrides};
use crate::plan::parse_pvc_key;

use super::args::CreateArgs;
use super::selector;

/// The DataRestore the flags describe, or every mistake found in them.
pub fn build(args: &CreateArgs, namespace: &str) -> Result<DataRestore, Vec<String>> {
    let mut errors = Vec::new();

    for pvc in &args.pvcs {
        if let Err(e) = parse_pvc_key(pvc) {
            errors.push(format!("--pvc {e}"));
        }
    }
    let selector = match args.selector.as_deref().map(selector::parse) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            errors.push(format!("--selector: {e}"));
            None
        }
        None => None,
    };
    let candidate_nodes = match candidate_nodes(&args.candidate_nodes) {
        Ok(map) => map,
        Err(mut e) => {
            errors.append(&mut e);
            BTreeMap::new()
        }
    };
    let included_namespaces: Vec<String> = args
        .include_namespaces
        .iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }

    let spec = DataRestoreSpec {
        backup_name: args.from_backup.clone(),
        schedule_name: args.from_schedule.clone(),
        included_namespaces,
        pvcs: dedup(&args.pvcs),
        selector,
        candidate_nodes,
        target: args.target.map(Into::into).unwrap_or_default(),
        switch_workloads: args.switch_workloads,
        paths: (!args.paths.is_empty()).then(|| PathRestore {
            include: dedup(&args.paths),
            exclude: dedup(&args.exclude),
            mirror: args.mirror,
        }),
        pvc_paths: BTreeMap::new(),
        consumers: args.consumers.map(Into::into).unwrap_or_default(),
        acknowledge_running_consumers: args.acknowledge_running_consumers,
        on_failure: args.on_failure.map(Into::into).unwrap_or_default(),
        git_ops: git_ops(args),
        volume_timeout: args.volume_timeout.clone(),
        timeout: args.timeout.clone(),
        parallel: args.parallel,
        restore_helper: args
            .restore_helper_image
            .clone()
            .map(|image| RestoreHelperOverrides {
                image: Some(image),
                ..RestoreHelperOverrides::default()
            }),
        stand_in_image: args.stand_in_image.clone(),
        cancel: false,
    };
    let mut dr = DataRestore::new(&args.name, spec);
    dr.metadata = ObjectMeta {
        name: Some(args.name.clone()),
        namespace: Some(namespace.to_string()),
        ..ObjectMeta::default()
    };
    Ok(dr)
}

/// spec.gitOps from the flags; None when none is given, so the spec says only what
/// was asked.
fn git_ops(args: &CreateArgs) -> Option<GitOpsSpec> {
    if args.gitops.is_none()
        && args.argocd_namespace.is_none()
        && args.argocd_instance_label.is_none()
    {
        return None;
    }
    Some(GitOpsSpec {
        policy: args.gitops.map(Into::into).unwrap_or_default(),
        argo_cd_namespace: args.argocd_namespace.clone(),
        argo_cd_instance_label: args.argocd_instance_label.clone(),
    })
}

/// `ns/pvc=node1,node2` entries, merged per PVC.
pub fn candidate_nodes(entries: &[String]) -> Result<BTreeMap<String, Vec<String>>, Vec<String>> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for entry in entries {
        let Some((pvc, nodes)) = entry.split_once('=') else {
            errors.push(format!(
                "--candidate-nodes \"{entry}\": write it as namespace/pvc=node1,node2"
            ));
            continue;
        };
        let pvc = pvc.trim();
        if let Err(e) = parse_pvc_key(pvc) {
            errors.push(format!("--candidate-nodes {e}"));
            continue;
        }
        let nodes: Vec<String> = nodes
            .split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if nodes.is_empty() {
            errors.push(format!(
                "--candidate-nodes \"{entry}\" names no node; write it as namespace/pvc=node1,node2"
            ));
            continue;
        }
        let known = map.entry(pvc.to_string()).or_default();
        for node in nodes {
            if !known.contains(&node) {
                known.push(node);
            }
        }
    }
    if errors.is_empty() {
        Ok(map)
    } else {
        Err(errors)
    }
}

fn dedup(items: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerPolicy, FailurePolicy};
    use crate::cli::args::{ConsumersArg, FollowArgs, OnFailureArg};

    fn args() -> CreateArgs {
        CreateArgs {
            name: "r1".into(),
            from_backup: Some("nightly".into()),
            from_schedule: None,
            include_namespaces: vec![],
            pvcs: vec![],
            selector: None,
            candidate_nodes: vec![],
            target: None,
            switch_workloads: false,
            paths: vec![],
            exclude: vec![],
            gitops: None,
            argocd_namespace: None,
            argocd_instance_label: None,
            mirror: false,
            consumers: None,
            acknowledge_running_consumers: false,
            on_failure: None,
            parallel: None,
            timeout: None,
            volume_timeout: None,
            restore_helper_image: None,
            stand_in_image: None,
            wait: false,
            dry_run: false,
            output: None,
            follow: FollowArgs {
                pickup_timeout: std::time::Duration::from_secs(10),
            },
        }
    }

    #[test]
    fn flags_fill_the_spec() {
        let mut a = args();
        a.pvcs = vec![
            "shop/data-0".into(),
            "shop/data-0".into(),
            "shop/data-1".into(),
        ];
        a.include_namespaces = vec!["a".into(), " b".into(), "".into()];
        a.selector = Some("app=db".into());
        a.candidate_nodes = vec![
            "shop/data-0=node-a,node-b".into(),
            "shop/data-0=node-c".into(),
        ];
        a.consumers = Some(ConsumersArg::Detach);
        a.on_failure = Some(OnFailureArg::KeepStopped);
        a.parallel = Some(2);
        a.timeout = Some("2h".into());
        a.restore_helper_image = Some("velero/velero:v1.17".into());
        let dr = build(&a, "velero").unwrap();
        assert_eq!(dr.metadata.name.as_deref(), Some("r1"));
        assert_eq!(dr.metadata.namespace.as_deref(), Some("velero"));
        let spec = dr.spec;
        assert_eq!(spec.backup_name.as_deref(), Some("nightly"));
        assert_eq!(spec.pvcs, vec!["shop/data-0", "shop/data-1"]);
        assert_eq!(spec.included_namespaces, vec!["a", "b"]);
        assert_eq!(spec.selector.unwrap().match_labels.unwrap()["app"], "db");
        assert_eq!(
            spec.candidate_nodes["shop/data-0"],
            vec!["node-a", "node-b", "node-c"]
        );
        assert_eq!(spec.consumers, ConsumerPolicy::Detach);
        assert_eq!(spec.on_failure, FailurePolicy::KeepStopped);
        assert_eq!(spec.parallel, Some(2));
        assert_eq!(spec.timeout.as_deref(), Some("2h"));
        assert_eq!(
            spec.restore_helper.unwrap().image.as_deref(),
            Some("velero/velero:v1.17")
        );
    }

    #[test]
    fn defaults_leave_the_policies_at_the_api_defaults() {
        let spec = build(&args(), "velero").unwrap().spec;
        assert_eq!(spec.consumers, ConsumerPolicy::ScaleDown);
        assert_eq!(spec.on_failure, FailurePolicy::Resume);
        assert!(spec.restore_helper.is_none());
    }

    #[test]
    fn every_mistake_is_reported() {
        let mut a = args();
        a.pvcs = vec!["no-namespace".into()];
        a.selector = Some("a in (".into());
        a.candidate_nodes = vec!["shop/data-0".into(), "shop/data-1=".into()];
        let errors = build(&a, "velero").unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:#?}");
        assert!(
            errors[0].starts_with("--pvc \"no-namespace\""),
            "{}",
            errors[0]
        );
        assert!(errors[1].starts_with("--selector:"), "{}", errors[1]);
        assert!(
            errors[2].contains("namespace/pvc=node1,node2"),
            "{}",
            errors[2]
        );
        assert!(errors[3].contains("names no node"), "{}", errors[3]);
    }
}
