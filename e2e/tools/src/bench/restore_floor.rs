//! The restore floor: the floor plus the one thing a restore through Velero's node
//! agent cannot do without, done by the bench itself with no record kept and no check
//! made. Per namespace, all at once: scale the Deployment to 0, see its pods go, start
//! a stand-in pod (refill's own manifest, restore-wait and all), hand the node agent a
//! PodVolumeRestore once restore-wait runs, delete the stand-in once it is Completed,
//! scale back once the stand-in is gone; then see every pod Ready.
//!
//! An exact restore (refill's default, `extraFiles: Delete`) must also clear the
//! volume before the node agent writes and remove what it held after: the least that
//! takes is what refill's stand-in does in the same pod, so the exact floor's stand-in
//! carries the same set-aside and tidy containers, its PodVolumeRestore waits for the
//! set-aside's report and its deletion for the tidy's end. Compared with a floor that
//! skips them, an exact restore would be charged for work the floor never did.
//!
//! The floor says what stopping and starting the workloads costs; this says what a
//! restore costs the cluster before any bookkeeping. refill over the restore floor is
//! what its own records, checks and status writes add.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateTerminated, ContainerStatus, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use refill::api::{DataRestore, PodVolumeBackup, PodVolumePhase, PodVolumeRestore, VolumeStatus};
use refill::controller::DEFAULT_COPIER_IMAGE;
use refill::controller::build::copier::{self, SET_ASIDE_CONTAINER, TIDY_CONTAINER};
use refill::controller::build::pod_volume_restore::pod_volume_restore;
use refill::controller::build::restore_helper::{self, HelperSource};
use refill::controller::build::stand_in::{self, StandIn};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use super::IN_FLIGHT;
use super::scene::{APP, BACKUP, CLAIM, RUN_LABEL, Scene, Side, is_helper};
use super::watch::Watched;
use refill_e2e::is_pod_ready;
use refill_e2e::node_agent::decide;

/// How long the whole restore floor may take.
const WAIT: Duration = Duration::from_secs(1800);
/// The stand-ins' name, one per namespace.
const STAND_IN: &str = "restore-floor";

/// Where one namespace is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The scale-down is to be sent.
    Start,
    /// Scaled to 0: its pods are to go.
    Draining,
    /// The stand-in is made: restore-wait is to run.
    StandingIn,
    /// The PodVolumeRestore is made: it is to complete.
    Restoring,
    /// The stand-in is deleted: it is to go.
    Clearing,
    /// Scaled back: its pods are to be Ready.
    Returning,
    Done,
}

/// What one namespace's objects look like now.
#[derive(Default)]
struct Seen {
    /// The Deployment's pods, terminating ones too.
    app_pods: usize,
    app_ready: usize,
    stand_in: Option<Arc<Pod>>,
}

/// The next request of a namespace at `stage`, if what it waits for is there.
#[derive(Debug, PartialEq, Eq)]
enum Act {
    Scale(i32),
    CreateStandIn,
    CreateRestore,
    DeleteStandIn,
}

/// Pure: where a namespace goes from `stage` given what is seen. Returns the request
/// to send (the stage moves on when it is answered) or the next stage outright.
/// `exact`: the stand-in sets the files aside first and tidies last.
fn step(
    stage: Stage,
    seen: &Seen,
    restored: bool,
    replicas: i32,
    exact: bool,
) -> (Option<Act>, Option<Stage>) {
    let stand_in = seen.stand_in.as_deref();
    match stage {
        Stage::Start => (Some(Act::Scale(0)), None),
        Stage::Draining if seen.app_pods == 0 && stand_in.is_none() => {
            (Some(Act::CreateStandIn), None)
        }
        Stage::StandingIn
            if stand_in.is_some_and(|pod| {
                decide::restore_wait_running(pod) && (!exact || set_aside_reported(pod))
            }) =>
        {
            (Some(Act::CreateRestore), None)
        }
        // restore-wait ended too: its helper removed the done marker from the volume.
        Stage::Restoring
            if restored
                && stand_in.is_some_and(|pod| {
                    decide::restore_wait_ended(pod) && (!exact || tidy_ended(pod))
                }) =>
        {
            (Some(Act::DeleteStandIn), None)
        }
        Stage::Clearing if seen.stand_in.is_none() => (Some(Act::Scale(replicas)), None),
        Stage::Returning if seen.app_ready == replicas as usize => (None, Some(Stage::Done)),
        _ => (None, None),
    }
}

