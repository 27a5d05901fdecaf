//! Each volume's VolumePluginRestore mirrors its record, for tools that read Velero's
//! volume-plugin progress.
//!
//! The mirror is written on the side, by one task for the whole controller: a pass only
//! says what each VolumePluginRestore should show ([`Mirror::want`]) and goes on. The
//! writer coalesces what changed within a second into one write (a volume often moves
//! through two or three phases in that time), so each VolumePluginRestore is written at
//! most once a second, except that a volume's end is written at once. A restore ends
//! only after its mirrors show what its volumes ended as ([`Mirror::flush`]), so whoever
//! waits for the DataRestore reads final VolumePluginRestores.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use crate::api::{VolumePhase, VolumePluginRestore, VolumePluginRestoreStatus, VolumeStatus};
use crate::controller::Context;
use crate::controller::pod_volume_restore as pvr;
use crate::labels::FIELD_MANAGER;

/// How many VolumePluginRestores are written at once.
const WRITES_IN_FLIGHT: usize = 16;

/// What every VolumePluginRestore should show and what it was last written with.
pub struct Mirror {
    entries: Mutex<HashMap<String, Entry>>,
    /// At most one write a VolumePluginRestore per this long (but see [`due`]).
    interval: Duration,
    /// Something new is wanted.
    wake: Notify,
    /// A write ended.
    wrote: Notify,
}

/// One VolumePluginRestore, by `restore UID/name`.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub name: String,
    pub wanted: VolumePluginRestoreStatus,
    /// What it shows, as far as refill knows: its last write, or what the watch showed.
    pub written: Option<VolumePluginRestoreStatus>,
    /// When the last write (or failed attempt) was answered.
    pub last_write: Option<Instant>,
    /// A write of it is under way.
    pub busy: bool,
}

/// When an entry is to be written.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    Now,
    At(Instant),
    /// Up to date, or a write is under way (looked at again when it ends).
    Not,
}

/// When `entry` is to be written: at once when it was never written or to say that its
/// volume ended, else no sooner than `interval` after the last write.
pub fn due(entry: &Entry, now: Instant, interval: Duration) -> Due {
    if entry.busy || entry.written.as_ref() == Some(&entry.wanted) {
        return Due::Not;
    }
    // The write that says the volume ended; changes after it wait their turn.
    let ended = entry.wanted.phase.as_deref().is_some_and(|p| {
        serde_json::from_value::<VolumePhase>(json!(p)).is_ok_and(|p| p.is_terminal())
    });
    let ends = ended && entry.written.as_ref().map(|w| &w.phase) != Some(&entry.wanted.phase);
    match entry.last_write {
        None => Due::Now,
        _ if ends => Due::Now,
        Some(last) if now >= last + interval => Due::Now,
        Some(last) => Due::At(last + interval),
    }
}

impl Mirror {
    pub fn new(interval: Duration) -> Self {
        Mirror {
            entries: Mutex::default(),
            interval,
            wake: Notify::new(),
            wrote: Notify::new(),
        }
    }

