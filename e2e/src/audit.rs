//! Counting the controller's API requests from the apiserver's audit log (one JSON
//! line per request stage, Metadata level; see `e2e/cluster/up.sh`).
//!
//! A request is counted once: ordinary requests by their `ResponseComplete` event,
//! watches by their `ResponseStarted` event (a watch completes only when it ends,
//! which for most is after the run). The controller is recognised by its
//! ServiceAccount, its user agent, and the ID of the token it was given for this run.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime};

use crate::Cluster;
use anyhow::{Context as _, Result};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// The user agent prefix of refill's controller.
pub const USER_AGENT_PREFIX: &str = "refill-controller/";
/// The controller's ServiceAccount, as the apiserver names its user.
pub const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:refill-system:refill";
const CREDENTIAL_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Verbs that change something.
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// A position in the audit log. The apiserver rotates the log (at 100 MB), so the
/// position names the file by its inode: after a rotation the rest of the old file is
/// read from its new name, then every file rotated after it (a restore of ten
/// thousand claims fills several between two reads), then the new file from its start.
#[derive(Debug, Clone, Copy)]
pub struct Cursor {
    inode: u64,
    offset: u64,
}

impl Cursor {
    /// The end of the log now.
    pub fn now(cluster: &Cluster) -> Result<Self> {
        let path = cluster.audit_log_path();
        let meta =
            std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Cursor {
            inode: meta.ino(),
            offset: meta.len(),
        })
    }

    /// The events written since this position, and the position after them.
    pub fn read(self, cluster: &Cluster) -> Result<(Vec<Event>, Cursor)> {
        self.read_log(&cluster.audit_log_path())
    }

    fn read_log(self, path: &Path) -> Result<(Vec<Event>, Cursor)> {
        let current = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .ino();
        let mut events = Vec::new();
        let mut offset = self.offset;
        if current != self.inode {
            for (i, rotated) in rotated_since(path, self.inode)?.iter().enumerate() {
                read_lines(rotated, if i == 0 { self.offset } else { 0 }, &mut events)?;
            }
            offset = 0;
        }
        let offset = read_lines(path, offset, &mut events)?;
        Ok((
            events,
            Cursor {
                inode: current,
                offset,
            },
        ))
    }

    pub fn read_since(self, cluster: &Cluster) -> Result<Vec<Event>> {
        Ok(self.read(cluster)?.0)
    }
}

/// The rotated audit logs beside `path`, from the one with this inode on, oldest
/// first (their names carry the time of their rotation); none if that one is gone.
fn rotated_since(path: &Path, inode: u64) -> Result<Vec<PathBuf>> {
    let dir = path.parent().context("the audit log has no directory")?;
    let mut rotated: Vec<(String, PathBuf, u64)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("audit-") && name.ends_with(".log") {
            rotated.push((name, entry.path(), entry.metadata()?.ino()));
        }
    }
    rotated.sort();
    Ok(match rotated.iter().position(|(_, _, ino)| *ino == inode) {
        Some(start) => rotated.drain(start..).map(|(_, path, _)| path).collect(),
        None => Vec::new(),
    })
}

/// Parses the whole lines of `path` from `offset` on; returns the offset after them
/// (a last line still being written is left for next time).
fn read_lines(path: &Path, offset: u64, events: &mut Vec<Event>) -> Result<u64> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.seek(SeekFrom::Start(offset))?;
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    for line in text[..whole].lines() {
        let line = line?;
        if let Ok(event) = serde_json::from_str::<Event>(&line) {
            events.push(event);
        }
    }
    Ok(offset + whole as u64)
}

