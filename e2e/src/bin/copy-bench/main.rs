//! `copy-bench`: how fast `refill copy` puts a whole volume back on one disk, against
//! what the disk allows. It makes a tree (`tree.rs`) in a directory of its own, then
//! times, each from an emptied page cache where it may:
//!
//! - reading every byte of the tree and of an identical copy, as `cat` would, and
//!   `cp -a` of the tree into an empty directory: the limits for reading and writing;
//! - `refill copy --whole --mirror` (the library, built optimized) into an empty
//!   directory, into an identical tree (comparing contents, then metadata only), and
//!   into a tree drifted by 1% changed files and extra entries; `--clear` of a full
//!   tree; each with one thread and with refill's default.
//!
//! Every copy's counts are checked against what it had to do. It prints a table and
//! puts it in its own section of the results file, keeping the others.

mod measure;
mod tree;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Result, ensure};
use clap::Parser;
use refill::api::CopySummary;
use refill::copy::{Compare, Matcher, Options};

use measure::{cp_a, drop_caches, read_all, sync, timed};

/// Times `refill copy` on a tree made on this machine's disk.
#[derive(Parser, Debug)]
#[command(name = "copy-bench")]
struct Args {
    /// The tree's size, in MiB.
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    /// Where the trees are made, in a directory made and removed inside it.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The results file whose copier section this run replaces.
    #[arg(long, value_name = "FILE",
          default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/RESULTS.md"))]
    results: PathBuf,
}

/// The section of the results file this benchmark writes.
const HEADING: &str = "## The copier: `refill copy` of a whole volume on one disk";

/// A directory of the benchmark's, removed however it ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One measured case.
struct Row {
    case: String,
    wall: Duration,
    /// What the copy did; none for the cases that are not a copy.
    counts: Option<CopySummary>,
}

