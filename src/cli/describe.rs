//! `refill restore describe NAME [--details]`.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ListParams;

use crate::api::{ConsumerRecord, ConsumerState, DataRestore, VolumePluginRestore, plugin_keys};
use crate::labels;

use super::args::DescribeArgs;
use super::client::Ctx;
use super::errors::{Kind, Result, Target};
use super::format::{self, Table, age, bytes_of, or_dash, when};
use super::get::{backup_of, volumes_done};
use super::{how, output};

/// Events shown without --details.
const RECENT_EVENTS: usize = 20;

pub(super) async fn describe(ctx: &Ctx, args: &DescribeArgs) -> Result<()> {
    let name = &args.name;
    let dr: DataRestore = ctx.get(Kind::DataRestore, name).await?;
    if let Some(format) = args.output {
        print!("{}", output::render(&dr, format)?);
        return Ok(());
    }
    let selector = format!("involvedObject.name={name},involvedObject.kind=DataRestore");
    let mut events = ctx
        .api::<Event>()
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|e| ctx.error(&e, Target::all(Kind::Event, &ctx.namespace)))?
        .items;
    // Events of an earlier DataRestore of the same name are not this one's.
    if let Some(uid) = dr.uid() {
        events.retain(|e| e.involved_object.uid.as_deref().is_none_or(|u| u == uid));
    }
    // Each volume's record, with the consumers that come back through it, is kept in
    // its VolumePluginRestore.
    let uid = dr.uid().unwrap_or_default();
    let selector = format!("{}={uid}", labels::DATA_RESTORE_UID);
    let plugin_restores = ctx
        .api::<VolumePluginRestore>()
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| ctx.error(&e, Target::all(Kind::VolumePluginRestore, &ctx.namespace)))?
        .items;
    let mut dr = dr;
    if let Some(status) = dr.status.as_mut() {
        let records = plugin_restores
            .iter()
            .filter_map(|p| p.status.as_ref()?.record.clone())
            .collect();
        crate::controller::ledger::assemble(records).put(status);
    }
    let plugin_restores = args.details.then_some(plugin_restores);
    print!(
        "{}",
        render(&dr, &events, plugin_restores.as_deref(), Timestamp::now())
    );
    Ok(())
}

fn event_time(e: &Event) -> Option<Time> {
    e.last_timestamp
        .clone()
        .or_else(|| e.event_time.as_ref().map(|t| Time(t.0)))
        .or_else(|| e.first_timestamp.clone())
        .or_else(|| e.metadata.creation_timestamp.clone())
}

