//! Node faults on the simulated nodes: a node of the case's own stops answering (kwok
//! stops playing its kubelet once its `type=kwok` label is taken away: no status, no
//! Lease, as a frozen kubelet) while a restore waits on it; it answers again, or its
//! Node object is deleted for good. The real nodes' version freezes a real kubelet.
//!
//! Each case checks the file's usual end state, and that the restore named the node
//! while it waited.

use k8s_openapi::api::core::v1::Node;

use super::*;

/// The taint that keeps every other case's pods off a case's own node.
const OWN_NODE_TAINT: &str = "refill.dev/test-own-node";
/// From a kubelet's last word to its node being called unreachable: the node lifecycle
/// controller's grace (40 to 50 s by release), and a few passes.
const NODE_DOWN: Duration = Duration::from_secs(120);
/// refill's grace for a node that stopped answering, in these cases.
const NODE_GRACE: Duration = Duration::from_secs(5);

/// A node made for one case, deleted when the case ends.
struct OwnNode {
    name: String,
    api: Api<Node>,
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        let (api, name) = (self.api.clone(), self.name.clone());
        // The case's runtime is going away with it: delete from a thread of its own.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                let _ = runtime.block_on(api.delete(&name, &DeleteParams::default()));
            }
        })
        .join()
        .ok();
    }
}

impl OwnNode {
    /// kwok plays this node's kubelet (`answers`), or stops to.
    async fn answers(&self, answers: bool) -> Result<()> {
        let kwok = if answers { json!("kwok") } else { json!(null) };
        self.api
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"type": kwok}}})),
            )
            .await?;
        Ok(())
    }

    async fn ready(&self) -> Result<bool> {
        let node = self.api.get(&self.name).await?;
        Ok(node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    async fn until_ready(&self, ready: bool, timeout: Duration) -> Result<()> {
        let what = format!("node {} Ready={ready}", self.name);
        wait_for(&what, timeout, || async {
            Ok((self.ready().await? == ready).then_some(()))
        })
        .await
    }
}

impl Scene {
    /// A simulated node for this case alone (tainted; only its app tolerates it).
    async fn own_node(&self) -> Result<OwnNode> {
        let name = format!("lost-{}", self.ns.rsplit('-').next().unwrap_or("x"));
        let api: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            }},
            "spec": {"taints": [{"key": OWN_NODE_TAINT, "value": self.ns, "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "100"},
                "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "100"},
            },
        }))?;
        api.create(&PostParams::default(), &node).await?;
        let own = OwnNode { name, api };
        own.until_ready(true, SETUP).await?;
        Ok(own)
    }

    /// Deployment `web` (1 replica) on claim `data`, whose volume is on `node`, with a
    /// backup `b1` taken when it was good, and its file broken since.
    async fn app_on(&self, node: &str) -> Result<App> {
        let dir = self
            .volume("data", node, &[(DATA_FILE, b"good data, as backed up")])
            .await?;
        let mut template = fixture::pod_template("web", &["data"]);
        template["spec"]["tolerations"] = json!([{"key": OWN_NODE_TAINT, "operator": "Exists"}]);
        fixture::deployment_of(&self.client, &self.ns, "web", 1, template).await?;
        let app = App {
            claims: vec![Claim {
                name: "data".into(),
                dir,
                content: content("data"),
            }],
            workloads: vec![Workload {
                kind: Kind::Deployment,
                name: "web".into(),
                replicas: 1,
            }],
        };
        self.backed_up_and_broken(&app).await?;
        Ok(app)
    }

    /// A controller whose grace for a node that stopped answering is `node_grace`.
    async fn controller_with_node_grace(
        &self,
        node_grace: Duration,
    ) -> Result<fixture::ControllerHandle> {
        let config = refill::controller::Config {
            namespace: self.ns.clone(),
            node_grace,
            ..Default::default()
        };
        fixture::ControllerHandle::start_with(self.env.cluster, config).await
    }

    /// Restore `r1` of the app, extra files kept, each volume given `timeout`.
    async fn restore_timing_out(&self, app: &App, timeout: &str) -> Result<()> {
        let spec = DataRestoreSpec {
            volume_timeout: Some(timeout.into()),
            ..self.keeping_extra_files(app)
        };
        self.restore("r1", spec).await?;
        Ok(())
    }

    /// Restore `r1` of the app, extra files kept (the stand-in is the first pod refill
    /// makes), once its stand-in pod exists.
    async fn restore_until_stand_in(&self, app: &App) -> Result<()> {
        self.restore("r1", self.keeping_extra_files(app)).await?;
        self.watch
            .until("the stand-in", SETUP, |o| {
                (!o.stand_ins().is_empty()).then_some(())
            })
            .await
    }

    /// Waits until the restore's texts name `node` as down; returns what they said.
    async fn until_said(&self, name: &str, fragment: &str, timeout: Duration) -> Result<String> {
        self.watch
            .until(format!("{name} to say {fragment:?}"), timeout, |o| {
                let said = texts(o.restore(name)?.as_ref());
                said.contains(fragment).then_some(said)
            })
            .await
    }
}

