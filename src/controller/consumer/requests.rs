//! The requests that stop a workload, bring it back and switch it onto its new claim
//! (see [`crate::controller::testing::api_mock`]).

use serde_json::{Value, json};

use super::*;
use crate::controller::testing::api_mock::{ApiMock, JSON_PATCH, MERGE_PATCH, get, patch};
use crate::controller::testing::fixtures::{UID, consumer};

const RESTORE: &str = "velero/fix";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";

fn record(kind: ConsumerKind, name: &str, state: ConsumerState) -> ConsumerRecord {
    ConsumerRecord {
        kind,
        name: name.into(),
        state,
        ..consumer()
    }
}

/// A stopped record, as the stop left it.
fn stopped() -> ConsumerRecord {
    ConsumerRecord {
        stopped_at: Some(now()),
        ..record(ConsumerKind::Deployment, "web", ConsumerState::Stopped)
    }
}

/// A workload of `kind` as the API server answers it, at `replicas`, mounting claim
/// `data`, with `annotations`.
fn workload(kind: ConsumerKind, name: &str, replicas: i32, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": format!("{kind:?}"),
        "metadata": {
            "name": name,
            "namespace": "shop",
            "resourceVersion": "7",
            "annotations": annotations,
        },
        "spec": {
            "replicas": replicas,
            "template": {"spec": {
                "containers": [{"name": "app", "image": "app:1"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            }},
        },
    })
}

/// The marks this restore's stop leaves on a workload it scaled down from 3.
fn marks() -> Value {
    json!({
        labels::QUIESCED_BY: UID,
        labels::QUIESCED_BY_RESTORE: RESTORE,
        labels::ORIGINAL_REPLICAS: "3",
    })
}

/// JSON pointer of an annotation (its key holds a '/').
fn annotation(key: &str) -> String {
    format!("/metadata/annotations/{}", key.replace('/', "~1"))
}

#[tokio::test]
async fn a_stop_writes_what_brings_the_workload_back_in_the_write_that_scales_it_to_zero() {
    for (kind, name, plural) in [
        (ConsumerKind::Deployment, "web", "deployments"),
        (ConsumerKind::StatefulSet, "db", "statefulsets"),
    ] {
        let path = format!("/apis/apps/v1/namespaces/shop/{plural}/{name}");
        let (client, mock) = ApiMock::new([
            get(&path).answer(200, workload(kind, name, 3, json!({}))),
            // One write: the record and the lock go with the scale-down, conditional on
            // the version read, so no workload is ever at 0 without them.
            patch(&path, MERGE_PATCH)
                .body(
                    "",
                    json!({
                        "metadata": {"annotations": marks(), "resourceVersion": "7"},
                        "spec": {"replicas": 0},
                    }),
                )
                .answer(200, workload(kind, name, 0, marks())),
        ]);
        let mut record = record(kind, name, ConsumerState::Stopping);
        record.replicas = None;
        let stopped = mock.run(stop(&client, UID, RESTORE, &mut record)).await;
        assert_eq!(stopped.unwrap(), Stopped::Done, "{kind:?}");
        assert_eq!(record.state, ConsumerState::Stopped);
        assert_eq!(record.replicas, Some(3), "the count read is recorded");
        assert!(record.stopped_at.is_some());
    }
}

#[tokio::test]
async fn a_workload_another_restore_marked_is_not_written() {
    let theirs = json!({
        labels::QUIESCED_BY: "uid-other",
        labels::QUIESCED_BY_RESTORE: "velero/other",
        labels::ORIGINAL_REPLICAS: "3",
    });
    let (client, mock) = ApiMock::new([
        get(DEPLOYMENT).answer(200, workload(ConsumerKind::Deployment, "web", 0, theirs))
    ]);
    let mut record = record(ConsumerKind::Deployment, "web", ConsumerState::Stopping);
    let stopped = mock.run(stop(&client, UID, RESTORE, &mut record)).await;
    assert_eq!(stopped.unwrap(), Stopped::HeldBy("velero/other".into()));
    assert_eq!(record.state, ConsumerState::HeldByOther);
}

#[tokio::test]
async fn a_stop_refused_with_a_conflict_is_left_to_the_next_pass() {
    let (client, mock) = ApiMock::new([
        get(DEPLOYMENT).answer(200, workload(ConsumerKind::Deployment, "web", 3, json!({}))),
        // Changed since it was read (rescaled, or marked by another restore).
        patch(DEPLOYMENT, MERGE_PATCH)
            .body("/metadata/resourceVersion", json!("7"))
            .refuse(409, "Conflict"),
    ]);
    let mut record = record(ConsumerKind::Deployment, "web", ConsumerState::Stopping);
    let error = mock
        .run(stop(&client, UID, RESTORE, &mut record))
        .await
        .unwrap_err();
    assert_eq!(
        category_of(&error),
        Category::Conflict,
        "looked at again at once"
    );
    assert_eq!(
        record.state,
        ConsumerState::Stopping,
        "not recorded as stopped"
    );
}

