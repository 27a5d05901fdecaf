//! Reading the GitOps objects a restore's consumers name, to learn which of those
//! consumers each lists itself ([`crate::gitops::verify`]).

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, GetParams};
use kube::{Client, Resource};

use crate::controller::runtime::error::is_not_found;
use crate::gitops::GitOpsRef;
use crate::gitops::verify::{AppliedWorkload, Listing};
use crate::plan::gitops::{ManagerSeen, Named};
use crate::plan::{ConsumerRef, Owner};

/// The consumers, as workloads with the GitOps objects their marks name.
pub(crate) fn named<'a>(
    consumers: impl IntoIterator<Item = &'a ConsumerRef>,
) -> impl Iterator<Item = (Named, &'a [GitOpsRef])> {
    consumers.into_iter().filter_map(|c| match &c.owner {
        Owner::Known(kind, name) if !c.managed_by.is_empty() => Some((
            Named {
                kind: *kind,
                namespace: c.namespace.clone(),
                name: name.clone(),
            },
            c.managed_by.as_slice(),
        )),
        _ => None,
    })
}

/// What each object lists of the workloads that name it. The object is read as
/// text and only its lists are parsed out of it, then dropped: an inventory may hold
/// thousands of entries, and no more than the answer is kept.
pub(crate) async fn seen(
    client: &Client,
    named: BTreeMap<GitOpsRef, BTreeSet<Named>>,
) -> kube::Result<BTreeMap<GitOpsRef, ManagerSeen>> {
    futures::stream::iter(named)
        .map(|(target, workloads)| async move {
            let seen = match read(client, &target).await {
                Ok(text) => {
                    // Not the shape the tool writes (only an edited CRD could serve
                    // that): it vouches for nothing.
                    let listing = Listing::parse(&text).unwrap_or_default();
                    let listed = workloads
                        .iter()
                        .filter(|w| {
                            let workload = AppliedWorkload {
                                kind: w.kind,
                                namespace: &w.namespace,
                                name: &w.name,
                            };
                            listing.lists(target.kind, &workload)
                        })
                        .map(Named::describe)
                        .collect();
                    ManagerSeen::Lists(listed)
                }
                // Gone, or its kind is not served: it lists nothing, and is told as
                // one that does not list the workload.
                Err(e) if is_not_found(&e) => ManagerSeen::Lists(BTreeSet::new()),
                // Refused before the server looks for the object: says nothing of it.
                Err(kube::Error::Api(e)) if e.code == 403 => ManagerSeen::Unreadable(e.message),
                Err(e) => return Err(e),
            };
            Ok((target, seen))
        })
        .buffer_unordered(16)
        .try_collect()
        .await
}

async fn read(client: &Client, target: &GitOpsRef) -> kube::Result<String> {
    let resource = target.kind.api_resource();
    let path = DynamicObject::url_path(&resource, Some(&target.namespace));
    let request = kube::core::Request::new(path)
        .get(&target.name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await
}
