//! What every reconcile shares: the client, the events sent, and two small in-memory
//! indexes that only speed things up (the cluster holds all state that matters).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};

use crate::api::{ConsumerRecord, DataRestore};
use crate::labels;
use crate::observe::reads::{Known, Reads};

use super::metrics::Metrics;
use super::pacer::Pacer;
use super::recent::Recent;
use super::stores::Stores;
use crate::controller::build::restore_helper::{self, HelperSource};
use crate::controller::ledger::Ledger;

/// How the controller runs: the namespace it serves, its timings and its metrics.
#[derive(Debug, Clone)]
pub struct Config {
    /// Velero's namespace, where DataRestores, Backups and PodVolumeRestores live.
    pub namespace: String,
    /// The least time between two progress-only status writes of one restore.
    pub progress_interval: Duration,
    /// How often active restores are looked at even without an event, for what no
    /// watch announces: timeouts running out.
    pub recheck_interval: Duration,
    /// How long restore-wait may run with no node agent taking the PodVolumeRestore
    /// before the volume warns.
    pub agent_grace: Duration,
    /// How long a canceled PodVolumeRestore may go on before the volume warns.
    pub cancel_grace: Duration,
    /// How long a node may be NotReady before what waits on it is given up (see
    /// `volume::decide::node`).
    pub node_grace: Duration,
    /// Where the controller counts (served at `/metrics` by the `refill controller`
    /// command).
    pub metrics: Arc<Metrics>,
    /// Also carry out teams' DataRestoreRequests, in every namespace. One controller
    /// per cluster should: `refill controller` does unless `--requests=false`; off by
    /// default here, so that tests running many controllers side by side do not all
    /// answer the same request.
    pub requests: bool,
    /// From how many namespaces a restore's claims and workloads are read with one list
    /// per kind for the whole cluster instead of one per namespace: a restore of many
    /// namespaces then costs a few lists, while one of a few namespaces on a large
    /// cluster does not read all of it.
    pub cluster_wide_from: usize,
    /// The image of the pod that copies a path restore's paths into the PVC: refill's
    /// own, which holds `refill copy`.
    pub copier_image: String,
    /// What teams' DataRestoreRequests may do with GitOps objects.
    pub request_git_ops: crate::controller::RequestGitOps,
    /// Passes each of the controllers (DataRestores, DataRestoreRequests,
    /// DataRestoreSchedules) runs at once; objects past it wait their turn. Each pass
    /// holds what it read until it ends, so this bounds the memory many objects
    /// changing at once can take, and the API server's load.
    pub concurrency: u16,
    /// DataRestoreRequests of one namespace carried out at once; later ones wait for
    /// their turn, so that one team's flood of requests leaves room for the others.
    pub requests_per_namespace: usize,
    /// With [`Config::requests`]: carry out the requests of this namespace only, not
    /// of every namespace, so that tests running controllers side by side each keep
    /// to their own. `refill controller` serves every namespace.
    pub requests_namespace: Option<String>,
    /// Also fill the claims of every namespace whose `dataSourceRef` names a
    /// BackupVolume (refill as a volume populator). One controller per cluster should:
    /// `refill controller` does unless `--populator=false`; off by default here, as
    /// [`Config::requests`] is.
    pub populator: bool,
}

/// [`Config::node_grace`] when nothing else is said.
pub(crate) const DEFAULT_NODE_GRACE: Duration = Duration::from_secs(120);

/// [`Config::requests_per_namespace`] when nothing else is said.
pub const DEFAULT_REQUESTS_PER_NAMESPACE: usize = 10;

/// [`Config::concurrency`] when nothing else is said: enough for a pass of every
/// restore of a busy cluster to run without waiting, few enough that a flood of
/// requests cannot hold more than that many passes' reads at once.
pub const DEFAULT_CONCURRENCY: u16 = 16;

impl Config {
    /// kube-runtime's settings of each of refill's controllers.
    pub fn runtime(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default().concurrency(self.concurrency)
    }
}

/// refill's released image, the copier's when nothing else is said.
pub const DEFAULT_COPIER_IMAGE: &str =
    concat!("ghcr.io/refill-dev/refill:", env!("CARGO_PKG_VERSION"));

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: "velero".into(),
            progress_interval: Duration::from_secs(1),
            recheck_interval: Duration::from_secs(2),
            agent_grace: Duration::from_secs(60),
            cancel_grace: Duration::from_secs(300),
            // Past the minute or so after which the node lifecycle controller calls a
            // silent kubelet unreachable: a restarting kubelet is back well before.
            node_grace: DEFAULT_NODE_GRACE,
            metrics: Arc::default(),
            requests: false,
            cluster_wide_from: 8,
            copier_image: DEFAULT_COPIER_IMAGE.into(),
            concurrency: DEFAULT_CONCURRENCY,
            requests_per_namespace: DEFAULT_REQUESTS_PER_NAMESPACE,
            requests_namespace: None,
            populator: false,
            request_git_ops: crate::controller::RequestGitOps::default(),
        }
    }
}

