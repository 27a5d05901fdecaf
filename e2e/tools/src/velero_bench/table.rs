//! The results section: the ways side by side, with the loadConcurrency run, the
//! physical limit and the targets.

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::bench::real_data::Damage;
use crate::bench::report;

use super::{Args, BIG_NS, Floor, MANY_NS, MIB, REVISION, Row, Run, Scene, Way, Written};

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

const HEADER: &str = "| volumes | damage | way | load when it began | wall | app downtime, mean | app downtime, max | data rate | written into the claims | writes by refill | writes by Velero | volumes as backed up |\n\
    |---|---|---|--|--:|--:|--:|--:|--:|--:|--:|---|\n";

fn table_row(row: &Row) -> String {
    let checked = match &row.check {
        Ok(()) => "yes".to_string(),
        Err(e) => format!("**no**: {}", e.replace('|', "/")),
    };
    match &row.run {
        Ok(run) => {
            let written = match &run.written {
                Written::All(bytes) => mib(*bytes),
                Written::Copied(c) => format!(
                    "{} ({} files; {} unchanged, {} deleted)",
                    mib(c.bytes_written),
                    c.files_written,
                    c.unchanged,
                    c.deleted
                ),
            };
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} MiB/s | {written} | {} | {} | {checked} |\n",
                row.scene,
                row.damage,
                row.way.label(),
                run.load,
                secs(run.wall),
                secs(run.mean()),
                secs(run.max()),
                run.rate(),
                run.writes["refill"],
                run.writes["velero"],
            )
        }
        Err(e) => format!(
            "| {} | {} | {} | - | failed: {} | - | - | - | - | - | - | {checked} |\n",
            row.scene,
            row.damage,
            row.way.label(),
            e.replace('|', "/")
        ),
    }
}

fn find<'a>(rows: &'a [Row], scene: &str, damage: &str, way: Way) -> Option<&'a Run> {
    rows.iter()
        .find(|r| {
            r.scene == scene && r.way == way && (way == Way::VeleroAlone || r.damage == damage)
        })
        .and_then(|r| r.run.as_ref().ok())
}

