//! The requests that keep a restore's records: a volume's VolumePluginRestore made
//! once, then only its status written, and only when its record changed (see
//! [`crate::controller::testing::api_mock`]).

use serde_json::{Value, json};

use super::*;
use crate::api::{ConsumerState, VolumePhase};
use crate::controller::testing::api_mock::{ApiMock, Expect, post, put};
use crate::controller::testing::fixtures::{UID, VELERO, as_json, consumer, data_restore};

const RECORDS: &str = "/apis/refill.dev/v1alpha1/namespaces/velero/volumepluginrestores";

/// `volume`'s VolumePluginRestore as the API server stores it at `version`, with the
/// status sent, if any.
fn stored(
    volume: &VolumeStatus,
    version: &'static str,
) -> impl Fn(&Value) -> Value + Send + 'static {
    let dr = data_restore();
    let made = pvr::volume_plugin_restore(&dr, &record_name(&dr, volume), "nightly", volume, None);
    let mut object = as_json(&made);
    object["metadata"]["resourceVersion"] = json!(version);
    move |sent| {
        let mut object = object.clone();
        object["status"] = sent["status"].clone();
        object
    }
}

/// A pending volume with one consumer: the volume, and a DataRestore status holding it.
fn pending() -> (VolumeStatus, DataRestoreStatus) {
    let volume = VolumeStatus {
        pvc: "shop/data".into(),
        phase: VolumePhase::Pending,
        volume: "data".into(),
        snapshot_id: Some("snap-1".into()),
        ..Default::default()
    };
    let status = DataRestoreStatus {
        backup_name: Some("nightly".into()),
        volumes: vec![volume.clone()],
        consumers: vec![consumer()],
        ..Default::default()
    };
    (volume, status)
}

#[tokio::test]
async fn a_volume_s_record_is_made_once_then_only_its_changes_are_written() {
    let dr = data_restore();
    let (volume, first) = pending();
    let mut marked = first.clone();
    marked.consumers[0].state = ConsumerState::Stopping;
    let name = record_name(&dr, &volume);
    let status = format!("{RECORDS}/{name}/status");
    let (client, mock) = ApiMock::new([
        post(RECORDS)
            .body("/metadata/name", json!(name))
            .body("/metadata/namespace", json!(VELERO))
            .body(
                "/metadata/labels",
                json!({
                    labels::BACKUP_NAME: "nightly",
                    labels::SNAPSHOT_ID: "snap-1",
                    labels::PROVIDER: crate::api::PROVIDER,
                    labels::DATA_RESTORE_UID: UID,
                }),
            )
            .body("/metadata/ownerReferences/0/uid", json!(UID))
            .body("/spec/backupName", json!("nightly"))
            .answer_with(201, stored(&volume, "1")),
        // Written conditional on the version the create answered.
        put(&status)
            .body("/metadata/name", json!(name))
            .body("/metadata/resourceVersion", json!("1"))
            .body("/status/phase", json!("Pending"))
            .record_holds("/index", json!(0))
            .record_holds("/volume/pvc", json!("shop/data"))
            .record_holds("/consumers/0/state", json!("Running"))
            .answer_with(200, stored(&volume, "2")),
        // The next change: no second create, the version the last write answered.
        put(&status)
            .body("/metadata/resourceVersion", json!("2"))
            .record_holds("/consumers/0/state", json!("Stopping"))
            .answer_with(200, stored(&volume, "3")),
    ]);
    let ledger = Ledger::default();
    let empty = DataRestoreStatus::default();
    let saved = mock
        .run(async {
            ledger.save(&client, &dr, &empty, &first).await?;
            ledger.save(&client, &dr, &first, &marked).await?;
            // Unchanged: nothing is written.
            ledger.save(&client, &dr, &marked, &marked).await
        })
        .await;
    saved.unwrap();
}

