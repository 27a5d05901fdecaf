//! The demo behind `e2e/demo`, once that script has built everything and started the
//! local cluster (with Velero on its real nodes): installs refill from `manifests/`
//! with its controller as a pod, creates a small shop application on the real nodes,
//! has Velero back it up, damages its files, restores them with
//! `refill restore create ... --wait` (Velero's node agent moves the data), and
//! checks that everything is back. Ends with PASS (exit 0) or FAIL (exit 1; 130 when
//! interrupted).

mod access;
pub mod data;
pub mod scene;
pub mod ui;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::{Api, Client};
use refill::api::Phase;
use refill_e2e::fixture;
use refill_e2e::velero;
use refill_e2e::{REFILL_IMAGE, in_cluster, wait_for};

use self::data::{DAMAGE, FileState};
use self::scene::{NS, RESTORE, VELERO_NS, Volume};
use self::ui::{Ui, pad};

/// Of the demo's own requests (as admin), to tell them apart in the audit log.
const USER_AGENT: &str = "refill-demo";

/// Runs the refill demo against the local cluster; see `e2e/demo`.
#[derive(clap::Parser, Debug)]
#[command(name = "demo")]
pub struct Args {
    /// The local cluster's admin kubeconfig.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// kubectl, for `kubectl create token`.
    #[arg(long)]
    kubectl: PathBuf,
    /// The refill binary.
    #[arg(long)]
    refill: PathBuf,
    /// Where the demo keeps volumes, logs and a kubeconfig of refill's ServiceAccount.
    #[arg(long)]
    dir: PathBuf,
    /// Number of the first step printed (the script printed the ones before).
    #[arg(long, default_value_t = 1)]
    first_step: usize,
    /// Seconds the script spent before starting this program, for the total time.
    #[arg(long, default_value_t = 0)]
    started_secs_ago: u64,
}

/// What the summary reports.
#[derive(Default)]
struct Report {
    backup: String,
    restore_time: Option<Duration>,
    restored_bytes: u64,
    volumes: usize,
    failures: Vec<String>,
}

/// Runs the demo; the exit code says whether everything came back.
pub async fn main(args: Args) -> ExitCode {
    let started = Instant::now();
    let mut ui = Ui::new(args.first_step);
    let mut report = Report::default();
    let mut interrupted = false;
    let outcome = tokio::select! {
        result = run(&args, &mut ui, &mut report) => result,
        _ = tokio::signal::ctrl_c() => {
            interrupted = true;
            Err(anyhow::anyhow!(
                "interrupted; the next run of e2e/demo starts over"
            ))
        }
    };
    if let Err(e) = &outcome {
        report.failures.push(format!("{e:#}"));
    }
    summary(&args, &ui, &report, started.elapsed());
    match (interrupted, report.failures.is_empty()) {
        (true, _) => ExitCode::from(130),
        (false, true) => ExitCode::SUCCESS,
        (false, false) => ExitCode::FAILURE,
    }
}

