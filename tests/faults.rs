//! The fault matrix (issue 11): a restore hit by a fault at each step must still end
//! cleanly, and refill must never write into a volume while its application runs.
//!
//! * The controller killed (its task aborted wherever it is, as kill -9 does) at each
//!   phase boundary, for a Deployment, a StatefulSet with three claims and a
//!   ReadWriteMany claim shared by two Deployments; a new controller then finishes.
//! * Faults from outside: the node agent restarted mid-copy, the stand-in pod deleted,
//!   a stand-in in a namespace whose quota requires requests or refused by admission,
//!   the PodVolumeRestore or the PVC deleted, the consumer re-scaled by someone in each
//!   volume phase, a CronJob mounting the claim, no node agent at all.
//! * Two restores of one PVC created at the same moment, ten times over.
//! * The API server restarted mid-copy, on a cluster of this test's own.
//! * A node that stops answering mid-restore: back within refill's grace, given up
//!   after it, or deleted for good (`faults/node.rs`).
//!
//! Every case checks the same end state: the DataRestore ends (Completed,
//! PartiallyFailed, Failed or Canceled) within a bound and loses its finalizer; every
//! consumer is back at its replica count (or, with `onFailure: KeepStopped`, stopped
//! with the record that brings it back); no stand-in pod is left; no PodVolumeRestore
//! is left running (it ended, or it was asked to cancel); and no write of the simulated
//! node agent (it logs each, see `refill_e2e::node_agent::writes`) overlaps the time a
//! pod of that claim other than a stand-in ran (a pod watch keeps every pod's life, so
//! deleted pods count too).
//!
//! Cases run side by side, each in its own namespace; each table prints a line per case.
//! `REFILL_FAULTS=<text>` runs only the cases whose name contains the text;
//! `REFILL_FAULTS_CONCURRENCY` sets how many run at once (default 4).

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use refill::api::{
    ConsumerPolicy, ConsumerState, DataRestore, DataRestoreSpec, FailurePolicy, Phase,
    PodVolumePhase, PodVolumeRestore, VolumePhase,
};
use refill::labels;
use refill_e2e::audit;
use refill_e2e::cluster::Cluster;
use refill_e2e::controller_process::{ControllerKind, ControllerProcess};
use refill_e2e::fixture::{self, BackedUpVolume, Observer, phase};
use refill_e2e::node_agent::{self, NodeAgentConfig, NodeAgentHandle};
use refill_e2e::{OwnCluster, TEST_NAMESPACE_LABEL, TestEnv, run_test, run_test_on, wait_for};
use serde_json::json;

/// How long a restore may take to end after its fault.
const BOUND: Duration = Duration::from_secs(90);
/// For faults that a correct refill ends at once (a refused stand-in, a re-scale).
const SHORT_BOUND: Duration = Duration::from_secs(45);
/// Setting a scene up: pods starting, watches listing.
const SETUP: Duration = Duration::from_secs(60);
/// Things that follow the end of a restore: pods coming back, stand-ins going.
const SETTLE: Duration = Duration::from_secs(30);
/// How long a killed controller stays down before a new one starts.
const DOWNTIME: Duration = Duration::from_secs(1);
/// Each snapshot's size, and the node agent's copy speed: two seconds per volume, so
/// that "copying" is a state a test can see and act in.
const SNAPSHOT_BYTES: usize = 256 * 1024;
const COPY_RATE: u64 = 128 * 1024;
/// Refill's time to notice a pod someone else started, while the node agent still
/// copies: only for the cases where the test itself starts consumer pods.
const REACTION: Duration = Duration::from_secs(3);
const DATA_FILE: &str = "data.bin";

// ------------------------------------------------------------------------------------
// Scenes

/// What mounts the restored claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Deployment `web` (2 replicas) on claim `data`.
    Deployment,
    /// StatefulSet `db` (3 replicas), claims `data-db-0..2` on three nodes.
    StatefulSet,
    /// ReadWriteMany claim `shared` mounted by Deployments `front` (2) and `back` (1).
    Rwx,
}

impl Shape {
    fn label(self) -> &'static str {
        match self {
            Shape::Deployment => "deployment",
            Shape::StatefulSet => "statefulset-3-claims",
            Shape::Rwx => "rwx-claim-2-deployments",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Deployment,
    StatefulSet,
}

#[derive(Clone, Debug)]
struct Workload {
    kind: Kind,
    name: String,
    replicas: i32,
}

#[derive(Clone, Debug)]
struct Claim {
    name: String,
    dir: PathBuf,
    content: Vec<u8>,
}

#[derive(Clone, Debug)]
struct App {
    claims: Vec<Claim>,
    workloads: Vec<Workload>,
}

/// A case's world: the shared [`fixture::Scene`] (refill installed, data directories),
/// its namespace watched, and the log of the node agent's writes.
struct Scene {
    scene: fixture::Scene,
    write_log: PathBuf,
    watch: Observer,
}

impl Deref for Scene {
    type Target = fixture::Scene;

