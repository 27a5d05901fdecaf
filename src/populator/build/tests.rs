use super::*;
use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn user_claim() -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("db".into()),
            namespace: Some("shop".into()),
            uid: Some("u-1".into()),
            labels: Some(BTreeMap::from([("app".into(), "db".into())])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some("csi-hostpath".into()),
            volume_mode: Some("Filesystem".into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity("1Gi".into()),
                )])),
                ..Default::default()
            }),
            data_source_ref: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn stored(mut prime: PersistentVolumeClaim) -> PersistentVolumeClaim {
    prime.metadata.uid = Some("prime-uid".into());
    prime
}

#[test]
fn the_prime_claim_is_the_claims_twin_in_veleros_namespace_on_its_node() {
    let prime = prime_claim(&user_claim(), "velero", Some("real-a"));
    assert_eq!(prime.namespace().as_deref(), Some("velero"));
    assert_eq!(prime.name_any(), labels::prime_name("u-1"));
    let spec = prime.spec.as_ref().unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some("csi-hostpath"));
    assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert!(spec.data_source_ref.is_none(), "no populator of its own");
    assert_eq!(
        spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"],
        Quantity("1Gi".into())
    );
    assert_eq!(prime.annotations()[labels::SELECTED_NODE], "real-a");
    assert_eq!(prime.annotations()[labels::POPULATES], "shop/db");
    assert_eq!(prime.labels()[labels::POPULATES_UID], "u-1");
    assert!(prime.labels().get("app").is_none());
    let immediate = prime_claim(&user_claim(), "velero", None);
    assert!(!immediate.annotations().contains_key(labels::SELECTED_NODE));
}

#[test]
fn the_pod_holds_the_prime_on_the_node_with_restore_wait_first() {
    let claim = user_claim();
    let prime = stored(prime_claim(&claim, "velero", Some("real-a")));
    let wait = Container {
        name: "restore-wait".into(),
        ..Default::default()
    };
    let pod = pod(&claim, &prime, "data", Some("real-a"), "pause", wait);
    assert_eq!(pod.namespace().as_deref(), Some("velero"));
    assert_eq!(pod.labels()[labels::ROLE], labels::ROLE_PRIME);
    assert!(!pod.labels().contains_key(labels::DATA_RESTORE_UID));
    let spec = pod.spec.unwrap();
    assert_eq!(spec.init_containers.unwrap()[0].name, "restore-wait");
    let volume = &spec.volumes.unwrap()[0];
    assert_eq!(volume.name, "data");
    assert_eq!(
        volume.persistent_volume_claim.as_ref().unwrap().claim_name,
        prime.name_any()
    );
    assert!(spec.affinity.is_some() && spec.node_name.is_none());
    assert_eq!(
        spec.tolerations.unwrap()[0].operator.as_deref(),
        Some("Exists")
    );
}

#[test]
fn the_restore_is_owned_by_the_prime_claim_alone() {
    let claim = user_claim();
    let prime = stored(prime_claim(&claim, "velero", None));
    let mut p = Pod::default();
    p.metadata.name = Some(prime.name_any());
    p.metadata.namespace = Some("velero".into());
    p.metadata.uid = Some("pod-uid".into());
    let mut pvb = PodVolumeBackup::new("pvb", Default::default());
    pvb.spec.volume = "data".into();
    pvb.spec.pod.namespace = Some("shop".into());
    let pvr = restore(&claim, &prime, &pvb, &p);
    let owners = pvr.metadata.owner_references.clone().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].uid, "prime-uid");
    assert_eq!(owners[0].kind, "PersistentVolumeClaim");
    assert_eq!(pvr.labels()[labels::RESTORE_UID], "prime-uid");
    assert_eq!(pvr.labels()[labels::POD_UID], "pod-uid");
    assert_eq!(pvr.spec.volume, "data");
    // Velero's node agent names a pod of its own after the PodVolumeRestore.
    assert_ne!(pvr.name_any(), p.name_any());
    assert_eq!(pvr.spec.source_namespace, "shop");
}