/// Whether the stand-in's set-aside ended with its report (what refill waits for before
/// the node agent may write).
fn set_aside_reported(pod: &Pod) -> bool {
    ended(
        pod.status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref()),
        SET_ASIDE_CONTAINER,
    )
    .is_some_and(|t| t.message.is_some())
}

/// Whether the stand-in's tidy ended: what was set aside is removed.
fn tidy_ended(pod: &Pod) -> bool {
    ended(
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref()),
        TIDY_CONTAINER,
    )
    .is_some()
}

fn ended<'a>(
    statuses: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStateTerminated> {
    statuses?
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
}

fn next_stage(act: &Act) -> Stage {
    match act {
        Act::Scale(0) => Stage::Draining,
        Act::CreateStandIn => Stage::StandingIn,
        Act::CreateRestore => Stage::Restoring,
        Act::DeleteStandIn => Stage::Clearing,
        Act::Scale(_) => Stage::Returning,
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RestoreFloorRun {
    pub deployments: usize,
    /// From the first scale-down to every pod Ready again.
    pub wall: Duration,
    /// Seconds after the start: the last stand-in created, the last PodVolumeRestore
    /// Completed, the last scale-up answered.
    pub last_stand_in: f64,
    pub last_restored: f64,
    pub last_scaled_up: f64,
    /// Writes the bench made: two scales, a stand-in, a PodVolumeRestore and a delete
    /// per Deployment.
    pub writes: usize,
    /// CPU seconds the whole machine spent from the first scale-down to all Ready.
    pub machine_cpu: f64,
}

/// Everything fixed before the clock starts, as a controller's caches would hold it.
struct Ready {
    replicas: BTreeMap<String, i32>,
    backups: HashMap<String, PodVolumeBackup>,
    owner: DataRestore,
    restore_wait: k8s_openapi::api::core::v1::Container,
    /// An exact restore: set-aside and tidy in the stand-in.
    exact: bool,
}

async fn prepare(
    admin: &Client,
    scene: &Scene,
    namespaces: &[String],
    exact: bool,
) -> Result<Ready> {
    let deployments = Api::<Deployment>::all(admin.clone())
        .list(&ListParams::default().fields(&format!("metadata.name={APP}")))
        .await?;
    let replicas: BTreeMap<String, i32> = deployments
        .items
        .iter()
        .filter_map(|d| {
            let ns = d.namespace()?;
            namespaces.contains(&ns).then(|| {
                let r = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                (ns, r)
            })
        })
        .collect();
    ensure!(
        replicas.len() == namespaces.len(),
        "found {} of the {} Deployments",
        replicas.len(),
        namespaces.len()
    );
    let backups: HashMap<String, PodVolumeBackup> =
        Api::<PodVolumeBackup>::namespaced(admin.clone(), &scene.velero_ns)
            .list(&ListParams::default().labels(&format!("velero.io/backup-name={BACKUP}")))
            .await?
            .items
            .into_iter()
            .filter_map(|pvb| Some((pvb.spec.pod.namespace.clone()?, pvb)))
            .filter(|(ns, _)| replicas.contains_key(ns))
            .collect();
    ensure!(
        backups.len() == namespaces.len(),
        "found PodVolumeBackups for {} of the {} namespaces",
        backups.len(),
        namespaces.len()
    );
    // The node agent names restore-wait's done file after the PodVolumeRestore's first
    // owner; a ConfigMap of the run stands for the restore, so that the garbage
    // collector finds the owner there.
    let owner_map = Api::<ConfigMap>::namespaced(admin.clone(), &scene.velero_ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": STAND_IN, "labels": {RUN_LABEL: scene.run_id}}
            }))?,
        )
        .await
        .context("creating the restore floor's owner")?;
    let mut owner = DataRestore::new(STAND_IN, Default::default());
    owner.metadata.namespace = Some(scene.velero_ns.clone());
    owner.metadata.uid = owner_map.uid();
    let restore_wait = restore_helper::container(
        owner.metadata.uid.as_deref().unwrap_or_default(),
        "data",
        None,
        &HelperSource::default(),
        None,
    )
    .map_err(anyhow::Error::msg)?;
    Ok(Ready {
        replicas,
        backups,
        owner,
        restore_wait,
        exact,
    })
}

