//! The requests of a reconcile around a restore's work: the finalizer put on before
//! anything else, the records written before the pass that acts on them, and the
//! finalizer taken off at the end (see [`crate::controller::testing::api_mock`]).

use serde_json::{Value, json};

use super::*;
use crate::api::{
    ConsumerCounts, ConsumerState, Phase, VolumeCounts, VolumePhase, VolumeRecord, VolumeStatus,
};
use crate::controller::build::pod_volume_restore as pvr;
use crate::controller::testing::api_mock::{
    APPLY_PATCH, ApiMock, Expect, MERGE_PATCH, get, patch, put,
};
use crate::controller::testing::fixtures::{UID, as_json, consumer, context, data_restore};
use crate::labels::{FIELD_MANAGER, FINALIZER};

const RESTORE: &str = "/apis/refill.dev/v1alpha1/namespaces/velero/datarestores/fix";
const RECORDS: &str = "/apis/refill.dev/v1alpha1/namespaces/velero/volumepluginrestores";

/// The restore as stored, holding refill's finalizer, in `phase`.
fn held(phase: Phase) -> DataRestore {
    let mut dr = data_restore();
    dr.metadata.finalizers = Some(vec![FINALIZER.into()]);
    dr.status = Some(DataRestoreStatus {
        phase,
        ..Default::default()
    });
    dr
}

async fn reconcile_with(dr: DataRestore, client: kube::Client) -> Result<Action> {
    reconcile(Arc::new(dr), Arc::new(context(client))).await
}

#[tokio::test]
async fn the_finalizer_goes_on_before_anything_is_read_or_done() {
    let mut dr = data_restore();
    dr.metadata.finalizers = Some(vec!["theirs".into()]);
    let (client, mock) = ApiMock::new([patch(RESTORE, MERGE_PATCH)
        // Conditional on the copy read, keeping the finalizers that were there.
        .body(
            "",
            json!({"metadata": {"finalizers": ["theirs", FINALIZER], "resourceVersion": "10"}}),
        )
        .answer(200, as_json(&held(Phase::New)))]);
    let action = mock.run(reconcile_with(dr, client)).await;
    assert_eq!(
        action.unwrap(),
        Action::await_change(),
        "its own write wakes it"
    );
}

/// `dr` as stored at `version`.
fn at_version(dr: &DataRestore, version: &str) -> Value {
    let mut stored = as_json(dr);
    stored["metadata"]["resourceVersion"] = json!(version);
    stored
}

/// The write that takes refill's finalizer off, conditional on `version`.
fn finalizer_removed(version: &str) -> Expect {
    patch(RESTORE, MERGE_PATCH)
        .body(
            "",
            json!({"metadata": {"finalizers": [], "resourceVersion": version}}),
        )
        .answer(200, as_json(&data_restore()))
}

/// A list answer holding `items`.
fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "refill.dev/v1alpha1", "kind": "VolumePluginRestoreList", "metadata": {}, "items": items})
}

#[tokio::test]
async fn the_finalizer_goes_last_conditional_on_the_status_just_written() {
    let dr = held(Phase::Completed);
    let (client, mock) = ApiMock::new([
        get(RECORDS)
            .query(
                "labelSelector",
                &format!("{}={UID}", crate::labels::DATA_RESTORE_UID),
            )
            .answer(200, list_of(vec![])),
        patch(&format!("{RESTORE}/status"), APPLY_PATCH)
            .query("fieldManager", FIELD_MANAGER)
            .body("/status/phase", json!("Completed"))
            .body("/metadata/resourceVersion", json!("10"))
            .answer(200, at_version(&dr, "11")),
        finalizer_removed("11"),
    ]);
    let action = mock.run(reconcile_with(dr, client)).await;
    assert_eq!(action.unwrap(), Action::await_change());
}

#[tokio::test]
async fn a_finalizer_removal_refused_with_a_conflict_reads_the_restore_again_and_retries() {
    let dr = held(Phase::Completed);
    let (client, mock) = ApiMock::new([
        patch(RESTORE, MERGE_PATCH)
            .body("/metadata/resourceVersion", json!("10"))
            .refuse(409, "Conflict"),
        get(RESTORE).answer(200, at_version(&dr, "12")),
        finalizer_removed("12"),
    ]);
    let api: Api<DataRestore> = Api::namespaced(client, "velero");
    mock.run(remove_finalizer(&api, &dr)).await.unwrap();
}

