//! `refill restore create --dry-run`: the controller's validation, run here, printed.

use kube::ResourceExt;

use crate::api::DataRestore;
use crate::observe::reads::Reads;
use crate::plan::{Placement, Plan};
use crate::validate::{self, ValidateError};

use super::args::OutputFormat;
use super::client::{Ctx, Namespaced};
use super::create::refused;
use super::errors::{Kind, Result, Target, already_exists, is_missing_object};
use super::format::{self, Table, bytes, gitops_table, or_dash};
use super::{how, output};

pub(super) async fn run(ctx: &Ctx, dr: &DataRestore, format: Option<OutputFormat>) -> Result<()> {
    name_is_free::<DataRestore>(ctx, Kind::DataRestore, &dr.name_any()).await?;
    let plan = validate::plan(Reads::api(&ctx.client), dr)
        .await
        .map_err(|e| match e {
            ValidateError::Invalid(invalid) => refused(dr, &invalid.errors),
            ValidateError::Kube(k) => ctx.error(&k, Target::all(Kind::Object, &ctx.namespace)),
        })?;
    match format {
        Some(format) => {
            print!("{}", output::render(dr, format)?);
            for warning in &plan.warnings {
                eprintln!("warning: {warning}");
            }
        }
        None => print!("{}", render(dr, &plan)),
    }
    Ok(())
}

/// A dry run of a create whose name is taken fails as the create would.
pub(super) async fn name_is_free<K: Namespaced>(ctx: &Ctx, kind: Kind, name: &str) -> Result<()> {
    let target = Target::one(kind, name, &ctx.namespace);
    match ctx.api::<K>().get(name).await {
        Ok(_) => Err(already_exists(target)),
        Err(e) if is_missing_object(&e) => Ok(()),
        Err(e) => Err(ctx.error(&e, target)),
    }
}

/// Where the stand-in pod may run, in words.
fn placement(p: &Placement) -> String {
    match p {
        Placement::Anywhere => "any node".into(),
        Placement::BoundTo { pv, nodes } if nodes.is_empty() => format!("wherever PV {pv} is"),
        Placement::BoundTo { pv, nodes } => format!("{} (PV {pv})", nodes.join(", ")),
        Placement::Candidates(nodes) => format!("{} (candidates)", nodes.join(", ")),
        Placement::BesideConsumers(nodes) => {
            format!("{} (where its consumers run)", nodes.join(", "))
        }
        Placement::BesideOriginal(nodes) => {
            format!("{} (where the PVC's volume is)", nodes.join(", "))
        }
    }
}

/// The plan as the person reads it: volumes, consumers, warnings.
pub(super) fn render(dr: &DataRestore, plan: &Plan) -> String {
    let name = dr.name_any();
    let total: i64 = plan.volumes.iter().map(|v| v.total_bytes).sum();
    let mut out = format!(
        "Dry run: nothing was changed. Restore \"{name}\" would put back {} volume(s), {}, from backup \"{}\".\n",
        plan.volumes.len(),
        bytes(total),
        plan.backup_name
    );
    out += &format::fields(vec![
        ("Method", how::method(&dr.spec)),
        ("Extra files", how::extra_files(&dr.spec)),
    ]);

    out += "\nVolumes:\n";
    let mut table = Table::new(&[
        "PVC",
        "SNAPSHOT",
        "SIZE",
        "UPLOADER",
        "FROM",
        "STAND-IN POD RUNS ON",
    ]);
    for v in &plan.volumes {
        table.row(vec![
            v.pvc.clone(),
            or_dash(Some(&v.snapshot_id)),
            bytes(v.total_bytes),
            or_dash(v.uploader_type.as_deref()),
            v.pod_volume_backup.clone(),
            placement(&v.placement),
        ]);
    }
    out += &table.render("  ");
    if dr.spec.target == crate::api::RestoreTarget::NewClaim {
        out += "\nInto new PVCs, kept after the restore (the PVCs above are not touched):\n";
        for v in &plan.volumes {
            let (ns, claim) = v.pvc.split_once('/').unwrap_or(("", &v.pvc));
            let new = crate::labels::new_claim_name(claim, &name);
            out += &format!("  {} → {ns}/{new}\n", v.pvc);
        }
    }

    let with_paths: Vec<_> = plan
        .volumes
        .iter()
        .filter_map(|v| dr.spec.paths_for(&v.pvc).map(|p| (&v.pvc, p)))
        .collect();
    if !with_paths.is_empty() {
        out += "\nOnly these paths go back (the node agent fills a scratch claim with the snapshot, refill copies them from it):\n";
        for (pvc, paths) in with_paths {
            out += &format!("  {pvc}: {}", paths.include.join(", "));
            if !paths.exclude.is_empty() {
                out += &format!(" except {}", paths.exclude.join(", "));
            }
            if paths.mirror {
                out += "; what the backup lacks under them is deleted";
            }
            out += "\n";
        }
        out += "  which files they match is known only once the snapshot is restored: the snapshot's file list is in Velero's repository, which refill does not read; the restore's status reports what was copied\n";
    }

    out += &format!("\nConsumers (policy {:?}):\n", dr.spec.consumers);
    if dr.spec.target == crate::api::RestoreTarget::NewClaim && plan.consumers.is_empty() {
        out += "  none stopped: nothing they read is written\n";
    } else if dr.spec.target == crate::api::RestoreTarget::NewClaim {
        out +=
            "  none stopped while the new claims are filled; then these are switched onto them:\n";
        out += &consumer_table(plan);
    } else if dr.spec.consumers == crate::api::ConsumerPolicy::None {
        out += "  none stopped: whatever mounts these PVCs keeps running during the restore\n";
    } else if plan.consumers.is_empty() {
        out += "  none: nothing mounts these PVCs now\n";
    } else {
        out += &consumer_table(plan);
    }

    if !plan.git_ops.is_empty() {
        out += &format!(
            "\nGitOps objects managing them (policy {:?}):\n",
            dr.spec.git_ops().policy
        );
        out += &gitops_table(&plan.git_ops);
    }

    if !plan.warnings.is_empty() {
        out += "\nWarnings:\n";
        for w in &plan.warnings {
            out += &format!("  - {w}\n");
        }
    }
    out += "\nRun the same command without --dry-run to start it.\n";
    out
}

