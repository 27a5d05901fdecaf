//! `refill backup get` and `refill backup describe`: what Velero backed up with its
//! file-system backup, i.e. what refill can restore.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ListParams;
use serde::Serialize;

use crate::api::{Backup, PodVolumeBackup, PodVolumePhase};
use crate::{labels, observe};

use super::args::{BackupCommand, OutputFormat};
use super::client::Ctx;
use super::errors::{Kind, Result, Target};
use super::format::{Table, age, bytes, or_dash, when};
use super::get::newest_first;
use super::output;

pub(super) async fn run(ctx: &Ctx, command: &BackupCommand) -> Result<()> {
    match command {
        BackupCommand::Get { name, output } => get(ctx, name.as_deref(), *output).await,
        BackupCommand::Describe { name, output } => describe(ctx, name, *output).await,
    }
}

async fn get(ctx: &Ctx, name: Option<&str>, format: Option<OutputFormat>) -> Result<()> {
    let api = ctx.api::<Backup>();
    let mut backups = match name {
        Some(name) => vec![ctx.get(Kind::Backup, name).await?],
        None => {
            let target = Target::all(Kind::Backup, &ctx.namespace);
            api.list(&ListParams::default())
                .await
                .map_err(|e| ctx.error(&e, target))?
                .items
        }
    };
    newest_first(&mut backups);
    if let Some(format) = format {
        let text = match (name, backups.first()) {
            (Some(_), Some(one)) => output::render(one, format)?,
            _ => output::render(&output::list(&backups), format)?,
        };
        print!("{text}");
        return Ok(());
    }
    if backups.is_empty() {
        eprintln!("No backups found in namespace \"{}\".", ctx.namespace);
        return Ok(());
    }
    let target = Target::all(Kind::PodVolumeBackup, &ctx.namespace);
    let mut pvbs = Vec::new();
    observe::paging::for_each_pod_volume_backup(&ctx.api(), None, |pvb| pvbs.push(pvb))
        .await
        .map_err(|e| ctx.error(&e, target))?;
    print!("{}", table(&backups, &pvbs, Timestamp::now()));
    Ok(())
}

/// Whether a PodVolumeBackup belongs to `backup`: by the (possibly shortened) name
/// label, and by UID and tag where present, as names can be reused.
pub(super) fn belongs_to(pvb: &PodVolumeBackup, backup: &Backup) -> bool {
    let name = backup.name_any();
    let labels = pvb.labels();
    labels.get(labels::BACKUP_NAME) == Some(&labels::label_value(&name))
        && match (labels.get(labels::BACKUP_UID), backup.uid()) {
            (Some(label), Some(uid)) => *label == uid,
            _ => true,
        }
        && pvb.spec.tags.get("backup").is_none_or(|tag| *tag == name)
}

pub(super) fn table(backups: &[Backup], pvbs: &[PodVolumeBackup], now: Timestamp) -> String {
    let mut table = Table::new(&[
        "NAME",
        "PHASE",
        "FSB VOLUMES",
        "STORAGE LOCATION",
        "CREATED",
    ]);
    for b in backups {
        let count = pvbs.iter().filter(|p| belongs_to(p, b)).count();
        table.row(vec![
            b.name_any(),
            b.phase()
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "-".into()),
            count.to_string(),
            or_dash(b.spec.storage_location.as_deref()),
            age(b.metadata.creation_timestamp.as_ref(), now),
        ]);
    }
    table.render("")
}

/// One file-system-backed volume of a backup, for `describe` and its `-o` output.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct BackupVolume {
    pub namespace: String,
    pub pod: String,
    pub volume: String,
    /// The PVC's name; None for pod volumes that are not PVCs (emptyDir and the like).
    pub pvc: Option<String>,
    pub pod_volume_backup: String,
    pub uploader_type: Option<String>,
    #[serde(rename = "snapshotID")]
    pub snapshot_id: Option<String>,
    pub total_bytes: i64,
    pub phase: Option<String>,
    /// Why refill cannot restore it; None when it can.
    pub not_restorable: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct BackupVolumes {
    backup: String,
    namespace: String,
    phase: Option<String>,
    volumes: Vec<BackupVolume>,
}

