//! Bringing a stopped workload back on a new claim (`switchWorkloads`): the scale-back
//! and the new claim in its pod template as one conditional write. Pure.
//!
//! Until that write the template names the PVC as it always did, so a restore that
//! fails or is canceled before it brings the workload back unchanged; after it, the
//! workload carries the claim it was switched from, the record that switches it back.

use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::api::ConsumerRecord;
use crate::labels;
use crate::observe::replicas::replicas;
use crate::plan::template_claim_names;

use super::strategy::annotation;

/// JSON pointer of an annotation (its key holds a '/').
fn annotation_path(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

/// The switch to write, and what it does.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Switch {
    /// A JSON patch whose tests make the server refuse it unless the workload is as it
    /// was read: held by this restore, its template naming the PVC where it did.
    pub patch: Value,
    /// The replica count it comes back with, or None when someone set one meanwhile
    /// (theirs stands).
    pub scaled_to: Option<i32>,
}

/// The switch of `record`'s workload, as read (`obj`), from the claim `from` onto
/// `record.switch_to`; None when its template no longer names `from` (someone changed
/// it while it was stopped), so that it is brought back without a switch.
/// `uid`/`restore` are the DataRestore's.
pub(super) fn switch_patch(
    record: &ConsumerRecord,
    obj: &DynamicObject,
    from: &str,
    uid: &str,
    restore: &str,
) -> Option<Switch> {
    let to = record.switch_to.as_deref()?;
    let slots: Vec<usize> = template_claim_names(record.kind, &obj.data)
        .iter()
        .enumerate()
        .filter(|(_, claim)| **claim == Some(from))
        .map(|(i, _)| i)
        .collect();
    if slots.is_empty() || !record.kind.is_scalable() {
        return None;
    }
    let mut ops =
        vec![json!({"op": "test", "path": annotation_path(labels::QUIESCED_BY), "value": uid})];
    for i in slots {
        let path = format!("/spec/template/spec/volumes/{i}/persistentVolumeClaim/claimName");
        ops.push(json!({"op": "test", "path": path, "value": from}));
        ops.push(json!({"op": "replace", "path": path, "value": to}));
    }
    // The marks of the stop go; only those there are can be removed.
    for key in [
        labels::QUIESCED_BY,
        labels::QUIESCED_BY_RESTORE,
        labels::ORIGINAL_REPLICAS,
    ] {
        if annotation(obj, key).is_some() {
            ops.push(json!({"op": "remove", "path": annotation_path(key)}));
        }
    }
    ops.push(json!({"op": "add", "path": annotation_path(labels::SWITCHED_FROM), "value": from}));
    ops.push(json!({"op": "add", "path": annotation_path(labels::SWITCHED_BY), "value": restore}));
    let now = replicas(obj);
    let scaled_to = (now == 0).then(|| {
        annotation(obj, labels::ORIGINAL_REPLICAS)
            .and_then(|v| v.parse::<i32>().ok())
            .or(record.replicas)
            .unwrap_or(1)
    });
    if let Some(count) = scaled_to {
        ops.push(json!({"op": "test", "path": "/spec/replicas", "value": 0}));
        ops.push(json!({"op": "replace", "path": "/spec/replicas", "value": count}));
    }
    Some(Switch {
        patch: Value::Array(ops),
        scaled_to,
    })
}