fn partly_written(dr: Option<&DataRestore>) -> Option<bool> {
    dr?.status
        .as_ref()?
        .volumes
        .first()
        .map(|v| v.partly_written)
}

/// The stand-in's node stops answering before any node agent took the restore: the
/// restore names the node, fails the volume once the node has been down for the grace,
/// removes the stand-in without the node's word (nothing there wrote), says nothing
/// was written, and brings the app back (its pod waits for the node, whose volume it
/// needs). The node answers again afterwards and the app runs.
async fn node_stops_answering_before_the_node_agent_took_the_restore(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let node = s.own_node().await?;
    let app = s.app_on(&node.name).await?;
    // The node agent serves the shared nodes only: none takes this restore.
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller_with_node_grace(NODE_GRACE).await?;
    s.restore_until_stand_in(&app).await?;
    node.answers(false).await?;
    let said = s
        .until_said(
            "r1",
            &format!("node {} is unreachable", node.name),
            NODE_DOWN,
        )
        .await?;
    let expect = Expect {
        phases: &[Phase::Failed],
        pods_ready: false,
        ..Expect::ended()
    };
    let (dr, mut problems) = s.check(&app, "r1", &expect).await;
    if !said.contains("nothing there writes to PVC") {
        problems.push(format!("the wait did not say nothing there writes: {said}"));
    }
    if partly_written(dr.as_deref()) != Some(false) {
        problems.push(format!("not said unwritten: {}", describe(dr.as_deref())));
    }
    node.answers(true).await?;
    node.until_ready(true, SETUP).await?;
    if let Err(e) = s.ready_pods("web", 1, SETUP).await {
        problems.push(format!("the app did not run once its node answered: {e:#}"));
    }
    verdict(problems)
}

/// The node dies while its node agent copies: the restore names the node and says the
/// node agent there may still write, so it waits, and that deleting the Node object
/// ends the wait. The Node is deleted: the volume ends partly written, the stand-in is
/// gone, the app is scaled back.
async fn node_lost_for_good_while_its_node_agent_copies(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let node = s.own_node().await?;
    let app = s.app_on(&node.name).await?;
    let mut config = s.node_agent_config();
    config.nodes = Some(vec![node.name.clone()]);
    // Long enough a copy to still be going when the node dies.
    let agent = s.node_agent_with(NodeAgentConfig {
        bytes_per_second: Some(COPY_RATE / 64),
        write_log: Some(s.write_log.clone()),
        ..config
    });
    let _controller = s.controller_with_node_grace(NODE_GRACE).await?;
    s.restore_timing_out(&app, "20s").await?;
    s.until_pvr(PodVolumePhase::InProgress, SETUP).await?;
    // The node and everything on it, its node agent too, stop at once.
    agent.stop().await;
    node.answers(false).await?;
    let said = s.until_said("r1", "kubectl delete node", NODE_DOWN).await?;
    let mut problems = Vec::new();
    if !said.contains("may still be writing") {
        problems.push(format!("the wait did not say a writer may run: {said}"));
    }
    // Still waiting a while later: the node agent there may write if the node answers.
    tokio::time::sleep(2 * NODE_GRACE).await;
    if s.watch
        .restore("r1")
        .is_some_and(|dr| phase(&dr).is_terminal())
    {
        problems.push("ended while the node agent there might still write".into());
    }
    node.api
        .delete(&node.name, &DeleteParams::default())
        .await?;
    let expect = Expect {
        phases: &[Phase::Failed],
        pods_ready: false,
        ..Expect::ended()
    };
    let (dr, more) = s.check(&app, "r1", &expect).await;
    problems.extend(more);
    if partly_written(dr.as_deref()) != Some(true) {
        problems.push(format!(
            "not said partly written, though a node agent took it: {}",
            describe(dr.as_deref())
        ));
    }
    verdict(problems)
}

