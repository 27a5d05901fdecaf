//! Lists read a page at a time, so that a list of many objects holds no more than a
//! page of them at once and each caller keeps only what it needs of each object.

use kube::api::{ApiResource, DynamicObject, ListParams, ObjectList};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::PodVolumeBackup;
use crate::labels;

/// Objects a cluster-wide list returns per page, which bounds what is held at once: the
/// seven kinds of workloads are listed side by side, and a page is held as the text the
/// API server sent (some KiB an object, most of it pod templates) while it is parsed.
pub(crate) const PAGE: u32 = 100;

/// Objects a page holds when only their names are kept (a metadata list).
pub(crate) const NAME_PAGE: u32 = 500;

/// PodVolumeBackups a page holds: one is a few KiB once its managed fields are gone,
/// and a backup of thousands of volumes is read in a few pages.
pub(crate) const PVB_PAGE: u32 = 500;

/// Hands every object `api` lists (with these labels; "" for all) to `each`, [`PAGE`]
/// at a time: see [`for_each_page`].
pub(crate) async fn for_each_listed<K>(
    api: &Api<K>,
    labels: &str,
    each: impl FnMut(K),
) -> kube::Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    for_each_page(
        params(labels),
        move |params| async move { api.list(&params).await },
        each,
    )
    .await
}

/// Hands every object of `resource` listed in `namespace` (None: in every namespace;
/// with these labels, "" for all) to `each` as a `T`, [`PAGE`] at a time. A `T` that
/// names only the fields it reads is parsed from the page without the rest of the
/// object, which is skipped, never built.
pub(crate) async fn for_each_shaped<T>(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    labels: &str,
    each: impl FnMut(T),
) -> kube::Result<()>
where
    T: Clone + DeserializeOwned,
{
    let path = DynamicObject::url_path(resource, namespace);
    let fetch = |params: ListParams| {
        let request = kube::core::Request::new(&path).list(&params);
        async move {
            let request = request.map_err(kube::Error::BuildRequest)?;
            client.request::<ObjectList<T>>(request).await
        }
    };
    pages(params(labels), fetch, each).await
}

fn params(labels: &str) -> ListParams {
    let params = ListParams::default().limit(PAGE);
    match labels {
        "" => params,
        labels => params.labels(labels),
    }
}

/// Hands every PodVolumeBackup `api` lists of the backup `backup` (None: of every
/// backup) to `each`, paged ([`PVB_PAGE`]) and without managed fields: a backup holds
/// one per pod volume, and each request reads the backup's.
pub(crate) async fn for_each_pod_volume_backup(
    api: &Api<PodVolumeBackup>,
    backup: Option<&str>,
    each: impl FnMut(PodVolumeBackup),
) -> kube::Result<()> {
    let selector = match backup {
        Some(backup) => format!("{}={}", labels::BACKUP_NAME, labels::label_value(backup)),
        None => labels::BACKUP_NAME.to_string(),
    };
    let params = ListParams::default().labels(&selector).limit(PVB_PAGE);
    for_each_page(
        params,
        move |params| async move { api.list(&params).await },
        each,
    )
    .await
}

/// Hands every object `fetch` lists with `params` (a `limit` set: the page size) to
/// `each`, a page at a time and each without its managed fields (who wrote which field:
/// often most of an object, and nothing here reads it), so that a list of many objects
/// holds no more than a page of them at once, and `each` keeps what it needs.
pub(crate) async fn for_each_page<K, Page>(
    params: ListParams,
    fetch: impl Fn(ListParams) -> Page,
    mut each: impl FnMut(K),
) -> kube::Result<()>
where
    K: kube::Resource + Clone,
    Page: std::future::Future<Output = kube::Result<ObjectList<K>>>,
{
    pages(params, fetch, |mut object: K| {
        object.meta_mut().managed_fields = None;
        each(object);
    })
    .await
}

/// Hands every item `fetch` lists with `params` to `each`, following the continue
/// token from page to page.
async fn pages<T, Page>(
    mut params: ListParams,
    fetch: impl Fn(ListParams) -> Page,
    mut each: impl FnMut(T),
) -> kube::Result<()>
where
    T: Clone,
    Page: std::future::Future<Output = kube::Result<ObjectList<T>>>,
{
    loop {
        let page = fetch(params.clone()).await?;
        page.items.into_iter().for_each(&mut each);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Pages as an API server serves them: `names` split into pages of the request's
    /// limit, each object with managed fields, a continue token between pages.
    fn served(names: &[&str], params: &ListParams) -> ObjectList<PodVolumeBackup> {
        let limit = params.limit.unwrap() as usize;
        let from: usize = params
            .continue_token
            .as_deref()
            .map_or(0, |t| t.parse().unwrap());
        let items = names[from..]
            .iter()
            .take(limit)
            .map(|name| {
                let mut pvb = PodVolumeBackup::new(name, Default::default());
                pvb.metadata.managed_fields = Some(vec![Default::default()]);
                pvb
            })
            .collect();
        let next = from + limit;
        serde_json::from_value(serde_json::json!({
            "metadata": {"continue": if next < names.len() { next.to_string() } else { String::new() }},
            "items": serde_json::to_value::<Vec<PodVolumeBackup>>(items).unwrap(),
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_paged_list_hands_over_every_object_without_managed_fields() {
        let names = ["a", "b", "c", "d", "e"];
        let asked = Mutex::new(Vec::new());
        let mut seen = Vec::new();
        let params = ListParams::default().labels("x").limit(2);
        for_each_page(
            params,
            |params| {
                asked.lock().unwrap().push(params.clone());
                let page = served(&names, &params);
                async move { Ok(page) }
            },
            |pvb: PodVolumeBackup| {
                assert_eq!(pvb.metadata.managed_fields, None);
                seen.push(pvb.metadata.name.unwrap());
            },
        )
        .await
        .unwrap();
        assert_eq!(seen, names);
        let asked = asked.into_inner().unwrap();
        let tokens: Vec<_> = asked.iter().map(|p| p.continue_token.clone()).collect();
        assert_eq!(tokens, [None, Some("2".into()), Some("4".into())]);
        assert!(
            asked
                .iter()
                .all(|p| p.limit == Some(2) && p.label_selector.as_deref() == Some("x"))
        );
    }
}
