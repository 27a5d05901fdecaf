//! `copy-bench`: how fast `refill copy` puts a whole volume back on one disk, against
//! what the disk allows. It makes a tree (`tree.rs`) in a directory of its own, then
//! times, each from an emptied page cache where it may and until its writes are on
//! the disk, the median of a few runs of:
//!
//! - reading every byte of the tree and of an identical copy, as `cat` would, and
//!   `cp -a` of the tree into an empty directory: the limits for reading and writing;
//! - `refill copy --whole --mirror` (the library, built optimized) into an empty
//!   directory, into an identical tree (comparing contents, then metadata only), and
//!   into a tree drifted by 1% changed files and extra entries; `--clear` of a full
//!   tree; each with one thread and with refill's default.
//!
//! Every copy's counts are checked against what it had to do. It prints a table
//! (`report.rs`) and puts it in its own section of the results file, keeping the
//! others.

mod measure;
mod report;
mod tree;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clap::Parser;
use refill::api::CopySummary;
use refill::copy::{Compare, Matcher, Options};

use measure::{count_entries, cp_a, drop_caches, read_all, sync, timed};

/// Times `refill copy` on a tree made on this machine's disk.
#[derive(Parser, Debug)]
#[command(name = "copy-bench")]
struct Args {
    /// The tree's size, in MiB.
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    /// Runs of each case; the table shows the median time.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Where the trees are made, in a directory made and removed inside it.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The results file whose copier section this run replaces.
    #[arg(long, value_name = "FILE",
          default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/RESULTS.md"))]
    results: PathBuf,
}

/// A directory of the benchmark's, removed however it ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One measured case.
pub struct Row {
    /// What it did, as the table names it.
    pub case: String,
    /// The median of its runs.
    pub wall: Duration,
    /// What the copy did; none for the cases that are not a copy.
    pub counts: Option<CopySummary>,
}

/// What every case shares: the trees, the volume's size and the threads compared.
pub struct Bench {
    source: PathBuf,
    /// The size of the tree: what every row's MiB/s is of.
    pub bytes: u64,
    runs: u32,
    /// refill's default number of copying threads on this machine.
    pub default_threads: usize,
    /// Whether the page cache was emptied before each run.
    pub dropped: bool,
    /// The machine's load average (1, 5, 15 minutes) as the cases began.
    pub load: String,
    /// Each case measured, in the order it ran.
    pub rows: Vec<Row>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        !cfg!(debug_assertions),
        "build with --release: the figures must be of optimized code"
    );
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = Scratch(base.join(format!("refill-copy-bench-{}", std::process::id())));
    fs::create_dir_all(&scratch.0)?;
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
        runs: args.runs,
        default_threads: refill::copy::default_threads(std::thread::available_parallelism().ok()),
        dropped: drop_caches(),
        load: report::load_average(),
        rows: Vec::new(),
    };
    let (live, empty) = (scratch.0.join("live"), scratch.0.join("empty"));
    bench.limits(&live)?;
    bench.copies_into_empty(&empty)?;
    bench.clears(&empty)?;
    bench.copies_into_identical(&live)?;
    bench.copies_into_drifted(&live)?;
    let command = format!(
        "copy-bench --size-mib {} --runs {}",
        args.size_mib, args.runs
    );
    let table = report::markdown(&bench, &made, &command, &scratch.0);
    println!("\n{table}");
    refill_e2e_tools::bench::results::write(&args.results, &table, &[])
}

impl Bench {
    /// Runs `work` `runs` times, each after `setup` and from an emptied page cache
    /// (where this process may empty it), and keeps the median time until what it
    /// wrote is on the disk under `case`. Returns what each run gave.
    fn case<T>(
        &mut self,
        case: String,
        mut setup: impl FnMut() -> Result<()>,
        mut work: impl FnMut() -> Result<T>,
    ) -> Result<Vec<T>> {
        let (mut walls, mut outs) = (Vec::new(), Vec::new());
        for _ in 0..self.runs {
            setup()?;
            drop_caches();
            let (wall, out) = timed(|| {
                let out = work()?;
                sync()?;
                Ok(out)
            })?;
            walls.push(wall);
            outs.push(out);
        }
        let times: Vec<_> = walls
            .iter()
            .map(|w| format!("{:.2} s", w.as_secs_f64()))
            .collect();
        println!("{case}: {}", times.join(", "));
        walls.sort();
        let wall = walls.get(walls.len() / 2).copied().context("no run")?;
        self.rows.push(Row {
            case,
            wall,
            counts: None,
        });
        Ok(outs)
    }

