//! A team holding only the built-in `edit` role in its namespace, treated as an
//! attacker: each thing it can write (a DataRestoreRequest, pods, the labels of its
//! workloads) is aimed at refill. Each attack ends refused or harmless, the controller
//! serves on without a restart, and nothing of another namespace changes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{ApiResource, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use refill::api::{
    ConsumerPolicy, ConsumerState, DataRestoreRequest, DataRestoreRequestStatus, Phase, VolumePhase,
};
use refill::labels;
use refill_e2e::fixture::{self, AccessMode, ControllerHandle, LocalVolume, Scene};
use refill_e2e::flux::{self, Kind};
use refill_e2e::{TestNamespace, run_test, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// The team's side of a scene: its client, its requests, and a controller that alone
/// serves the scene's requests.
struct Team {
    client: Client,
    requests: Api<DataRestoreRequest>,
    controller: ControllerHandle,
}

/// The team of the scene's namespace (see [`fixture::team_client`]), served by a
/// controller of the test's own.
async fn serve_team(s: &Scene) -> Result<Team> {
    let client = fixture::team_client(&s.env).await?;
    let config = refill::controller::Config {
        namespace: s.ns.clone(),
        requests: true,
        // Its own requests only: other suites' controllers serve theirs.
        requests_namespace: Some(s.ns.clone()),
        ..Default::default()
    };
    // This test's controller alone serves its requests.
    refill_e2e::in_cluster::remove_controller(&s.client, s.timeout).await?;
    let controller = ControllerHandle::start_with(s.env.cluster, config).await?;
    Ok(Team {
        requests: Api::namespaced(client.clone(), &s.ns),
        client,
        controller,
    })
}

/// Another namespace of the cluster, where the team has no role: a Deployment on a
/// claim of its own and a ConfigMap, made by the admin.
struct Neighbour {
    ns: TestNamespace,
}

impl Neighbour {
    /// Makes what the namespace holds.
    async fn fill(&self, s: &Scene) -> Result<()> {
        let ns = self.ns.name();
        let volume = LocalVolume {
            ns,
            claim: "data",
            access: AccessMode::ReadWriteOnce,
            pv: &format!("{ns}-data"),
            node: "node-b",
            dir: &s.scratch.join("neighbour"),
            labels: &self.ns.labels(),
        };
        fixture::bound_local_volume(&s.client, &volume).await?;
        fixture::deployment(&s.client, ns, "web", 1, &["data"]).await?;
        fixture::wait_ready_pods(&s.client, ns, "web", 1, s.timeout).await?;
        fixture::wait_settled(&s.client, ns, "web", 1, s.timeout).await?;
        let settings: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "settings"}, "data": {"mode": "primary"},
        }))?;
        self.ns
            .api::<ConfigMap>()
            .create(&PostParams::default(), &settings)
            .await?;
        Ok(())
    }

    /// `Kind/name` → resourceVersion of what the namespace holds: what a restore could
    /// touch (see [`fixture::resource_versions`]), ConfigMaps, and Flux's objects.
    async fn versions(&self, s: &Scene) -> Result<BTreeMap<String, String>> {
        let ns = self.ns.name();
        let mut versions = fixture::resource_versions(&s.client, ns).await?;
        let kinds = [
            ApiResource::erase::<ConfigMap>(&()),
            Kind::Bucket.resource(),
            Kind::Kustomization.resource(),
        ];
        for resource in &kinds {
            fixture::add_versions(&s.client, ns, resource, &mut versions).await?;
        }
        Ok(versions)
    }

    async fn unchanged(&self, s: &Scene, before: &BTreeMap<String, String>) -> Result<()> {
        let after = self.versions(s).await?;
        ensure!(
            *before == after,
            "the team's attacks changed namespace {}:\n{}",
            self.ns.name(),
            fixture::changed_versions(before, &after)
        );
        Ok(())
    }
}

/// Runs `attacks` with a [`Neighbour`] beside the scene, and deletes the neighbour
/// whatever they found.
async fn beside_a_neighbour(
    s: &Scene,
    attacks: impl AsyncFnOnce(&Neighbour) -> Result<()>,
) -> Result<()> {
    let neighbour = Neighbour {
        ns: TestNamespace::create(&s.client, "tenancy-neighbour").await?,
    };
    let outcome = match neighbour.fill(s).await {
        Ok(()) => attacks(&neighbour).await,
        Err(e) => Err(e),
    };
    neighbour.ns.cleanup().await?;
    outcome
}

