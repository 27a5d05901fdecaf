//! What the controller counts for Prometheus (`/metrics`, see [`super::health`]).
//!
//! Counts come from the status refill has written, never from what a pass merely
//! intended: [`observations`] compares a restore's status before and after a written
//! pass, so a transition counts once however often a pass is retried, and the
//! durations are the ones the status itself shows (its start and completion times,
//! each consumer's stop and resume times).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::api::{ConsumerState, DataRestoreStatus, VolumePhase};

use super::error::Category;
use crate::controller::volume::{NO_NODE_AGENT, WAITING_FOR_NODE_AGENT};

/// The `Content-Type` of [`Metrics::encode`]'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CategoryLabel {
    category: String,
}

/// One thing a written pass showed happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Observation {
    /// The restore ended with this phase, after this long (start to completion).
    RestoreEnded {
        /// The final phase (Completed, PartiallyFailed, Failed or Canceled).
        result: String,
        /// From its start time to its completion time, when both are recorded.
        took: Option<Duration>,
    },
    /// A volume ended; `bytes` the node agent reported restoring.
    VolumeEnded {
        /// The volume's final phase (Completed, Failed or Canceled).
        result: String,
        /// Bytes the node agent reported restoring; 0 unless Completed.
        bytes: u64,
    },
    /// A consumer came back after being stopped this long.
    ConsumerResumed {
        /// From its stop to its resume, as the status records them.
        downtime: Duration,
    },
}

/// What changed from `before` to `after`, two statuses of one restore.
pub(crate) fn observations(
    before: &DataRestoreStatus,
    after: &DataRestoreStatus,
) -> Vec<Observation> {
    let mut out = Vec::new();
    if after.phase.is_terminal() && !before.phase.is_terminal() {
        out.push(Observation::RestoreEnded {
            result: format!("{:?}", after.phase),
            took: between(after.start_time.as_ref(), after.completion_time.as_ref()),
        });
    }
    // Looked up by key, not searched: a pass of a restore of 10,000 volumes compared
    // 50 million claim names here, half of the controller's time.
    let phases: HashMap<&str, VolumePhase> = before
        .volumes
        .iter()
        .map(|v| (v.pvc.as_str(), v.phase))
        .collect();
    for volume in &after.volumes {
        let was = phases.get(volume.pvc.as_str()).copied();
        if volume.phase.is_terminal() && !was.is_some_and(VolumePhase::is_terminal) {
            let bytes = match volume.phase {
                VolumePhase::Completed => u64::try_from(volume.bytes_done).unwrap_or(0),
                _ => 0,
            };
            out.push(Observation::VolumeEnded {
                result: format!("{:?}", volume.phase),
                bytes,
            });
        }
    }
    let states: HashMap<_, ConsumerState> = before
        .consumers
        .iter()
        .map(|c| (c.key(), c.state))
        .collect();
    for consumer in &after.consumers {
        let was = states.get(&consumer.key()).copied();
        let back = matches!(
            consumer.state,
            ConsumerState::Resumed | ConsumerState::Switched
        );
        if back
            && was != Some(consumer.state)
            && let Some(downtime) =
                between(consumer.stopped_at.as_ref(), consumer.resumed_at.as_ref())
        {
            out.push(Observation::ConsumerResumed { downtime });
        }
    }
    out
}

fn between(from: Option<&Time>, to: Option<&Time>) -> Option<Duration> {
    let span = to?.0.duration_since(from?.0);
    Duration::try_from(span).ok()
}

/// PodVolumeRestores of one restore that no node agent has taken yet, and those of
/// them that have waited past the grace (the restore warns about these).
pub(crate) fn waiting_for_node_agent(status: &DataRestoreStatus) -> (i64, i64) {
    let active = status
        .volumes
        .iter()
        .filter(|v| v.phase == VolumePhase::Restoring);
    let mut waiting = 0;
    let mut overdue = 0;
    for volume in active {
        if volume
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(WAITING_FOR_NODE_AGENT))
        {
            waiting += 1;
        }
        if volume
            .warning
            .as_deref()
            .is_some_and(|w| w.starts_with(NO_NODE_AGENT))
        {
            overdue += 1;
        }
    }
    (waiting, overdue)
}

/// The probe server's own counts ([`super::health`]): shared handles into
/// [`Metrics`], so the server counts without a lock and `/metrics` shows them.
#[derive(Clone, Debug, Default)]
pub struct HttpCounts {
    /// Connections open now.
    pub open: Gauge,
    /// Connections closed at once, past the cap.
    pub refused: Counter,
    /// Accepts that failed.
    pub accept_errors: Counter,
}