/// What every reconcile shares.
pub(crate) struct Context {
    /// The client every request goes through, with the controller's user agent.
    pub client: Client,
    /// How the controller runs.
    pub config: Config,
    /// Which pods mount which claims (fed by the controller's pod watch), and owners
    /// read lately.
    pub known: Known,
    events: super::events::Events,
    /// `(namespace, claim)` → the restore working on it, for mapping pod events.
    claims: Mutex<HashMap<(String, String), ObjectRef<DataRestore>>>,
    /// Last status write per restore UID, for throttling progress.
    last_write: Mutex<HashMap<String, Instant>>,
    /// Per restore UID, the newest resourceVersion refill knows the restore has: its own
    /// last write, or what it last read after a conflict. A copy from the watch that
    /// differs is read again (see [`Context::newest_known`]).
    last_version: Mutex<HashMap<String, String>>,
    /// When each paced read (see [`Context::paced_read`]) was last let through.
    paced: Mutex<Pacer>,
    /// What Velero's namespace last said about the restore helper (see
    /// [`Context::helper_source`]).
    helper: Mutex<Recent<HelperSource>>,
    /// Each restore's volumes and consumers as last written (see [`crate::controller::ledger`]).
    pub ledger: Ledger,
    /// Backoff of each restore whose passes fail.
    pub backoffs: super::error::Backoffs,
    /// The stand-ins, PodVolumeRestores and VolumePluginRestores, as watches tell.
    pub stores: Stores,
}

impl Context {
    /// A context for `config`, publishing Events as `refill` (the instance named by
    /// `POD_NAME`).
    pub(crate) fn new(client: Client, config: Config, stores: Stores) -> Self {
        let reporter = Reporter {
            controller: "refill".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            events: super::events::Events::new(client.clone(), reporter),
            client,
            config,
            known: Known::default(),
            claims: Mutex::default(),
            last_write: Mutex::default(),
            last_version: Mutex::default(),
            paced: Mutex::default(),
            helper: Mutex::default(),
            ledger: Ledger::default(),
            backoffs: Default::default(),
            stores,
        }
    }

    /// Whether a read that need not happen on every pass may happen now, at most once
    /// per `pace` (see [`Pacer`]).
    pub(crate) fn paced_read(&self, key: &str, pace: Duration) -> bool {
        let mut paced = self.paced.lock().unwrap_or_else(|e| e.into_inner());
        paced.allow(key, Instant::now(), pace)
    }

    /// What Velero's namespace says about the restore helper (its ConfigMap, the
    /// server's image), read again once what was read is [`Recent::AGE`] old. Every pass
    /// that may make a stand-in needs it, and with `parallel` below the number of
    /// volumes that is nearly every pass of a large restore, for settings that change
    /// seldom; a change is taken up within that age.
    pub(crate) async fn helper_source(&self) -> kube::Result<HelperSource> {
        let kept = self
            .helper
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(Instant::now());
        if let Some(source) = kept {
            return Ok(source);
        }
        let source = restore_helper::read_source(&self.client, &self.config.namespace).await?;
        self.helper
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(source.clone(), Instant::now());
        Ok(source)
    }

