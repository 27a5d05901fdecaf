//! Test support for refill: a local Kubernetes control plane (real apiserver,
//! controller-manager and scheduler; kwok simulating the nodes), per-test
//! namespaces, polling waits, and a dump of the cluster when a test fails.
//!
//! Tests call [`run_test`], which finds or starts the cluster once per process:
//!
//! ```ignore
//! use refill_e2e::*;
//!
//! #[tokio::test]
//! async fn example() -> anyhow::Result<()> {
//!     run_test("example", |env| async move {
//!         let pods = env.api::<k8s_openapi::api::core::v1::Pod>();
//!         wait_for("no pods", std::time::Duration::from_secs(5), || async {
//!             Ok(pods.list(&Default::default()).await?.items.is_empty().then_some(()))
//!         })
//!         .await
//!     })
//!     .await
//! }
//! ```
//!
//! # Running the controller
//!
//! Three ways, one for each purpose:
//!
//! - [`fixture::ControllerHandle`]: in the test's own process, as refill's
//!   ServiceAccount (RBAC applies as in a cluster). The default for kwok tests: it
//!   starts at once, and a test kills and restarts it at will (dropping the handle is
//!   a kill).
//! - [`controller_process::ControllerProcess`]: `refill controller` as a process of
//!   its own, with a token issued for the run. For what needs a process: its memory
//!   from `/proc` (the benchmark's peak RSS), its requests told apart in the audit
//!   log, a kill by signal, several replicas electing a leader.
//! - [`in_cluster`]: refill's image as a pod of `manifests/deployment.yaml` on a real
//!   node, as users run it. For tests that move data through Velero's node agent on
//!   the real nodes, and for the real-data benchmark and the demo.
//!
//! The benchmarks and the demo are not here but in `refill-e2e-tools`
//! (`e2e/tools/`), so that no test links them.

// The workspace's lints hold here too, but for missing_docs: this crate is the tests'
// own harness, read beside the tests that use it, and its public items (some 170,
// mostly fields of test fixtures named for what they hold) are public for those tests
// rather than for readers of an API. Cargo takes a crate's lints from the workspace
// whole or not at all, hence the allow here rather than in Cargo.toml.
#![allow(missing_docs)]

pub mod argocd;
pub mod audit;
pub mod cluster;
pub mod controller_process;
pub mod csi;
pub mod fixture;
pub mod flux;
pub mod in_cluster;
pub mod kubelet;
pub mod node_agent;
pub mod own_cluster;
pub mod support;
pub mod velero;
pub mod velero_app;

pub use cluster::{
    COMPONENTS, Cluster, LOCAL_PATH_CLASS, NODES, PAUSE_IMAGE, REAL_NODE_LABEL, REAL_NODE_TAINT,
    REAL_NODES, REFILL_IMAGE, RESTORE_WAIT_CONTAINER, RESTORE_WAIT_DONE, TEST_USER_AGENT,
    TESTBOX_IMAGE, admin_client, cluster, cluster_dir, real_node_annotations, scripts_dir,
    service_account_token,
};
pub use own_cluster::OwnCluster;
pub use support::{
    POLL_INTERVAL, TEST_NAMESPACE_LABEL, TEST_TIMEOUT, TestEnv, TestNamespace, dns_label, dump,
    is_pod_ready, run_test, run_test_on, wait_for,
};
