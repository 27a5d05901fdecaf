//! A real node whose kubelet stops mid-restore, through the real Velero (v1.18) and
//! refill's controller from `manifests/`.
//!
//! The kubelet of the node the app runs on is frozen (SIGSTOP) as soon as refill's
//! stand-in pod exists: the node goes NotReady, its containers run on unreported. The
//! restore must name the node while it waits, end within its bound (the node lifecycle
//! controller's grace, refill's `--node-grace`, a few passes), say whether anything
//! was written, leave no stand-in, and bring the app back; once the kubelet runs
//! again the app runs too. A binary of its own: a frozen real node would disturb the
//! real-node tests of other binaries, which run before or after this one, never beside.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use refill::api::{DataRestore, DataRestoreSpec, ExtraFiles, Phase, PodVolumeRestore};
use refill::labels;
use refill_e2e::velero::VELERO_NAMESPACE;
use refill_e2e::velero_app::{
    BackedUp, TIMEOUT, backed_up, damage, forget, nothing_left_behind, same_tree,
};
use refill_e2e::{fixture, run_test, wait_for};

/// The node called unreachable (40 to 50 s without a word from its kubelet), the
/// tests' `--node-grace` (20 s, see `in_cluster::controller_deployment`), the cancel
/// and the removal: the restore's bound.
const NODE_FAULT_BOUND: Duration = Duration::from_secs(180);

/// A kubelet stopped with SIGSTOP, continued when this goes, whatever the test did.
struct Frozen {
    pid: String,
}

impl Frozen {
    fn kubelet(node_dir: &Path) -> Result<Frozen> {
        let pid_file = node_dir.join("run/kubelet.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .to_string();
        signal("STOP", &pid)?;
        Ok(Frozen { pid })
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(e) = signal("CONT", &self.pid) {
            eprintln!("could not continue kubelet {}: {e:#}", self.pid);
        }
    }
}

fn signal(name: &str, pid: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -{name} {pid}: {status}");
    Ok(())
}

/// Every text the restore shows: errors, warnings, volume messages, conditions.
fn texts(dr: &DataRestore) -> String {
    let Some(status) = &dr.status else {
        return String::new();
    };
    let mut all = status.errors.clone();
    all.extend(status.volumes.iter().filter_map(|v| v.message.clone()));
    all.extend(status.volumes.iter().filter_map(|v| v.warning.clone()));
    all.extend(status.conditions.iter().map(|c| c.message.clone()));
    all.join("\n")
}

async fn stand_in_exists(client: &Client, ns: &str) -> Result<()> {
    wait_for("the stand-in pod", TIMEOUT, || async {
        Ok((!fixture::stand_in_pods(client, ns).await?.is_empty()).then_some(()))
    })
    .await
}

/// A node agent took the restore (Velero records that before it writes).
async fn node_agent_took_it(client: &Client, restore: &str) -> Result<()> {
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    let uid = restores.get(restore).await?.uid().unwrap_or_default();
    let pvrs: Api<PodVolumeRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    wait_for("a node agent to take the restore", TIMEOUT, || async {
        let taken = pvrs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|p| {
                p.owner_references().iter().any(|o| o.uid == uid)
                    && p.status.as_ref().is_some_and(|s| {
                        s.accepted_timestamp.is_some() || s.start_timestamp.is_some()
                    })
            });
        Ok(taken.then_some(()))
    })
    .await
}

/// One real node frozen at a time: the binary's tests run side by side otherwise.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// When the kubelet is frozen.
#[derive(Clone, Copy, Debug)]
enum When {
    /// As soon as refill's stand-in pod exists: before it runs, most often.
    StandInMade,
    /// Once Velero's node agent accepted the restore: its data mover may be writing.
    DataMoving,
}

