//! The benchmark's workload: per claim a namespace with a local PV holding a few files,
//! its claim, and a Deployment mounting it; one Velero backup of all claims; then the
//! files damaged so that a restore has something to put back. And the check that a
//! restore put everything back.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount,
};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use refill::labels;
use serde_json::json;

use super::watch::{Watched, all_ready};
use refill_e2e::fixture::{self, BackedUpVolume};
use refill_e2e::{Cluster, NODES, RESTORE_WAIT_CONTAINER, wait_for};

/// Label on every namespace, PV, claim and Deployment pod of one run, with the run's ID.
pub const RUN_LABEL: &str = "refill-bench/run";
/// The one Velero backup holding every claim of a run.
pub const BACKUP: &str = "bench";
/// Each namespace's claim and Deployment.
pub const CLAIM: &str = "data";
pub const APP: &str = "app";

const SETUP_TIMEOUT: Duration = Duration::from_secs(600);

/// [`SETUP_TIMEOUT`] for each step, or more where N is so large that the cluster's
/// controllers need longer (a quarter of a second per namespace: the PV controller
/// bound 10,000 claims at about ten a second).
fn setup_timeout(n: usize) -> Duration {
    SETUP_TIMEOUT.max(Duration::from_millis(250 * n as u64))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Restored by refill.
    Refill,
    /// Restored by the kubectl script.
    Baseline,
}

pub struct Scene {
    pub run_id: String,
    pub velero_ns: String,
    /// Everything on disk of this run: PV directories, snapshots, logs.
    pub dir: PathBuf,
    pub snapshots: PathBuf,
    pub n: usize,
    pub baseline_claims: usize,
    pub replicas: i32,
}

/// The files of one volume as the backup holds them.
pub fn good_files(ns: &str) -> Vec<(&'static str, Vec<u8>)> {
    let mut seed = ns.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    let mut db = Vec::with_capacity(64 * 1024);
    while db.len() < 64 * 1024 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        db.extend_from_slice(&seed.to_le_bytes());
    }
    vec![
        ("app.db", db),
        (
            "app.conf",
            format!("namespace: {ns}\nmode: primary\n").into_bytes(),
        ),
        (
            "logs/current.log",
            format!("{ns} started\n{ns} ready\n").into_bytes(),
        ),
    ]
}

impl Scene {
    pub fn namespace(&self, side: Side, i: usize) -> String {
        let tag = match side {
            Side::Refill => 'r',
            Side::Baseline => 'k',
        };
        format!("bench-{}-{tag}{i:03}", self.run_id)
    }

    pub fn count(&self, side: Side) -> usize {
        match side {
            Side::Refill => self.n,
            Side::Baseline => self.baseline_claims,
        }
    }

    pub fn namespaces(&self, side: Side) -> Vec<String> {
        (0..self.count(side))
            .map(|i| self.namespace(side, i))
            .collect()
    }

    fn all_namespaces(&self) -> Vec<String> {
        let mut all = self.namespaces(Side::Refill);
        all.extend(self.namespaces(Side::Baseline));
        all
    }

    pub fn volume_dir(&self, ns: &str) -> PathBuf {
        self.dir.join("pv").join(ns)
    }

