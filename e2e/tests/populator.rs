//! refill as a volume populator on the real nodes, with the real Velero and the CSI
//! driver's WaitForFirstConsumer class: a claim whose `dataSourceRef` names a
//! BackupVolume is bound to a volume Velero's node agent filled from the backup, and
//! the Deployment applied with it starts on the backup's files. refill runs as a pod
//! from `manifests/`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Api, Client, ResourceExt};
use refill::api::{BackupVolume, PodVolumeRestore};
use refill::labels;
use refill_e2e::csi::{CSI_CLASS, app_pod_spec};
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::velero_app::{self, on_real_nodes};
use refill_e2e::{REAL_NODE_LABEL, TESTBOX_IMAGE, TestEnv, fixture, run_test, wait_for};
use serde_json::{Value, json};

/// Velero's backups and a fill through the node agent, on a busy two-core machine.
const TIMEOUT: Duration = Duration::from_secs(300);

/// The file the backed-up app wrote, and what it holds.
const FILE: &str = "payload.txt";

/// A claim of the CSI driver's class, filled from the BackupVolume `source` if given.
fn claim(name: &str, source: Option<&str>) -> Value {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": CSI_CLASS,
        "resources": { "requests": { "storage": "16Mi" } },
    });
    if let Some(source) = source {
        spec["dataSourceRef"] =
            json!({ "apiGroup": "refill.dev", "kind": "BackupVolume", "name": source });
    }
    json!({ "metadata": { "name": name }, "spec": spec })
}

/// A Deployment of one pod on a real node mounting `claim` at /data. With `write`,
/// an init container writes `text` to /data/payload.txt first; either way the pod is
/// Ready only while its probe finds those bytes there.
fn deployment(name: &str, claim: &str, text: &str, write: bool) -> Value {
    let path = format!("/data/{FILE}");
    let mounts = json!([{ "name": "data", "mountPath": "/data" }]);
    let init = if write {
        json!([{ "name": "write", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
                 "args": ["write", path, text], "volumeMounts": mounts }])
    } else {
        json!([])
    };
    json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": app_pod_spec(json!({ REAL_NODE_LABEL: "real" }), init, claim, (&path, text)),
            }
        }
    })
}

fn backup_volume(name: &str, from: (&str, &str), claim: &str) -> Value {
    json!({
        "apiVersion": "refill.dev/v1alpha1", "kind": "BackupVolume",
        "metadata": { "name": name },
        "spec": { from.0: from.1, "claim": claim },
    })
}

/// Applies `manifests/populator.yaml`: the VolumePopulator CRD, then refill's
/// VolumePopulator, as a user registers the populator.
async fn register_populator(client: &Client) -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/populator.yaml");
    let text = std::fs::read_to_string(&path)?;
    let (crd, object) = text
        .split_once("\n---\n")
        .context("populator.yaml: a CRD, then the VolumePopulator")?;
    fixture::apply_crds(client, crd).await?;
    let object: DynamicObject = yaml_serde::from_str(object)?;
    let resource = ApiResource {
        group: "populator.storage.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "populator.storage.k8s.io/v1beta1".into(),
        kind: "VolumePopulator".into(),
        plural: "volumepopulators".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    wait_for(
        "the VolumePopulator applied",
        Duration::from_secs(30),
        || async {
            let applied = api
                .patch(
                    &object.name_any(),
                    &PatchParams::apply("refill-e2e").force(),
                    &Patch::Apply(&object),
                )
                .await;
            Ok(applied.ok().map(drop))
        },
    )
    .await
}

/// Waits until the claim is Bound, and returns it.
async fn bound(env: &TestEnv, name: &str) -> Result<PersistentVolumeClaim> {
    let claims = env.api::<PersistentVolumeClaim>();
    wait_for(format!("claim {name} bound"), TIMEOUT, || async {
        let pvc = claims.get(name).await?;
        let phase = pvc.status.as_ref().and_then(|s| s.phase.clone());
        Ok((phase.as_deref() == Some("Bound")).then_some(pvc))
    })
    .await
}