pub(super) fn volume(pvb: &PodVolumeBackup) -> BackupVolume {
    let status = pvb.status.clone().unwrap_or_default();
    let pvc = pvb.annotations().get(labels::PVC_NAME_ANNOTATION).cloned();
    let snapshot_id = status.snapshot_id.filter(|s| !s.is_empty());
    let phase = status.phase;
    let not_restorable = if pvc.is_none() {
        Some("not a PVC".to_string())
    } else if phase != Some(PodVolumePhase::Completed) {
        Some(format!(
            "backup of it is {}",
            phase
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "unfinished".into())
        ))
    } else if snapshot_id.is_none() {
        Some("no snapshot (the volume was empty)".to_string())
    } else {
        None
    };
    BackupVolume {
        namespace: pvb.spec.pod.namespace.clone().unwrap_or_default(),
        pod: pvb.spec.pod.name.clone().unwrap_or_default(),
        volume: pvb.spec.volume.clone(),
        pvc,
        pod_volume_backup: pvb.name_any(),
        uploader_type: pvb.spec.uploader_type.clone(),
        snapshot_id,
        total_bytes: status.progress.map(|p| p.total_bytes).unwrap_or_default(),
        phase: phase.map(|p| format!("{p:?}")),
        not_restorable,
    }
}