pub(super) fn render(
    args: &Args,
    command: &str,
    scenes: &[Scene],
    floors: &[Floor],
    rows: &[Row],
    raised: &[Row],
    backup_secs: f64,
) -> String {
    let now = Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string();
    let mut s = String::new();
    let big = &scenes[0];
    let many = &scenes[1];
    let _ = writeln!(
        s,
        "\n## Real data: refill in place vs. Velero alone\n\n\
         Measured {now} on {}, refill at {}, with `{command}`: each volume restored in \
         place by refill Direct and refill Staged after a damage, and by Velero alone \
         (delete the namespace, `velero restore create`), from one Velero v1.18.3 \
         backup (kopia, {backup_secs:.0} s) of two namespaces on the two real nodes of \
         the local cluster: `{BIG_NS}`, one app whose claim holds {} MiB in {} files \
         (half in files of up to 64 MiB, 30% in 1 MiB files, 20% in files of 2-62 KiB), \
         and `{MANY_NS}`, {} apps ({} large, {} small) whose claims hold {} MiB in {} files.\n",
        report::machine(),
        REVISION.get().cloned().unwrap_or_else(report::revision),
        big.size.bytes >> 20,
        big.size.files,
        many.apps.len(),
        args.large,
        args.small,
        many.size.bytes >> 20,
        many.size.files,
    );
    let _ = writeln!(
        s,
        "Damage, before each refill restore: \"1% of files changed\" rewrites every 100th \
         file in path order with new bytes of the same size; \"every file changed\" \
         rewrites them all; both add two files of 256 KiB to each volume, which the \
         restore must remove. Velero alone deletes the namespace, so damage does not \
         matter to it. Downtime is per app, from its last Ready pod going to a Ready \
         pod again (an app whose pod never went down counts 0). Data rate is the bytes \
         the PodVolumeRestores report (the whole backup of those volumes; for Staged, \
         written into the scratch claims) over the wall time. Written into the claims: \
         by the node agent (Direct, Velero alone), or by refill's copier (Staged). \
         Writes are API writes by each service account (audit log). Every volume was \
         then compared byte for byte, with mode and owner, against a copy taken \
         before the backup.\n"
    );
    s.push_str(HEADER);
    for row in rows {
        s.push_str(&table_row(row));
    }
    if !raised.is_empty() {
        let _ = writeln!(
            s,
            "\n### With the node agent's loadConcurrency at {}\n\n\
             The same ways on `{MANY_NS}` (1% of files changed) with the node agent \
             pointed at a ConfigMap (`--node-agent-configmap`) holding \
             `{{\"loadConcurrency\": {{\"globalConfig\": {}}}}}`: each node agent moves \
             up to {} volumes at once instead of 1. Its arguments were put back after.\n",
            args.load_concurrency, args.load_concurrency, args.load_concurrency
        );
        s.push_str(HEADER);
        for row in raised {
            s.push_str(&table_row(row));
        }
        let _ = writeln!(
            s,
            "\n| way | wall, 1 per node | wall, {} per node | change | downtime mean, 1 → {} | downtime max, 1 → {} |\n|---|--:|--:|--:|--:|--:|",
            args.load_concurrency, args.load_concurrency, args.load_concurrency
        );
        for way in [Way::Direct, Way::Staged, Way::VeleroAlone] {
            let damage = Damage::OnePercent.label();
            if let (Some(one), Some(more)) = (
                find(rows, &many.label, damage, way),
                find(raised, &many.label, damage, way),
            ) {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:+.0}% | {} → {} | {} → {} |",
                    way.label(),
                    secs(one.wall),
                    secs(more.wall),
                    (more.wall.as_secs_f64() / one.wall.as_secs_f64() - 1.0) * 100.0,
                    secs(one.mean()),
                    secs(more.mean()),
                    secs(one.max()),
                    secs(more.max()),
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\n### The physical limit\n\n\
         The same bytes on the same disk with no Kubernetes: `cp -a` of each volume's \
         directory (as written before the backup) to an empty directory, then `sync`; \
         and both trees read side by side and compared byte for byte, as the copier \
         compares (the page cache as warm as the benchmark left it).\n\n\
         | volumes | files | data | `cp -a` + `sync` | rate | read and compare both | rate |\n\
         |---|--:|--:|--:|--:|--:|--:|"
    );
    for f in floors {
        let rate = |d: Duration| f.size.bytes as f64 / MIB / d.as_secs_f64();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} MiB/s | {} | {:.1} MiB/s |",
            f.scene,
            f.size.files,
            mib(f.size.bytes),
            secs(f.copy),
            rate(f.copy),
            secs(f.compare),
            rate(f.compare),
        );
    }
    s.push_str(&targets(scenes, rows));
    s
}

/// The "against the targets" table.
fn targets(scenes: &[Scene], rows: &[Row]) -> String {
    let mut s = String::from(
        "\n### Against the targets\n\n| target | volumes | measured | met |\n|---|---|---|---|\n",
    );
    let met = |ok: bool| if ok { "yes" } else { "**no**" };
    let one = Damage::OnePercent.label();
    for scene in scenes {
        let label = &scene.label;
        if let (Some(direct), Some(staged)) = (
            find(rows, label, one, Way::Direct),
            find(rows, label, one, Way::Staged),
        ) {
            let ratio = staged.mean().as_secs_f64() / direct.mean().as_secs_f64().max(1e-9);
            let _ = writeln!(
                s,
                "| Staged downtime at 1% changed ≤ 25% of Direct's (mean) | {label} | {} against {} ({:.0}%); max {} against {} | {} |",
                secs(staged.mean()),
                secs(direct.mean()),
                ratio * 100.0,
                secs(staged.max()),
                secs(direct.max()),
                met(ratio <= 0.25)
            );
        }
    }
    for scene in scenes {
        let label = &scene.label;
        let Some(alone) = find(rows, label, one, Way::VeleroAlone) else {
            continue;
        };
        for damage in [Damage::OnePercent, Damage::All].map(Damage::label) {
            if let Some(direct) = find(rows, label, damage, Way::Direct) {
                let ratio = direct.rate() / alone.rate().max(1e-9);
                let _ = writeln!(
                    s,
                    "| Direct data rate ≥ 0.9× Velero alone's | {label}, {damage} | {:.1} against {:.1} MiB/s ({ratio:.2}×) | {} |",
                    direct.rate(),
                    alone.rate(),
                    met(ratio >= 0.9)
                );
            }
        }
    }
    s
}