    /// The controller's reads: its watches first, then the API.
    pub(crate) fn reads(&self) -> Reads<'_> {
        Reads::watched(&self.client, &self.known, self.config.cluster_wide_from)
    }

    /// Publishes an Event on the DataRestore; a lost event is not worth failing for.
    pub(crate) fn event(&self, dr: &DataRestore, warning: bool, reason: &str, note: String) {
        self.event_about(dr, warning, reason, note, None)
    }

    /// Like [`Context::event`], about one volume or consumer: `related` keeps events of
    /// different objects apart, where the recorder would otherwise fold them into one.
    pub(crate) fn event_about(
        &self,
        dr: &DataRestore,
        warning: bool,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.event_on_with(dr.object_ref(&()), warning, reason, note, related)
    }

    /// Publishes an Event on any object refill serves (a request, a schedule).
    pub(crate) fn event_on(
        &self,
        reference: ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        self.event_on_with(reference, warning, reason, note, None)
    }

    fn event_on_with(
        &self,
        reference: ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: related,
        };
        self.events.send(event, reference);
    }

    /// Records the claims `dr` is working on now (`(namespace, claim)`), replacing what
    /// it had, so that events of pods mounting them reach it.
    pub(crate) fn track_claims(
        &self,
        dr: &DataRestore,
        active: impl Iterator<Item = (String, String)>,
    ) {
        let me = ObjectRef::from_obj(dr);
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        claims.retain(|_, owner| *owner != me);
        for key in active {
            claims.insert(key, me.clone());
        }
    }

    /// Drops everything kept for `dr`: its claims, write throttling and metrics.
    pub(crate) fn forget(&self, dr: &DataRestore) {
        let me = ObjectRef::from_obj(dr);
        self.claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, owner| *owner != me);
        if let Some(uid) = dr.uid() {
            self.last_write
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|k, _| !k.starts_with(&uid));
            self.last_version
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&uid);
            self.ledger.forget(&uid);
            self.config.metrics.forget(&uid);
        }
    }

    /// The restores a pod's events concern: the one its stand-in annotation names, or
    /// those working on a claim it mounts.
    pub(crate) fn restores_for_pod(&self, pod: &Pod) -> Vec<ObjectRef<DataRestore>> {
        if let Some(key) = pod.annotations().get(labels::DATA_RESTORE_ANNOTATION) {
            // Another controller's stand-in (another Velero namespace) is not ours.
            return match key.split_once('/') {
                Some((ns, name)) if ns == self.config.namespace => {
                    vec![ObjectRef::new(name).within(ns)]
                }
                _ => Vec::new(),
            };
        }
        let ns = pod.namespace().unwrap_or_default();
        let claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter_map(|c| claims.get(&(ns.clone(), c.claim_name.clone())).cloned())
            .collect()
    }

    /// The restores working on a claim, for mapping its events.
    pub(crate) fn restores_for_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Vec<ObjectRef<DataRestore>> {
        let claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .into_iter()
            .collect()
    }

    /// How long until a progress-only write is allowed again, if it is not yet.
    pub(crate) fn progress_wait(&self, uid: &str) -> Option<Duration> {
        let last = self
            .last_write
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(uid)
            .copied()?;
        self.config.progress_interval.checked_sub(last.elapsed())
    }

    /// A reference to a PVC given as `namespace/name`, for events.
    pub(crate) fn pvc_ref(key: &str) -> Option<ObjectReference> {
        let (namespace, name) = key.split_once('/')?;
        Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        })
    }

    /// A reference to a consumer, for events.
    pub(crate) fn consumer_ref(record: &ConsumerRecord) -> Option<ObjectReference> {
        let resource = record.kind.api_resource();
        Some(ObjectReference {
            api_version: Some(resource.api_version),
            kind: Some(resource.kind),
            namespace: Some(record.namespace.clone()),
            name: Some(record.name.clone()),
            ..Default::default()
        })
    }

    /// Notes a status write (for the progress throttle) and, for a DataRestore, the
    /// resourceVersion it produced.
    pub(crate) fn wrote(&self, uid: &str, version: Option<String>) {
        self.last_write
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(uid.to_string(), Instant::now());
        if let Some(version) = version {
            self.last_version
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(uid.to_string(), version);
        }
    }

    /// Notes the resourceVersion a read of the restore returned, or, with None, that the
    /// copy the watch holds may be behind (a write conflicted, or another part of refill
    /// wrote without a version to tell): the next pass reads the restore from the API
    /// server once. Without it, a watch that lags (seen after an API server restart)
    /// hands every pass the same old copy, and each of its writes conflicts.
    pub(crate) fn read_again(&self, uid: &str, version: Option<String>) {
        self.last_version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(uid.to_string(), version.unwrap_or_default());
    }

    /// The newest resourceVersion refill knows this restore has (its last status write,
    /// or its last read after a conflict); "" when it must be read again.
    pub(crate) fn newest_known(&self, uid: &str) -> Option<String> {
        self.last_version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(uid)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_runs_with_the_configured_concurrency() {
        let config = Config {
            concurrency: 3,
            ..Default::default()
        };
        // kube-runtime keeps its settings private; its Debug shows them.
        let runtime = format!("{:?}", config.runtime());
        assert!(runtime.contains("concurrency: 3"), "{runtime}");
        let default = format!("{:?}", Config::default().runtime());
        assert!(
            default.contains(&format!("concurrency: {DEFAULT_CONCURRENCY}")),
            "{default}"
        );
        assert_ne!(DEFAULT_CONCURRENCY, 0, "0 is kube-runtime's unbounded");
    }
}