async fn run(args: &Args, ui: &mut Ui, report: &mut Report) -> Result<()> {
    let admin = access::client(&args.kubeconfig).await?;

    ui.step(
        "Installing refill from manifests/, its controller as a pod",
        "install",
    );
    let velero = velero_summary(&admin).await?;
    ui.ok(&velero);
    ui.line("(the very first run builds refill's image: minutes on 2 cores)");
    let cluster = refill_e2e::cluster().await?;
    let pod = in_cluster::install_controller(cluster, &admin, VELERO_NS, Duration::from_secs(1800))
        .await?;
    ui.ok("CRDs of manifests/crds.yaml: DataRestore, VolumePluginRestore");
    ui.ok("RBAC of manifests/rbac.yaml for ServiceAccount refill-system/refill");
    let sa_kubeconfig = args.dir.join("refill-controller.kubeconfig");
    access::write_service_account_kubeconfig(args, &sa_kubeconfig).await?;
    let sa_client = access::client(&sa_kubeconfig).await?;
    access::show_access(ui, &sa_client).await?;
    ui.ok(&format!(
        "Deployment of manifests/deployment.yaml: replicas Ready, {} leading (Lease {}) on {}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        in_cluster::LEASE,
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default(),
    ));
    ui.line(&format!(
        "image {REFILL_IMAGE}, built from this checkout (e2e/images/refill-image.sh)"
    ));

    ui.step("Creating the sample application in namespace shop", "app");
    let began = Instant::now();
    let mut removed = scene::remove_previous_run(&admin).await?;
    if let Some(last) = removed.pop() {
        let list = if removed.is_empty() {
            last
        } else {
            format!("{} and {last}", removed.join(", "))
        };
        ui.line(&format!(
            "removed the previous run's {list} ({:.1}s)",
            began.elapsed().as_secs_f64()
        ));
    }
    let began = Instant::now();
    let volumes = scene::volumes(&args.dir.join("volumes"));
    scene::create_app(&admin, &volumes).await?;
    let ready_after = began.elapsed();
    for v in &volumes {
        let workload = match v.workload {
            "web" => "Deployment web, 2 replicas",
            _ if v.pvc.ends_with("-0") => "StatefulSet db, 3 replicas",
            _ => "",
        };
        ui.line(&format!(
            "{}  PVC {} on {}  {} files, {}",
            pad(workload, 26),
            pad(&v.pvc, 11),
            v.node,
            v.files.len(),
            data::size(v.bytes())
        ));
    }
    ui.ok(&format!(
        "pods ready: web 2/2, db 3/3 ({:.1}s)",
        ready_after.as_secs_f64()
    ));
    let began = Instant::now();
    let backup = scene::create_backup(&admin).await?;
    let pvbs = velero::pod_volume_backups(&admin, &backup).await?;
    ui.ok(&format!(
        "Velero Backup {backup}: Completed, {} PodVolumeBackups (kopia, {:.1}s)",
        pvbs.len(),
        began.elapsed().as_secs_f64()
    ));

    ui.step("Breaking the data", "damage");
    for (pvc, file, damage) in DAMAGE {
        let v = volume(&volumes, pvc)?;
        damage.apply(&v.dir.join(file))?;
    }
    let rows: Vec<(String, String)> = DAMAGE
        .iter()
        .map(|(pvc, file, damage)| (format!("{pvc}/{file}"), damage.describe()))
        .collect();
    let width = rows.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
    let damage_width = rows.iter().map(|(_, d)| d.len()).max().unwrap_or(0);
    let (mut changed, mut missing) = (0, 0);
    for ((pvc, file, _), (path, damage)) in DAMAGE.iter().zip(&rows) {
        let v = volume(&volumes, pvc)?;
        let original = &v
            .files
            .iter()
            .find(|(f, _)| f == file)
            .context("no such file")?
            .1;
        let now = match data::compare(&v.dir, file, original)? {
            FileState::Intact => "unchanged".to_string(),
            FileState::Differs(sha) => {
                changed += 1;
                let was = data::sha256_hex(original);
                format!("sha256 {} ≠ {} in backup", &sha[..8], &was[..8])
            }
            FileState::Missing => {
                missing += 1;
                "missing".into()
            }
        };
        ui.line(&format!(
            "{}  {}  {now}",
            pad(path, width),
            pad(damage, damage_width)
        ));
    }
    let total: usize = volumes.iter().map(|v| v.files.len()).sum();
    let (intact, _) = check_files(&volumes)?;
    ui.bad(&format!(
        "{} of {total} files differ from the backup: {changed} changed, {missing} missing",
        total - intact
    ));

    ui.step("Restoring with refill", "restore");
    ui.line("refill scales web and db to zero (recording their replicas), restores");
    ui.line("each PVC through a stand-in pod and a Velero PodVolumeRestore, which");
    ui.line("Velero's node agent carries out, then scales them back.");
    println!();
    ui.command(&format!(
        "refill restore create {RESTORE} --from-backup {backup} \\"
    ));
    ui.line(&ui.bold(&format!("    --include-namespaces {NS} --wait")));
    let began = Instant::now();
    let code = run_refill(
        args,
        &[
            "restore",
            "create",
            RESTORE,
            "--from-backup",
            &backup,
            "--include-namespaces",
            NS,
            "--wait",
        ],
    )
    .await?;
    report.restore_time = Some(began.elapsed());
    report.backup = backup.clone();
    println!();
    let exited = format!(
        "refill exited {code} after {:.1}s",
        began.elapsed().as_secs_f64()
    );
    if code == 0 {
        ui.ok(&exited);
    } else {
        ui.bad(&exited);
        report.failures.push(exited);
    }

    ui.step("Checking the result", "checks");
    verify(&admin, ui, &volumes, report).await?;
    ui.end_step();
    Ok(())
}

