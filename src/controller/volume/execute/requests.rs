//! The requests that make a volume's stand-in and its PodVolumeRestore (see
//! [`crate::controller::testing::api_mock`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::controller::testing::api_mock::{ApiMock, Expect, get, post};
use crate::controller::testing::fixtures::{UID, VELERO, context, data_restore};

const PODS: &str = "/api/v1/namespaces/shop/pods";
const BACKUP: &str = "/apis/velero.io/v1/namespaces/velero/podvolumebackups/nightly-data";
const PVRS: &str = "/apis/velero.io/v1/namespaces/velero/podvolumerestores";

/// Volume `data` of the consumers of `shop/data`, about to get its stand-in: a
/// direct restore that keeps extra files, whose stand-in only holds the volume.
fn volume() -> VolumeStatus {
    VolumeStatus {
        keep_extra_files: true,
        pvc: "shop/data".into(),
        phase: VolumePhase::StartingStandIn,
        pvc_uid: Some("pvc-uid-1".into()),
        pod_volume_backup: Some("nightly-data".into()),
        volume: "data".into(),
        snapshot_id: Some("snap-1".into()),
        ..Default::default()
    }
}

/// The stand-in as the API server answers its creation: with its UID.
fn stand_in(sent: &Value) -> Value {
    let mut pod = sent.clone();
    pod["metadata"]["uid"] = json!("pod-uid-1");
    pod
}

/// The PodVolumeBackup of volume `data` of a pod in `shop`.
fn pod_volume_backup() -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "PodVolumeBackup",
        "metadata": {"name": "nightly-data", "namespace": VELERO},
        "spec": {
            "node": "n1",
            "pod": {"kind": "Pod", "namespace": "shop", "name": "web-0"},
            "volume": "data",
            "backupStorageLocation": "default",
            "repoIdentifier": "s3:bucket/shop",
            "uploaderType": "kopia",
        },
        "status": {"phase": "Completed", "snapshotID": "snap-1", "progress": {"totalBytes": 4096, "bytesDone": 4096}},
    })
}

/// The PodVolumeRestore as Velero's node agent expects it, for the stand-in `pod_uid`.
fn expected_pod_volume_restore(pod_uid: &str) -> Expect {
    let name = labels::pod_volume_restore_name("fix", UID, "shop/data");
    post(PVRS)
        .body("/metadata/name", json!(name))
        .body("/metadata/namespace", json!(VELERO))
        .body(
            "/metadata/labels",
            json!({
                labels::RESTORE_NAME: "fix",
                labels::RESTORE_UID: UID,
                labels::POD_UID: pod_uid,
                labels::DATA_RESTORE_UID: UID,
                labels::PVC_UID: "pvc-uid-1",
            }),
        )
        // The node agent names its done file after the first owner's UID, and
        // restore-wait waits for exactly that one.
        .body("/metadata/ownerReferences/0/uid", json!(UID))
        .body("/metadata/ownerReferences/0/kind", json!("DataRestore"))
        .body("/metadata/ownerReferences/0/controller", json!(true))
        .body(
            "/spec/pod",
            json!({
                "kind": "Pod",
                "apiVersion": "v1",
                "namespace": "shop",
                "name": labels::stand_in_pod_name("shop/data"),
                "uid": pod_uid,
            }),
        )
        .body("/spec/volume", json!("data"))
        .body("/spec/snapshotID", json!("snap-1"))
        .body("/spec/backupStorageLocation", json!("default"))
        .body("/spec/repoIdentifier", json!("s3:bucket/shop"))
        .body("/spec/uploaderType", json!("kopia"))
        .body("/spec/sourceNamespace", json!("shop"))
        .body("/spec/snapshotSize", json!(4096))
        .body_lacks("/spec/cancel")
        .answer_with(201, Value::clone)
}

/// Performs `effect` on a fresh [`volume`] as a pass of [`data_restore`] would, with
/// `client` answered by `mock`: what it answered, and the volume after.
async fn perform_against(
    mock: ApiMock,
    client: kube::Client,
    found: &MadeSeen,
    effect: Effect,
) -> (Result<Option<Change>>, VolumeStatus) {
    perform_on(volume(), mock, client, found, effect).await
}

/// [`perform_against`] on `volume`.
async fn perform_on(
    mut volume: VolumeStatus,
    mock: ApiMock,
    client: kube::Client,
    found: &MadeSeen,
    effect: Effect,
) -> (Result<Option<Change>>, VolumeStatus) {
    let (dr, ctx) = (data_restore(), context(client));
    let consumers_of = ByClaim::consumers(&[]);
    let pass = PassView::default();
    let helper = HelperSource::default();
    let act = Act {
        dr: &dr,
        ctx: &ctx,
        uid: UID,
        consumers_of: &consumers_of,
        pass: &pass,
        helper: Some(&helper),
    };
    let change = mock.run(perform(&act, found, &mut volume, effect)).await;
    (change, volume)
}

