//! Watch-fed copies of the objects refill makes for a restore: stand-in and copier
//! pods, and PodVolumeRestores. (Its VolumePluginRestores are written from memory, see
//! [`crate::controller::ledger`], and need no watch.)
//!
//! Every pass of every restore looks at them; listing or reading them each time cost
//! requests on every pass (a read per copier and pass, most of them finding none), for
//! objects the controller watches anyway (changes to them are what wake a restore up).
//! A pass reads them from these stores instead, and reads the API only where a store
//! that lags behind could mislead a decision (see [`crate::controller::volume::sight`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::PodVolumeRestore;
use crate::controller::build::{copier, restore_helper};
use crate::labels;
use crate::observe;

use super::error::{Error, Result};

/// How long a pass waits for the first list of the watches after a (re)start.
const SYNC_BOUND: Duration = Duration::from_secs(60);

/// One kind's store, and whether its watch is known to be whole.
#[derive(Clone)]
struct WatchedStore<K: Resource + Clone + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store: Store<K>,
    /// False from a watch error until the watch is known to go on without a gap: a
    /// relist completed, or an event came after it resumed. Meanwhile passes list.
    whole: Arc<AtomicBool>,
}

/// What a watch's events say of its store's wholeness.
#[derive(Clone)]
pub(crate) struct WatchHealth(Arc<AtomicBool>);

impl WatchHealth {
    /// Notes one item of the watch, after the store has taken it.
    pub(crate) fn note<K>(&self, item: &Result<Event<K>, watcher::Error>) {
        match item {
            Err(_) => self.0.store(false, Ordering::Relaxed),
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                self.0.store(true, Ordering::Relaxed)
            }
            Ok(Event::Init | Event::InitApply(_)) => {}
        }
    }
}

/// The readers, shared by every reconcile.
#[derive(Clone)]
pub(crate) struct Stores {
    stand_ins: WatchedStore<Pod>,
    pod_volume_restores: WatchedStore<PodVolumeRestore>,
}

/// The writing ends, each fed by one watch of [`crate::controller::run_with_readiness`], and the
/// health each watch reports through.
pub(crate) struct Writers {
    pub stand_ins: StandInWriter,
    pub pod_volume_restores: Writer<PodVolumeRestore>,
    pub stand_ins_health: WatchHealth,
    pub pod_volume_restores_health: WatchHealth,
}

fn watched<K>() -> (WatchedStore<K>, Writer<K>, WatchHealth)
where
    K: Resource + Clone + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default,
{
    let (store, writer) = reflector::store();
    let whole = Arc::new(AtomicBool::new(true));
    (
        WatchedStore {
            store,
            whole: whole.clone(),
        },
        writer,
        WatchHealth(whole),
    )
}

/// Empty stores and the writers that fill them.
pub(crate) fn stores() -> (Stores, Writers) {
    let (stand_ins, stand_in_writer, stand_ins_health) = watched();
    let (pod_volume_restores, pvr_writer, pod_volume_restores_health) = watched();
    (
        Stores {
            stand_ins,
            pod_volume_restores,
        },
        Writers {
            stand_ins: StandInWriter(stand_in_writer),
            pod_volume_restores: pvr_writer,
            stand_ins_health,
            pod_volume_restores_health,
        },
    )
}

/// Keeps the stand-ins and copiers out of the controller's watch of all pods, which also
/// feeds the index of mounts ([`crate::mounts`]): one watch, and only refill's pods
/// held. Copiers are kept by their name too: a read by the name would find a pod that
/// took it, whoever made it.
pub(crate) struct StandInWriter(Writer<Pod>);

impl StandInWriter {
    pub(crate) fn apply(&mut self, event: &Event<Pod>) {
        let kept = |pod: &Pod| {
            if observe::own_pods::is_stand_in(pod) {
                Some(slim(pod))
            } else {
                observe::own_pods::may_be_copier(pod).then(|| slim_copier(pod))
            }
        };
        let event = match event {
            Event::Init => Some(Event::Init),
            Event::InitDone => Some(Event::InitDone),
            Event::InitApply(pod) => kept(pod).map(Event::InitApply),
            Event::Apply(pod) => kept(pod).map(Event::Apply),
            Event::Delete(pod) => kept(pod).map(Event::Delete),
        };
        if let Some(event) = event {
            self.0.apply_watcher_event(&event);
        }
    }
}

