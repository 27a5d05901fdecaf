//! The benchmark's section of the results file: where and how it ran, the table, and
//! the copier's compare against the target.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use crate::Bench;
use crate::tree::Made;

/// The section of the results file this benchmark writes.
const HEADING: &str = "## The copier: `refill copy` of a whole volume on one disk";

/// The section as markdown; `command` is how the benchmark was run, `dir` where.
pub fn markdown(bench: &Bench, made: &Made, command: &str, dir: &Path) -> String {
    let mib = bench.bytes as f64 / (1024.0 * 1024.0);
    let mut s = format!("{HEADING}\n\n");
    let _ = writeln!(
        s,
        "Measured {} on {} cores (load {} as the cases began), refill at {}, with `{command}` (release build), in {} ({}). Page cache emptied before each run: {}.\n",
        humantime::format_rfc3339_seconds(SystemTime::now()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bench.load,
        revision(),
        dir.parent().unwrap_or(dir).display(),
        file_system(dir),
        if bench.dropped {
            "yes"
        } else {
            "no (not root): warm caches"
        },
    );
    let _ = writeln!(
        s,
        "The tree: {mib:.0} MiB in {} files of 32-128 MiB and {} of 4 KiB-1 MiB (log-uniform sizes), {} directories, {} symlinks and {} second names of small files (hard links); pseudo-random contents from a fixed seed. Each copy is `--whole --mirror --exclude .velero`, the library called in process. The drifted tree: 1% of the files changed (half rewritten one byte longer, half corrupted in place keeping size and modification time), and 1% as many extra files plus a directory of 10 to delete, made anew before each run.\n",
        made.large, made.small, made.dirs, made.symlinks, made.hard_links,
    );
    let _ = writeln!(
        s,
        "Wall time is the median of the runs, each until what it wrote is on the disk (`sync`). MiB/s is the tree's {mib:.0} MiB over it in every row, whatever the case reads or writes (reading both trees reads twice that), so rows compare as their times do.\n"
    );
    s.push_str("| case | wall time | MiB/s | files written | unchanged | deleted |\n");
    s.push_str("|---|--:|--:|--:|--:|--:|\n");
    for row in &bench.rows {
        let seconds = row.wall.as_secs_f64();
        let counts = row
            .counts
            .as_ref()
            .map_or(["-".into(), "-".into(), "-".into()], |c| {
                [c.files_written, c.unchanged, c.deleted].map(|n| n.to_string())
            });
        let [written, unchanged, deleted] = counts;
        let _ = writeln!(
            s,
            "| {} | {seconds:.2} s | {:.0} | {written} | {unchanged} | {deleted} |",
            row.case,
            mib / seconds,
        );
    }
    s.push('\n');
    s.push_str(&target(bench));
    s
}

/// The target: comparing contents within twice the time of reading both
/// trees; and what the threads gained.
fn target(bench: &Bench) -> String {
    let wall = |start: &str| {
        bench
            .rows
            .iter()
            .find(|r| r.case.starts_with(start))
            .map_or(f64::NAN, |r| r.wall.as_secs_f64())
    };
    let read = wall("read both trees");
    let default = bench.default_threads;
    let compare = |threads: &str| {
        wall(&format!(
            "`--whole --mirror` into an identical tree, `--compare contents`, {threads}"
        ))
    };
    let (one, many) = (compare("1 thread"), compare(&format!("{default} threads")));
    format!(
        "Target: the copier's compare within 2× the time of reading both trees. Comparing contents took {many:.2} s on {default} threads, {:.2}× the {read:.2} s of reading both trees: {}; on 1 thread {one:.2} s, {:.2}×.\n",
        many / read,
        if many <= 2.0 * read { "met" } else { "not met" },
        one / read,
    )
}

/// The load average over 1, 5 and 15 minutes.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// What a command printed, trimmed; none when it failed or printed nothing.
fn output(command: &mut Command) -> Option<String> {
    let out = command.output().ok().filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The commit this was built from, as `git describe` tells it.
fn revision() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut git = Command::new("git");
    git.arg("-C")
        .arg(repo)
        .args(["describe", "--always", "--dirty"]);
    output(&mut git).map_or("an unknown commit".into(), |c| format!("commit {c}"))
}

/// The kind of file system `dir` is on, as `findmnt` tells it.
fn file_system(dir: &Path) -> String {
    let mut findmnt = Command::new("findmnt");
    findmnt.args(["-n", "-o", "FSTYPE", "--target"]).arg(dir);
    output(&mut findmnt).unwrap_or_else(|| "an unknown file system".into())
}
