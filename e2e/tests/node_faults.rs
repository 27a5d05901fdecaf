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
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use refill::api::{
    DataRestore, DataRestoreSpec, ExtraFiles, Phase, PodVolumePhase, PodVolumeRestore,
};
use refill::labels;
use refill_e2e::velero::VELERO_NAMESPACE;
use refill_e2e::velero_app::{
    BackedUp, TIMEOUT, backed_up_on, damage, forget, nothing_left_behind, same_tree,
};
use refill_e2e::{fixture, run_test, wait_for};

/// How long refill's own pods may stay in the API once the restore ended: on a node
/// that was deleted, the pod garbage collector removes what is left 40 s after.
const REMOVAL_BOUND: Duration = Duration::from_secs(90);

/// How long a restore that waits for a writer on a frozen node is watched not to end:
/// past the node's grace (20 s in the tests), when refill gives up what cannot write.
const HOLD: Duration = Duration::from_secs(40);

/// What refill says of something on a down node that may still write to the volume.
const MAY_WRITE: &str = "may still be";

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
        let frozen = Frozen::find(node_dir)?;
        signal("STOP", &frozen.pid)?;
        Ok(frozen)
    }

    /// The kubelet of the node in `node_dir`, as it is.
    fn find(node_dir: &Path) -> Result<Frozen> {
        let pid_file = node_dir.join("run/kubelet.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .to_string();
        Ok(Frozen { pid })
    }
}

impl Frozen {
    /// Kills the frozen kubelet, for a node that is started again from scratch.
    fn kill(mut self) {
        if let Err(e) = signal("KILL", &self.pid) {
            eprintln!("could not kill kubelet {}: {e:#}", self.pid);
        }
        self.pid.clear();
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if self.pid.is_empty() {
            return;
        }
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
    wait_for("a node agent to take the restore", TIMEOUT, || async {
        let taken = pvr_of(client, restore).await?.iter().any(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.accepted_timestamp.is_some() || s.start_timestamp.is_some())
        });
        Ok(taken.then_some(()))
    })
    .await
}

/// The real nodes, each lent to one case at a time: a case freezes (or deletes) the
/// node its app is pinned to while the other cases run on the other nodes.
static FREE_NODES: std::sync::Mutex<Option<Vec<String>>> = std::sync::Mutex::new(None);

/// A real node lent to one case; back in [`FREE_NODES`] when this goes.
struct Lent(String);

impl Drop for Lent {
    fn drop(&mut self) {
        let mut free = FREE_NODES.lock().unwrap_or_else(|e| e.into_inner());
        free.get_or_insert_with(Vec::new).push(self.0.clone());
    }
}

