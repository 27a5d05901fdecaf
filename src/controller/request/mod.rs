//! Teams' DataRestoreRequests, in their own namespaces: each is checked ([`decide`]),
//! carried out by a DataRestore in Velero's namespace made for it, and shows that
//! restore's progress. The request holds a finalizer so that deleting it deletes its
//! DataRestore first, which brings the team's consumers back as any deletion does.
//! At most `--requests-per-namespace` requests of one namespace are carried out at
//! once ([`turn`]); the others wait, and are woken as earlier ones end.

pub(super) mod decide;
pub(super) mod gitops;
pub(super) mod turn;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::{DataRestore, DataRestoreRequest, PodVolumeBackup};
use crate::labels;

use super::runtime::error::{is_conflict, is_not_found, retry_later};
use super::runtime::object_writes::{self, Precondition, holds_finalizer};
use super::{Context, Error, Result};
use crate::controller::runtime::panics::{self, Audience};

/// A waiting request is looked at again this often even when nothing woke it: a wake
/// lost (say, to a restart) costs at most this.
const WAITING_RECHECK: Duration = Duration::from_secs(60);

/// What the passes over requests share.
struct Shared {
    ctx: Arc<Context>,
    /// Every namespace's requests, as the controller's watch knows them.
    requests: Store<DataRestoreRequest>,
    /// Wakes a waiting request whose turn has come.
    wake: UnboundedSender<ObjectRef<DataRestoreRequest>>,
}

impl Shared {
    /// The requests of `namespace`, `request` as it is now among them.
    fn peers(&self, namespace: &str, request: &DataRestoreRequest) -> Vec<turn::Peer> {
        let own = request.name_any();
        let mut peers: Vec<turn::Peer> = self
            .requests
            .state()
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(namespace) && r.name_any() != own)
            .map(|r| turn::peer(r))
            .collect();
        peers.push(turn::peer(request));
        peers
    }

    /// `request` no longer holds a place under the cap: wakes the waiting requests of
    /// its namespace whose turn that makes it.
    fn wake_next(&self, namespace: &str, request: &DataRestoreRequest) {
        let mut peers = self.peers(namespace, request);
        if let Some(own) = peers.last_mut() {
            own.standing = turn::Standing::Ended;
        }
        let cap = self.ctx.config.requests_per_namespace;
        for name in turn::in_turn(&peers, cap) {
            // Fails only once the controller stopped, when nothing waits any more.
            let _ = self
                .wake
                .unbounded_send(ObjectRef::new(name).within(namespace));
        }
    }
}

/// Watches every namespace's requests, and the DataRestores made for them, until the
/// process is asked to stop.
pub(super) async fn run(ctx: Arc<Context>) {
    let client = ctx.client.clone();
    let requests: Api<DataRestoreRequest> = match &ctx.config.requests_namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let restores: Api<DataRestore> = Api::namespaced(client, &ctx.config.namespace);
    let made_for_requests = watcher::Config::default().labels(labels::REQUEST_UID);
    let controller = Controller::new(requests, watcher::Config::default());
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let shared = Arc::new(Shared {
        requests: controller.store(),
        wake,
        ctx: ctx.clone(),
    });
    controller
        .with_config(ctx.config.runtime())
        .reconcile_on(woken)
        .watches(restores, made_for_requests, |dr: DataRestore| {
            let (namespace, name) = dr
                .annotations()
                .get(labels::REQUEST_ANNOTATION)?
                .split_once('/')?;
            Some(ObjectRef::new(name).within(namespace))
        })
        .shutdown_on_signal()
        .run(
            |request, shared: Arc<Shared>| {
                let ctx = shared.ctx.clone();
                panics::guarded(
                    request,
                    ctx,
                    "DataRestoreRequest",
                    Audience::Team,
                    move |request, _| reconcile(request, shared),
                )
            },
            error_policy,
            shared,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("request reconcile failed: {e}");
            }
        })
        .await;
}