/// The restore floor over the Deployments of `side`, which must be up with all their
/// pods Ready and backed up in the run's backup; it leaves them so, their files
/// restored once more. `exact`: as a restore with `extraFiles: Delete` (see above).
pub async fn run(
    admin: &Client,
    scene: &Scene,
    side: Side,
    exact: bool,
) -> Result<RestoreFloorRun> {
    let namespaces = scene.namespaces(side);
    let pods = Watched::<Pod>::start(
        Api::all(admin.clone()),
        watcher::Config::default().labels(&scene.run_selector()),
    );
    let restores = Watched::<PodVolumeRestore>::start(
        Api::namespaced(admin.clone(), &scene.velero_ns),
        watcher::Config::default(),
    );
    let ready = Arc::new(prepare(admin, scene, &namespaces, exact).await?);
    pods.until("the pods before the restore floor", WAIT, |p| {
        super::watch::all_ready(p, &ready.replicas)
    })
    .await?;
    restores
        .until(
            "the PodVolumeRestores listed",
            WAIT,
            |_| Ok::<_, String>(()),
        )
        .await?;

    let cpu_before = super::cpu::machine_busy();
    let started = Instant::now();
    let since = |t: Instant| t.duration_since(started).as_secs_f64();
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Act, Result<()>)>();
    let mut stages: BTreeMap<String, (Stage, bool)> = ready
        .replicas
        .keys()
        .map(|ns| (ns.clone(), (Stage::Start, false)))
        .collect();
    let (mut last_stand_in, mut last_restored, mut last_scaled_up) = (0.0, 0.0, 0.0);
    let mut writes = 0;
    let mut pod_changes = pods.changes();
    let mut restore_changes = restores.changes();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let pods_now = pods.snapshot();
        let seen = seen_by_namespace(&pods_now);
        let completed = completed_restores(&restores.snapshot());
        for (ns, (stage, busy)) in &mut stages {
            if *busy {
                continue;
            }
            let here = seen.get(ns.as_str()).map_or(&Seen::EMPTY, |s| s);
            let restored = completed.contains(&restore_name(ns));
            match step(*stage, here, restored, ready.replicas[ns], ready.exact) {
                (Some(act), _) => {
                    if act == Act::DeleteStandIn {
                        last_restored = since(Instant::now());
                    }
                    *busy = true;
                    writes += 1;
                    let (admin, ready, limit, done) =
                        (admin.clone(), ready.clone(), limit.clone(), done_tx.clone());
                    let (ns, velero_ns, run_id) =
                        (ns.clone(), scene.velero_ns.clone(), scene.run_id.clone());
                    let stand_in = here.stand_in.clone();
                    tokio::spawn(async move {
                        let _slot = limit.acquire().await;
                        let result =
                            send(&admin, &ready, &ns, &velero_ns, &run_id, &act, stand_in).await;
                        let _ = done.send((ns, act, result));
                    });
                }
                (None, Some(next)) => *stage = next,
                (None, None) => {}
            }
        }
        if stages.values().all(|(stage, _)| *stage == Stage::Done) {
            break;
        }
        tokio::select! {
            answered = done_rx.recv() => {
                let (ns, act, result) = answered.expect("the loop holds a sender");
                result.with_context(|| format!("{act:?} in {ns}"))?;
                let now = since(Instant::now());
                match act {
                    Act::CreateStandIn => last_stand_in = now,
                    Act::Scale(r) if r > 0 => last_scaled_up = now,
                    _ => {}
                }
                stages.insert(ns, (next_stage(&act), false));
            }
            _ = pod_changes.changed() => {}
            _ = restore_changes.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {
                let left: Vec<_> = stages.iter().filter(|(_, (s, _))| *s != Stage::Done).take(5).collect();
                bail!("the restore floor did not end within {WAIT:?}; still going: {left:?}");
            }
        }
    }
    let wall = started.elapsed();
    let machine_cpu = super::cpu::machine_busy() - cpu_before;
    cleanup(admin, scene).await?;
    eprintln!(
        "[bench] restore floor: {} volumes restored in place in {:.2}s",
        stages.len(),
        wall.as_secs_f64()
    );
    Ok(RestoreFloorRun {
        deployments: stages.len(),
        wall,
        last_stand_in,
        last_restored,
        last_scaled_up,
        writes,
        machine_cpu,
    })
}