/// Waits until the client with `credential` made no request for `quiet`, at most `max`.
pub async fn wait_quiet(
    cluster: &Cluster,
    credential: &str,
    quiet: Duration,
    max: Duration,
) -> Result<()> {
    let started = Instant::now();
    let mut cursor = Cursor::now(cluster)?;
    let mut last = Instant::now();
    while last.elapsed() < quiet && started.elapsed() < max {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (events, next) = cursor.read(cluster)?;
        cursor = next;
        if events.iter().any(|e| e.credential() == Some(credential)) {
            last = Instant::now();
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(default)]
    pub stage: String,
    #[serde(default)]
    pub verb: String,
    #[serde(default)]
    pub user: User,
    #[serde(default)]
    pub user_agent: String,
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    #[serde(default)]
    pub response_status: Option<ResponseStatus>,
    #[serde(default)]
    pub request_received_timestamp: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct User {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub subresource: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResponseStatus {
    #[serde(default)]
    pub code: u16,
}

impl Event {
    pub fn credential(&self) -> Option<&str> {
        self.user
            .extra
            .get(CREDENTIAL_KEY)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// `resource` or `resource/subresource`.
    pub fn resource(&self) -> String {
        match &self.object_ref {
            Some(o) if o.subresource.is_empty() => o.resource.clone(),
            Some(o) => format!("{}/{}", o.resource, o.subresource),
            None => "(non-resource)".into(),
        }
    }

    pub fn received(&self) -> Option<SystemTime> {
        Timestamp::from_str(&self.request_received_timestamp)
            .ok()
            .map(SystemTime::from)
    }

    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb.as_str())
    }

    /// The event that stands for the request: see the module comment.
    fn counts(&self) -> bool {
        if self.verb == "watch" {
            self.stage == "ResponseStarted"
        } else {
            self.stage == "ResponseComplete"
        }
    }
}

/// The controller's requests: its token, its user agent, one event per request.
pub fn filter(events: &[Event], credential: &str) -> Vec<Event> {
    events
        .iter()
        .filter(|e| {
            e.credential() == Some(credential)
                && e.user.username == SERVICE_ACCOUNT_USER
                && e.user_agent.starts_with(USER_AGENT_PREFIX)
                && e.counts()
        })
        .cloned()
        .collect()
}

/// Request counts in a window of time.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Requests {
    pub total: usize,
    pub by_verb: BTreeMap<String, usize>,
    /// `verb resource[/subresource]` → count.
    pub by_verb_resource: BTreeMap<String, usize>,
    /// Answers other than 2xx, by code.
    pub failures: BTreeMap<u16, usize>,
    /// Most writes to the status of one object within any one second, per resource.
    pub max_status_writes_per_second: BTreeMap<String, usize>,
    /// Status writes per object, per resource: (objects, writes).
    pub status_writes: BTreeMap<String, (usize, usize)>,
    /// Shortest time between two status writes of one object, per resource, seconds.
    pub min_status_gap: BTreeMap<String, f64>,
}

impl Requests {
    pub fn writes(&self) -> usize {
        WRITE_VERBS
            .iter()
            .map(|v| self.by_verb.get(*v).copied().unwrap_or(0))
            .sum()
    }

    pub fn reads(&self) -> usize {
        ["get", "list"]
            .iter()
            .map(|v| self.by_verb.get(*v).copied().unwrap_or(0))
            .sum()
    }

    pub fn watches(&self) -> usize {
        self.by_verb.get("watch").copied().unwrap_or(0)
    }

    /// Writes to a `status` subresource (phase changes and progress), by patch or by
    /// PUT (`update`).
    pub fn status_write_count(&self) -> usize {
        self.by_verb_resource
            .iter()
            .filter(|(k, _)| {
                (k.starts_with("patch ") || k.starts_with("update ")) && k.ends_with("/status")
            })
            .map(|(_, v)| v)
            .sum()
    }
}

/// Counts the requests received in `[from, to)`.
pub fn count(events: &[Event], from: SystemTime, to: SystemTime) -> Requests {
    let mut r = Requests::default();
    let mut status_times: BTreeMap<(String, String), Vec<SystemTime>> = BTreeMap::new();
    for e in events {
        let Some(at) = e.received() else { continue };
        if at < from || at >= to {
            continue;
        }
        r.total += 1;
        *r.by_verb.entry(e.verb.clone()).or_default() += 1;
        *r.by_verb_resource
            .entry(format!("{} {}", e.verb, e.resource()))
            .or_default() += 1;
        let code = e.response_status.as_ref().map_or(0, |s| s.code);
        if !(200..300).contains(&code) {
            *r.failures.entry(code).or_default() += 1;
        }
        if let Some(o) = &e.object_ref
            && e.is_write()
            && o.subresource == "status"
        {
            let object = format!("{}/{}", o.namespace, o.name);
            status_times
                .entry((e.resource(), object))
                .or_default()
                .push(at);
        }
    }
    for ((resource, _), mut times) in status_times {
        times.sort();
        let mut most = 0;
        let mut start = 0;
        for end in 0..times.len() {
            while times[end].duration_since(times[start]).unwrap_or_default()
                >= Duration::from_secs(1)
            {
                start += 1;
            }
            most = most.max(end - start + 1);
        }
        let slot = r
            .max_status_writes_per_second
            .entry(resource.clone())
            .or_default();
        *slot = (*slot).max(most);
        if let Some(gap) = times
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).unwrap_or_default().as_secs_f64())
            .min_by(f64::total_cmp)
        {
            let slot = r
                .min_status_gap
                .entry(resource.clone())
                .or_insert(f64::INFINITY);
            *slot = slot.min(gap);
        }
        let (objects, writes) = r.status_writes.entry(resource).or_default();
        *objects += 1;
        *writes += times.len();
    }
    r
}

/// When requests of one kind were received, in order.
pub fn times(events: &[Event], verb: &str, resource: &str) -> Vec<SystemTime> {
    let mut times: Vec<SystemTime> = events
        .iter()
        .filter(|e| e.verb == verb && e.resource() == resource)
        .filter_map(Event::received)
        .collect();
    times.sort();
    times
}

