//! How each kind of consumer is stopped, brought back and checked for a restart: one
//! strategy per kind, as pure functions of the object read. The API calls are in
//! [`super`].
//!
//! Every stop writes its own record on the object in the same patch (the DataRestore
//! that holds it and what brings it back), so no consumer is ever stopped without
//! something durable that brings it back, even if refill dies right after. That record
//! is also the lock: a workload already marked by another restore is not touched.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::api::{ConsumerKind, ConsumerRecord, ConsumerState};
use crate::labels;
use crate::observe::replicas::replicas;

/// A node-selector key no node carries: a DaemonSet asked to run only there runs nowhere.
pub(super) const PARKED_KEY: &str = "refill.dev/parked-by";

/// How one kind of consumer is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Deployments, StatefulSets, ReplicaSets, ReplicationControllers: replicas to 0.
    Scale,
    /// DaemonSets: a node selector no node matches.
    Park,
    /// CronJobs: suspended (their running Jobs are waited for, as pods on the claim).
    Suspend,
    /// Bare pods: deleted, and created again from the recorded manifest.
    Delete,
    /// Jobs: waited for, never killed.
    Wait,
}

impl Strategy {
    pub(crate) fn of(kind: ConsumerKind) -> Self {
        match kind {
            ConsumerKind::Deployment
            | ConsumerKind::StatefulSet
            | ConsumerKind::ReplicaSet
            | ConsumerKind::ReplicationController => Strategy::Scale,
            ConsumerKind::DaemonSet => Strategy::Park,
            ConsumerKind::CronJob => Strategy::Suspend,
            ConsumerKind::Pod => Strategy::Delete,
            ConsumerKind::Job => Strategy::Wait,
        }
    }

    /// Whether stopping and resuming it patches the object (and so marks it).
    pub(crate) fn patches(self) -> bool {
        matches!(self, Strategy::Scale | Strategy::Park | Strategy::Suspend)
    }

    /// The stop as one merge patch carrying the record and the lock, for the object as
    /// read, and the replica count or state it records; None for kinds not patched.
    pub(crate) fn stop_patch(self, uid: &str, restore: &str, obj: &DynamicObject) -> Option<Stop> {
        let mut annotations = json!({
            labels::QUIESCED_BY: uid,
            labels::QUIESCED_BY_RESTORE: restore,
        });
        let (spec, replicas, original) = match self {
            Strategy::Scale => {
                let original = replicas(obj);
                annotations[labels::ORIGINAL_REPLICAS] = json!(original.to_string());
                (json!({"replicas": 0}), Some(original), None)
            }
            Strategy::Park => (
                json!({"template": {"spec": {"nodeSelector": {PARKED_KEY: uid}}}}),
                None,
                None,
            ),
            Strategy::Suspend => {
                let was = obj.data["spec"]["suspend"].as_bool().unwrap_or(false);
                let original = json!({"suspend": was}).to_string();
                annotations[labels::ORIGINAL_STATE] = json!(original);
                (json!({"suspend": true}), None, Some(original))
            }
            Strategy::Delete | Strategy::Wait => return None,
        };
        Some(Stop {
            // What was read is what gets recorded: a change in between (a rescale, another
            // restore's mark) makes the server refuse the patch.
            patch: json!({
                "metadata": {
                    "annotations": annotations,
                    "resourceVersion": obj.metadata.resource_version,
                },
                "spec": spec,
            }),
            replicas,
            original,
        })
    }

    /// The field of the object a restart shows in, and whether it shows now.
    fn restart_field(self, obj: &DynamicObject, uid: &str) -> (bool, &'static [&'static str]) {
        match self {
            Strategy::Scale => (replicas(obj) > 0, &["f:spec", "f:replicas"]),
            Strategy::Park => (
                obj.data["spec"]["template"]["spec"]["nodeSelector"][PARKED_KEY].as_str()
                    != Some(uid),
                &["f:spec", "f:template", "f:spec", "f:nodeSelector"],
            ),
            Strategy::Suspend => (
                obj.data["spec"]["suspend"].as_bool() != Some(true),
                &["f:spec", "f:suspend"],
            ),
            Strategy::Delete | Strategy::Wait => (false, &[]),
        }
    }
}