/// Whether `obj` is already switched onto `record.switch_to` by `restore` (a switch
/// that was written, but not recorded before a restart).
pub(super) fn switched_already(
    record: &ConsumerRecord,
    obj: &DynamicObject,
    restore: &str,
) -> bool {
    let Some(to) = record.switch_to.as_deref() else {
        return false;
    };
    annotation(obj, labels::SWITCHED_BY) == Some(restore)
        && template_claim_names(record.kind, &obj.data).contains(&Some(to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, ConsumerState};

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            kind: ConsumerKind::Deployment,
            namespace: "shop".into(),
            name: "web".into(),
            pvcs: vec!["shop/data".into()],
            state: ConsumerState::Stopped,
            replicas: Some(3),
            original: None,
            held_by: None,
            switch_to: Some("data-r1-0123456789".into()),
            stopped_at: None,
            resumed_at: None,
            uid: None,
        }
    }

    fn stopped(replicas: i64, claims: &[&str]) -> DynamicObject {
        let volumes: Vec<Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .chain([json!({"name": "tmp", "emptyDir": {}})])
            .collect();
        let mut obj = DynamicObject::new("web", &ConsumerKind::Deployment.api_resource()).data(
            json!({"spec": {"replicas": replicas, "template": {"spec": {"volumes": volumes}}}}),
        );
        obj.metadata.annotations = Some(
            [
                (labels::QUIESCED_BY, "uid-1"),
                (labels::QUIESCED_BY_RESTORE, "velero/r1"),
                (labels::ORIGINAL_REPLICAS, "3"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        obj
    }

    /// Applies a JSON patch the way the API server does, tests included.
    fn applied(obj: &DynamicObject, patch: &Value) -> Result<Value, String> {
        let mut doc = serde_json::to_value(obj).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        json_patch::patch(&mut doc, &patch).map_err(|e| e.to_string())?;
        Ok(doc)
    }

    #[test]
    fn the_switch_names_the_new_claim_scales_back_and_keeps_the_way_back() {
        let obj = stopped(0, &["logs", "data"]);
        let switch = switch_patch(&record(), &obj, "data", "uid-1", "velero/r1").unwrap();
        assert_eq!(switch.scaled_to, Some(3));
        let after = applied(&obj, &switch.patch).unwrap();
        let volumes = &after["spec"]["template"]["spec"]["volumes"];
        assert_eq!(volumes[0]["persistentVolumeClaim"]["claimName"], "logs");
        assert_eq!(
            volumes[1]["persistentVolumeClaim"]["claimName"],
            "data-r1-0123456789"
        );
        assert_eq!(after["spec"]["replicas"], 3);
        let annotations = &after["metadata"]["annotations"];
        assert_eq!(annotations[labels::SWITCHED_FROM], "data");
        assert_eq!(annotations[labels::SWITCHED_BY], "velero/r1");
        assert!(annotations[labels::QUIESCED_BY].is_null());
        assert!(annotations[labels::ORIGINAL_REPLICAS].is_null());
        let after: DynamicObject = serde_json::from_value(after).unwrap();
        assert!(switched_already(&record(), &after, "velero/r1"));
        assert!(!switched_already(&record(), &obj, "velero/r1"));
    }

    #[test]
    fn the_server_refuses_the_switch_of_a_workload_changed_since_it_was_read() {
        let obj = stopped(0, &["data"]);
        let switch = switch_patch(&record(), &obj, "data", "uid-1", "velero/r1").unwrap();
        // Another restore took it over, or its template moved to another claim.
        let mut taken = obj;
        taken
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(labels::QUIESCED_BY.into(), "uid-2".into());
        assert!(applied(&taken, &switch.patch).is_err());
        let moved = stopped(0, &["elsewhere"]);
        assert!(applied(&moved, &switch.patch).is_err());
        let rescaled = stopped(2, &["data"]);
        assert!(applied(&rescaled, &switch.patch).is_err());
    }

    #[test]
    fn a_count_set_meanwhile_stands_and_a_template_changed_meanwhile_is_not_switched() {
        let scaled = stopped(2, &["data"]);
        let switch = switch_patch(&record(), &scaled, "data", "uid-1", "velero/r1").unwrap();
        assert_eq!(switch.scaled_to, None);
        assert_eq!(
            applied(&scaled, &switch.patch).unwrap()["spec"]["replicas"],
            2
        );
        assert!(
            switch_patch(
                &record(),
                &stopped(0, &["other"]),
                "data",
                "uid-1",
                "velero/r1"
            )
            .is_none()
        );
        let not_asked = ConsumerRecord {
            switch_to: None,
            ..record()
        };
        assert!(
            switch_patch(
                &not_asked,
                &stopped(0, &["data"]),
                "data",
                "uid-1",
                "velero/r1"
            )
            .is_none()
        );
    }
}
