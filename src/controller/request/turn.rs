//! How many of one namespace's requests are carried out at once: at most the cap
//! (`--requests-per-namespace`), so that one team's flood of requests cannot take the
//! controller from the others. Requests past it wait, first come first served: by
//! creation time, then name, so that every replica and every pass agrees on the order.
//! Pure: the caller says what each request of the namespace stands at.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::DataRestoreRequest;

/// Where a request stands, as the cap counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// A DataRestore carries it out: it holds a place under the cap.
    Carried,
    /// Not begun: it begins when its turn comes.
    Waiting,
    /// Ended (or being deleted): it holds no place.
    Ended,
}

/// One request of a namespace.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Peer {
    pub name: String,
    pub created: Option<Time>,
    pub standing: Standing,
}

/// Where `request` stands. A request ended and then changed (a refused one fixed) waits
/// again; a request being deleted holds no place, as its DataRestore is winding down.
pub(crate) fn standing(request: &DataRestoreRequest) -> Standing {
    let status = request.status.clone().unwrap_or_default();
    let ended = status.restore.phase.is_terminal()
        && (status.data_restore.is_some()
            || status.restore.observed_generation == request.metadata.generation);
    if request.metadata.deletion_timestamp.is_some() || ended {
        Standing::Ended
    } else if status.data_restore.is_some() {
        Standing::Carried
    } else {
        Standing::Waiting
    }
}

/// `request` as a [`Peer`].
pub(crate) fn peer(request: &DataRestoreRequest) -> Peer {
    Peer {
        name: request.name_any(),
        created: request.metadata.creation_timestamp.clone(),
        standing: standing(request),
    }
}

/// The waiting requests of a namespace whose turn it is, oldest first: as many as the
/// cap leaves beside those carried out.
pub(crate) fn in_turn(peers: &[Peer], cap: usize) -> Vec<&str> {
    waiting_in_order(peers)
        .into_iter()
        .take(cap.saturating_sub(carried(peers)))
        .map(|p| p.name.as_str())
        .collect()
}

/// Whether the waiting request `name` of `namespace` may begin now; if not, why, for
/// its status.
pub(crate) fn turn(namespace: &str, name: &str, peers: &[Peer], cap: usize) -> Result<(), String> {
    let carried = carried(peers);
    let waiting = waiting_in_order(peers);
    let ahead = waiting
        .iter()
        .position(|p| p.name == name)
        .unwrap_or(waiting.len());
    if carried + ahead < cap {
        return Ok(());
    }
    Err(format!(
        "waiting for its turn: {carried} DataRestoreRequest(s) of namespace {namespace} being carried out and {ahead} waiting ahead of this one; the controller carries out at most {cap} per namespace at once (--requests-per-namespace={cap}); this one begins when an earlier one ends"
    ))
}

fn carried(peers: &[Peer]) -> usize {
    peers
        .iter()
        .filter(|p| p.standing == Standing::Carried)
        .count()
}

/// The waiting requests, first come first: by creation time, then name.
fn waiting_in_order(peers: &[Peer]) -> Vec<&Peer> {
    let mut waiting: Vec<&Peer> = peers
        .iter()
        .filter(|p| p.standing == Standing::Waiting)
        .collect();
    waiting.sort_by(|a, b| {
        let at = |p: &Peer| p.created.as_ref().map(|t| t.0);
        at(a).cmp(&at(b)).then_with(|| a.name.cmp(&b.name))
    });
    waiting
}

#[cfg(test)]
mod tests;