    /// The VolumePluginRestore `name` of restore `uid` should show `wanted`; `shown` is
    /// what the watch last saw of it, the starting point after a controller restart.
    pub fn want(
        &self,
        uid: &str,
        name: &str,
        wanted: VolumePluginRestoreStatus,
        shown: Option<&VolumePluginRestoreStatus>,
    ) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries
            .entry(format!("{uid}/{name}"))
            .or_insert_with(|| Entry {
                name: name.to_string(),
                wanted: wanted.clone(),
                written: shown.cloned(),
                last_write: None,
                busy: false,
            });
        if entry.wanted != wanted || entry.written.as_ref() != Some(&entry.wanted) {
            entry.wanted = wanted;
            self.wake.notify_one();
        }
    }

    /// Whether every VolumePluginRestore of restore `uid` shows what is wanted.
    fn settled(&self, uid: &str) -> bool {
        let prefix = format!("{uid}/");
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .iter()
            .filter(|(key, _)| key.starts_with(&prefix))
            .all(|(_, e)| e.written.as_ref() == Some(&e.wanted))
    }

    /// Waits until restore `uid`'s VolumePluginRestores show what is wanted, `limit`
    /// at most (a mirror that cannot be written must not keep a restore from ending).
    pub async fn flush(&self, uid: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let wrote = self.wrote.notified();
            tokio::pin!(wrote);
            wrote.as_mut().enable();
            if self.settled(uid) {
                return true;
            }
            if tokio::time::timeout_at(deadline, wrote).await.is_err() {
                return self.settled(uid);
            }
        }
    }

    /// Drops what is kept of restore `uid`.
    pub fn forget(&self, uid: &str) {
        let prefix = format!("{uid}/");
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|key, _| !key.starts_with(&prefix));
    }

    /// Takes the entries due now (marking them busy) and says when the next one will be.
    fn take_due(&self) -> (Vec<(String, Entry)>, Option<Instant>) {
        let now = Instant::now();
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next: Option<Instant> = None;
        let mut batch = Vec::new();
        for (key, entry) in entries.iter_mut() {
            match due(entry, now, self.interval) {
                Due::Now => {
                    entry.busy = true;
                    batch.push((key.clone(), entry.clone()));
                }
                Due::At(at) => next = Some(next.map_or(at, |n| n.min(at))),
                Due::Not => {}
            }
        }
        (batch, next)
    }

    /// Notes how the write of `sent` to `key` ended.
    fn written(&self, key: &str, sent: VolumePluginRestoreStatus, result: &kube::Result<()>) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = entries.get_mut(key) {
            entry.busy = false;
            // The interval counts from the answer: counted from the send, two writes
            // could reach the API server less than the interval apart.
            entry.last_write = Some(Instant::now());
            match result {
                Ok(()) => entry.written = Some(sent),
                // Deleted by someone: there is nothing left to show it on.
                Err(kube::Error::Api(e)) if e.code == 404 => entry.written = Some(sent),
                // Tried again after the interval.
                Err(e) => debug!("VolumePluginRestore {} not written: {e}", entry.name),
            }
        }
        drop(entries);
        self.wrote.notify_waiters();
    }

    /// The writer: runs for as long as the controller does.
    pub async fn run(self: Arc<Self>, client: Client, namespace: String) {
        let api: Api<VolumePluginRestore> = Api::namespaced(client, &namespace);
        loop {
            let wake = self.wake.notified();
            let (batch, next) = self.take_due();
            if batch.is_empty() {
                match next {
                    Some(at) => {
                        let _ = tokio::time::timeout_at(at, wake).await;
                    }
                    None => wake.await,
                }
                continue;
            }
            futures::stream::iter(batch)
                .for_each_concurrent(WRITES_IN_FLIGHT, |(key, entry)| {
                    let api = api.clone();
                    let this = self.clone();
                    async move {
                        let result = write(&api, &entry.name, &entry.wanted).await;
                        this.written(&key, entry.wanted, &result);
                    }
                })
                .await;
        }
    }
}

/// Says what the VolumePluginRestore of `volume` should show, once it exists.
pub fn want(
    ctx: &Context,
    uid: &str,
    volume: &VolumeStatus,
    shown: &BTreeMap<String, Arc<VolumePluginRestore>>,
) {
    let Some(name) = &volume.pod_volume_restore else {
        return;
    };
    // Made with the PodVolumeRestore; the watch shows it a moment later.
    let Some(existing) = shown.get(name) else {
        return;
    };
    ctx.mirror.want(
        uid,
        name,
        pvr::plugin_status(volume),
        existing.status.as_ref(),
    );
}