/// Waits for a real node no other case holds (the nodes up.sh started last).
async fn borrow_node() -> Result<Lent> {
    let listed = refill_e2e::cluster::cluster_dir().join("real-nodes");
    let all: Vec<String> = std::fs::read_to_string(&listed)
        .with_context(|| format!("reading {}", listed.display()))?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    ensure!(!all.is_empty(), "no real node in {}", listed.display());
    let lent = loop {
        {
            let mut free = FREE_NODES.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(node) = free.get_or_insert(all.clone()).pop() {
                break Lent(node);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    // Whatever the last case on it did, it is whole again before the next starts.
    let nodes: Api<Node> = Api::all(Client::try_default().await?);
    wait_for(format!("node {} Ready", lent.0), TIMEOUT, || async {
        let ready = nodes.get_opt(&lent.0).await?.is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        Ok(ready.then_some(()))
    })
    .await?;
    Ok(lent)
}

/// When the kubelet is frozen.
#[derive(Clone, Copy, Debug)]
enum When {
    /// Before the restore is made: the app's pod, which refill stops first, cannot go
    /// (its kubelet does not answer), and its container may still write.
    ConsumersGoing,
    /// As soon as refill's stand-in pod exists: before it runs, most often.
    StandInMade,
    /// Once Velero's node agent accepted the restore: its data mover may be writing.
    DataMoving,
    /// Once the node agent finished: refill removes the stand-in next, without the
    /// kubelet's word.
    StandInRemoval,
    /// As soon as refill's stand-in, whose first init container sets the claim's files
    /// aside before the node agent writes (`extraFiles: Delete`), is bound to the node:
    /// the set-aside may have started.
    SettingAside,
}

impl When {
    /// Whether something that writes to the volume may have run by then.
    fn writer_may_have_run(self) -> bool {
        matches!(
            self,
            When::DataMoving | When::StandInRemoval | When::SettingAside
        )
    }
}

/// What becomes of the frozen node.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Its kubelet runs again, once the restore ended or said what it waits for.
    Back,
    /// Gone for good: its Node object is deleted once it is called unreachable, as a
    /// person does when a machine is lost. The node is started again afterwards, as a
    /// new machine of that name would be.
    Deleted,
}

/// The restore `name` ended (Ok), or says something on a down node may still write
/// (Err, with what it says).
async fn ended_or_holding(
    client: &Client,
    name: &str,
) -> Result<std::result::Result<DataRestore, String>> {
    wait_for(
        "the restore to end or to say a writer may run",
        NODE_FAULT_BOUND,
        || async {
            let dr = fixture::get_whole(client, VELERO_NAMESPACE, name).await?;
            if dr.status.as_ref().is_some_and(|s| s.phase.is_terminal()) {
                return Ok(Some(Ok(dr)));
            }
            let said = texts(&dr);
            Ok(said.contains(MAY_WRITE).then_some(Err(said)))
        },
    )
    .await
}

/// The app's volume damaged as an operator finds it; the node its pod runs on.
fn damaged_on_its_node(app: &Pod, dir: &Path) -> Result<String> {
    let node = app
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("the app's pod has no node")?;
    damage(dir)?;
    Ok(node)
}

async fn pvr_of(client: &Client, restore: &str) -> Result<Vec<PodVolumeRestore>> {
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    let uid = restores.get(restore).await?.uid().unwrap_or_default();
    let pvrs: Api<PodVolumeRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    Ok(pvrs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .collect())
}

/// The node agent finished the restore's PodVolumeRestore.
async fn node_agent_done(client: &Client, restore: &str) -> Result<()> {
    wait_for("the node agent to finish", TIMEOUT, || async {
        let done = pvr_of(client, restore).await?.iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(|phase| phase == PodVolumePhase::Completed)
        });
        Ok(done.then_some(()))
    })
    .await
}

/// refill's copier pods in `ns`.
async fn copier_pods(client: &Client, ns: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("{}={}", labels::ROLE, labels::ROLE_COPIER);
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

async fn stand_in_bound(client: &Client, ns: &str) -> Result<()> {
    wait_for("the stand-in bound to a node", TIMEOUT, || async {
        let bound = fixture::stand_in_pods(client, ns)
            .await?
            .iter()
            .any(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()));
        Ok(bound.then_some(()))
    })
    .await
}

/// refill's stand-in and copier pods are gone from the API: removed by refill (without
/// the kubelet's word when nothing there may write), or with their node.
async fn refills_pods_gone(client: &Client, ns: &str) -> Result<()> {
    wait_for(
        "the stand-in and copier pods gone",
        REMOVAL_BOUND,
        || async {
            let left = fixture::stand_in_pods(client, ns).await?.len()
                + copier_pods(client, ns).await?.len();
            Ok((left == 0).then_some(()))
        },
    )
    .await
}

/// Deletes the Node object, as a person does once the machine is known lost.
async fn delete_node(client: &Client, node: &str) -> Result<()> {
    Api::<Node>::all(client.clone())
        .delete(node, &Default::default())
        .await?;
    Ok(())
}

/// The pod garbage collector removed every pod bound to deleted node `node` (40 s
/// after the deletion), as it would long before a replacement machine registers under
/// that name; one started sooner would run them again.
async fn pods_off(client: &Client, node: &str) -> Result<()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    wait_for(
        format!("the pods of deleted node {node} gone"),
        TIMEOUT,
        || async { Ok(pods.list(&on_node).await?.items.is_empty().then_some(())) },
    )
    .await
}