/// The stand-in's node stops answering and comes back within refill's grace: the
/// restore names the node while it is down, then goes on and completes.
async fn node_frozen_and_back_within_the_grace(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let node = s.own_node().await?;
    let app = s.app_on(&node.name).await?;
    let _controller = s
        .controller_with_node_grace(Duration::from_secs(600))
        .await?;
    s.restore_until_stand_in(&app).await?;
    node.answers(false).await?;
    s.until_said(
        "r1",
        &format!("node {} is unreachable", node.name),
        NODE_DOWN,
    )
    .await?;
    node.answers(true).await?;
    node.until_ready(true, SETUP).await?;
    // Its node agent comes back with it.
    let mut config = s.node_agent_config();
    config.nodes = Some(vec![node.name.clone()]);
    let _agent = s.node_agent_with(NodeAgentConfig {
        write_log: Some(s.write_log.clone()),
        ..config
    });
    let (dr, mut problems) = s.check(&app, "r1", &Expect::completed()).await;
    if dr
        .as_deref()
        .is_some_and(|dr| texts(dr).contains("waiting on node"))
    {
        problems.push(format!(
            "the note of the node stayed: {}",
            describe(dr.as_deref())
        ));
    }
    verdict(problems)
}

/// The app's node stops answering, then a restore stops the app: its pod stays
/// Terminating there, and may still run and write. The restore names the node and
/// the pod, waits (no stand-in is made beside a pod that may write), and ends at its
/// volume timeout with nothing written; the app is scaled back, and runs once the node
/// answers again.
async fn node_stops_answering_while_the_consumers_go(env: TestEnv) -> Result<()> {
    let s = Scene::new(env).await?;
    let node = s.own_node().await?;
    let app = s.app_on(&node.name).await?;
    let _agent = s.node_agent(Some(COPY_RATE));
    let _controller = s.controller_with_node_grace(NODE_GRACE).await?;
    node.answers(false).await?;
    node.until_ready(false, NODE_DOWN).await?;
    s.restore_timing_out(&app, "40s").await?;
    let said = s
        .until_said(
            "r1",
            "which mounts the claim, may still be running there",
            SETUP,
        )
        .await?;
    let mut problems = Vec::new();
    if !said.contains(&format!("node {} is", node.name)) {
        problems.push(format!("the wait did not name the node: {said}"));
    }
    let expect = Expect {
        phases: &[Phase::Failed],
        pods_ready: false,
        ..Expect::ended()
    };
    let (dr, more) = s.check(&app, "r1", &expect).await;
    problems.extend(more);
    if partly_written(dr.as_deref()) != Some(false) {
        problems.push(format!("not said unwritten: {}", describe(dr.as_deref())));
    }
    if !s.pvrs().await?.is_empty() {
        problems.push("a PodVolumeRestore was made while the app's pod may run".into());
    }
    node.answers(true).await?;
    if let Err(e) = s.ready_pods("web", 1, SETUP).await {
        problems.push(format!("the app did not run once its node answered: {e:#}"));
    }
    verdict(problems)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_faults() -> Result<()> {
    let cases = vec![
        case(
            "node-stops-answering-before-the-node-agent-took-the-restore",
            node_stops_answering_before_the_node_agent_took_the_restore,
        ),
        case(
            "node-lost-for-good-while-its-node-agent-copies",
            node_lost_for_good_while_its_node_agent_copies,
        ),
        case(
            "node-stops-answering-while-the-consumers-go",
            node_stops_answering_while_the_consumers_go,
        ),
        case(
            "node-frozen-and-back-within-the-grace",
            node_frozen_and_back_within_the_grace,
        ),
    ];
    run_table("node faults", cases).await
}