/// The app (`mib` MiB) backed up and damaged, a restore of it (extra files kept: the
/// stand-in is the first pod refill makes on the node), and the app's kubelet frozen
/// `when`. The restore must name the node, end within its bound (or, with a writer
/// that may run, wait saying so until the kubelet runs again) and leave nothing behind.
async fn frozen(env: &refill_e2e::TestEnv, mib: u32, when: When) -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let BackedUp {
        ns,
        client,
        app,
        dir,
        want,
        backup,
    } = backed_up(env, mib).await?;
    let node = app
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("the app's pod has no node")?;
    damage(&dir)?;

    let spec = DataRestoreSpec {
        backup_name: Some(backup.clone()),
        pvcs: vec![format!("{ns}/data")],
        extra_files: ExtraFiles::Keep,
        ..Default::default()
    };
    fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
    match when {
        When::StandInMade => stand_in_exists(&client, &ns).await?,
        When::DataMoving => node_agent_took_it(&client, &ns).await?,
    }
    let mut frozen = Some(Frozen::kubelet(&env.cluster.real_node_dir(&node))?);
    let started = std::time::Instant::now();
    let tag = format!("[node-frozen {when:?}]");

    let named = format!("node {node} is");
    let said = wait_for(format!("the restore to say {named:?}"), TIMEOUT, || async {
        let dr = fixture::get_whole(&client, VELERO_NAMESPACE, &ns).await?;
        let said = texts(&dr);
        Ok(said.contains(&named).then_some(said))
    })
    .await?;
    eprintln!("{tag} said after {:?}: {said}", started.elapsed());
    // Named once the node is called unreachable; given up 20 s later.
    let bound = match when {
        When::StandInMade => NODE_FAULT_BOUND,
        When::DataMoving => Duration::from_secs(60),
    };
    let ended = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, bound).await;
    let done = match (ended, when) {
        (Ok(done), _) => done,
        // A node agent that took the restore may still write if the node answers: refill
        // waits, saying so, until the node answers (here) or is deleted.
        (Err(_), When::DataMoving) => {
            let dr = fixture::get_whole(&client, VELERO_NAMESPACE, &ns).await?;
            let said = texts(&dr);
            ensure!(
                !dr.status.as_ref().is_some_and(|s| s.phase.is_terminal())
                    && said.contains("may still be writing")
                    && said.contains(&format!("kubectl delete node {node}")),
                "while the node agent may write: {said}"
            );
            eprintln!("{tag} still waiting after {:?}: {said}", started.elapsed());
            frozen = None;
            fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?
        }
        (Err(e), When::StandInMade) => return Err(e),
    };
    let status = done.status.clone().unwrap_or_default();
    let volume = status.volumes.first().context("no volume")?;
    eprintln!(
        "{tag} ended {:?} after {:?}: {}",
        status.phase,
        started.elapsed(),
        volume.message.as_deref().unwrap_or_default()
    );
    match status.phase {
        // The node agent (whose container runs on) finished: the backup is in, and
        // the stand-in went without restore-wait's word once the node was given up.
        Phase::Completed => same_tree(&want, &dir)?,
        // No node agent took it: nothing was written, and the volume says so.
        Phase::Failed => ensure!(
            !volume.partly_written
                && volume
                    .message
                    .as_deref()
                    .unwrap_or_default()
                    .contains(&node),
            "{volume:#?}"
        ),
        other => anyhow::bail!("ended {other:?}: {status:#?}"),
    }
    ensure!(
        fixture::stand_in_pods(&client, &ns).await?.is_empty(),
        "a stand-in is left on the frozen node"
    );
    // The app is scaled back, the node still frozen or not; it runs once the kubelet
    // does (its volume is on that node).
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);
    let app_object = deployments.get("app").await?;
    ensure!(
        app_object.spec.as_ref().and_then(|s| s.replicas) == Some(1)
            && !app_object.annotations().contains_key(labels::QUIESCED_BY),
        "the app was not scaled back: {:?}",
        app_object.metadata.annotations
    );
    drop(frozen);
    fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
    nothing_left_behind(&client, &ns, &done).await?;
    forget(&client, &ns, &backup).await
}

#[tokio::test]
async fn a_restore_whose_node_stops_answering_ends_within_its_bound() -> Result<()> {
    run_test("node-frozen", |env| async move {
        frozen(&env, 8, When::StandInMade).await
    })
    .await
}

/// Frozen once Velero's node agent took the restore: its data mover either finishes
/// (its container runs on, unreported), and the restore completes once the node is
/// given up; or it had not started, and refill waits, saying a writer may run, until
/// the kubelet runs again.
#[tokio::test]
async fn a_restore_whose_node_stops_answering_while_data_moves_never_writes_under_the_app()
-> Result<()> {
    run_test("node-frozen-moving", |env| async move {
        frozen(&env, 64, When::DataMoving).await
    })
    .await
}
