//! Waits that follow one watch per kind: the bench sees each change as it happens
//! instead of listing hundreds of objects again and again, which at N = 1000 would
//! load the API server more than the work being measured.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{Debug, Display};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::scene::is_helper;
use refill_e2e::is_pod_ready;

/// The objects one watch sees, kept up to date while it lives.
pub struct Watched<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    changed: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Drop for Watched<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Watched<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching what `api` and `config` select.
    pub fn start(api: Api<K>, config: watcher::Config) -> Self {
        let (store, writer) = reflector::store();
        let (tx, changed) = watch::channel(0u64);
        let events = reflector::reflector(writer, watcher(api, config).default_backoff());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut failures = 0usize;
            while let Some(event) = events.next().await {
                match event {
                    Ok(_) => tx.send_modify(|n| *n += 1),
                    // The watcher starts again by itself; a few failures say why a wait
                    // that times out saw nothing.
                    Err(e) => {
                        failures += 1;
                        if failures <= 3 {
                            eprintln!("[bench] a watch failed (it starts again): {e}");
                        }
                    }
                }
            }
        });
        Watched {
            store,
            changed,
            task,
        }
    }

    /// The objects seen now.
    pub fn snapshot(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// A receiver that is told of each change after this call.
    pub fn changes(&self) -> watch::Receiver<u64> {
        let mut changes = self.changed.clone();
        changes.borrow_and_update();
        changes
    }

    /// Evaluates `check` over all objects seen, once listed and then after each
    /// change, until it returns `Ok`. Its `Err` says what is still missing; after
    /// `timeout` the error names `what` and the last of these.
    pub async fn until<T>(
        &self,
        what: impl Display,
        timeout: Duration,
        mut check: impl FnMut(&[Arc<K>]) -> Result<T, String>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        if tokio::time::timeout_at(deadline, self.store.wait_until_ready())
            .await
            .is_err()
        {
            bail!("waiting for {what}: the watch did not list within {timeout:?}");
        }
        let mut changed = self.changed.clone();
        loop {
            changed.borrow_and_update();
            let missing = match check(&self.store.state()) {
                Ok(value) => return Ok(value),
                Err(missing) => missing,
            };
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => bail!("the watch stopped while waiting for {what} ({missing})"),
                Err(_) => bail!("timed out after {timeout:?} waiting for {what}: {missing}"),
            }
        }
    }
}

/// Per namespace of `namespaces`: how many of `pods` are there (terminating ones
/// too), and the names of those Ready and not terminating. Helper pods of a restore
/// are left out.
pub fn pods_by_namespace<'a>(
    pods: &'a [Arc<Pod>],
    namespaces: &HashSet<&str>,
) -> HashMap<&'a str, (usize, Vec<&'a str>)> {
    let mut by_ns: HashMap<&str, (usize, Vec<&str>)> = HashMap::new();
    for pod in pods {
        let Some(ns) = pod.metadata.namespace.as_deref() else {
            continue;
        };
        if !namespaces.contains(ns) || is_helper(pod) {
            continue;
        }
        let entry = by_ns.entry(ns).or_default();
        entry.0 += 1;
        if pod.metadata.deletion_timestamp.is_none() && is_pod_ready(pod) {
            entry
                .1
                .push(pod.metadata.name.as_deref().unwrap_or_default());
        }
    }
    by_ns
}

/// Whether no namespace of `namespaces` has a pod left.
pub fn all_gone(pods: &[Arc<Pod>], namespaces: &[String]) -> Result<(), String> {
    let set: HashSet<&str> = namespaces.iter().map(String::as_str).collect();
    let by_ns = pods_by_namespace(pods, &set);
    let left = by_ns.values().filter(|(present, _)| *present > 0).count();
    if left == 0 {
        Ok(())
    } else {
        Err(format!(
            "{left} of {} namespaces still have pods",
            namespaces.len()
        ))
    }
}

/// One Ready pod's name per namespace, once each namespace has as many Ready pods as
/// `want` says for it.
pub fn all_ready(
    pods: &[Arc<Pod>],
    want: &BTreeMap<String, i32>,
) -> Result<BTreeMap<String, String>, String> {
    let set: HashSet<&str> = want.keys().map(String::as_str).collect();
    let by_ns = pods_by_namespace(pods, &set);
    let short = want
        .iter()
        .filter(|&(ns, &replicas)| {
            let ready = by_ns.get(ns.as_str()).map_or(0, |(_, ready)| ready.len());
            ready != replicas.max(0) as usize
        })
        .count();
    if short > 0 {
        return Err(format!(
            "{short} of {} namespaces without all their pods Ready",
            want.len()
        ));
    }
    Ok(by_ns
        .into_iter()
        .filter_map(|(ns, (_, ready))| ready.first().map(|p| (ns.to_string(), p.to_string())))
        .collect())
}