    fn deref(&self) -> &fixture::Scene {
        &self.scene
    }
}

fn content(claim: &str) -> Vec<u8> {
    format!("{claim}: the good data\n")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(SNAPSHOT_BYTES)
        .collect()
}

/// The restore as one line: phase, volumes, consumers, errors.
fn describe(dr: Option<&DataRestore>) -> String {
    let Some(dr) = dr else {
        return "(the DataRestore is gone)".into();
    };
    let Some(status) = &dr.status else {
        return "(no status)".into();
    };
    let volumes: Vec<String> = status
        .volumes
        .iter()
        .map(|v| {
            format!(
                "{}={:?}{}",
                v.pvc,
                v.phase,
                v.message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    let consumers: Vec<String> = status
        .consumers
        .iter()
        .map(|c| format!("{:?}/{}={:?}@{:?}", c.kind, c.name, c.state, c.replicas))
        .collect();
    format!(
        "phase {:?}; volumes [{}]; consumers [{}]; errors {:?}; warnings {:?}",
        status.phase,
        volumes.join(", "),
        consumers.join(", "),
        status.errors,
        status.warnings
    )
}

/// Every text the restore shows a user: errors, warnings, volume messages, conditions.
fn texts(dr: &DataRestore) -> String {
    let Some(status) = &dr.status else {
        return String::new();
    };
    let mut all: Vec<String> = status.errors.clone();
    all.extend(status.warnings.clone());
    all.extend(status.volumes.iter().filter_map(|v| v.message.clone()));
    all.extend(status.conditions.iter().map(|c| c.message.clone()));
    all.join("\n")
}

/// A PodVolumeRestore still running: neither ended nor asked to cancel.
fn running_pvr(pvr: &PodVolumeRestore) -> bool {
    !pvr.phase().is_terminal() && pvr.spec.cancel != Some(true)
}

/// What a case expects at the end.
struct Expect {
    phases: &'static [Phase],
    bound: Duration,
    /// The snapshot's files are in the volumes.
    data: bool,
    /// Consumer pods come back Ready (not when their claim was deleted).
    pods_ready: bool,
    /// Writes may overlap consumer pods by this much (see [`REACTION`]).
    grace: Duration,
    /// The DataRestore may be gone at the end (the case deleted it).
    gone: bool,
}

const ENDED: &[Phase] = &[
    Phase::Completed,
    Phase::PartiallyFailed,
    Phase::Failed,
    Phase::Canceled,
];

impl Expect {
    fn completed() -> Expect {
        Expect {
            phases: &[Phase::Completed],
            bound: BOUND,
            data: true,
            pods_ready: true,
            grace: Duration::ZERO,
            gone: false,
        }
    }

    fn ended() -> Expect {
        Expect {
            phases: ENDED,
            data: false,
            ..Expect::completed()
        }
    }
}

impl Scene {
    async fn new(env: TestEnv) -> Result<Scene> {
        let scene = fixture::Scene::new(env, SETUP).await?;
        let watch = Observer::start(&scene.client, &scene.ns).await?;
        Ok(Scene {
            write_log: scene.scratch.join("writes.jsonl"),
            scene,
            watch,
        })
    }

    /// A simulated node agent that logs its writes; `rate` limits each copy.
    fn node_agent(&self, rate: Option<u64>) -> NodeAgentHandle {
        self.slow_stopping_node_agent(rate, Duration::ZERO)
    }

    /// [`Scene::node_agent`] whose copies go on for `stop_delay` after a cancel, as a
    /// real data mover may: refill must wait for the PodVolumeRestore to end before it
    /// brings consumers back.
    fn slow_stopping_node_agent(&self, rate: Option<u64>, stop_delay: Duration) -> NodeAgentHandle {
        self.node_agent_with(NodeAgentConfig {
            bytes_per_second: rate,
            progress_interval: Duration::from_millis(200),
            write_log: Some(self.write_log.clone()),
            stop_delay,
            ..self.node_agent_config()
        })
    }

    /// The application of `shape`, running, with a backup `b1` of its claims taken
    /// when they were good, and its files broken since.
    async fn app(&self, shape: Shape, requests: bool) -> Result<App> {
        let (claims, workloads): (Vec<(&str, &str)>, Vec<Workload>) = match shape {
            Shape::Deployment => (
                vec![("data", "node-a")],
                vec![Workload {
                    kind: Kind::Deployment,
                    name: "web".into(),
                    replicas: 2,
                }],
            ),
            Shape::StatefulSet => (
                vec![
                    ("data-db-0", "node-a"),
                    ("data-db-1", "node-b"),
                    ("data-db-2", "node-c"),
                ],
                vec![Workload {
                    kind: Kind::StatefulSet,
                    name: "db".into(),
                    replicas: 3,
                }],
            ),
            Shape::Rwx => (
                vec![("shared", "node-c")],
                vec![
                    Workload {
                        kind: Kind::Deployment,
                        name: "front".into(),
                        replicas: 2,
                    },
                    Workload {
                        kind: Kind::Deployment,
                        name: "back".into(),
                        replicas: 1,
                    },
                ],
            ),
        };
        let mut app = App {
            claims: Vec::new(),
            workloads: workloads.clone(),
        };
        for (claim, node) in &claims {
            let files: &[(&str, &[u8])] = &[(DATA_FILE, b"good data, as backed up")];
            let dir = if shape == Shape::Rwx {
                self.shared_volume(claim, node, files).await?
            } else {
                self.volume(claim, node, files).await?
            };
            app.claims.push(Claim {
                name: claim.to_string(),
                dir,
                content: content(claim),
            });
        }
        for w in &workloads {
            match w.kind {
                Kind::Deployment => {
                    let names: Vec<&str> = app.claims.iter().map(|c| c.name.as_str()).collect();
                    let mut template = fixture::pod_template(&w.name, &names);
                    // With `requests`, it asks for a little CPU and memory, for
                    // namespaces whose quota requires that.
                    if requests {
                        template["spec"]["containers"][0]["resources"] =
                            json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
                    }
                    fixture::deployment_of(&self.client, &self.ns, &w.name, w.replicas, template)
                        .await?;
                }
                Kind::StatefulSet => {
                    fixture::statefulset(&self.client, &self.ns, &w.name, w.replicas).await?;
                }
            }
        }
        self.backed_up_and_broken(&app).await?;
        Ok(app)
    }

    /// Waits for the app's pods, takes backup `b1` of its claims, and breaks their
    /// files since.
    async fn backed_up_and_broken(&self, app: &App) -> Result<()> {
        for w in &app.workloads {
            self.ready_pods(&w.name, w.replicas as usize, SETUP).await?;
        }
        let volumes: Vec<BackedUpVolume> = app
            .claims
            .iter()
            .map(|c| self.backed_up(&c.name, "backed-up-pod", &[(DATA_FILE, &c.content)]))
            .collect();
        self.backup("b1", &volumes).await?;
        for c in &app.claims {
            std::fs::write(c.dir.join(DATA_FILE), b"broken")?;
        }
        Ok(())
    }

    /// A request to restore the app's claims from `b1`.
    fn spec(&self, app: &App) -> DataRestoreSpec {
        let claims: Vec<&str> = app.claims.iter().map(|c| c.name.as_str()).collect();
        self.scene.spec("b1", &claims)
    }

    /// [`Self::spec`] with extra files kept: the stand-in is the first pod refill
    /// makes, with no copier emptying the volume before it.
    fn keeping_extra_files(&self, app: &App) -> DataRestoreSpec {
        DataRestoreSpec {
            extra_files: refill::api::ExtraFiles::Keep,
            ..self.spec(app)
        }
    }

    fn live_pods(&self, app: &str) -> Vec<Arc<Pod>> {
        self.watch
            .pods
            .state()
            .into_iter()
            .filter(|p| p.labels().get("app").map(String::as_str) == Some(app))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    async fn ready_pods(&self, app: &str, count: usize, timeout: Duration) -> Result<()> {
        self.watch
            .until(format!("{count} ready pods of {app}"), timeout, |_| {
                let ready = self
                    .live_pods(app)
                    .iter()
                    .filter(|p| refill_e2e::is_pod_ready(p))
                    .count();
                (ready == count).then_some(())
            })
            .await
    }

    /// A workload's replica count and refill's annotations on it, as last seen.
    fn workload(&self, w: &Workload) -> Option<(i32, std::collections::BTreeMap<String, String>)> {
        match w.kind {
            Kind::Deployment => self.watch.deployment(&w.name).map(|d| {
                (
                    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                    d.annotations().clone(),
                )
            }),
            Kind::StatefulSet => self.watch.statefulset(&w.name).map(|d| {
                (
                    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                    d.annotations().clone(),
                )
            }),
        }
    }

    fn any_pvr(&self, phase: PodVolumePhase) -> bool {
        self.watch.pvrs.state().iter().any(|p| p.phase() == phase)
    }

    async fn until_pvr(&self, phase: PodVolumePhase, timeout: Duration) -> Result<()> {
        self.watch
            .until(format!("a PodVolumeRestore {phase:?}"), timeout, |_| {
                self.any_pvr(phase).then_some(())
            })
            .await
    }

    async fn scale(&self, name: &str, replicas: i32, manager: &str) -> Result<()> {
        let params = PatchParams {
            field_manager: Some(manager.into()),
            ..Default::default()
        };
        self.env
            .api::<Deployment>()
            .patch(
                name,
                &params,
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await?;
        Ok(())
    }

    /// Checks the end state every case shares (see the file's doc); returns the
    /// restore as last seen and every problem found.
    async fn check(
        &self,
        app: &App,
        name: &str,
        expect: &Expect,
    ) -> (Option<Arc<DataRestore>>, Vec<String>) {
        let mut problems = Vec::new();
        let ended = self
            .watch
            .until(
                format!("DataRestore {name} to end"),
                expect.bound,
                |o| match o.restore(name) {
                    None if expect.gone => Some(None),
                    Some(dr) if phase(&dr).is_terminal() => Some(Some(dr)),
                    _ => None,
                },
            )
            .await;
        let ended = match ended {
            Ok(None) => true,
            Ok(Some(dr)) => {
                if !expect.phases.contains(&phase(&dr)) {
                    problems.push(format!(
                        "ended {:?}, expected {:?}: {}",
                        phase(&dr),
                        expect.phases,
                        describe(Some(&dr))
                    ));
                }
                true
            }
            Err(_) => {
                let now = self.watch.restore(name);
                problems.push(format!(
                    "did not end within {:?}: {}",
                    expect.bound,
                    describe(now.as_deref())
                ));
                false
            }
        };
        // Whatever is stuck stays stuck: no long waits after a restore that did not end.
        let settle = if ended {
            SETTLE
        } else {
            Duration::from_secs(3)
        };

        if ended {
            let released = self
                .watch
                .until("the finalizer to go", settle, |o| {
                    o.restore(name)
                        .is_none_or(|dr| !dr.finalizers().iter().any(|f| f == labels::FINALIZER))
                        .then_some(())
                })
                .await;
            if released.is_err() {
                problems.push("the DataRestore ended but kept refill's finalizer".into());
            }
        }

        let dr = self.watch.restore(name);
        for w in &app.workloads {
            let kept = dr.as_ref().is_some_and(|dr| {
                dr.status.iter().flat_map(|s| &s.consumers).any(|c| {
                    c.name == w.name
                        && c.state == ConsumerState::KeptStopped
                        && c.replicas == Some(w.replicas)
                })
            });
            let want = format!("{:?} {} back at {} replicas", w.kind, w.name, w.replicas);
            let back = self
                .watch
                .until(&want, settle, |_| {
                    let (replicas, annotations) = self.workload(w)?;
                    let record = annotations.get(labels::ORIGINAL_REPLICAS);
                    let clean = record.is_none() && !annotations.contains_key(labels::QUIESCED_BY);
                    let restored = replicas == w.replicas && clean;
                    let kept_with_record =
                        kept && replicas == 0 && record == Some(&w.replicas.to_string());
                    (restored || kept_with_record).then_some(restored)
                })
                .await;
            match back {
                Ok(true) => {
                    if expect.pods_ready
                        && let Err(e) = self.ready_pods(&w.name, w.replicas as usize, settle).await
                    {
                        problems.push(format!("{:?} {}: {e:#}", w.kind, w.name));
                    }
                }
                Ok(false) => {}
                Err(_) => {
                    let (replicas, annotations) = self.workload(w).unwrap_or_default();
                    let ours: Vec<_> = annotations
                        .iter()
                        .filter(|(k, _)| k.starts_with("refill.dev/"))
                        .collect();
                    problems.push(format!(
                        "{:?} {} at {replicas} replicas (want {}), refill's annotations {ours:?}",
                        w.kind, w.name, w.replicas
                    ));
                }
            }
        }

        let gone = self
            .watch
            .until("stand-in pods to go", settle, |o| {
                o.stand_ins().is_empty().then_some(())
            })
            .await;
        if gone.is_err() {
            let names: Vec<String> = self
                .watch
                .stand_ins()
                .iter()
                .map(|p| p.name_any())
                .collect();
            problems.push(format!("stand-in pods left: {names:?}"));
        }

        // Read from the test's own watch, which after an API server restart may still
        // be relisting: waited for as the stand-ins are, not read once.
        let ended = self
            .watch
            .until("PodVolumeRestores to end", settle, |o| {
                (!o.pvrs.state().iter().any(|p| running_pvr(p))).then_some(())
            })
            .await;
        let running: Vec<String> = self
            .watch
            .pvrs
            .state()
            .iter()
            .filter(|p| running_pvr(p))
            .map(|p| format!("{} ({:?})", p.name_any(), p.phase()))
            .collect();
        if ended.is_err() && !running.is_empty() {
            problems.push(format!(
                "PodVolumeRestores left running, not canceled: {running:?}"
            ));
        }

        match node_agent::read_write_log(&self.write_log) {
            Ok(writes) => problems.extend(fixture::writes_under_running_pods(
                &writes,
                &self.watch.pod_lives(),
                expect.grace,
                SystemTime::now(),
            )),
            Err(e) => problems.push(format!("reading the write log: {e:#}")),
        }

        if expect.data {
            for c in &app.claims {
                match fixture::read(&c.dir, DATA_FILE) {
                    Ok(data) if data == c.content => {}
                    Ok(data) => problems.push(format!(
                        "{} not restored: {} bytes, not the snapshot's {}",
                        c.name,
                        data.len(),
                        c.content.len()
                    )),
                    Err(e) => problems.push(format!("{}: {e:#}", c.name)),
                }
            }
        }
        (dr, problems)
    }
}

fn verdict(problems: Vec<String>) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    bail!("\n  - {}", problems.join("\n  - "))
}

#[path = "faults/node.rs"]
mod node;

// ------------------------------------------------------------------------------------
// Running tables of cases

// Not Send: the fixture's install parses YAML across awaits. The cases run inside the
// test's own task, never spawned.
type Body = Box<dyn FnOnce(TestEnv) -> LocalBoxFuture<'static, Result<()>> + Send>;

struct Case {
    name: String,
    body: Body,
}

fn case<F, Fut>(name: impl Into<String>, body: F) -> Case
where
    F: FnOnce(TestEnv) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + 'static,
{
    Case {
        name: name.into(),
        body: Box::new(move |env| Box::pin(body(env))),
    }
}

fn init_logging() {
    // Quieter than the fixture's default: a table runs dozens of controllers. The
    // client's own lines are off: an API server restart makes hundreds of them, which
    // push a failed test's verdict out of the output CI shows.
    fixture::init_logging("refill=warn,refill_e2e=warn,kube=warn,kube_client=off");
}

fn concurrency() -> usize {
    std::env::var("REFILL_FAULTS_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(4)
}

/// Runs the cases (those `REFILL_FAULTS` selects) side by side, prints a line per
/// case, and fails naming every case that failed.
async fn run_table(title: &str, cases: Vec<Case>) -> Result<()> {
    init_logging();
    let filter = std::env::var("REFILL_FAULTS").ok();
    let selected: Vec<(usize, Case)> = cases
        .into_iter()
        .filter(|c| filter.as_deref().is_none_or(|f| c.name.contains(f)))
        .enumerate()
        .collect();
    if selected.is_empty() {
        eprintln!("{title}: REFILL_FAULTS={filter:?} selects none of its cases");
        return Ok(());
    }
    let total = selected.len();
    let started = Instant::now();
    let mut results: Vec<(usize, String, Duration, Result<()>)> = futures::stream::iter(selected)
        .map(|(i, c)| async move {
            let began = Instant::now();
            let body = c.body;
            let result = run_test(&c.name, body).await;
            let line = match &result {
                Ok(()) => "PASS",
                Err(_) => "FAIL",
            };
            eprintln!(
                "[{title}] {line} {} ({:.1}s)",
                c.name,
                began.elapsed().as_secs_f64()
            );
            (i, c.name, began.elapsed(), result)
        })
        .buffer_unordered(concurrency())
        .collect()
        .await;
    results.sort_by_key(|(i, ..)| *i);
    let mut table = format!(
        "\n===== {title}: {total} cases in {:.0}s =====\n",
        started.elapsed().as_secs_f64()
    );
    let mut failed = 0;
    for (_, name, took, result) in &results {
        match result {
            Ok(()) => table += &format!("PASS {name} ({:.1}s)\n", took.as_secs_f64()),
            Err(e) => {
                failed += 1;
                let why = format!("{:#}", e).replace('\n', "\n       ");
                table += &format!("FAIL {name} ({:.1}s): {why}\n", took.as_secs_f64());
            }
        }
    }
    eprintln!("{table}");
    if failed > 0 {
        bail!("{failed} of {total} cases failed:{table}");
    }
    Ok(())
}

// ------------------------------------------------------------------------------------
// The controller killed at each phase boundary

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Boundary {
    AfterValidation,
    MidQuiesce,
    StandInCreated,
    PvrCreated,
    PvrInProgress,
    MidResume,
    FinalizerRemoval,
}

impl Boundary {
    const ALL: [Boundary; 7] = [
        Boundary::AfterValidation,
        Boundary::MidQuiesce,
        Boundary::StandInCreated,
        Boundary::PvrCreated,
        Boundary::PvrInProgress,
        Boundary::MidResume,
        Boundary::FinalizerRemoval,
    ];

    fn label(self) -> &'static str {
        match self {
            Boundary::AfterValidation => "after-validation",
            Boundary::MidQuiesce => "mid-quiesce",
            Boundary::StandInCreated => "stand-in-created",
            Boundary::PvrCreated => "pvr-created",
            Boundary::PvrInProgress => "pvr-in-progress",
            Boundary::MidResume => "mid-resume",
            Boundary::FinalizerRemoval => "finalizer-removal",
        }
    }
}

impl Scene {
    /// Waits, by watching, until the restore reaches `boundary`; returns what was seen.
    async fn reach(&self, app: &App, name: &str, boundary: Boundary) -> Result<String> {
        let what = format!("{name} to reach {}", boundary.label());
        self.watch
            .until(what, BOUND, |o| {
                let dr = o.restore(name)?;
                let status = dr.status.as_ref();
                let stopped = app
                    .workloads
                    .iter()
                    .filter(|w| {
                        self.workload(w)
                            .is_some_and(|(r, a)| r == 0 || a.contains_key(labels::QUIESCED_BY))
                    })
                    .count();
                let pvrs = o.pvrs.state();
                let reached = match boundary {
                    Boundary::AfterValidation => status.is_some_and(|s| {
                        !matches!(s.phase, Phase::New | Phase::Validating) && !s.volumes.is_empty()
                    }),
                    Boundary::MidQuiesce => stopped > 0,
                    Boundary::StandInCreated => !o.stand_ins().is_empty(),
                    Boundary::PvrCreated => !pvrs.is_empty(),
                    Boundary::PvrInProgress => {
                        pvrs.iter().any(|p| p.phase() == PodVolumePhase::InProgress)
                    }
                    // Every copy done, and a consumer scaled back while refill works.
                    Boundary::MidResume => {
                        !pvrs.is_empty()
                            && pvrs.iter().all(|p| p.phase() == PodVolumePhase::Completed)
                            && app
                                .workloads
                                .iter()
                                .any(|w| self.workload(w).is_some_and(|(r, _)| r == w.replicas))
                    }
                    Boundary::FinalizerRemoval => phase(&dr).is_terminal(),
                };
                reached.then(|| {
                    format!(
                        "{} workloads stopped, {} stand-ins, {} PVRs; {}",
                        stopped,
                        o.stand_ins().len(),
                        pvrs.len(),
                        describe(Some(&dr))
                    )
                })
            })
            .await
    }
}

async fn controller_killed(env: TestEnv, shape: Shape, boundary: Boundary) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(shape, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let controller = s.controller().await?;
    s.restore("r1", s.spec(&app)).await?;
    let seen = s.reach(&app, "r1", boundary).await?;
    controller.kill().await;
    eprintln!("[kill] {}: controller killed with {seen}", s.ns);
    tokio::time::sleep(DOWNTIME).await;
    let _controller = s.controller().await?;
    let (_, problems) = s.check(&app, "r1", &Expect::completed()).await;
    verdict(problems)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_killed_at_each_phase_boundary() -> Result<()> {
    let mut cases = Vec::new();
    for boundary in Boundary::ALL {
        for shape in [Shape::Deployment, Shape::StatefulSet, Shape::Rwx] {
            cases.push(case(
                format!("kill-{}-{}", boundary.label(), shape.label()),
                move |env| controller_killed(env, shape, boundary),
            ));
        }
    }
    run_table("controller killed at each phase boundary", cases).await
}

// ------------------------------------------------------------------------------------
// Faults from outside the controller

async fn node_agent_restarted_mid_copy(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    s.restore("r1", s.spec(&app)).await?;
    s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
    agent.stop().await;
    let _agent = s.node_agent(Some(COPY_RATE));
    let (_, problems) = s.check(&app, "r1", &Expect::ended()).await;
    verdict(problems)
}

/// The stand-in deleted mid-copy, or (`drain`) evicted as `kubectl drain` does: refill
/// sets no PodDisruptionBudget, so a drain is never held up by a restore, and the
/// volume ends as when its stand-in is deleted.
async fn stand_in_deleted_mid_copy(env: TestEnv, drain: bool) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    s.restore("r1", s.spec(&app)).await?;
    s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
    let pods = s.env.api::<Pod>();
    for pod in s.watch.stand_ins() {
        if drain {
            pods.evict(&pod.name_any(), &Default::default()).await?;
        } else {
            pods.delete(&pod.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    let (dr, mut problems) = s.check(&app, "r1", &Expect::ended()).await;
    // The status says what became of the volume: failed because its stand-in went, or
    // retried with a new one.
    let said = dr.as_deref().map(texts).unwrap_or_default();
    if !said.contains("stand-in") {
        problems.push(format!(
            "the status does not say the stand-in pod was deleted: {}",
            describe(dr.as_deref())
        ));
    }
    verdict(problems)
}

async fn stand_in_in_quota_namespace(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, true).await?;
    // Every pod here must ask for CPU and memory; refill's stand-in too.
    s.env
        .create::<ResourceQuota>(json!({
            "metadata": {"name": "requests-required"},
            "spec": {"hard": {"requests.cpu": "8", "requests.memory": "8Gi"}},
        }))
        .await?;
    let quotas = s.env.api::<ResourceQuota>();
    wait_for("the quota to be counted", SETUP, || async {
        let q = quotas.get("requests-required").await?;
        Ok(q.status.and_then(|st| st.hard).is_some().then_some(()))
    })
    .await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    // A timeout, so that a refill that retries the refused stand-in ends anyway.
    let mut spec = s.spec(&app);
    spec.timeout = Some("30s".into());
    s.restore("r1", spec).await?;
    let (_, problems) = s.check(&app, "r1", &Expect::completed()).await;
    verdict(problems)
}

impl Scene {
    /// Restores `app` while the API server refuses stand-in pods: the restore ends
    /// Failed at once, its status carrying the server's words (`said`), and
    /// everything else as every case checks (consumers back, nothing left running).
    async fn refused_stand_in(&self, app: &App, said: &str) -> Result<()> {
        let _agent = self.node_agent(Some(COPY_RATE));
        let _controller = self.controller().await?;
        self.restore("r1", self.keeping_extra_files(app)).await?;
        let expect = Expect {
            phases: &[Phase::Failed],
            bound: SHORT_BOUND,
            ..Expect::ended()
        };
        let (dr, mut problems) = self.check(app, "r1", &expect).await;
        if !dr.as_deref().map(texts).unwrap_or_default().contains(said) {
            problems.push(format!(
                "the status does not carry the API server's refusal ({said:?}): {}",
                describe(dr.as_deref())
            ));
        }
        verdict(problems)
    }
}

/// A LimitRange whose largest CPU limit is below the restore helper's (Velero's
/// default 100m): the stand-in is refused, the restore ends Failed with the API
/// server's words, and the app (within the range) comes back.
async fn stand_in_refused_by_limit_range(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, true).await?;
    s.env
        .create::<k8s_openapi::api::core::v1::LimitRange>(json!({
            "metadata": {"name": "small-containers"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "50m"}}]},
        }))
        .await?;
    s.refused_stand_in(&app, "maximum cpu usage per Container is 50m")
        .await
}

async fn stand_in_refused_by_admission(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let policy = format!("{}-no-stand-ins", s.ns);
    let message = "stand-in pods are not admitted in this namespace";
    let scope = json!({"namespaceSelector": {"matchLabels": {TEST_NAMESPACE_LABEL: s.ns}}});
    let policies = s.env.api_all::<ValidatingAdmissionPolicy>();
    let bindings = s.env.api_all::<ValidatingAdmissionPolicyBinding>();
    let created: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy, "labels": s.env.ns.labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": scope["namespaceSelector"],
            },
            "validations": [{
                "expression": format!("!has(object.metadata.labels) || !('{}' in object.metadata.labels)", labels::ROLE),
                "message": message,
                "reason": "Forbidden",
            }],
        }
    }))?;
    policies.create(&PostParams::default(), &created).await?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": s.env.ns.labels()},
        "spec": {"policyName": policy, "validationActions": ["Deny"], "matchResources": scope},
    }))?;
    bindings.create(&PostParams::default(), &binding).await?;
    let outcome = async {
        // In force once a dry-run pod that looks like a stand-in is refused.
        let probe: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "probe", "namespace": s.ns,
                         "labels": {(labels::ROLE): labels::ROLE_STAND_IN}},
            "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]},
        }))?;
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let pods = s.env.api::<Pod>();
        wait_for("the admission policy to be in force", SETUP, || async {
            match pods.create(&dry_run, &probe).await {
                Err(kube::Error::Api(e)) if e.message.contains(message) => Ok(Some(())),
                _ => Ok(None),
            }
        })
        .await?;
        s.refused_stand_in(&app, message).await
    }
    .await;
    let _ = bindings.delete(&policy, &DeleteParams::default()).await;
    let _ = policies.delete(&policy, &DeleteParams::default()).await;
    outcome
}

