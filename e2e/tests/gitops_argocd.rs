//! Restores of apps Argo CD owns, against the real Argo CD application-controller
//! and repo-server of the local cluster (`e2e/cluster/argocd.sh`, started by the
//! tests themselves with `REFILL_ARGOCD=1 e2e/cluster/up.sh`): each test's app is a
//! Git repository of its own, served on the host and synced by an Application with
//! automated sync and self-heal, which puts the app back as Git has it within
//! seconds unless the Application is paused (`argocd.argoproj.io/skip-reconcile`).
//! The volumes and node agent are the kwok nodes' (see `refill_e2e::fixture`).

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::api::{ConsumerState, GitOpsKind, GitOpsState, Phase, VolumePhase};
use refill::gitops::pause::ARGO_CD_SKIP_RECONCILE;
use refill_e2e::argocd::{self, ARGOCD_NAMESPACE, ArgoApp, SOMEONE};
use refill_e2e::fixture::{self, Scene, phase, pod_template};
use refill_e2e::run_test;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Argo CD refreshes every Application this often on the local cluster
/// (`argocd.sh`); a test that shows nothing happened waits longer than that.
const REFRESH: Duration = Duration::from_secs(20);

/// The label a gated Deployment's pods need on their node (its value is the test's
/// namespace, so tests side by side never open each other's gates).
const GATE: &str = "e2e.refill.dev/gate";

/// A Deployment of `replicas` pods on the claims named, as a file of the app's
/// repository. `wave` is its Argo CD sync wave; `gated` pods wait for a node labelled
/// [`GATE`], and until then Argo CD counts the Deployment Progressing, holding a sync
/// at its wave.
fn deployment(
    s: &Scene,
    name: &str,
    replicas: i32,
    claims: &[&str],
    wave: i32,
    gated: bool,
) -> (String, String) {
    let mut template = pod_template(name, claims);
    if gated {
        template["spec"]["nodeSelector"] = json!({ GATE: s.ns });
    }
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"argocd.argoproj.io/sync-wave": wave.to_string()}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    });
    // JSON is YAML, and Argo CD reads every .yaml file of the path.
    (format!("{name}.yaml"), object.to_string())
}

fn config_map(name: &str) -> (String, String) {
    let object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"mode": "standby"},
    });
    (format!("{name}.yaml"), object.to_string())
}

/// The test's Application: named after its namespace, as is its repository.
fn app(s: &Scene) -> ArgoApp<'_> {
    ArgoApp {
        name: &s.ns,
        repo: &s.ns,
        namespace: &s.ns,
    }
}

async fn push(s: &Scene, files: &[(String, String)]) -> Result<()> {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    argocd::push_manifests(&s.env.cluster.dir, &s.ns, &files).await
}

/// The app `web` (two pods on the claim `web`) as Argo CD syncs it from Git, up
/// and settled.
async fn web_from_git(s: &Scene) -> Result<()> {
    push(s, &[deployment(s, "web", 2, &["web"], 0, false)]).await?;
    argocd::create_app(&s.client, &s.env.cluster.dir, &app(s)).await?;
    argocd::wait_synced(&s.client, &s.ns, s.timeout).await?;
    s.ready_pods("web", 2).await?;
    fixture::wait_settled(&s.client, &s.ns, "web", 2, s.timeout).await
}

async fn application(s: &Scene) -> Result<kube::api::DynamicObject> {
    Ok(argocd::applications(&s.client).get(&s.ns).await?)
}

fn annotation<'a>(object: &'a kube::api::DynamicObject, key: &str) -> Option<&'a str> {
    object.annotations().get(key).map(String::as_str)
}