fn volume<'a>(volumes: &'a [Volume], pvc: &str) -> Result<&'a Volume> {
    volumes
        .iter()
        .find(|v| v.pvc == pvc)
        .with_context(|| format!("no volume {pvc}"))
}

/// Files identical to the backup, and a line for each one that is not.
fn check_files(volumes: &[Volume]) -> Result<(usize, Vec<String>)> {
    let mut intact = 0;
    let mut wrong = Vec::new();
    for v in volumes {
        for (file, original) in &v.files {
            match data::compare(&v.dir, file, original)? {
                FileState::Intact => intact += 1,
                FileState::Differs(_) => wrong.push(format!("{}/{file} differs", v.pvc)),
                FileState::Missing => wrong.push(format!("{}/{file} is missing", v.pvc)),
            }
        }
    }
    Ok((intact, wrong))
}

async fn verify(client: &Client, ui: &Ui, volumes: &[Volume], report: &mut Report) -> Result<()> {
    let mut failures = Vec::new();
    let mut check = |ok: bool, good: String, bad: String| {
        if ok {
            ui.ok(&good);
        } else {
            ui.bad(&bad);
            failures.push(bad);
        }
    };

    let restore = refill_e2e::fixture::get_whole(client, VELERO_NS, RESTORE).await?;
    let status = restore.status.unwrap_or_default();
    report.volumes = status.volumes.len();
    report.restored_bytes = status
        .volumes
        .iter()
        .map(|v| v.bytes_done.max(0) as u64)
        .sum();
    check(
        status.phase == Phase::Completed,
        format!("DataRestore {RESTORE}: Completed"),
        format!(
            "DataRestore {RESTORE} is {:?}{}",
            status.phase,
            if status.errors.is_empty() {
                String::new()
            } else {
                format!(": {}", status.errors.join("; "))
            }
        ),
    );

    let total: usize = volumes.iter().map(|v| v.files.len()).sum();
    let (intact, wrong) = check_files(volumes)?;
    check(
        wrong.is_empty(),
        format!("{intact}/{total} files match the backup byte for byte"),
        format!(
            "{} of {total} files are not as backed up: {}",
            wrong.len(),
            wrong.join(", ")
        ),
    );
    let markers: Vec<String> = volumes
        .iter()
        .filter(|v| v.dir.join(".velero").exists())
        .map(|v| v.pvc.clone())
        .collect();
    check(
        markers.is_empty(),
        "no .velero done markers left in the volumes".into(),
        format!(".velero left in {}", markers.join(", ")),
    );

    // The restore reports Completed once consumers are scaled back; their pods may
    // take a moment longer to be Ready.
    let settle = Duration::from_secs(60);
    let web = fixture::wait_ready_pods(client, NS, "web", 2, settle).await;
    let replicas = Api::<Deployment>::namespaced(client.clone(), NS)
        .get("web")
        .await?
        .spec
        .and_then(|s| s.replicas);
    check(
        web.is_ok() && replicas == Some(2),
        "Deployment web: 2/2 pods ready".into(),
        format!(
            "Deployment web: replicas {replicas:?}, {}",
            web.err().map(|e| format!("{e:#}")).unwrap_or_default()
        ),
    );
    let db = fixture::wait_ready_pods(client, NS, "db", 3, settle).await;
    let replicas = Api::<StatefulSet>::namespaced(client.clone(), NS)
        .get("db")
        .await?
        .spec
        .and_then(|s| s.replicas);
    check(
        db.is_ok() && replicas == Some(3),
        "StatefulSet db: 3/3 pods ready".into(),
        format!(
            "StatefulSet db: replicas {replicas:?}, {}",
            db.err().map(|e| format!("{e:#}")).unwrap_or_default()
        ),
    );
    let stand_ins = wait_for("stand-in pods to be gone", settle, || async {
        Ok(fixture::stand_in_pods(client, NS)
            .await?
            .is_empty()
            .then_some(()))
    })
    .await;
    check(
        stand_ins.is_ok(),
        "no stand-in pods left in namespace shop".into(),
        "stand-in pods are still in namespace shop".into(),
    );
    report.failures.extend(failures);
    Ok(())
}

