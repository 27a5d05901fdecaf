//! Exact and staged restores through the real Velero (v1.18) on the real nodes.
//!
//! Velero's node agent writes only what a snapshot holds. A volume that gained files
//! after its backup (a newer WAL segment, a new directory, a symlink, a file turned
//! into a directory and the reverse) must end as the backup holds it all the same:
//! a direct restore empties the volume first, a staged one mirrors its scratch claim.
//! A staged restore stops the app only after the scratch claim is filled, so that a
//! cancel, a refused scratch claim or a controller restart before the stop leaves the
//! app untouched.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use refill::api::{
    ConsumerState, DataRestore, DataRestoreSpec, Phase, PodVolumeRestore, RestoreMethod,
    VolumePhase,
};
use refill::labels;
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::velero_app::{
    BackedUp, TIMEOUT, backed_up, damage, forget, nothing_left_behind, same_tree,
};
use refill_e2e::{fixture, in_cluster, run_test, wait_for};
use serde_json::json;

/// What a volume gains after its backup: a newer WAL segment, a new directory of
/// files, a symlink, a file turned into a directory and a directory into a file.
fn gain_files(dir: &Path) -> Result<()> {
    std::fs::write(dir.join("db/wal/000003.log"), b"a newer segment")?;
    std::fs::create_dir_all(dir.join("reports/2026"))?;
    std::fs::write(dir.join("reports/index"), b"new")?;
    std::fs::write(dir.join("reports/2026/12"), b"new")?;
    std::os::unix::fs::symlink("db/wal/000003.log", dir.join("latest"))?;
    std::fs::remove_file(dir.join("etc/app.conf"))?;
    std::fs::create_dir(dir.join("etc/app.conf"))?;
    std::fs::write(dir.join("etc/app.conf/override"), b"x")?;
    std::fs::remove_dir_all(dir.join("bin"))?;
    std::fs::write(dir.join("bin"), b"a file where a directory was")?;
    Ok(())
}

/// The app's Deployment runs `testbox scribble`, writing a new file into the volume
/// every 50 ms, and lingering `linger` seconds once told to stop; returns its pod.
async fn keep_writing(client: &Client, ns: &str, linger: u32) -> Result<Pod> {
    let patch = json!({"spec": {"template": {"spec": {
        "terminationGracePeriodSeconds": linger + 10,
        "containers": [{
            "name": "app",
            "args": ["scribble", "/data/scribbled", linger.to_string()],
        }],
    }}}});
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch("app", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for("the app writing", TIMEOUT, || async {
        let listed = pods.list(&ListParams::default().labels("app=app")).await?;
        Ok(listed.items.into_iter().find(|p| {
            let writes = p.spec.as_ref().is_some_and(|s| {
                s.containers[0].args.as_deref().unwrap_or_default()[0] == "scribble"
            });
            let live = p.metadata.deletion_timestamp.is_none();
            writes && live && refill_e2e::support::is_pod_ready(p)
        }))
    })
    .await
}

/// A restore of the claim `data` of `ns` from `backup`, started.
async fn start(client: &Client, ns: &str, backup: &str, method: RestoreMethod) -> Result<()> {
    let spec = DataRestoreSpec {
        backup_name: Some(backup.into()),
        pvcs: vec![format!("{ns}/data")],
        method,
        ..Default::default()
    };
    fixture::data_restore(client, VELERO_NAMESPACE, ns, spec).await?;
    Ok(())
}

/// Waits until the restore's only volume is in `phase`.
async fn volume_reaches(client: &Client, name: &str, phase: VolumePhase) -> Result<DataRestore> {
    wait_for(format!("volume {phase:?}"), TIMEOUT, || async {
        let dr = fixture::get_whole(client, VELERO_NAMESPACE, name).await?;
        let now = dr
            .status
            .as_ref()
            .and_then(|s| s.volumes.first())
            .map(|v| v.phase);
        ensure!(
            !now.is_some_and(|p| p.is_terminal() && p != phase),
            "the volume ended {now:?} before {phase:?}: {:#?}",
            dr.status
        );
        Ok((now == Some(phase)).then_some(dr))
    })
    .await
}

/// When the node agent finished filling the restore's scratch claim.
async fn filled_at(client: &Client, restore: &DataRestore) -> Result<k8s_openapi::jiff::Timestamp> {
    let uid = restore.uid().unwrap_or_default();
    let pvrs: Api<PodVolumeRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    let pvr = pvrs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .context("no PodVolumeRestore of the restore")?;
    pvr.status
        .and_then(|s| s.completion_timestamp)
        .map(|t| t.0)
        .context("the PodVolumeRestore has no completion time")
}

/// No scratch claim is left in `ns`.
async fn no_scratch_claim(client: &Client, ns: &str) -> Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let role = format!("{}={}", labels::ROLE, labels::ROLE_SCRATCH);
    wait_for(
        "the scratch claim gone",
        Duration::from_secs(120),
        || async {
            let left = claims.list(&ListParams::default().labels(&role)).await?;
            Ok(left.items.is_empty().then_some(()))
        },
    )
    .await
}