/// Starts real node `node` over as a new machine of that name would (`e2e/cluster/up.sh`
/// with `REFILL_RESTART_NODE`): containerd and every container of it stopped, its
/// kubelet registering the node anew. The other nodes are left as they are.
async fn restart_real_node(node: &str) -> Result<()> {
    let out = tokio::process::Command::new(refill_e2e::cluster::scripts_dir().join("up.sh"))
        .env("REFILL_RESTART_NODE", node)
        .stdout(std::process::Stdio::null())
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "up.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The app (`mib` MiB) backed up and damaged, a restore of it, and the app's kubelet
/// frozen `when`; then the node comes back or is deleted (`fate`). The restore must
/// name the node, end within its bound (or, with a writer that may run, wait saying so
/// until the kubelet runs again or the node is deleted), say whether anything was
/// written, and leave nothing behind; the app is scaled back either way, and runs once
/// its node does.
async fn frozen(
    env: &refill_e2e::TestEnv,
    on: &str,
    mib: u32,
    when: When,
    fate: Fate,
) -> Result<()> {
    let played = play(env, on, mib, when, fate).await;
    // Whatever happened, a node deleted by the case comes back for the cases after
    // it, and for the tests of other binaries.
    let made_whole = match fate {
        Fate::Deleted => make_whole(env, on).await,
        Fate::Back => Ok(()),
    };
    played.and(made_whole)
}

/// A deleted real node started over, once the pods it held are gone from the API;
/// nothing when its Node object exists.
async fn make_whole(env: &refill_e2e::TestEnv, node: &str) -> Result<()> {
    if Api::<Node>::all(env.client.clone())
        .get_opt(node)
        .await?
        .is_some()
    {
        return Ok(());
    }
    // Killed, frozen or not: a stopped process takes SIGKILL.
    if let Ok(frozen) = Frozen::find(&env.cluster.real_node_dir(node)) {
        frozen.kill();
    }
    pods_off(&env.client, node).await?;
    restart_real_node(node).await?;
    controller_whole(&env.client).await
}

/// refill's controller runs again as installed: its replicas Ready, one leading. A
/// node taken away took its pods there with it.
async fn controller_whole(client: &Client) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "refill-system");
    wait_for("refill's controller Ready and leading", TIMEOUT, || async {
        let ready = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| refill_e2e::is_pod_ready(p))
            .count();
        let leading = refill_e2e::in_cluster::leader(client, VELERO_NAMESPACE)
            .await?
            .is_some_and(|p| refill_e2e::is_pod_ready(&p));
        Ok((ready >= 2 && leading).then_some(()))
    })
    .await
}