/// Waits until the team's request `name` has ended, and checks that it completed: the
/// claim's file `f`, in `dir`, is the backup's. Returns the request's status.
async fn completed(team: &Team, name: &str, dir: &Path) -> Result<DataRestoreRequestStatus> {
    let status = fixture::request_finished(&team.requests, name, TIMEOUT)
        .await?
        .status
        .unwrap_or_default();
    ensure!(status.restore.phase == Phase::Completed, "{status:#?}");
    ensure!(
        fixture::read(dir, "f")? == b"good",
        "{name}: not the backup's file"
    );
    Ok(status)
}

/// Checks that `text`, which is `what`, names none of `secrets`.
fn names_none_of(what: &str, text: &str, secrets: &[&str]) -> Result<()> {
    for secret in secrets {
        ensure!(!text.contains(secret), "{what} tells of {secret}: {text}");
    }
    Ok(())
}

#[tokio::test]
async fn a_team_s_hostile_request_and_fake_stand_in_are_refused_and_refill_serves_on() -> Result<()>
{
    run_test("tenancy", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        let dir = s.volume("data", "node-a", &[("f", b"bad")]).await?;
        s.deployment("web", 1, &["data"]).await?;
        s.backup("b1", &[s.backed_up("data", "web-0", &[("f", b"good")])])
            .await?;
        let team = serve_team(&s).await?;
        let requests = &team.requests;
        beside_a_neighbour(&s, async |neighbour| {
            let versions = neighbour.versions(&s).await?;

            // A backupName with a two-byte character across byte 57, where label values
            // are cut: it once panicked the controller for every restore of the cluster.
            let wide = fixture::wide_backup_name();
            requests
                .create(
                    &PostParams::default(),
                    &fixture::request("wide", &wide, &["data"])?,
                )
                .await?;
            // The neighbour's claim, named as the team's request may not.
            let theirs = format!("{}/data", neighbour.ns.name());
            requests
                .create(
                    &PostParams::default(),
                    &fixture::request("theirs", "b1", &[theirs])?,
                )
                .await?;
            // Extra files kept: the claim's files are the team's until the node agent
            // writes, and it must not write beside the lookalike below.
            let mut fix = fixture::request("fix", "b1", &["data"])?;
            fix.spec.extra_files = refill::api::ExtraFiles::Keep;
            requests.create(&PostParams::default(), &fix).await?;
            fixture::refused_naming(requests, "wide", "spec.backupName", TIMEOUT).await?;
            fixture::refused_naming(requests, "theirs", "spec.pvcs[0]", TIMEOUT).await?;

            // While the data would move, a pod of the team's wearing the stand-in's
            // labels and the restore's UID mounts the claim: it is a writer like any
            // other.
            let fix = fixture::carried_out_by(requests, "fix", TIMEOUT).await?;
            s.wait_volume(&fix, VolumePhase::Restoring).await?;
            let pods: Api<Pod> = Api::namespaced(team.client.clone(), &s.ns);
            let stand_ins = pods
                .list(&ListParams::default().labels(&format!(
                    "{}={}",
                    labels::ROLE,
                    labels::ROLE_STAND_IN
                )))
                .await?;
            let stand_in = stand_ins
                .items
                .first()
                .ok_or_else(|| anyhow::anyhow!("no stand-in"))?;
            let fake = writer("not-a-stand-in", stand_in.labels())?;
            pods.create(&PostParams::default(), &fake).await?;
            let status = fixture::request_finished(requests, "fix", TIMEOUT)
                .await?
                .status
                .unwrap_or_default();
            // What the team reads: the volume that needs its eyes, in its request.
            let volume = &status.restore.needs_attention[0];
            ensure!(
                volume.phase == VolumePhase::Failed
                    && volume
                        .message
                        .as_deref()
                        .unwrap_or_default()
                        .contains("not-a-stand-in"),
                "{status:#?}"
            );
            ensure!(
                fixture::read(&dir, "f")? == b"bad",
                "written beside a writer"
            );
            ensure!(s.replicas("web").await? == (1, None));
            ensure!(team.controller.is_running(), "the controller ended");
            neighbour.unchanged(&s, &versions).await
        })
        .await
    })
    .await
}

/// A pod of the team's named `name` with `labels`, on node-a, mounting the claim
/// `data`: what a team can make of any name and labels it can read.
fn writer(name: &str, labels: &BTreeMap<String, String>) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "writer", "image": "busybox:1",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }))?)
}