async fn pvr_deleted_mid_copy_keep_stopped(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    let mut spec = s.spec(&app);
    spec.on_failure = FailurePolicy::KeepStopped;
    s.restore("r1", spec).await?;
    s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
    let pvrs = Api::<PodVolumeRestore>::namespaced(s.client.clone(), &s.ns);
    for pvr in s.watch.pvrs.state() {
        pvrs.delete(&pvr.name_any(), &DeleteParams::default())
            .await?;
    }
    let (_, problems) = s.check(&app, "r1", &Expect::ended()).await;
    verdict(problems)
}

async fn pvc_deleted_mid_copy(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    s.restore("r1", s.spec(&app)).await?;
    s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
    s.env
        .api::<PersistentVolumeClaim>()
        .delete("data", &DeleteParams::default())
        .await?;
    // The claim goes once nothing mounts it; the app cannot start without it, but its
    // replica count must be back.
    let expect = Expect {
        pods_ready: false,
        ..Expect::ended()
    };
    let (_, problems) = s.check(&app, "r1", &expect).await;
    verdict(problems)
}

/// Someone (a GitOps sync) scales `web` back to 2 while its volume is in `phase`.
async fn consumer_rescaled(env: TestEnv, phase: VolumePhase) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    if phase == VolumePhase::Quiescing {
        // The old pods stay Terminating until released, which keeps refill waiting for
        // the volume to be free: the Quiescing phase lasts as long as the test wants.
        let names: Vec<String> = s.live_pods("web").iter().map(|p| p.name_any()).collect();
        fixture::hold_pods(&s.env.client, s.env.ns.name(), &names).await?;
    }
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    let web = &app.workloads[0];
    let rescaled = async {
        s.restore("r1", s.spec(&app)).await?;
        s.watch
            .until(format!("the volume {phase:?}"), BOUND, |o| {
                let dr = o.restore("r1")?;
                let in_phase = dr
                    .status
                    .as_ref()
                    .is_some_and(|st| st.volumes.iter().any(|v| v.phase == phase));
                let ready = match phase {
                    VolumePhase::Quiescing => s.workload(web).is_some_and(|(r, _)| r == 0),
                    VolumePhase::StartingStandIn => !o.stand_ins().is_empty(),
                    _ => s.any_pvr(PodVolumePhase::InProgress),
                };
                // The stand-in's own watch event may come before the status write.
                (ready && (in_phase || phase == VolumePhase::StartingStandIn)).then_some(())
            })
            .await?;
        s.scale("web", 2, "gitops-sync").await
    }
    .await;
    // Always released: a pod kept by a finalizer would keep the namespace forever.
    fixture::release_pods(&s.env.client, s.env.ns.name()).await?;
    rescaled?;
    let expect = Expect {
        bound: SHORT_BOUND,
        grace: REACTION,
        ..Expect::ended()
    };
    let (_, problems) = s.check(&app, "r1", &expect).await;
    verdict(problems)
}