/// The default restore: the volume's files are set aside, Velero's node agent writes
/// the backup into the emptied volume, and what was set aside is removed, so that what
/// appeared after the backup goes too.
#[tokio::test]
async fn a_direct_restore_leaves_exactly_what_the_backup_holds() -> Result<()> {
    run_test("exact-direct", |env| async move {
        let BackedUp {
            ns,
            client,
            dir,
            backup,
            want,
            ..
        } = backed_up(&env, 8).await?;
        gain_files(&dir)?;
        damage(&dir)?;

        start(&client, &ns, &backup, RestoreMethod::Direct).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        same_tree(&want, &dir)?;
        let volume = &status.volumes[0];
        ensure!(
            volume.cleared.is_some_and(|n| n >= 7),
            "the volume's root held 7 entries or more, {:?} were set aside",
            volume.cleared
        );
        ensure!(volume.tidied.is_some(), "{volume:#?}");
        fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// Staged: the node agent fills a scratch claim while the app keeps writing; the app
/// is stopped only after, refill's copier makes the volume equal to the scratch claim
/// (what the app wrote meanwhile goes, as does what appeared after the backup), and
/// the app comes back.
#[tokio::test]
async fn a_staged_restore_stops_the_app_only_for_the_copy_and_ends_exact() -> Result<()> {
    run_test("exact-staged", |env| async move {
        let BackedUp {
            ns,
            client,
            dir,
            backup,
            want,
            ..
        } = backed_up(&env, 8).await?;
        let writer = keep_writing(&client, &ns, 0).await?;
        gain_files(&dir)?;
        damage(&dir)?;

        start(&client, &ns, &backup, RestoreMethod::Staged).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        same_tree(&want, &dir)?;
        let copied = status.volumes[0].copied.clone().unwrap_or_default();
        ensure!(copied.deleted >= 5, "the copy deleted only {copied:?}");

        // The app ran, writing, until the scratch claim was full.
        let filled = filled_at(&client, &done).await?;
        let record = status
            .consumers
            .iter()
            .find(|c| c.name == "app")
            .context("no record of the app")?;
        ensure!(record.state == ConsumerState::Resumed, "{record:#?}");
        let stopped = record.stopped_at.clone().context("never stopped")?.0;
        ensure!(
            stopped >= filled,
            "the app was stopped at {stopped}, before the fill ended at {filled}"
        );
        let scribbled = writer
            .metadata
            .creation_timestamp
            .clone()
            .map(|t| t.0)
            .context("no creation time")?;
        ensure!(scribbled < filled, "the writer started after the fill");
        fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        no_scratch_claim(&client, &ns).await?;
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// A staged restore whose controller is killed once the fill is done and the app is
/// being stopped (it takes 20 s to stop): the next leader goes on from the record,
/// and the volume ends exact with the app back.
#[tokio::test]
async fn a_controller_killed_between_the_fill_and_the_stop_finishes_the_restore() -> Result<()> {
    run_test("exact-kill", |env| async move {
        let BackedUp {
            ns,
            client,
            dir,
            backup,
            want,
            ..
        } = backed_up(&env, 8).await?;
        keep_writing(&client, &ns, 20).await?;
        gain_files(&dir)?;

        start(&client, &ns, &backup, RestoreMethod::Staged).await?;
        volume_reaches(&client, &ns, VolumePhase::Quiescing).await?;
        let leader = in_cluster::leader(&client, VELERO_NAMESPACE)
            .await?
            .context("no controller leads")?;
        Api::<Pod>::namespaced(client.clone(), &leader.namespace().unwrap_or_default())
            .delete(&leader.name_any(), &DeleteParams::default().grace_period(0))
            .await?;

        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        same_tree(&want, &dir)?;
        fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        no_scratch_claim(&client, &ns).await?;
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// A staged restore canceled while its scratch claim is filled: the app was never
/// stopped (the same pod runs), its volume is as it was, and the scratch claim goes.
#[tokio::test]
async fn a_cancel_during_a_staged_fill_never_stops_the_app() -> Result<()> {
    run_test("exact-cancel", |env| async move {
        let BackedUp {
            ns,
            client,
            app,
            dir,
            backup,
            ..
        } = backed_up(&env, 64).await?;
        gain_files(&dir)?;
        damage(&dir)?;
        let before = velero::tree(&dir)?;

        start(&client, &ns, &backup, RestoreMethod::Staged).await?;
        volume_reaches(&client, &ns, VolumePhase::Restoring).await?;
        Api::<DataRestore>::namespaced(client.clone(), VELERO_NAMESPACE)
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Canceled, "{status:#?}");
        ensure!(!status.volumes[0].partly_written, "{status:#?}");
        ensure!(
            status
                .consumers
                .iter()
                .all(|c| c.state == ConsumerState::Running && c.stopped_at.is_none()),
            "a consumer was stopped: {:#?}",
            status.consumers
        );
        let pods = fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        ensure!(pods[0].uid() == app.uid(), "the app's pod was replaced");
        same_tree(&before, &dir)?;
        no_scratch_claim(&client, &ns).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// A direct restore canceled once the volume's files are set aside and the node agent
/// is about to write: what it wrote goes, the files set aside come back, and the
/// volume is as it was before the restore, not emptied.
#[tokio::test]
async fn a_direct_restore_that_does_not_complete_puts_the_volume_back_as_it_was() -> Result<()> {
    run_test("exact-put-back", |env| async move {
        let BackedUp {
            ns,
            client,
            dir,
            backup,
            ..
        } = backed_up(&env, 64).await?;
        gain_files(&dir)?;
        damage(&dir)?;
        let before = velero::tree(&dir)?;

        start(&client, &ns, &backup, RestoreMethod::Direct).await?;
        volume_reaches(&client, &ns, VolumePhase::StartingStandIn).await?;
        Api::<DataRestore>::namespaced(client.clone(), VELERO_NAMESPACE)
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        let volume = &status.volumes[0];
        ensure!(status.phase == Phase::Canceled, "{status:#?}");
        ensure!(
            !volume.partly_written && volume.put_back.is_some_and(|n| n >= 7),
            "{volume:#?}"
        );
        same_tree(&before, &dir)?;
        fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// A scratch claim the API server refuses (the namespace's quota allows one claim)
/// fails the volume with the server's words before anything is stopped: the app's
/// Deployment is not written at all.
#[tokio::test]
async fn a_refused_scratch_claim_fails_the_volume_before_anything_stops() -> Result<()> {
    run_test("exact-quota", |env| async move {
        let BackedUp {
            ns,
            client,
            app,
            backup,
            ..
        } = backed_up(&env, 1).await?;
        let quota = serde_json::from_value(json!({
            "metadata": { "name": "one-claim" },
            "spec": { "hard": { "persistentvolumeclaims": "1" } },
        }))?;
        Api::<ResourceQuota>::namespaced(client.clone(), &ns)
            .create(&Default::default(), &quota)
            .await?;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let version = deployments.get("app").await?.resource_version();

        start(&client, &ns, &backup, RestoreMethod::Staged).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Failed, "{status:#?}");
        let message = status.volumes[0].message.clone().unwrap_or_default();
        ensure!(
            message.contains("refused the scratch PVC") && message.contains("exceeded quota"),
            "{message}"
        );
        ensure!(
            deployments.get("app").await?.resource_version() == version,
            "the app's Deployment was written"
        );
        let pods = fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        ensure!(pods[0].uid() == app.uid(), "the app's pod was replaced");
        forget(&client, &ns, &backup).await
    })
    .await
}