    /// [`Bench::case`] of a copy or clear: each run's counts, which must be the same
    /// every time, are kept with the time.
    fn counted(
        &mut self,
        case: String,
        setup: impl FnMut() -> Result<()>,
        work: impl FnMut() -> Result<CopySummary>,
    ) -> Result<CopySummary> {
        let outs = self.case(case, setup, work)?;
        let first = outs.first().cloned().context("no run")?;
        ensure!(
            outs.iter().all(|c| *c == first),
            "runs did different things: {outs:?}"
        );
        if let Some(row) = self.rows.last_mut() {
            row.counts = Some(first.clone());
        }
        Ok(first)
    }

    /// A copy of the whole tree into `live` as the copier pod runs it (`.velero`
    /// excluded, mirror), each run after `setup`.
    fn copy(
        &mut self,
        case: String,
        live: &Path,
        options: Options,
        setup: impl FnMut() -> Result<()>,
    ) -> Result<CopySummary> {
        let source = self.source.clone();
        self.counted(case, setup, || {
            Ok(refill::copy::copy(&source, live, &all_but_velero()?, &options)?.counts)
        })
    }

    /// One thread and refill's default, each named as the table shows it.
    fn threads(&self) -> [(usize, String); 2] {
        let default = self.default_threads;
        [
            (1, "1 thread".into()),
            (default, format!("{default} threads (default)")),
        ]
    }

    /// The disk's limits: `cp -a` of the tree into `live` (left an identical tree),
    /// and reading both trees.
    fn limits(&mut self, live: &Path) -> Result<()> {
        let source = self.source.clone();
        self.case(
            "`cp -a` into an empty directory".into(),
            || remove(live),
            || cp_a(&source, live),
        )?;
        let reads = self.case(
            "read both trees, one file after the other (`cat`)".into(),
            || Ok(()),
            || read_all(&[&source, live]),
        )?;
        let both = 2 * self.bytes;
        ensure!(
            reads.iter().all(|&n| n == both),
            "read {reads:?} of {both} bytes"
        );
        Ok(())
    }

    /// Copies into an empty directory: everything written.
    fn copies_into_empty(&mut self, empty: &Path) -> Result<()> {
        for (threads, named) in self.threads() {
            let case = format!("`--whole --mirror` into an empty directory, {named}");
            let options = whole_mirror(Compare::Contents, threads);
            let setup = || remove(empty).and_then(|()| Ok(fs::create_dir(empty)?));
            let counts = self.copy(case, empty, options, setup)?;
            ensure!(counts.bytes_written == self.bytes, "wrote {counts:?}");
        }
        Ok(())
    }

    /// Clears `full`, a whole copy of the tree, made again before each run.
    fn clears(&mut self, full: &Path) -> Result<()> {
        let source = self.source.clone();
        let entries = count_entries(full)?;
        let fill = || {
            remove(full)?;
            cp_a(&source, full)
        };
        let counts = self.counted("`--clear` of the full tree".into(), fill, || {
            Ok(refill::copy::clear(full, &all_but_velero()?)?.counts)
        })?;
        ensure!(counts.deleted == entries, "{counts:?} of {entries} entries");
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
                let options = whole_mirror(compare, threads);
                let counts = self.copy(case, live, options, || Ok(()))?;
                ensure!(
                    counts.files_written == 0 && counts.deleted == 0,
                    "an identical tree changed: {counts:?}"
                );
            }
        }
        Ok(())
    }

    /// Copies into a tree drifted from the snapshot, drifted again before each run.
    fn copies_into_drifted(&mut self, live: &Path) -> Result<()> {
        let [one, default] = self.threads();
        for (compare, how, (threads, named)) in [
            (Compare::Contents, "contents", one),
            (Compare::Contents, "contents", default.clone()),
            (Compare::Metadata, "metadata", default),
        ] {
            let source = self.source.clone();
            let mut drift = tree::Drift::default();
            let case =
                format!("`--whole --mirror` into a drifted tree, `--compare {how}`, {named}");
            let options = whole_mirror(compare, threads);
            let counts = self.copy(case, live, options, || {
                drift = tree::drift(&source, live)?;
                Ok(())
            })?;
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
}

/// The options of a copier pod's whole-volume restore.
fn whole_mirror(compare: Compare, threads: usize) -> Options {
    Options {
        mirror: true,
        compare,
        threads,
    }
}

/// What the copier pod is told to take: the whole tree but Velero's `.velero`.
fn all_but_velero() -> Result<Matcher> {
    Matcher::whole(&[".velero".into()]).map_err(anyhow::Error::msg)
}

/// Removes the tree at `path`, if there is one.
fn remove(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