/// What a pass reads of a stand-in ([`crate::controller::volume::sight::stand_in_of`], the
/// PodVolumeRestore's pod reference, the node it runs on, the precondition of its
/// deletion): a restore of a thousand claims keeps a thousand of them, and the
/// containers, volumes and affinity they were made with are most of each.
fn slim(pod: &Pod) -> Pod {
    let status = pod.status.as_ref().map(|status| PodStatus {
        phase: status.phase.clone(),
        message: status.message.clone(),
        reason: status.reason.clone(),
        // Whether it could not be scheduled, and why: the one condition read.
        conditions: status.conditions.as_ref().map(|conditions| {
            conditions
                .iter()
                .filter(|c| c.type_ == "PodScheduled" && c.status == "False")
                .cloned()
                .collect()
        }),
        init_container_statuses: status.init_container_statuses.as_ref().map(|statuses| {
            statuses
                .iter()
                .filter(|c| {
                    c.name == restore_helper::CONTAINER_NAME
                        || c.name == copier::SET_ASIDE_CONTAINER
                })
                .cloned()
                .collect()
        }),
        // The tidy's end and report; an idle container's tell nothing.
        container_statuses: status.container_statuses.as_ref().map(|statuses| {
            statuses
                .iter()
                .filter(|c| c.name == copier::TIDY_CONTAINER)
                .cloned()
                .collect()
        }),
        ..PodStatus::default()
    });
    Pod {
        metadata: slim_meta(&pod.metadata),
        spec: pod.spec.as_ref().map(|spec| PodSpec {
            node_name: spec.node_name.clone(),
            // Whether the stand-in sets aside and tidies: the set-aside's name alone. A
            // typed container takes 2 KiB however little it holds.
            init_containers: spec.init_containers.as_ref().map(|containers| {
                containers
                    .iter()
                    .filter(|c| c.name == copier::SET_ASIDE_CONTAINER)
                    .map(|c| Container {
                        name: c.name.clone(),
                        ..Container::default()
                    })
                    .collect()
            }),
            ..PodSpec::default()
        }),
        status,
    }
}

/// The metadata a pass reads of refill's pods: name, UID and version, labels, and when
/// it was made and is being deleted.
fn slim_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        labels: meta.labels.clone(),
        creation_timestamp: meta.creation_timestamp.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        ..ObjectMeta::default()
    }
}

/// What a pass reads of a copier ([`crate::controller::volume::sight::copier_of`]): its
/// marks and UID, its container's arguments and state (the summary it ends with is its
/// termination message), where it runs and whether it is being deleted.
fn slim_copier(pod: &Pod) -> Pod {
    Pod {
        // Another restore's copier names that restore in an annotation.
        metadata: ObjectMeta {
            annotations: pod.metadata.annotations.clone(),
            ..slim_meta(&pod.metadata)
        },
        spec: pod.spec.as_ref().map(|spec| PodSpec {
            node_name: spec.node_name.clone(),
            containers: spec
                .containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    args: c.args.clone(),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        }),
        status: pod.status.clone(),
    }
}

/// What one pass of a restore sees of the objects it made, keyed as they are looked up.
#[derive(Default)]
pub(crate) struct PassView {
    /// Stand-in pods by `(namespace, name)`.
    pub stand_ins: BTreeMap<(String, String), Arc<Pod>>,
    /// Pods that are, or are named as, copiers (of any restore) by `(namespace, name)`;
    /// None while the pod watch has a gap, when copiers are read from the API.
    pub copiers: Option<BTreeMap<(String, String), Arc<Pod>>>,
    /// PodVolumeRestores by name.
    pub pod_volume_restores: BTreeMap<String, Arc<PodVolumeRestore>>,
}