async fn cronjob_mounting_the_claim(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let dir = s.volume("data", "node-a", &[]).await?;
    let mut template = fixture::pod_template("report", &["data"]);
    template["spec"]["restartPolicy"] = json!("Never");
    // Not due during the test: what matters is that it cannot fire while refill writes.
    s.env
        .create::<CronJob>(json!({
            "metadata": {"name": "report"},
            "spec": {
                "schedule": "0 0 1 1 *",
                "suspend": false,
                "jobTemplate": {"spec": {"backoffLimit": 0, "template": template}},
            }
        }))
        .await?;
    let claim = Claim {
        name: "data".into(),
        dir,
        content: content("data"),
    };
    s.backup(
        "b1",
        &[s.backed_up("data", "report-1", &[(DATA_FILE, &claim.content)])],
    )
    .await?;
    let app = App {
        claims: vec![claim],
        workloads: Vec::new(),
    };
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    let mut spec = s.spec(&app);
    spec.consumers = ConsumerPolicy::Detach;
    s.restore("r1", spec).await?;
    let mut problems = Vec::new();
    let copying = s.until_pvr(PodVolumePhase::InProgress, BOUND).await;
    let suspended = s
        .watch
        .cronjob("report")
        .and_then(|c| c.spec.as_ref().and_then(|sp| sp.suspend));
    match copying {
        Ok(()) if suspended == Some(true) => {}
        Ok(()) => problems.push(format!(
            "CronJob report was not suspended while its claim was being written (suspend: {suspended:?})"
        )),
        Err(e) => problems.push(format!("{e:#}")),
    }
    let (_, more) = s.check(&app, "r1", &Expect::completed()).await;
    problems.extend(more);
    let back = s
        .watch
        .until("CronJob report as it was", SETTLE, |o| {
            let c = o.cronjob("report")?;
            let ours = c.annotations().keys().any(|k| k.starts_with("refill.dev/"));
            (c.spec.as_ref().and_then(|sp| sp.suspend) == Some(false) && !ours).then_some(())
        })
        .await;
    if back.is_err() {
        let c = s.watch.cronjob("report");
        problems.push(format!(
            "CronJob report not as it was: suspend {:?}, annotations {:?}",
            c.as_ref()
                .and_then(|c| c.spec.as_ref().and_then(|sp| sp.suspend)),
            c.as_ref().map(|c| c.annotations().clone())
        ));
    }
    verdict(problems)
}

