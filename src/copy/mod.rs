//! `refill copy`: puts chosen paths of a restored snapshot back into a live volume,
//! keeping contents, mode, owner, group, times, symlinks, hard links and extended
//! attributes. A path restore's copier pod runs it with the snapshot at `--from`
//! (mounted read-only) and the PVC at `--to`; its summary goes to the termination log,
//! where the controller reads it.

mod select;
mod tree;

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use select::{Matcher, Selection, pattern_error};

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Regular files written.
    pub files_written: u64,
    /// Bytes of those files.
    pub bytes_written: u64,
    /// Symlinks and hard links made.
    pub links: u64,
    /// Directories created or given the snapshot's metadata.
    pub directories: u64,
    /// Entries that already were as the snapshot holds them.
    pub unchanged: u64,
    /// Entries deleted (mirror).
    pub deleted: u64,
    /// Entries of kinds not copied (fifos, sockets, devices), by path.
    pub skipped: Vec<String>,
    /// How many were skipped (the list may be cut short in a report).
    pub skipped_count: u64,
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

/// Copies the entries of `source` that `selection` chooses into `dest`; with `mirror`,
/// also deletes what `dest` has under the chosen paths and `source` does not.
pub fn copy(
    source: &Path,
    dest: &Path,
    selection: &Matcher,
    mirror: bool,
) -> Result<Summary, CopyError> {
    let mut copy = tree::Copy::new(source, dest, selection, mirror);
    copy.walk(Path::new(""))?;
    let mut summary = copy.summary;
    summary.skipped_count = summary.skipped.len() as u64;
    Ok(summary)
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
pub fn error_report(error: &str) -> String {
    serde_json::json!({ "error": error }).to_string()
}

#[cfg(test)]
mod tests;