/// A stop to apply: the patch, and what it records.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stop {
    pub patch: Value,
    pub replicas: Option<i32>,
    pub original: Option<String>,
}

pub(super) fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Who holds the object, if a restore does: `(uid, namespace/name)`.
pub(super) fn holder(obj: &DynamicObject) -> Option<(&str, &str)> {
    let uid = annotation(obj, labels::QUIESCED_BY)?;
    Some((
        uid,
        annotation(obj, labels::QUIESCED_BY_RESTORE).unwrap_or("(a DataRestore)"),
    ))
}

/// The undo of a scale-down as one conditional request. Its tests make the server
/// refuse it unless the workload is exactly as this restore left it (stopped by it, at
/// 0, `original` recorded), so no read is needed before it; when refused, the workload
/// is read and [`resume_patch`] decides.
pub(super) fn scale_back_patch(uid: &str, original: i32) -> Value {
    // JSON pointer escaping: annotation keys hold a '/'.
    let annotation = |key: &str| {
        format!(
            "/metadata/annotations/{}",
            key.replace('~', "~0").replace('/', "~1")
        )
    };
    json!([
        {"op": "test", "path": annotation(labels::QUIESCED_BY), "value": uid},
        {"op": "test", "path": annotation(labels::ORIGINAL_REPLICAS), "value": original.to_string()},
        {"op": "test", "path": "/spec/replicas", "value": 0},
        {"op": "remove", "path": annotation(labels::QUIESCED_BY)},
        {"op": "remove", "path": annotation(labels::QUIESCED_BY_RESTORE)},
        {"op": "remove", "path": annotation(labels::ORIGINAL_REPLICAS)},
        {"op": "replace", "path": "/spec/replicas", "value": original},
    ])
}

/// What a resume did, for the words that report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resumed {
    ScaledBack(i32),
    /// Someone set a count meanwhile; theirs stands and only refill's marks went.
    KeptTheirs(i32),
    Started,
    /// Back on the new claim `to` instead of the PVC's claim `from` (switchWorkloads),
    /// scaled back to `scaled_to`, or left at a count someone set meanwhile.
    Switched {
        from: String,
        to: String,
        scaled_to: Option<i32>,
    },
    /// Deleted while it was stopped: there is nothing to bring back.
    Gone,
    /// refill's mark went while it was stopped, and another restore (`namespace/name`)
    /// has stopped it since: that restore brings it back.
    HeldElsewhere(String),
    /// A bare pod whose name another pod took while it was stopped: that pod is left
    /// as it is, and the recorded one is not created.
    Replaced,
    /// Not stopped by this restore: left as it is.
    Untouched,
}

/// Where a consumer in `state` is after a resume that did `resumed`. Only a consumer
/// that is running again, or was never stopped, may read as back.
pub(super) fn state_after(state: ConsumerState, resumed: &Resumed) -> ConsumerState {
    match (resumed, state) {
        // Marked Stopping but the stop never applied: it ran all along.
        (Resumed::Untouched, ConsumerState::Stopping) => ConsumerState::Running,
        (Resumed::Gone, _) => ConsumerState::Gone,
        (Resumed::HeldElsewhere(_), _) => ConsumerState::HeldByOther,
        (Resumed::Replaced, _) => ConsumerState::Replaced,
        _ => ConsumerState::Resumed,
    }
}

