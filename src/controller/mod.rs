//! The DataRestore controller: one reconcile state machine, whose phases are
//! [`crate::api::Phase`], driven by kube-runtime.

pub mod build;
mod by_claim;
mod consumer;
mod gitops;
#[cfg(test)]
mod hostile_input;
pub mod ledger;
mod phase;
mod reasons;
mod reconcile;
mod request;
pub mod runtime;
mod schedule;
mod status;
#[cfg(test)]
mod testing;
pub(crate) mod volume;

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Controller;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::{info, warn};

use crate::api::{DataRestore, PodVolumeRestore};
use runtime::panics::{self, Audience};
use runtime::stores;

pub use build::restore_helper::FALLBACK_IMAGE as FALLBACK_HELPER_IMAGE;
pub use build::stand_in::DEFAULT_IMAGE as DEFAULT_STAND_IN_IMAGE;
pub use phase::DEFAULT_PARALLEL;
pub use request::gitops::RequestGitOps;
pub(crate) use runtime::context::Context;
pub use runtime::context::{
    Config, DEFAULT_CONCURRENCY, DEFAULT_COPIER_IMAGE, DEFAULT_REQUESTS_PER_NAMESPACE,
};
pub(crate) use runtime::error::{Error, Result};
pub(crate) use schedule::decide::spec_errors as schedule_spec_errors;

/// The user agent of the controller's requests, so they can be told apart in audit logs.
pub const USER_AGENT: &str = concat!("refill-controller/", env!("CARGO_PKG_VERSION"));

/// Builds a client from a kubeconfig path (or the usual inference: in-cluster, then
/// KUBECONFIG), sending refill's user agent.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> anyhow::Result<Client> {
    Ok(crate::connect::connect(kubeconfig, context, USER_AGENT).await?)
}

/// Runs the controller until the process is asked to stop.
pub async fn run(client: Client, config: Config) -> anyhow::Result<()> {
    run_with_readiness(client, config, Default::default()).await
}