/// What every case shares: the trees, the volume's size and the threads compared.
struct Bench {
    source: PathBuf,
    bytes: u64,
    default_threads: usize,
    dropped: bool,
    /// The machine's load average (1, 5, 15 minutes) as the cases began.
    load: String,
    rows: Vec<Row>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        !cfg!(debug_assertions),
        "build with --release: the figures must be of optimized code"
    );
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = Scratch(base.join(format!("refill-copy-bench-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)?;
    let source = scratch.0.join("source");
    println!(
        "making a tree of {} MiB in {}",
        args.size_mib,
        source.display()
    );
    let made = tree::make(&source, args.size_mib * 1024 * 1024)?;
    println!("{made:?}");
    let mut bench = Bench {
        source,
        bytes: made.bytes,
        default_threads: refill::copy::default_threads(std::thread::available_parallelism().ok()),
        dropped: drop_caches(),
        load: load_average(),
        rows: Vec::new(),
    };
    let (live, empty) = (scratch.0.join("live"), scratch.0.join("empty"));
    bench.limits(&live)?;
    std::fs::create_dir(&empty)?;
    bench.copies_into_empty(&empty)?;
    bench.copies_into_identical(&live)?;
    bench.copies_into_drifted(&live)?;
    let table = bench.report(&args, &made, &scratch.0);
    println!("\n{table}");
    refill_e2e::bench::results::write(&args.results, &table)
}

impl Bench {
    /// Runs `work` from an emptied page cache (where this process may empty it), and
    /// keeps how long it took under `case`, until what it wrote is on the disk.
    fn case<T>(&mut self, case: String, work: impl FnOnce() -> Result<T>) -> Result<T> {
        drop_caches();
        let (wall, out) = timed(|| {
            let out = work()?;
            sync()?;
            Ok(out)
        })?;
        println!("{case}: {:.2} s", wall.as_secs_f64());
        self.rows.push(Row {
            case,
            wall,
            counts: None,
        });
        Ok(out)
    }

    /// A copy of the whole tree into `live` as the copier pod runs it (`.velero`
    /// excluded, mirror), timed under `case`; its counts are kept with the time.
    fn copy(
        &mut self,
        case: String,
        live: &Path,
        compare: Compare,
        threads: usize,
    ) -> Result<CopySummary> {
        let source = self.source.clone();
        let options = Options {
            mirror: true,
            compare,
            threads,
        };
        let counts = self.case(case, || {
            Ok(refill::copy::copy(&source, live, &all_but_velero()?, &options)?.counts)
        })?;
        self.count(&counts);
        Ok(counts)
    }

    /// Keeps `counts` with the case measured last.
    fn count(&mut self, counts: &CopySummary) {
        if let Some(row) = self.rows.last_mut() {
            row.counts = Some(counts.clone());
        }
    }

    /// One thread and refill's default, each named as the table shows it.
    fn threads(&self) -> [(usize, String); 2] {
        let default = self.default_threads;
        [
            (1, "1 thread".into()),
            (default, format!("{default} threads (default)")),
        ]
    }

    /// The disk's limits: `cp -a` of the tree into `live` (then an identical tree),
    /// and reading both trees.
    fn limits(&mut self, live: &Path) -> Result<()> {
        let source = self.source.clone();
        self.case("`cp -a` into an empty directory".into(), || {
            cp_a(&source, live)
        })?;
        let read = self.case(
            "read both trees, one file after the other (`cat`)".into(),
            || read_all(&[&source, live]),
        )?;
        ensure!(
            read == 2 * self.bytes,
            "read {read} bytes of 2 × {}",
            self.bytes
        );
        Ok(())
    }

    /// Copies into an empty directory (everything written), emptied again by
    /// `--clear` after the first.
    fn copies_into_empty(&mut self, empty: &Path) -> Result<()> {
        for (n, (threads, named)) in self.threads().into_iter().enumerate() {
            let case = format!("`--whole --mirror` into an empty directory, {named}");
            let counts = self.copy(case, empty, Compare::Contents, threads)?;
            ensure!(counts.bytes_written == self.bytes, "wrote {counts:?}");
            if n == 0 {
                let entries = measure::count_entries(empty)?;
                let deleted = self.case("`--clear` of the full tree".into(), || {
                    Ok(refill::copy::clear(empty, &all_but_velero()?)?.counts)
                })?;
                self.count(&deleted);
                ensure!(
                    deleted.deleted == entries,
                    "{deleted:?} of {entries} entries"
                );
            }
        }
        Ok(())
    }

    /// Copies into a tree already as the snapshot is: only compares.
    fn copies_into_identical(&mut self, live: &Path) -> Result<()> {
        for (compare, how) in [
            (Compare::Contents, "contents"),
            (Compare::Metadata, "metadata"),
        ] {
            for (threads, named) in self.threads() {
                let case = format!(
                    "`--whole --mirror` into an identical tree, `--compare {how}`, {named}"
                );
                let counts = self.copy(case, live, compare, threads)?;
                ensure!(
                    counts.files_written == 0 && counts.deleted == 0,
                    "an identical tree changed: {counts:?}"
                );
            }
        }
        Ok(())
    }

    /// Copies into a tree drifted from the snapshot, drifted again before each.
    fn copies_into_drifted(&mut self, live: &Path) -> Result<()> {
        let [one, default] = self.threads();
        for (compare, how, (threads, named)) in [
            (Compare::Contents, "contents", one),
            (Compare::Contents, "contents", default.clone()),
            (Compare::Metadata, "metadata", default),
        ] {
            let drift = tree::drift(&self.source, live)?;
            let case =
                format!("`--whole --mirror` into a drifted tree, `--compare {how}`, {named}");
            let counts = self.copy(case, live, compare, threads)?;
            let mended = match compare {
                Compare::Contents => drift.touched + drift.rotted,
                // What kept its size and time is taken for right.
                Compare::Metadata => drift.touched,
            };
            ensure!(
                (counts.files_written, counts.deleted) == (mended, drift.extra),
                "{drift:?}, {how}: {counts:?}"
            );
        }
        Ok(())
    }

    fn report(&self, args: &Args, made: &tree::Made, dir: &Path) -> String {
        let mib = self.bytes as f64 / (1024.0 * 1024.0);
        let mut s = format!("{HEADING}\n\n");
        let _ = writeln!(
            s,
            "Measured {} on {} cores (load {} as the cases began), refill at {}, with `copy-bench --size-mib {}` (release build), in {} ({}). Page cache dropped before each case: {}.\n",
            humantime::format_rfc3339_seconds(SystemTime::now()),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            self.load,
            revision(),
            args.size_mib,
            dir.parent().unwrap_or(dir).display(),
            file_system(dir),
            if self.dropped {
                "yes"
            } else {
                "no (not root): warm caches"
            },
        );
        let _ = writeln!(
            s,
            "The tree: {mib:.0} MiB in {} files of 32-128 MiB and {} of 4 KiB-1 MiB (log-uniform) in {} directories, {} symlinks, {} second names of small files (hard links); pseudo-random contents from a fixed seed. MiB/s is the tree's {mib:.0} MiB over the wall time in every row, whatever a case reads or writes (reading both trees reads twice that), so rows compare as times do. A case's time runs until what it wrote is on the disk (`sync`). Each copy is `--whole --mirror --exclude .velero`, the library called in process. The drifted tree: 1% of the files changed (half rewritten one byte longer, half corrupted in place keeping size and modification time) and 1% as many extra files plus a directory of 10 to delete, made anew before each row.\n",
            made.large, made.small, made.dirs, made.symlinks, made.hard_links,
        );
        s.push_str("| case | wall time | MiB/s | files written | unchanged | deleted |\n");
        s.push_str("|---|--:|--:|--:|--:|--:|\n");
        for row in &self.rows {
            let seconds = row.wall.as_secs_f64();
            let counts = row
                .counts
                .as_ref()
                .map_or(["-".into(), "-".into(), "-".into()], |c| {
                    [c.files_written, c.unchanged, c.deleted].map(|n| n.to_string())
                });
            let _ = writeln!(
                s,
                "| {} | {seconds:.2} s | {:.0} | {} | {} | {} |",
                row.case,
                mib / seconds,
                counts[0],
                counts[1],
                counts[2]
            );
        }
        s.push('\n');
        s.push_str(&self.target());
        s
    }

    /// The target: comparing (contents, default threads) within twice the time
    /// of reading both trees.
    fn target(&self) -> String {
        let wall = |start: &str| {
            self.rows
                .iter()
                .find(|r| r.case.starts_with(start))
                .map_or(f64::NAN, |r| r.wall.as_secs_f64())
        };
        let read = wall("read both trees");
        let default = self.default_threads;
        let compare = wall(&format!(
            "`--whole --mirror` into an identical tree, `--compare contents`, {default} threads"
        ));
        let ratio = compare / read;
        format!(
            "Target: the copier's compare within 2× the raw read of both trees. Comparing contents on {default} threads took {compare:.2} s, {ratio:.2}× the {read:.2} s of reading both trees: {}.\n",
            if ratio <= 2.0 { "met" } else { "not met" }
        )
    }
}

/// What the copier pod is told to take: the whole tree but Velero's `.velero`.
fn all_but_velero() -> Result<Matcher> {
    Matcher::whole(&[".velero".into()]).map_err(anyhow::Error::msg)
}

/// The load average over 1, 5 and 15 minutes.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The commit this was built from, as `git` tells it.
fn revision() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("an unknown commit".into(), |o| {
            format!("commit {}", String::from_utf8_lossy(&o.stdout).trim())
        })
}

/// The kind of file system `dir` is on, as `findmnt` tells it.
fn file_system(dir: &Path) -> String {
    std::process::Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE", "--target"])
        .arg(dir)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|kind| !kind.is_empty())
        .unwrap_or_else(|| "an unknown file system".into())
}
