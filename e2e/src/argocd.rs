//! Argo CD on the local cluster (`e2e/cluster/argocd.sh`, started by
//! `REFILL_ARGOCD=1 e2e/cluster/up.sh`): its application-controller and repo-server
//! run on the host and sync apps from Git repositories a `git daemon` serves there,
//! so that a test can show what Argo CD does to an app while refill restores its
//! data.
//!
//! A test commits its manifests to a repository of its own ([`push_manifests`]),
//! points an Application in Argo CD's namespace at it ([`create_app`]) and waits
//! for Argo CD ([`wait_synced`], [`operation_phase`]); it asks for what a person
//! would ask for with [`request_hard_refresh`] and [`request_sync`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use tokio::sync::OnceCell;

use crate::cluster::scripts_dir;
use crate::support::wait_for;

static RUNNING: OnceCell<()> = OnceCell::const_new();

/// Starts Argo CD on the local cluster, building it first if it never was
/// (`REFILL_ARGOCD=1 e2e/cluster/up.sh`, which waits for a build already going,
/// and leaves everything that runs as it is). Once per process; concurrent callers
/// wait for the first. Argo CD that cannot start is an error, never a reason to
/// skip.
pub async fn ensure_running() -> Result<()> {
    RUNNING
        .get_or_try_init(|| async {
            let script = scripts_dir().join("up.sh");
            let out = tokio::process::Command::new(&script)
                .env("REFILL_ARGOCD", "1")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                // A first build takes minutes: its progress shows in the test output.
                .stderr(std::process::Stdio::inherit())
                .status()
                .await
                .with_context(|| format!("running {}", script.display()))?;
            ensure!(
                out.success(),
                "REFILL_ARGOCD=1 {} failed ({out}): Argo CD is needed, see the messages above",
                script.display()
            );
            Ok(())
        })
        .await
        .copied()
}

/// Where Argo CD runs and keeps its Applications (what refill looks in by default).
pub const ARGOCD_NAMESPACE: &str = "argocd";

/// Who [`request_sync`] says asked for a sync, as Argo CD records it.
pub const SOMEONE: &str = "someone";

/// Field manager of the objects these helpers write.
const MANAGER: &str = "refill-e2e";

/// Argo CD's Application, as the API serves it.
pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ))
}

/// The Applications of Argo CD's namespace.
pub fn applications(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ARGOCD_NAMESPACE, &application_resource())
}

/// The bare repository `repo` under the cluster's Git directory.
fn bare_repository(cluster_dir: &Path, repo: &str) -> PathBuf {
    cluster_dir.join("argocd/git").join(format!("{repo}.git"))
}

/// The URL Argo CD's repo-server fetches `repo` from.
pub fn repo_url(cluster_dir: &Path, repo: &str) -> Result<String> {
    let base = std::fs::read_to_string(cluster_dir.join("argocd-git-url")).context(
        "no argocd-git-url in the cluster directory: is Argo CD running (REFILL_ARGOCD=1 e2e/cluster/up.sh)?",
    )?;
    Ok(format!("{}/{repo}.git", base.trim()))
}

async fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        // A commit needs an author; no user configuration is read or needed.
        .args([
            "-c",
            "user.name=refill-e2e",
            "-c",
            "user.email=e2e@refill.invalid",
        ])
        .args(args)
        .output()
        .await
        .context("running git")?;
    ensure!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Commits `files` (path, contents), and nothing else, as the new head of branch
/// `main` of repository `repo`, making the repository if it is missing. Each call
/// is a commit of its own on top of the last: Argo CD sees a new revision.
pub async fn push_manifests(cluster_dir: &Path, repo: &str, files: &[(&str, &str)]) -> Result<()> {
    let bare = bare_repository(cluster_dir, repo);
    if !bare.exists() {
        tokio::fs::create_dir_all(&bare).await?;
        git(&bare, &["init", "-q", "--bare", "-b", "main"]).await?;
    }
    let work = std::env::temp_dir().join(format!("refill-e2e-git-{}", uuid::Uuid::new_v4()));
    tokio::fs::create_dir_all(&work).await?;
    let pushed = commit_and_push(&work, &bare, files).await;
    tokio::fs::remove_dir_all(&work).await?;
    pushed.with_context(|| format!("pushing to {}", bare.display()))
}

async fn commit_and_push(work: &Path, bare: &Path, files: &[(&str, &str)]) -> Result<()> {
    git(work, &["init", "-q", "-b", "main"]).await?;
    let bare = bare.to_string_lossy();
    // The last commit, if any, so that the new one follows it.
    if git(work, &["fetch", "-q", &bare, "main"]).await.is_ok() {
        git(work, &["reset", "-q", "--soft", "FETCH_HEAD"]).await?;
        git(
            work,
            &["rm", "-q", "-r", "--cached", "--ignore-unmatch", "."],
        )
        .await?;
    }
    for (path, contents) in files {
        tokio::fs::write(work.join(path), contents).await?;
    }
    git(work, &["add", "-A"]).await?;
    git(work, &["commit", "-q", "--allow-empty", "-m", "manifests"]).await?;
    git(work, &["push", "-q", &bare, "HEAD:main"]).await
}

