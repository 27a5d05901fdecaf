//! Stopping and bringing back consumers. The patches are pure; the API calls are thin.
//!
//! Every stop writes its own record on the object in the same patch (the UID of the
//! DataRestore and what to restore), so no consumer is ever stopped without something
//! durable that brings it back, even if refill dies right after.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::api::{ConsumerKind, ConsumerRecord, ConsumerState};
use crate::labels;
use crate::observe::replicas;

/// A node-selector key no node carries: a DaemonSet asked to run only there runs nowhere.
pub const PARKED_KEY: &str = "refill.dev/parked-by";

fn api(client: &Client, record: &ConsumerRecord) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        &record.namespace,
        &record.kind.api_resource(),
    )
}

fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

pub fn scale_down_patch(uid: &str, original: i32) -> Value {
    json!({
        "metadata": {"annotations": {
            labels::QUIESCED_BY: uid,
            labels::ORIGINAL_REPLICAS: original.to_string(),
        }},
        "spec": {"replicas": 0}
    })
}

pub fn park_patch(uid: &str) -> Value {
    json!({
        "metadata": {"annotations": {labels::QUIESCED_BY: uid}},
        "spec": {"template": {"spec": {"nodeSelector": {PARKED_KEY: uid}}}}
    })
}

pub fn suspend_patch(uid: &str, was_suspended: bool) -> Value {
    json!({
        "metadata": {"annotations": {
            labels::QUIESCED_BY: uid,
            labels::ORIGINAL_STATE: json!({"suspend": was_suspended}).to_string(),
        }},
        "spec": {"suspend": true}
    })
}

/// The undo of [`scale_down_patch`] as one conditional request. Its tests make the server
/// refuse it unless the workload is exactly as this restore left it (stopped by it, at
/// 0, `original` recorded), so no read is needed before it; when refused, the workload
/// is read and [`resume_patch`] decides.
pub fn scale_back_patch(uid: &str, original: i32) -> Value {
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
        {"op": "remove", "path": annotation(labels::ORIGINAL_REPLICAS)},
        {"op": "replace", "path": "/spec/replicas", "value": original},
    ])
}

/// Undoes any of the stops above; a merge patch with null removes only refill's keys, so
/// the consumer's own node selector and annotations stay as they were.
pub fn resume_patch(kind: ConsumerKind, record: &ConsumerRecord, obj: &DynamicObject) -> Value {
    let clear = json!({"metadata": {"annotations": {
        labels::QUIESCED_BY: null,
        labels::ORIGINAL_REPLICAS: null,
        labels::ORIGINAL_STATE: null,
    }}});
    let spec = match kind {
        k if k.is_scalable() => {
            let original = annotation(obj, labels::ORIGINAL_REPLICAS)
                .and_then(|v| v.parse::<i32>().ok())
                .or(record.replicas)
                .unwrap_or(1);
            // Someone scaled it up already: their count stands.
            if replicas(obj) > 0 {
                return clear;
            }
            json!({"replicas": original})
        }
        ConsumerKind::DaemonSet => {
            json!({"template": {"spec": {"nodeSelector": {PARKED_KEY: null}}}})
        }
        ConsumerKind::CronJob => {
            let was = annotation(obj, labels::ORIGINAL_STATE)
                .and_then(|v| serde_json::from_str::<Value>(v).ok())
                .and_then(|v| v["suspend"].as_bool())
                .unwrap_or(false);
            json!({"suspend": was})
        }
        _ => return clear,
    };
    let mut patch = clear;
    patch["spec"] = spec;
    patch
}

/// A bare pod as it can be created again: without what the server set.
pub fn recreatable_pod(pod: &Pod) -> Pod {
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

fn params() -> PatchParams {
    PatchParams::default()
}

fn stopped_by_us(obj: &DynamicObject, uid: &str) -> bool {
    annotation(obj, labels::QUIESCED_BY) == Some(uid)
}

/// Stops one consumer; safe to repeat. Returns the record updated to Stopped.
/// For a bare pod, `record.original` must already be persisted in the status.
pub async fn stop(client: &Client, uid: &str, record: &mut ConsumerRecord) -> kube::Result<()> {
    let api = api(client, record);
    let name = record.name.clone();
    match record.kind {
        ConsumerKind::Pod => match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        },
        ConsumerKind::Job => {}
        kind => {
            let Some(obj) = api.get_opt(&name).await? else {
                record.state = ConsumerState::Stopped;
                return Ok(());
            };
            if !stopped_by_us(&obj, uid) {
                let patch = match kind {
                    k if k.is_scalable() => {
                        let original = replicas(&obj);
                        record.replicas = Some(original);
                        scale_down_patch(uid, original)
                    }
                    ConsumerKind::DaemonSet => park_patch(uid),
                    _ => {
                        let was = obj.data["spec"]["suspend"].as_bool().unwrap_or(false);
                        record.original = Some(json!({"suspend": was}).to_string());
                        suspend_patch(uid, was)
                    }
                };
                // What was read is what gets recorded: a change in between (a rescale)
                // makes the server refuse the patch, and the next pass reads again.
                let mut patch = patch;
                patch["metadata"]["resourceVersion"] = json!(obj.metadata.resource_version);
                api.patch(&name, &params(), &Patch::Merge(patch)).await?;
            } else if kind.is_scalable() {
                record.replicas = annotation(&obj, labels::ORIGINAL_REPLICAS)
                    .and_then(|v| v.parse().ok())
                    .or(record.replicas);
            }
        }
    }
    record.state = ConsumerState::Stopped;
    Ok(())
}

