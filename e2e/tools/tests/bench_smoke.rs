//! The benchmark at N = 3, so that it keeps working between full runs: refill (with
//! `parallel: 3`, then at its default) and the kubectl script
//! (`e2e/bench/kubectl-restore.sh`) each restore three PVCs, the floor scales the
//! three Deployments down and back, the restore floor restores them with stand-ins of
//! its own, and the benchmark checks every end state (files
//! byte for byte, replicas back and Ready, no helper pod left); it exits non-zero
//! otherwise. The progress check runs too, with two PVCs. Times are not asserted,
//! only that each was taken. Then refill alone (`--refill-only`) at N = 2, which
//! keeps the rows of the sizes it did not measure.

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
    let mut args: Vec<std::ffi::OsString> = ["3", "--progress-pvcs", "2", "--json"]
        .map(Into::into)
        .into();
    args.extend([
        json.clone().into(),
        "--results".into(),
        report.clone().into(),
    ]);
    bench(cluster, &args, "the benchmark at N = 3").await?;

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
    refill_alone_keeps_the_rows_of_sizes_it_did_not_measure(cluster, &dir).await
}

/// `--refill-only` at N = 2 beside a kept row of N = 10000 (an hour's run, by hand):
/// its section shows both, its store keeps both, and another benchmark's section stays.
async fn refill_alone_keeps_the_rows_of_sizes_it_did_not_measure(
    cluster: &refill_e2e::Cluster,
    dir: &std::path::Path,
) -> Result<()> {
    let report = dir.join(format!("alone-{}.md", std::process::id()));
    let store = report.with_file_name("refill-alone.json");
    std::fs::write(
        &report,
        "# Benchmark results\n\n## Summary\n\nanother table\n",
    )?;
    let kept = json!([{
        "n": 10000, "measured": "2026-12-06 19:00 UTC", "machine": "2 cores",
        "revision": "commit abc", "command": "e2e/bench/run 10000 --refill-only",
        "load_average": 0.9, "setup_s": 1600.0, "refill_s": 2000.0, "ready_s": 2100.0,
        "requests": 210000, "writes": 146000, "status_writes": 75000, "reads": 64000,
        "watches": 0, "peak_rss_bytes": 200000000u64, "largest_status_bytes": 1024,
        "controller_cpu_s": 200.0, "machine_cpu_s": 4000.0,
        "top_requests": [["patch volumepluginrestores/status", 7.4]]
    }]);
    std::fs::write(&store, kept.to_string())?;
    let args = ["2", "--refill-only", "--results"].map(std::ffi::OsString::from);
    let mut args = args.to_vec();
    args.push(report.clone().into());
    bench(cluster, &args, "refill alone at N = 2").await?;
    let rows: Value = serde_json::from_slice(&std::fs::read(&store)?)?;
    let sizes: Vec<u64> = rows
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["n"].as_u64())
        .collect();
    ensure!(sizes == [2, 10000], "the store holds {sizes:?}: {rows:#}");
    ensure!(
        rows[0]["requests"].as_u64().unwrap_or(0) > 0
            && rows[0]["peak_rss_bytes"].as_u64().unwrap_or(0) > 0,
        "N = 2 was not measured: {rows:#}"
    );
    let text = std::fs::read_to_string(&report)?;
    ensure!(
        text.contains("another table")
            && text.contains("## refill alone at scale")
            && text.contains("| 2 | ")
            && text.contains("| 10000 | 2026-12-06 19:00 UTC, commit abc |"),
        "the section lacks a row, or another section went:\n{text}"
    );
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_file(&store);
    Ok(())
}

/// Runs the benchmark with `args` on `cluster`, within five minutes; fails with its
/// stderr if it fails.
async fn bench(
    cluster: &refill_e2e::Cluster,
    args: &[std::ffi::OsString],
    what: &str,
) -> Result<()> {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .env("REFILL_CLUSTER_DIR", &cluster.dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .with_context(|| format!("{what} took more than 5 minutes"))??;
    ensure!(
        output.status.success(),
        "{what} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