async fn describe(ctx: &Ctx, name: &str, format: Option<OutputFormat>) -> Result<()> {
    let backup: Backup = ctx.get(Kind::Backup, name).await?;
    let target = Target::all(Kind::PodVolumeBackup, &ctx.namespace);
    let mut volumes: Vec<BackupVolume> = Vec::new();
    observe::paging::for_each_pod_volume_backup(&ctx.api(), Some(name), |pvb| {
        if belongs_to(&pvb, &backup) {
            volumes.push(volume(&pvb));
        }
    })
    .await
    .map_err(|e| ctx.error(&e, target))?;
    // PVCs first, then pod volumes refill cannot restore.
    volumes.sort_by(|a, b| {
        let key = |v: &BackupVolume| {
            (
                v.namespace.clone(),
                v.pvc.is_none(),
                v.pvc.clone(),
                v.pod.clone(),
                v.volume.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    if let Some(format) = format {
        let doc = BackupVolumes {
            backup: name.to_string(),
            namespace: ctx.namespace.clone(),
            phase: backup.phase().map(|p| format!("{p:?}")),
            volumes,
        };
        print!("{}", output::render(&doc, format)?);
        return Ok(());
    }
    print!("{}", render(&backup, &volumes, Timestamp::now()));
    Ok(())
}

pub(super) fn render(backup: &Backup, volumes: &[BackupVolume], now: Timestamp) -> String {
    let name = backup.name_any();
    let status = backup.status.clone().unwrap_or_default();
    let mut head = Table::new(&["", ""]);
    let mut field = |k: &str, v: String| head.row(vec![format!("{k}:"), v]);
    field("Backup", name.clone());
    field("Namespace", backup.namespace().unwrap_or_default());
    field(
        "Phase",
        backup
            .phase()
            .map(|p| format!("{p:?}"))
            .unwrap_or_else(|| "-".into()),
    );
    field(
        "Created",
        when(backup.metadata.creation_timestamp.as_ref(), now),
    );
    field("Completed", when(status.completion_timestamp.as_ref(), now));
    field(
        "Storage location",
        or_dash(backup.spec.storage_location.as_deref()),
    );
    let namespaces = match backup.spec.included_namespaces.as_slice() {
        [] => "*".to_string(),
        list => list.join(", "),
    };
    field("Included namespaces", namespaces);
    let mut out: String = head
        .render("")
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect();

    let restorable = volumes
        .iter()
        .filter(|v| v.not_restorable.is_none())
        .count();
    out += &format!(
        "\nFile-system-backed volumes: {}, {restorable} restorable by refill\n",
        volumes.len()
    );
    if volumes.is_empty() {
        out += "  none: this backup holds no file-system backup (PodVolumeBackups)\n";
        return out;
    }
    let mut table = Table::new(&[
        "NAMESPACE",
        "PVC",
        "POD",
        "VOLUME",
        "SIZE",
        "UPLOADER",
        "SNAPSHOT",
        "PHASE",
        "RESTORABLE",
    ]);
    for v in volumes {
        table.row(vec![
            v.namespace.clone(),
            or_dash(v.pvc.as_deref()),
            v.pod.clone(),
            v.volume.clone(),
            bytes(v.total_bytes),
            or_dash(v.uploader_type.as_deref()),
            or_dash(v.snapshot_id.as_deref()),
            or_dash(v.phase.as_deref()),
            match &v.not_restorable {
                None => "yes".into(),
                Some(why) => format!("no: {why}"),
            },
        ]);
    }
    out += &table.render("  ");
    if let Some(first) = volumes.iter().find(|v| v.not_restorable.is_none()) {
        out += &format!(
            "\nRestore one with: refill restore create NAME --from-backup {name} --pvc {}/{}\n",
            first.namespace,
            first.pvc.as_deref().unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::{
        BackupPhase, BackupSpec, BackupStatus, PodVolumeBackupSpec, PodVolumeBackupStatus, Progress,
    };
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn backup(name: &str, uid: &str) -> Backup {
        let mut b = Backup::new(name, BackupSpec::default());
        b.metadata.uid = Some(uid.into());
        b.metadata.namespace = Some("velero".into());
        b.metadata.creation_timestamp = Some(Time("2026-01-01T10:00:00Z".parse().unwrap()));
        b.status = Some(BackupStatus {
            phase: Some(BackupPhase::Completed),
            ..BackupStatus::default()
        });
        b
    }

    fn pvb(backup: &str, uid: Option<&str>, pvc: Option<&str>, volume: &str) -> PodVolumeBackup {
        let mut p = PodVolumeBackup::new(
            &format!("{backup}-{volume}"),
            PodVolumeBackupSpec {
                pod: ObjectReference {
                    namespace: Some("shop".into()),
                    name: Some("db-0".into()),
                    ..ObjectReference::default()
                },
                volume: volume.into(),
                uploader_type: Some("kopia".into()),
                ..PodVolumeBackupSpec::default()
            },
        );
        let mut labels =
            BTreeMap::from([(labels::BACKUP_NAME.to_string(), labels::label_value(backup))]);
        if let Some(uid) = uid {
            labels.insert(labels::BACKUP_UID.into(), uid.into());
        }
        p.metadata.labels = Some(labels);
        if let Some(pvc) = pvc {
            p.metadata.annotations = Some(BTreeMap::from([(
                labels::PVC_NAME_ANNOTATION.to_string(),
                pvc.to_string(),
            )]));
        }
        p.status = Some(PodVolumeBackupStatus {
            phase: Some(PodVolumePhase::Completed),
            snapshot_id: Some("3f2a9c".into()),
            progress: Some(Progress {
                total_bytes: 1_258_291,
                bytes_done: 1_258_291,
            }),
            ..PodVolumeBackupStatus::default()
        });
        p
    }

    #[test]
    fn long_backup_names_match_their_shortened_label() {
        let long = format!("nightly-{}", "x".repeat(70));
        let b = backup(&long, "u1");
        assert!(belongs_to(
            &pvb(&long, Some("u1"), Some("data"), "data"),
            &b
        ));
        assert!(
            !belongs_to(&pvb(&long, Some("u0"), Some("data"), "data"), &b),
            "an older backup's PVB"
        );
        assert!(!belongs_to(&pvb("other", None, Some("data"), "data"), &b));
    }

    #[test]
    fn volumes_that_are_not_pvcs_are_shown_but_not_restorable() {
        let b = backup("nightly", "u1");
        let volumes = vec![
            volume(&pvb("nightly", Some("u1"), Some("data-db-0"), "data")),
            volume(&pvb("nightly", Some("u1"), None, "scratch")),
        ];
        assert_eq!(volumes[1].not_restorable.as_deref(), Some("not a PVC"));
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let text = render(&b, &volumes, now);
        assert!(
            text.contains("File-system-backed volumes: 2, 1 restorable by refill"),
            "{text}"
        );
        assert!(text.contains("shop        data-db-0   db-0   data      1.2 MiB   kopia      3f2a9c     Completed   yes"), "{text}");
        assert!(text.contains("shop        -           db-0   scratch   1.2 MiB   kopia      3f2a9c     Completed   no: not a PVC"), "{text}");
        assert!(
            text.contains("refill restore create NAME --from-backup nightly --pvc shop/data-db-0"),
            "{text}"
        );
        let table = table(&[b], &[pvb("nightly", Some("u1"), None, "a")], now);
        assert!(
            table.contains("nightly   Completed   1             -                  120m"),
            "{table}"
        );
    }
}