/// The consumers of the plan and what is done to each.
fn consumer_table(plan: &Plan) -> String {
    let mut table = Table::new(&["KIND", "NAME", "REPLICAS", "ACTION", "PVCS"]);
    for c in &plan.consumers {
        let action = match (c.replicas, &c.switch_to) {
            (Some(r), Some(to)) => format!("scale {r} → 0, back to {r} on PVC {to}"),
            (Some(r), None) if c.action == crate::plan::ConsumerAction::ScaleToZero => {
                format!("scale {r} → 0, back to {r} afterwards")
            }
            _ => c.action.to_string(),
        };
        table.row(vec![
            format!("{:?}", c.kind),
            format!("{}/{}", c.namespace, c.name),
            c.replicas
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
            action,
            c.pvcs.join(", "),
        ]);
    }
    table.render("  ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, DataRestoreSpec};
    use crate::plan::{ConsumerAction, PlannedConsumer, PlannedVolume};

    #[test]
    fn the_plan_names_volumes_consumers_and_placement() {
        let dr = DataRestore::new("r1", DataRestoreSpec::default());
        let plan = Plan {
            backup_name: "nightly".into(),
            volumes: vec![PlannedVolume {
                pvc: "shop/data-db-0".into(),
                pvc_uid: None,
                pod_volume_backup: "nightly-x7k2p".into(),
                volume: "data".into(),
                snapshot_id: "3f2a9c".into(),
                total_bytes: 1_258_291,
                uploader_type: Some("kopia".into()),
                placement: Placement::BoundTo {
                    pv: "pv-1".into(),
                    nodes: vec!["node-a".into()],
                },
            }],
            consumers: vec![PlannedConsumer {
                kind: ConsumerKind::StatefulSet,
                namespace: "shop".into(),
                name: "db".into(),
                replicas: Some(3),
                pvcs: vec!["shop/data-db-0".into()],
                action: ConsumerAction::ScaleToZero,
                switch_to: None,
                managed_by: vec![],
            }],
            git_ops: vec![],
            warnings: vec!["something to know".into()],
        };
        let text = render(&dr, &plan);
        assert!(text.starts_with("Dry run: nothing was changed. Restore \"r1\" would put back 1 volume(s), 1.2 MiB, from backup \"nightly\".\n\
            Method:        Direct — the app stops, then the node agent writes the backup into each PVC: it is down for the whole restore\n\
            Extra files:   deleted (each volume will hold exactly the backup)\n\
            \nVolumes:\n"), "{text}");
        assert!(
            text.contains(
                "shop/data-db-0   3f2a9c     1.2 MiB   kopia      nightly-x7k2p   node-a (PV pv-1)"
            ),
            "{text}"
        );
        assert!(text.contains("StatefulSet   shop/db   3          scale 3 → 0, back to 3 afterwards   shop/data-db-0"), "{text}");
        assert!(text.contains("  - something to know"), "{text}");
    }

    #[test]
    fn a_switch_names_the_new_claim_each_workload_comes_back_on() {
        let spec = DataRestoreSpec {
            target: crate::api::RestoreTarget::NewClaim,
            switch_workloads: true,
            ..Default::default()
        };
        let dr = DataRestore::new("r1", spec);
        let plan = Plan {
            backup_name: "nightly".into(),
            volumes: vec![],
            consumers: vec![PlannedConsumer {
                kind: ConsumerKind::Deployment,
                namespace: "shop".into(),
                name: "web".into(),
                replicas: Some(2),
                pvcs: vec!["shop/data".into()],
                action: ConsumerAction::ScaleToZero,
                switch_to: Some("data-r1-0123456789".into()),
                managed_by: vec![],
            }],
            git_ops: vec![],
            warnings: vec![],
        };
        let text = render(&dr, &plan);
        assert!(
            text.contains(
                "none stopped while the new claims are filled; then these are switched onto them:"
            ),
            "{text}"
        );
        assert!(
            text.contains("Deployment   shop/web   2          scale 2 → 0, back to 2 on PVC data-r1-0123456789   shop/data"),
            "{text}"
        );
    }

    #[test]
    fn placements_read_as_words() {
        assert_eq!(placement(&Placement::Anywhere), "any node");
        assert_eq!(
            placement(&Placement::Candidates(vec!["a".into(), "b".into()])),
            "a, b (candidates)"
        );
        assert_eq!(
            placement(&Placement::BoundTo {
                pv: "pv".into(),
                nodes: vec![]
            }),
            "wherever PV pv is"
        );
    }
}
