//! `refill copy`'s command line: what it is told, what it runs, and its exit code: 0
//! done, 1 failed, 2 a bad pattern or usage. The report goes to standard output and,
//! when asked, to a termination log, where the controller reads it.

use std::path::PathBuf;

use clap::builder::RangedU64ValueParser;

use super::aside::valid_name;
use super::options::{Compare, Options, default_threads};
use super::select::{Matcher, Selection, pattern_error};
use super::{CopyError, Summary, copy, error_report, put_back, report, set_aside, tidy};

/// The flags that move a volume's own files instead of copying a snapshot's.
const ASIDE: [&str; 3] = ["set_aside", "tidy", "put_back"];

/// Copy chosen paths of a restored snapshot into a volume, or the whole tree; or set a
/// volume's files aside before a backup is written into it, and then remove them or
/// put them back.
#[derive(clap::Args, Debug, Clone)]
pub struct CopyArgs {
    /// The restored snapshot.
    #[arg(long, value_name = "DIR", required_unless_present_any = ASIDE)]
    pub from: Option<PathBuf>,
    /// The volume the paths go back into (or whose files are set aside).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// A path to put back, a glob relative to the roots (repeatable).
    #[arg(long, value_name = "GLOB",
          required_unless_present_any = ["whole", "set_aside", "tidy", "put_back"])]
    pub include: Vec<String>,
    /// A path to leave as it is, even under an included one (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Put back the whole tree rather than --include's paths, --to's own owner, mode,
    /// extended attributes and times included.
    ///
    /// Every entry but the excluded ones. With --mirror, --to ends as --from is: the
    /// same entries with the same contents, owners, modes, times, symlinks and hard
    /// links, but for what is excluded.
    #[arg(long, conflicts_with = "include")]
    pub whole: bool,
    /// Also delete what --to has under the included paths and --from does not.
    #[arg(long)]
    pub mirror: bool,
    /// Copy nothing: move every entry of --to's root but those --exclude names into
    /// the directory NAME there (made if missing), leaving the volume empty.
    ///
    /// Renames only, within the volume. The report's `deleted` counts the entries
    /// moved. --exclude takes names of the root's own entries here.
    #[arg(long, value_name = "NAME",
          conflicts_with_all = ["from", "include", "whole", "mirror", "compare", "tidy", "put_back"])]
    pub set_aside: Option<String>,
    /// With --set-aside: a file outside the volume (its pod's own emptyDir) where a
    /// set-aside that completed records its report. When the file is there, nothing
    /// is moved and that report is given again.
    ///
    /// A pod whose sandbox is made anew (a node or runtime restart) runs its init
    /// containers again: one that ran after the backup was written beside the
    /// set-aside directory would set the backup aside too.
    #[arg(long, value_name = "FILE", requires = "set_aside", conflicts_with_all = ["tidy", "put_back"])]
    pub once: Option<PathBuf>,
    /// Copy nothing: remove the directory NAME of --to's root, set aside before.
    #[arg(long, value_name = "NAME",
          conflicts_with_all = ["from", "include", "whole", "mirror", "compare", "put_back"])]
    pub tidy: Option<String>,
    /// Copy nothing: move what the directory NAME of --to's root holds back into the
    /// root, and remove NAME.
    ///
    /// Run again after it was killed, it goes on where it was. The report's `deleted`
    /// counts the entries deleted (--delete-written), `unchanged` those put back.
    #[arg(long, value_name = "NAME",
          conflicts_with_all = ["from", "include", "whole", "mirror", "compare"])]
    pub put_back: Option<String>,
    /// With --put-back: first delete every entry of --to's root but NAME and those
    /// --exclude matches (what was written since the files were set aside).
    ///
    /// Never follows a symlink: one is deleted itself. Without it, an entry that is
    /// in both the root and NAME stops the put-back, replacing nothing.
    #[arg(long, requires = "put_back")]
    pub delete_written: bool,
    /// How a file already right in --to is told, and left as it is: `metadata` reads
    /// no bytes, and so misses a file corrupted in place that kept its size and times.
    #[arg(long, value_enum, value_name = "HOW", default_value_t)]
    pub compare: Compare,
    /// Files compared and written at once; by default one per core, at least 2 and
    /// at most 16.
    #[arg(long, value_name = "N",
          default_value_t = default_threads(std::thread::available_parallelism().ok()),
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub threads: usize,
    /// Where to write the report as well (a pod's /dev/termination-log).
    #[arg(long, value_name = "FILE")]
    pub termination_log: Option<PathBuf>,
}

/// Why `refill copy` did not complete.
#[derive(Debug)]
enum Failure {
    /// A pattern it cannot use, or flags that do not go together.
    Usage(String),
    /// The copy or the moves themselves.
    Failed(CopyError),
}