/// The whole description; `plugin_restores` is given with --details.
pub(super) fn render(
    dr: &DataRestore,
    events: &[Event],
    plugin_restores: Option<&[VolumePluginRestore]>,
    now: Timestamp,
) -> String {
    let details = plugin_restores.is_some();
    let status = dr.status.clone().unwrap_or_default();
    let mut head = Vec::new();
    let mut field = |k: &'static str, v: String| head.push((k, v));
    field("Name", dr.name_any());
    field("Namespace", dr.namespace().unwrap_or_default());
    let mut backup = backup_of(dr);
    if let (Some(schedule), Some(_)) = (&dr.spec.schedule_name, &status.backup_name) {
        backup += &format!(" (newest of schedule {schedule})");
    }
    field("Backup", backup);
    field(
        "Phase",
        match &dr.status {
            Some(s) => format!("{:?}", s.phase),
            None => {
                "- (no controller has picked it up yet; is `refill controller` running for this namespace?)".into()
            }
        },
    );
    field("Volumes", format!("{} completed", volumes_done(dr)));
    field(
        "Consumers",
        format!(
            "{:?}, on failure {:?}",
            dr.spec.consumers, dr.spec.on_failure
        ),
    );
    field("Method", how::method(&dr.spec));
    field("Extra files", how::extra_files(&dr.spec));
    field(
        "Created",
        when(dr.metadata.creation_timestamp.as_ref(), now),
    );
    field("Started", when(status.start_time.as_ref(), now));
    field("Completed", when(status.completion_time.as_ref(), now));
    if dr.metadata.deletion_timestamp.is_some() {
        field(
            "Deleting",
            "yes: the controller is rolling back before it goes".into(),
        );
    }
    let mut out = format::fields(head);

    out += "\nVolumes:\n";
    if status.volumes.is_empty() {
        out += "  none yet\n";
    } else {
        let mut table = Table::new(&[
            "PVC",
            "PHASE",
            "NODE",
            "STAND-IN POD",
            "POD VOLUME RESTORE",
            "BYTES",
            "MESSAGE",
        ]);
        for v in &status.volumes {
            table.row(vec![
                v.pvc.clone(),
                format!("{:?}", v.phase),
                or_dash(v.node.as_deref()),
                or_dash(v.stand_in_pod.as_deref()),
                or_dash(v.pod_volume_restore.as_deref()),
                bytes_of(v.bytes_done, v.total_bytes),
                or_dash(v.message.as_deref()),
            ]);
        }
        out += &table.render("  ");
    }

    if !status.consumers.is_empty() {
        out += "\nConsumers stopped:\n";
        let mut table = Table::new(&["KIND", "NAME", "REPLICAS", "STATE", "PVCS", "DOWN"]);
        for c in &status.consumers {
            table.row(vec![
                format!("{:?}", c.kind),
                format!("{}/{}", c.namespace, c.name),
                c.replicas
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
                match (&c.switch_to, c.state) {
                    (Some(to), crate::api::ConsumerState::Switched) => format!("Switched to {to}"),
                    (Some(to), state) => format!("{state:?} (to switch to {to})"),
                    (None, state) => format!("{state:?}"),
                },
                c.pvcs.join(", "),
                downtime(c, now),
            ]);
        }
        out += &table.render("  ");
    }

    if !status.git_ops.is_empty() {
        out += &format!(
            "\nGitOps objects (policy {:?}):\n",
            dr.spec.git_ops().policy
        );
        out += &format::gitops_table(&status.git_ops);
    }

    for (title, items) in [("Errors", &status.errors), ("Warnings", &status.warnings)] {
        if !items.is_empty() {
            out += &format!("\n{title}:\n");
            for item in items {
                out += &format!("  - {item}\n");
            }
        }
    }

    if details {
        out += "\nSpec:\n";
        let spec = yaml_serde::to_string(&dr.spec).unwrap_or_default();
        for line in spec.lines() {
            out += &format!("  {line}\n");
        }
        out += "\nConditions:\n";
        out += &format::conditions_table(&status.conditions, now);
        out += "\nVolume plugin restores:\n";
        match plugin_restores {
            Some(list) if !list.is_empty() => {
                let mut table = Table::new(&[
                    "NAME", "PVC", "PHASE", "BYTES", "SNAPSHOT", "NODE", "MESSAGE",
                ]);
                for vpr in list {
                    let s = vpr.status.clone().unwrap_or_default();
                    let progress = s.progress.clone().unwrap_or_default();
                    table.row(vec![
                        vpr.name_any(),
                        or_dash(
                            s.volume_id
                                .as_deref()
                                .or(s.plugin_specific.get(plugin_keys::PVC).map(String::as_str)),
                        ),
                        or_dash(s.phase.as_deref()),
                        bytes_of(progress.bytes_done, progress.total_bytes),
                        or_dash(Some(&vpr.spec.snapshot_id)),
                        or_dash(s.plugin_specific.get(plugin_keys::NODE).map(String::as_str)),
                        or_dash(s.message.as_deref()),
                    ]);
                }
                out += &table.render("  ");
            }
            _ => out += "  none\n",
        }
    }

    out += "\nEvents:\n";
    if events.is_empty() {
        out += "  none\n";
    } else {
        let mut sorted: Vec<&Event> = events.iter().collect();
        sorted.sort_by_key(|e| event_time(e).map(|t| t.0));
        let skip = if details {
            0
        } else {
            sorted.len().saturating_sub(RECENT_EVENTS)
        };
        let mut table = Table::new(&["AGE", "TYPE", "REASON", "MESSAGE"]);
        for e in &sorted[skip..] {
            let mut message = e.message.clone().unwrap_or_default();
            if let Some(count) = e.count.filter(|c| *c > 1) {
                message += &format!(" (x{count})");
            }
            table.row(vec![
                age(event_time(e).as_ref(), now),
                or_dash(e.type_.as_deref()),
                or_dash(e.reason.as_deref()),
                message,
            ]);
        }
        if skip > 0 {
            out += &format!("  ({skip} older events left out; --details shows all)\n");
        }
        out += &table.render("  ");
    }
    out
}

