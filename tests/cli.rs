//! The `refill` binary against the local cluster: what a person typing the commands
//! sees, and what it leaves behind. Each test uses its own namespace as Velero's
//! namespace (`-n`), with Backups and PodVolumeBackups made up as Velero writes them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{ApiResource, ListParams, Patch, PatchParams};
use refill::api::{Backup, DataRestore};
use refill_e2e::fixture::{self, PodVolume, Run, Scene};
use refill_e2e::node_agent::NodeAgentConfig;
use refill_e2e::{TestEnv, run_test, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The test's scene (see [`Scene`]), its waits bounded by [`TIMEOUT`].
async fn scene(env: TestEnv) -> Result<Scene> {
    Scene::new(env, TIMEOUT).await
}

/// Runs the binary with the test's kubeconfig, the test namespace as Velero's.
async fn refill(env: &TestEnv, args: &[&str]) -> Result<Run> {
    let bin = Path::new(env!("CARGO_BIN_EXE_refill"));
    fixture::run_refill(bin, &env.cluster.kubeconfig, env.namespace(), args).await
}

/// Backup `nightly` of the claim `data` as pod `web-abc` mounted it: `bytes` in the
/// snapshot `snapshot`.
async fn nightly(s: &Scene, snapshot: &str, bytes: i64) -> Result<Backup> {
    let volume = PodVolume {
        namespace: &s.ns,
        pod: "web-abc",
        volume: "data",
        pvc: Some("data"),
        snapshot_id: snapshot,
        bytes,
    };
    s.velero_backup("nightly", &[volume]).await
}

/// `refill restore create <name> --from-backup nightly --pvc <pvc>`, then `more`.
async fn create_from_nightly(env: &TestEnv, name: &str, pvc: &str, more: &[&str]) -> Result<Run> {
    let mut args = vec![
        "restore",
        "create",
        name,
        "--from-backup",
        "nightly",
        "--pvc",
        pvc,
    ];
    args.extend_from_slice(more);
    refill(env, &args).await
}

/// The resourceVersion of every object a restore could touch, DataRestores too, by
/// `Kind/name`.
async fn versions(s: &Scene) -> Result<BTreeMap<String, String>> {
    let mut out = s.versions().await?;
    let restores = ApiResource::erase::<DataRestore>(&());
    fixture::add_versions(&s.client, &s.ns, &restores, &mut out).await?;
    Ok(out)
}

/// The CLI's requests about the test namespace, from the apiserver's audit log.
fn cli_requests(env: &TestEnv) -> Result<Vec<Value>> {
    let log = std::fs::read_to_string(env.cluster.audit_log_path())?;
    Ok(log
        .lines()
        .filter(|l| l.contains(refill::cli::USER_AGENT))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["userAgent"] == refill::cli::USER_AGENT)
        .filter(|e| {
            e["objectRef"]["namespace"] == env.namespace() || e["objectRef"]["namespace"].is_null()
        })
        .collect())
}

const SNAPSHOT: &str = "3f2a9c1e8b7d4a60";

