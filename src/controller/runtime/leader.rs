//! One of the controller's replicas works, the others stand by: leadership is a
//! `coordination.k8s.io` Lease in the namespace the controller serves, kept by
//! kube-lease-manager (server-side apply, so two replicas never both take it).
//!
//! A replica that loses the lease must stop writing at once, wherever its reconciles
//! are: [`run`] returns [`Lost`] without waiting for them, and the process exits on
//! it (as client-go's controllers do), so nothing of it outlives the loss. The lease
//! is lost when the keeper finds another holder in it: this replica did not renew in
//! time (the keeper retries failed renewals until then, and an API server this
//! replica cannot reach takes its writes no more than its renewals). Restores
//! need nothing handed over: every decision is in the objects' status and
//! annotations, which the next leader reads as a restarted controller would.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tracing::info;

/// How the replicas elect their leader.
#[derive(Debug, Clone)]
pub struct Election {
    /// The Lease's name, in the controller's namespace.
    pub lease_name: String,
    /// This replica's name in the Lease (its pod's name in a cluster).
    pub identity: String,
    /// How long a lease not renewed stays valid: the longest a dead leader's restores
    /// wait for another replica.
    pub duration_seconds: u64,
    /// How long before expiry the leader renews; also the clock skew tolerated
    /// between replicas.
    pub grace_seconds: u64,
}

impl Election {
    /// The Lease's name unless `--lease-name` says otherwise.
    pub const DEFAULT_LEASE_NAME: &str = "refill-controller";
}

/// The lease went to another replica, or could not be kept.
#[derive(Debug, thiserror::Error)]
#[error("lost the lease {lease} to another replica; stopping at once")]
pub struct Lost {
    /// The Lease's name.
    pub lease: String,
}

/// Waits for the lease, then runs `work` while holding it. `ready` is set while
/// waiting: a standby is healthy, and a rolling update needs it Ready to go on.
/// Returns `work`'s result, the lease released, when `work` ends (the process was
/// asked to stop); [`Lost`] the moment the lease is lost, `work` dropped unfinished.
pub async fn run<W, F>(
    client: Client,
    namespace: &str,
    election: &Election,
    ready: Arc<AtomicBool>,
    work: W,
) -> anyhow::Result<()>
where
    W: FnOnce() -> F,
    F: Future<Output = anyhow::Result<()>>,
{
    let manager = LeaseManagerBuilder::new(client, &election.lease_name)
        .with_namespace(namespace)
        .with_identity(&election.identity)
        .with_duration(election.duration_seconds)
        .with_grace(election.grace_seconds)
        .build()
        .await?;
    let (mut leading, keeper) = manager.watch().await;
    ready.store(true, Ordering::Relaxed);
    info!(
        lease = election.lease_name,
        identity = election.identity,
        "waiting for the lease"
    );
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        if *leading.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = leading.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the lease keeper stopped: {:?}", keeper.await);
                }
            }
            () = &mut stop => {
                info!("asked to stop while standing by");
                return Ok(());
            }
        }
    }
    info!(
        lease = election.lease_name,
        identity = election.identity,
        "leading"
    );
    let lost = async {
        // Either the keeper says "not leading", or it ended (the channel closed).
        while leading.changed().await.is_ok() {
            if !*leading.borrow() {
                break;
            }
        }
    };
    let finished = tokio::select! {
        outcome = work() => Some(outcome),
        () = lost => None,
    };
    let Some(outcome) = finished else {
        return Err(Lost {
            lease: election.lease_name.clone(),
        }
        .into());
    };
    // Closing the channel makes the keeper release the lease, so that a standby takes
    // over now rather than when the lease would have expired.
    drop(leading);
    if let Ok(Err(e)) = keeper.await {
        tracing::warn!("releasing the lease: {e}");
    }
    outcome
}

async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