/// How long the app was down: stop to resume, or so far while it is stopped.
fn downtime(consumer: &ConsumerRecord, now: Timestamp) -> String {
    match (&consumer.stopped_at, &consumer.resumed_at) {
        (Some(_), Some(_)) => {
            format::between(consumer.stopped_at.as_ref(), consumer.resumed_at.as_ref())
                .unwrap_or_else(|| "-".into())
        }
        (Some(_), None) if consumer.state == ConsumerState::Stopped => {
            format!("{} so far", format::age(consumer.stopped_at.as_ref(), now))
        }
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ConsumerKind, ConsumerRecord, ConsumerState, DataRestoreSpec, DataRestoreStatus, Phase,
        VolumePhase, VolumeStatus,
    };
    use crate::cli::format::at;

    fn sample() -> DataRestore {
        let mut dr = DataRestore::new(
            "fix-db",
            DataRestoreSpec {
                backup_name: Some("nightly".into()),
                ..DataRestoreSpec::default()
            },
        );
        dr.metadata.namespace = Some("velero".into());
        dr.metadata.creation_timestamp = Some(at("2026-01-01T11:00:00Z"));
        dr.status = Some(DataRestoreStatus {
            phase: Phase::Restoring,
            backup_name: Some("nightly".into()),
            start_time: Some(at("2026-01-01T11:00:00Z")),
            volumes: vec![VolumeStatus {
                pvc: "shop/data-db-0".into(),
                phase: VolumePhase::Restoring,
                node: Some("node-a".into()),
                stand_in_pod: Some("refill-data-db-0-abc".into()),
                pod_volume_restore: Some("fix-db-1234".into()),
                bytes_done: 512,
                total_bytes: 2048,
                ..VolumeStatus::default()
            }],
            consumers: vec![ConsumerRecord {
                kind: ConsumerKind::StatefulSet,
                namespace: "shop".into(),
                name: "db".into(),
                pvcs: vec!["shop/data-db-0".into()],
                state: ConsumerState::Stopped,
                replicas: Some(3),
                original: None,
                held_by: None,
                switch_to: None,
                stopped_at: Some(at("2026-01-01T11:01:00Z")),
                resumed_at: None,
                uid: None,
            }],
            warnings: vec!["careful".into()],
            ..DataRestoreStatus::default()
        });
        dr
    }

    #[test]
    fn describe_shows_volumes_consumers_warnings_and_events() {
        let now: Timestamp = "2026-01-01T11:05:00Z".parse().unwrap();
        let event = Event {
            reason: Some("Quiesced".into()),
            message: Some("scaled StatefulSet shop/db from 3 to 0".into()),
            type_: Some("Normal".into()),
            last_timestamp: Some(at("2026-01-01T11:01:00Z")),
            count: Some(2),
            ..Event::default()
        };
        let text = render(&sample(), &[event], None, now);
        assert!(text.starts_with("Name:          fix-db\nNamespace:     velero\nBackup:        nightly\nPhase:         Restoring\n"), "{text}");
        assert!(
            text.contains("Started:       5m ago (2026-01-01T11:00:00Z)"),
            "{text}"
        );
        assert!(text.contains("shop/data-db-0   Restoring   node-a   refill-data-db-0-abc   fix-db-1234          512 B/2.0 KiB   -"), "{text}");
        assert!(
            text.contains(
                "StatefulSet   shop/db   3          Stopped   shop/data-db-0   4m so far"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "Consumers:     ScaleDown, on failure Resume\n\
                 Method:        Direct — the app stops, then the node agent writes the backup into each PVC: it is down for the whole restore\n\
                 Extra files:   deleted (each volume will hold exactly the backup)\n"
            ),
            "{text}"
        );
        assert!(text.contains("Warnings:\n  - careful\n"), "{text}");
        assert!(
            text.contains("4m    Normal   Quiesced   scaled StatefulSet shop/db from 3 to 0 (x2)"),
            "{text}"
        );
        assert!(!text.contains("Volume plugin restores"), "{text}");
    }

    #[test]
    fn describe_says_which_method_and_what_becomes_of_extra_files() {
        let mut dr = sample();
        dr.spec.method = crate::api::RestoreMethod::Staged;
        dr.spec.extra_files = crate::api::ExtraFiles::Keep;
        let text = render(&dr, &[], None, "2026-01-01T11:05:00Z".parse().unwrap());
        assert!(
            text.contains("\nMethod:        Staged — the node agent fills a scratch claim beside each PVC while the app runs")
                && text.contains("\nExtra files:   kept (the backup is merged over what is there)\n"),
            "{text}"
        );
    }

    #[test]
    fn a_resumed_consumer_shows_how_long_it_was_down() {
        let now: Timestamp = "2026-01-01T11:05:00Z".parse().unwrap();
        let mut consumer = sample().status.unwrap().consumers.remove(0);
        consumer.state = ConsumerState::Resumed;
        consumer.resumed_at = Some(at("2026-01-01T11:01:40Z"));
        assert_eq!(downtime(&consumer, now), "40s");
        consumer.stopped_at = None;
        assert_eq!(downtime(&consumer, now), "-");
    }

    #[test]
    fn details_add_spec_conditions_and_plugin_restores() {
        let now: Timestamp = "2026-01-01T11:05:00Z".parse().unwrap();
        let text = render(&sample(), &[], Some(&[]), now);
        assert!(text.contains("Spec:\n  backupName: nightly\n"), "{text}");
        assert!(text.contains("Conditions:\n  none\n"), "{text}");
        assert!(text.contains("Volume plugin restores:\n  none\n"), "{text}");
        assert!(text.contains("Events:\n  none\n"), "{text}");
    }

    #[test]
    fn a_restore_without_status_says_no_controller_has_it() {
        let mut dr = sample();
        dr.status = None;
        let text = render(&dr, &[], None, "2026-01-01T11:05:00Z".parse().unwrap());
        assert!(
            text.contains("Phase:         - (no controller has picked it up yet"),
            "{text}"
        );
        assert!(text.contains("Volumes:\n  none yet\n"), "{text}");
    }
}