/// Undoes any of the stops above; a merge patch with null removes only refill's keys, so
/// the consumer's own node selector and annotations stay as they were. Also says what
/// the patch does.
pub(super) fn resume_patch(
    kind: ConsumerKind,
    record: &ConsumerRecord,
    obj: &DynamicObject,
) -> (Value, Resumed) {
    let clear = json!({"metadata": {"annotations": {
        labels::QUIESCED_BY: null,
        labels::QUIESCED_BY_RESTORE: null,
        labels::ORIGINAL_REPLICAS: null,
        labels::ORIGINAL_STATE: null,
    }}});
    let spec = match Strategy::of(kind) {
        Strategy::Scale => {
            // A Stopped record holds the count the stop wrote: it comes first, since the
            // annotation sits on an object the workload's team can edit. A Stopping
            // record may hold the count seen at planning, before the stop applied; the
            // annotation written with the stop is the exact one then.
            let recorded = record
                .replicas
                .filter(|_| record.state == ConsumerState::Stopped);
            let original = recorded
                .or_else(|| {
                    annotation(obj, labels::ORIGINAL_REPLICAS)?
                        .parse::<i32>()
                        .ok()
                })
                .or(record.replicas)
                .unwrap_or(1)
                .max(0);
            // Someone scaled it up already: their count stands.
            let now = replicas(obj);
            if now > 0 {
                return (clear, Resumed::KeptTheirs(now));
            }
            (json!({"replicas": original}), Resumed::ScaledBack(original))
        }
        Strategy::Park => (
            json!({"template": {"spec": {"nodeSelector": {PARKED_KEY: null}}}}),
            Resumed::Started,
        ),
        Strategy::Suspend => {
            let was = record
                .original
                .as_deref()
                .or_else(|| annotation(obj, labels::ORIGINAL_STATE))
                .and_then(|v| serde_json::from_str::<Value>(v).ok())
                .and_then(|v| v["suspend"].as_bool())
                .unwrap_or(false);
            (json!({"suspend": was}), Resumed::Started)
        }
        Strategy::Delete | Strategy::Wait => return (clear, Resumed::Untouched),
    };
    let (spec, resumed) = spec;
    let mut patch = clear;
    patch["spec"] = spec;
    (patch, resumed)
}

/// A bare pod as it can be created again: without what the server set.
pub(crate) fn recreatable_pod(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    let meta = &mut pod.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.managed_fields = None;
    meta.generation = None;
    meta.self_link = None;
    if let Some(spec) = pod.spec.as_mut() {
        // Set by the scheduler; the new pod is scheduled afresh.
        spec.node_name = None;
    }
    pod.status = None;
    pod
}

/// A bare pod to create again from its recorded `manifest`, marked as made by the
/// restore `uid`: a pod found under its name later is refill's own (a pass whose status
/// write was lost) only with that mark.
pub(super) fn pod_to_recreate(manifest: &str, uid: &str) -> serde_json::Result<Pod> {
    let mut pod: Pod = serde_json::from_str(manifest)?;
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(labels::RECREATED_BY.into(), uid.into());
    Ok(pod)
}

/// What a pod found under a bare pod's name, where refill's create was refused, says
/// of the resume: back when the restore `uid` made it, else someone else's pod.
pub(super) fn found_under_name(pod: &Pod, uid: &str) -> Resumed {
    let mark = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::RECREATED_BY));
    match mark {
        Some(by) if by == uid => Resumed::Started,
        _ => Resumed::Replaced,
    }
}

/// When a stopped consumer was started again by someone else, says so, naming who when
/// the object's managed fields tell.
pub(crate) fn restarted(record: &ConsumerRecord, obj: &DynamicObject, uid: &str) -> Option<String> {
    let what = format!("{:?} {}/{}", record.kind, record.namespace, record.name);
    let (changed, path) = Strategy::of(record.kind).restart_field(obj, uid);
    if !changed {
        return None;
    }
    let how = match Strategy::of(record.kind) {
        Strategy::Scale => format!("was scaled to {}", replicas(obj)),
        _ => "was started again".to_string(),
    };
    let by = who_changed(
        obj.metadata.managed_fields.as_deref().unwrap_or_default(),
        path,
    )
    .map(|w| format!(" by {w}"))
    .unwrap_or_default();
    Some(format!(
        "{what} {how}{by} while its volume was being restored; refill stopped writing to it"
    ))
}

