//! Validation of a DataRestore: read what the plan needs, then decide with
//! [`crate::plan::plan`]. Shared by the controller and `refill restore create --dry-run`.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{Backup, DataRestore, PodVolumeBackup, Schedule, VolumePluginRestore};
use crate::labels;
use crate::observe::{self, reads::Reads};
use crate::plan::{self, BackupChoice, Facts, Invalid, Plan, resolve_backup, select_volumes};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ValidateError {
    /// The request itself is wrong; retrying will not help.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// Reading the cluster failed; worth retrying.
    #[error("reading the cluster failed: {0}")]
    Kube(#[from] kube::Error),
}

/// Validates `dr` against the cluster as it is now and returns what would be done.
/// Reads only, through `reads` (the API, or the controller's watches first).
pub(crate) async fn plan(reads: Reads<'_>, dr: &DataRestore) -> Result<Plan, ValidateError> {
    Ok(plan_and_consumers(reads, dr).await?.0)
}

/// [`plan`], with the consumers it found by claim (`namespace/name`), so that the
/// controller can start the first volumes in the same pass without reading every
/// workload of their namespaces again.
pub(crate) async fn plan_and_consumers(
    reads: Reads<'_>,
    dr: &DataRestore,
) -> Result<(Plan, Consumers), ValidateError> {
    // A spec that is wrong on its face is refused before anything is read: its names
    // could make the reads themselves fail, which would look like a passing trouble.
    let errors = plan::spec_errors(&dr.spec);
    if !errors.is_empty() {
        return Err(Invalid { errors }.into());
    }
    let facts = gather(reads, dr).await?;
    let plan = plan::plan(&dr.spec, &dr.name_any(), &facts)?;
    Ok((plan, facts.consumers))
}

/// Consumers by claim (`namespace/name`), as [`observe::consumers::consumers`] finds them.
pub(crate) type Consumers = BTreeMap<String, Vec<plan::ConsumerRef>>;

async fn gather(reads: Reads<'_>, dr: &DataRestore) -> Result<Facts, ValidateError> {
    let client = reads.client();
    let namespace = dr.namespace().unwrap_or_else(|| "velero".into());
    let own_uid = dr.uid().unwrap_or_default();
    let backup = find_backup(client, &namespace, dr).await?;
    let backup_name = backup.name_any();

    let mut pvbs: Vec<PodVolumeBackup> = Vec::new();
    let api = Api::<PodVolumeBackup>::namespaced(client.clone(), &namespace);
    let backup_uid = backup.uid();
    observe::paging::for_each_pod_volume_backup(&api, Some(&backup_name), |pvb| {
        // A backup deleted and taken again under the same name leaves PVBs of both.
        let same = match (pvb.labels().get(labels::BACKUP_UID), &backup_uid) {
            (Some(label), Some(uid)) => label == uid,
            _ => true,
        };
        if same {
            pvbs.push(pvb);
        }
    })
    .await?;

    // Only namespaces the backup holds PVCs of can contribute volumes.
    let mut pvcs = BTreeMap::new();
    let backup_namespaces: BTreeSet<String> = pvbs
        .iter()
        .filter_map(|p| p.spec.pod.namespace.clone())
        .collect();
    let wanted: Vec<String> = backup_namespaces
        .into_iter()
        .filter(|ns| {
            dr.spec
                .pvcs
                .iter()
                .any(|k| k.starts_with(&format!("{ns}/")))
                || dr.spec.included_namespaces.contains(ns)
                || (dr.spec.included_namespaces.is_empty() && dr.spec.selector.is_some())
        })
        .collect();
    let lists: Vec<(String, Vec<PersistentVolumeClaim>)> = if reads.cluster_wide(wanted.len()) {
        let wanted: BTreeSet<String> = wanted.into_iter().collect();
        reads.claims_of(&wanted).await?.into_iter().collect()
    } else {
        side_by_side(wanted, |ns| async move {
            let list = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await?;
            Ok((ns, list.items))
        })
        .await?
    };
    for (ns, items) in lists {
        for pvc in items {
            pvcs.insert(format!("{ns}/{}", pvc.name_any()), pvc);
        }
    }

    let mut facts = Facts {
        backup: Some(backup),
        pod_volume_backups: pvbs,
        pvcs,
        ..Default::default()
    };
    // Without a valid selection the plan fails anyway; it says why.
    let Ok(selected) = select_volumes(
        &dr.spec,
        &backup_name,
        &facts.pod_volume_backups,
        &facts.pvcs,
    ) else {
        return Ok(facts);
    };
    let selected: Vec<String> = selected.into_iter().map(|(key, _)| key).collect();

    let mut claims_by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut pv_names = BTreeSet::new();
    let mut classes = BTreeSet::new();
    for key in &selected {
        if let Some(spec) = &facts.pvcs[key].spec {
            pv_names.extend(spec.volume_name.clone());
            classes.extend(spec.storage_class_name.clone().filter(|c| !c.is_empty()));
        }
        let (ns, name) = key
            .split_once('/')
            .expect("selected keys are namespace/name");
        claims_by_ns
            .entry(ns.to_string())
            .or_default()
            .push(name.to_string());
    }
    facts.pv_nodes = existing(client, pv_names, |pv: PersistentVolume| plan::pv_nodes(&pv)).await?;
    facts.storage_classes = existing(client, classes, |mut class: StorageClass| {
        // Kept for the whole validation: without who-wrote-which-field, most of it.
        class.metadata.managed_fields = None;
        class
    })
    .await?;
    if !dr.spec.candidate_nodes.is_empty() {
        // Their names alone, a page at a time: a cluster may have thousands.
        let api = &Api::<Node>::all(client.clone());
        let params = ListParams::default().limit(observe::paging::NAME_PAGE);
        observe::paging::for_each_page(
            params,
            |p| async move { api.list_metadata(&p).await },
            |node| {
                facts.nodes.insert(node.name_any());
            },
        )
        .await?;
    }
    // Each request makes a DataRestore here; the running ones' volumes are kept in
    // their VolumePluginRestores, read a page at a time, keeping only which claims
    // they hold.
    let restores = Api::<DataRestore>::namespaced(client.clone(), &namespace);
    let mut running = Vec::new();
    observe::paging::for_each_listed(&restores, "", |other| {
        let ended = other.status.as_ref().is_none_or(|s| s.phase.is_terminal());
        if other.uid().as_deref() != Some(own_uid.as_str()) && !ended {
            running.push((other.uid().unwrap_or_default(), other.name_any()));
        }
    })
    .await?;
    let records = Api::<VolumePluginRestore>::namespaced(client.clone(), &namespace);
    for (uid, name) in running {
        let mine = format!("{}={uid}", labels::DATA_RESTORE_UID);
        observe::paging::for_each_listed(&records, &mine, |record| {
            if let Some(pvc) = record.status.and_then(|s| s.volume_id) {
                facts.held_by_others.insert(pvc, name.clone());
            }
        })
        .await?;
    }
    let own_uid = &own_uid;
    let git_ops = dr.spec.git_ops();
    let git_ops = git_ops.as_ref();
    let workloads = observe::workloads::workloads_mounting(reads, &claims_by_ns, git_ops).await?;
    let reads = match &workloads {
        Some(w) => reads.with_workloads(w),
        None => reads,
    };
    let found = side_by_side(claims_by_ns, |(ns, claims)| async move {
        let claims: Vec<&str> = claims.iter().map(String::as_str).collect();
        Ok(observe::consumers::consumers(reads, &ns, &claims, own_uid, git_ops).await?)
    })
    .await?;
    for consumers in found {
        facts.consumers.extend(consumers);
    }
    // Each object the consumers' marks name says itself which of them it manages.
    let named = observe::managers::named(facts.consumers.values().flatten());
    let to_read = plan::gitops::to_read(git_ops, named, &[]);
    facts.git_ops = observe::managers::seen(client, to_read).await?;
    if dr.spec.switch_workloads {
        let namespaces: BTreeSet<String> = selected
            .iter()
            .filter_map(|key| key.split_once('/').map(|(ns, _)| ns.to_string()))
            .collect();
        let labelled = side_by_side(namespaces, |ns| async move {
            Ok(observe::labelled::labelled_workloads(client, &ns).await?)
        })
        .await?;
        facts.labelled = labelled.into_iter().flatten().collect();
    }
    Ok(facts)
}

/// What `keep` makes of each cluster-scoped object of kind `K` with these names that
/// exists, by name; it takes each object as it is read.
async fn existing<K, T>(
    client: &Client,
    names: BTreeSet<String>,
    keep: fn(K) -> T,
) -> Result<BTreeMap<String, T>, ValidateError>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let found = side_by_side(names, |name| async move {
        let found = Api::<K>::all(client.clone()).get_opt(&name).await?;
        Ok(found.map(|object| (name, keep(object))))
    })
    .await?;
    Ok(found.into_iter().flatten().collect())
}

