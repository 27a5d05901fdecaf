//! Restoring chosen paths of a volume instead of all of it: what the spec asks for, and
//! what the copy reports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which files of a volume to put back. The node agent restores the whole snapshot into
/// a scratch claim; refill's copier then copies only these paths into the PVC, keeping
/// contents, mode, owner, group, times, symlinks, hard links and extended attributes.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PathRestore {
    /// Globs relative to the volume's root (`db/*.dat`, `config`, `logs/**/today`): a
    /// path is restored when it or a directory above it matches one. At most 1000.
    #[schemars(length(max = super::bounds::GLOBS), inner(length(max = super::bounds::PATH)))]
    pub include: Vec<String>,
    /// Globs of paths left as they are, even under an included one. At most 1000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::GLOBS), inner(length(max = super::bounds::PATH)))]
    pub exclude: Vec<String>,
    /// Also delete what the PVC has under the included paths and the backup does not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mirror: bool,
}

/// What the copier did in a path restore.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct CopySummary {
    /// Regular files written.
    pub files_written: u64,
    /// Bytes of those files.
    pub bytes_written: u64,
    /// Symlinks and hard links made.
    pub links: u64,
    /// Directories created or whose metadata was set.
    pub directories: u64,
    /// Files that already were as the backup holds them.
    pub unchanged: u64,
    /// Entries deleted (with mirror).
    pub deleted: u64,
    /// Entries of kinds that are not copied (fifos, sockets, devices).
    pub skipped_count: u64,
}

impl CopySummary {
    /// One line for messages: `3 files written (1.2 MiB), 2 unchanged, 1 deleted`.
    pub fn line(&self) -> String {
        let mut parts = vec![format!(
            "{} written ({})",
            count(self.files_written, "file"),
            bytes(self.bytes_written)
        )];
        for (n, what) in [
            (self.links, "link"),
            (self.unchanged, "unchanged"),
            (self.deleted, "deleted"),
            (self.skipped_count, "skipped"),
        ] {
            if n > 0 {
                parts.push(if what == "link" {
                    count(n, what)
                } else {
                    format!("{n} {what}")
                });
            }
        }
        parts.join(", ")
    }
}

fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_reads_as_one_line() {
        let summary = CopySummary {
            files_written: 3,
            bytes_written: 1_300_000,
            links: 1,
            unchanged: 2,
            deleted: 1,
            ..Default::default()
        };
        assert_eq!(
            summary.line(),
            "3 files written (1.2 MiB), 1 link, 2 unchanged, 1 deleted"
        );
        assert_eq!(CopySummary::default().line(), "0 files written (0 B)");
        // The copier's own report carries more than the status keeps.
        let parsed: CopySummary = serde_json::from_str(
            r#"{"filesWritten":1,"bytesWritten":5,"skipped":["p"],"skippedCount":1}"#,
        )
        .unwrap();
        assert_eq!((parsed.files_written, parsed.skipped_count), (1, 1));
    }
}