/// Like [`run`], flipping `ready` once the DataRestores are being watched.
pub async fn run_with_readiness(
    client: Client,
    config: Config,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<()> {
    let namespace = config.namespace.clone();
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), &namespace);
    if let Err(e) = restores.list(&Default::default()).await {
        anyhow::bail!(
            "cannot list DataRestores in namespace {namespace}: {e}; are refill's CRDs installed (kubectl apply -f manifests/crds.yaml) and is access granted?"
        );
    }
    let (stores, writers) = stores::stores();
    let ctx = Arc::new(Context::new(client.clone(), config, stores));
    // Only what refill made for its restores (they carry the restore's UID), not every
    // PodVolumeRestore of Velero's own restores.
    let made = watcher::Config::default().labels(crate::labels::DATA_RESTORE_UID);
    let pvr_events = watcher(
        Api::<PodVolumeRestore>::namespaced(client.clone(), &namespace),
        made.clone(),
    )
    .default_backoff()
    .modify(forget_managed_fields)
    .reflect(writers.pod_volume_restores)
    .inspect(move |item| writers.pod_volume_restores_health.note(item))
    .touched_objects();
    let pods: Api<Pod> = Api::all(client.clone());
    let index_ctx = ctx.clone();
    let mut stand_ins = writers.stand_ins;
    let stand_ins_health = writers.stand_ins_health;
    // Pods are listed a hundred at a time, as workloads are: a page of the default 500
    // whole pods took 18 MB as it was read, most of the controller's peak heap at a
    // thousand claims; a smaller page costs a few more list requests at start.
    let pod_list = watcher::Config::default().page_size(crate::observe::paging::PAGE);
    let pod_events = watcher(pods, pod_list)
        .default_backoff()
        .modify(forget_managed_fields)
        .map_ok(move |event| {
            index_ctx.known.mounts.apply(&event);
            stand_ins.apply(&event);
            event
        })
        .inspect(move |item| stand_ins_health.note(item))
        .touched_objects();
    let mapper_ctx = ctx.clone();
    // Claims are watched by their metadata only, for one fact: being deleted.
    let claims_ctx = ctx.clone();
    let claim_events = watcher(
        Api::<PartialObjectMeta<PersistentVolumeClaim>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(forget_managed_fields)
    .map_ok(move |event| {
        claims_ctx.known.claims.apply(&event);
        event
    })
    .touched_objects();
    let claim_mapper_ctx = ctx.clone();
    // Nodes are watched for their readiness only: what a wait on a node that stopped
    // answering says, and when it may end. Their changes wake no restore (a node going
    // NotReady marks its pods not ready, and those events do).
    let nodes_ctx = ctx.clone();
    let node_events = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .for_each(move |event| {
            match event {
                Ok(event) => nodes_ctx.known.nodes.apply(&event),
                Err(e) => warn!("watching nodes: {e}"),
            }
            futures::future::ready(())
        });
    // Workloads are watched for the claims their pod templates mount: who a volume
    // that starts must stop besides the pods that run. Their changes wake no restore.
    let templates_ctx = ctx.clone();
    let template_events =
        futures::stream::select_all(crate::observe::workloads::TEMPLATE_KINDS.map(|kind| {
            let api = Api::<DynamicObject>::all_with(client.clone(), &kind.api_resource());
            let config = watcher::Config::default().page_size(crate::observe::paging::PAGE);
            watcher(api, config)
                .default_backoff()
                .map(move |event| (kind, event))
                .boxed()
        }))
        .for_each(move |(kind, event)| {
            match event {
                Ok(event) => templates_ctx.known.templates.apply(kind, &event),
                Err(e) => warn!(?kind, "watching workloads: {e}"),
            }
            futures::future::ready(())
        });
    info!(namespace, "refill controller started");
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    let requests = ctx.config.requests.then(|| request::run(ctx.clone()));
    let schedules = schedule::run(ctx.clone());
    let populator_ctx = ctx.clone();
    let populator = async move {
        if populator_ctx.config.populator {
            crate::populator::run(populator_ctx).await;
        }
    };
    let schedules = async {
        futures::join!(schedules, populator);
    };
    let restores = Controller::new(restores, watcher::Config::default())
        .with_config(ctx.config.runtime())
        .owns_stream(pvr_events)
        // Stand-in pods live in the PVC's namespace, where no owner reference may point
        // at the DataRestore, and consumer pods are not refill's at all: both are mapped
        // back through the claims refill is working on. The same watch keeps the index
        // of which pods mount which claims.
        .watches_stream(pod_events, move |pod| mapper_ctx.restores_for_pod(&pod))
        .watches_stream(claim_events, move |claim| {
            claim_mapper_ctx.restores_for_claim(
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.metadata.name.as_deref().unwrap_or_default(),
            )
        })
        // No debounce: kube-runtime's pushes a waiting reconcile back on every event, so
        // steady progress from many volumes would starve it. Events that arrive while a
        // pass runs are folded into one next pass anyway.
        .shutdown_on_signal()
        .run(
            |dr, ctx| {
                panics::guarded(
                    dr,
                    ctx,
                    "DataRestore",
                    Audience::Admin,
                    reconcile::reconcile,
                )
            },
            reconcile::error_policy,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("reconcile failed: {e}");
            }
        });
    // The node and workload watches live as long as the controller does.
    let watches = futures::future::join(node_events, template_events);
    let restores = async {
        futures::future::select(std::pin::pin!(restores), std::pin::pin!(watches)).await;
    };
    match requests {
        Some(requests) => {
            futures::join!(restores, requests, schedules);
        }
        None => {
            futures::join!(restores, schedules);
        }
    }
    info!("refill controller stopped");
    Ok(())
}

/// Drops who-wrote-which-field from an object kept from a watch: nothing refill keeps
/// reads it (a workload's managers are read fresh, when a restart needs explaining), and
/// it is often the largest part of a pod's metadata, kept for every pod that mounts a
/// claim.
pub(crate) fn forget_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}