/// Runs `refill copy` as `args` tell: 0 done, 1 failed, 2 a bad pattern or usage.
pub fn run(args: &CopyArgs) -> i32 {
    let log = |report: &str| {
        if let Some(path) = &args.termination_log
            && let Err(e) = std::fs::write(path, report)
        {
            eprintln!("refill copy: cannot write {}: {e}", path.display());
        }
    };
    if let Some(report) = args.once.as_deref().and_then(done_before) {
        println!("{report}");
        log(&report);
        return 0;
    }
    let (message, code) = match execute(args) {
        Ok(summary) => {
            let report = report(&summary);
            if let Some(path) = &args.once
                && let Err(e) = record_done(path, &report)
            {
                let message = format!("cannot record the set-aside in {}: {e}", path.display());
                eprintln!("refill copy: {message}");
                log(&error_report(&message));
                return 1;
            }
            println!("{report}");
            log(&report);
            return 0;
        }
        Err(Failure::Usage(why)) => (why, 2),
        Err(Failure::Failed(e)) => (e.to_string(), 1),
    };
    eprintln!("refill copy: {message}");
    log(&error_report(&message));
    code
}

/// The report a set-aside recorded in `path` when it completed, if it did.
fn done_before(path: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(path).ok().filter(|r| !r.is_empty())
}