/// Labels (or, with `None`, unlabels) the node for the test's gated pods.
async fn gate(s: &Scene, node: &str, open: bool) -> Result<()> {
    let value = if open { json!(s.ns) } else { Value::Null };
    Api::<Node>::all(s.client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": { GATE: value }}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_paused_application_holds_through_a_hard_refresh_and_a_requested_sync_and_syncs_after()
-> Result<()> {
    run_test("argocd-pause", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        argocd::ensure_running().await?;
        let held = held_through_requests(&s).await;
        argocd::delete_app(&s.client, &s.ns).await?;
        held
    })
    .await
}

async fn held_through_requests(s: &Scene) -> Result<()> {
    let dir = s.volume("web", "node-a", &[("f", b"broken")]).await?;
    web_from_git(s).await?;
    s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"good")])])
        .await?;

    // No node agent yet: the restore holds the app stopped in Restoring.
    let _controller = s.controller().await?;
    s.restore("r1", s.spec("b1", &["web"])).await?;
    let dr = s.wait_gitops_saying("r1", GitOpsState::Paused, "").await?;
    let record = &dr.status.as_ref().unwrap().git_ops[0];
    ensure!(
        record.kind == GitOpsKind::Application
            && record.namespace == ARGOCD_NAMESPACE
            && record.name == s.ns
            && record.workloads == [format!("Deployment {}/web", s.ns)],
        "found from the tracking id Argo CD wrote on the Deployment: {record:#?}"
    );
    s.wait_volume("r1", VolumePhase::Restoring).await?;
    ensure!(s.replicas("web").await?.0 == 0, "the app is stopped");
    let paused = application(s).await?;
    ensure!(annotation(&paused, ARGO_CD_SKIP_RECONCILE) == Some("true"));
    let synced_before = argocd::synced_revision(&paused).map(String::from);

    // Meanwhile someone commits a new object, asks for a hard refresh and for a
    // sync. Past a periodic refresh too, Argo CD has done none of it: the app
    // stays stopped, the object unmade, both requests pending.
    let settings = config_map("settings");
    push(
        s,
        &[
            deployment(s, "web", 2, &["web"], 0, false),
            settings.clone(),
        ],
    )
    .await?;
    argocd::request_hard_refresh(&s.client, &s.ns).await?;
    argocd::request_sync(&s.client, &s.ns).await?;
    tokio::time::sleep(REFRESH + Duration::from_secs(10)).await;
    ensure!(
        s.replicas("web").await?.0 == 0,
        "a paused Application must not scale the app back up"
    );
    let config_maps = Api::<ConfigMap>::namespaced(s.client.clone(), &s.ns);
    ensure!(
        config_maps.get_opt("settings").await?.is_none(),
        "a paused Application applied a new commit"
    );
    let held = application(s).await?;
    ensure!(
        annotation(&held, "argocd.argoproj.io/refresh") == Some("hard")
            && !held.data["operation"].is_null()
            && argocd::operation_initiator(&held) != Some(SOMEONE)
            && argocd::synced_revision(&held).map(String::from) == synced_before,
        "Argo CD acted on a paused Application: {:?} {}",
        held.annotations(),
        held.data["status"]["operationState"]
    );

    let _agent = s.node_agent();
    let dr = s.finished("r1").await?;
    let status = dr.status.clone().unwrap();
    ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
    ensure!(fixture::read(&dir, "f")? == b"good");
    ensure!(
        status.consumers[0].state == ConsumerState::Resumed
            && status.git_ops[0].state == GitOpsState::Resumed,
        "{status:#?}"
    );

    // Let go, Argo CD carries out the sync that was asked for, to the new commit,
    // with the app at its replica count.
    let back = argocd::wait_synced(&s.client, &s.ns, s.timeout).await?;
    ensure!(
        annotation(&back, ARGO_CD_SKIP_RECONCILE).is_none(),
        "{:?}",
        back.annotations()
    );
    ensure!(
        argocd::operation_initiator(&back) == Some(SOMEONE)
            && argocd::operation_phase(&back) == Some("Succeeded"),
        "the sync someone asked for during the pause ran after it: {}",
        back.data["status"]["operationState"]
    );
    ensure!(argocd::synced_revision(&back).map(String::from) != synced_before);
    ensure!(config_maps.get_opt("settings").await?.is_some());
    ensure!(s.replicas("web").await? == (2, None));
    s.ready_pods("web", 2).await?;
    Ok(())
}