fn summary(args: &Args, ui: &Ui, report: &Report, elapsed: Duration) {
    println!("\n{}", ui.bold("Summary"));
    if let Some(took) = report.restore_time
        && report.volumes > 0
    {
        ui.line(&format!(
            "refill put back {} PVCs ({}) of namespace {NS} from Velero backup",
            report.volumes,
            data::size(report.restored_bytes),
        ));
        ui.line(&format!(
            "{} in {:.1}s, scaling web and db down for it and back up.",
            report.backup,
            took.as_secs_f64()
        ));
    }
    ui.line("Velero took the backup and its node agent moved the data back;");
    ui.line("refill's controller ran as a pod in namespace refill-system.");
    ui.line("The local cluster keeps running. To look around:");
    let hints = [
        (
            "source e2e/cluster/env.sh".to_string(),
            "kubectl and KUBECONFIG".to_string(),
        ),
        (format!("kubectl -n {NS} get deploy,sts,pvc"), String::new()),
        (
            format!("{} restore describe {RESTORE}", tilde(&args.refill)),
            String::new(),
        ),
    ];
    let cleanup = [
        (
            "e2e/cluster/down.sh".to_string(),
            "stop the cluster, keep its state".to_string(),
        ),
        (
            "e2e/cluster/down.sh --purge".to_string(),
            "stop it and delete its state".to_string(),
        ),
        (
            format!("rm -rf {}", tilde(&args.dir)),
            "the demo's volumes".to_string(),
        ),
    ];
    let width = cleanup
        .iter()
        .map(|(c, _)| c.chars().count())
        .max()
        .unwrap_or(0);
    for (command, what) in &hints {
        ui.line(format!("  {}  {what}", pad(command, width)).trim_end());
    }
    ui.line("To clean up:");
    for (command, what) in &cleanup {
        ui.line(&format!("  {}  {what}", pad(command, width)));
    }
    ui.line(&format!(
        "Took {}s: {}s to build and start the cluster, then",
        args.started_secs_ago + elapsed.as_secs(),
        args.started_secs_ago,
    ));
    ui.line(&format!("{}.", ui.timings()));
    println!();
    if report.failures.is_empty() {
        println!("{}", ui.bold(&ui.green("PASS")));
    } else {
        for failure in &report.failures {
            println!("{} {failure}", ui.red("✗"));
        }
        println!(
            "{} (the controller's log: kubectl -n refill-system logs deploy/refill)",
            ui.bold(&ui.red("FAIL"))
        );
    }
}

/// Runs the refill CLI in this terminal, as the admin user would type it.
async fn run_refill(args: &Args, command: &[&str]) -> Result<i32> {
    let status = tokio::process::Command::new(&args.refill)
        .args(command)
        .env("KUBECONFIG", &args.kubeconfig)
        .env_remove("REFILL_NAMESPACE")
        .kill_on_drop(true)
        .status()
        .await
        .with_context(|| format!("running {}", args.refill.display()))?;
    status
        .code()
        .with_context(|| format!("`refill {}` ended by {status}", command.join(" ")))
}

/// A path with the home directory written as `~`.
fn tilde(path: &Path) -> String {
    let text = path.display().to_string();
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && text.starts_with(&home) => {
            format!("~{}", &text[home.len()..])
        }
        _ => text,
    }
}

/// One line on the Velero the demo uses: its version and where its pods run.
async fn velero_summary(client: &Client) -> Result<String> {
    let image = velero::server_image(client).await?.context(
        "no Velero in namespace velero: e2e/cluster/up.sh installs it on the real nodes",
    )?;
    let agents = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), VELERO_NS)
        .list(&kube::api::ListParams::default().labels("name=node-agent"))
        .await?;
    let mut nodes: Vec<String> = agents
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    nodes.sort();
    Ok(format!(
        "Velero ({image}) with node agents on {}; backups go to the local S3 server",
        nodes.join(", ")
    ))
}
