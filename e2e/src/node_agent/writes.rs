//! A log of every write the simulated node agent makes into a volume, so a test can
//! prove that nothing was written while an application pod of that volume ran.
//!
//! Each write (a snapshot copy, a done file, the restore helper's clean-up) appends a
//! `begin` line before it touches the volume and an `end` line after its last byte,
//! as JSON, to the file [`super::NodeAgentConfig::write_log`] names. The copy itself
//! writes the `end` line from the thread that copies, so even an agent stopped
//! mid-copy (its task aborted) records when that thread really stopped writing. A
//! `begin` without its `end` is a write still going on. Times are this machine's
//! clock, the same one a test's pod watch reads.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::json;

/// Which kind of write a record is about.
pub const COPY: &str = "copy";
pub const DONE_FILE: &str = "done-file";
pub const HELPER_CLEANUP: &str = "restore-helper-cleanup";

/// Nanoseconds since the epoch: what the log holds.
fn nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn from_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

/// One write in progress: logs its `begin` when made, its `end` on [`WriteSpan::end`]
/// or when dropped (so a panic or an early return still closes it).
pub struct WriteSpan {
    log: Option<std::path::PathBuf>,
    id: String,
    claim: String,
    what: &'static str,
    pvr: String,
    ended: bool,
}

impl WriteSpan {
    /// Starts a write into the volume of `claim` (`namespace/name`). `id` tells
    /// writes apart (the PodVolumeRestore's UID and what is written); `log` of
    /// `None` logs nothing.
    pub fn begin(
        log: Option<&Path>,
        id: impl Into<String>,
        pvr: &str,
        claim: &str,
        what: &'static str,
    ) -> WriteSpan {
        // Unique per write: the same restore may be copied again by another agent.
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let span = WriteSpan {
            log: log.map(Path::to_path_buf),
            id: format!("{}/{suffix}", id.into()),
            claim: claim.to_string(),
            what,
            pvr: pvr.to_string(),
            ended: false,
        };
        span.append("begin");
        span
    }

    fn append(&self, event: &str) {
        let Some(path) = &self.log else {
            return;
        };
        let line = json!({
            "event": event,
            "id": self.id,
            "pvr": self.pvr,
            "claim": self.claim,
            "what": self.what,
            "at": nanos(SystemTime::now()),
        });
        if let Err(e) = append_line(path, &line.to_string()) {
            tracing::warn!("writing the write log {}: {e:#}", path.display());
        }
    }

    /// The write is over: no byte of it comes later.
    pub fn end(mut self) {
        self.ended = true;
        self.append("end");
    }
}

impl Drop for WriteSpan {
    fn drop(&mut self) {
        if !self.ended {
            self.ended = true;
            self.append("end");
        }
    }
}

/// One `write(2)` per line with `O_APPEND`: lines of several agents (one restarted
/// after another) and threads never interleave.
fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(format!("{line}\n").as_bytes())?;
    Ok(())
}

/// One write as the log tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeWrite {
    /// `namespace/name` of the claim written to.
    pub claim: String,
    /// The PodVolumeRestore it was for.
    pub pvr: String,
    /// [`COPY`], [`DONE_FILE`] or [`HELPER_CLEANUP`].
    pub what: String,
    pub first: SystemTime,
    /// `None`: still writing when the log was read.
    pub last: Option<SystemTime>,
}

/// Every write logged in `path` (none if there is no file yet), in the order they began.
pub fn read_write_log(path: &Path) -> Result<Vec<VolumeWrite>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut writes: BTreeMap<String, VolumeWrite> = BTreeMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("line {} of {}", n + 1, path.display()))?;
        let field = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let at = from_nanos(v["at"].as_u64().unwrap_or(0));
        let entry = writes.entry(field("id")).or_insert_with(|| VolumeWrite {
            claim: field("claim"),
            pvr: field("pvr"),
            what: field("what"),
            first: at,
            last: None,
        });
        match v["event"].as_str() {
            Some("begin") => entry.first = entry.first.min(at),
            Some("end") => entry.last = Some(entry.last.map_or(at, |l| l.max(at))),
            other => anyhow::bail!(
                "line {} of {}: unknown event {other:?}",
                n + 1,
                path.display()
            ),
        }
    }
    let mut all: Vec<VolumeWrite> = writes.into_values().collect();
    all.sort_by_key(|w| w.first);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_and_end_make_one_write_and_an_open_one_has_no_end() {
        let dir =
            std::env::temp_dir().join(format!("refill-writes-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("writes.jsonl");
        assert!(read_write_log(&log).unwrap().is_empty());
        let span = WriteSpan::begin(Some(&log), "u1/copy", "pvr-1", "ns/data", COPY);
        span.end();
        let open = WriteSpan::begin(Some(&log), "u2/copy", "pvr-2", "ns/data", COPY);
        let writes = read_write_log(&log).unwrap();
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0].pvr, "pvr-1");
        assert!(writes[0].last.unwrap() >= writes[0].first);
        assert_eq!(writes[1].last, None);
        drop(open);
        assert!(read_write_log(&log).unwrap()[1].last.is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