/// Tries [`scale_back_patch`]: true when it applied or the workload is gone, false when
/// the workload is not as refill left it and must be read to decide.
async fn scale_back(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    original: i32,
) -> kube::Result<bool> {
    let patch: json_patch::Patch =
        serde_json::from_value(scale_back_patch(uid, original)).map_err(kube::Error::SerdeError)?;
    match api.patch(name, &params(), &Patch::Json::<()>(patch)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
        // A failed test op: someone changed it since, or it was never stopped by us.
        Err(kube::Error::Api(e)) if matches!(e.code, 409 | 422) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Brings one consumer back; safe to repeat.
pub async fn resume(client: &Client, uid: &str, record: &mut ConsumerRecord) -> kube::Result<()> {
    let api = api(client, record);
    match record.kind {
        ConsumerKind::Pod => {
            if let Some(manifest) = &record.original {
                let pod: Pod = serde_json::from_str(manifest).map_err(kube::Error::SerdeError)?;
                let pods: Api<Pod> = Api::namespaced(client.clone(), &record.namespace);
                match pods.create(&PostParams::default(), &pod).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        ConsumerKind::Job => {}
        kind => {
            if kind.is_scalable()
                && let Some(original) = record.replicas
                && scale_back(&api, &record.name, uid, original).await?
            {
                record.state = ConsumerState::Resumed;
                return Ok(());
            }
            if let Some(obj) = api.get_opt(&record.name).await?
                && stopped_by_us(&obj, uid)
            {
                let patch = resume_patch(kind, record, &obj);
                api.patch(&record.name, &params(), &Patch::Merge(patch))
                    .await?;
            }
        }
    }
    record.state = ConsumerState::Resumed;
    Ok(())
}

/// When a stopped consumer was started again by someone else, says so, naming who when
/// the object's managed fields tell.
pub async fn interference(
    client: &Client,
    uid: &str,
    record: &ConsumerRecord,
) -> kube::Result<Option<String>> {
    if record.state != ConsumerState::Stopped
        || matches!(record.kind, ConsumerKind::Pod | ConsumerKind::Job)
    {
        return Ok(None);
    }
    let Some(obj) = api(client, record).get_opt(&record.name).await? else {
        return Ok(None);
    };
    Ok(restarted(record, &obj, uid))
}

/// Pure part of [`interference`].
pub fn restarted(record: &ConsumerRecord, obj: &DynamicObject, uid: &str) -> Option<String> {
    let what = format!("{:?} {}/{}", record.kind, record.namespace, record.name);
    let (changed, path): (bool, &[&str]) = match record.kind {
        k if k.is_scalable() => (replicas(obj) > 0, &["f:spec", "f:replicas"]),
        ConsumerKind::DaemonSet => (
            obj.data["spec"]["template"]["spec"]["nodeSelector"][PARKED_KEY].as_str() != Some(uid),
            &["f:spec", "f:template", "f:spec", "f:nodeSelector"],
        ),
        ConsumerKind::CronJob => (
            obj.data["spec"]["suspend"].as_bool() != Some(true),
            &["f:spec", "f:suspend"],
        ),
        _ => (false, &[]),
    };
    if !changed {
        return None;
    }
    let how = match record.kind {
        k if k.is_scalable() => format!("was scaled to {}", replicas(obj)),
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
pub fn who_changed(entries: &[ManagedFieldsEntry], path: &[&str]) -> Option<String> {
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
    fn scaling_down_records_the_count_in_the_same_patch() {
        let patch = scale_down_patch("uid", 3);
        assert_eq!(patch["spec"]["replicas"], 0);
        assert_eq!(
            patch["metadata"]["annotations"][labels::ORIGINAL_REPLICAS],
            "3"
        );
        assert_eq!(patch["metadata"]["annotations"][labels::QUIESCED_BY], "uid");
    }

    #[test]
    fn scaling_back_applies_only_to_the_workload_as_refill_left_it() {
        let patch: json_patch::Patch =
            serde_json::from_value(scale_back_patch("uid", 3)).expect("a JSON patch");
        let stopped = json!({
            "metadata": {"annotations": {
                labels::QUIESCED_BY: "uid",
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
        let patch = resume_patch(
            ConsumerKind::Deployment,
            &record(ConsumerKind::Deployment),
            &obj,
        );
        assert_eq!(
            patch["spec"]["replicas"], 4,
            "the annotation wins over the status copy"
        );
        assert!(patch["metadata"]["annotations"][labels::QUIESCED_BY].is_null());

        let up = object(
            json!({"spec": {"replicas": 2}}),
            &[(labels::ORIGINAL_REPLICAS, "4")],
        );
        let patch = resume_patch(
            ConsumerKind::Deployment,
            &record(ConsumerKind::Deployment),
            &up,
        );
        assert!(
            patch.get("spec").is_none(),
            "a count someone else set is left alone"
        );

        let ds = resume_patch(
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
            resume_patch(ConsumerKind::CronJob, &record(ConsumerKind::CronJob), &cron)["spec"]["suspend"],
            false
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