impl Seen {
    const EMPTY: Seen = Seen {
        app_pods: 0,
        app_ready: 0,
        stand_in: None,
    };
}

fn seen_by_namespace(pods: &[Arc<Pod>]) -> HashMap<&str, Seen> {
    let mut seen: HashMap<&str, Seen> = HashMap::new();
    for pod in pods {
        let Some(ns) = pod.metadata.namespace.as_deref() else {
            continue;
        };
        let entry = seen.entry(ns).or_default();
        if is_helper(pod) {
            if pod.name_any() == STAND_IN {
                entry.stand_in = Some(pod.clone());
            }
        } else {
            entry.app_pods += 1;
            if pod.metadata.deletion_timestamp.is_none() && is_pod_ready(pod) {
                entry.app_ready += 1;
            }
        }
    }
    seen
}

fn completed_restores(restores: &[Arc<PodVolumeRestore>]) -> std::collections::HashSet<String> {
    restores
        .iter()
        .filter(|r| {
            r.status.as_ref().and_then(|s| s.phase.as_ref()) == Some(&PodVolumePhase::Completed)
        })
        .map(|r| r.name_any())
        .collect()
}

fn restore_name(ns: &str) -> String {
    format!("{STAND_IN}-{ns}")
}

/// One request of the restore floor.
async fn send(
    admin: &Client,
    ready: &Ready,
    ns: &str,
    velero_ns: &str,
    run_id: &str,
    act: &Act,
    stand_in: Option<Arc<Pod>>,
) -> Result<()> {
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    match act {
        Act::Scale(replicas) => {
            Api::<Deployment>::namespaced(admin.clone(), ns)
                .patch_scale(
                    APP,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await?;
        }
        Act::CreateStandIn => {
            let pvb = &ready.backups[ns];
            let mut pod = stand_in::pod(StandIn {
                name: STAND_IN.to_string(),
                namespace: ns,
                claim: CLAIM,
                volume: &pvb.spec.volume,
                restore_key: format!("{velero_ns}/{STAND_IN}"),
                restore_uid: ready.owner.metadata.uid.as_deref().unwrap_or_default(),
                candidate_nodes: &[],
                security: None,
                tolerations: &[],
                image: stand_in::DEFAULT_IMAGE,
                restore_wait: ready.restore_wait.clone(),
                set_aside_and_tidy: ready.exact.then(|| {
                    copier::in_stand_in(
                        DEFAULT_COPIER_IMAGE,
                        &pvb.spec.volume,
                        &copier::aside_dir(ready.owner.metadata.uid.as_deref().unwrap_or_default()),
                    )
                }),
            });
            pod.labels_mut()
                .insert(RUN_LABEL.to_string(), run_id.to_string());
            pods.create(&PostParams::default(), &pod).await?;
        }
        Act::CreateRestore => {
            let pod = stand_in.context("the stand-in went")?;
            let pvb = &ready.backups[ns];
            let volume = VolumeStatus {
                pvc: format!("{ns}/{CLAIM}"),
                volume: pvb.spec.volume.clone(),
                ..Default::default()
            };
            let mut pvr = pod_volume_restore(&ready.owner, &restore_name(ns), &volume, pvb, &pod);
            // The owner is the run's ConfigMap, not a DataRestore.
            pvr.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: STAND_IN.into(),
                    uid: ready.owner.metadata.uid.clone().unwrap_or_default(),
                    ..Default::default()
                },
            ]);
            Api::<PodVolumeRestore>::namespaced(admin.clone(), velero_ns)
                .create(&PostParams::default(), &pvr)
                .await?;
        }
        Act::DeleteStandIn => {
            pods.delete(STAND_IN, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

/// Removes the PodVolumeRestores (through their owner) once the clock stopped.
async fn cleanup(admin: &Client, scene: &Scene) -> Result<()> {
    Api::<ConfigMap>::namespaced(admin.clone(), &scene.velero_ns)
        .delete(STAND_IN, &DeleteParams::foreground())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_waits_for_its_own_sign() {
        let empty = Seen::default();
        assert_eq!(
            step(Stage::Start, &empty, false, 1, false),
            (Some(Act::Scale(0)), None)
        );
        let draining = Seen {
            app_pods: 1,
            ..Default::default()
        };
        assert_eq!(
            step(Stage::Draining, &draining, false, 1, false),
            (None, None)
        );
        assert_eq!(
            step(Stage::Draining, &empty, false, 1, false),
            (Some(Act::CreateStandIn), None)
        );
        assert_eq!(
            step(Stage::Restoring, &empty, false, 1, false),
            (None, None)
        );
        let helper = |state: serde_json::Value| Seen {
            stand_in: Some(Arc::new(
                serde_json::from_value(json!({
                    "spec": {"containers": [], "initContainers": [{"name": "restore-wait"}]},
                    "status": {"initContainerStatuses": [
                        {"name": "restore-wait", "state": state, "ready": false,
                         "restartCount": 0, "image": "", "imageID": ""}
                    ]}
                }))
                .unwrap(),
            )),
            ..Default::default()
        };
        let waiting = helper(json!({"running": {}}));
        assert_eq!(
            step(Stage::Restoring, &waiting, true, 1, false),
            (None, None),
            "restore-wait still runs"
        );
        let ended = helper(json!({"terminated": {"exitCode": 0}}));
        assert_eq!(
            step(Stage::Restoring, &ended, true, 1, false),
            (Some(Act::DeleteStandIn), None)
        );
        assert_eq!(
            step(Stage::Clearing, &empty, true, 2, false),
            (Some(Act::Scale(2)), None)
        );
        let back = Seen {
            app_pods: 2,
            app_ready: 2,
            ..Default::default()
        };
        assert_eq!(
            step(Stage::Returning, &back, true, 2, false),
            (None, Some(Stage::Done))
        );
        assert_eq!(next_stage(&Act::Scale(0)), Stage::Draining);
        assert_eq!(next_stage(&Act::Scale(1)), Stage::Returning);
    }

    #[test]
    fn an_exact_floor_waits_for_the_set_aside_report_and_the_tidy() {
        let stand_in = |init: serde_json::Value, main: serde_json::Value| Seen {
            stand_in: Some(Arc::new(
                serde_json::from_value(json!({
                    "spec": {"containers": [{"name": "tidy"}],
                             "initContainers": [{"name": "set-aside"}, {"name": "restore-wait"}]},
                    "status": {"initContainerStatuses": init, "containerStatuses": main}
                }))
                .unwrap(),
            )),
            ..Default::default()
        };
        let status = |name: &str, state: serde_json::Value| {
            json!({"name": name, "state": state, "ready": false, "restartCount": 0,
                   "image": "", "imageID": ""})
        };
        let waiting = json!({"waiting": {}});
        let running = json!({"running": {}});
        // kwok shows the set-aside exited before it ran; its report comes after.
        let unreported = stand_in(
            json!([
                status("set-aside", json!({"terminated": {"exitCode": 0}})),
                status("restore-wait", running.clone())
            ]),
            json!([status("tidy", waiting.clone())]),
        );
        assert_eq!(
            step(Stage::StandingIn, &unreported, false, 1, true),
            (None, None)
        );
        assert_eq!(
            step(Stage::StandingIn, &unreported, false, 1, false),
            (Some(Act::CreateRestore), None),
            "a floor that keeps extra files does not wait for it"
        );
        let reported = |rw: serde_json::Value, tidy: serde_json::Value| {
            stand_in(
                json!([
                    status(
                        "set-aside",
                        json!({"terminated": {"exitCode": 0, "message": "{}"}})
                    ),
                    status("restore-wait", rw)
                ]),
                json!([status("tidy", tidy)]),
            )
        };
        assert_eq!(
            step(
                Stage::StandingIn,
                &reported(running.clone(), waiting),
                false,
                1,
                true
            ),
            (Some(Act::CreateRestore), None)
        );
        let done = json!({"terminated": {"exitCode": 0}});
        assert_eq!(
            step(
                Stage::Restoring,
                &reported(done.clone(), running),
                true,
                1,
                true
            ),
            (None, None),
            "the tidy still runs"
        );
        assert_eq!(
            step(
                Stage::Restoring,
                &reported(done.clone(), done),
                true,
                1,
                true
            ),
            (Some(Act::DeleteStandIn), None)
        );
    }
}