/// An Application of Argo CD: `repo`'s manifests applied to `namespace`.
#[derive(Debug, Clone, Copy)]
pub struct ArgoApp<'a> {
    /// Its name, in [`ARGOCD_NAMESPACE`].
    pub name: &'a str,
    /// The repository of [`push_manifests`].
    pub repo: &'a str,
    /// Where its objects go.
    pub namespace: &'a str,
}

/// Creates the Application, with automated sync and self-heal: Argo CD applies a new
/// commit, and puts back what someone changed, by itself.
pub async fn create_app(client: &Client, cluster_dir: &Path, app: &ArgoApp<'_>) -> Result<()> {
    let object = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": app.name, "namespace": ARGOCD_NAMESPACE},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo_url(cluster_dir, app.repo)?, "path": ".", "targetRevision": "main"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": app.namespace},
            "syncPolicy": {"automated": {"selfHeal": true}},
        },
    });
    applications(client)
        .patch(
            app.name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("creating Application {}", app.name))?;
    Ok(())
}

/// Deletes the Application, leaving what it applied (Argo CD deletes those only
/// with its finalizer on the Application, which [`create_app`] does not set).
pub async fn delete_app(client: &Client, name: &str) -> Result<()> {
    match applications(client)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `status.operationState.phase`: Running or Terminating while a sync goes on,
/// then Succeeded, Failed or Error; `None` before the first sync.
pub fn operation_phase(app: &DynamicObject) -> Option<&str> {
    app.data["status"]["operationState"]["phase"].as_str()
}

/// Who asked for the last sync Argo CD began (`initiatedBy.username`; automated
/// syncs name no one).
pub fn operation_initiator(app: &DynamicObject) -> Option<&str> {
    app.data["status"]["operationState"]["operation"]["initiatedBy"]["username"].as_str()
}

/// The revision Argo CD last synced.
pub fn synced_revision(app: &DynamicObject) -> Option<&str> {
    app.data["status"]["sync"]["revision"].as_str()
}

fn summary(app: &DynamicObject) -> String {
    let status = &app.data["status"];
    format!(
        "sync {}, health {}, operation {}: {}",
        status["sync"]["status"],
        status["health"]["status"],
        status["operationState"]["phase"],
        status["operationState"]["message"]
    )
}

/// Waits until Argo CD shows the Application synced to its latest revision and
/// healthy, with no sync running, and returns it then.
pub async fn wait_synced(client: &Client, name: &str, timeout: Duration) -> Result<DynamicObject> {
    let api = applications(client);
    let last = Mutex::new(String::new());
    wait_for(
        format!("Argo CD Application {name} synced and healthy"),
        timeout,
        || async {
            let app = api.get(name).await?;
            *last.lock().unwrap() = summary(&app);
            let status = &app.data["status"];
            let done = status["sync"]["status"] == "Synced"
                && status["health"]["status"] == "Healthy"
                && !matches!(operation_phase(&app), Some("Running" | "Terminating"))
                && app.data["operation"].is_null();
            Ok(done.then_some(app))
        },
    )
    .await
    .map_err(|e| {
        let last = last.lock().unwrap().clone();
        e.context(format!("Application {name}, last seen: {last}"))
    })
}

/// Waits until Argo CD shows a sync of the Application in `phase`.
pub async fn wait_operation(
    client: &Client,
    name: &str,
    phase: &str,
    timeout: Duration,
) -> Result<DynamicObject> {
    let api = applications(client);
    wait_for(
        format!("Argo CD Application {name}'s sync {phase}"),
        timeout,
        || async {
            let app = api.get(name).await?;
            if operation_phase(&app) == Some("Failed") && phase != "Failed" {
                bail!("the sync failed: {}", summary(&app));
            }
            Ok((operation_phase(&app) == Some(phase)).then_some(app))
        },
    )
    .await
}

/// Asks Argo CD to refresh the Application at once, reading Git again and
/// comparing anew (`argocd app get --hard-refresh`). Argo CD removes the annotation
/// when it has done so.
pub async fn request_hard_refresh(client: &Client, name: &str) -> Result<()> {
    annotate(client, name, json!({"argocd.argoproj.io/refresh": "hard"})).await
}

async fn annotate(client: &Client, name: &str, annotations: Value) -> Result<()> {
    applications(client)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .with_context(|| format!("annotating Application {name}"))?;
    Ok(())
}

/// Asks Argo CD to sync the Application to its branch's head, as `argocd app sync`
/// does: an `operation` on the Application, initiated by [`SOMEONE`]. Argo CD
/// begins it and clears the field when the sync ends.
pub async fn request_sync(client: &Client, name: &str) -> Result<()> {
    let operation = json!({"operation": {
        "initiatedBy": {"username": SOMEONE},
        "sync": {"revision": "main"},
    }});
    applications(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(operation))
        .await
        .with_context(|| format!("requesting a sync of Application {name}"))?;
    Ok(())
}