#[tokio::test]
async fn a_restore_begun_during_an_argo_cd_sync_stops_nothing_until_argo_cd_ends_it() -> Result<()>
{
    run_test("argocd-sync", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        argocd::ensure_running().await?;
        let waited = waits_for_the_sync(&s).await;
        gate(&s, "node-a", false).await?;
        argocd::delete_app(&s.client, &s.ns).await?;
        waited
    })
    .await
}

async fn waits_for_the_sync(s: &Scene) -> Result<()> {
    let dir = s.volume("web", "node-a", &[("f", b"broken")]).await?;
    web_from_git(s).await?;
    s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"good")])])
        .await?;

    // A commit whose sync waits at wave -1 for a Deployment no node takes yet;
    // `web`, at wave 0, is applied only after it. Argo CD syncs it by itself.
    push(
        s,
        &[
            deployment(s, "gate", 1, &[], -1, true),
            deployment(s, "web", 2, &["web"], 0, false),
        ],
    )
    .await?;
    argocd::request_hard_refresh(&s.client, &s.ns).await?;
    let running = argocd::wait_operation(&s.client, &s.ns, "Running", s.timeout).await?;
    let started = running.data["status"]["operationState"]["startedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // The restore pauses the Application at once, but stops nothing while the
    // sync Argo CD began goes on: it may still apply `web`'s replica count.
    let _controller = s.controller().await?;
    let _agent = s.node_agent();
    s.restore("r1", s.spec("b1", &["web"])).await?;
    let waiting = format!("to end the sync it began {started}");
    let dr = s
        .wait_gitops_saying("r1", GitOpsState::Pausing, &waiting)
        .await?;
    ensure!(
        annotation(&application(s).await?, ARGO_CD_SKIP_RECONCILE) == Some("true"),
        "paused first, so that no new sync begins"
    );
    ensure!(dr.status.unwrap().consumers[0].state == ConsumerState::Stopping);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let dr = fixture::get_whole(&s.client, &s.ns, "r1").await?;
    let status = dr.status.clone().unwrap();
    ensure!(
        status.git_ops[0].state == GitOpsState::Pausing
            && status.consumers[0].state == ConsumerState::Stopping
            && status.volumes[0].phase != VolumePhase::Restoring,
        "{status:#?}"
    );
    ensure!(
        s.replicas("web").await? == (2, None),
        "stopped during a sync"
    );
    ensure!(
        argocd::operation_phase(&application(s).await?) == Some("Running"),
        "the sync still runs"
    );

    // The gate opens: the sync goes through wave 0 and ends, and only then is
    // the app stopped and its data restored.
    gate(s, "node-a", true).await?;
    let ended = argocd::wait_operation(&s.client, &s.ns, "Succeeded", s.timeout).await?;
    let dr = s.finished("r1").await?;
    let status = dr.status.clone().unwrap();
    ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
    ensure!(fixture::read(&dir, "f")? == b"good");
    let finished_at: Option<Timestamp> = ended.data["status"]["operationState"]["finishedAt"]
        .as_str()
        .and_then(|t| t.parse().ok());
    let stopped_at = status.consumers[0].stopped_at.as_ref().map(|t| t.0);
    ensure!(
        matches!((finished_at, stopped_at), (Some(ended), Some(stopped)) if stopped >= ended),
        "web was stopped at {stopped_at:?}, before the sync ended at {finished_at:?}"
    );
    ensure!(status.git_ops[0].state == GitOpsState::Resumed);
    argocd::wait_synced(&s.client, &s.ns, s.timeout).await?;
    ensure!(s.replicas("web").await? == (2, None));
    Ok(())
}