    fn run_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(RUN_LABEL.to_string(), self.run_id.clone())])
    }

    /// Sets everything up: refill installed for a Velero namespace of the run's own,
    /// `n` namespaces for refill and `baseline_claims` for the kubectl script, each
    /// with its Deployment Ready; a backup of all claims; the files damaged. Requests
    /// go out many at once, and the waits follow watches; returns the scene and how
    /// long its setup took.
    pub async fn create(
        cluster: &Cluster,
        admin: &Client,
        n: usize,
        baseline_claims: usize,
        replicas: i32,
        resume: Option<&str>,
    ) -> Result<(Scene, Duration)> {
        let run_id = match resume {
            Some(id) => id.to_string(),
            None => uuid::Uuid::new_v4().simple().to_string()[..6].to_string(),
        };
        let velero_ns = format!("bench-{run_id}-velero");
        let dir = cluster.scratch_dir(&velero_ns)?;
        let snapshots = dir.join("snapshots");
        std::fs::create_dir_all(&snapshots)?;
        let scene = Scene {
            run_id,
            velero_ns,
            dir,
            snapshots,
            n,
            baseline_claims,
            replicas,
        };
        eprintln!(
            "[bench] setting up run {}: {} claims for refill, {} for the kubectl script",
            scene.run_id, n, baseline_claims
        );
        let started = std::time::Instant::now();
        let at = |what: &str| {
            eprintln!(
                "[bench] {what} after {:.1}s",
                started.elapsed().as_secs_f64()
            );
        };
        if resume.is_none() {
            scene.create_namespace(admin, &scene.velero_ns).await?;
            fixture::install_refill(admin, &scene.velero_ns).await?;
            at("refill installed");
        }

        // One watch per kind follows everything the setup waits for.
        let selector = scene.run_selector();
        let by_run = || watcher::Config::default().labels(&selector);
        let volumes = Watched::<PersistentVolume>::start(Api::all(admin.clone()), by_run());
        let claims = Watched::<PersistentVolumeClaim>::start(Api::all(admin.clone()), by_run());
        let accounts = Watched::<ServiceAccount>::start(
            Api::all(admin.clone()),
            watcher::Config::default().fields("metadata.name=default"),
        );
        let pods = Watched::<Pod>::start(Api::all(admin.clone()), by_run());

        let all = scene.all_namespaces();
        if resume.is_none() {
            scene
                .create_volumes_and_claims(admin, &all, volumes)
                .await?;
            at("claims created");
        } else {
            eprintln!("[bench] its namespaces, PVs and claims were made before");
        }
        // A pod whose claim is not bound yet fails scheduling, and the scheduler takes
        // many seconds to try again; pod admission needs the namespace's default
        // ServiceAccount: the Deployments come once both are there.
        claims
            .until("the claims to be bound", setup_timeout(n), |pvcs| {
                let bound = pvcs
                    .iter()
                    .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
                    .count();
                count_reached(bound, all.len(), "claims bound")
            })
            .await?;
        let wanted: HashSet<&str> = all.iter().map(String::as_str).collect();
        accounts
            .until("the default ServiceAccounts", setup_timeout(n), |sas| {
                let found = sas
                    .iter()
                    .filter(|sa| {
                        sa.metadata
                            .namespace
                            .as_deref()
                            .is_some_and(|ns| wanted.contains(ns))
                    })
                    .count();
                count_reached(found, all.len(), "default ServiceAccounts")
            })
            .await?;
        at("claims bound, ServiceAccounts there");
        super::each(&all, |ns| scene.create_app(admin, ns)).await?;
        at(&format!("{} Deployments created", all.len()));
        let want: BTreeMap<String, i32> = all.iter().map(|ns| (ns.clone(), replicas)).collect();
        let pods = pods
            .until("the Deployments to be Ready", setup_timeout(n), |p| {
                all_ready(p, &want)
            })
            .await?;
        at("all Deployments Ready");

        let files: Vec<Vec<(&str, Vec<u8>)>> = all.iter().map(|ns| good_files(ns)).collect();
        let volumes: Vec<BackedUpVolume> = all
            .iter()
            .zip(&files)
            .map(|(ns, files)| BackedUpVolume {
                namespace: ns,
                pvc: CLAIM,
                pod: &pods[ns],
                volume: CLAIM,
                snapshot_id: format!("{ns}-{CLAIM}"),
                files: files.clone(),
            })
            .collect();
        fixture::backup(admin, &scene.velero_ns, BACKUP, &scene.snapshots, &volumes).await?;
        scene.damage(Side::Refill)?;
        scene.damage(Side::Baseline)?;
        let setup = started.elapsed();
        eprintln!("[bench] set up in {:.1}s", setup.as_secs_f64());
        Ok((scene, setup))
    }

    /// The namespaces, their PVs (the backed-up files in them) and claims.
    async fn create_volumes_and_claims(
        &self,
        admin: &Client,
        all: &[String],
        volumes: Watched<PersistentVolume>,
    ) -> Result<()> {
        super::each(all.iter().enumerate(), |(i, ns)| {
            self.create_volume(admin, ns, NODES[i % NODES.len()])
        })
        .await?;
        eprintln!("[bench] {} namespaces and PVs created", all.len());
        // A claim naming a PV the PV controller has not taken in yet stays unbound
        // until its resync, seconds later: the claims come once every PV is Available.
        volumes
            .until("the PVs to be Available", setup_timeout(self.n), |pvs| {
                let available = pvs
                    .iter()
                    .filter(|pv| {
                        pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available")
                    })
                    .count();
                count_reached(available, all.len(), "PVs Available")
            })
            .await?;
        eprintln!("[bench] PVs Available");
        let run_label = &[(RUN_LABEL, self.run_id.as_str())];
        super::each(all, |ns| async move {
            fixture::pvc(admin, ns, CLAIM, Some(ns), run_label).await?;
            Ok(())
        })
        .await?;
        Ok(())
    }

    async fn create_namespace(&self, admin: &Client, name: &str) -> Result<()> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(self.run_labels()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(())
    }

    /// The namespace and its PV, the backed-up files in it.
    async fn create_volume(&self, admin: &Client, ns: &str, node: &str) -> Result<()> {
        self.create_namespace(admin, ns).await?;
        let dir = self.volume_dir(ns);
        fixture::local_pv(admin, ns, node, &dir, &self.run_labels()).await?;
        write_files(&dir, &good_files(ns))
    }

    /// The Deployment mounting the namespace's claim.
    async fn create_app(&self, admin: &Client, ns: &str) -> Result<()> {
        let mut template = fixture::pod_template(APP, &[CLAIM]);
        template["metadata"]["labels"][RUN_LABEL] = json!(self.run_id);
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": APP, "namespace": ns},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app": APP}},
                "template": template,
            }
        }))?;
        Api::<Deployment>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &deployment)
            .await
            .with_context(|| format!("creating deployment {ns}/{APP}"))?;
        Ok(())
    }

    /// Damages the files of every volume of `side`, so that a restore has something
    /// to put back.
    pub fn damage(&self, side: Side) -> Result<()> {
        for ns in self.namespaces(side) {
            damage(&self.volume_dir(&ns))?;
        }
        Ok(())
    }

    /// Checks the end state of one side: every file as backed up, replicas as before
    /// and Ready, nothing of a restore left on the Deployment, no helper pod.
    pub async fn verify(&self, admin: &Client, side: Side) -> Result<()> {
        let pods = Watched::<Pod>::start(Api::all(admin.clone()), Default::default());
        let namespaces = self.namespaces(side);
        for ns in &namespaces {
            let dir = self.volume_dir(ns);
            for (file, content) in good_files(ns) {
                let found = std::fs::read(dir.join(file))
                    .with_context(|| format!("{ns}: {file} is missing"))?;
                ensure!(
                    found == content,
                    "{ns}: {file} differs from the backup ({} bytes, backup has {})",
                    found.len(),
                    content.len()
                );
            }
            ensure!(
                !dir.join(".velero").exists(),
                "{ns}: the restore's done marker .velero was left in the volume"
            );
        }
        let deployments: BTreeMap<String, Deployment> = Api::<Deployment>::all(admin.clone())
            .list(&ListParams::default().fields(&format!("metadata.name={APP}")))
            .await?
            .items
            .into_iter()
            .filter_map(|d| Some((d.namespace()?, d)))
            .collect();
        for ns in &namespaces {
            let deployment = deployments
                .get(ns)
                .with_context(|| format!("{ns}: deployment {APP} is gone"))?;
            let replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
            ensure!(
                replicas == Some(self.replicas),
                "{ns}: deployment {APP} has {replicas:?} replicas, not {}",
                self.replicas
            );
            let annotations = deployment.annotations();
            for key in [labels::QUIESCED_BY, labels::ORIGINAL_REPLICAS] {
                ensure!(
                    !annotations.contains_key(key),
                    "{ns}: deployment {APP} still carries {key}"
                );
            }
        }
        let want: BTreeMap<String, i32> = namespaces
            .iter()
            .map(|ns| (ns.clone(), self.replicas))
            .collect();
        let ready_again = format!("the {} Deployments to be Ready again", namespaces.len());
        pods.until(ready_again, Duration::from_secs(120), |p| {
            all_ready(p, &want)
        })
        .await?;
        let wanted: HashSet<&str> = namespaces.iter().map(String::as_str).collect();
        pods.until("no helper pods left", Duration::from_secs(60), |p| {
            let left: Vec<String> = p
                .iter()
                .filter(|pod| {
                    pod.metadata
                        .namespace
                        .as_deref()
                        .is_some_and(|ns| wanted.contains(ns))
                        && is_helper(pod)
                })
                .map(|pod| format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("helper pods still there: {}", left.join(", ")))
            }
        })
        .await?;
        Ok(())
    }

    /// Selects the run's PVs, claims and Deployment pods.
    pub fn run_selector(&self) -> String {
        format!("{RUN_LABEL}={}", self.run_id)
    }

    /// Deletes the run's namespaces, volumes and files. With `wait`, returns only once
    /// the namespaces are gone, so that a next run does not share the machine with
    /// their deletion.
    pub async fn cleanup(&self, admin: &Client, wait: bool) -> Result<()> {
        let started = std::time::Instant::now();
        refill_e2e::support::release_restores(admin, &self.velero_ns).await?;
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        let mut all = self.all_namespaces();
        all.push(self.velero_ns.clone());
        super::each(&all, |ns| {
            let namespaces = namespaces.clone();
            async move {
                super::absent_is_fine(namespaces.delete(ns, &DeleteParams::background()).await)
            }
        })
        .await?;
        let selector = ListParams::default().labels(&self.run_selector());
        Api::<PersistentVolume>::all(admin.clone())
            .delete_collection(&DeleteParams::background(), &selector)
            .await?;
        if wait {
            wait_for(
                format!("the {} namespaces of run {} to go", all.len(), self.run_id),
                setup_timeout(self.n),
                || async {
                    let left = namespaces.list_metadata(&selector).await?.items.len();
                    Ok((left == 0).then_some(()))
                },
            )
            .await?;
        }
        // BENCH_LOG_DIR keeps the controller's logs of each run for a look afterwards.
        if let Some(logs) = std::env::var_os("BENCH_LOG_DIR") {
            let logs = PathBuf::from(logs);
            std::fs::create_dir_all(&logs)?;
            for entry in std::fs::read_dir(&self.dir)? {
                let file = entry?.file_name().to_string_lossy().into_owned();
                if file.starts_with("controller-") && file.ends_with(".log") {
                    let kept = logs.join(format!("{}-{file}", self.run_id));
                    std::fs::copy(self.dir.join(&file), &kept).with_context(|| {
                        format!("keeping the controller log as {}", kept.display())
                    })?;
                }
            }
        }
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("removing {}", self.dir.display()))?;
        eprintln!(
            "[bench] run {} cleaned up in {:.1}s",
            self.run_id,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// A pod held or started for a restore: it has Velero's restore-wait init container.
pub fn is_helper(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == RESTORE_WAIT_CONTAINER))
}

/// `Ok` once `count` reaches `want`, else what is missing.
fn count_reached(count: usize, want: usize, what: &str) -> Result<(), String> {
    if count >= want {
        Ok(())
    } else {
        Err(format!("{count} of {want} {what}"))
    }
}

fn write_files(dir: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    for (file, content) in files {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// What the restore must undo: a file overwritten, one deleted, one changed.
fn damage(dir: &Path) -> Result<()> {
    std::fs::write(dir.join("app.db"), b"garbage")?;
    std::fs::remove_file(dir.join("app.conf"))?;
    std::fs::write(dir.join("logs/current.log"), b"truncated")?;
    if std::fs::read(dir.join("app.db"))? != b"garbage" {
        bail!("could not damage {}", dir.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_has_its_own_files() {
        let a = good_files("bench-x-r000");
        let b = good_files("bench-x-r001");
        assert_eq!(a[0].1.len(), 64 * 1024);
        assert_ne!(a[0].1, b[0].1);
        assert_eq!(a, good_files("bench-x-r000"));
    }
}