#[tokio::test]
async fn a_restore_gone_before_its_finalizer_is_removed_is_done_with() {
    let (client, mock) = ApiMock::new([patch(RESTORE, MERGE_PATCH).refuse(404, "NotFound")]);
    let api: Api<DataRestore> = Api::namespaced(client, "velero");
    mock.run(remove_finalizer(&api, &held(Phase::Completed)))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_consumer_about_to_stop_is_recorded_and_nothing_else_is_touched_in_that_pass() {
    let volume = VolumeStatus {
        pvc: "shop/data".into(),
        phase: VolumePhase::Quiescing,
        volume: "data".into(),
        ..Default::default()
    };
    let mut dr = held(Phase::Restoring);
    let status = dr.status.as_mut().unwrap();
    status.start_time = Some(status::now());
    status.volume_counts = Some(VolumeCounts {
        total: 1,
        ..Default::default()
    });
    status.consumer_counts = Some(ConsumerCounts {
        total: 1,
        states: [(ConsumerState::Running, 1)].into(),
    });
    let name = ledger::record_name(&dr, &volume);
    let mut kept = pvr::volume_plugin_restore(&dr, &name, "nightly", &volume, None);
    kept.metadata.resource_version = Some("5".into());
    kept.status = Some(crate::api::VolumePluginRestoreStatus {
        record: Some(VolumeRecord {
            index: 0,
            volume,
            consumers: vec![consumer()],
            git_ops: vec![],
        }),
        ..Default::default()
    });
    let kept = as_json(&kept);
    let (client, mock) = ApiMock::new([
        get(RECORDS).answer(200, list_of(vec![kept.clone()])),
        // The record that brings it back goes out first, marked Stopping: from then on
        // the finish step looks at the workload whatever happens.
        put(&format!("{RECORDS}/{name}/status"))
            .query("fieldManager", FIELD_MANAGER)
            .body("/metadata/resourceVersion", json!("5"))
            .record_holds("/consumers/0/name", json!("web"))
            .record_holds("/consumers/0/state", json!("Stopping"))
            .record_holds("/consumers/0/replicas", json!(3))
            .answer(200, kept),
        // Then the counts; a conflict here ends the reconcile before any workload is
        // written (the stop is the next pass's).
        patch(&format!("{RESTORE}/status"), APPLY_PATCH)
            .body("/status/consumerCounts/states", json!({"Stopping": 1}))
            .refuse(409, "Conflict"),
    ]);
    let ctx = Arc::new(context(client));
    let dr = Arc::new(dr);
    let error = mock
        .run(reconcile(dr.clone(), ctx.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.category(), Category::Conflict);
    assert_eq!(
        error_policy(dr, &error, ctx),
        Action::requeue(Duration::from_millis(100)),
        "a conflict is looked at again at once"
    );
}

/// A conflict means the copy the pass started from was old. The watch may keep handing
/// that copy over (seen after an API server restart, when another writer had moved the
/// restore on), and a pass that used it again would conflict again, for good: the next
/// pass reads the restore from the API server before anything else.
#[tokio::test]
async fn after_a_conflict_the_next_pass_reads_the_restore_before_anything_else() {
    let dr = held(Phase::Restoring);
    let conflict = Error::Kube(kube::Error::Api(
        kube::core::Status::failure("the object has been modified", "Conflict")
            .with_code(409)
            .boxed(),
    ));
    // Gone by the time it is read: nothing more is sent.
    let (client, mock) = ApiMock::new([get(RESTORE).refuse(404, "NotFound")]);
    let ctx = Arc::new(context(client));
    let action = error_policy(Arc::new(dr.clone()), &conflict, ctx.clone());
    assert_eq!(action, Action::requeue(Duration::from_millis(100)));
    let action = mock.run(reconcile(Arc::new(dr), ctx)).await;
    assert_eq!(action.unwrap(), Action::await_change());
}