/// Runs one read per item, several at once (a restore of many namespaces would otherwise
/// wait on each in turn); the results come in no particular order.
async fn side_by_side<I, T, F, Fut>(items: I, read: F) -> Result<Vec<T>, ValidateError>
where
    I: IntoIterator,
    F: Fn(I::Item) -> Fut,
    Fut: Future<Output = Result<T, ValidateError>>,
{
    futures::stream::iter(items)
        .map(read)
        .buffer_unordered(16)
        .try_collect()
        .await
}

async fn find_backup(
    client: &Client,
    namespace: &str,
    dr: &DataRestore,
) -> Result<Backup, ValidateError> {
    let choice = BackupChoice::from_spec(&dr.spec)?;
    // A schedule is resolved once; later passes keep the backup recorded in status.
    let recorded = dr.status.as_ref().and_then(|s| s.backup_name.clone());
    let backups: Api<Backup> = Api::namespaced(client.clone(), namespace);
    let backup = match (&choice, recorded.as_ref()) {
        (BackupChoice::Named(name), _) | (BackupChoice::Schedule(_), Some(name)) => {
            let found = backups.get_opt(name).await?;
            let named = BackupChoice::Named(name.clone());
            resolve_backup(&named, namespace, found.as_ref(), false, &[])?
        }
        (BackupChoice::Schedule(schedule), None) => {
            let exists = Api::<Schedule>::namespaced(client.clone(), namespace)
                .get_opt(schedule)
                .await?
                .is_some();
            let selector = format!(
                "{}={}",
                labels::SCHEDULE_NAME,
                labels::label_value(schedule)
            );
            let list = backups
                .list(&ListParams::default().labels(&selector))
                .await?;
            resolve_backup(&choice, namespace, None, exists, &list.items)?
        }
    };
    Ok(backup)
}