#[tokio::test]
async fn a_forged_flux_label_in_a_team_s_request_pauses_nothing_and_tells_nothing() -> Result<()> {
    run_test("tenancy-forged", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        let dir = s.volume("data", "node-a", &[("f", b"bad")]).await?;
        s.deployment("web", 1, &["data"]).await?;
        s.backup("b1", &[s.backed_up("data", "web-0", &[("f", b"good")])])
            .await?;
        let team = serve_team(&s).await?;
        let _agent = s.node_agent();
        beside_a_neighbour(&s, async |neighbour| {
            // A platform team's Kustomization in the neighbour's namespace, applying
            // something else entirely.
            let (platform, name) = (neighbour.ns.name(), "platform-apps");
            let cluster_dir = &s.env.cluster.dir;
            let before =
                flux::platform_app(&s.client, cluster_dir, platform, name, TIMEOUT).await?;
            let versions = neighbour.versions(&s).await?;
            let hidden = flux::flux_api(&team.client, Kind::Kustomization, platform)
                .get(name)
                .await;
            ensure!(
                matches!(&hidden, Err(kube::Error::Api(e)) if e.code == 403),
                "the team reads another namespace's Kustomization: {hidden:?}"
            );

            // The team's own Deployment, carrying that Kustomization's marks all the
            // same, and the team's request for its claim.
            Api::<Deployment>::namespaced(team.client.clone(), &s.ns)
                .patch(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(flux::kustomization_marks(platform, name)),
                )
                .await?;
            let fix = fixture::request("fix", "b1", &["data"])?;
            team.requests.create(&PostParams::default(), &fix).await?;
            let status = completed(&team, "fix", &dir).await?;

            // Not paused, not even written to.
            let after = flux::flux_api(&s.client, Kind::Kustomization, platform)
                .get(name)
                .await?;
            ensure!(
                after.resource_version() == before.resource_version()
                    && after.data["spec"].get("suspend").is_none(),
                "the forged label reached {:?} {:?}",
                after.data["spec"],
                after.metadata.annotations
            );
            // The request says the marks were not backed, and nothing of the object:
            // neither its name nor its namespace, in its status or the Events the team
            // reads.
            ensure!(
                status.restore.git_ops.is_empty() && status.restore.git_ops_counts.is_none(),
                "{status:#?}"
            );
            let told = format!("Deployment {}/web carries Flux Kustomization marks", s.ns);
            ensure!(
                status.restore.warnings.iter().any(|w| w.starts_with(&told)),
                "{:?}",
                status.restore.warnings
            );
            let events = Api::<Event>::namespaced(team.client.clone(), &s.ns)
                .list(&ListParams::default())
                .await?;
            let events = serde_json::to_string(&events.items)?;
            let status = serde_json::to_string(&status)?;
            names_none_of("the request's status", &status, &[platform, name])?;
            names_none_of("the team's Events", &events, &[platform, name])?;
            ensure!(team.controller.is_running(), "the controller ended");
            neighbour.unchanged(&s, &versions).await
        })
        .await
    })
    .await
}

#[tokio::test]
async fn a_pod_the_team_makes_under_a_stopped_bare_pod_s_name_is_left_as_it_is() -> Result<()> {
    run_test("tenancy-bare", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        let dir = s.volume("data", "node-a", &[("f", b"bad")]).await?;
        let team = serve_team(&s).await?;
        fixture::bare_pod(&team.client, &s.ns, "solo", &["data"]).await?;
        s.ready_pods("solo", 1).await?;
        s.backup("b1", &[s.backed_up("data", "solo", &[("f", b"good")])])
            .await?;
        beside_a_neighbour(&s, async |neighbour| {
            let versions = neighbour.versions(&s).await?;
            let mut detach = fixture::request("detach", "b1", &["data"])?;
            detach.spec.consumers = ConsumerPolicy::Detach;
            team.requests
                .create(&PostParams::default(), &detach)
                .await?;
            // No node agent yet: the restore waits with the team's pod deleted.
            let restore = fixture::carried_out_by(&team.requests, "detach", TIMEOUT).await?;
            s.wait_volume(&restore, VolumePhase::Restoring).await?;

            // Another pod of the team's under its name, which is not the one refill
            // recorded: another image, other labels, no claim.
            let pods: Api<Pod> = Api::namespaced(team.client.clone(), &s.ns);
            let other: Pod = serde_json::from_value(json!({
                "metadata": {"name": "solo", "labels": {"app": "other"}},
                "spec": {"containers": [{"name": "other", "image": "registry.local/other:2"}]},
            }))?;
            let other = pods.create(&PostParams::default(), &other).await?;
            let _agent = s.node_agent();
            let status = completed(&team, "detach", &dir).await?;

            // Neither deleted nor written over, and the status says so.
            let now = pods.get("solo").await?;
            let image = now
                .spec
                .as_ref()
                .and_then(|s| s.containers[0].image.clone());
            ensure!(
                now.uid() == other.uid() && image.as_deref() == Some("registry.local/other:2"),
                "refill replaced the team's pod: {:?}",
                now.metadata
            );
            let counts = status.restore.consumer_counts.clone().unwrap_or_default();
            ensure!(
                counts.total == 1 && counts.states.get(&ConsumerState::Replaced) == Some(&1),
                "{counts:#?}"
            );
            let told = format!("another pod took the name of Pod {}/solo", s.ns);
            ensure!(
                status.restore.warnings.iter().any(|w| w.contains(&told)),
                "{:?}",
                status.restore.warnings
            );
            ensure!(team.controller.is_running(), "the controller ended");
            neighbour.unchanged(&s, &versions).await
        })
        .await
    })
    .await
}