/// Records `report` in `path` for good: written beside it, synced, then renamed, so
/// that a kill midway leaves no half record that would stop the set-aside from
/// running again.
fn record_done(path: &std::path::Path, report: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut partial = path.as_os_str().to_os_string();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(report.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&partial, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn execute(args: &CopyArgs) -> Result<Summary, Failure> {
    let selection = matcher(args).map_err(Failure::Usage)?;
    if let Some(name) = aside_name(args).map_err(Failure::Usage)? {
        if args.from.is_some() {
            return Err(Failure::Usage("no --from: nothing is copied".into()));
        }
        let to = &args.to;
        let done = match (&args.set_aside, &args.tidy) {
            (Some(_), _) => set_aside(to, name.as_ref(), &selection),
            (_, Some(_)) => tidy(to, name.as_ref()),
            _ => put_back(to, name, args.delete_written.then_some(&args.exclude[..])),
        };
        return done.map_err(Failure::Failed);
    }
    let Some(from) = &args.from else {
        return Err(Failure::Usage("--from is needed".into()));
    };
    copy(from, &args.to, &selection, &options(args)).map_err(Failure::Failed)
}

/// The directory named by --set-aside, --tidy or --put-back, if one is given.
fn aside_name(args: &CopyArgs) -> Result<Option<&str>, String> {
    let name = [&args.set_aside, &args.tidy, &args.put_back]
        .into_iter()
        .find_map(Option::as_deref);
    match name {
        Some(name) if !valid_name(name) => Err(format!(
            "{name:?} is not a directory name of letters, digits, '.', '_' and '-'"
        )),
        Some(_) if args.set_aside.is_some() && args.exclude.iter().any(|e| e.contains('/')) => {
            Err("--set-aside moves the root's entries: --exclude takes their names".into())
        }
        name => Ok(name),
    }
}

/// What `args` choose: the whole tree with --whole and the moves (less what is
/// excluded), --include's paths otherwise. The error names the flag and the pattern.
fn matcher(args: &CopyArgs) -> Result<Matcher, String> {
    for (flag, patterns) in [("--include", &args.include), ("--exclude", &args.exclude)] {
        if let Some(why) = patterns.iter().find_map(|p| pattern_error(p)) {
            return Err(format!("{flag} {why}"));
        }
    }
    let moves = args.set_aside.is_some() || args.tidy.is_some() || args.put_back.is_some();
    if args.whole || moves {
        if !args.include.is_empty() {
            return Err("--include chooses paths; --whole takes the whole tree".into());
        }
        return Matcher::whole(&args.exclude);
    }
    if args.include.is_empty() {
        return Err("--include is needed (or --whole)".into());
    }
    Matcher::new(&Selection {
        include: args.include.clone(),
        exclude: args.exclude.clone(),
    })
}

fn options(args: &CopyArgs) -> Options {
    Options {
        mirror: args.mirror,
        compare: args.compare,
        threads: args.threads,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::*;

    #[derive(Parser, Debug)]
    struct TestCli {
        #[command(flatten)]
        args: CopyArgs,
    }

    fn parse(line: &str) -> Result<CopyArgs, ErrorKind> {
        let words = std::iter::once("copy").chain(line.split_whitespace());
        TestCli::try_parse_from(words)
            .map(|cli| cli.args)
            .map_err(|e| e.kind())
    }

    #[test]
    fn flags_that_do_not_go_together_are_usage_errors() {
        let refused = [
            (
                "--from s --to d --whole --include db",
                ErrorKind::ArgumentConflict,
            ),
            ("--to d --set-aside a --from s", ErrorKind::ArgumentConflict),
            (
                "--to d --set-aside a --include db",
                ErrorKind::ArgumentConflict,
            ),
            ("--to d --tidy a --mirror", ErrorKind::ArgumentConflict),
            ("--to d --put-back a --tidy a", ErrorKind::ArgumentConflict),
            (
                "--to d --set-aside a --compare metadata",
                ErrorKind::ArgumentConflict,
            ),
            ("--from s --to d", ErrorKind::MissingRequiredArgument),
            ("--to d --whole", ErrorKind::MissingRequiredArgument),
            (
                "--from s --to d --whole --threads 0",
                ErrorKind::ValueValidation,
            ),
            (
                "--from s --to d --whole --compare size",
                ErrorKind::InvalidValue,
            ),
        ];
        for (line, kind) in refused {
            assert_eq!(parse(line).unwrap_err(), kind, "{line}");
        }
    }

    #[test]
    fn each_way_is_told_as_given() {
        let whole =
            parse("--from s --to d --whole --mirror --exclude .velero --threads 1").unwrap();
        assert!(whole.whole && whole.mirror && whole.include.is_empty());
        assert_eq!((whole.threads, whole.compare), (1, Compare::Contents));
        let options = options(&whole);
        assert!(options.mirror && options.threads == 1);
        assert!(matcher(&whole).unwrap().is_whole());

        let aside = parse("--to d --set-aside .a --exclude .velero").unwrap();
        assert_eq!(aside_name(&aside), Ok(Some(".a")));
        let keep = matcher(&aside).unwrap();
        assert!(keep.is_whole() && !keep.is_chosen(".velero") && keep.is_chosen("data"));
        let back = parse("--to d --put-back .a").unwrap();
        assert_eq!(aside_name(&back), Ok(Some(".a")));

        let paths = parse("--from s --to d --include db --compare metadata").unwrap();
        assert_eq!(paths.compare, Compare::Metadata);
        assert!(paths.threads >= 2, "the default is at least 2");
        assert!(!matcher(&paths).unwrap().is_whole());
    }

    #[test]
    fn what_clap_cannot_see_is_refused_too() {
        let mut args = parse("--to d --tidy .a").unwrap();
        args.from = Some("s".into());
        assert!(matches!(execute(&args), Err(Failure::Usage(_))));
        for name in ["../x", "a/b", "*", "..", ""] {
            let args = parse(&format!("--to d --tidy {name}")).unwrap_or_else(|_| {
                let mut args = parse("--to d --tidy a").unwrap();
                args.tidy = Some(name.into());
                args
            });
            assert!(aside_name(&args).is_err(), "{name:?}");
        }
        let below = parse("--to d --set-aside a --exclude db/keep").unwrap();
        assert!(aside_name(&below).unwrap_err().contains("--exclude"));
        let mut args = parse("--from s --to d --include db").unwrap();
        args.whole = true;
        assert!(matcher(&args).unwrap_err().contains("--include"));
        args.include.clear();
        args.whole = false;
        assert!(matcher(&args).unwrap_err().contains("--include is needed"));
        let bad = parse("--from s --to d --whole --exclude ../x").unwrap();
        assert!(matcher(&bad).unwrap_err().starts_with("--exclude \"../x\""));
        args.include = vec!["/etc".into()];
        assert!(
            matcher(&args)
                .unwrap_err()
                .starts_with("--include \"/etc\"")
        );
    }

    #[test]
    fn a_set_aside_run_again_after_it_completed_moves_nothing() {
        let (volume, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let done = state.path().join("set-aside");
        let line = format!(
            "--to {} --set-aside .a --exclude .velero --once {}",
            volume.path().display(),
            done.display()
        );
        std::fs::write(volume.path().join("old"), "old").unwrap();
        assert_eq!(run(&parse(&line).unwrap()), 0);
        assert!(volume.path().join(".a/old").exists());
        let first = std::fs::read_to_string(&done).unwrap();
        assert!(first.contains("\"deleted\":1"), "{first}");
        // The node agent writes the backup beside the set-aside directory; a second
        // run (a sandbox made anew) leaves it where it is and reports the first run.
        std::fs::write(volume.path().join("restored"), "new").unwrap();
        assert_eq!(run(&parse(&line).unwrap()), 0);
        assert!(volume.path().join("restored").exists());
        assert!(!volume.path().join(".a/restored").exists());
        assert_eq!(std::fs::read_to_string(&done).unwrap(), first);
        assert!(parse("--to d --tidy .a --once f").is_err());
    }
}
