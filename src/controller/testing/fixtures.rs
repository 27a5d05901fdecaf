//! The objects the request tests start from: a stored DataRestore and a controller
//! context over a mocked client.

use kube::{Client, Resource};
use serde_json::{Value, json};

use crate::api::{ConsumerRecord, DataRestore, DataRestoreSpec};
use crate::controller::{Config, Context, stores};

/// The namespace of Velero and of the DataRestore.
pub(crate) const VELERO: &str = "velero";
/// The DataRestore's name.
pub(crate) const RESTORE: &str = "fix";
/// The DataRestore's UID.
pub(crate) const UID: &str = "uid-1";

/// The DataRestore as the API server stored it: named, with a UID and a
/// resourceVersion, restoring `shop/data` from backup `nightly`.
pub(crate) fn data_restore() -> DataRestore {
    let mut dr = DataRestore::new(
        RESTORE,
        DataRestoreSpec {
            backup_name: Some("nightly".into()),
            pvcs: vec!["shop/data".into()],
            ..Default::default()
        },
    );
    dr.metadata.namespace = Some(VELERO.into());
    dr.metadata.uid = Some(UID.into());
    dr.metadata.resource_version = Some("10".into());
    dr.metadata.generation = Some(1);
    dr
}

/// `object` as the API server answers it: with its apiVersion and kind.
pub(crate) fn as_json<K: Resource<DynamicType = ()> + serde::Serialize>(object: &K) -> Value {
    let mut value = serde_json::to_value(object).expect("a stored object serializes");
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    value
}

/// Deployment `shop/web` at 3 replicas, mounting `shop/data`, found running.
pub(crate) fn consumer() -> ConsumerRecord {
    serde_json::from_value(json!({
        "kind": "Deployment",
        "namespace": "shop",
        "name": "web",
        "pvcs": ["shop/data"],
        "state": "Running",
        "replicas": 3,
    }))
    .expect("a consumer's record")
}

/// The controller's context with `client`, its watch-fed stores empty.
pub(crate) fn context(client: Client) -> Context {
    Context::new(
        client,
        Config {
            namespace: VELERO.into(),
            ..Config::default()
        },
        stores::stores().0,
    )
}