/// How refill itself rolls a restore back mid-copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rollback {
    Cancel,
    Delete,
    VolumeTimeout,
}

/// Refill rolls back while the node agent copies, and the node agent takes two seconds
/// to stop: the consumers may come back only after the copy ended.
async fn rolled_back_mid_copy(env: TestEnv, how: Rollback) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    // Eight seconds of copying, so the copy is still going when refill rolls back.
    let _agent = s.slow_stopping_node_agent(Some(COPY_RATE / 4), Duration::from_secs(2));
    let _controller = s.controller().await?;
    // The node agent's rollback is the subject: no clearing before it (a 3 s volume
    // timeout would end the volume while the copier empties it).
    let mut spec = s.keeping_extra_files(&app);
    if how == Rollback::VolumeTimeout {
        spec.volume_timeout = Some("3s".into());
    }
    s.restore("r1", spec).await?;
    s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
    let restores = Api::<DataRestore>::namespaced(s.client.clone(), &s.ns);
    match how {
        Rollback::Cancel => {
            let patch = json!({"spec": {"cancel": true}});
            restores
                .patch("r1", &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
        Rollback::Delete => {
            restores.delete("r1", &DeleteParams::default()).await?;
        }
        Rollback::VolumeTimeout => {}
    }
    let expect = Expect {
        phases: match how {
            Rollback::VolumeTimeout => &[Phase::Failed, Phase::PartiallyFailed],
            _ => &[Phase::Canceled],
        },
        gone: how == Rollback::Delete,
        ..Expect::ended()
    };
    let (_, problems) = s.check(&app, "r1", &expect).await;
    verdict(problems)
}

async fn no_node_agent_with_short_timeout(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let _controller = s.controller().await?;
    let mut spec = s.spec(&app);
    spec.timeout = Some("10s".into());
    s.restore("r1", spec).await?;
    let expect = Expect {
        phases: &[Phase::Failed, Phase::PartiallyFailed],
        bound: Duration::from_secs(60),
        ..Expect::ended()
    };
    let (_, problems) = s.check(&app, "r1", &expect).await;
    verdict(problems)
}

/// A namespace that enforces Pod Security `restricted`, its app compliant: the
/// stand-in is admitted, runs as the app's user and group with its fsGroup (so
/// restored files keep their owners), and the restore completes.
async fn stand_in_in_restricted_namespace(env: TestEnv) -> Result<()> {
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
        .patch(
            env.namespace(),
            &PatchParams::default(),
            &Patch::Merge(labels),
        )
        .await?;
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller().await?;
    // refill's copier runs as root, which Pod Security `restricted` refuses: a restore
    // that empties the volume first fails there before anything is stopped (README);
    // this one keeps extra files and needs only the stand-in.
    s.restore("r1", s.keeping_extra_files(&app)).await?;
    let stand_in = s
        .watch
        .until("a stand-in pod", BOUND, |o| {
            o.stand_ins().into_iter().next()
        })
        .await?;
    let (_, mut problems) = s.check(&app, "r1", &Expect::completed()).await;
    let spec = stand_in.spec.clone().unwrap_or_default();
    let pod = spec.security_context.clone().unwrap_or_default();
    if (pod.run_as_user, pod.run_as_group, pod.fs_group) != (Some(1001), Some(1001), Some(1001)) {
        problems.push(format!(
            "the stand-in's pod security is not the app's: {pod:?}"
        ));
    }
    let wait = spec.init_containers.unwrap_or_default().into_iter().next();
    let user = wait.and_then(|c| c.security_context?.run_as_user);
    if user != Some(1001) {
        problems.push(format!("restore-wait runs as {user:?}, not the app's 1001"));
    }
    verdict(problems)
}

/// The Deployment's two replicas as two `refill controller` processes for one
/// namespace: the leader is killed (SIGKILL) while the node agent copies; the
/// standby takes the Lease within its duration and finishes the restore, with one
/// PodVolumeRestore per volume and the consumers back. At no moment do both write:
/// the audit log, by each process's own token, shows every write of the standby
/// after the last of the leader.
async fn leader_killed_mid_copy(env: TestEnv) -> Result<()> {
    let cluster = env.cluster;
    let s = Scene::new(env).await?;
    let app = s.app(Shape::Deployment, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let kind = ControllerKind::Refill(PathBuf::from(env!("CARGO_BIN_EXE_refill")));
    let lease = ["--lease-duration", &format!("{}s", LEASE.as_secs())];
    let cursor = audit::Cursor::now(cluster)?;
    let start = |name: &'static str| {
        ControllerProcess::start_named(cluster, &kind, &s.ns, &s.scratch, name, &lease)
    };
    let leader = start("replica-a").await?;
    s.lease_held_by("replica-a").await?;
    let standby = start("replica-b").await?;
    s.restore("r1", s.spec(&app)).await?;
    s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
    let leader_token = leader.credential_id().to_string();
    let killed = SystemTime::now();
    leader.stop().await;
    let (_, mut problems) = s.check(&app, "r1", &Expect::completed()).await;
    if let Err(e) = s.lease_held_by("replica-b").await {
        problems.push(format!("{e:#}"));
    }

    let events = cursor.read_since(cluster)?;
    let writes = |token: &str| -> Vec<(SystemTime, String)> {
        audit::filter(&events, token)
            .iter()
            .filter(|e| e.is_write() && e.resource() != "leases")
            .filter_map(|e| Some((e.received()?, format!("{} {}", e.verb, e.resource()))))
            .collect()
    };
    let (first, second) = (writes(&leader_token), writes(standby.credential_id()));
    standby.stop().await;
    let last_of_first = first.iter().max_by_key(|(t, _)| *t);
    let first_of_second = second.iter().min_by_key(|(t, _)| *t);
    match (last_of_first, first_of_second) {
        (Some((a, what_a)), Some((b, what_b))) => {
            if b <= a {
                problems.push(format!(
                    "both replicas wrote: the standby's {what_b} came before the leader's {what_a}"
                ));
            }
            if *b < killed {
                problems.push(format!(
                    "the standby wrote ({what_b}) while the leader lived"
                ));
            }
            let takeover = b.duration_since(killed).unwrap_or_default();
            eprintln!(
                "[leader] {}: {} writes by the leader, {} by the standby, its first {takeover:?} after the kill",
                s.ns,
                first.len(),
                second.len()
            );
            if takeover > LEASE + Duration::from_secs(5) {
                problems.push(format!(
                    "the standby took over {takeover:?} after the kill, lease {LEASE:?}"
                ));
            }
        }
        _ => problems.push(format!(
            "expected writes from both replicas: leader {}, standby {}",
            first.len(),
            second.len()
        )),
    }
    let pvrs = s.watch.pvrs.state();
    if pvrs.len() != app.claims.len() {
        let names: Vec<String> = pvrs.iter().map(|p| p.name_any()).collect();
        problems.push(format!(
            "{} PodVolumeRestores for {} claims: {names:?}",
            pvrs.len(),
            app.claims.len()
        ));
    }
    verdict(problems)
}

/// The workload kinds whose pod templates mount claims, as the audit log names them.
/// What the controller's watches hold for a volume that starts: the pods that mount
/// claims (`src/mounts.rs`) and the seven workload kinds (`src/template_mounts.rs`).
/// Should either index stop answering, the controller would list them instead.
const INDEXED_RESOURCES: [&str; 8] = [
    "pods",
    "deployments",
    "statefulsets",
    "replicasets",
    "daemonsets",
    "replicationcontrollers",
    "jobs",
    "cronjobs",
];

/// A StatefulSet's three claims restored one at a time (`parallel: 1`), the
/// controller's requests read from the audit log by its own token:
/// - each volume that starts looks for its consumers again, and after the first
///   stopped the StatefulSet only its claim templates name it. The answers come from
///   the controller's pod and workload watches: once they run, no list of the
///   namespace's pods or workloads is made, however many volumes start;
/// - the DataRestore's own status is written at once only when its phase, errors or
///   warnings change; counts that follow the volumes' records wait a second;
/// - the volumes' records are listed by the first pass; later passes borrow them.
async fn one_volume_at_a_time(env: TestEnv) -> Result<()> {
    let cluster = env.cluster;
    let s = Scene::new(env).await?;
    let app = s.app(Shape::StatefulSet, false).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let kind = ControllerKind::Refill(PathBuf::from(env!("CARGO_BIN_EXE_refill")));
    let mut cursor = audit::Cursor::now(cluster)?;
    let controller = ControllerProcess::start(cluster, &kind, &s.ns, &s.scratch).await?;
    let token = controller.credential_id().to_string();
    let mut requests = Vec::new();
    let deadline = Instant::now() + SETUP;
    loop {
        let (events, next) = cursor.read(cluster)?;
        cursor = next;
        requests.extend(audit::filter(&events, &token));
        let watching = |resource: &&str| {
            requests
                .iter()
                .any(|e| e.verb == "watch" && e.resource() == *resource)
        };
        if INDEXED_RESOURCES.iter().all(watching) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the controller did not watch pods and every workload kind within {SETUP:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let spec = DataRestoreSpec {
        parallel: Some(1),
        ..s.spec(&app)
    };
    s.restore("r1", spec).await?;
    let (done, mut problems) = s.check(&app, "r1", &Expect::completed()).await;
    requests.extend(audit::filter(&cursor.read_since(cluster)?, &token));
    controller.stop().await;
    let volumes = done
        .as_ref()
        .and_then(|dr| dr.status.as_ref())
        .map_or(0, |st| st.volumes.len());
    if volumes != 3 {
        problems.push(format!(
            "{volumes} volumes restored, not the StatefulSet's 3"
        ));
    }
    let listed: Vec<String> = requests
        .iter()
        .filter(|e| e.verb == "list" && INDEXED_RESOURCES.contains(&e.resource().as_str()))
        .filter(|e| e.object_ref.as_ref().is_some_and(|o| o.namespace == s.ns))
        .map(|e| {
            format!(
                "{} {} {}",
                e.request_received_timestamp,
                e.verb,
                e.resource()
            )
        })
        .collect();
    if !listed.is_empty() {
        problems.push(format!(
            "the controller listed the namespace's pods or workloads, which its watches hold: {listed:?}"
        ));
    }
    // The volumes' records are read from the cluster by the first pass; each pass
    // after borrows them from the controller's memory and gives them back. Measured:
    // two lists over the whole restore (the second, it seems, by a pass after the
    // restore ended and its memory went); one per pass would be dozens.
    let records_listed: Vec<String> = requests
        .iter()
        .filter(|e| e.verb == "list" && e.resource() == "volumepluginrestores")
        .map(|e| e.request_received_timestamp.clone())
        .collect();
    if records_listed.len() > 2 {
        problems.push(format!(
            "the controller listed the VolumePluginRestores {} times ({records_listed:?}): the first pass reads them, the passes after keep them",
            records_listed.len()
        ));
    }
    let mut written: Vec<SystemTime> = requests
        .iter()
        .filter(|e| e.verb == "patch" && e.resource() == "datarestores/status")
        .filter_map(audit::Event::received)
        .collect();
    written.sort();
    let soon_after: Vec<Duration> = written
        .windows(2)
        .filter_map(|w| w[1].duration_since(w[0]).ok())
        .filter(|gap| *gap < PROGRESS_WAIT)
        .collect();
    eprintln!(
        "[one volume at a time] {} DataRestore status writes, {} within {PROGRESS_WAIT:?} of the one before: {soon_after:?}",
        written.len(),
        soon_after.len()
    );
    if soon_after.len() > AT_ONCE {
        problems.push(format!(
            "{} of {} DataRestore status writes came within {PROGRESS_WAIT:?} of the one before ({soon_after:?}); only its phase, errors and warnings are written at once, at most {AT_ONCE} times here",
            soon_after.len(),
            written.len()
        ));
    }
    verdict(problems)
}

/// How long the DataRestore's counts wait to be written after its last write.
const PROGRESS_WAIT: Duration = Duration::from_millis(900);
/// The DataRestore's writes that are not held back: its phase changes (Validating,
/// Restoring, Finalizing, its end) and the first record of its volumes' counts.
const AT_ONCE: usize = 5;

/// The lease of [`leader_killed_mid_copy`]: short, so that the case stays short.
const LEASE: Duration = Duration::from_secs(6);

impl Scene {
    /// Waits until the controller's Lease in the scene's namespace names `identity`.
    async fn lease_held_by(&self, identity: &str) -> Result<()> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        wait_for(
            format!("the Lease held by {identity}"),
            LEASE * 3,
            || async {
                let holder = leases
                    .get_opt(refill::controller::runtime::leader::Election::DEFAULT_LEASE_NAME)
                    .await?
                    .and_then(|l| l.spec?.holder_identity);
                Ok((holder.as_deref() == Some(identity)).then_some(()))
            },
        )
        .await
    }
}

/// One sample of Prometheus text: the value on the line `name value` (`name` with
/// its labels, as the text writes them).
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The controller as its Deployment runs it, a process with `--log-format json`:
/// its `/metrics`, scraped before, during and after a restore, move as the restore
/// does (a PodVolumeRestore waits while no node agent runs; then one restore, one
/// volume and its bytes, one app's downtime), and every line it logs is a JSON object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_json_logs_follow_a_restore() -> Result<()> {
    init_logging();
    run_test("metrics-and-json-logs", |env| async move {
        let cluster = env.cluster;
        let s = Scene::new(env).await?;
        let app = s.app(Shape::Deployment, false).await?;
        let kind = ControllerKind::Refill(PathBuf::from(env!("CARGO_BIN_EXE_refill")));
        let json = ["--log-format", "json"];
        let controller =
            ControllerProcess::start_named(cluster, &kind, &s.ns, &s.scratch, "metrics", &json)
                .await?;
        s.lease_held_by("metrics").await?;
        // The Lease names it a moment before the process starts its work.
        let before = wait_for("the controller to report that it leads", SETUP, || async {
            let text = controller.scrape().await?;
            Ok((sample(&text, "refill_leader") == Some(1.0)).then_some(text))
        })
        .await?;
        let completed = "refill_restores_total{result=\"Completed\"}";
        ensure!(sample(&before, completed).is_none(), "{before}");

        // No node agent yet: the PodVolumeRestore waits for one, and the gauge says so.
        s.restore("r1", s.spec(&app)).await?;
        let waiting = "refill_pod_volume_restores_waiting";
        let during = wait_for("a PodVolumeRestore counted as waiting", BOUND, || async {
            let text = controller.scrape().await?;
            Ok((sample(&text, waiting) == Some(1.0)).then_some(text))
        })
        .await?;
        ensure!(sample(&during, completed).is_none(), "{during}");

        let _agent = s.node_agent(Some(COPY_RATE));
        let (_, problems) = s.check(&app, "r1", &Expect::completed()).await;
        verdict(problems)?;
        let after = controller.scrape().await?;
        let want = [
            (completed, 1.0),
            ("refill_volumes_total{result=\"Completed\"}", 1.0),
            ("refill_restored_bytes_total", SNAPSHOT_BYTES as f64),
            ("refill_restore_duration_seconds_count", 1.0),
            ("refill_app_downtime_seconds_count", 1.0),
            (waiting, 0.0),
            ("refill_pod_volume_restores_overdue", 0.0),
        ];
        for (name, value) in want {
            ensure!(
                sample(&after, name) == Some(value),
                "{name} is {:?}, want {value}:\n{after}",
                sample(&after, name)
            );
        }
        let downtime = sample(&after, "refill_app_downtime_seconds_sum").unwrap_or_default();
        ensure!(
            downtime > 0.0 && downtime < BOUND.as_secs_f64(),
            "downtime {downtime}"
        );

        let log = std::fs::read_to_string(controller.log_path())?;
        controller.stop().await;
        let mut leading = false;
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            let object: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("a log line that is not JSON: {line}"))?;
            ensure!(
                object["level"].is_string() && object["timestamp"].is_string(),
                "a log line without level or timestamp: {line}"
            );
            leading |= object["message"] == "leading";
        }
        ensure!(leading, "no \"leading\" line in the log:\n{log}");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_during_a_restore() -> Result<()> {
    let cases = vec![
        case(
            "node-agent-restarted-mid-copy",
            node_agent_restarted_mid_copy,
        ),
        case("stand-in-deleted-mid-copy", |env| {
            stand_in_deleted_mid_copy(env, false)
        }),
        case("stand-in-evicted-by-a-drain-mid-copy", |env| {
            stand_in_deleted_mid_copy(env, true)
        }),
        case(
            "stand-in-in-namespace-whose-quota-requires-requests",
            stand_in_in_quota_namespace,
        ),
        case(
            "stand-in-refused-by-admission",
            stand_in_refused_by_admission,
        ),
        case(
            "stand-in-admitted-in-a-restricted-namespace",
            stand_in_in_restricted_namespace,
        ),
        case(
            "stand-in-refused-by-a-limit-range",
            stand_in_refused_by_limit_range,
        ),
        case(
            "pvr-deleted-by-someone-mid-copy-keep-stopped",
            pvr_deleted_mid_copy_keep_stopped,
        ),
        case("pvc-deleted-mid-copy", pvc_deleted_mid_copy),
        case(
            "leader-killed-mid-copy-standby-takes-over",
            leader_killed_mid_copy,
        ),
        case("consumer-rescaled-while-quiescing", |env| {
            consumer_rescaled(env, VolumePhase::Quiescing)
        }),
        case("consumer-rescaled-while-starting-stand-in", |env| {
            consumer_rescaled(env, VolumePhase::StartingStandIn)
        }),
        case("consumer-rescaled-while-restoring", |env| {
            consumer_rescaled(env, VolumePhase::Restoring)
        }),
        case(
            "cronjob-mounting-the-claim-suspended-during-restore",
            cronjob_mounting_the_claim,
        ),
        case("statefulset-one-volume-at-a-time", one_volume_at_a_time),
        case(
            "no-node-agent-with-short-timeout",
            no_node_agent_with_short_timeout,
        ),
        case("canceled-mid-copy-slow-stopping-node-agent", |env| {
            rolled_back_mid_copy(env, Rollback::Cancel)
        }),
        case("deleted-mid-copy-slow-stopping-node-agent", |env| {
            rolled_back_mid_copy(env, Rollback::Delete)
        }),
        case("volume-timeout-mid-copy-slow-stopping-node-agent", |env| {
            rolled_back_mid_copy(env, Rollback::VolumeTimeout)
        }),
    ];
    run_table("faults during a restore", cases).await
}

// ------------------------------------------------------------------------------------
// Two restores of one PVC at once

/// Whether a restore holds the workload or the volume: it has stopped a consumer, or its
/// stand-in or copy is under way. (Stopping is only the intent, recorded before the
/// conditional write that takes the workload; two restores may both have it.)
fn holds(dr: &DataRestore) -> bool {
    dr.status.as_ref().is_some_and(|s| {
        s.consumers
            .iter()
            .any(|c| c.state == ConsumerState::Stopped)
            || s.volumes.iter().any(|v| {
                matches!(
                    v.phase,
                    VolumePhase::StartingStandIn
                        | VolumePhase::Restoring
                        | VolumePhase::RemovingStandIn
                        | VolumePhase::Aborting
                )
            })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_restores_of_one_pvc_started_together() -> Result<()> {
    init_logging();
    run_test("overlapping-restores-x10", |env| async move {
        let s = Scene::new(env).await?;
        let app = s.app(Shape::Deployment, false).await?;
        let web = app.workloads[0].clone();
        let _agent = s.node_agent(Some(4 * COPY_RATE));
        let _controller = s.controller().await?;
        let mut problems = Vec::new();
        for rep in 1..=10 {
            let (a, b) = (format!("r{rep}-a"), format!("r{rep}-b"));
            let (made_a, made_b) =
                futures::join!(s.restore(&a, s.spec(&app)), s.restore(&b, s.spec(&app)));
            made_a?;
            made_b?;
            let mut both_held: Option<String> = None;
            let mut zero_record: Option<String> = None;
            let ended = s
                .watch
                .until(format!("{a} and {b} to end"), BOUND, |o| {
                    let (ra, rb) = (o.restore(&a)?, o.restore(&b)?);
                    if holds(&ra) && holds(&rb) && both_held.is_none() {
                        both_held = Some(format!(
                            "{a}: {}; {b}: {}",
                            describe(Some(&ra)),
                            describe(Some(&rb))
                        ));
                    }
                    for r in [&ra, &rb] {
                        let zero = r
                            .status
                            .iter()
                            .flat_map(|st| &st.consumers)
                            .any(|c| c.name == web.name && c.replicas == Some(0));
                        if zero && zero_record.is_none() {
                            zero_record = Some(format!("{}: {}", r.name_any(), describe(Some(r))));
                        }
                    }
                    (phase(&ra).is_terminal() && phase(&rb).is_terminal()).then_some((ra, rb))
                })
                .await;
            let mut found = Vec::new();
            if let Some(seen) = both_held {
                found.push(format!("both held the workload at once: {seen}"));
            }
            if let Some(seen) = zero_record {
                found.push(format!(
                    "a restore recorded 0 replicas for {}: {seen}",
                    web.name
                ));
            }
            match ended {
                Err(e) => found.push(format!(
                    "{e:#}: {a}: {}; {b}: {}",
                    describe(s.watch.restore(&a).as_deref()),
                    describe(s.watch.restore(&b).as_deref())
                )),
                Ok((ra, rb)) => {
                    for (this, other) in [(&ra, &rb), (&rb, &ra)] {
                        if phase(this) == Phase::Completed {
                            continue;
                        }
                        if !texts(this).contains(&other.name_any()) {
                            found.push(format!(
                                "{} ended {:?} without naming {}, which holds the PVC: {}",
                                this.name_any(),
                                phase(this),
                                other.name_any(),
                                describe(Some(this))
                            ));
                        }
                    }
                    if phase(&ra) != Phase::Completed && phase(&rb) != Phase::Completed {
                        found.push("neither restore completed".into());
                    }
                }
            }
            let back = s
                .watch
                .until(
                    format!("{} back at {}", web.name, web.replicas),
                    SETTLE,
                    |_| {
                        let (r, ann) = s.workload(&web)?;
                        (r == web.replicas && !ann.contains_key(labels::QUIESCED_BY)).then_some(())
                    },
                )
                .await;
            match back {
                Ok(()) => {
                    if let Err(e) = s.ready_pods(&web.name, web.replicas as usize, SETTLE).await {
                        found.push(format!("{e:#}"));
                    }
                }
                Err(_) => found.push(format!(
                    "{} left at {:?} replicas (want {})",
                    web.name,
                    s.workload(&web).map(|w| w.0),
                    web.replicas
                )),
            }
            if s.watch
                .until("stand-ins gone", SETTLE, |o| {
                    o.stand_ins().is_empty().then_some(())
                })
                .await
                .is_err()
            {
                found.push("stand-in pods left".into());
            }
            let running: Vec<String> = s
                .watch
                .pvrs
                .state()
                .iter()
                .filter(|p| running_pvr(p))
                .map(|p| p.name_any())
                .collect();
            if !running.is_empty() {
                found.push(format!("PodVolumeRestores left running: {running:?}"));
            }
            eprintln!(
                "[overlapping restores] repetition {rep}: {}",
                if found.is_empty() {
                    "PASS".to_string()
                } else {
                    format!("FAIL: {}", found.join("; "))
                }
            );
            if !found.is_empty() {
                // What is left behind would only confuse the next repetitions.
                problems.push(format!("repetition {rep}: {}", found.join("; ")));
                break;
            }
        }
        let writes = node_agent::read_write_log(&s.write_log)?;
        problems.extend(fixture::writes_under_running_pods(
            &writes,
            &s.watch.pod_lives(),
            Duration::ZERO,
            SystemTime::now(),
        ));
        verdict(problems)
    })
    .await
}

// ------------------------------------------------------------------------------------
// The API server restarted, on a cluster of this test's own

/// The cluster for faults that restart its components (never the shared one):
/// `REFILL_FAULTS_CLUSTER_DIR` (default `~/.cache/refill/cluster-faults`), its ports
/// moved by `REFILL_FAULTS_PORT_OFFSET` (default 300). kwok nodes only: the fault
/// is the API server's, and the simulated node agent does the copy.
fn faults_cluster() -> OwnCluster {
    let offset = std::env::var("REFILL_FAULTS_PORT_OFFSET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let cluster = match std::env::var_os("REFILL_FAULTS_CLUSTER_DIR") {
        Some(dir) => OwnCluster::at(PathBuf::from(dir), offset),
        None => OwnCluster::new("cluster-faults", offset),
    };
    cluster.with("REFILL_REAL_NODES", "0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_restarted_mid_copy() -> Result<()> {
    init_logging();
    let own: &'static OwnCluster = Box::leak(Box::new(faults_cluster()));
    let cluster: &'static Cluster =
        Box::leak(Box::new(own.start().await.with_context(|| {
            format!("starting the faults cluster in {}", own.dir.display())
        })?));
    let outcome = run_test_on(cluster, "api-server-restarted-mid-copy", |env| async move {
        let s = Scene::new(env).await?;
        let app = s.app(Shape::Deployment, false).await?;
        // Slower, so the copy outlasts the API server's absence.
        let _agent = s.node_agent(Some(COPY_RATE / 2));
        let _controller = s.controller().await?;
        s.restore("r1", s.spec(&app)).await?;
        s.until_pvr(PodVolumePhase::InProgress, BOUND).await?;
        let down = own.restart_component("kube-apiserver").await?;
        tracing::info!("kube-apiserver was down for {down:?}");
        let (_, problems) = s.check(&app, "r1", &Expect::completed()).await;
        verdict(problems)
    })
    .await;
    own.stop_if_asked().await;
    outcome
}