#[tokio::test]
async fn backup_describe_lists_the_file_system_backed_volumes() -> Result<()> {
    run_test("cli-backup-describe", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        // Longer than a label value may be: Velero shortens it on the PodVolumeBackups.
        let name = format!("nightly-{}", "0123456789".repeat(7));
        s.velero_backup(
            &name,
            &[
                PodVolume {
                    namespace: &s.ns,
                    pod: "db-0",
                    volume: "data",
                    pvc: Some("data-db-0"),
                    snapshot_id: SNAPSHOT,
                    bytes: 1_258_291,
                },
                PodVolume {
                    namespace: &s.ns,
                    pod: "db-1",
                    volume: "data",
                    pvc: Some("data-db-1"),
                    snapshot_id: "77aa",
                    bytes: 2048,
                },
                PodVolume {
                    namespace: &s.ns,
                    pod: "db-0",
                    volume: "scratch",
                    pvc: None,
                    snapshot_id: "99bb",
                    bytes: 10,
                },
            ],
        )
        .await?;
        // Another backup's volumes are not this one's.
        s.velero_backup(
            "other",
            &[PodVolume {
                namespace: &s.ns,
                pod: "x",
                volume: "v",
                pvc: Some("x"),
                snapshot_id: "1",
                bytes: 1,
            }],
        )
        .await?;

        let run = refill(env, &["backup", "describe", &name]).await?.ok()?;
        let out = &run.stdout;
        assert!(out.contains("Phase:                 Completed"), "{out}");
        assert!(
            out.contains("File-system-backed volumes: 3, 2 restorable by refill"),
            "{out}"
        );
        assert!(out.contains("data-db-0"), "{out}");
        assert!(out.contains(SNAPSHOT), "{out}");
        assert!(out.contains("1.2 MiB"), "{out}");
        assert!(
            out.contains("data-db-1") && out.contains("2.0 KiB"),
            "{out}"
        );
        let scratch = out
            .lines()
            .find(|l| l.contains("scratch"))
            .context("no scratch line")?;
        assert!(scratch.contains("no: not a PVC"), "{out}");
        assert!(
            !out.contains("   x   "),
            "volume of another backup shown: {out}"
        );
        let ns = env.namespace();
        assert!(
            out.contains(&format!("--from-backup {name} --pvc {ns}/data-db-0")),
            "{out}"
        );

        let run = refill(env, &["backup", "describe", &name, "-o", "json"])
            .await?
            .ok()?;
        let doc: Value = serde_json::from_str(&run.stdout)?;
        let volumes = doc["volumes"].as_array().context("no volumes")?;
        assert_eq!(volumes.len(), 3, "{doc:#}");
        assert_eq!(volumes[0]["pvc"], "data-db-0", "{doc:#}");
        assert_eq!(volumes[0]["snapshotID"], SNAPSHOT);
        assert_eq!(volumes[0]["totalBytes"], 1_258_291);

        let run = refill(env, &["backup", "get"]).await?.ok()?;
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&name))
            .context("backup not listed")?;
        let columns: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(columns[1..3], ["Completed", "3"], "{}", run.stdout);
        let other = run
            .stdout
            .lines()
            .find(|l| l.starts_with("other "))
            .context("other not listed")?;
        assert_eq!(other.split_whitespace().nth(2), Some("1"), "{}", run.stdout);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn an_unknown_backup_is_a_clear_error() -> Result<()> {
    run_test("cli-unknown-backup", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        let ns = env.namespace().to_string();
        let expected = format!(
            "error: backup \"nope\" not found in namespace \"{ns}\"; list backups with: refill backup get\n"
        );
        // Creating names the flag that is wrong.
        let expected_create = expected.replacen("error: ", "error: --from-backup: ", 1);
        for extra in [&["--dry-run"][..], &[], &["--wait"]] {
            let mut args = vec!["restore", "create", "r1", "--from-backup", "nope", "--pvc", "shop/data"];
            args.extend_from_slice(extra);
            let run = refill(env, &args).await?;
            assert_eq!(run.code, 1, "{extra:?}: {run:#?}");
            assert_eq!(run.stderr, expected_create, "{extra:?}");
            assert_eq!(run.stdout, "", "{extra:?}");
        }
        let left = env.api::<DataRestore>().list(&ListParams::default()).await?;
        assert!(left.items.is_empty(), "a DataRestore was created: {left:?}");

        let run = refill(env, &["backup", "describe", "nope"]).await?;
        assert_eq!(run.code, 1);
        assert_eq!(run.stderr, expected);
        let run = refill(env, &["restore", "describe", "nope"]).await?;
        assert_eq!(run.code, 1);
        assert_eq!(
            run.stderr,
            format!("error: restore \"nope\" not found in namespace \"{ns}\"; list restores with: refill restore get\n")
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn dry_run_prints_the_plan_and_changes_nothing() -> Result<()> {
    run_test("cli-dry-run", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        let ns = env.namespace().to_string();
        s.volume("data", "node-b", &[]).await?;
        s.deployment("web", 2, &["data"]).await?;
        nightly(&s, SNAPSHOT, 1_258_291).await?;

        let before = versions(&s).await?;
        let pvc = format!("{ns}/data");
        let run = create_from_nightly(env, "r1", &pvc, &["--dry-run"])
            .await?
            .ok()?;
        let out = &run.stdout;
        assert!(out.starts_with("Dry run: nothing was changed."), "{out}");
        assert!(
            out.contains("\nMethod:        Direct — the app stops")
                && out.contains(
                    "\nExtra files:   deleted (each volume will hold exactly the backup)"
                ),
            "{out}"
        );
        let volume = out
            .lines()
            .find(|l| l.trim_start().starts_with(&pvc))
            .context("PVC not in plan")?;
        assert!(volume.contains(SNAPSHOT), "{out}");
        assert!(volume.contains("1.2 MiB"), "{out}");
        assert!(
            volume.contains("node-b"),
            "stand-in placement missing: {out}"
        );
        let consumer = out
            .lines()
            .find(|l| l.contains("Deployment"))
            .context("no consumer in plan")?;
        assert!(consumer.contains(&format!("{ns}/web")), "{out}");
        assert!(consumer.contains("scale 2 → 0"), "{out}");

        // -o yaml prints the DataRestore that would be created, and still creates nothing.
        let run = create_from_nightly(env, "r1", &pvc, &["--dry-run", "-o", "yaml"])
            .await?
            .ok()?;
        let object: DataRestore = yaml_serde::from_str(&run.stdout)?;
        assert_eq!(object.spec.pvcs, vec![pvc.clone()]);

        // A request validation refuses is refused with the controller's words.
        let run = create_from_nightly(env, "r2", &format!("{ns}/missing"), &["--dry-run"]).await?;
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(
            run.stderr
                .starts_with("error: restore \"r2\" would be refused: "),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.contains(&format!("{ns}/missing")),
            "{}",
            run.stderr
        );

        let after = versions(&s).await?;
        assert_eq!(before, after, "the dry run changed objects");
        assert!(
            !after.keys().any(|k| k.starts_with("DataRestore/")),
            "{after:?}"
        );

        let requests = wait_for("the CLI's requests in the audit log", TIMEOUT, || async {
            let requests = cli_requests(env)?;
            Ok((!requests.is_empty()).then_some(requests))
        })
        .await?;
        let writes: Vec<&Value> = requests
            .iter()
            .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
            .collect();
        assert!(writes.is_empty(), "the dry run wrote: {writes:#?}");

        let run = refill(env, &["restore", "get"]).await?.ok()?;
        assert_eq!(run.stdout, "");
        assert_eq!(
            run.stderr,
            format!("No restores found in namespace \"{ns}\".\n")
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn completions_and_usage_errors_need_no_cluster() -> Result<()> {
    for shell in ["bash", "zsh", "fish"] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_refill"))
            .args(["completion", shell])
            .output()
            .await?;
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{shell}: {output:?}");
        assert!(
            script.contains("refill") && script.contains("restore"),
            "{shell}: {script}"
        );
    }
    // Each usage error names the flag at fault. (`--concurrency 0` would be
    // kube-runtime's unbounded.)
    for (args, flag) in [
        (
            &["restore", "create", "r1", "--pvc", "a/b"][..],
            "--from-backup",
        ),
        (
            &[
                "restore",
                "create",
                "r1",
                "--from-backup",
                "b1",
                "--pvc",
                "a/b",
                "--path",
                "db",
                "--method",
                "staged",
            ][..],
            "--method",
        ),
        (&["controller", "--concurrency", "0"][..], "--concurrency"),
        (
            &["controller", "--requests-per-namespace", "0"][..],
            "--requests-per-namespace",
        ),
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_refill"))
            .args(args)
            .output()
            .await?;
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(flag),
            "{args:?}: {output:?}"
        );
    }

    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_refill"))
        .arg("--help")
        .output()
        .await?;
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("Exit codes:") && help.contains("kubectl-refill"),
        "{help}"
    );

    // Nothing listens on port 1: the error says where it tried and what to check.
    let dir = std::env::temp_dir().join(format!("refill-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
",
    )?;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_refill"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["backup", "get"])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr.starts_with("error: cannot reach the Kubernetes API at https://127.0.0.1:1/: ")
            && stderr.contains(
                "Is the cluster up, and is KUBECONFIG (or --kubeconfig/--context) right?"
            ),
        "{stderr}"
    );

    // Linked as kubectl-refill, it is a kubectl plugin and works the same.
    let plugin = dir.join("kubectl-refill");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_refill"), &plugin)?;
    let output = tokio::process::Command::new(&plugin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["restore", "get"])
        .output()
        .await?;
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot reach the Kubernetes API"),
        "{output:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Runs `body` with a refill controller (in this process) and the simulated node
/// agent serving the test namespace. Afterwards, whatever the outcome, the
/// DataRestores are deleted while the controller still runs, so that no finalizer
/// holds the namespace back.
async fn with_controller<F, Fut>(s: &Scene, body: F) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let controller = s.controller().await?;
    let agent = s.node_agent_with(NodeAgentConfig {
        // Slow enough that progress is reported more than once.
        bytes_per_second: Some(SIZE as u64),
        ..s.node_agent_config()
    });

    let outcome = body().await;

    let restores = s.env.api::<DataRestore>();
    let _ = restores
        .delete_collection(&Default::default(), &ListParams::default())
        .await;
    let gone = wait_for("DataRestores gone", Duration::from_secs(30), || async {
        Ok(restores
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await;
    if gone.is_err() {
        for dr in restores.list(&ListParams::default()).await? {
            let strip = Patch::Merge(json!({ "metadata": { "finalizers": null } }));
            restores
                .patch(&dr.name_any(), &PatchParams::default(), &strip)
                .await?;
        }
    }
    controller.kill().await;
    agent.stop().await;
    outcome.and(gone)
}

/// Size of the snapshot the restore tests put back: 1.2 MiB.
const SIZE: usize = 1_258_291;

#[tokio::test]
async fn create_wait_follows_the_restore_to_completed_then_describe_tells_the_story() -> Result<()>
{
    run_test("cli-wait", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        let ns = env.namespace().to_string();
        let dir = s.volume("data", "node-b", &[]).await?;
        s.deployment("web", 2, &["data"]).await?;
        let content = vec![b'x'; SIZE];
        refill_e2e::node_agent::write_snapshot(
            &s.snapshots,
            SNAPSHOT,
            &[("restored.bin", &content)],
        )?;
        nightly(&s, SNAPSHOT, SIZE as i64).await?;
        with_controller(&s, || async {
            let pvc = format!("{ns}/data");
            let run = create_from_nightly(env, "r1", &pvc, &["--timeout", "3m", "--wait"]).await?;
            assert_eq!(run.code, 0, "{run:#?}");
            assert!(
                run.stdout
                    .starts_with("restore \"r1\" Completed: 1 volume(s), 1.2 MiB"),
                "{run:#?}"
            );
            // Not a terminal here: plain lines, one per phase change.
            let err = &run.stderr;
            assert!(
                err.contains(&format!("restore \"r1\" created in namespace \"{ns}\"")),
                "{err}"
            );
            assert!(
                err.contains("restore r1: Restoring from backup nightly, 1 volume(s)"),
                "{err}"
            );
            assert!(
                err.contains(&format!("  {pvc}: Restoring on node-b")),
                "{err}"
            );
            assert!(
                err.contains(&format!("  {pvc}: Completed, 1.2 MiB")),
                "{err}"
            );
            assert!(err.contains("restore r1: Completed"), "{err}");
            assert!(
                !err.contains('\r') && !err.contains('\u{1b}'),
                "terminal control codes in a pipe: {err:?}"
            );

            let data = dir.join("restored.bin");
            assert_eq!(
                std::fs::read(&data)?.len(),
                SIZE,
                "data not restored into {}",
                data.display()
            );
            let web = env.api::<Deployment>().get("web").await?;
            assert_eq!(
                web.spec.and_then(|s| s.replicas),
                Some(2),
                "consumer not brought back"
            );

            // Following a restore that has ended returns at once.
            let run = refill(env, &["restore", "wait", "r1"]).await?.ok()?;
            assert!(
                run.stdout
                    .starts_with("restore \"r1\" Completed: 1 volume(s), 1.2 MiB"),
                "{run:#?}"
            );

            let run = refill(env, &["restore", "get"]).await?.ok()?;
            let line = run
                .stdout
                .lines()
                .find(|l| l.starts_with("r1 "))
                .context("r1 not listed")?;
            let columns: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(
                columns[..4],
                ["r1", "nightly", "Completed", "1/1"],
                "{}",
                run.stdout
            );

            let run = refill(env, &["restore", "describe", "r1"]).await?.ok()?;
            let out = &run.stdout;
            assert!(out.contains("Phase:         Completed"), "{out}");
            let volume = out
                .lines()
                .find(|l| l.trim_start().starts_with(&pvc))
                .context("no volume row")?;
            assert!(
                volume.contains("Completed") && volume.contains("node-b"),
                "{out}"
            );
            assert!(volume.contains("1.2 MiB/1.2 MiB"), "{out}");
            let consumer = out
                .lines()
                .find(|l| l.contains("Deployment"))
                .context("no consumer row")?;
            assert!(
                consumer.contains(&format!("{ns}/web")) && consumer.contains(" 2 "),
                "{out}"
            );
            assert!(consumer.contains("Resumed"), "{out}");
            let events = out
                .split("\nEvents:\n")
                .nth(1)
                .context("no events section")?;
            assert!(
                !events.starts_with("  none"),
                "no events of the DataRestore: {out}"
            );

            let run = refill(env, &["restore", "describe", "r1", "--details"])
                .await?
                .ok()?;
            let plugin = run
                .stdout
                .split("Volume plugin restores:\n")
                .nth(1)
                .context("no VPR section")?;
            assert!(
                plugin.lines().next().is_some_and(|l| l.contains("NAME")),
                "{}",
                run.stdout
            );
            assert!(
                plugin.contains(&pvc) && plugin.contains(SNAPSHOT),
                "{}",
                run.stdout
            );

            let run = refill(env, &["restore", "describe", "r1", "-o", "json"])
                .await?
                .ok()?;
            let object: DataRestore = serde_json::from_str(&run.stdout)?;
            assert_eq!(
                object.status.map(|s| s.phase),
                Some(refill::api::Phase::Completed)
            );

            let run = refill(env, &["restore", "delete", "r1", "--wait"])
                .await?
                .ok()?;
            assert!(run.stdout.ends_with("restore \"r1\" deleted\n"), "{run:#?}");
            let left = env.api::<DataRestore>().get_opt("r1").await?;
            assert!(left.is_none(), "still there: {left:?}");
            Ok(())
        })
        .await
    })
    .await
}

#[tokio::test]
async fn a_failed_restore_exits_3_and_names_the_volume() -> Result<()> {
    run_test("cli-fails", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        let ns = env.namespace().to_string();
        s.volume("data", "node-a", &[]).await?;
        // No snapshot directory: the node agent fails the PodVolumeRestore.
        nightly(&s, "gone", 10).await?;
        with_controller(&s, || async {
            let pvc = format!("{ns}/data");
            let run = create_from_nightly(env, "r1", &pvc, &["--timeout", "3m", "--wait"]).await?;
            assert_eq!(run.code, 3, "{run:#?}");
            assert!(
                run.stderr
                    .contains("error: restore \"r1\" ended Failed: 0 of 1 volume(s) restored"),
                "{run:#?}"
            );
            assert!(
                run.stderr.contains(&format!("  {pvc}: Failed: ")),
                "{run:#?}"
            );
            assert!(run.stderr.contains("snapshot gone not found"), "{run:#?}");
            assert!(
                run.stderr
                    .contains(&format!("see: refill restore describe r1 -n {ns}")),
                "{run:#?}"
            );

            // The controller's finalizer holds it until the rollback is done.
            let run = refill(env, &["restore", "delete", "r1", "--wait"])
                .await?
                .ok()?;
            assert!(run.stdout.ends_with("restore \"r1\" deleted\n"), "{run:#?}");
            Ok(())
        })
        .await
    })
    .await
}

#[tokio::test]
async fn without_a_controller_wait_says_so_instead_of_hanging() -> Result<()> {
    run_test("cli-no-controller", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        let ns = env.namespace().to_string();
        // A request validation accepts: anything less is refused before it is created.
        s.volume("data", "node-a", &[]).await?;
        nightly(&s, SNAPSHOT, 10).await?;
        let pvc = format!("{ns}/data");
        let started = std::time::Instant::now();
        let more = ["--wait", "--pickup-timeout", "2s"];
        let run = create_from_nightly(env, "r1", &pvc, &more).await?;
        assert_eq!(run.code, 4, "{run:#?}");
        assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
        assert!(
            run.stderr.contains(&format!(
                "error: No refill controller has picked up restore \"r1\" after 2s. Is one running for namespace \"{ns}\"? Start one with `refill controller -n {ns}`"
            )),
            "{run:#?}"
        );

        // The restore stays, and says what it waits for.
        let run = refill(env, &["restore", "get", "r1"]).await?.ok()?;
        let line = run.stdout.lines().nth(1).context("no row")?;
        assert_eq!(line.split_whitespace().take(4).collect::<Vec<_>>(), ["r1", "nightly", "-", "-"], "{}", run.stdout);
        let run = refill(env, &["restore", "describe", "r1"]).await?.ok()?;
        assert!(run.stdout.contains("no controller has picked it up yet"), "{}", run.stdout);

        // Without a controller there is no finalizer: it goes at once.
        let run = refill(env, &["restore", "delete", "r1"]).await?.ok()?;
        assert_eq!(run.stdout, "restore \"r1\" deleted\n");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn schedule_verbs_create_list_pause_and_delete_and_refuse_a_wrong_cron() -> Result<()> {
    run_test("cli-schedule", |env| async move {
        let s = scene(env).await?;
        let env = &s.env;
        let pvc = format!("{}/data", s.ns);
        let schedules = env.api::<refill::api::DataRestoreSchedule>();

        // A wrong cron is named by its flag, and nothing is created.
        let run = refill(
            env,
            &[
                "schedule",
                "create",
                "standby",
                "--follow-schedule",
                "nightly",
                "--cron",
                "61 * * * *",
                "--pvc",
                &pvc,
            ],
        )
        .await?;
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(run.stderr.contains("--cron"), "{}", run.stderr);
        assert!(
            schedules
                .list(&ListParams::default())
                .await?
                .items
                .is_empty()
        );

        // Velero's CRD wants a template the Rust type does not carry.
        let velero_schedule: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "velero.io/v1", "kind": "Schedule",
            "metadata": {"name": "nightly", "namespace": s.ns},
            "spec": {"schedule": "0 2 * * *", "template": {"includedNamespaces": ["shop"]}},
        }))?;
        let resource = ApiResource::erase::<refill::api::Schedule>(&());
        kube::Api::<kube::api::DynamicObject>::namespaced_with(s.client.clone(), &s.ns, &resource)
            .create(&Default::default(), &velero_schedule)
            .await?;
        let run = refill(
            env,
            &[
                "schedule",
                "create",
                "standby",
                "--follow-schedule",
                "nightly",
                "--pvc",
                &pvc,
                "--paused",
            ],
        )
        .await?
        .ok()?;
        assert!(run.stdout.contains("\"standby\" created"), "{}", run.stdout);
        let made = schedules.get("standby").await?;
        assert_eq!(made.spec.velero_schedule.as_deref(), Some("nightly"));
        assert_eq!(made.spec.template.pvcs, [pvc]);
        assert!(made.spec.paused);

        let listed = refill(env, &["schedule", "get"]).await?.ok()?;
        assert!(
            listed.stdout.contains("standby") && listed.stdout.contains("nightly"),
            "{}",
            listed.stdout
        );
        refill(env, &["schedule", "unpause", "standby"])
            .await?
            .ok()?;
        assert!(!schedules.get("standby").await?.spec.paused);
        refill(env, &["schedule", "pause", "standby"]).await?.ok()?;
        assert!(schedules.get("standby").await?.spec.paused);
        let described = refill(env, &["schedule", "describe", "standby"])
            .await?
            .ok()?;
        assert!(described.stdout.contains("nightly"), "{}", described.stdout);
        refill(env, &["schedule", "delete", "standby"])
            .await?
            .ok()?;
        wait_for("schedule standby deleted", TIMEOUT, || async {
            Ok(schedules.get_opt("standby").await?.is_none().then_some(()))
        })
        .await?;
        let missing = refill(env, &["schedule", "describe", "standby"]).await?;
        assert_eq!(missing.code, 1, "{missing:#?}");
        Ok(())
    })
    .await
}