fn of_restore<K: kube::Resource>(object: &K, uid: &str) -> bool {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::DATA_RESTORE_UID))
        .is_some_and(|v| v == uid)
}

impl Stores {
    /// The objects of the restore with this UID, once every watch has listed: from the
    /// stores, or listed from the API while a watch has a gap.
    pub(crate) async fn view(
        &self,
        client: &Client,
        namespace: &str,
        uid: &str,
    ) -> Result<PassView> {
        self.synced().await?;
        let mine = ListParams::default().labels(&format!("{}={uid}", labels::DATA_RESTORE_UID));
        let (stand_ins, pod_volume_restores) = futures::try_join!(
            self.stand_ins.of(Api::all(client.clone()), &mine, uid),
            self.pod_volume_restores
                .of(Api::namespaced(client.clone(), namespace), &mine, uid),
        )?;
        let copiers = self.stand_ins.whole.load(Ordering::Relaxed).then(|| {
            by_key(
                self.stand_ins
                    .store
                    .state_filter(observe::own_pods::may_be_copier),
            )
        });
        Ok(PassView {
            stand_ins: by_key(
                stand_ins
                    .into_iter()
                    .filter(|p| observe::own_pods::is_stand_in(p))
                    .collect(),
            ),
            copiers,
            pod_volume_restores: by_name(pod_volume_restores),
        })
    }

    async fn synced(&self) -> Result<()> {
        let all = async {
            futures::try_join!(
                self.stand_ins.store.wait_until_ready(),
                self.pod_volume_restores.store.wait_until_ready(),
            )
        };
        match tokio::time::timeout(SYNC_BOUND, all).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(Error::Transient(
                "the watches of stand-in pods and PodVolumeRestores stopped".into(),
            )),
            Err(_) => Err(Error::Transient(format!(
                "the watches of stand-in pods and PodVolumeRestores have not listed within {}s",
                SYNC_BOUND.as_secs()
            ))),
        }
    }
}

impl<K> WatchedStore<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    async fn of(&self, api: Api<K>, mine: &ListParams, uid: &str) -> Result<Vec<Arc<K>>> {
        if self.whole.load(Ordering::Relaxed) {
            return Ok(self.store.state_filter(|o| of_restore(o, uid)));
        }
        Ok(api
            .list(mine)
            .await?
            .items
            .into_iter()
            .map(Arc::new)
            .collect())
    }
}

fn by_key(pods: Vec<Arc<Pod>>) -> BTreeMap<(String, String), Arc<Pod>> {
    pods.into_iter()
        .map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p))
        .collect()
}

