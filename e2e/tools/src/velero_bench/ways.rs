//! Each way of restoring, run while the apps' downtime is watched and the service
//! accounts' writes are counted in the audit log.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use refill::api::{CopySummary, DataRestore, DataRestoreSpec, Phase, RestoreMethod};
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::{Cluster, fixture, in_cluster, is_pod_ready};
use serde_json::json;

use crate::bench::real_data::{self, Damage};
use crate::bench::{absent_is_fine, load_below};

use super::setup::{check, remove_namespace};
use super::{
    MIB, NODE_AGENT_CONFIG, REFILL_SA, Row, Run, Scene, TIMEOUT, VELERO_SA, Way, Written, say,
};

/// Damages `scene` (unless Velero alone, which deletes it), restores it `way`,
/// checks the result, and waits for the apps to be back whatever happened.
pub(super) async fn run_way(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    backup: &str,
    refs: &Path,
    way: Way,
    damage: Option<Damage>,
) -> Row {
    // Each way starts alike: what came before (the last restore, the setup) faded.
    load_below(2.0, Duration::from_secs(45)).await;
    let run = async {
        if let Some(damage) = damage {
            let dirs: Vec<PathBuf> = scene
                .dirs(client)
                .await?
                .into_iter()
                .map(|(_, d)| d)
                .collect();
            let changed = real_data::damage(&dirs, damage)?;
            say(&format!(
                "{}: {} files ({:.1} MiB) changed or added",
                scene.ns,
                changed.files,
                changed.bytes as f64 / MIB
            ));
        }
        say(&format!("{}: restoring, {}", scene.ns, way.label()));
        if way != Way::VeleroAlone {
            controller_installed(cluster, client).await?;
        }
        match way {
            Way::VeleroAlone => velero_restore(cluster, client, scene, backup).await,
            Way::Direct | Way::Staged => refill_restore(cluster, client, scene, backup, way).await,
        }
    }
    .await
    .map_err(|e| format!("{e:#}"));
    match &run {
        Ok(r) => say(&format!(
            "{}: {} in {:.1}s, downtime mean {:.1}s max {:.1}s",
            scene.ns,
            way.label(),
            r.wall.as_secs_f64(),
            r.mean().as_secs_f64(),
            r.max().as_secs_f64()
        )),
        Err(e) => say(&format!("{}: {} FAILED: {e}", scene.ns, way.label())),
    }
    let check = async {
        for app in &scene.apps {
            fixture::wait_ready_pods(client, scene.ns, app, 1, TIMEOUT).await?;
        }
        check(client, scene, refs).await
    }
    .await
    .map_err(|e| format!("{e:#}"));
    if let Err(e) = &check {
        say(&format!("{}: after {}: {e}", scene.ns, way.label()));
    }
    Row {
        scene: scene.label.clone(),
        damage: damage.map_or("any (namespace deleted)", Damage::label),
        way,
        run,
        check,
    }
}

/// Installs refill's controller again if it is gone: tests sharing the cluster
/// remove it (`in_cluster::remove_controller`) to run their own.
async fn controller_installed(cluster: &Cluster, client: &Client) -> Result<()> {
    let (namespace, name) = fixture::CONTROLLER_SA;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if deployments.get_opt(name).await?.is_none() {
        say("refill's controller was removed: installing it again");
        in_cluster::install_controller(cluster, client, VELERO_NAMESPACE, TIMEOUT).await?;
    }
    Ok(())
}

