//! The benchmark at N = 3, so that it keeps working between full runs: refill (with
//! `parallel: 3`, then at its default) and the kubectl script
//! (`e2e/bench/kubectl-restore.sh`) each restore three PVCs, the floor scales the
//! three Deployments down and back, the restore floor restores them with stand-ins of
//! its own, and the benchmark checks every end state (files
//! byte for byte, replicas back and Ready, no helper pod left); it exits non-zero
//! otherwise. The progress check runs too, with two PVCs. Times are not asserted,
//! only that each was taken.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

/// A `Duration` as serde writes it, in seconds.
fn seconds(d: &Value) -> f64 {
    d["secs"].as_f64().unwrap_or(0.0) + d["nanos"].as_f64().unwrap_or(0.0) / 1e9
}

#[tokio::test]
async fn benchmark_at_three_pvcs_restores_both_ways() -> Result<()> {
    let cluster = refill_e2e::cluster().await?;
    let dir = cluster.scratch_dir("bench-smoke")?;
    let json = dir.join(format!("results-{}.json", std::process::id()));
    let report = dir.join(format!("results-{}.md", std::process::id()));
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("3")
        .args(["--progress-pvcs", "2"])
        .arg("--json")
        .arg(&json)
        .arg("--results")
        .arg(&report)
        .env("REFILL_CLUSTER_DIR", &cluster.dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .context("the benchmark at N = 3 took more than 5 minutes")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success(),
        "the benchmark failed ({}):\n{stderr}",
        output.status
    );

    let measured: Value = serde_json::from_slice(&std::fs::read(&json)?)?;
    let outcome = &measured["runs"][0];
    ensure!(outcome["n"] == 3, "{outcome:#}");
    for (run, parallel) in [("refill", json!(3)), ("refill_default", json!(null))] {
        let refill = &outcome[run];
        ensure!(
            refill["phase"] == "Completed" && refill["parallel"] == parallel,
            "{run}: {refill:#}"
        );
        ensure!(
            refill["requests"]["total"].as_u64().unwrap_or(0) > 0,
            "{run}: no request of the controller was found in the audit log: {refill:#}"
        );
        ensure!(
            refill["controller_peak_rss"].as_u64().unwrap_or(0) > 0,
            "{run}: the controller's memory was not read: {refill:#}"
        );
        ensure!(
            refill["largest_status_bytes"].as_u64().unwrap_or(0) > 0,
            "{run}: the DataRestore's status was not measured: {refill:#}"
        );
        ensure!(
            seconds(&refill["wall"]) > 0.0
                && seconds(&refill["ready_wall"]) >= seconds(&refill["wall"]),
            "{run}: its times were not taken: {refill:#}"
        );
    }
    ensure!(
        outcome["baseline"]["claims"] == 3,
        "the kubectl script did not restore all three PVCs: {outcome:#}"
    );
    ensure!(
        outcome["end_state_checked"]
            == json!([
                "refill",
                "floor",
                "restore floor",
                "refill, default parallel",
                "kubectl script"
            ]),
        "every end state must have been checked: {outcome:#}"
    );
    // The floor scaled each Deployment down and back, and saw the pods go before it
    // scaled them back and before they were Ready again.
    let floor = &outcome["floor"];
    let wall = seconds(&floor["wall"]);
    let steps: Vec<f64> = ["scaled_down", "pods_gone", "scaled_up"]
        .iter()
        .map(|k| floor[k].as_f64().unwrap_or(-1.0))
        .collect();
    ensure!(
        floor["deployments"] == 3 && floor["writes"] == 6,
        "the floor did not scale three Deployments down and back: {floor:#}"
    );
    ensure!(
        wall > 0.0 && steps[0] >= 0.0 && steps.windows(2).all(|w| w[0] <= w[1]) && steps[2] <= wall,
        "the floor's moments are out of order: {floor:#}"
    );
    // The restore floor gave each volume its stand-in and PodVolumeRestore (five writes
    // each); its files were checked with the end state above.
    let restore_floor = &outcome["restore_floor"];
    let moments: Vec<f64> = ["last_stand_in", "last_restored", "last_scaled_up"]
        .iter()
        .map(|k| restore_floor[k].as_f64().unwrap_or(-1.0))
        .collect();
    ensure!(
        restore_floor["deployments"] == 3
            && restore_floor["writes"] == 15
            && moments[0] > 0.0
            && moments.windows(2).all(|w| w[0] <= w[1])
            && moments[2] <= seconds(&restore_floor["wall"]),
        "the restore floor did not restore three volumes in order: {restore_floor:#}"
    );
    ensure!(
        seconds(&outcome["setup"]) > 0.0 && outcome["load_average"].as_f64().is_some(),
        "setup time or load not recorded: {outcome:#}"
    );
    let progress = &measured["progress"];
    ensure!(
        progress["pvcs"] == 2 && progress["requests"]["total"].as_u64().unwrap_or(0) > 0,
        "the progress check did not run: {progress:#}"
    );
    let text = std::fs::read_to_string(&report)?;
    ensure!(
        text.contains("| 3 |")
            && text.contains("refill / floor")
            && text.contains("refill / restore floor"),
        "no table with the floor in the report:\n{text}"
    );
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&report);
    Ok(())
}
