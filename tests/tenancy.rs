//! A team holding only the built-in `edit` role in its namespace, treated as an
//! attacker: each thing it can write (a DataRestoreRequest, pods, the labels of its
//! workloads) is aimed at refill. Each attack ends refused or harmless, and the
//! controller serves on without a restart.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use refill::api::{DataRestoreRequest, VolumePhase};
use refill::labels;
use refill_e2e::fixture::{self, ControllerHandle, Scene};
use refill_e2e::{run_test, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_team_s_hostile_request_and_fake_stand_in_are_refused_and_refill_serves_on() -> Result<()>
{
    run_test("tenancy", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        let dir = s.volume("data", "node-a", &[("f", b"bad")]).await?;
        s.deployment("web", 1, &["data"]).await?;
        s.backup("b1", &[s.backed_up("data", "web-0", &[("f", b"good")])])
            .await?;
        let team = fixture::team_client(&s.env).await?;
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
        let requests: Api<DataRestoreRequest> = Api::namespaced(team.clone(), &s.ns);

        // A backupName with a two-byte character across byte 57, where label values
        // are cut: it once panicked the controller for every restore of the cluster.
        let wide = fixture::wide_backup_name();
        requests
            .create(
                &PostParams::default(),
                &fixture::request("wide", &wide, &["data"])?,
            )
            .await?;
        // Extra files kept: the claim's files are the team's until the node agent writes,
        // and it must not write beside the lookalike below.
        let mut fix = fixture::request("fix", "b1", &["data"])?;
        fix.spec.extra_files = refill::api::ExtraFiles::Keep;
        requests.create(&PostParams::default(), &fix).await?;
        fixture::refused_naming(&requests, "wide", "spec.backupName", TIMEOUT).await?;

        // While the data would move, a pod of the team's wearing the stand-in's labels
        // and the restore's UID mounts the claim: it is a writer like any other.
        let fix = wait_for("fix carried out", TIMEOUT, || async {
            let fix = requests.get("fix").await?;
            let name = fix.status.as_ref().and_then(|s| s.data_restore.clone());
            Ok(name.and_then(|n| n.split_once('/').map(|(_, n)| n.to_string())))
        })
        .await?;
        s.wait_volume(&fix, VolumePhase::Restoring).await?;
        let pods: Api<Pod> = Api::namespaced(team.clone(), &s.ns);
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
        let fake: Pod = serde_json::from_value(json!({
            "metadata": {"name": "not-a-stand-in", "labels": stand_in.labels()},
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "writer", "image": "busybox:1",
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        }))?;
        pods.create(&PostParams::default(), &fake).await?;
        let status = fixture::request_finished(&requests, "fix", TIMEOUT)
            .await?
            .status
            .unwrap_or_default();
        let volume = &status.restore.volumes[0];
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
        ensure!(controller.is_running(), "the controller ended");
        Ok(())
    })
    .await
}
