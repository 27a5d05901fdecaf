//! The benchmark at N = 3, so that it keeps working between full runs: refill and the
//! kubectl script (`e2e/bench/kubectl-restore.sh`) each restore three PVCs, and the
//! benchmark checks both end states (files byte for byte, replicas back and Ready, no
//! helper pod left); it exits non-zero otherwise. The progress check runs too, with
//! two PVCs. Times are not asserted.

use std::time::Duration;

use anyhow::{Context, Result, ensure};

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

    let measured: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
    let outcome = &measured["runs"][0];
    ensure!(outcome["n"] == 3, "{outcome:#}");
    ensure!(outcome["refill_phase"] == "Completed", "{outcome:#}");
    ensure!(
        outcome["baseline"]["claims"] == 3,
        "the kubectl script did not restore all three PVCs: {outcome:#}"
    );
    ensure!(
        outcome["end_state_checked"] == serde_json::json!(["refill", "kubectl script"]),
        "both end states must have been checked: {outcome:#}"
    );
    ensure!(
        outcome["requests"]["total"].as_u64().unwrap_or(0) > 0,
        "no request of the controller was found in the audit log: {outcome:#}"
    );
    ensure!(
        outcome["controller_peak_rss"].as_u64().unwrap_or(0) > 0,
        "the controller's memory was not read: {outcome:#}"
    );
    let progress = &measured["progress"];
    ensure!(
        progress["pvcs"] == 2 && progress["requests"]["total"].as_u64().unwrap_or(0) > 0,
        "the progress check did not run: {progress:#}"
    );
    let text = std::fs::read_to_string(&report)?;
    ensure!(text.contains("| 3 |"), "no table in the report:\n{text}");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&report);
    Ok(())
}