/// refill's condition on a claim: its status, reason and message.
fn populated(pvc: &PersistentVolumeClaim) -> Option<(String, String, String)> {
    let conditions = pvc.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "Populated")?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// The Events on a claim, by reason.
async fn events(env: &TestEnv, claim: &str) -> Result<Vec<(String, String, String)>> {
    let selector = format!("involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}");
    Ok(env
        .api::<Event>()
        .list(&ListParams::default().fields(&selector))
        .await?
        .items
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect())
}

/// What a fill of the claim with `uid` made in Velero's namespace, and PVs still
/// naming its prime claim.
async fn fill_objects(client: &Client, uid: &str) -> Result<Vec<String>> {
    let selector = ListParams::default().labels(&format!("{}={uid}", labels::POPULATES_UID));
    let prime = labels::prime_name(uid);
    let mut left = Vec::new();
    for pvc in Api::<PersistentVolumeClaim>::namespaced(client.clone(), VELERO_NAMESPACE)
        .list(&selector)
        .await?
    {
        left.push(format!("claim {}", pvc.name_any()));
    }
    for pod in Api::<Pod>::namespaced(client.clone(), VELERO_NAMESPACE)
        .list(&selector)
        .await?
    {
        left.push(format!("pod {}", pod.name_any()));
    }
    for pvr in Api::<PodVolumeRestore>::namespaced(client.clone(), VELERO_NAMESPACE)
        .list(&selector)
        .await?
    {
        left.push(format!("PodVolumeRestore {}", pvr.name_any()));
    }
    for pv in Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        let named = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if named.and_then(|r| r.name.as_deref()) == Some(prime.as_str()) {
            left.push(format!("PV {}", pv.name_any()));
        }
    }
    Ok(left)
}

async fn nothing_left(client: &Client, uid: &str) -> Result<()> {
    wait_for("nothing of the fill left", TIMEOUT, || async {
        Ok(fill_objects(client, uid).await?.is_empty().then_some(()))
    })
    .await
    .with_context(|| format!("left behind for claim uid {uid}"))
}

