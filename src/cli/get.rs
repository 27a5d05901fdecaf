//! `refill restore get [NAME]`.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ListParams;

use crate::api::{DataRestore, VolumePhase};

use super::args::{GetArgs, OutputFormat};
use super::client::{Ctx, Namespaced};
use super::errors::{Kind, Result, Target};
use super::format::{Table, age};
use super::output;

pub(super) async fn get(ctx: &Ctx, args: &GetArgs) -> Result<()> {
    show(
        ctx,
        Kind::DataRestore,
        args.name.as_deref(),
        args.output,
        table,
    )
    .await
}

/// `get [NAME]` of a kind in Velero's namespace: one object or all of them, newest
/// first, as `table` renders them or as YAML/JSON.
pub(super) async fn show<K: Namespaced + serde::Serialize>(
    ctx: &Ctx,
    kind: Kind,
    name: Option<&str>,
    format: Option<OutputFormat>,
    table: fn(&[K], Timestamp) -> String,
) -> Result<()> {
    let api = ctx.api::<K>();
    let items = match name {
        Some(name) => {
            let object: K = ctx.get(kind, name).await?;
            if let Some(format) = format {
                print!("{}", output::render(&object, format)?);
                return Ok(());
            }
            vec![object]
        }
        None => {
            let target = Target::all(kind, &ctx.namespace);
            let mut items = api
                .list(&ListParams::default())
                .await
                .map_err(|e| ctx.error(&e, target))?
                .items;
            newest_first(&mut items);
            if let Some(format) = format {
                print!("{}", output::render(&output::list(&items), format)?);
                return Ok(());
            }
            items
        }
    };
    if items.is_empty() {
        eprintln!(
            "No {}s found in namespace \"{}\".",
            kind.noun(),
            ctx.namespace
        );
    } else {
        print!("{}", table(&items, Timestamp::now()));
    }
    Ok(())
}

/// Newest first, then by name.
pub(super) fn newest_first<K: kube::Resource>(items: &mut [K]) {
    items.sort_by(|a, b| {
        let time = |k: &K| k.meta().creation_timestamp.clone().map(|t| t.0);
        time(b)
            .cmp(&time(a))
            .then_with(|| a.meta().name.cmp(&b.meta().name))
    });
}

/// The backup a restore uses: as resolved, else as asked for.
pub(super) fn backup_of(dr: &DataRestore) -> String {
    let resolved = dr.status.as_ref().and_then(|s| s.backup_name.clone());
    match (resolved, &dr.spec.backup_name, &dr.spec.schedule_name) {
        (Some(b), _, _) => b,
        (None, Some(b), _) => b.clone(),
        (None, None, Some(s)) => format!("(schedule {s})"),
        (None, None, None) => "-".into(),
    }
}

/// `done/total` volumes, or `-` before the volumes are known.
pub(super) fn volumes_done(dr: &DataRestore) -> String {
    match dr.status.as_ref().and_then(|s| s.volume_counts.as_ref()) {
        Some(counts) if counts.total > 0 => {
            let done = counts.phases.get(&VolumePhase::Completed).unwrap_or(&0);
            format!("{done}/{}", counts.total)
        }
        _ => "-".into(),
    }
}

pub(super) fn table(items: &[DataRestore], now: Timestamp) -> String {
    let mut table = Table::new(&[
        "NAME",
        "BACKUP",
        "PHASE",
        "VOLUMES",
        "STARTED",
        "COMPLETED",
        "AGE",
    ]);
    for dr in items {
        let status = dr.status.clone().unwrap_or_default();
        table.row(vec![
            dr.name_any(),
            backup_of(dr),
            match &dr.status {
                Some(s) => format!("{:?}", s.phase),
                None => "-".into(),
            },
            volumes_done(dr),
            age(status.start_time.as_ref(), now),
            age(status.completion_time.as_ref(), now),
            age(dr.metadata.creation_timestamp.as_ref(), now),
        ]);
    }
    table.render("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataRestoreSpec, DataRestoreStatus, Phase, VolumeStatus};
    use crate::cli::format::at;

    #[test]
    fn table_shows_backup_phase_and_volume_counts() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let mut done = DataRestore::new(
            "fix-db",
            DataRestoreSpec {
                schedule_name: Some("nightly".into()),
                ..DataRestoreSpec::default()
            },
        );
        done.metadata.creation_timestamp = Some(at("2026-01-01T11:00:00Z"));
        done.status = Some(DataRestoreStatus {
            phase: Phase::Completed,
            backup_name: Some("nightly-20260101".into()),
            start_time: Some(at("2026-01-01T11:00:01Z")),
            completion_time: Some(at("2026-01-01T11:55:00Z")),
            volumes: vec![
                VolumeStatus {
                    pvc: "a/b".into(),
                    phase: VolumePhase::Completed,
                    ..VolumeStatus::default()
                };
                2
            ],
            ..DataRestoreStatus::default()
        });
        done.status.as_mut().unwrap().tally(|v| v.pvc.clone());
        let mut fresh = DataRestore::new(
            "new-one",
            DataRestoreSpec {
                schedule_name: Some("nightly".into()),
                ..DataRestoreSpec::default()
            },
        );
        fresh.metadata.creation_timestamp = Some(at("2026-01-01T11:59:50Z"));
        let mut items = vec![done, fresh];
        newest_first(&mut items);
        assert_eq!(
            table(&items, now),
            "NAME      BACKUP               PHASE       VOLUMES   STARTED   COMPLETED   AGE\n\
             new-one   (schedule nightly)   -           -         -         -           10s\n\
             fix-db    nightly-20260101     Completed   2/2       59m       5m          60m\n"
        );
    }
}