/// When the controller did the first and the last of the things that make up a
/// restore, in seconds after `from`. Deployments are patched twice each, down and
/// back: the first half of the patches are taken as scale-downs.
pub fn timeline(events: &[Event], from: SystemTime, to: SystemTime) -> Vec<(String, f64)> {
    let times_of = |verb: &str, resource: &str| {
        let mut times: Vec<SystemTime> = events
            .iter()
            .filter(|e| e.verb == verb && e.resource() == resource)
            .filter_map(Event::received)
            .filter(|t| *t >= from && *t <= to + Duration::from_secs(5))
            .collect();
        times.sort();
        times
    };
    let deployments = times_of("patch", "deployments");
    let (down, back) = deployments.split_at(deployments.len() / 2);
    let steps: Vec<(&str, Vec<SystemTime>)> = vec![
        (
            "DataRestore status written",
            times_of("patch", "datarestores/status"),
        ),
        ("scale down", down.to_vec()),
        ("stand-in created", times_of("create", "pods")),
        (
            "PodVolumeRestore created",
            times_of("create", "podvolumerestores"),
        ),
        ("stand-in deleted", times_of("delete", "pods")),
        ("scale back", back.to_vec()),
    ];
    let secs = |t: &SystemTime| t.duration_since(from).unwrap_or_default().as_secs_f64();
    let mut out = Vec::new();
    for (label, times) in steps {
        if let (Some(first), Some(last)) = (times.first(), times.last()) {
            out.push((format!("first {label}"), secs(first)));
            out.push((format!("last {label}"), secs(last)));
        }
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_after_several_rotations_reads_every_rotated_file() {
        let dir = std::env::temp_dir().join(format!("audit-rotations-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = |verb: &str| format!("{{\"stage\":\"ResponseComplete\",\"verb\":\"{verb}\"}}\n");
        // The log as the cursor saw it, since rotated twice; and one rotated before.
        let files = [
            ("audit-2026-12-06T18-00-00.000.log", line("old")),
            (
                "audit-2026-12-06T18-43-01.596.log",
                line("seen") + &line("first"),
            ),
            ("audit-2026-12-06T18-50-20.096.log", line("second")),
            ("audit.log", line("third")),
        ];
        for (name, text) in &files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let ours = std::fs::metadata(dir.join(files[1].0)).unwrap();
        let cursor = Cursor {
            inode: ours.ino(),
            offset: line("seen").len() as u64,
        };
        let (events, next) = cursor.read_log(&dir.join("audit.log")).unwrap();
        let verbs: Vec<&str> = events.iter().map(|e| e.verb.as_str()).collect();
        assert_eq!(verbs, ["first", "second", "third"]);
        assert_eq!(next.offset, line("third").len() as u64);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn event(stage: &str, verb: &str, resource: &str, sub: &str, at: &str) -> Event {
        Event {
            stage: stage.into(),
            verb: verb.into(),
            user: User {
                username: "system:serviceaccount:refill-system:refill".into(),
                extra: BTreeMap::from([(CREDENTIAL_KEY.into(), vec!["JTI=a".into()])]),
            },
            user_agent: "refill-controller/0.1.0".into(),
            object_ref: Some(ObjectRef {
                resource: resource.into(),
                subresource: sub.into(),
                namespace: "v".into(),
                name: "x".into(),
            }),
            response_status: Some(ResponseStatus { code: 200 }),
            request_received_timestamp: at.into(),
        }
    }

    #[test]
    fn one_event_per_request_and_status_rate() {
        let events = vec![
            event(
                "ResponseComplete",
                "get",
                "pods",
                "",
                "2026-01-01T00:00:00.1Z",
            ),
            event(
                "ResponseStarted",
                "watch",
                "pods",
                "",
                "2026-01-01T00:00:00.2Z",
            ),
            event(
                "ResponseComplete",
                "watch",
                "pods",
                "",
                "2026-01-01T00:00:00.2Z",
            ),
            event(
                "ResponseComplete",
                "patch",
                "datarestores",
                "status",
                "2026-01-01T00:00:00.3Z",
            ),
            event(
                "ResponseComplete",
                "update",
                "datarestores",
                "status",
                "2026-01-01T00:00:00.9Z",
            ),
            event(
                "ResponseComplete",
                "patch",
                "datarestores",
                "status",
                "2026-01-01T00:00:01.5Z",
            ),
        ];
        let mine = filter(&events, "JTI=a");
        assert!(filter(&events, "JTI=b").is_empty());
        let from = SystemTime::from(Timestamp::from_str("2026-01-01T00:00:00Z").unwrap());
        let r = count(&mine, from, from + Duration::from_secs(10));
        assert_eq!((r.total, r.reads(), r.watches(), r.writes()), (5, 1, 1, 3));
        assert_eq!(r.status_write_count(), 3);
        assert_eq!(r.max_status_writes_per_second["datarestores/status"], 2);
        assert_eq!(r.status_writes["datarestores/status"], (1, 3));
        assert!((r.min_status_gap["datarestores/status"] - 0.6).abs() < 1e-6);
    }
}