#[tokio::test]
async fn a_resume_scales_back_to_the_recorded_count_and_removes_the_marks_in_one_write() {
    let (client, mock) = ApiMock::new([patch(DEPLOYMENT, JSON_PATCH)
        .body(
            "",
            json!([
                // Refused by the server unless the workload is as this restore left it.
                {"op": "test", "path": annotation(labels::QUIESCED_BY), "value": UID},
                {"op": "test", "path": annotation(labels::ORIGINAL_REPLICAS), "value": "3"},
                {"op": "test", "path": "/spec/replicas", "value": 0},
                {"op": "remove", "path": annotation(labels::QUIESCED_BY)},
                {"op": "remove", "path": annotation(labels::QUIESCED_BY_RESTORE)},
                {"op": "remove", "path": annotation(labels::ORIGINAL_REPLICAS)},
                {"op": "replace", "path": "/spec/replicas", "value": 3},
            ]),
        )
        .answer(200, workload(ConsumerKind::Deployment, "web", 3, json!({})))]);
    let mut record = stopped();
    let resumed = mock.run(resume(&client, UID, &mut record)).await;
    assert_eq!(resumed.unwrap(), Resumed::ScaledBack(3));
    assert_eq!(record.state, ConsumerState::Resumed);
    assert!(record.resumed_at.is_some());
}

#[tokio::test]
async fn a_scale_back_refused_with_a_conflict_reads_the_workload_and_keeps_a_count_set_since() {
    let (client, mock) = ApiMock::new([
        // Its test ops failed: someone scaled it to 5 meanwhile.
        patch(DEPLOYMENT, JSON_PATCH).refuse(409, "Conflict"),
        get(DEPLOYMENT).answer(200, workload(ConsumerKind::Deployment, "web", 5, marks())),
        // Only refill's marks go; their count stands.
        patch(DEPLOYMENT, MERGE_PATCH)
            .body(
                "",
                json!({"metadata": {"annotations": {
                    labels::QUIESCED_BY: null,
                    labels::QUIESCED_BY_RESTORE: null,
                    labels::ORIGINAL_REPLICAS: null,
                    labels::ORIGINAL_STATE: null,
                }}}),
            )
            .answer(200, workload(ConsumerKind::Deployment, "web", 5, json!({}))),
    ]);
    let mut record = stopped();
    let resumed = mock.run(resume(&client, UID, &mut record)).await;
    assert_eq!(resumed.unwrap(), Resumed::KeptTheirs(5));
    assert_eq!(record.state, ConsumerState::Resumed);
}

#[tokio::test]
async fn a_workload_deleted_while_stopped_is_recorded_gone_not_back() {
    let (client, mock) = ApiMock::new([
        patch(DEPLOYMENT, JSON_PATCH).refuse(404, "NotFound"),
        // The read that follows tells gone from changed.
        get(DEPLOYMENT).refuse(404, "NotFound"),
    ]);
    let mut record = stopped();
    let resumed = mock.run(resume(&client, UID, &mut record)).await;
    assert_eq!(resumed.unwrap(), Resumed::Gone);
    assert_eq!(record.state, ConsumerState::Gone);
    assert!(record.resumed_at.is_none(), "never said to be back");
}

#[tokio::test]
async fn a_switch_puts_the_new_claim_in_the_template_and_scales_back_in_one_conditional_write() {
    let claim = "/spec/template/spec/volumes/0/persistentVolumeClaim/claimName";
    let (client, mock) = ApiMock::new([
        get(DEPLOYMENT).answer(200, workload(ConsumerKind::Deployment, "web", 0, marks())),
        patch(DEPLOYMENT, JSON_PATCH)
            .body(
                "",
                json!([
                    {"op": "test", "path": annotation(labels::QUIESCED_BY), "value": UID},
                    {"op": "test", "path": claim, "value": "data"},
                    {"op": "replace", "path": claim, "value": "data-fix"},
                    {"op": "remove", "path": annotation(labels::QUIESCED_BY)},
                    {"op": "remove", "path": annotation(labels::QUIESCED_BY_RESTORE)},
                    {"op": "remove", "path": annotation(labels::ORIGINAL_REPLICAS)},
                    // What switches it back, should anyone need to.
                    {"op": "add", "path": annotation(labels::SWITCHED_FROM), "value": "data"},
                    {"op": "add", "path": annotation(labels::SWITCHED_BY), "value": RESTORE},
                    {"op": "test", "path": "/spec/replicas", "value": 0},
                    {"op": "replace", "path": "/spec/replicas", "value": 3},
                ]),
            )
            .answer(200, workload(ConsumerKind::Deployment, "web", 3, json!({}))),
    ]);
    let mut record = ConsumerRecord {
        switch_to: Some("data-fix".into()),
        ..stopped()
    };
    let switched = mock.run(switch(&client, UID, RESTORE, &mut record)).await;
    assert_eq!(
        switched.unwrap(),
        Some(Resumed::Switched {
            from: "data".into(),
            to: "data-fix".into(),
            scaled_to: Some(3),
        })
    );
    assert_eq!(record.state, ConsumerState::Switched);
}