#[tokio::test]
async fn a_stand_in_is_made_with_velero_s_restore_wait_and_its_pod_volume_restore_follows() {
    let name = labels::stand_in_pod_name("shop/data");
    let (client, mock) = ApiMock::new([
        post(PODS)
            .body("/metadata/name", json!(name))
            .body("/metadata/namespace", json!("shop"))
            .body(
                "/metadata/labels",
                json!({labels::ROLE: labels::ROLE_STAND_IN, labels::DATA_RESTORE_UID: UID}),
            )
            .body(
                "/metadata/annotations",
                json!({labels::DATA_RESTORE_ANNOTATION: "velero/fix"}),
            )
            // Velero's node agent writes only into a pod whose init container
            // restore-wait runs, waiting for this restore's UID.
            .body("/spec/initContainers/0/name", json!("restore-wait"))
            .body("/spec/initContainers/0/args", json!([UID]))
            .body(
                "/spec/initContainers/0/volumeMounts/0",
                json!({"name": "data", "mountPath": "/restores/data"}),
            )
            .body_lacks("/spec/initContainers/1")
            .body(
                "/spec/volumes",
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
            )
            .body("/spec/restartPolicy", json!("Never"))
            .body_lacks("/spec/nodeName")
            .answer_with(201, stand_in),
        get(BACKUP).answer(200, pod_volume_backup()),
        expected_pod_volume_restore("pod-uid-1"),
    ]);
    let (change, volume) =
        perform_against(mock, client, &MadeSeen::default(), Effect::CreateStandIn).await;
    assert!(change.unwrap().is_none(), "the decided change stands");
    assert_eq!(volume.stand_in_pod.as_deref(), Some(name.as_str()));
    assert_eq!(
        volume.stand_in_uid.as_deref(),
        Some("pod-uid-1"),
        "recorded from the API's answer"
    );
    assert!(volume.pod_volume_restore.is_some());
}

#[tokio::test]
async fn a_stand_in_that_sets_aside_and_tidies_is_made_alone_with_restore_wait_second() {
    let name = labels::stand_in_pod_name("shop/data");
    let aside = ".refill-aside-uid-1";
    let (client, mock) = ApiMock::new([
        // No PodVolumeBackup read and no PodVolumeRestore yet: that follows once the
        // set-aside is recorded.
        post(PODS)
            .body("/metadata/name", json!(name))
            .body("/spec/initContainers/0/name", json!("set-aside"))
            .body(
                "/spec/initContainers/0/args",
                json!([
                    "copy",
                    "--set-aside",
                    aside,
                    "--to",
                    "/target",
                    "--exclude",
                    ".velero",
                    "--termination-log",
                    "/dev/termination-log",
                    "--once",
                    "/refill-state/set-aside"
                ]),
            )
            .body(
                "/spec/initContainers/0/volumeMounts",
                json!([
                    {"name": "data", "mountPath": "/target"},
                    {"name": "refill-state", "mountPath": "/refill-state"},
                ]),
            )
            .body("/spec/initContainers/0/securityContext/runAsUser", json!(0))
            .body("/spec/initContainers/1/name", json!("restore-wait"))
            .body("/spec/initContainers/1/args", json!([UID]))
            .body_lacks("/spec/initContainers/2")
            .body("/spec/containers/0/name", json!("tidy"))
            .body(
                "/spec/containers/0/args",
                json!([
                    "copy",
                    "--tidy",
                    aside,
                    "--to",
                    "/target",
                    "--termination-log",
                    "/dev/termination-log"
                ]),
            )
            .body_lacks("/spec/containers/1")
            .body(
                "/spec/volumes",
                json!([
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "refill-state", "emptyDir": {"sizeLimit": "1Mi"}},
                ]),
            )
            .body("/spec/restartPolicy", json!("Never"))
            .answer_with(201, stand_in),
    ]);
    let exact = VolumeStatus {
        keep_extra_files: false,
        phase: VolumePhase::Clearing,
        ..volume()
    };
    let (change, volume) = perform_on(
        exact,
        mock,
        client,
        &MadeSeen::default(),
        Effect::CreateStandIn,
    )
    .await;
    assert!(change.unwrap().is_none(), "the decided change stands");
    assert_eq!(volume.stand_in_uid.as_deref(), Some("pod-uid-1"));
    assert!(volume.pod_volume_restore.is_none());
}

#[tokio::test]
async fn a_pod_volume_restore_names_the_stand_in_and_the_snapshot_as_velero_s_node_agent_reads_them()
 {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": labels::stand_in_pod_name("shop/data"), "namespace": "shop", "uid": "pod-uid-2"},
    }))
    .unwrap();
    pod.spec = Some(Default::default());
    let found = MadeSeen {
        stand_in: Some(Arc::new(pod)),
        ..MadeSeen::default()
    };
    let (client, mock) = ApiMock::new([
        get(BACKUP).answer(200, pod_volume_backup()),
        expected_pod_volume_restore("pod-uid-2"),
    ]);
    let (change, volume) =
        perform_against(mock, client, &found, Effect::CreatePodVolumeRestore).await;
    assert!(change.unwrap().is_none());
    assert_eq!(
        volume.pod_volume_restore,
        Some(labels::pod_volume_restore_name("fix", UID, "shop/data"))
    );
}

#[tokio::test]
async fn a_stand_in_name_taken_by_another_restore_ends_the_volume_naming_that_restore() {
    let name = labels::stand_in_pod_name("shop/data");
    let theirs = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": "pod-uid-other",
            "labels": {labels::ROLE: labels::ROLE_STAND_IN, labels::DATA_RESTORE_UID: "uid-other"},
            "annotations": {labels::DATA_RESTORE_ANNOTATION: "velero/other"},
        },
    });
    let (client, mock) = ApiMock::new([
        // The name is the claim's lock: the create is refused while another holds it.
        post(PODS).refuse(409, "AlreadyExists"),
        get(BACKUP).answer(200, pod_volume_backup()),
        get(&format!("{PODS}/{name}")).answer(200, theirs),
    ]);
    let (change, volume) =
        perform_against(mock, client, &MadeSeen::default(), Effect::CreateStandIn).await;
    match change.unwrap() {
        Some(Change::End { outcome, message }) => {
            assert_eq!(outcome, VolumePhase::Failed);
            assert!(message.contains("DataRestore velero/other"), "{message}");
        }
        other => panic!("expected the volume to end, got {other:?}"),
    }
    assert!(volume.stand_in_pod.is_none(), "not taken for its own");
    assert!(volume.pod_volume_restore.is_none());
}