async fn play(env: &refill_e2e::TestEnv, on: &str, mib: u32, when: When, fate: Fate) -> Result<()> {
    let BackedUp {
        ns,
        client,
        app,
        dir,
        want,
        backup,
    } = backed_up_on(env, mib, Some(on)).await?;
    let node = damaged_on_its_node(&app, &dir)?;

    let spec = DataRestoreSpec {
        backup_name: Some(backup.clone()),
        pvcs: vec![format!("{ns}/data")],
        // Kept, so that the stand-in only waits for the node agent; but for the
        // set-aside's case, whose stand-in moves the claim's files aside first.
        extra_files: match when {
            When::SettingAside => ExtraFiles::Delete,
            _ => ExtraFiles::Keep,
        },
        ..Default::default()
    };
    let node_dir = env.cluster.real_node_dir(&node);
    let mut frozen = None;
    if let When::ConsumersGoing = when {
        frozen = Some(Frozen::kubelet(&node_dir)?);
    }
    fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
    match when {
        When::ConsumersGoing => {}
        When::StandInMade => stand_in_exists(&client, &ns).await?,
        When::DataMoving => node_agent_took_it(&client, &ns).await?,
        When::StandInRemoval => node_agent_done(&client, &ns).await?,
        When::SettingAside => stand_in_bound(&client, &ns).await?,
    }
    if frozen.is_none() {
        frozen = Some(Frozen::kubelet(&node_dir)?);
    }
    let started = std::time::Instant::now();
    let tag = format!("[node-frozen {when:?} {fate:?}]");

    let named = format!("node {node} is");
    let said = wait_for(format!("the restore to say {named:?}"), TIMEOUT, || async {
        let dr = fixture::get_whole(&client, VELERO_NAMESPACE, &ns).await?;
        let said = texts(&dr);
        Ok(said.contains(&named).then_some(said))
    })
    .await?;
    eprintln!("{tag} said after {:?}: {said}", started.elapsed());
    let done = match fate {
        Fate::Back => match ended_or_holding(&client, &ns).await? {
            Ok(done) => done,
            // Something that may still write if the node answers: refill waits, saying
            // so, past the node's grace (when it gives up what cannot write), until the
            // node answers (here) or is deleted.
            Err(said) => {
                eprintln!("{tag} holds after {:?}: {said}", started.elapsed());
                tokio::time::sleep(HOLD).await;
                let dr = fixture::get_whole(&client, VELERO_NAMESPACE, &ns).await?;
                let said = texts(&dr);
                ensure!(
                    !dr.status.as_ref().is_some_and(|s| s.phase.is_terminal())
                        && said.contains(MAY_WRITE)
                        && said.contains(&format!("kubectl delete node {node}")),
                    "while something may write: {said}"
                );
                frozen = None;
                fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?
            }
        },
        Fate::Deleted => {
            delete_node(&client, &node).await?;
            fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, NODE_FAULT_BOUND).await?
        }
    };
    let status = done.status.clone().unwrap_or_default();
    let volume = status.volumes.first().context("no volume")?;
    let said = texts(&done);
    eprintln!(
        "{tag} ended {:?} after {:?}: {said}",
        status.phase,
        started.elapsed(),
    );
    match status.phase {
        // The node agent (whose container runs on) finished: the backup is in.
        Phase::Completed => same_tree(&want, &dir)?,
        // Ended without the backup: the words name the node, and say something was
        // written only when a writer may have run.
        Phase::Failed => ensure!(
            (when.writer_may_have_run() || !volume.partly_written)
                && volume
                    .message
                    .as_deref()
                    .unwrap_or_default()
                    .contains(&node),
            "{volume:#?}"
        ),
        other => anyhow::bail!("ended {other:?}: {status:#?}"),
    }
    // A node that is not back: the app's pod, which needs its volume there, waits.
    if status.phase == Phase::Failed && frozen.is_some() {
        ensure!(
            said.contains("Pending"),
            "nothing says the app waits: {said}"
        );
    }
    refills_pods_gone(&client, &ns).await?;
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
    if let Fate::Deleted = fate {
        make_whole(env, &node).await?;
    }
    fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
    if !pvr_of(&client, &ns).await?.is_empty() {
        nothing_left_behind(&client, &ns, &done).await?;
    }
    forget(&client, &ns, &backup).await
}

/// A drain of the app's node while the stand-in waits for the node agent. The
/// stand-in is a pod of no controller, so a plain `kubectl drain` stops and names it
/// (a restore is not broken by a drain nobody forced); `kubectl drain --force` evicts
/// it like any pod, and the volume fails cleanly: nothing was written (the stand-in
/// went before Velero's helper ran, or the data is all in), the app is scaled back and,
/// its node cordoned, waits until the node is uncordoned.
async fn drained(env: &refill_e2e::TestEnv, on: &str) -> Result<()> {
    let BackedUp {
        ns,
        client,
        app,
        dir,
        want,
        backup,
    } = backed_up_on(env, 8, Some(on)).await?;
    let node = damaged_on_its_node(&app, &dir)?;
    let spec = DataRestoreSpec {
        backup_name: Some(backup.clone()),
        pvcs: vec![format!("{ns}/data")],
        extra_files: ExtraFiles::Keep,
        ..Default::default()
    };
    fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
    stand_in_exists(&client, &ns).await?;
    let stand_in = fixture::stand_in_pods(&client, &ns)
        .await?
        .first()
        .map(|p| p.name_any())
        .context("no stand-in")?;
    let uncordon = Uncordon {
        kubectl: env.cluster.kubectl(),
        node: node.clone(),
    };
    let drain = |force: bool| {
        let mut command = env.cluster.kubectl_command();
        command
            .args([
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
            ])
            .args(["--timeout", "120s"]);
        if force {
            command.arg("--force");
        }
        async move {
            let out = command.output().await?;
            let said = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            eprintln!("[drain force={force}] {}: {said}", out.status);
            anyhow::Ok((out.status.success(), said))
        }
    };
    let (drained, said) = drain(false).await?;
    ensure!(
        !drained && said.contains("declare no controller") && said.contains(&stand_in),
        "a plain drain did not stop at the stand-in: {said}"
    );
    let (drained, said) = drain(true).await?;
    ensure!(drained, "kubectl drain --force failed: {said}");
    let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
    let status = done.status.clone().unwrap_or_default();
    let volume = status.volumes.first().context("no volume")?;
    eprintln!("[drain] ended {:?}: {}", status.phase, texts(&done));
    match status.phase {
        // The node agent finished before the eviction.
        Phase::Completed => same_tree(&want, &dir)?,
        // Evicted before or after a node agent took the PodVolumeRestore: either way the
        // message names the eviction, and says the volume may be a mix exactly when an
        // agent had begun writing it.
        Phase::Failed => {
            let message = volume.message.as_deref().unwrap_or_default();
            ensure!(
                message.contains("evicted")
                    && volume.partly_written == message.contains("mix of old and restored"),
                "{volume:#?}"
            )
        }
        other => anyhow::bail!("ended {other:?}: {status:#?}"),
    }
    refills_pods_gone(&client, &ns).await?;
    drop(uncordon);
    controller_whole(&client).await?;
    fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
    nothing_left_behind(&client, &ns, &done).await?;
    forget(&client, &ns, &backup).await
}