#[tokio::test]
async fn a_record_made_by_a_pass_whose_write_failed_is_read_for_its_version_and_written_over() {
    use crate::controller::testing::api_mock::get;
    let dr = data_restore();
    let (volume, first) = pending();
    let name = record_name(&dr, &volume);
    let (client, mock) = ApiMock::new([
        post(RECORDS).refuse(409, "AlreadyExists"),
        get(&format!("{RECORDS}/{name}")).answer_with(200, stored(&volume, "4")),
        // A PUT of a custom resource needs a resourceVersion: the one just read.
        put(&format!("{RECORDS}/{name}/status"))
            .body("/metadata/resourceVersion", json!("4"))
            .record_holds("/consumers/0/state", json!("Running"))
            .answer_with(200, stored(&volume, "5")),
    ]);
    let ledger = Ledger::default();
    let saved = mock
        .run(ledger.save(&client, &dr, &DataRestoreStatus::default(), &first))
        .await;
    saved.unwrap();
}

/// One volume kept with its consumer, and a list of its VolumePluginRestore as the API
/// server answers it (at resourceVersion 7).
fn one_listed(phase: VolumePhase) -> (VolumeStatus, impl Fn() -> Expect) {
    use crate::controller::testing::api_mock::get;
    let volume = VolumeStatus {
        pvc: "shop/data".into(),
        phase,
        volume: "data".into(),
        ..Default::default()
    };
    let record = VolumeRecord {
        index: 0,
        volume: volume.clone(),
        consumers: vec![consumer()],
        git_ops: Vec::new(),
    };
    let listed = stored(&volume, "7")(
        &json!({"status": {"record": serde_json::to_value(&record).unwrap()}}),
    );
    let list = move || {
        get(RECORDS).answer(
            200,
            json!({
                "apiVersion": "refill.dev/v1alpha1",
                "kind": "VolumePluginRestoreList",
                "metadata": {"resourceVersion": "7"},
                "items": [listed.clone()],
            }),
        )
    };
    (volume, list)
}

/// A DataRestore's own status that says it has one volume.
fn one_volume_head() -> DataRestoreStatus {
    DataRestoreStatus {
        volume_counts: Some(crate::api::VolumeCounts {
            total: 1,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn records_lent_to_a_pass_are_read_again_only_if_never_given_back() {
    let dr = data_restore();
    let (volume, list) = one_listed(VolumePhase::Restoring);
    // Read once; given back, the next pass reads nothing; kept by a pass that never
    // gave them back (it panicked), the one after reads the cluster again.
    let (client, mock) = ApiMock::new([list(), list()]);
    let ledger = Ledger::default();
    let head = one_volume_head();
    let loads = mock
        .run(async {
            let mut seen = Vec::new();
            for give_back in [true, false, true] {
                let mut status = head.clone();
                ledger.load(&client, &dr, &mut status).await?;
                seen.push((status.volumes.clone(), status.consumers.len()));
                if give_back {
                    // Nothing was written: what it was lent goes back, not its copy.
                    ledger.give_back(UID, &mut status, &mut DataRestoreStatus::default());
                }
            }
            Ok::<_, Error>(seen)
        })
        .await
        .unwrap();
    assert!(loads.iter().all(|(volumes, consumers)| {
        volumes.as_slice() == std::slice::from_ref(&volume) && *consumers == 1
    }));
}

#[tokio::test]
async fn what_a_pass_wrote_is_what_the_next_pass_is_lent_without_a_read() {
    let dr = data_restore();
    let (volume, list) = one_listed(VolumePhase::Quiescing);
    let name = record_name(&dr, &volume);
    // One list, one write; the second load reads nothing.
    let (client, mock) = ApiMock::new([
        list(),
        put(&format!("{RECORDS}/{name}/status"))
            .body("/metadata/resourceVersion", json!("7"))
            .record_holds("/consumers/0/state", json!("Stopping"))
            .answer_with(200, stored(&volume, "8")),
    ]);
    let ledger = Ledger::default();
    let head = one_volume_head();
    let lent = mock
        .run(async {
            let mut loaded = head.clone();
            ledger.load(&client, &dr, &mut loaded).await?;
            let mut passed = loaded.clone();
            passed.consumers[0].state = ConsumerState::Stopping;
            ledger.save(&client, &dr, &loaded, &passed).await?;
            ledger.give_back(UID, &mut loaded, &mut passed);
            let mut next = head.clone();
            ledger.load(&client, &dr, &mut next).await?;
            Ok::<_, Error>(next)
        })
        .await
        .unwrap();
    assert_eq!(lent.volumes, vec![volume]);
    assert_eq!(lent.consumers[0].state, ConsumerState::Stopping);
}
