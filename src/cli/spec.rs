//! Turning `restore create` and `schedule create` flags into a DataRestore or a
//! DataRestoreSchedule, checking each on the way.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use crate::api::{
    DataRestore, DataRestoreSchedule, DataRestoreScheduleSpec, DataRestoreSpec, GitOpsSpec,
    PathRestore, RestoreHelperOverrides,
};
use crate::plan::parse_pvc_key;

use super::args::{CreateArgs, RestoreArgs, ScheduleCreateArgs, SourceArgs};
use super::selector;

/// The DataRestore the flags describe, or every mistake found in them.
pub(super) fn build(args: &CreateArgs, namespace: &str) -> Result<DataRestore, Vec<String>> {
    let spec = restore_spec(&args.source, &args.restore)?;
    let mut dr = DataRestore::new(&args.name, spec);
    dr.metadata = metadata(&args.name, namespace);
    Ok(dr)
}

/// The DataRestoreSchedule the flags describe, or every mistake found in the
/// template's flags (the schedule's own are for the controller's checks).
pub(super) fn build_schedule(
    args: &ScheduleCreateArgs,
    namespace: &str,
) -> Result<DataRestoreSchedule, Vec<String>> {
    let spec = DataRestoreScheduleSpec {
        template: restore_spec(&args.source, &args.restore)?,
        velero_schedule: args.follow_schedule.clone(),
        cron: args.cron.clone(),
        paused: args.paused,
        successful_history_limit: args.keep_completed,
        failed_history_limit: args.keep_failed,
    };
    let mut schedule = DataRestoreSchedule::new(&args.name, spec);
    schedule.metadata = metadata(&args.name, namespace);
    Ok(schedule)
}

fn metadata(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectMeta::default()
    }
}

/// A DataRestore's spec from the flags that make one: what `restore create` creates
/// and what a schedule's runs are made from.
pub(super) fn restore_spec(
    source: &SourceArgs,
    args: &RestoreArgs,
) -> Result<DataRestoreSpec, Vec<String>> {
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

    Ok(DataRestoreSpec {
        backup_name: source.from_backup.clone(),
        schedule_name: source.from_schedule.clone(),
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
        method: args.method.map(Into::into).unwrap_or_default(),
        extra_files: args.extra_files.map(Into::into).unwrap_or_default(),
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
    })
}

/// spec.gitOps from the flags; None when none is given, so the spec says only what
/// was asked.
fn git_ops(args: &RestoreArgs) -> Option<GitOpsSpec> {
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
pub(super) fn candidate_nodes(
    entries: &[String],
) -> Result<BTreeMap<String, Vec<String>>, Vec<String>> {
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
    use crate::api::{ConsumerPolicy, ExtraFiles, FailurePolicy, RestoreMethod};
    use crate::cli::args::{ConsumersArg, ExtraFilesArg, FollowArgs, MethodArg, OnFailureArg};

    fn args() -> CreateArgs {
        CreateArgs {
            name: "r1".into(),
            source: SourceArgs {
                from_backup: Some("nightly".into()),
                from_schedule: None,
            },
            restore: RestoreArgs::default(),
            wait: false,
            dry_run: false,
            output: None,
            follow: FollowArgs {
                pickup_timeout: std::time::Duration::from_secs(10),
            },
        }
    }

    fn schedule_args() -> ScheduleCreateArgs {
        ScheduleCreateArgs {
            name: "standby".into(),
            follow_schedule: Some("nightly".into()),
            cron: None,
            paused: false,
            keep_completed: None,
            keep_failed: None,
            source: SourceArgs::default(),
            restore: RestoreArgs {
                pvcs: vec!["shop/data-0".into()],
                ..RestoreArgs::default()
            },
            dry_run: false,
            output: None,
        }
    }

    #[test]
    fn flags_fill_the_spec() {
        let mut a = args();
        let r = &mut a.restore;
        r.pvcs = vec![
            "shop/data-0".into(),
            "shop/data-0".into(),
            "shop/data-1".into(),
        ];
        r.include_namespaces = vec!["a".into(), " b".into(), "".into()];
        r.selector = Some("app=db".into());
        r.candidate_nodes = vec![
            "shop/data-0=node-a,node-b".into(),
            "shop/data-0=node-c".into(),
        ];
        r.method = Some(MethodArg::Staged);
        r.extra_files = Some(ExtraFilesArg::Keep);
        r.consumers = Some(ConsumersArg::Detach);
        r.on_failure = Some(OnFailureArg::KeepStopped);
        r.parallel = Some(2);
        r.timeout = Some("2h".into());
        r.restore_helper_image = Some("velero/velero:v1.17".into());
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
        assert_eq!(spec.method, RestoreMethod::Staged);
        assert_eq!(spec.extra_files, ExtraFiles::Keep);
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
        assert_eq!(spec.method, RestoreMethod::Direct);
        assert_eq!(spec.extra_files, ExtraFiles::Delete);
        assert_eq!(spec.consumers, ConsumerPolicy::ScaleDown);
        assert_eq!(spec.on_failure, FailurePolicy::Resume);
        assert!(spec.restore_helper.is_none());
    }

    #[test]
    fn every_mistake_is_reported() {
        let mut a = args();
        a.restore.pvcs = vec!["no-namespace".into()];
        a.restore.selector = Some("a in (".into());
        a.restore.candidate_nodes = vec!["shop/data-0".into(), "shop/data-1=".into()];
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

    #[test]
    fn schedule_flags_fill_the_schedule_and_its_template() {
        let mut a = schedule_args();
        a.cron = Some("0 3 * * *".into());
        a.paused = true;
        a.keep_completed = Some(5);
        a.keep_failed = Some(1);
        a.restore.consumers = Some(ConsumersArg::Detach);
        a.restore.method = Some(MethodArg::Staged);
        let schedule = build_schedule(&a, "velero").unwrap();
        assert_eq!(schedule.metadata.name.as_deref(), Some("standby"));
        assert_eq!(schedule.metadata.namespace.as_deref(), Some("velero"));
        let spec = schedule.spec;
        assert_eq!(spec.velero_schedule.as_deref(), Some("nightly"));
        assert_eq!(spec.cron.as_deref(), Some("0 3 * * *"));
        assert!(spec.paused);
        assert_eq!(spec.successful_history_limit, Some(5));
        assert_eq!(spec.failed_history_limit, Some(1));
        assert_eq!(spec.template.pvcs, vec!["shop/data-0"]);
        assert_eq!(spec.template.consumers, ConsumerPolicy::Detach);
        assert_eq!(spec.template.method, RestoreMethod::Staged);
        assert!(spec.template.backup_name.is_none() && spec.template.schedule_name.is_none());
        assert!(crate::controller::schedule_spec_errors(&spec).is_empty());
    }

    #[test]
    fn a_schedule_template_is_built_as_a_restore_is() {
        let mut a = schedule_args();
        a.source.from_backup = Some("nightly".into());
        let mut r = args();
        r.restore = a.restore.clone();
        let template = build_schedule(&a, "velero").unwrap().spec.template;
        let restore = build(&r, "velero").unwrap().spec;
        assert_eq!(
            serde_json::to_value(&template).unwrap(),
            serde_json::to_value(&restore).unwrap()
        );
        a.restore.selector = Some("a in (".into());
        let errors = build_schedule(&a, "velero").unwrap_err();
        assert!(errors[0].starts_with("--selector:"), "{errors:?}");
    }
}