/// The most recent field manager other than refill that owns the field at `path`.
pub(super) fn who_changed(entries: &[ManagedFieldsEntry], path: &[&str]) -> Option<String> {
    entries
        .iter()
        .filter(|e| e.manager.as_deref() != Some(labels::FIELD_MANAGER))
        .filter(|e| {
            let mut node = e.fields_v1.as_ref().map(|f| &f.0);
            for key in path {
                node = node.and_then(|n| n.get(*key));
            }
            node.is_some()
        })
        .max_by_key(|e| e.time.as_ref().map(|t| t.0))
        .map(|e| {
            let manager = e
                .manager
                .clone()
                .unwrap_or_else(|| "an unknown manager".into());
            match (&e.operation, &e.time) {
                (Some(op), Some(t)) => format!("{manager} ({op} at {})", t.0),
                _ => manager,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConsumerState;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
    use k8s_openapi::jiff::Timestamp;

    fn record(kind: ConsumerKind) -> ConsumerRecord {
        ConsumerRecord {
            kind,
            namespace: "shop".into(),
            name: "web".into(),
            pvcs: vec!["shop/data".into()],
            state: ConsumerState::Stopped,
            replicas: Some(3),
            original: None,
            held_by: None,
            switch_to: None,
            stopped_at: None,
            resumed_at: None,
            uid: None,
        }
    }

    fn object(data: Value, annotations: &[(&str, &str)]) -> DynamicObject {
        let mut obj =
            DynamicObject::new("web", &ConsumerKind::Deployment.api_resource()).data(data);
        obj.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        obj
    }

    #[test]
    fn a_stop_records_the_count_and_the_lock_in_the_same_conditional_patch() {
        let mut obj = object(json!({"spec": {"replicas": 3}}), &[]);
        obj.metadata.resource_version = Some("42".into());
        let stop = Strategy::Scale
            .stop_patch("uid", "velero/fix", &obj)
            .unwrap();
        let patch = stop.patch;
        assert_eq!(patch["spec"]["replicas"], 0);
        assert_eq!(stop.replicas, Some(3));
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations[labels::ORIGINAL_REPLICAS], "3");
        assert_eq!(annotations[labels::QUIESCED_BY], "uid");
        assert_eq!(annotations[labels::QUIESCED_BY_RESTORE], "velero/fix");
        assert_eq!(
            patch["metadata"]["resourceVersion"], "42",
            "conditional on what was read"
        );

        let cron = object(json!({"spec": {"suspend": false}}), &[]);
        let stop = Strategy::Suspend
            .stop_patch("uid", "velero/fix", &cron)
            .unwrap();
        assert!(
            Strategy::Wait
                .stop_patch("uid", "velero/fix", &cron)
                .is_none()
        );
        assert_eq!(stop.patch["spec"]["suspend"], true);
        assert_eq!(stop.original.as_deref(), Some("{\"suspend\":false}"));

        let held = object(
            json!({}),
            &[
                (labels::QUIESCED_BY, "other"),
                (labels::QUIESCED_BY_RESTORE, "velero/first"),
            ],
        );
        assert_eq!(holder(&held), Some(("other", "velero/first")));
        assert_eq!(holder(&cron), None);
    }

    #[test]
    fn a_resume_without_refill_s_mark_brings_back_the_record_s_count_not_the_object_s() {
        // The team edited the leftover annotation; the restore's record holds 3.
        let stopped = object(
            json!({"spec": {"replicas": 0}}),
            &[(labels::ORIGINAL_REPLICAS, "2147483647")],
        );
        let (patch, resumed) = resume_patch(
            ConsumerKind::Deployment,
            &record(ConsumerKind::Deployment),
            &stopped,
        );
        assert_eq!(resumed, Resumed::ScaledBack(3));
        assert_eq!(patch["spec"]["replicas"], 3);
        assert_eq!(
            patch["metadata"]["annotations"][labels::ORIGINAL_REPLICAS],
            Value::Null
        );
        // Someone set a count meanwhile: theirs stands.
        let theirs = object(json!({"spec": {"replicas": 5}}), &[]);
        let (_, resumed) = resume_patch(
            ConsumerKind::Deployment,
            &record(ConsumerKind::Deployment),
            &theirs,
        );
        assert_eq!(resumed, Resumed::KeptTheirs(5));
        // A CronJob's mark and record of `suspend` both gone from the object: the
        // restore's record says it ran.
        let mut cron = record(ConsumerKind::CronJob);
        cron.original = Some(r#"{"suspend":false}"#.into());
        let suspended = object(json!({"spec": {"suspend": true}}), &[]);
        let (patch, _) = resume_patch(ConsumerKind::CronJob, &cron, &suspended);
        assert_eq!(patch["spec"]["suspend"], false);
    }

    #[test]
    fn only_a_consumer_that_runs_again_reads_as_resumed() {
        let after = |state, resumed: Resumed| state_after(state, &resumed);
        let stopped = ConsumerState::Stopped;
        assert_eq!(
            after(stopped, Resumed::ScaledBack(2)),
            ConsumerState::Resumed
        );
        assert_eq!(after(stopped, Resumed::Gone), ConsumerState::Gone);
        let other = Resumed::HeldElsewhere("velero/b".into());
        assert_eq!(after(stopped, other), ConsumerState::HeldByOther);
        let stopping = ConsumerState::Stopping;
        assert_eq!(after(stopping, Resumed::Untouched), ConsumerState::Running);
    }

    proptest::proptest! {
        // A workload's annotations and spec are its team's to write: stopping, resuming
        // and checking it never panic on what they hold.
        #[test]
        fn what_a_team_writes_on_its_workload_never_panics(
            data in crate::hostile_input::hostile_json(),
            marks in proptest::collection::btree_map(
                proptest::sample::select(vec![
                    labels::QUIESCED_BY,
                    labels::QUIESCED_BY_RESTORE,
                    labels::ORIGINAL_REPLICAS,
                    labels::ORIGINAL_STATE,
                ]),
                crate::hostile_input::hostile_text(),
                0..4,
            ),
        ) {
            let marks: Vec<(&str, &str)> = marks.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let obj = object(data, &marks);
            for kind in [ConsumerKind::Deployment, ConsumerKind::DaemonSet, ConsumerKind::CronJob, ConsumerKind::Pod] {
                let record = record(kind);
                let _ = Strategy::of(kind).stop_patch("uid", "velero/fix", &obj);
                let _ = resume_patch(kind, &record, &obj);
                let _ = restarted(&record, &obj, "uid");
                let _ = holder(&obj);
            }
        }
    }

    #[test]
    fn scaling_back_applies_only_to_the_workload_as_refill_left_it() {
        let patch: json_patch::Patch =
            serde_json::from_value(scale_back_patch("uid", 3)).expect("a JSON patch");
        let stopped = json!({
            "metadata": {"annotations": {
                labels::QUIESCED_BY: "uid",
                labels::QUIESCED_BY_RESTORE: "velero/fix",
                labels::ORIGINAL_REPLICAS: "3",
                "team": "a",
            }},
            "spec": {"replicas": 0}
        });
        let mut doc = stopped.clone();
        json_patch::patch(&mut doc, &patch).expect("applies as left");
        assert_eq!(doc["spec"]["replicas"], 3);
        assert_eq!(doc["metadata"]["annotations"], json!({"team": "a"}));

        let mut rescaled = stopped.clone();
        rescaled["spec"]["replicas"] = json!(2);
        assert!(json_patch::patch(&mut rescaled, &patch).is_err());
        let mut other = stopped.clone();
        other["metadata"]["annotations"][labels::QUIESCED_BY] = json!("another");
        assert!(json_patch::patch(&mut other, &patch).is_err());
        let mut recount = stopped;
        recount["metadata"]["annotations"][labels::ORIGINAL_REPLICAS] = json!("5");
        assert!(json_patch::patch(&mut recount, &patch).is_err());
    }

    #[test]
    fn resuming_restores_the_recorded_state() {
        let obj = object(
            json!({"spec": {"replicas": 0}}),
            &[(labels::ORIGINAL_REPLICAS, "4")],
        );
        let stopping = ConsumerRecord {
            state: ConsumerState::Stopping,
            ..record(ConsumerKind::Deployment)
        };
        let (patch, resumed) = resume_patch(ConsumerKind::Deployment, &stopping, &obj);
        assert_eq!(
            patch["spec"]["replicas"], 4,
            "before the stop is recorded, the annotation written with it wins over the planned count"
        );
        assert_eq!(resumed, Resumed::ScaledBack(4));
        assert!(patch["metadata"]["annotations"][labels::QUIESCED_BY].is_null());

        let up = object(
            json!({"spec": {"replicas": 2}}),
            &[(labels::ORIGINAL_REPLICAS, "4")],
        );
        let (patch, resumed) = resume_patch(
            ConsumerKind::Deployment,
            &record(ConsumerKind::Deployment),
            &up,
        );
        assert!(
            patch.get("spec").is_none(),
            "a count someone else set is left alone"
        );
        assert_eq!(
            resumed,
            Resumed::KeptTheirs(2),
            "and said so, not 'scaled back'"
        );

        let (ds, _) = resume_patch(
            ConsumerKind::DaemonSet,
            &record(ConsumerKind::DaemonSet),
            &object(json!({}), &[]),
        );
        assert!(ds["spec"]["template"]["spec"]["nodeSelector"][PARKED_KEY].is_null());
        assert!(
            ds["spec"]["template"]["spec"]["nodeSelector"]
                .as_object()
                .unwrap()
                .contains_key(PARKED_KEY)
        );

        let cron = object(
            json!({"spec": {"suspend": true}}),
            &[(labels::ORIGINAL_STATE, "{\"suspend\":false}")],
        );
        assert_eq!(
            resume_patch(ConsumerKind::CronJob, &record(ConsumerKind::CronJob), &cron).0["spec"]["suspend"],
            false
        );
    }

    #[test]
    fn a_pod_under_a_stopped_bare_pod_s_name_is_refill_s_only_with_its_mark() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("solo".into());
        let manifest = serde_json::to_string(&pod).unwrap();
        let recreated = pod_to_recreate(&manifest, "uid").unwrap();
        assert_eq!(
            recreated.metadata.annotations.as_ref().unwrap()[labels::RECREATED_BY],
            "uid"
        );
        // Made by this restore in a pass whose status write was lost.
        assert_eq!(found_under_name(&recreated, "uid"), Resumed::Started);
        // The team's, made while it was stopped; or one another restore made again.
        assert_eq!(found_under_name(&pod, "uid"), Resumed::Replaced);
        let other = pod_to_recreate(&manifest, "another-restore").unwrap();
        assert_eq!(found_under_name(&other, "uid"), Resumed::Replaced);
        assert_eq!(
            state_after(ConsumerState::Stopped, &Resumed::Replaced),
            ConsumerState::Replaced,
            "never read as back"
        );
    }

    #[test]
    fn recreated_pods_lose_server_set_fields() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.uid = Some("u".into());
        pod.metadata.resource_version = Some("7".into());
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("node-a".into()),
            ..Default::default()
        });
        pod.status = Some(Default::default());
        let clean = recreatable_pod(&pod);
        assert_eq!(clean.metadata.name.as_deref(), Some("p"));
        assert!(clean.metadata.uid.is_none() && clean.metadata.resource_version.is_none());
        assert!(clean.spec.unwrap().node_name.is_none() && clean.status.is_none());
    }

    fn entry(manager: &str, secs: i64, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(Time(Timestamp::from_second(secs).unwrap())),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn a_rescale_is_reported_with_who_did_it() {
        let mut obj = object(json!({"spec": {"replicas": 2}}), &[]);
        obj.metadata.managed_fields = Some(vec![
            entry("refill", 300, json!({"f:spec": {"f:replicas": {}}})),
            entry(
                "argocd-controller",
                200,
                json!({"f:spec": {"f:replicas": {}}}),
            ),
            entry("kube-controller-manager", 250, json!({"f:status": {}})),
        ]);
        let msg = restarted(&record(ConsumerKind::Deployment), &obj, "uid").unwrap();
        assert!(
            msg.starts_with("Deployment shop/web was scaled to 2 by argocd-controller (Update at"),
            "{msg}"
        );
        let quiet = object(json!({"spec": {"replicas": 0}}), &[]);
        assert!(restarted(&record(ConsumerKind::Deployment), &quiet, "uid").is_none());
    }
}