#[tokio::test]
async fn claims_naming_a_backup_volume_come_up_with_the_backups_files() -> Result<()> {
    run_test("pop-fill", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        velero_app::controller(&env).await?;
        register_populator(&client).await?;
        on_real_nodes(&client, &ns).await?;

        // The primary: an app writes its file, Velero backs the namespace up, as a
        // backup of the schedule `nightly`.
        let text = format!("{ns} filled by refill's populator\n").repeat(100);
        env.create::<Deployment>(deployment("old", "db", &text, true))
            .await?;
        env.create::<PersistentVolumeClaim>(claim("db", None)).await?;
        fixture::wait_ready_pods(&client, &ns, "old", 1, TIMEOUT).await?;
        let backup = format!("{ns}-nightly");
        let schedule = format!("{ns}-nightly");
        velero::run_to_completion(
            &client,
            json!({
                "apiVersion": "velero.io/v1", "kind": "Backup",
                "metadata": { "name": backup, "namespace": VELERO_NAMESPACE,
                              "labels": { labels::SCHEDULE_NAME: schedule } },
                "spec": { "includedNamespaces": [ns], "defaultVolumesToFsBackup": true,
                          "storageLocation": "default", "snapshotVolumes": false, "ttl": "24h0m0s" },
            }),
            TIMEOUT,
        )
        .await?;
        // The standby: the app and its claim gone, they come back from Git.
        env.api::<Deployment>()
            .delete("old", &DeleteParams::default())
            .await?;
        let pods = env.api::<Pod>();
        wait_for("the old app's pod gone", TIMEOUT, || async {
            let left = pods.list(&ListParams::default().labels("app=old")).await?;
            Ok(left.items.is_empty().then_some(()))
        })
        .await?;
        env.api::<PersistentVolumeClaim>()
            .delete("db", &DeleteParams::default())
            .await?;
        wait_for("the old claim gone", TIMEOUT, || async {
            Ok(env.api::<PersistentVolumeClaim>().get_opt("db").await?.is_none().then_some(()))
        })
        .await?;

        // (a) A BackupVolume, a claim naming it and a Deployment, applied together.
        env.create::<BackupVolume>(backup_volume("db", ("backup", &backup), "db")).await?;
        env.create::<PersistentVolumeClaim>(claim("db", Some("db"))).await?;
        env.create::<Deployment>(deployment("app", "db", &text, false))
            .await?;
        fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT)
            .await
            .context("(a) the app starting on the backup's files")?;
        let pvc = bound(&env, "db").await?;
        let uid = pvc.uid().unwrap_or_default();
        nothing_left(&client, &uid).await?;
        let claims = env.api::<PersistentVolumeClaim>();
        wait_for("the populator's finalizer gone", TIMEOUT, || async {
            let pvc = claims.get("db").await?;
            Ok((!pvc.finalizers().iter().any(|f| f == labels::POPULATOR_FINALIZER)).then_some(()))
        })
        .await?;
        let said = events(&env, "db").await?;
        ensure!(
            said.iter().any(|(t, r, _)| t == "Normal" && r == "Populated"),
            "(a) no Populated Event: {said:?}"
        );
        let condition = populated(&claims.get("db").await?);
        ensure!(
            matches!(&condition, Some((s, r, _)) if s == "True" && r == "Populated"),
            "(a) the claim's Populated condition: {condition:?}"
        );

        // (b) The schedule's newest Completed backup.
        env.create::<BackupVolume>(backup_volume("db-nightly", ("schedule", &schedule), "db"))
            .await?;
        env.create::<PersistentVolumeClaim>(claim("db-2", Some("db-nightly"))).await?;
        env.create::<Deployment>(deployment("app-2", "db-2", &text, false))
            .await?;
        fixture::wait_ready_pods(&client, &ns, "app-2", 1, TIMEOUT)
            .await
            .context("(b) the app starting on the schedule's backup's files")?;

        // (c) A claim the backup does not hold: Pending, with a Warning that says why.
        env.create::<BackupVolume>(backup_volume("none", ("backup", &backup), "not-there"))
            .await?;
        env.create::<PersistentVolumeClaim>(claim("missing", Some("none"))).await?;
        let warning = wait_for("(c) the Warning on the claim", TIMEOUT, || async {
            Ok(events(&env, "missing").await?.into_iter().find(|(t, r, _)| {
                t == "Warning" && r == "BackupVolumeMissing"
            }))
        })
        .await?;
        ensure!(
            warning.2.contains("not-there") && warning.2.contains("spec.claim"),
            "(c) the Warning says {:?}",
            warning.2
        );
        let pending = claims.get("missing").await?;
        let condition = populated(&pending);
        ensure!(
            matches!(&condition, Some((s, r, m)) if s == "False" && r == "BackupVolumeMissing" && m.contains("not-there")),
            "(c) the claim's Populated condition: {condition:?}"
        );
        let phase = pending.status.and_then(|s| s.phase).unwrap_or_default();
        ensure!(phase == "Pending", "(c) the claim is {phase}");

        // (d) A claim deleted mid-fill: nothing of its fill is left.
        env.create::<PersistentVolumeClaim>(claim("gone", Some("db"))).await?;
        env.create::<Deployment>(deployment("app-3", "gone", &text, false))
            .await?;
        let gone = claims.get("gone").await?;
        let gone_uid = gone.uid().unwrap_or_default();
        let prime = labels::prime_name(&gone_uid);
        let primes = Api::<PersistentVolumeClaim>::namespaced(client.clone(), VELERO_NAMESPACE);
        wait_for("(d) the fill under way", TIMEOUT, || async {
            Ok(primes.get_opt(&prime).await?.map(drop))
        })
        .await?;
        env.api::<Deployment>()
            .delete("app-3", &DeleteParams::default())
            .await?;
        claims.delete("gone", &DeleteParams::default()).await?;
        wait_for("(d) the claim gone", TIMEOUT, || async {
            Ok(claims.get_opt("gone").await?.is_none().then_some(()))
        })
        .await?;
        nothing_left(&client, &gone_uid).await.context("(d)")?;

        velero::delete_backup(&client, &backup).await
    })
    .await
}