async fn write(
    api: &Api<VolumePluginRestore>,
    name: &str,
    status: &VolumePluginRestoreStatus,
) -> kube::Result<()> {
    let body = json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "VolumePluginRestore",
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: &str, done: i64) -> VolumePluginRestoreStatus {
        VolumePluginRestoreStatus {
            phase: Some(phase.into()),
            progress: Some(crate::api::Progress {
                total_bytes: 100,
                bytes_done: done,
            }),
            ..Default::default()
        }
    }

    fn entry(
        wanted: VolumePluginRestoreStatus,
        written: Option<VolumePluginRestoreStatus>,
        last: Option<u64>,
        busy: bool,
    ) -> (Entry, Instant) {
        let start = Instant::now();
        let entry = Entry {
            name: "v".into(),
            wanted,
            written,
            last_write: last.map(|ms| start + Duration::from_millis(ms)),
            busy,
        };
        (entry, start)
    }

    #[test]
    fn when_a_mirror_is_written() {
        let second = Duration::from_secs(1);
        let restoring = status("Restoring", 10);
        // (wanted, written, last write at ms, busy, now at ms, due given the start)
        type Row = (
            VolumePluginRestoreStatus,
            Option<VolumePluginRestoreStatus>,
            Option<u64>,
            bool,
            u64,
            fn(Instant) -> Due,
        );
        let rows: Vec<Row> = vec![
            // Never written: at once.
            (restoring.clone(), None, None, false, 0, |_| Due::Now),
            // Up to date: never.
            (
                restoring.clone(),
                Some(restoring.clone()),
                Some(0),
                false,
                5000,
                |_| Due::Not,
            ),
            // Progress 300 ms after the last write: a second after it.
            (
                status("Restoring", 50),
                Some(restoring.clone()),
                Some(0),
                false,
                300,
                |s| Due::At(s + Duration::from_secs(1)),
            ),
            // A second after the last write: now.
            (
                status("Restoring", 50),
                Some(restoring.clone()),
                Some(0),
                false,
                1000,
                |_| Due::Now,
            ),
            // The volume ended: at once, however recent the last write.
            (
                status("Completed", 100),
                Some(restoring.clone()),
                Some(0),
                false,
                10,
                |_| Due::Now,
            ),
            (
                status("Failed", 10),
                Some(restoring.clone()),
                Some(0),
                false,
                10,
                |_| Due::Now,
            ),
            // A write under way: looked at again when it ends.
            (
                status("Completed", 100),
                Some(restoring),
                Some(0),
                true,
                10,
                |_| Due::Not,
            ),
            // A change after the end was written waits its turn.
            (
                VolumePluginRestoreStatus {
                    message: Some("restored".into()),
                    ..status("Completed", 100)
                },
                Some(status("Completed", 100)),
                Some(0),
                false,
                10,
                |s| Due::At(s + Duration::from_secs(1)),
            ),
        ];
        for (i, (wanted, written, last, busy, now, expected)) in rows.into_iter().enumerate() {
            let (entry, start) = entry(wanted, written, last, busy);
            let now = start + Duration::from_millis(now);
            assert_eq!(due(&entry, now, second), expected(start), "row {i}");
        }
    }

    #[test]
    fn a_restore_is_settled_once_every_mirror_shows_what_is_wanted() {
        let mirror = Mirror::new(Duration::from_secs(1));
        let restoring = status("Restoring", 0);
        mirror.want("u1", "a", restoring.clone(), Some(&restoring));
        mirror.want("u2", "b", status("Restoring", 5), None);
        assert!(mirror.settled("u1"), "shown already");
        assert!(!mirror.settled("u2"));
        let (batch, _) = mirror.take_due();
        assert_eq!(batch.len(), 1, "only u2/b is due");
        mirror.written("u2/b", batch[0].1.wanted.clone(), &Ok(()));
        assert!(mirror.settled("u2"));
        // Wanting the same again asks for nothing.
        mirror.want("u2", "b", status("Restoring", 5), None);
        assert!(mirror.take_due().0.is_empty());
        mirror.forget("u2");
        assert!(
            mirror
                .entries
                .lock()
                .unwrap()
                .keys()
                .all(|k| k.starts_with("u1/"))
        );
    }
}