/// The controller's Prometheus metrics, all prefixed `refill_`.
pub struct Metrics {
    registry: Registry,
    restores: Family<ResultLabel, Counter>,
    volumes: Family<ResultLabel, Counter>,
    bytes: Counter,
    restore_duration: Histogram,
    downtime: Histogram,
    errors: Family<CategoryLabel, Counter>,
    waiting: Gauge,
    overdue: Gauge,
    leader: Gauge,
    http: HttpCounts,
    /// Per restore UID: its share of `waiting` and `overdue`.
    waiting_by_restore: Mutex<HashMap<String, (i64, i64)>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Seconds from one to a bit over four hours (`volumeTimeout`'s default), each bucket
/// about 2.5 times the last.
fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 150.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0,
    ]
    .into_iter()
}

impl Metrics {
    /// Every metric registered, at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("refill");
        let restores = Family::<ResultLabel, Counter>::default();
        registry.register(
            "restores",
            "DataRestores ended, by their final phase",
            restores.clone(),
        );
        let volumes = Family::<ResultLabel, Counter>::default();
        registry.register(
            "volumes",
            "Volumes ended, by their final phase",
            volumes.clone(),
        );
        let bytes = Counter::default();
        registry.register(
            "restored_bytes",
            "Bytes the node agents reported restoring into volumes that completed",
            bytes.clone(),
        );
        let restore_duration = Histogram::new(seconds_buckets());
        registry.register(
            "restore_duration_seconds",
            "From a DataRestore's start to its end",
            restore_duration.clone(),
        );
        let downtime = Histogram::new(seconds_buckets());
        registry.register(
            "app_downtime_seconds",
            "How long each consumer (Deployment, StatefulSet, ...) stayed stopped",
            downtime.clone(),
        );
        let errors = Family::<CategoryLabel, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconcile passes, by category (Transient, Conflict, Permanent)",
            errors.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "pod_volume_restores_waiting",
            "PodVolumeRestores no node agent has taken yet",
            waiting.clone(),
        );
        let overdue = Gauge::default();
        registry.register(
            "pod_volume_restores_overdue",
            "PodVolumeRestores no node agent has taken within the grace (one minute)",
            overdue.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the Lease and works, else 0",
            leader.clone(),
        );
        let http = HttpCounts::default();
        registry.register(
            "http_connections",
            "Connections the /healthz, /readyz and /metrics server holds open",
            http.open.clone(),
        );
        registry.register(
            "http_connections_refused",
            "Connections closed unanswered because the server held its cap of open ones",
            http.refused.clone(),
        );
        registry.register(
            "http_accept_errors",
            "Failed accepts of the /healthz, /readyz and /metrics server (e.g. out of file descriptors)",
            http.accept_errors.clone(),
        );
        Metrics {
            registry,
            restores,
            volumes,
            bytes,
            restore_duration,
            downtime,
            errors,
            waiting,
            overdue,
            leader,
            http,
            waiting_by_restore: Mutex::default(),
        }
    }

    /// After a status write of the restore `uid`: counts what it showed happened.
    pub fn written(&self, uid: &str, before: &DataRestoreStatus, after: &DataRestoreStatus) {
        for observation in observations(before, after) {
            match observation {
                Observation::RestoreEnded { result, took } => {
                    self.restores.get_or_create(&ResultLabel { result }).inc();
                    if let Some(took) = took {
                        self.restore_duration.observe(took.as_secs_f64());
                    }
                }
                Observation::VolumeEnded { result, bytes } => {
                    self.volumes.get_or_create(&ResultLabel { result }).inc();
                    self.bytes.inc_by(bytes);
                }
                Observation::ConsumerResumed { downtime } => {
                    self.downtime.observe(downtime.as_secs_f64());
                }
            }
        }
        let counts = if after.phase.is_terminal() {
            (0, 0)
        } else {
            waiting_for_node_agent(after)
        };
        self.set_waiting(uid, counts);
    }

    /// Counts a failed reconcile pass under its category.
    pub(crate) fn reconcile_failed(&self, category: Category) {
        self.errors
            .get_or_create(&CategoryLabel {
                category: format!("{category:?}"),
            })
            .inc();
    }

    /// The restore is gone or done: it waits for nothing any more.
    pub fn forget(&self, uid: &str) {
        self.set_waiting(uid, (0, 0));
    }

    /// Whether this replica holds the Lease and works.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// What the probe server counts of its own connections.
    pub fn http(&self) -> HttpCounts {
        self.http.clone()
    }

    fn set_waiting(&self, uid: &str, counts: (i64, i64)) {
        let mut by_restore = self
            .waiting_by_restore
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if counts == (0, 0) {
            by_restore.remove(uid);
        } else {
            by_restore.insert(uid.to_string(), counts);
        }
        self.waiting.set(by_restore.values().map(|c| c.0).sum());
        self.overdue.set(by_restore.values().map(|c| c.1).sum());
    }

    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests;