fn by_name<K: kube::Resource>(objects: Vec<Arc<K>>) -> BTreeMap<String, Arc<K>> {
    objects.into_iter().map(|o| (o.name_any(), o)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("shop".into());
        if let Some(uid) = uid {
            pod.metadata.labels = Some(
                [
                    (labels::ROLE.to_string(), labels::ROLE_STAND_IN.to_string()),
                    (labels::DATA_RESTORE_UID.to_string(), uid.to_string()),
                ]
                .into(),
            );
        }
        pod
    }

    /// A client whose every request fails: a view that reads the API errs.
    fn unreachable_client() -> Client {
        Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
    }

    /// Marks the two Velero-side watches listed (empty).
    fn listed(writers: &mut Writers) {
        writers
            .pod_volume_restores
            .apply_watcher_event(&Event::InitDone);
    }

    #[tokio::test]
    async fn after_a_watch_error_passes_list_until_the_watch_is_whole_again() {
        let (stores, mut writers) = stores();
        listed(&mut writers);
        writers.stand_ins.apply(&Event::InitDone);
        let client = unreachable_client();
        assert!(stores.view(&client, "velero", "one").await.is_ok());
        let gap: Result<Event<Pod>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        writers.stand_ins_health.note(&gap);
        assert!(
            stores.view(&client, "velero", "one").await.is_err(),
            "the stand-ins are read from the API"
        );
        writers.stand_ins_health.note::<Pod>(&Ok(Event::Init));
        assert!(
            stores.view(&client, "velero", "one").await.is_err(),
            "not yet relisted"
        );
        writers.stand_ins_health.note::<Pod>(&Ok(Event::InitDone));
        assert!(stores.view(&client, "velero", "one").await.is_ok());
    }

    #[test]
    fn a_slim_stand_in_reads_as_the_whole_one() {
        use crate::controller::volume::sight::stand_in_of;
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
            PodCondition,
        };
        let mut whole = pod("refill-data", Some("one"));
        whole.metadata.uid = Some("pod-uid".into());
        whole.metadata.annotations = Some([("big".to_string(), "x".repeat(4096))].into());
        whole.spec = Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![Container {
                name: "pause".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let status = |state: ContainerState| PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            init_container_statuses: Some(vec![ContainerStatus {
                name: restore_helper::CONTAINER_NAME.into(),
                state: Some(state),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let running = ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(100).unwrap(),
                )),
            }),
            ..Default::default()
        };
        let ended = |exit_code| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                reason: Some("Error".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        for state in [running, ended(0), ended(1)] {
            whole.status = Some(status(state));
            let kept = slim(&whole);
            assert_eq!(stand_in_of(&kept), stand_in_of(&whole));
            assert_eq!(kept.uid(), whole.uid());
            assert_eq!(kept.spec.unwrap().node_name.as_deref(), Some("node-a"));
            assert!(kept.metadata.annotations.is_none());
        }
        // One that cannot be scheduled says why, whatever other conditions it has.
        let condition = |type_: &str, status: &str, message: Option<&str>| PodCondition {
            type_: type_.into(),
            status: status.into(),
            message: message.map(Into::into),
            ..Default::default()
        };
        let mut pending = status(ended(0));
        pending.conditions = Some(vec![
            condition(
                "Initialized",
                "False",
                Some("containers with incomplete status"),
            ),
            condition("PodScheduled", "False", Some("0/3 nodes are available")),
            condition("Ready", "False", None),
        ]);
        whole.status = Some(pending);
        let kept = slim(&whole);
        assert_eq!(stand_in_of(&kept), stand_in_of(&whole));
        assert!(matches!(
            stand_in_of(&kept),
            crate::controller::volume::decide::StandInSeen::Ours {
                waiting: Some(ref why),
                ..
            } if why.contains("0/3 nodes")
        ));
        assert_eq!(kept.status.unwrap().conditions.unwrap().len(), 1);
        // A stand-in that sets aside and tidies: its steps' ends and reports are kept.
        let named = |name: &str| Container {
            name: name.into(),
            args: Some(vec!["copy".into(); 8]),
            ..Default::default()
        };
        let spec = whole.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![
            named(copier::SET_ASIDE_CONTAINER),
            named(restore_helper::CONTAINER_NAME),
        ]);
        spec.containers = vec![named(copier::TIDY_CONTAINER)];
        let report = |message: &str| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                message: Some(message.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut tidied = status(ended(0));
        tidied.phase = Some("Succeeded".into());
        tidied
            .init_container_statuses
            .as_mut()
            .unwrap()
            .push(ContainerStatus {
                name: copier::SET_ASIDE_CONTAINER.into(),
                state: Some(report(r#"{"deleted":3}"#)),
                ..Default::default()
            });
        tidied.container_statuses = Some(vec![ContainerStatus {
            name: copier::TIDY_CONTAINER.into(),
            state: Some(report(r#"{"deleted":4}"#)),
            ..Default::default()
        }]);
        whole.status = Some(tidied);
        let kept = slim(&whole);
        assert_eq!(stand_in_of(&kept), stand_in_of(&whole));
        assert!(matches!(
            stand_in_of(&kept),
            crate::controller::volume::decide::StandInSeen::Ours {
                in_pod: Some(_),
                ..
            }
        ));
        let spec = kept.spec.unwrap();
        let init_containers = spec.init_containers.unwrap();
        assert_eq!(init_containers.len(), 1, "the set-aside's name alone");
        assert!(init_containers.iter().all(|c| c.args.is_none()));
    }

    #[tokio::test]
    async fn only_stand_ins_are_kept_and_a_view_holds_one_restores() {
        let (stores, mut writers) = stores();
        for event in [
            Event::Init,
            Event::InitApply(pod("web-0", None)),
            Event::InitApply(pod("refill-a", Some("one"))),
            Event::InitApply(pod("refill-b", Some("two"))),
            Event::InitDone,
            Event::Apply(pod("web-1", None)),
        ] {
            writers.stand_ins.apply(&event);
        }
        listed(&mut writers);
        assert_eq!(
            stores.stand_ins.store.len(),
            2,
            "consumer pods are not kept"
        );
        let client = unreachable_client();
        let view = stores.view(&client, "velero", "one").await.unwrap();
        let names: Vec<_> = view.stand_ins.keys().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["refill-a"]);
        writers
            .stand_ins
            .apply(&Event::Delete(pod("refill-a", Some("one"))));
        assert!(
            stores
                .view(&client, "velero", "one")
                .await
                .unwrap()
                .stand_ins
                .is_empty()
        );
    }

    #[tokio::test]
    async fn copiers_are_kept_by_their_role_or_name_and_read_as_the_whole_ones() {
        use crate::api::{VolumePhase, VolumeStatus};
        use crate::controller::volume::sight::copier_of;
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStatus,
        };
        let copier = |name: &str, restore: Option<&str>| {
            let mut pod = pod(name, restore);
            if let Some(labels) = pod.metadata.labels.as_mut() {
                labels.insert(labels::ROLE.into(), labels::ROLE_COPIER.into());
            }
            pod
        };
        let mut ours = copier("refill-copy-data-1", Some("one"));
        ours.metadata.uid = Some("copier-uid".into());
        ours.metadata.annotations = Some(
            [(
                labels::DATA_RESTORE_ANNOTATION.to_string(),
                "velero/one".into(),
            )]
            .into(),
        );
        ours.spec = Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![Container {
                name: "copy".into(),
                args: Some(vec!["copy".into(), "--put-back".into()]),
                image: Some("refill".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        ours.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "copy".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        message: Some(r#"{"filesWritten":1}"#.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let volume = VolumeStatus {
            pvc: "shop/data".into(),
            phase: VolumePhase::Aborting,
            copier_uid: Some("copier-uid".into()),
            ..Default::default()
        };
        let kept = slim_copier(&ours);
        assert_eq!(
            copier_of(&kept, "one", &volume),
            copier_of(&ours, "one", &volume)
        );
        assert_eq!(
            copier_of(&kept, "two", &volume),
            copier_of(&ours, "two", &volume)
        );

        let (stores, mut writers) = stores();
        for event in [
            Event::Init,
            Event::InitApply(ours.clone()),
            Event::InitApply(copier("other-name", Some("two"))),
            Event::InitApply(pod("refill-copy-data-2", None)),
            Event::InitApply(pod("web-0", None)),
            Event::InitDone,
        ] {
            writers.stand_ins.apply(&event);
        }
        listed(&mut writers);
        let client = unreachable_client();
        let view = stores.view(&client, "velero", "one").await.unwrap();
        let names: Vec<_> = view.copiers.unwrap().into_keys().map(|(_, n)| n).collect();
        assert_eq!(
            names,
            ["other-name", "refill-copy-data-1", "refill-copy-data-2"],
            "every restore's, and any pod under a copier's name"
        );
        assert!(view.stand_ins.is_empty(), "copiers are no stand-ins");
        let gap: Result<Event<Pod>, watcher::Error> = Err(watcher::Error::NoResourceVersion);
        writers.stand_ins_health.note(&gap);
        assert!(
            !stores.stand_ins.whole.load(Ordering::Relaxed),
            "a gap: copiers are then read from the API"
        );
    }
}