/// Uncordons a node when this goes, whatever the test did.
struct Uncordon {
    kubectl: std::path::PathBuf,
    node: String,
}

impl Drop for Uncordon {
    fn drop(&mut self) {
        let status = std::process::Command::new(&self.kubectl)
            .args(["uncordon", &self.node])
            .stdout(std::process::Stdio::null())
            .status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("could not uncordon {}: {status:?}", self.node);
        }
    }
}

/// Held shared by the cases that freeze a node and resume it, and alone by those that
/// take a node away (deleted, or drained): those move refill's own controller pods,
/// which must not land on a node another case has frozen.
static TAKES_A_NODE_AWAY: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

macro_rules! node_fault {
    ($name:ident, $label:literal, $mib:literal, $when:ident, Back) => {
        #[tokio::test]
        async fn $name() -> Result<()> {
            let _shared = TAKES_A_NODE_AWAY.read().await;
            let node = borrow_node().await?;
            run_test($label, |env| async move {
                frozen(&env, &node.0, $mib, When::$when, Fate::Back).await
            })
            .await
        }
    };
    ($name:ident, $label:literal, $mib:literal, $when:ident, Deleted) => {
        #[tokio::test]
        async fn $name() -> Result<()> {
            let _alone = TAKES_A_NODE_AWAY.write().await;
            let node = borrow_node().await?;
            run_test($label, |env| async move {
                frozen(&env, &node.0, $mib, When::$when, Fate::Deleted).await
            })
            .await
        }
    };
}

node_fault!(
    frozen_while_the_consumers_go,
    "nf-consumers-back",
    8,
    ConsumersGoing,
    Back
);
node_fault!(
    lost_while_the_consumers_go,
    "nf-consumers-lost",
    8,
    ConsumersGoing,
    Deleted
);
node_fault!(
    frozen_once_the_stand_in_is_made,
    "nf-stand-in-back",
    8,
    StandInMade,
    Back
);
node_fault!(
    lost_once_the_stand_in_is_made,
    "nf-stand-in-lost",
    8,
    StandInMade,
    Deleted
);
node_fault!(
    frozen_while_data_moves,
    "nf-moving-back",
    64,
    DataMoving,
    Back
);
node_fault!(
    lost_while_data_moves,
    "nf-moving-lost",
    64,
    DataMoving,
    Deleted
);
node_fault!(
    frozen_as_the_stand_in_goes,
    "nf-removal-back",
    8,
    StandInRemoval,
    Back
);
node_fault!(
    lost_as_the_stand_in_goes,
    "nf-removal-lost",
    8,
    StandInRemoval,
    Deleted
);
node_fault!(
    frozen_while_the_files_are_set_aside,
    "nf-aside-back",
    8,
    SettingAside,
    Back
);
node_fault!(
    lost_while_the_files_are_set_aside,
    "nf-aside-lost",
    8,
    SettingAside,
    Deleted
);

#[tokio::test]
async fn a_drain_mid_restore_stops_at_the_stand_in_unless_forced() -> Result<()> {
    let _alone = TAKES_A_NODE_AWAY.write().await;
    let node = borrow_node().await?;
    run_test(
        "nf-drain",
        |env| async move { drained(&env, &node.0).await },
    )
    .await
}
