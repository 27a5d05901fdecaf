//! The controller against the real local cluster, running as refill's ServiceAccount
//! with the RBAC of `manifests/rbac.yaml`, beside a simulated Velero node agent. Each
//! test uses its own namespace both for the application and as Velero's namespace.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use refill::api::{
    ConsumerKind, ConsumerPolicy, ConsumerState, DataRestore, DataRestoreSpec, Phase,
    RestoreTarget, VolumePhase, VolumePluginRestore,
};
use refill::labels;
use refill_e2e::fixture::{self, BackedUpVolume, ControllerHandle, Scene, phase};
use refill_e2e::{TestEnv, run_test, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// The test's scene (see [`Scene`]), its waits bounded by [`TIMEOUT`].
async fn scene(env: TestEnv) -> Result<Scene> {
    Scene::new(env, TIMEOUT).await
}

/// Deployment `web` of `replicas` pods on the claim `data` (on `node`, its file `f`
/// holding `live`), running, and backup `b1` of the claim with `f` holding
/// `backed_up`. Returns the volume's directory.
async fn web_with_backup(
    s: &Scene,
    node: &str,
    replicas: i32,
    live: &[u8],
    backed_up: &[u8],
) -> Result<PathBuf> {
    let dir = s.volume("data", node, &[("f", live)]).await?;
    s.deployment("web", replicas, &["data"]).await?;
    s.backup("b1", &[s.backed_up("data", "web-0", &[("f", backed_up)])])
        .await?;
    Ok(dir)
}

const GOOD_DB: &[u8] = b"orders: 1042\ncustomers: 77\n";
const GOOD_CONF: &[u8] = b"mode: primary\n";

#[tokio::test]
async fn deployment_consumer_gets_its_files_back_and_its_replicas() -> Result<()> {
    run_test("dr-deploy", |env| async move {
        let s = scene(env).await?;
        let dir = s
            .volume(
                "data",
                "node-b",
                &[("app.db", GOOD_DB), ("app.conf", GOOD_CONF)],
            )
            .await?;
        let pods = s.deployment("web", 2, &["data"]).await?;
        s.backup(
            "b1",
            &[s.backed_up(
                "data",
                &pods[0].name_any(),
                &[("app.db", GOOD_DB), ("app.conf", GOOD_CONF)],
            )],
        )
        .await?;
        std::fs::write(dir.join("app.db"), b"garbage")?;
        std::fs::remove_file(dir.join("app.conf"))?;

        // The claims, workloads and their ReplicaSets' owners read with one list per
        // kind for the whole cluster, as for restores of many namespaces.
        let config = refill::controller::Config {
            namespace: s.ns.clone(),
            cluster_wide_from: 1,
            ..Default::default()
        };
        let _controller = ControllerHandle::start_with(s.env.cluster, config).await?;
        let _agent = s.node_agent();
        s.restore("r1", s.spec("b1", &["data"])).await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");

        ensure!(
            fixture::read(&dir, "app.db")? == GOOD_DB,
            "app.db not restored"
        );
        ensure!(
            fixture::read(&dir, "app.conf")? == GOOD_CONF,
            "app.conf not restored"
        );
        ensure!(
            !dir.join(".velero").exists(),
            "the done marker was left behind"
        );
        ensure!(
            s.replicas("web").await? == (2, None),
            "replicas not restored: {:?}",
            s.replicas("web").await?
        );
        s.ready_pods("web", 2).await?;
        s.no_stand_ins().await?;

        let volume = &status.volumes[0];
        ensure!(
            volume.phase == VolumePhase::Completed && volume.node.as_deref() == Some("node-b"),
            "{volume:#?}"
        );
        ensure!(
            volume.bytes_done == volume.total_bytes
                && volume.total_bytes == (GOOD_DB.len() + GOOD_CONF.len()) as i64,
            "{volume:#?}"
        );
        let consumer = &status.consumers[0];
        ensure!(
            consumer.kind == ConsumerKind::Deployment
                && consumer.replicas == Some(2)
                && consumer.state == ConsumerState::Resumed,
            "{consumer:#?}"
        );
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        ensure!(ready.status == "True", "{ready:#?}");

        let pvrs = s.pvrs().await?;
        ensure!(
            pvrs.len() == 1,
            "one PodVolumeRestore expected, got {}",
            pvrs.len()
        );
        let owner = &pvrs[0].metadata.owner_references.as_ref().unwrap()[0];
        ensure!(owner.kind == "DataRestore" && Some(&owner.uid) == dr.metadata.uid.as_ref());
        ensure!(pvrs[0].labels().get(labels::RESTORE_UID) == dr.metadata.uid.as_ref());
        let vprs = Api::<VolumePluginRestore>::namespaced(s.client.clone(), &s.ns)
            .list(&ListParams::default())
            .await?;
        let vpr_status = vprs.items[0].status.clone().unwrap();
        ensure!(
            vpr_status.phase.as_deref() == Some("Completed"),
            "{vpr_status:#?}"
        );
        ensure!(vpr_status.progress.unwrap().bytes_done == volume.total_bytes);
        ensure!(vpr_status.plugin_specific.get("node").map(String::as_str) == Some("node-b"));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn statefulset_with_three_claims_is_stopped_once_and_restored_whole() -> Result<()> {
    run_test("dr-sts", |env| async move {
        let s = scene(env).await?;
        let mut dirs = Vec::new();
        for (i, node) in ["node-a", "node-b", "node-c"].iter().enumerate() {
            let claim = format!("data-db-{i}");
            dirs.push(
                s.volume(&claim, node, &[("row", format!("good {i}").as_bytes())])
                    .await?,
            );
        }
        fixture::statefulset(&s.client, &s.ns, "db", 3).await?;
        s.ready_pods("db", 3).await?;
        let claims: Vec<String> = (0..3).map(|i| format!("data-db-{i}")).collect();
        let pods: Vec<String> = (0..3).map(|i| format!("db-{i}")).collect();
        let contents: Vec<Vec<u8>> = (0..3).map(|i| format!("good {i}").into_bytes()).collect();
        let volumes: Vec<BackedUpVolume> = (0..3)
            .map(|i| s.backed_up(&claims[i], &pods[i], &[("row", contents[i].as_slice())]))
            .collect();
        s.backup("b1", &volumes).await?;
        for dir in &dirs {
            std::fs::write(dir.join("row"), b"bad")?;
        }
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        // One at a time: the StatefulSet must stay down until its last claim is done.
        let mut spec = s.spec("b1", &[]);
        spec.included_namespaces = vec![s.ns.clone()];
        spec.parallel = Some(1);
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        for (i, dir) in dirs.iter().enumerate() {
            ensure!(
                fixture::read(dir, "row")? == contents[i],
                "claim {i} not restored"
            );
        }
        ensure!(status.consumers.len() == 1, "{:#?}", status.consumers);
        ensure!(status.consumers[0].pvcs.len() == 3 && status.consumers[0].replicas == Some(3));
        let sts = Api::<StatefulSet>::namespaced(s.client.clone(), &s.ns)
            .get("db")
            .await?;
        ensure!(sts.spec.unwrap().replicas == Some(3));
        s.ready_pods("db", 3).await?;
        s.no_stand_ins().await?;
        // Each volume named once in the VolumeRestored Events: one per pass, listing
        // the volumes restored in it.
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(s.client.clone(), &s.ns)
                .list(&ListParams::default())
                .await?;
        let restored_events: Vec<String> = events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("VolumeRestored"))
            .filter_map(|e| e.note.clone())
            .collect();
        ensure!(
            !restored_events.is_empty() && restored_events.len() <= claims.len(),
            "{restored_events:?}"
        );
        let mut restored: Vec<String> = restored_events
            .iter()
            .flat_map(|note| note.split("; ").map(str::to_string))
            .collect();
        restored.sort();
        let expected: Vec<String> = claims
            .iter()
            .map(|c| format!("{}/{c} restored", s.ns))
            .collect();
        ensure!(restored == expected, "{restored:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn rwx_claim_shared_by_two_deployments() -> Result<()> {
    run_test("dr-rwx", |env| async move {
        let s = scene(env).await?;
        let dir = s
            .volume("shared", "node-c", &[("index.html", b"<h1>good</h1>")])
            .await?;
        let pods = s.deployment("front", 2, &["shared"]).await?;
        s.deployment("back", 1, &["shared"]).await?;
        s.backup(
            "b1",
            &[s.backed_up(
                "shared",
                &pods[0].name_any(),
                &[("index.html", b"<h1>good</h1>")],
            )],
        )
        .await?;
        std::fs::write(dir.join("index.html"), b"defaced")?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        s.restore("r1", s.spec("b1", &["shared"])).await?;
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(fixture::read(&dir, "index.html")? == b"<h1>good</h1>");
        let consumers = dr.status.unwrap().consumers;
        ensure!(consumers.len() == 2, "{consumers:#?}");
        ensure!(s.replicas("front").await? == (2, None) && s.replicas("back").await? == (1, None));
        s.ready_pods("front", 2).await?;
        s.ready_pods("back", 1).await?;
        // Both were stopped in one pass and brought back in one: one Event for each,
        // naming both workloads, not one Event per workload.
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(s.client.clone(), &s.ns)
                .list(&ListParams::default())
                .await?;
        for reason in ["QuiescedConsumer", "ResumedConsumer"] {
            let notes: Vec<String> = events
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.note.clone())
                .collect();
            ensure!(
                notes.len() == 1 && notes[0].contains("/back") && notes[0].contains("/front"),
                "{reason}: {notes:?}"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn consumers_none_restores_beside_the_running_app_and_warns() -> Result<()> {
    run_test("dr-online", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-a", 2, b"corrupt", b"good").await?;
        let deployments = Api::<Deployment>::namespaced(s.client.clone(), &s.ns);
        let before = deployments.get("web").await?;
        let pods_before: Vec<String> = s
            .ready_pods("web", 2)
            .await?
            .iter()
            .map(|p| p.uid().unwrap())
            .collect();
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let spec = DataRestoreSpec {
            consumers: ConsumerPolicy::None,
            acknowledge_running_consumers: true,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        ensure!(fixture::read(&dir, "f")? == b"good", "f not restored");
        // Nothing was stopped: no record, the Deployment never written, the same pods.
        ensure!(status.consumers.is_empty(), "{:#?}", status.consumers);
        let after = deployments.get("web").await?;
        ensure!(
            after.metadata.generation == before.metadata.generation
                && after.annotations() == before.annotations(),
            "the Deployment was changed: {:?}",
            after.metadata
        );
        let pods_after: Vec<String> = s
            .ready_pods("web", 2)
            .await?
            .iter()
            .map(|p| p.uid().unwrap())
            .collect();
        ensure!(
            pods_after == pods_before,
            "pods were replaced: {pods_before:?} -> {pods_after:?}"
        );
        ensure!(
            status
                .warnings
                .iter()
                .any(|w| w.contains("files are overwritten under applications that keep running")),
            "{:?}",
            status.warnings
        );
        // The warning is loud while it runs and gone once nothing writes any more.
        let warning = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Warning")
            .unwrap();
        ensure!(warning.status == "False", "{warning:#?}");
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(s.client.clone(), &s.ns)
                .list(&ListParams::default())
                .await?;
        let warned: Vec<&k8s_openapi::api::events::v1::Event> = events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("RunningConsumers"))
            .collect();
        ensure!(
            warned.len() == 1 && warned[0].type_.as_deref() == Some("Warning"),
            "{warned:#?}"
        );
        ensure!(
            !events
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("QuiescedConsumer")),
            "a consumer was stopped"
        );
        s.no_stand_ins().await?;
        Ok(())
    })
    .await
}

/// The local volume the claim `claim` will get when refill makes it (a new claim), on
/// `node` and kept for that claim alone: another test's claim of the class could take
/// it. Returns the PV's name and its directory.
async fn spare_volume(s: &Scene, node: &str, claim: &str) -> Result<(String, PathBuf)> {
    let spare = s.scratch.join("pv").join("spare");
    let pv = format!("{}-spare", s.ns);
    fixture::local_pv(&s.client, &pv, node, &spare, &s.env.ns.labels()).await?;
    let reserve = json!({"spec": {"claimRef": {"namespace": &s.ns, "name": claim}}});
    Api::<PersistentVolume>::all(s.client.clone())
        .patch(&pv, &PatchParams::default(), &Patch::Merge(reserve))
        .await?;
    Ok((pv, spare))
}

/// Labels the Deployment to be switched off `claim` (spec.switchWorkloads).
async fn label_to_switch(s: &Scene, deployment: &str, claim: &str) -> Result<()> {
    let label = json!({"metadata": {"labels": {labels::SWITCH_CLAIM: claim}}});
    Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
        .patch(deployment, &PatchParams::default(), &Patch::Merge(label))
        .await?;
    Ok(())
}

/// The claims a Deployment's pod template names.
fn template_claims(deployment: &Deployment) -> Vec<String> {
    deployment
        .spec
        .iter()
        .flat_map(|s| s.template.spec.iter())
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

#[tokio::test]
async fn switch_workloads_moves_the_labelled_deployment_onto_the_filled_new_claim() -> Result<()> {
    run_test("dr-switch", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-b", 2, b"live and newer", b"good").await?;
        label_to_switch(&s, "web", "data").await?;
        let claims = Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), &s.ns);
        let data = claims.get("data").await?;
        let new_name = labels::new_claim_name("data", "r1");
        let (_, spare) = spare_volume(&s, "node-b", &new_name).await?;

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let spec = DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            switch_workloads: true,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        ensure!(
            fixture::read(&spare, "f")? == b"good"
                && fixture::read(&dir, "f")? == b"live and newer",
            "the backup is not in the new claim alone"
        );
        ensure!(
            claims.get("data").await?.metadata.resource_version == data.metadata.resource_version,
            "the claim was written"
        );
        // Back with its replicas, its template naming the new claim, and the way back.
        let web = Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
            .get("web")
            .await?;
        ensure!(
            template_claims(&web) == [new_name.clone()]
                && web.spec.as_ref().and_then(|s| s.replicas) == Some(2),
            "{:#?}",
            web.spec
        );
        let annotations = web.annotations();
        ensure!(
            annotations.get(labels::SWITCHED_FROM).map(String::as_str) == Some("data")
                && annotations.get(labels::SWITCHED_BY) == Some(&format!("{}/r1", s.ns))
                && !annotations.contains_key(labels::QUIESCED_BY)
                && !annotations.contains_key(labels::ORIGINAL_REPLICAS),
            "{annotations:#?}"
        );
        let pods = s.ready_pods("web", 2).await?;
        for pod in &pods {
            let mounted: Vec<&str> = pod
                .spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .filter_map(|v| v.persistent_volume_claim.as_ref())
                .map(|c| c.claim_name.as_str())
                .collect();
            ensure!(
                mounted == [new_name.as_str()],
                "{} mounts {mounted:?}",
                pod.name_any()
            );
        }
        let record = &status.consumers[..];
        ensure!(
            record.len() == 1
                && record[0].state == ConsumerState::Switched
                && record[0].switch_to.as_deref() == Some(new_name.as_str()),
            "{record:#?}"
        );
        // It ran while the new claim was filled: stopped only after the node agent
        // had written it.
        let pvr = s.pvrs().await?;
        let written = pvr[0]
            .status
            .as_ref()
            .and_then(|st| st.completion_timestamp.clone())
            .context("the PodVolumeRestore has no completion time")?;
        let stopped = record[0].stopped_at.clone().context("never stopped")?;
        ensure!(
            stopped.0 >= written.0,
            "stopped at {stopped:?}, before the new claim was filled at {written:?}"
        );
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(s.client.clone(), &s.ns)
                .list(&ListParams::default())
                .await?;
        let note = format!(
            "switched Deployment {}/web from PVC data to PVC {new_name} and scaled it back to 2",
            s.ns
        );
        ensure!(
            events.items.iter().any(|e| {
                e.reason.as_deref() == Some("SwitchedConsumer") && e.note.as_deref() == Some(&*note)
            }),
            "no SwitchedConsumer Event saying: {note}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_switch_canceled_before_it_is_written_brings_the_workload_back_on_its_claim() -> Result<()>
{
    run_test("dr-switch-cancel", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-b", 1, b"live", b"good").await?;
        label_to_switch(&s, "web", "data").await?;
        let new_name = labels::new_claim_name("data", "r1");
        let (_, spare) = spare_volume(&s, "node-b", &new_name).await?;
        // The app's pod holds the claim after it is told to go, as one that takes long
        // to stop would: the switch waits for it.
        let pod = s.ready_pods("web", 1).await?.remove(0).name_any();
        fixture::hold_pods(&s.client, &s.ns, &[&pod]).await?;

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let spec = DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            switch_workloads: true,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", spec).await?;
        let waiting = s.wait_volume("r1", VolumePhase::Switching).await?;
        wait_for("the switch to wait for the app's pod", TIMEOUT, || async {
            let dr = fixture::get_whole(&s.client, &s.ns, "r1").await?;
            let message = dr.status.unwrap_or_default().volumes[0].message.clone();
            Ok(message
                .is_some_and(|m| m.contains(&format!("release PVC {}/data: {pod}", s.ns)))
                .then_some(()))
        })
        .await
        .with_context(|| format!("{:#?}", waiting.status))?;
        s.env
            .api::<DataRestore>()
            .patch(
                "r1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Canceled, "{status:#?}");
        ensure!(
            status.volumes[0]
                .message
                .as_deref()
                .is_some_and(|m| m.contains("no workload was switched onto it")),
            "{:#?}",
            status.volumes[0]
        );
        // Back on its own claim, as it was; the new claim keeps the backup.
        let web = Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
            .get("web")
            .await?;
        ensure!(
            template_claims(&web) == ["data"]
                && web.spec.as_ref().and_then(|s| s.replicas) == Some(1)
                && !web.annotations().contains_key(labels::SWITCHED_FROM)
                && !web.annotations().contains_key(labels::QUIESCED_BY),
            "{:#?}",
            web.metadata
        );
        ensure!(
            status.consumers[0].state == ConsumerState::Resumed,
            "{:#?}",
            status.consumers
        );
        ensure!(fixture::read(&spare, "f")? == b"good");
        fixture::release_pods(&s.client, &s.ns).await?;
        s.ready_pods("web", 1).await?;
        Ok(())
    })
    .await
}

/// An admission policy that refuses any Deployment of the namespace whose template
/// names a claim other than `data`: the switch itself is refused, not the scaling.
async fn refuse_switches(s: &Scene) -> Result<String> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let name = format!("{}-stays-on-data", s.ns);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["deployments"]}]},
            "validations": [{
                "expression": "!object.spec.template.spec.volumes.exists(v, has(v.persistentVolumeClaim) && v.persistentVolumeClaim.claimName != 'data')",
                "message": "this app stays on its claim",
            }],
        }
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.ns}}}},
    }))?;
    Api::<ValidatingAdmissionPolicy>::all(s.client.clone())
        .create(&PostParams::default(), &policy)
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(s.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    // In force once a dry run of such a change is refused.
    let deployments = Api::<Deployment>::namespaced(s.client.clone(), &s.ns);
    wait_for("the admission policy in force", TIMEOUT, || async {
        let moved = json!({"spec": {"template": {"spec": {"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "elsewhere"}}]}}}});
        let refused = deployments
            .patch(
                "web",
                &PatchParams::default().dry_run(),
                &Patch::Strategic(moved),
            )
            .await
            .is_err();
        Ok(refused.then_some(()))
    })
    .await?;
    Ok(name)
}

#[tokio::test]
async fn a_switch_the_cluster_refuses_brings_the_workload_back_on_its_claim() -> Result<()> {
    run_test("dr-switch-refused", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-b", 2, b"live", b"good").await?;
        label_to_switch(&s, "web", "data").await?;
        let new_name = labels::new_claim_name("data", "r1");
        let (_, spare) = spare_volume(&s, "node-b", &new_name).await?;
        let policy = refuse_switches(&s).await?;

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let spec = DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            switch_workloads: true,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await;
        // The policy is the cluster's: it goes before anything can fail.
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        Api::<ValidatingAdmissionPolicyBinding>::all(s.client.clone())
            .delete(&policy, &Default::default())
            .await?;
        Api::<ValidatingAdmissionPolicy>::all(s.client.clone())
            .delete(&policy, &Default::default())
            .await?;
        let dr = dr?;
        let status = dr.status.clone().unwrap();
        // The data is in the new claim; the app is back, at its count, on its claim.
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        ensure!(fixture::read(&spare, "f")? == b"good");
        let web = Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
            .get("web")
            .await?;
        ensure!(
            template_claims(&web) == ["data"]
                && web.spec.as_ref().and_then(|s| s.replicas) == Some(2)
                && !web.annotations().contains_key(labels::QUIESCED_BY)
                && !web.annotations().contains_key(labels::SWITCHED_FROM),
            "{:#?}",
            web.metadata
        );
        ensure!(
            status.consumers[0].state == ConsumerState::Resumed,
            "{:#?}",
            status.consumers
        );
        s.ready_pods("web", 2).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn new_claim_gets_the_backup_and_leaves_the_claim_and_its_app_alone() -> Result<()> {
    run_test("dr-new-claim", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-b", 1, b"live and newer", b"good").await?;
        let deployments = Api::<Deployment>::namespaced(s.client.clone(), &s.ns);
        let claims = Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), &s.ns);
        let (web, data) = (deployments.get("web").await?, claims.get("data").await?);
        let new_name = labels::new_claim_name("data", "r1");
        let (pv, spare) = spare_volume(&s, "node-b", &new_name).await?;

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let spec = DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        let volume = &status.volumes[0];
        ensure!(
            volume.target_pvc.as_deref() == Some(new_name.as_str())
                && volume.message.as_deref()
                    == Some(&*format!("restored into PVC {}/{new_name}", s.ns))
                && volume.node.as_deref() == Some("node-b"),
            "{volume:#?}"
        );
        // The backup is in the new claim; the claim, its files and its app are as they were.
        ensure!(
            fixture::read(&spare, "f")? == b"good",
            "the new claim lacks the backup"
        );
        ensure!(
            fixture::read(&dir, "f")? == b"live and newer",
            "the claim was written"
        );
        let made = claims.get(&new_name).await?;
        ensure!(
            made.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv.as_str())
                && made.annotations().get(labels::RESTORED_FROM_ANNOTATION)
                    == Some(&format!("{}/data", s.ns))
                && made.owner_references().is_empty(),
            "{:#?}",
            made.metadata
        );
        ensure!(status.consumers.is_empty(), "{:#?}", status.consumers);
        ensure!(
            deployments.get("web").await?.metadata.resource_version
                == web.metadata.resource_version
                && claims.get("data").await?.metadata.resource_version
                    == data.metadata.resource_version,
            "the Deployment or the claim was written"
        );
        s.no_stand_ins().await?;
        // It outlives the restore: it is the restore's result.
        Api::<DataRestore>::namespaced(s.client.clone(), &s.ns)
            .delete("r1", &Default::default())
            .await?;
        wait_for("r1 gone", TIMEOUT, || async {
            let gone = Api::<DataRestore>::namespaced(s.client.clone(), &s.ns)
                .get_opt("r1")
                .await?
                .is_none();
            Ok(gone.then_some(()))
        })
        .await?;
        ensure!(
            claims.get_opt(&new_name).await?.is_some(),
            "the new claim went with the restore"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_finished_job_pod_on_the_claim_does_not_hold_the_restore() -> Result<()> {
    run_test("dr-jobdone", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("data", "node-a", &[("f", b"good")]).await?;
        // A one-off Job that used the claim and finished: its pod stays, holding nothing.
        let mut template = fixture::pod_template("migrate", &["data"]);
        template["spec"]["restartPolicy"] = json!("Never");
        s.env
            .create::<Job>(json!({
                "metadata": {"name": "migrate"},
                "spec": {"backoffLimit": 0, "template": template}
            }))
            .await?;
        let jobs: Api<Job> = Api::namespaced(s.client.clone(), &s.ns);
        wait_for("job migrate to succeed", TIMEOUT, || async {
            let job = jobs.get("migrate").await?;
            Ok((job.status.and_then(|st| st.succeeded) == Some(1)).then_some(()))
        })
        .await?;
        let pods = s.deployment("web", 1, &["data"]).await?;
        s.backup(
            "b1",
            &[s.backed_up("data", &pods[0].name_any(), &[("f", b"good")])],
        )
        .await?;
        std::fs::write(dir.join("f"), b"bad")?;

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        s.restore("r1", s.spec("b1", &["data"])).await?;
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(fixture::read(&dir, "f")? == b"good", "f not restored");
        let consumers = dr.status.unwrap().consumers;
        ensure!(
            consumers.len() == 1 && consumers[0].name == "web",
            "the finished Job is no consumer: {consumers:#?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn unbound_wait_for_first_consumer_claim_binds_on_a_candidate() -> Result<()> {
    run_test("dr-wffc", |env| async move {
        let s = scene(env).await?;
        // Two free local PVs, on node-a and node-c, in a class of this test's own, so the
        // unbound claim cannot take another test's volume.
        let class = s.own_class().await?;
        let labels = s.env.ns.labels();
        let dir_a = s.scratch.join("pv/a");
        let dir_c = s.scratch.join("pv/c");
        let pv_a = format!("{}-a", s.ns);
        let pv_c = format!("{}-c", s.ns);
        fixture::local_pv_of_class(&s.client, &pv_a, "node-a", &dir_a, &labels, &class).await?;
        fixture::local_pv_of_class(&s.client, &pv_c, "node-c", &dir_c, &labels, &class).await?;
        s.unbound_claim("fresh").await?;
        s.backup(
            "b1",
            &[s.backed_up("fresh", "old-pod", &[("seed.txt", b"seeded")])],
        )
        .await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let mut spec = s.spec("b1", &["fresh"]);
        spec.candidate_nodes
            .insert(format!("{}/fresh", s.ns), vec!["node-c".into()]);
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        let volume = &dr.status.as_ref().unwrap().volumes[0];
        ensure!(volume.node.as_deref() == Some("node-c"), "{volume:#?}");
        let pvc = Api::<PersistentVolumeClaim>::namespaced(s.client.clone(), &s.ns)
            .get("fresh")
            .await?;
        let bound = pvc.spec.unwrap().volume_name.unwrap_or_default();
        ensure!(bound == format!("{}-c", s.ns), "bound to {bound}");
        ensure!(fixture::read(&dir_c, "seed.txt")? == b"seeded");
        ensure!(!dir_a.join("seed.txt").exists());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_failed_volume_gives_partially_failed_with_consumers_back() -> Result<()> {
    run_test("dr-partial", |env| async move {
        let s = scene(env).await?;
        let good = s.volume("good", "node-a", &[("f", b"old")]).await?;
        s.volume("lost", "node-b", &[("f", b"old")]).await?;
        s.deployment("a", 1, &["good"]).await?;
        s.deployment("b", 2, &["lost"]).await?;
        let mut lost = s.backed_up("lost", "b-0", &[("f", b"new")]);
        s.backup("b1", &[s.backed_up("good", "a-0", &[("f", b"new")])])
            .await?;
        // A snapshot the repository does not have: the node agent fails the restore.
        lost.snapshot_id = format!("{}-missing", s.ns);
        fixture::backup(
            &s.client,
            &s.ns,
            "b2",
            &s.scratch.join("elsewhere"),
            &[lost],
        )
        .await?;
        std::fs::remove_dir_all(s.scratch.join("elsewhere"))?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        s.restore("r1", s.spec("b1", &["good"])).await?;
        s.restore("r2", s.spec("b2", &["lost"])).await?;
        let ok = s.finished("r1").await?;
        ensure!(phase(&ok) == Phase::Completed);
        ensure!(fixture::read(&good, "f")? == b"new");
        let failed = s.finished("r2").await?;
        ensure!(phase(&failed) == Phase::Failed, "{:#?}", failed.status);
        let status = failed.status.unwrap();
        ensure!(
            status.volumes[0]
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("not found"),
            "{status:#?}"
        );
        ensure!(s.replicas("b").await? == (2, None));
        s.ready_pods("b", 2).await?;
        s.no_stand_ins().await?;

        // Both in one request: PartiallyFailed.
        let mut both = s.spec("b1", &["good"]);
        both.pvcs.clear();
        both.included_namespaces = vec![s.ns.clone()];
        let mut pvb_missing = s.backed_up("lost", "b-0", &[("f", b"new")]);
        pvb_missing.snapshot_id = format!("{}-missing-too", s.ns);
        fixture::backup(
            &s.client,
            &s.ns,
            "b3",
            &s.scratch.join("elsewhere"),
            &[s.backed_up("good", "a-0", &[("f", b"newer")]), pvb_missing],
        )
        .await?;
        std::fs::remove_dir_all(
            s.scratch
                .join("elsewhere")
                .join(format!("{}-missing-too", s.ns)),
        )?;
        both.backup_name = Some("b3".into());
        // b3's good snapshot lives in the other directory; copy it where the agent reads.
        std::fs::create_dir_all(s.snapshots.join(format!("{}-good", s.ns)))?;
        std::fs::write(
            s.snapshots.join(format!("{}-good", s.ns)).join("f"),
            b"newer",
        )?;
        s.restore("r3", both).await?;
        let partial = s.finished("r3").await?;
        ensure!(
            phase(&partial) == Phase::PartiallyFailed,
            "{:#?}",
            partial.status
        );
        ensure!(fixture::read(&good, "f")? == b"newer");
        ensure!(s.replicas("a").await? == (1, None) && s.replicas("b").await? == (2, None));
        let stalled = partial
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Stalled")
            .unwrap();
        ensure!(stalled.status == "True");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_controller_killed_mid_restore_resumes_without_duplicates() -> Result<()> {
    run_test("dr-restart", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-a", 3, b"bad", b"good").await?;

        // No node agent yet: the restore stops at Restoring, with everything stopped.
        let controller = s.controller().await?;
        s.restore("r1", s.spec("b1", &["data"])).await?;
        s.wait_volume("r1", VolumePhase::Restoring).await?;
        controller.kill().await;
        ensure!(
            s.replicas("web").await?.0 == 0,
            "consumer should be stopped while refill is down"
        );
        let (_, record) = s.replicas("web").await?;
        ensure!(
            record.is_some(),
            "the scale-down must carry its durable record"
        );

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(fixture::read(&dir, "f")? == b"good");
        ensure!(s.pvrs().await?.len() == 1, "duplicate PodVolumeRestores");
        ensure!(s.replicas("web").await? == (3, None));
        s.ready_pods("web", 3).await?;
        s.no_stand_ins().await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_consumer_scaled_up_mid_restore_stops_the_volume_and_names_who() -> Result<()> {
    run_test("dr-rescale", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-a", 2, b"live", b"old").await?;
        let _controller = s.controller().await?;
        // Extra files kept, so that the files the node agent never wrote are the app's.
        let keep = DataRestoreSpec {
            extra_files: refill::api::ExtraFiles::Keep,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", keep).await?;
        s.wait_volume("r1", VolumePhase::Restoring).await?;

        let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.ns);
        let params = PatchParams {
            field_manager: Some("gitops-sync".into()),
            ..Default::default()
        };
        deployments
            .patch(
                "web",
                &params,
                &Patch::Merge(json!({"spec": {"replicas": 2}})),
            )
            .await?;

        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Failed, "{:#?}", dr.status);
        let message = dr.status.as_ref().unwrap().volumes[0]
            .message
            .clone()
            .unwrap_or_default();
        ensure!(message.contains("scaled to 2 by gitops-sync"), "{message}");
        let pvrs = s.pvrs().await?;
        ensure!(
            pvrs.len() == 1 && pvrs[0].spec.cancel == Some(true),
            "the PodVolumeRestore must be canceled"
        );
        ensure!(
            fixture::read(&dir, "f")? == b"live",
            "nothing may be written under a running consumer"
        );
        s.no_stand_ins().await?;
        s.ready_pods("web", 2).await?;
        ensure!(
            s.replicas("web").await?.1.is_none(),
            "the record must be cleared"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn detach_stops_a_bare_pod_and_a_daemonset_and_brings_them_back() -> Result<()> {
    run_test("dr-detach", |env| async move {
        let s = scene(env).await?;
        let solo = s.volume("solo", "node-a", &[("f", b"bad")]).await?;
        let logs = s.volume("logs", "node-b", &[("f", b"bad")]).await?;
        let pod = s.bare_pod("solo", &["solo"]).await?;
        let ds: DaemonSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": s.ns},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "node-b"},
                        "containers": [{"name": "a", "image": "registry.local/agent:1"}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "logs"}}],
                    }
                }
            }
        }))?;
        Api::<DaemonSet>::namespaced(s.client.clone(), &s.ns).create(&PostParams::default(), &ds).await?;
        s.ready_pods("agent", 1).await?;
        s.backup("b1", &[s.backed_up("solo", "solo", &[("f", b"good solo")]), s.backed_up("logs", "agent-x", &[("f", b"good logs")])]).await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let mut spec = s.spec("b1", &["solo", "logs"]);
        spec.consumers = ConsumerPolicy::Detach;
        s.restore("r1", spec).await?;
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(fixture::read(&solo, "f")? == b"good solo" && fixture::read(&logs, "f")? == b"good logs");
        let back = s.ready_pods("solo", 1).await?;
        ensure!(back[0].metadata.uid != pod.metadata.uid || pod.metadata.uid.is_none());
        s.ready_pods("agent", 1).await?;
        let ds = Api::<DaemonSet>::namespaced(s.client.clone(), &s.ns).get("agent").await?;
        let selector = ds.spec.unwrap().template.spec.unwrap().node_selector.unwrap_or_default();
        ensure!(selector.len() == 1 && selector["kubernetes.io/hostname"] == "node-b", "{selector:?}");
        let kinds: Vec<ConsumerKind> = dr.status.unwrap().consumers.iter().map(|c| c.kind).collect();
        ensure!(kinds.contains(&ConsumerKind::Pod) && kinds.contains(&ConsumerKind::DaemonSet), "{kinds:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn bad_input_is_refused_clearly_and_touches_nothing() -> Result<()> {
    run_test("dr-bad", |env| async move {
        let s = scene(env).await?;
        s.volume("data", "node-a", &[("f", b"x")]).await?;
        s.volume("extra", "node-a", &[("f", b"x")]).await?;
        s.unbound_claim("unbound").await?;
        s.deployment("web", 2, &["data"]).await?;
        s.bare_pod("bare", &["extra"]).await?;
        s.backup(
            "b1",
            &[
                s.backed_up("data", "web-0", &[("f", b"y")]),
                s.backed_up("extra", "bare", &[("f", b"y")]),
                s.backed_up("unbound", "gone", &[("f", b"y")]),
            ],
        )
        .await?;
        let _controller = s.controller().await?;
        let before = s.versions().await?;

        let cases: [(&str, DataRestoreSpec, &str); 4] = [
            (
                "unknown",
                s.spec("nope", &["data"]),
                "backup \"nope\" not found",
            ),
            (
                "not-in-backup",
                s.spec("b1", &["nothing-here"]),
                "is not in backup \"b1\"",
            ),
            (
                "no-candidates",
                s.spec("b1", &["unbound"]),
                "candidateNodes",
            ),
            (
                "bare-pod",
                s.spec("b1", &["extra"]),
                "cannot be scaled down; set spec.consumers to Detach",
            ),
        ];
        for (name, spec, expected) in cases {
            s.restore(name, spec).await?;
            let dr = s.finished(name).await?;
            let status = dr.status.unwrap();
            ensure!(status.phase == Phase::Failed, "{name}: {status:#?}");
            ensure!(
                status.errors.iter().any(|e| e.contains(expected)),
                "{name}: expected '{expected}' in {:?}",
                status.errors
            );
            let stalled = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Stalled")
                .unwrap();
            ensure!(
                stalled.status == "True" && stalled.message.contains(expected),
                "{stalled:?}"
            );
            ensure!(status.volumes.is_empty() && status.consumers.is_empty());
        }
        let after = s.versions().await?;
        ensure!(
            before == after,
            "objects changed:\nbefore {before:#?}\nafter {after:#?}"
        );
        ensure!(s.pvrs().await?.is_empty());
        ensure!(fixture::stand_in_pods(&s.client, &s.ns).await?.is_empty());
        let pvs: Vec<PersistentVolume> = Api::<PersistentVolume>::all(s.client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        ensure!(!pvs.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn cancel_and_delete_roll_back_through_the_same_finish() -> Result<()> {
    run_test("dr-cancel", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-a", 2, b"live", b"old").await?;
        let _controller = s.controller().await?;
        let api: Api<DataRestore> = Api::namespaced(s.client.clone(), &s.ns);

        // Velero's restore-helper settings, which the stand-in must honour.
        let helper_config: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fs-restore-action-config", "namespace": s.ns, "labels": {
                "velero.io/plugin-config": "", "velero.io/pod-volume-restore": "RestoreItemAction"}},
            "data": {"image": "registry.local/velero:v1.17.1", "cpuLimit": "0", "memRequest": "64Mi"},
        }))?;
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(s.client.clone(), &s.ns)
            .create(&PostParams::default(), &helper_config)
            .await?;

        // No node agent: both requests stop at Restoring until told otherwise.
        let r1 = s.restore("r1", s.spec("b1", &["data"])).await?;
        let dr = s.wait_volume("r1", VolumePhase::Restoring).await?;
        let stand_in_name = dr.status.unwrap().volumes[0].stand_in_pod.clone().unwrap();
        let stand_in = Api::<Pod>::namespaced(s.client.clone(), &s.ns).get(&stand_in_name).await?;
        let spec = stand_in.spec.unwrap();
        ensure!(spec.node_name.as_deref() == Some("node-a"), "the scheduler places the stand-in by the PV");
        ensure!(spec.security_context.and_then(|c| c.fs_group) == Some(1001), "the consumer's fsGroup is kept");
        // An exact restore sets the files aside first, in the same pod; Velero's node
        // agent finds restore-wait by its name.
        let init = spec.init_containers.unwrap();
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        ensure!(names == ["set-aside", "restore-wait"], "{names:?}");
        ensure!(spec.containers[0].name == "tidy", "the stand-in tidies after restore-wait");
        let wait = &init[1];
        ensure!(wait.image.as_deref() == Some("registry.local/velero:v1.17.1"), "{:?}", wait.image);
        ensure!(wait.command == Some(vec!["/velero-restore-helper".to_string()]));
        ensure!(wait.args == Some(vec![r1.metadata.uid.clone().unwrap()]), "the argument is the owner's UID");
        ensure!(wait.volume_mounts.as_ref().unwrap()[0].mount_path == "/restores/data");
        let resources = wait.resources.clone().unwrap();
        ensure!(!resources.limits.unwrap_or_default().contains_key("cpu"), "cpuLimit 0 means unbounded");
        ensure!(resources.requests.unwrap()["memory"].0 == "64Mi");
        let env: Vec<String> = wait.env.clone().unwrap().into_iter().map(|e| e.name).collect();
        ensure!(env == ["POD_NAMESPACE", "POD_NAME"]);
        api.patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cancel": true}})),
        )
        .await?;
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Canceled, "{:#?}", dr.status);
        ensure!(s.pvrs().await?.iter().all(|p| p.spec.cancel == Some(true)));
        s.no_stand_ins().await?;
        ensure!(s.replicas("web").await? == (2, None));
        s.ready_pods("web", 2).await?;

        s.restore("r2", s.spec("b1", &["data"])).await?;
        s.wait_volume("r2", VolumePhase::Restoring).await?;
        ensure!(s.replicas("web").await?.0 == 0);
        api.delete("r2", &Default::default()).await?;
        wait_for("r2 to be gone", TIMEOUT, || async {
            Ok(api.get_opt("r2").await?.is_none().then_some(()))
        })
        .await?;
        s.no_stand_ins().await?;
        ensure!(
            s.replicas("web").await? == (2, None),
            "deletion must bring consumers back"
        );
        s.ready_pods("web", 2).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_schedule_means_its_newest_completed_backup() -> Result<()> {
    run_test("dr-schedule", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("data", "node-a", &[("f", b"stale")]).await?;
        let backups: Api<refill::api::Backup> = Api::namespaced(s.client.clone(), &s.ns);
        for (name, content, phase, at) in [
            ("nightly-1", "monday", "Completed", "2026-11-01T02:00:00Z"),
            ("nightly-2", "tuesday", "Completed", "2026-11-02T02:00:00Z"),
            ("nightly-3", "wednesday", "Failed", "2026-11-03T02:00:00Z"),
        ] {
            let mut volume = s.backed_up("data", "web-0", &[("f", content.as_bytes())]);
            volume.snapshot_id = format!("{}-{name}", s.ns);
            s.backup(name, &[volume]).await?;
            backups
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": {labels::SCHEDULE_NAME: "nightly"}}}),
                    ),
                )
                .await?;
            backups
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": phase, "completionTimestamp": at}})),
                )
                .await?;
        }
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let mut spec = s.spec("unused", &["data"]);
        spec.backup_name = None;
        spec.schedule_name = Some("nightly".into());
        s.restore("standby-refresh", spec).await?;
        let dr = s.finished("standby-refresh").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(dr.status.unwrap().backup_name.as_deref() == Some("nightly-2"));
        ensure!(fixture::read(&dir, "f")? == b"tuesday");
        Ok(())
    })
    .await
}

/// The annotations refill leaves on a workload it stopped.
fn refill_marks(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Vec<String> {
    annotations
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("refill.dev/"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// Checks that Deployment `web` is back at 2 replicas and carries none of refill's marks.
async fn web_at_two_unmarked(s: &Scene) -> Result<()> {
    let web = Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
        .get("web")
        .await?;
    ensure!(
        web.spec.as_ref().and_then(|s| s.replicas) == Some(2)
            && refill_marks(web.metadata.annotations.as_ref()).is_empty(),
        "the Deployment must be back at 2 with no mark: {:?} {:?}",
        web.spec.and_then(|s| s.replicas),
        web.metadata.annotations
    );
    Ok(())
}

#[tokio::test]
async fn two_restores_of_one_claim_started_together_never_lose_a_replica() -> Result<()> {
    run_test("dr-race", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-a", 2, b"live", b"old").await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        for round in 0..3 {
            let (a, b) = (format!("a{round}"), format!("b{round}"));
            let (ra, rb) = futures::join!(
                s.restore(&a, s.spec("b1", &["data"])),
                s.restore(&b, s.spec("b1", &["data"]))
            );
            ra?;
            rb?;
            let (da, db) = futures::join!(s.finished(&a), s.finished(&b));
            let (da, db) = (da?, db?);
            let ended = [(&a, &b, &da), (&b, &a, &db)];
            ensure!(
                ended.iter().any(|(_, _, dr)| phase(dr) == Phase::Completed),
                "round {round}: one of them restores: {:?} {:?}",
                da.status,
                db.status
            );
            for (name, other, dr) in ended {
                let status = dr.status.clone().unwrap();
                if status.phase != Phase::Completed {
                    ensure!(
                        status.errors.iter().any(|e| e.contains(other.as_str())),
                        "round {round}: {name} must name {other} as the holder: {:?}",
                        status.errors
                    );
                }
            }
            web_at_two_unmarked(&s)
                .await
                .with_context(|| format!("round {round}"))?;
            s.no_stand_ins().await?;
            s.ready_pods("web", 2).await?;
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_cronjob_that_mounts_the_claim_is_suspended_until_the_restore_ends() -> Result<()> {
    use k8s_openapi::api::batch::v1::CronJob;
    run_test("dr-cron", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("data", "node-a", &[("f", b"live")]).await?;
        let cron: CronJob = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": s.ns},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {
                "metadata": {"labels": {"app": "nightly"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "job", "image": "registry.local/job:1",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
            }}}}
        }))?;
        let crons: Api<CronJob> = Api::namespaced(s.client.clone(), &s.ns);
        crons.create(&PostParams::default(), &cron).await?;
        s.backup("b1", &[s.backed_up("data", "nightly-1", &[("f", b"old")])])
            .await?;
        // Workloads read with one list per kind for the whole cluster, as the
        // controller does for restores of many namespaces.
        let config = refill::controller::Config {
            namespace: s.ns.clone(),
            cluster_wide_from: 1,
            ..Default::default()
        };
        let _controller = ControllerHandle::start_with(s.env.cluster, config).await?;
        s.restore("r1", s.spec("b1", &["data"])).await?;
        let dr = s.wait_volume("r1", VolumePhase::Restoring).await?;
        let consumer = &dr.status.as_ref().unwrap().consumers[0];
        ensure!(
            consumer.kind == ConsumerKind::CronJob && consumer.state == ConsumerState::Stopped,
            "a CronJob with no Job running is a consumer: {consumer:#?}"
        );
        let suspended = crons.get("nightly").await?;
        ensure!(
            suspended.spec.as_ref().and_then(|s| s.suspend) == Some(true),
            "suspended while its claim is restored"
        );
        let _agent = s.node_agent();
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(fixture::read(&dir, "f")? == b"old");
        let back = crons.get("nightly").await?;
        ensure!(
            back.spec.as_ref().and_then(|s| s.suspend) == Some(false)
                && refill_marks(back.metadata.annotations.as_ref()).is_empty(),
            "unsuspended, marks gone: {:?}",
            back.metadata.annotations
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn with_no_node_agent_the_restore_warns_then_times_out_and_brings_the_app_back() -> Result<()>
{
    run_test("dr-noagent", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-b", 2, b"live", b"old").await?;
        let config = refill::controller::Config {
            namespace: s.ns.clone(),
            agent_grace: Duration::from_secs(2),
            ..Default::default()
        };
        let _controller = ControllerHandle::start_with(s.env.cluster, config).await?;
        // Extra files kept: nothing of the volume is touched before a node agent takes
        // the PodVolumeRestore, so that none taking it writes nothing.
        let spec = DataRestoreSpec {
            volume_timeout: Some("20s".into()),
            extra_files: refill::api::ExtraFiles::Keep,
            ..s.spec("b1", &["data"])
        };
        s.restore("r1", spec).await?;
        let api: Api<DataRestore> = Api::namespaced(s.client.clone(), &s.ns);
        let warned = wait_for("the Warning condition", TIMEOUT, || async {
            let dr = api.get("r1").await?;
            Ok(dr
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Warning" && c.status == "True"))
        })
        .await?;
        ensure!(
            warned
                .message
                .contains("no node agent has taken PodVolumeRestore")
                && warned.message.contains("node-b"),
            "{warned:?}"
        );
        let dr = s.finished("r1").await?;
        let status = dr.status.unwrap();
        ensure!(status.phase == Phase::Failed, "{status:#?}");
        let volume = &status.volumes[0];
        ensure!(
            volume
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("did not finish within 20s"),
            "{volume:#?}"
        );
        ensure!(
            !volume.partly_written,
            "no node agent took it: nothing was written"
        );
        ensure!(s.pvrs().await?.iter().all(|p| p.spec.cancel == Some(true)));
        s.no_stand_ins().await?;
        ensure!(s.replicas("web").await? == (2, None));
        s.ready_pods("web", 2).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_stand_in_the_quota_refuses_fails_at_once_and_brings_the_app_back() -> Result<()> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    run_test("dr-quota", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-a", 2, b"live", b"old").await?;
        let quotas: Api<ResourceQuota> = Api::namespaced(s.client.clone(), &s.ns);
        let quota = |cpu: &str| -> Result<ResourceQuota> {
            Ok(serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "compute", "namespace": s.ns},
                "spec": {"hard": {"requests.cpu": cpu, "requests.memory": "4Gi"}},
            }))?)
        };
        // A quota that asks every container for requests admits the stand-in (its idle
        // container carries the restore helper's) and the copier that empties the
        // volume first.
        quotas.create(&PostParams::default(), &quota("4")?).await?;
        let _controller = s.controller().await?;
        let agent = s.node_agent();
        s.restore("r1", s.spec("b1", &["data"])).await?;
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        drop(agent);

        // One that has no room for it refuses it: the volume fails at once with the
        // server's words, and the Deployment gets its replicas back.
        quotas
            .replace("compute", &PostParams::default(), &{
                let mut q = quota("10m")?;
                q.metadata.resource_version =
                    quotas.get("compute").await?.metadata.resource_version;
                q
            })
            .await?;
        let started = std::time::Instant::now();
        // Extra files kept: no copier comes before the stand-in.
        let keep = DataRestoreSpec {
            extra_files: refill::api::ExtraFiles::Keep,
            ..s.spec("b1", &["data"])
        };
        s.restore("r2", keep).await?;
        let dr = s.finished("r2").await?;
        let status = dr.status.unwrap();
        ensure!(status.phase == Phase::Failed, "{status:#?}");
        ensure!(
            status
                .errors
                .iter()
                .any(|e| e.contains("refused stand-in pod") && e.contains("exceeded quota")),
            "{:?}",
            status.errors
        );
        ensure!(
            started.elapsed() < Duration::from_secs(60),
            "a refusal is not retried until a timeout"
        );
        ensure!(
            s.pvrs().await?.iter().all(|p| p
                .labels()
                .get(labels::RESTORE_NAME)
                .map(String::as_str)
                != Some("r2"))
        );
        web_at_two_unmarked(&s).await?;
        let consumer = &status.consumers[0];
        ensure!(consumer.state == ConsumerState::Resumed, "{consumer:#?}");
        Ok(())
    })
    .await
}

/// Takes refill's lock annotation off Deployment `web`, as `kubectl replace`, a forced
/// Helm upgrade or an Argo CD Replace sync do; the count it was stopped at stays.
async fn lose_the_lock(s: &Scene) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.ns);
    let gone = json!({"metadata": {"annotations": {
        labels::QUIESCED_BY: null,
        labels::QUIESCED_BY_RESTORE: null,
    }}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(gone))
        .await?;
    ensure!(
        s.replicas("web").await? == (0, None),
        "the lock is gone, the app at 0"
    );
    Ok(())
}

/// A volume phase a restore is held in while refill's lock is taken off its Deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The app's pods stay Terminating (a finalizer): the volume waits for them to go.
    Quiescing,
    /// The stand-in cannot be placed (its namespace gives new pods a node selector no
    /// node matches) until a test binds it to its node.
    StartingStandIn,
    /// No node agent takes the PodVolumeRestore until one starts.
    Restoring,
    /// The stand-in stays Terminating (a finalizer) once refill deleted it.
    RemovingStandIn,
}

/// The namespace annotation of the PodNodeSelector admission plugin: pods made in the
/// namespace get its node selector.
const NODE_SELECTOR: &str = "scheduler.alpha.kubernetes.io/node-selector";

/// Gives the pods made from now on in the scene's namespace a node selector no node
/// matches (`on`), or stops doing so.
async fn place_new_pods_nowhere(s: &Scene, on: bool) -> Result<()> {
    let selector = on.then(|| format!("refill.test/nowhere={}", s.ns));
    let patch = json!({"metadata": {"annotations": {NODE_SELECTOR: selector}}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(s.client.clone())
        .patch(&s.ns, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Starts restore `name` of `web`, holds it in `held`, takes refill's lock off `web`
/// there, and lets the restore go on. `agent` is the node agent, started here when the
/// hold needs none until then.
async fn lose_the_lock_while(
    s: &Scene,
    name: &str,
    held: Held,
    agent: &mut Option<refill_e2e::node_agent::NodeAgentHandle>,
) -> Result<()> {
    let mut spec = s.spec("b1", &["data"]);
    match held {
        Held::Quiescing => {
            let pods = s.ready_pods("web", 2).await?;
            let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            fixture::hold_pods(&s.client, &s.ns, &names).await?;
        }
        Held::StartingStandIn => {
            place_new_pods_nowhere(s, true).await?;
            // Extra files kept: no copier comes first, which would wait unplaced too.
            spec.extra_files = refill::api::ExtraFiles::Keep;
        }
        // Extra files kept: the stand-in goes as soon as the data is in, and the hold
        // on it keeps the volume in RemovingStandIn. A restore that deletes extra
        // files tidies in the stand-in first, and passes RemovingStandIn only for the
        // moment restore-wait takes to exit.
        Held::RemovingStandIn => spec.extra_files = refill::api::ExtraFiles::Keep,
        Held::Restoring => {}
    }
    s.restore(name, spec).await?;
    match held {
        Held::Quiescing => {
            let waiting = "waiting for pods to release the volume";
            s.wait_volume_saying(name, VolumePhase::Quiescing, waiting)
                .await?;
        }
        Held::StartingStandIn => {
            let dr = s.wait_volume(name, VolumePhase::StartingStandIn).await?;
            let stand_in = stand_in_of(s, &dr).await?;
            let spec = stand_in.spec.clone().unwrap_or_default();
            let selector = spec.node_selector.unwrap_or_default();
            ensure!(
                spec.node_name.is_none() && selector.contains_key("refill.test/nowhere"),
                "the stand-in must wait unplaced: {:?}",
                stand_in.metadata
            );
            // The app's pods, made again after the restore, go where they used to.
            place_new_pods_nowhere(s, false).await?;
        }
        Held::Restoring => {
            s.wait_volume(name, VolumePhase::Restoring).await?;
        }
        Held::RemovingStandIn => {
            let dr = s.wait_volume(name, VolumePhase::Restoring).await?;
            let stand_in = stand_in_of(s, &dr).await?.name_any();
            fixture::hold_pods(&s.client, &s.ns, &[stand_in]).await?;
            *agent = Some(s.node_agent());
            s.wait_volume(name, VolumePhase::RemovingStandIn).await?;
        }
    }
    lose_the_lock(s).await?;
    match held {
        Held::Quiescing | Held::RemovingStandIn => fixture::release_pods(&s.client, &s.ns).await,
        Held::StartingStandIn => {
            let dr = fixture::get_whole(&s.client, &s.ns, name).await?;
            let stand_in = stand_in_of(s, &dr).await?.name_any();
            fixture::bind_pod(&s.client, &s.ns, &stand_in, "node-a").await
        }
        Held::Restoring => {
            *agent = Some(s.node_agent());
            Ok(())
        }
    }
}

/// The stand-in pod the first volume of `dr` records.
async fn stand_in_of(s: &Scene, dr: &DataRestore) -> Result<Pod> {
    let name = dr
        .status
        .as_ref()
        .and_then(|st| st.volumes[0].stand_in_pod.clone())
        .context("no stand-in recorded")?;
    Ok(Api::<Pod>::namespaced(s.client.clone(), &s.ns)
        .get(&name)
        .await?)
}

/// Checks that `web` is back at 2 replicas with none of refill's marks, that the
/// restore's status says so, and that no stand-in is left.
async fn web_back(s: &Scene, dr: &DataRestore) -> Result<()> {
    let consumer = &dr.status.as_ref().unwrap().consumers[0];
    ensure!(consumer.state == ConsumerState::Resumed, "{consumer:#?}");
    web_at_two_unmarked(s).await?;
    s.ready_pods("web", 2).await?;
    s.no_stand_ins().await
}

#[tokio::test]
async fn a_lost_lock_still_brings_the_app_back_and_the_status_tells_the_truth() -> Result<()> {
    run_test("dr-lost-lock", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-a", 2, b"bad", b"good").await?;
        let _controller = s.controller().await?;

        // Lost in each phase that holds the app stopped, then the restore completes.
        for held in [
            Held::Quiescing,
            Held::StartingStandIn,
            Held::Restoring,
            Held::RemovingStandIn,
        ] {
            let name = format!("{held:?}").to_lowercase();
            std::fs::write(dir.join("f"), b"bad")?;
            let mut agent = match held {
                Held::Quiescing | Held::StartingStandIn => Some(s.node_agent()),
                Held::Restoring | Held::RemovingStandIn => None,
            };
            let lost = lose_the_lock_while(&s, &name, held, &mut agent).await;
            // Whatever happened: a pod kept by a finalizer would keep the namespace.
            fixture::release_pods(&s.client, &s.ns).await?;
            lost.with_context(|| format!("held in {held:?}"))?;
            let dr = s.finished(&name).await?;
            ensure!(phase(&dr) == Phase::Completed, "{held:?}: {:#?}", dr.status);
            ensure!(fixture::read(&dir, "f")? == b"good", "{held:?}");
            web_back(&s, &dr)
                .await
                .with_context(|| format!("held in {held:?}"))?;
        }

        // Lost while the restore waits, then it is canceled: the rollback brings it back.
        s.restore("canceled", s.spec("b1", &["data"])).await?;
        s.wait_volume("canceled", VolumePhase::Restoring).await?;
        lose_the_lock(&s).await?;
        Api::<DataRestore>::namespaced(s.client.clone(), &s.ns)
            .patch(
                "canceled",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await?;
        let dr = s.finished("canceled").await?;
        ensure!(phase(&dr) == Phase::Canceled, "{:#?}", dr.status);
        web_back(&s, &dr).await
    })
    .await
}

#[tokio::test]
async fn a_deployment_deleted_while_stopped_reads_as_gone_not_resumed() -> Result<()> {
    run_test("dr-gone", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-a", 1, b"bad", b"good").await?;
        let _controller = s.controller().await?;
        s.restore("r1", s.spec("b1", &["data"])).await?;
        s.wait_volume("r1", VolumePhase::Restoring).await?;
        Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
            .delete("web", &Default::default())
            .await?;
        let _agent = s.node_agent();
        let dr = s.finished("r1").await?;
        let consumer = &dr.status.as_ref().unwrap().consumers[0];
        ensure!(consumer.state == ConsumerState::Gone, "{consumer:#?}");
        Ok(())
    })
    .await
}

/// The objects of `manifests/admission-guard.yaml`, made to guard only namespace `ns`
/// (a policy of its own name, its images listed in a ConfigMap there), so that the
/// tests beside this one are not limited by it.
fn guard_for(ns: &str, images: &[&str]) -> Result<Vec<serde_json::Value>> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/admission-guard.yaml");
    let text = std::fs::read_to_string(path)?;
    let mut objects = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&text) {
        let mut object = <serde_json::Value as serde::Deserialize>::deserialize(doc)?;
        match object["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                object["metadata"]["name"] = json!(format!("refill-pods-{ns}"));
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                object["metadata"]["name"] = json!(format!("refill-pods-{ns}"));
                object["spec"]["policyName"] = json!(format!("refill-pods-{ns}"));
                object["spec"]["paramRef"]["namespace"] = json!(ns);
                object["spec"]["matchResources"] = json!({"namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": ns}
                }});
            }
            _ => {
                object["metadata"]["namespace"] = json!(ns);
                object["data"]["images"] = json!(images.join(","));
            }
        }
        objects.push(object);
    }
    Ok(objects)
}

/// Where an object of the guard (`kind`) is written: its ConfigMap in `ns`.
fn guard_api(client: &kube::Client, kind: &str, ns: &str) -> Api<kube::api::DynamicObject> {
    use kube::api::{ApiResource, GroupVersionKind};
    let (group, version, plural) = match kind {
        "ValidatingAdmissionPolicy" => (
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
        ),
        "ValidatingAdmissionPolicyBinding" => (
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
        ),
        _ => ("", "v1", "configmaps"),
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    if kind == "ConfigMap" {
        Api::namespaced_with(client.clone(), ns, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

/// A pod in `ns` as refill's ServiceAccount might be made to create it.
fn pod_as(ns: &str, name: &str, role: Option<&str>, image: &str, host_path: bool) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": image}]},
    });
    if let Some(role) = role {
        pod["metadata"]["labels"] = json!({labels::ROLE: role});
    }
    if host_path {
        pod["spec"]["volumes"] = json!([{"name": "h", "hostPath": {"path": "/"}}]);
    }
    serde_json::from_value(pod).expect("a pod")
}

#[tokio::test]
async fn the_admission_guard_lets_refill_restore_and_refuses_any_other_pod() -> Result<()> {
    run_test("dr-guard", |env| async move {
        let s = scene(env).await?;
        let images = [
            refill::controller::DEFAULT_STAND_IN_IMAGE,
            refill::controller::FALLBACK_HELPER_IMAGE,
            // The copier empties each volume before the node agent writes.
            refill::controller::DEFAULT_COPIER_IMAGE,
        ];
        let objects = guard_for(&s.ns, &images)?;
        let apply = PatchParams::apply("refill-e2e").force();
        for object in &objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let api = guard_api(&s.client, kind, &s.ns);
            api.patch(name, &apply, &Patch::Apply(object)).await?;
        }
        // The policy and binding are cluster-wide: they go whatever the outcome.
        let checked = async {
            let (sa_ns, sa) = refill_e2e::fixture::CONTROLLER_SA;
            let as_refill: Api<Pod> = Api::namespaced(
                s.env.cluster.service_account_client(sa_ns, sa).await?,
                &s.ns,
            );
            let refused = |result: kube::Result<Pod>| match result {
                Err(kube::Error::Api(e)) if e.message.contains("refill-pods") => Ok(e.message),
                other => Err(anyhow::anyhow!("not refused by the guard: {other:?}")),
            };
            // A policy is in force once the API server's informers have it and its
            // ConfigMap: a few seconds.
            let mut attempt = 0;
            let no_role = wait_for("the guard in force", TIMEOUT, || {
                attempt += 1;
                let pod = pod_as(&s.ns, &format!("plain-{attempt}"), None, images[0], false);
                let as_refill = as_refill.clone();
                async move {
                    // In force once its own rule answers: before that, the binding may be
                    // seen without its ConfigMap ("no params found").
                    let refusal = refused(as_refill.create(&PostParams::default(), &pod).await);
                    Ok(refusal
                        .ok()
                        .filter(|m| m.contains("stand-in and copier pods")))
                }
            })
            .await?;
            ensure!(no_role.contains("stand-in and copier pods"), "{no_role}");

            let dir = web_with_backup(&s, "node-a", 2, b"bad", b"good").await?;
            let _controller = s.controller().await?;
            let _agent = s.node_agent();
            s.restore("r1", s.spec("b1", &["data"])).await?;
            let dr = s.finished("r1").await?;
            ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
            ensure!(fixture::read(&dir, "f")? == b"good");
            ensure!(s.replicas("web").await? == (2, None));

            let host = pod_as(&s.ns, "host", Some(labels::ROLE_STAND_IN), images[0], true);
            let message = refused(as_refill.create(&PostParams::default(), &host).await)?;
            ensure!(message.contains("hostPath"), "{message}");
            let other = pod_as(
                &s.ns,
                "other",
                Some(labels::ROLE_COPIER),
                "busybox:1",
                false,
            );
            let message = refused(as_refill.create(&PostParams::default(), &other).await)?;
            ensure!(message.contains("busybox:1"), "{message}");

            anyhow::Ok(())
        }
        .await;
        for object in objects.iter().filter(|o| o["kind"] != "ConfigMap") {
            let kind = object["kind"].as_str().unwrap_or_default();
            let api = guard_api(&s.client, kind, &s.ns);
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            api.delete(name, &Default::default()).await?;
        }
        checked
    })
    .await
}

/// The DataRestore object stays the same size whatever the number of its volumes: each
/// volume's record is kept in its VolumePluginRestore, and the DataRestore holds counts.
/// A restore of 300 claims ends with a status no larger than one of 30 (but for the
/// digits of its counts), and every volume's record is in its VolumePluginRestore.
#[tokio::test]
async fn the_status_does_not_grow_with_the_number_of_volumes() -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    run_test("dr-size", |env| async move {
        let s = Scene::new(env, Duration::from_secs(600)).await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let mut sizes = Vec::new();
        for n in [30usize, 300] {
            let claims: Vec<String> = (0..n).map(|i| format!("c{n}-{i}")).collect();
            futures::stream::iter(&claims)
                .map(|claim| s.volume(claim, "node-a", &[("f", b"live")]))
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await?;
            let pods: Vec<String> = claims.iter().map(|c| format!("p-{c}")).collect();
            let backed_up: Vec<BackedUpVolume> = claims
                .iter()
                .zip(&pods)
                .map(|(claim, pod)| s.backed_up(claim, pod, &[("f", b"good")]))
                .collect();
            let backup = format!("b{n}");
            s.backup(&backup, &backed_up).await?;
            let name = format!("r{n}");
            let wanted: Vec<&str> = claims.iter().map(String::as_str).collect();
            s.restore(&name, s.spec(&backup, &wanted)).await?;
            let dr = s.finished(&name).await?;
            ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
            let status = dr.status.clone().unwrap_or_default();
            // `finished` reads the volumes back from their VolumePluginRestores.
            ensure!(
                status.volumes.len() == n
                    && status
                        .volumes
                        .iter()
                        .all(|v| v.phase == VolumePhase::Completed),
                "{} volume records read back of {n}",
                status.volumes.len()
            );
            let counts = status.volume_counts.clone().unwrap_or_default();
            ensure!(
                counts.total as usize == n
                    && counts.phases.get(&VolumePhase::Completed) == Some(&(n as u32)),
                "{counts:#?}"
            );
            let stored = Api::<DataRestore>::namespaced(s.client.clone(), &s.ns)
                .get(&name)
                .await?;
            sizes.push(serde_json::to_vec(&stored.status)?.len());
        }
        eprintln!(
            "status bytes: 30 claims {}, 300 claims {}",
            sizes[0], sizes[1]
        );
        ensure!(
            sizes[1] <= sizes[0] + 64,
            "the status grew with the volumes: {} bytes for 30 claims, {} for 300",
            sizes[0],
            sizes[1]
        );
        Ok(())
    })
    .await
}

/// A restore an earlier refill left under way, its volumes and consumers in the
/// DataRestore's own status and no VolumePluginRestore holding a record, is carried
/// across the upgrade: the records are moved into VolumePluginRestores, the restore
/// completes and its consumers come back.
#[tokio::test]
async fn a_restore_left_in_the_old_status_format_is_carried_over() -> Result<()> {
    run_test("dr-upgrade", |env| async move {
        let s = scene(env).await?;
        let dir = web_with_backup(&s, "node-a", 2, b"bad", b"good").await?;
        let controller = s.controller().await?;
        s.restore("r1", s.spec("b1", &["data"])).await?;
        let whole = s.wait_volume("r1", VolumePhase::Restoring).await?;
        controller.kill().await;
        ensure!(s.replicas("web").await?.0 == 0, "the app is stopped");

        // The DataRestore as an earlier refill wrote it: records in its status, and no
        // VolumePluginRestore of the kind that holds them.
        let old = whole.status.clone().unwrap_or_default();
        let records: Api<VolumePluginRestore> = Api::namespaced(s.client.clone(), &s.ns);
        for vpr in records.list(&ListParams::default()).await?.items {
            records.delete(&vpr.name_any(), &Default::default()).await?;
        }
        let restores: Api<DataRestore> = Api::namespaced(s.client.clone(), &s.ns);
        // As refill wrote it: server-side apply under its field manager, counts unset.
        let mut status = serde_json::to_value(&old)?;
        status["volumes"] = json!(old.volumes);
        status["consumers"] = json!(old.consumers);
        for newer in ["volumeCounts", "consumerCounts", "needsAttention"] {
            status.as_object_mut().map(|o| o.remove(newer));
        }
        let patch = json!({
            "apiVersion": refill::api::API_VERSION, "kind": "DataRestore", "status": status,
        });
        restores
            .patch_status(
                "r1",
                &PatchParams::apply(labels::FIELD_MANAGER).force(),
                &Patch::Apply(patch),
            )
            .await?;
        let stored = restores.get("r1").await?;
        let stored_volumes = stored.status.as_ref().map_or(0, |st| st.volumes.len());
        ensure!(
            stored_volumes == 1,
            "the old format was not stored: {stored_volumes}"
        );

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let dr = s.finished("r1").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        ensure!(fixture::read(&dir, "f")? == b"good");
        ensure!(s.replicas("web").await? == (2, None), "the app is not back");
        let status = dr.status.clone().unwrap_or_default();
        ensure!(
            status.volumes.len() == 1 && status.consumers.len() == 1,
            "the records were not carried into VolumePluginRestores: {status:#?}"
        );
        let stored = restores.get("r1").await?;
        ensure!(
            stored
                .status
                .as_ref()
                .is_some_and(|st| st.volumes.is_empty()),
            "the old records stayed in the DataRestore"
        );
        Ok(())
    })
    .await
}

/// The VolumePluginRestores that keep a running restore's records deleted by hand
/// while no controller held them in memory: the restore cannot be read back, and says
/// so in a Stalled condition (reason CannotProceed) and what a person does next,
/// rather than only in the controller's log.
#[tokio::test]
async fn a_restore_whose_records_were_deleted_says_it_cannot_go_on() -> Result<()> {
    run_test("dr-records-lost", |env| async move {
        let s = scene(env).await?;
        web_with_backup(&s, "node-a", 2, b"bad", b"good").await?;
        let controller = s.controller().await?;
        s.restore("r1", s.spec("b1", &["data"])).await?;
        s.wait_volume("r1", VolumePhase::Restoring).await?;
        controller.kill().await;
        let records: Api<VolumePluginRestore> = Api::namespaced(s.client.clone(), &s.ns);
        for vpr in records.list(&ListParams::default()).await?.items {
            records.delete(&vpr.name_any(), &Default::default()).await?;
        }

        let _controller = s.controller().await?;
        let restores: Api<DataRestore> = Api::namespaced(s.client.clone(), &s.ns);
        let stalled = wait_for("the Stalled condition", Duration::from_secs(60), || async {
            let dr = restores.get("r1").await?;
            let conditions = dr.status.map(|st| st.conditions).unwrap_or_default();
            Ok(conditions.into_iter().find(|c| {
                c.type_ == "Stalled" && c.status == "True" && c.reason == "CannotProceed"
            }))
        })
        .await?;
        ensure!(
            stalled.message.contains("1 of the 1 VolumePluginRestores")
                && stalled.message.contains(labels::ORIGINAL_REPLICAS),
            "{stalled:#?}"
        );
        ensure!(
            s.replicas("web").await?.0 == 0,
            "the app came back without its record"
        );
        Ok(())
    })
    .await
}