async fn reconcile(request: Arc<DataRestoreRequest>, shared: Arc<Shared>) -> Result<Action> {
    let ctx = &shared.ctx;
    let namespace = request.namespace().unwrap_or_default();
    let name = request.name_any();
    let uid = request.uid().unwrap_or_default();
    let requests: Api<DataRestoreRequest> = Api::namespaced(ctx.client.clone(), &namespace);
    let restores: Api<DataRestore> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let dr_name = decide::data_restore_name(&namespace, &name, &uid);
    let has_finalizer = holds_finalizer(&*request);

    if request.metadata.deletion_timestamp.is_some() {
        shared.wake_next(&namespace, &request);
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        // The DataRestore's own finalizer brings the consumers back; the request goes
        // only once it has.
        if let Some(dr) = restores.get_opt(&dr_name).await? {
            if dr.metadata.deletion_timestamp.is_none() {
                restores.delete(&dr_name, &Default::default()).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        set_finalizer(&requests, &request, false).await?;
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        set_finalizer(&requests, &request, true).await?;
        return Ok(Action::await_change());
    }

    let previous = request.status.clone().unwrap_or_default();
    let generation = request.metadata.generation;
    let status = match restores.get_opt(&dr_name).await? {
        Some(dr) => {
            if request.spec.cancel && !dr.spec.cancel {
                let cancel = json!({"spec": {"cancel": true}});
                restores
                    .patch(&dr_name, &PatchParams::default(), &Patch::Merge(cancel))
                    .await?;
            }
            decide::mirrored(&dr, generation)
        }
        // Ended or refused as it stands: looked at again only when its spec changes.
        None if previous.restore.phase.is_terminal()
            && previous.restore.observed_generation == generation =>
        {
            shared.wake_next(&namespace, &request);
            return Ok(Action::await_change());
        }
        // Its DataRestore went while it ran (an admin deleted it): not made again
        // behind the admin's back.
        None if previous.data_restore.is_some() => decide::lost(&previous, generation),
        None => {
            let peers = shared.peers(&namespace, &request);
            let cap = ctx.config.requests_per_namespace;
            if let Err(why) = turn::turn(&namespace, &name, &peers, cap) {
                let status = decide::waiting(why, generation, &previous);
                if status != previous {
                    object_writes::apply_status(&requests, &name, Precondition::None, &status)
                        .await?;
                }
                return Ok(Action::requeue(WAITING_RECHECK));
            }
            let backed_up = backed_up_namespaces(ctx, &request.spec.backup_name).await?;
            let spec =
                decide::data_restore_spec(&namespace, &request.spec, &backed_up).and_then(|spec| {
                    gitops::limit(spec, ctx.config.request_git_ops).map_err(|e| vec![e])
                });
            match spec {
                Err(errors) => {
                    info!(request = %format!("{namespace}/{name}"), ?errors, "refused");
                    decide::refused(errors, generation, &previous)
                }
                Ok(spec) => {
                    let dr = DataRestore {
                        metadata: ObjectMeta {
                            name: Some(dr_name.clone()),
                            namespace: Some(ctx.config.namespace.clone()),
                            labels: Some([(labels::REQUEST_UID.to_string(), uid.clone())].into()),
                            annotations: Some(
                                [(
                                    labels::REQUEST_ANNOTATION.to_string(),
                                    format!("{namespace}/{name}"),
                                )]
                                .into(),
                            ),
                            ..Default::default()
                        },
                        spec,
                        status: None,
                    };
                    let made = match restores.create(&PostParams::default(), &dr).await {
                        Ok(made) => made,
                        Err(e) if is_conflict(&e) => restores.get(&dr_name).await?,
                        Err(e) => return Err(e.into()),
                    };
                    info!(request = %format!("{namespace}/{name}"), restore = %dr_name, "carried out by a DataRestore");
                    decide::mirrored(&made, generation)
                }
            }
        }
    };
    if status != previous {
        object_writes::apply_status(&requests, &name, Precondition::None, &status).await?;
    }
    if status.restore.phase.is_terminal() {
        shared.wake_next(&namespace, &request);
    }
    Ok(Action::await_change())
}

/// The namespaces whose pod volumes the backup holds (none when there is no such
/// backup), from its PodVolumeBackups: a page at a time, keeping only each one's
/// namespace, since any team can ask about any backup.
async fn backed_up_namespaces(ctx: &Context, backup: &str) -> Result<BTreeSet<String>> {
    let mut namespaces = BTreeSet::new();
    // A name no backup can have is refused by decide::data_restore_spec; it must not
    // become a label selector either (a comma would add terms of the team's choosing).
    if crate::k8s_names::dns_subdomain(backup).is_err() {
        return Ok(namespaces);
    }
    let pvbs: Api<PodVolumeBackup> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    crate::observe::paging::for_each_pod_volume_backup(&pvbs, Some(backup), |pvb| {
        namespaces.extend(pvb.spec.pod.namespace);
    })
    .await?;
    Ok(namespaces)
}

/// Puts refill's finalizer on the request or takes it off; a request already gone
/// needs neither.
async fn set_finalizer(
    api: &Api<DataRestoreRequest>,
    request: &DataRestoreRequest,
    hold: bool,
) -> Result<()> {
    match object_writes::set_finalizer(api, request, hold).await {
        Err(e) if is_not_found(&e) => Ok(()),
        other => Ok(other?),
    }
}

fn error_policy(request: Arc<DataRestoreRequest>, error: &Error, shared: Arc<Shared>) -> Action {
    retry_later(&*request, "DataRestoreRequest", error, &shared.ctx)
}
