//! Teams' DataRestoreRequests against the real local cluster, with the controller as
//! refill's ServiceAccount beside a simulated node agent. Each test uses its own
//! namespace for the team's claims, its requests, and as Velero's namespace, and its
//! controller serves the requests of that namespace only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use kube::Api;
use kube::api::PostParams;
use refill::api::{DataRestore, DataRestoreRequest, Phase};
use refill_e2e::fixture::{ControllerHandle, Scene};
use refill_e2e::node_agent::NodeAgentConfig;
use refill_e2e::{run_test, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// The request `name` as it is now.
async fn request(requests: &Api<DataRestoreRequest>, name: &str) -> Result<DataRestoreRequest> {
    Ok(requests.get(name).await?)
}

fn phase_of(request: &DataRestoreRequest) -> Phase {
    request
        .status
        .as_ref()
        .map(|s| s.restore.phase)
        .unwrap_or_default()
}

/// With one request at a time per namespace, the second of two waits, saying why and
/// with no DataRestore made for it, until the first ends; then it runs to the end.
#[tokio::test]
async fn past_the_per_namespace_cap_a_request_waits_for_an_earlier_one_to_end() -> Result<()> {
    run_test("drr-turns", |env| async move {
        let s = Scene::new(env, TIMEOUT).await?;
        s.volume("data", "node-a", &[("f", b"broken")]).await?;
        s.deployment("web", 1, &["data"]).await?;
        // 64 bytes at 16 a second: the first restore takes a few seconds.
        let backed_up = [7u8; 64];
        s.backup("b1", &[s.backed_up("data", "web-0", &[("f", &backed_up)])])
            .await?;
        let config = refill::controller::Config {
            namespace: s.ns.clone(),
            requests: true,
            requests_namespace: Some(s.ns.clone()),
            requests_per_namespace: 1,
            ..Default::default()
        };
        // This test's controller alone serves its requests.
        refill_e2e::in_cluster::remove_controller(&s.client, s.timeout).await?;
        let _controller = ControllerHandle::start_with(s.env.cluster, config).await?;
        let _agent = s.node_agent_with(NodeAgentConfig {
            bytes_per_second: Some(16),
            ..s.node_agent_config()
        });
        let requests: Api<DataRestoreRequest> = Api::namespaced(s.client.clone(), &s.ns);
        for name in ["first", "second"] {
            let request: DataRestoreRequest = serde_json::from_value(json!({
                "apiVersion": "refill.dev/v1alpha1", "kind": "DataRestoreRequest",
                "metadata": {"name": name},
                "spec": {"backupName": "b1", "pvcs": ["data"]},
            }))?;
            requests.create(&PostParams::default(), &request).await?;
        }

        // Until the first ends, the second waits: no DataRestore, and its status says
        // why, naming the cap and the flag.
        let saw_waiting = AtomicBool::new(false);
        let first = wait_for("the first request to end", TIMEOUT, || async {
            // The second first: had it begun, the first had ended before.
            let second = request(&requests, "second").await?;
            let first = request(&requests, "first").await?;
            let status = second.status.clone().unwrap_or_default();
            if status.data_restore.is_some() && !phase_of(&first).is_terminal() {
                bail!("the second request began while the first runs: {status:#?}");
            }
            let reconciling = status
                .restore
                .conditions
                .iter()
                .find(|c| c.type_ == "Reconciling");
            if let Some(c) = reconciling.filter(|c| c.reason == "WaitingForTurn") {
                ensure!(
                    c.message.contains("--requests-per-namespace=1")
                        && c.message.contains("at most 1 per namespace"),
                    "{}",
                    c.message
                );
                saw_waiting.store(true, Ordering::Relaxed);
            }
            Ok(phase_of(&first).is_terminal().then_some(first))
        })
        .await?;
        ensure!(phase_of(&first) == Phase::Completed, "{:#?}", first.status);
        ensure!(
            saw_waiting.load(Ordering::Relaxed),
            "the second request never said it waits for its turn"
        );

        // Then the second runs, through a DataRestore of its own.
        let second = wait_for("the second request to end", TIMEOUT, || async {
            let second = request(&requests, "second").await?;
            Ok(phase_of(&second).is_terminal().then_some(second))
        })
        .await?;
        let status = second.status.clone().unwrap_or_default();
        ensure!(status.restore.phase == Phase::Completed, "{status:#?}");
        let restores: Api<DataRestore> = Api::namespaced(s.client.clone(), &s.ns);
        let made = restores.list(&Default::default()).await?.items.len();
        ensure!(made == 2, "{made} DataRestores, not one per request");
        Ok(())
    })
    .await
}