#[tokio::test]
async fn a_stand_in_lookalike_made_first_is_deleted_and_refill_s_own_stand_in_restores()
-> Result<()> {
    run_test("tenancy-lookalike", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        let dir = s.volume("data", "node-a", &[("f", b"bad")]).await?;
        let web = s.deployment("web", 1, &["data"]).await?;
        s.backup("b1", &[s.backed_up("data", "web-0", &[("f", b"good")])])
            .await?;
        let team = serve_team(&s).await?;
        let _agent = s.node_agent();
        beside_a_neighbour(&s, async |neighbour| {
            let versions = neighbour.versions(&s).await?;
            // The app's pod stays Terminating once stopped: the volume waits in
            // Quiescing, before any stand-in, until it is released.
            fixture::hold_pods(&s.client, &s.ns, &[web[0].name_any()]).await?;
            let attacked = lookalike_while_quiescing(&s, &team).await;
            fixture::release_pods(&s.client, &s.ns).await?;
            let (restore, lookalike) = attacked?;
            completed(&team, "fix", &dir).await?;
            // Refill's own stand-in, which its PodVolumeRestore names, carried the
            // restore.
            let volume = &s
                .finished(&restore)
                .await?
                .status
                .unwrap_or_default()
                .volumes[0];
            let uid = s.restore_uid(&restore).await?;
            let pvr = s
                .pvrs()
                .await?
                .into_iter()
                .find(|p| p.labels().get(labels::DATA_RESTORE_UID) == Some(&uid))
                .ok_or_else(|| anyhow::anyhow!("no PodVolumeRestore of {restore}"))?;
            ensure!(
                volume.stand_in_uid.is_some()
                    && volume.stand_in_uid != lookalike
                    && pvr.spec.pod.uid == volume.stand_in_uid,
                "{volume:#?} {:?}",
                pvr.spec.pod
            );
            s.no_stand_ins().await?;
            ensure!(team.controller.is_running(), "the controller ended");
            neighbour.unchanged(&s, &versions).await
        })
        .await
    })
    .await
}

/// The team's request `fix`, and, while its volume waits in Quiescing, a pod of the
/// team's under the stand-in's name with its labels, the restore's UID among them;
/// waits until refill deleted that pod, the volume still in Quiescing. Returns the
/// DataRestore's name and the pod's UID.
async fn lookalike_while_quiescing(s: &Scene, team: &Team) -> Result<(String, Option<String>)> {
    let fix = fixture::request("fix", "b1", &["data"])?;
    team.requests.create(&PostParams::default(), &fix).await?;
    let restore = fixture::carried_out_by(&team.requests, "fix", TIMEOUT).await?;
    let waiting = "waiting for pods to release the volume";
    s.wait_volume_saying(&restore, VolumePhase::Quiescing, waiting)
        .await?;
    // Read here as the admin: the point is that names and labels can be copied.
    let uid = s.restore_uid(&restore).await?;
    let name = labels::stand_in_pod_name(&format!("{}/data", s.ns));
    let stand_in_labels = BTreeMap::from([
        (labels::ROLE.to_string(), labels::ROLE_STAND_IN.to_string()),
        (labels::DATA_RESTORE_UID.to_string(), uid),
    ]);
    let pods: Api<Pod> = Api::namespaced(team.client.clone(), &s.ns);
    let lookalike = pods
        .create(&PostParams::default(), &writer(&name, &stand_in_labels)?)
        .await?
        .uid();
    wait_for("the lookalike deleted", TIMEOUT, || async {
        let there = pods
            .get_opt(&name)
            .await?
            .is_some_and(|p| p.uid() == lookalike);
        Ok((!there).then_some(()))
    })
    .await?;
    let dr = s.wait_volume(&restore, VolumePhase::Quiescing).await?;
    let volume = &dr.status.unwrap_or_default().volumes[0];
    ensure!(
        volume.stand_in_uid.is_none(),
        "nothing else happened before: {volume:#?}"
    );
    Ok((restore, lookalike))
}