/// Watches the apps' pods until every app is Ready again after having been down,
/// and returns how long each was down. An app still Ready once the restore is done
/// and every other app is back was not down.
async fn downtimes(
    client: &Client,
    ns: &str,
    apps: &[String],
    finished: &AtomicBool,
) -> Result<Vec<Duration>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut down: BTreeMap<String, Instant> = BTreeMap::new();
    let mut out: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = Instant::now() + TIMEOUT;
    while out.len() < apps.len() {
        ensure!(
            Instant::now() < deadline,
            "apps not back within {TIMEOUT:?}"
        );
        let done = finished.load(Ordering::SeqCst);
        let listed = pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for app in apps {
            let ready = listed.iter().any(|p| {
                p.metadata.labels.as_ref().and_then(|l| l.get("app")) == Some(app)
                    && p.metadata.deletion_timestamp.is_none()
                    && is_pod_ready(p)
            });
            match (ready, down.get(app)) {
                (false, None) => {
                    down.insert(app.clone(), Instant::now());
                }
                (true, Some(since)) if !out.contains_key(app) => {
                    out.insert(app.clone(), since.elapsed());
                }
                _ => {}
            }
        }
        if done && down.keys().all(|app| out.contains_key(app)) {
            for app in apps {
                out.entry(app.clone()).or_default();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(out.into_values().collect())
}

/// Runs one way's `restore` (which returns the bytes restored and what was
/// written into the claims) while watching the apps' downtime, and counts the
/// service accounts' writes over it.
async fn measure(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    restore: impl Future<Output = Result<(u64, Written)>>,
) -> Result<Run> {
    let load = load_average();
    let audit = AuditCursor::now(cluster)?;
    let began = Instant::now();
    let finished = AtomicBool::new(false);
    let restore = async {
        let out = restore.await;
        finished.store(true, Ordering::SeqCst);
        out
    };
    let (downtime, (restored, written)) =
        tokio::try_join!(downtimes(client, scene.ns, &scene.apps, &finished), restore)?;
    Ok(Run {
        load,
        wall: began.elapsed(),
        downtime,
        restored,
        written,
        writes: audit.writes(cluster)?,
    })
}

async fn refill_restore(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    backup: &str,
    way: Way,
) -> Result<Run> {
    let method = if way == Way::Staged {
        RestoreMethod::Staged
    } else {
        RestoreMethod::Direct
    };
    let name = format!(
        "{}-{}-{}",
        scene.ns,
        if way == Way::Staged {
            "staged"
        } else {
            "direct"
        },
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs()
    );
    let restore = async {
        let spec = DataRestoreSpec {
            backup_name: Some(backup.into()),
            included_namespaces: vec![scene.ns.into()],
            method,
            ..Default::default()
        };
        fixture::data_restore(client, VELERO_NAMESPACE, &name, spec).await?;
        let done = fixture::wait_finished(client, VELERO_NAMESPACE, &name, TIMEOUT).await?;
        let status = done.status.unwrap_or_default();
        if status.phase != Phase::Completed {
            println!(
                "DataRestore {name}'s status:\n{}",
                serde_json::to_string_pretty(&status)?
            );
        }
        ensure!(
            status.phase == Phase::Completed,
            "DataRestore {name} ended {:?}: {:?}",
            status.phase,
            status.errors
        );
        let restored = status
            .volumes
            .iter()
            .map(|v| v.bytes_done.max(0) as u64)
            .sum();
        let written = if way == Way::Staged {
            let mut sum = CopySummary::default();
            for copied in status.volumes.iter().filter_map(|v| v.copied.as_ref()) {
                sum.files_written += copied.files_written;
                sum.bytes_written += copied.bytes_written;
                sum.unchanged += copied.unchanged;
                sum.deleted += copied.deleted;
            }
            Written::Copied(sum)
        } else {
            Written::All(restored)
        };
        Ok((restored, written))
    };
    let run = measure(cluster, client, scene, restore).await;
    absent_is_fine(
        Api::<DataRestore>::namespaced(client.clone(), VELERO_NAMESPACE)
            .delete(&name, &DeleteParams::default())
            .await,
    )?;
    run
}

async fn velero_restore(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    backup: &str,
) -> Result<Run> {
    let name = format!(
        "{}-velero-{}",
        scene.ns,
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs()
    );
    let restore = async {
        remove_namespace(client, scene.ns).await?;
        let restore = json!({
            "apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": name, "namespace": VELERO_NAMESPACE},
            "spec": {"backupName": backup, "includedNamespaces": [scene.ns]},
        });
        velero::run_to_completion(client, restore, TIMEOUT).await?;
        // The bytes Velero wrote back: what its PodVolumeRestores report.
        let pvrs: Api<refill::api::PodVolumeRestore> =
            Api::namespaced(client.clone(), VELERO_NAMESPACE);
        let selector = format!("velero.io/restore-name={name}");
        let restored = pvrs
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .filter_map(|p| p.status.as_ref()?.progress.as_ref())
            .map(|p| p.bytes_done.max(0) as u64)
            .sum();
        Ok((restored, Written::All(restored)))
    };
    let run = measure(cluster, client, scene, restore).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), scene.ns);
    ensure!(
        claims.list(&ListParams::default()).await?.items.len() == scene.apps.len(),
        "Velero did not bring every claim back"
    );
    Ok(run)
}

/// Points the node agent at a ConfigMap raising its loadConcurrency to `per_node`
/// (`original` is its arguments, without any other ConfigMap of its own).
pub(super) async fn set_load_concurrency(
    client: &Client,
    original: &[String],
    per_node: u32,
) -> Result<()> {
    say(&format!("node agent: loadConcurrency {per_node} per node"));
    let configs = Api::<ConfigMap>::namespaced(client.clone(), VELERO_NAMESPACE);
    absent_is_fine(
        configs
            .delete(NODE_AGENT_CONFIG, &DeleteParams::default())
            .await,
    )?;
    configs
        .create(
            &PostParams::default(),
            &velero::load_concurrency_config(NODE_AGENT_CONFIG, per_node)?,
        )
        .await?;
    let mut args: Vec<String> = original
        .iter()
        .filter(|a| !a.starts_with("--node-agent-configmap"))
        .cloned()
        .collect();
    args.push(format!("--node-agent-configmap={NODE_AGENT_CONFIG}"));
    velero::set_node_agent_args(client, &args, TIMEOUT).await
}

/// Writes (create, update, patch, delete) by refill's and Velero's service accounts
/// since a point in the audit log.
struct AuditCursor(u64);

impl AuditCursor {
    fn now(cluster: &Cluster) -> Result<Self> {
        Ok(AuditCursor(
            std::fs::metadata(cluster.audit_log_path())?.len(),
        ))
    }

    fn writes(&self, cluster: &Cluster) -> Result<BTreeMap<&'static str, usize>> {
        let mut file = std::fs::File::open(cluster.audit_log_path())?;
        file.seek(SeekFrom::Start(self.0))?;
        let mut out = BTreeMap::from([("refill", 0), ("velero", 0)]);
        for line in std::io::BufReader::new(file).lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line?) else {
                continue;
            };
            if event["stage"] != "ResponseComplete"
                || !matches!(
                    event["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete" | "deletecollection")
                )
            {
                continue;
            }
            match event["user"]["username"].as_str() {
                Some(REFILL_SA) => *out.entry("refill").or_default() += 1,
                Some(VELERO_SA) => *out.entry("velero").or_default() += 1,
                _ => {}
            }
        }
        Ok(out)
    }
}

fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
