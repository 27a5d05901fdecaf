//! `refill copy`: puts chosen paths of a restored snapshot, or its whole tree, back
//! into a live volume, keeping contents, mode, owner, group, times, symlinks, hard
//! links and extended attributes; or empties a volume (`clear`). A path restore's
//! copier pod runs it with the snapshot at `--from` (mounted read-only) and the PVC at
//! `--to`; its summary goes to the termination log, where the controller reads it.

mod aside;
mod command;
mod compare;
mod dir;
mod files;
mod meta;
mod options;
mod prune;
mod select;
mod tree;

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::CopySummary;

pub(crate) use aside::{put_back, set_aside, tidy};
pub use command::{CopyArgs, run};
pub use options::{Compare, Options, default_threads};
pub use prune::clear;
pub use select::{Matcher, Selection, pattern_error};

/// What a copy did: the counts the restore's status keeps, and the paths skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// What was written, left and deleted, as the status reports it.
    #[serde(flatten)]
    pub counts: CopySummary,
    /// Entries of kinds not copied (fifos, sockets, devices), by path; the count is
    /// in `counts` (the list may be cut short in a report).
    pub skipped: Vec<String>,
}

/// A file system operation that failed, and on what.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct CopyError {
    /// What was being done (`chown`, `rename to`, ...).
    pub op: &'static str,
    /// The path it was done to.
    pub path: PathBuf,
    /// The system's answer.
    pub source: io::Error,
}

/// The error of `op` on `path`.
fn at<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> CopyError + 'p {
    move |source| CopyError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Copies the entries of `source` that `selection` chooses into `dest`; with
/// `options.mirror`, also deletes what `dest` has under the chosen paths and `source`
/// does not. A [`Matcher::whole`] also gives `dest` itself the metadata of `source`.
///
/// `dest` may be changed by others meanwhile: everything there is done relative to
/// open directory handles, never following a symlink (see `dir.rs`).
pub fn copy(
    source: &Path,
    dest: &Path,
    selection: &Matcher,
    options: &Options,
) -> Result<Summary, CopyError> {
    let root = dir::Dir::root(dest)?;
    let copy = tree::Copy::new(source, &root, selection, options);
    threads(options.threads, dest)?.install(|| copy.walk(Path::new(""), &root))?;
    copy.links_pass()?;
    if selection.is_whole() {
        // Last: everything made or deleted in the root changed its times.
        meta::root_metadata(&root, source)?;
        copy.tally(|s| s.counts.directories += 1);
    }
    Ok(copy.into_summary())
}

/// The stack of each thread of a copy: a walk nests as deep as the tree (at most about
/// 2000 levels, as the snapshot's paths have at most 4096 bytes), and the parallel
/// iterators' splits and the work a waiting thread takes up stack on it. 16 MiB was
/// too little for 2000 levels in a debug build. Only what is used is ever resident.
const THREAD_STACK: usize = 64 * 1024 * 1024;

/// The threads of one copy (`count` of them, one at the least).
fn threads(count: usize, dest: &Path) -> Result<rayon::ThreadPool, CopyError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(count.max(1))
        .stack_size(THREAD_STACK)
        .thread_name(|i| format!("refill-copy-{i}"))
        .build()
        .map_err(|e| at("start threads for", dest)(io::Error::other(e)))
}

/// The largest report kept in a termination log (Kubernetes keeps 4096 bytes).
const REPORT_LIMIT: usize = 20;

/// The report written for the controller: the summary with at most a few skipped paths.
pub fn report(summary: &Summary) -> String {
    let mut short = summary.clone();
    short.skipped.truncate(REPORT_LIMIT);
    serde_json::to_string(&short).expect("a summary serializes")
}

/// The report of a copy that failed.
pub(crate) fn error_report(error: &str) -> String {
    serde_json::json!({ "error": error }).to_string()
}

#[cfg(test)]
mod tests;
