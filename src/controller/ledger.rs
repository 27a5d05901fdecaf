//! Where a DataRestore's volumes, consumers and GitOps objects are kept: each volume's
//! record, with the consumers that come back through it and the GitOps objects that
//! manage those first, in the volume's VolumePluginRestore (`status.record`). The DataRestore itself keeps only counts and the few volumes that
//! need a person, so that its size does not grow with its volumes (etcd refuses
//! objects past 1.5 MiB, which a status listing ~1,200 volumes reached) and a pass
//! writes only the volumes that changed, not all of them: at `parallel: 8` a restore of
//! N volumes made N passes that each wrote N volumes.
//!
//! The controller keeps its newest records in memory ([`Ledger`]): it is the only
//! writer (one leader at a time), so its last writes are what the cluster holds. A
//! restarted controller, or one whose write failed, reads the VolumePluginRestores
//! again. Each write carries the resourceVersion it read, so a write from a copy that
//! is not the newest fails instead of writing old phases back.
//!
//! Records go out before anything acts on them: a pass's volume records are written
//! before its DataRestore status, and both before the next pass acts on them.
//!
//! A change that only says what was seen (the node agent wrote, is done: [`observed`])
//! may wait up to [`RECORD_LAG`] to be written, and goes out
//! with the volume's next change that must be: most volumes pass through those phases
//! faster than that, and each was a write. While a volume's record lags it takes no
//! step that acts (`volume::advance` holds it until the record is written), so a
//! restarted refill that reads the older record finds the world as that record left
//! it, moved on only by what the node agent and `restore-wait` did on their own.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{
    ConsumerRecord, DataRestore, DataRestoreStatus, GitOpsRecord, VolumePluginRestore,
    VolumePluginRestoreStatus, VolumeRecord, VolumeStatus,
};
use crate::controller::build::pod_volume_restore as pvr;
use crate::controller::volume::observed;
use crate::labels;

use super::runtime::error::is_conflict;
use super::runtime::object_writes;
use super::{Error, Result};

/// VolumePluginRestores written at once.
const WRITES_IN_FLIGHT: usize = 16;

/// How long a volume's VolumePluginRestore may lag behind what refill saw of it (see
/// the top of this file). Short enough for a person watching the volumes to follow
/// them; long enough that most volumes go from the node agent's start to the end of
/// `restore-wait` within it, and that a long restore's progress costs a write per
/// volume every 5 s at most.
pub(crate) const RECORD_LAG: Duration = Duration::from_secs(5);

/// What the controller last wrote of each restore, by the restore's UID.
#[derive(Default)]
pub(crate) struct Ledger {
    books: Mutex<HashMap<String, Book>>,
}

/// One restore's newest records: as the cluster holds them, but for the lagging ones.
#[derive(Default)]
struct Book {
    /// `None` while a pass holds them (see [`Ledger::load`]): a restore of ten
    /// thousand volumes is not copied more than its pass needs.
    kept: Option<Kept>,
    /// Whether the pass that holds them saved its changed copy (see [`Ledger::save`]):
    /// that copy, not the one it was lent, is the newest now (written, or lagging).
    written: bool,
    /// The resourceVersion of each volume's VolumePluginRestore, by index; `None`
    /// before it is made.
    versions: Vec<Option<String>>,
    /// The volumes whose newest record is not written yet, by index, with since when.
    lagging: BTreeMap<usize, Instant>,
    /// Lagging volumes whose records go out with the next save, whatever changed: a
    /// step of theirs waits for it.
    due: BTreeSet<usize>,
}

/// What a restore keeps in its VolumePluginRestores, assembled: the lists a pass reads
/// and changes, as the DataRestore status holds them in memory.
#[derive(Clone, Default, Debug, PartialEq)]
pub struct Kept {
    /// Every volume, in the restore's order of work.
    pub volumes: Vec<VolumeStatus>,
    /// The consumers, by the volume each is kept with.
    pub consumers: Vec<ConsumerRecord>,
    /// The GitOps objects, by the volume each is kept with.
    pub git_ops: Vec<GitOpsRecord>,
}

impl Kept {
    /// Moved out of `status`, leaving its lists empty.
    pub fn take(status: &mut DataRestoreStatus) -> Kept {
        Kept {
            volumes: std::mem::take(&mut status.volumes),
            consumers: std::mem::take(&mut status.consumers),
            git_ops: std::mem::take(&mut status.git_ops),
        }
    }

    /// Put into `status`, in place of its lists.
    pub fn put(self, status: &mut DataRestoreStatus) {
        status.volumes = self.volumes;
        status.consumers = self.consumers;
        status.git_ops = self.git_ops;
    }
}

/// A volume's record as written: the volume, the consumers that come back through it,
/// and the GitOps objects kept with it.
#[derive(Debug, PartialEq)]
pub struct Entry<'a> {
    /// The volume's restore.
    pub volume: &'a VolumeStatus,
    /// The consumers kept with it (see [`homes`]).
    pub consumers: Vec<&'a ConsumerRecord>,
    /// The GitOps objects kept with it (see [`git_ops_homes`]).
    pub git_ops: Vec<&'a GitOpsRecord>,
}

/// The index of the volume each consumer is kept with: the first of its PVCs that the
/// restore has (the first volume if none, which validation never lets happen).
pub(crate) fn homes(volumes: &[VolumeStatus], consumers: &[ConsumerRecord]) -> Vec<usize> {
    let index: HashMap<&str, usize> = volumes
        .iter()
        .enumerate()
        .map(|(i, v)| (v.pvc.as_str(), i))
        .collect();
    consumers
        .iter()
        .map(|c| {
            c.pvcs
                .iter()
                .filter_map(|pvc| index.get(pvc.as_str()).copied())
                .min()
                .unwrap_or(0)
        })
        .collect()
}

/// The index of the volume each GitOps object is kept with: the first home of the
/// consumers it manages (the first volume if it names none the restore has).
pub(crate) fn git_ops_homes(kept: &DataRestoreStatus) -> Vec<usize> {
    git_ops_homes_by(kept, &homes(&kept.volumes, &kept.consumers))
}

/// [`git_ops_homes`], from the consumers' homes already found. Asked on every pass: a
/// restore without GitOps objects names no consumer.
fn git_ops_homes_by(kept: &DataRestoreStatus, consumer_homes: &[usize]) -> Vec<usize> {
    if kept.git_ops.is_empty() {
        return Vec::new();
    }
    let by_name: HashMap<String, usize> = kept
        .consumers
        .iter()
        .zip(consumer_homes.iter().copied())
        .map(|(c, home)| (c.kind.describe(&c.namespace, &c.name), home))
        .collect();
    kept.git_ops
        .iter()
        .map(|g| {
            g.workloads
                .iter()
                .filter_map(|w| by_name.get(w).copied())
                .min()
                .unwrap_or(0)
        })
        .collect()
}

/// Each volume's entry, by index.
pub fn entries(kept: &DataRestoreStatus) -> Vec<Entry<'_>> {
    let mut entries: Vec<Entry> = kept
        .volumes
        .iter()
        .map(|volume| Entry {
            volume,
            consumers: Vec::new(),
            git_ops: Vec::new(),
        })
        .collect();
    if entries.is_empty() {
        return entries;
    }
    let consumer_homes = homes(&kept.volumes, &kept.consumers);
    for (consumer, &home) in kept.consumers.iter().zip(&consumer_homes) {
        entries[home].consumers.push(consumer);
    }
    for (record, home) in kept
        .git_ops
        .iter()
        .zip(git_ops_homes_by(kept, &consumer_homes))
    {
        entries[home].git_ops.push(record);
    }
    entries
}

/// The consumers and GitOps objects in the order they are read back (by the volume
/// each is kept with), so that the order a pass sees does not depend on whether the
/// controller restarted.
pub(crate) fn in_read_order(status: &mut DataRestoreStatus) {
    let homes = homes(&status.volumes, &status.consumers);
    sort_by_home(&mut status.consumers, homes);
    let homes = git_ops_homes(status);
    sort_by_home(&mut status.git_ops, homes);
}

/// `items` ordered by their homes, stably; untouched when they are in order already.
fn sort_by_home<T>(items: &mut Vec<T>, homes: Vec<usize>) {
    if homes.windows(2).all(|w| w[0] <= w[1]) {
        return;
    }
    let mut paired: Vec<(usize, T)> = homes.into_iter().zip(items.drain(..)).collect();
    paired.sort_by_key(|(home, _)| *home);
    items.extend(paired.into_iter().map(|(_, item)| item));
}

/// The indices of the entries of `after` that differ from `before` (or are new).
pub fn changed(before: &[Entry], after: &[Entry]) -> Vec<usize> {
    (0..after.len())
        .filter(|&i| before.get(i) != Some(&after[i]))
        .collect()
}

/// Whether entry `after` differs from `before` only by what was seen of its volume.
fn only_seen(before: &Entry, after: &Entry) -> bool {
    before.consumers == after.consumers
        && before.git_ops == after.git_ops
        && observed::only_seen(before.volume, after.volume)
}

/// Which records a save writes: the `changed` entries of `after` (against `before`)
/// that must go out now, the ones never written, and the lagging ones that are `due`
/// or have lagged `lag`; and which of the changed wait, as only seen (each keeps the
/// time it began to lag). `written[i]`: volume `i`'s record exists.
fn to_write(
    before: &[Entry],
    after: &[Entry],
    written: &[bool],
    lagging: &BTreeMap<usize, Instant>,
    due: &BTreeSet<usize>,
    (now, lag): (Instant, Duration),
) -> (Vec<usize>, Vec<usize>) {
    let overdue = |i: &usize| {
        due.contains(i)
            || lagging
                .get(i)
                .is_some_and(|since| now.duration_since(*since) >= lag)
    };
    let (mut write, mut wait): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    for i in changed(before, after) {
        let seen = written[i] && before.get(i).is_some_and(|b| only_seen(b, &after[i]));
        match seen && !overdue(&i) {
            true => wait.push(i),
            false => write.push(i),
        }
    }
    write.extend((0..after.len()).filter(|&i| !written[i]));
    write.extend(lagging.keys().filter(|i| overdue(i) && **i < after.len()));
    write.sort_unstable();
    write.dedup();
    (write, wait)
}

/// What records read back keep, in the order of their indices.
pub fn assemble(mut records: Vec<VolumeRecord>) -> Kept {
    records.sort_by_key(|r| r.index);
    let mut kept = Kept {
        volumes: Vec::with_capacity(records.len()),
        ..Default::default()
    };
    for record in records {
        kept.volumes.push(record.volume);
        kept.consumers.extend(record.consumers);
        kept.git_ops.extend(record.git_ops);
    }
    kept
}

/// The name of the VolumePluginRestore that keeps `volume` of restore `dr`.
pub(crate) fn record_name(dr: &DataRestore, volume: &VolumeStatus) -> String {
    labels::pod_volume_restore_name(&dr.name_any(), &dr.uid().unwrap_or_default(), &volume.pvc)
}

/// What `dr`'s status holds once its volumes and consumers are read back from its
/// VolumePluginRestores: the whole restore, as `refill restore describe` and tests read it.
pub async fn read(client: &Client, dr: &DataRestore) -> kube::Result<DataRestoreStatus> {
    let mut status = dr.status.clone().unwrap_or_default();
    let (kept, _, _) = list(client, dr).await?;
    kept.put(&mut status);
    Ok(status)
}

/// What the VolumePluginRestores of `dr` that hold a record keep, the resourceVersion
/// of each, and how many there were in all.
async fn list(
    client: &Client,
    dr: &DataRestore,
) -> kube::Result<(Kept, Vec<Option<String>>, usize)> {
    let api: Api<VolumePluginRestore> =
        Api::namespaced(client.clone(), &dr.namespace().unwrap_or_default());
    let selector = format!(
        "{}={}",
        labels::DATA_RESTORE_UID,
        dr.uid().unwrap_or_default()
    );
    let mut found: Vec<(VolumeRecord, Option<String>)> = Vec::new();
    crate::observe::paging::for_each_listed(&api, &selector, |vpr: VolumePluginRestore| {
        let version = vpr.resource_version();
        if let Some(record) = vpr.status.and_then(|s| s.record) {
            found.push((record, version));
        }
    })
    .await?;
    let all = found.len();
    found.sort_by_key(|(r, _)| r.index);
    let versions = found.iter().map(|(_, v)| v.clone()).collect();
    let kept = assemble(found.into_iter().map(|(r, _)| r).collect());
    Ok((kept, versions, all))
}

impl Ledger {
    /// `dr`'s volumes and consumers: as last written, or read back from its
    /// VolumePluginRestores. `status` is the DataRestore's own; its counts say how many
    /// volumes there must be.
    ///
    /// The records move into `status` rather than being copied: until [`Ledger::save`]
    /// keeps what it wrote, or [`Ledger::give_back`] returns them unchanged, the
    /// ledger holds none, and a pass that never gives them back (it panicked) makes
    /// the next one read the cluster again.
    pub(crate) async fn load(
        &self,
        client: &Client,
        dr: &DataRestore,
        status: &mut DataRestoreStatus,
    ) -> Result<()> {
        let uid = dr.uid().unwrap_or_default();
        let kept = self.lock().get_mut(&uid).and_then(|book| book.kept.take());
        let kept = match kept {
            Some(kept) => kept,
            None => {
                let (mut kept, mut versions, found) = list(client, dr).await?;
                if found == 0 && !status.volumes.is_empty() {
                    // Left under way by a refill that kept the records in the
                    // DataRestore: carried over, and written out in full by the next
                    // save (none has a version yet).
                    versions = vec![None; status.volumes.len()];
                    kept = Kept::take(status);
                }
                let expected = status
                    .volume_counts
                    .as_ref()
                    .map_or(0, |c| c.total as usize);
                if found < expected {
                    return Err(Error::Permanent(format!(
                        "{} of the {expected} VolumePluginRestores that keep this restore's volumes are missing (deleted by hand?), so its state cannot be read back; the workloads it stopped carry {}={uid} and their replica count in {}: scale them back by hand, then remove the finalizer {} from this DataRestore",
                        expected - found,
                        labels::QUIESCED_BY,
                        labels::ORIGINAL_REPLICAS,
                        labels::FINALIZER,
                    )));
                }
                self.lock().insert(
                    uid,
                    Book {
                        kept: None,
                        written: false,
                        versions,
                        ..Default::default()
                    },
                );
                kept
            }
        };
        kept.put(status);
        Ok(())
    }

    /// Takes back the records [`Ledger::load`] lent to a pass: `loaded`, as lent, when
    /// the pass wrote none of them (they are still what the cluster holds), or `passed`,
    /// the pass's changed copy, once [`Ledger::save`] wrote it. Kept by moving, not
    /// copying: at 10,000 volumes each copy of the lists is tens of megabytes.
    pub(crate) fn give_back(
        &self,
        uid: &str,
        loaded: &mut DataRestoreStatus,
        passed: &mut DataRestoreStatus,
    ) {
        if let Some(book) = self.lock().get_mut(uid)
            && book.kept.is_none()
        {
            let held = if book.written { passed } else { loaded };
            book.kept = Some(Kept::take(held));
            book.written = false;
        }
    }

    /// Writes the records of `after` that differ from `before` (both as loaded and
    /// changed by a pass), making the VolumePluginRestores of new volumes; the pass
    /// then gives `after` back (see [`Ledger::give_back`]). On any failure the memory of
    /// the restore goes, so the next pass reads the cluster again.
    pub(crate) async fn save(
        &self,
        client: &Client,
        dr: &DataRestore,
        before: &DataRestoreStatus,
        after: &DataRestoreStatus,
    ) -> Result<()> {
        let uid = dr.uid().unwrap_or_default();
        let old = entries(before);
        let new = entries(after);
        let (mut versions, mut lagging, due) = self
            .lock()
            .get(&uid)
            .map(|b| (b.versions.clone(), b.lagging.clone(), b.due.clone()))
            .unwrap_or_default();
        versions.resize(after.volumes.len(), None);
        // What changed and must go out, what lagged long enough, and what was never
        // written (a restore carried over from the DataRestore's own status).
        let made: Vec<bool> = versions.iter().map(Option::is_some).collect();
        let now = Instant::now();
        let (changed, wait) = to_write(&old, &new, &made, &lagging, &due, (now, RECORD_LAG));
        for i in wait {
            lagging.entry(i).or_insert(now);
        }
        if changed.is_empty() {
            self.keep(uid, versions, lagging);
            return Ok(());
        }
        let api: Api<VolumePluginRestore> =
            Api::namespaced(client.clone(), &dr.namespace().unwrap_or_default());
        let backup = after.backup_name.as_deref().unwrap_or_default();
        // One copy of the restore for all writes: its spec may name thousands of claims.
        let shared = Arc::new((dr.clone(), backup.to_string()));
        // Each record is copied out as its write starts, not all before the first: the
        // first pass of a restore of 10,000 volumes writes every one of them.
        let results: std::result::Result<Vec<(usize, Option<String>)>, Error> =
            futures::stream::iter(changed)
                .map(|i| {
                    let entry = &new[i];
                    let record = VolumeRecord {
                        index: i as u32,
                        volume: entry.volume.clone(),
                        consumers: entry.consumers.iter().map(|c| (*c).clone()).collect(),
                        git_ops: entry.git_ops.iter().map(|g| (*g).clone()).collect(),
                    };
                    let written = write(api.clone(), shared.clone(), record, versions[i].clone());
                    async move { Ok::<_, Error>((i, written.await?)) }
                })
                .buffer_unordered(WRITES_IN_FLIGHT)
                .try_collect()
                .await;
        match results {
            Ok(written) => {
                for (i, version) in written {
                    versions[i] = version;
                    lagging.remove(&i);
                }
                self.keep(uid, versions, lagging);
                Ok(())
            }
            Err(e) => {
                self.forget(&uid);
                Err(e)
            }
        }
    }

    /// After a save: the pass's copy is what the ledger keeps (see
    /// [`Ledger::give_back`]), its records written or lagging.
    fn keep(&self, uid: String, versions: Vec<Option<String>>, lagging: BTreeMap<usize, Instant>) {
        let book = Book {
            kept: None,
            written: true,
            versions,
            lagging,
            due: BTreeSet::new(),
        };
        self.lock().insert(uid, book);
    }

    /// The volumes of restore `uid` whose newest record is not written yet.
    pub(crate) fn lagging(&self, uid: &str) -> HashSet<usize> {
        self.lock()
            .get(uid)
            .map(|b| b.lagging.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Has the next save write these lagging volumes' records, changed or not.
    pub(crate) fn write_next(&self, uid: &str, volumes: &[usize]) {
        if let Some(book) = self.lock().get_mut(uid) {
            book.due
                .extend(volumes.iter().filter(|i| book.lagging.contains_key(i)));
        }
    }

    /// Whether a record of restore `uid` is to be written even if its pass changed
    /// nothing: one a step waits for, or one that lagged [`RECORD_LAG`].
    pub(crate) fn owes(&self, uid: &str) -> bool {
        let now = Instant::now();
        self.lock().get(uid).is_some_and(|b| {
            !b.due.is_empty()
                || b.lagging
                    .values()
                    .any(|since| now.duration_since(*since) >= RECORD_LAG)
        })
    }

    /// Drops what is kept of restore `uid`.
    pub(crate) fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Book>> {
        self.books
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes one volume's record into its VolumePluginRestore, made first if `version` is
/// `None`; answers the resourceVersion it now has.
async fn write(
    api: Api<VolumePluginRestore>,
    restore: Arc<(DataRestore, String)>,
    record: VolumeRecord,
    version: Option<String>,
) -> Result<Option<String>> {
    let (dr, backup) = (&restore.0, restore.1.as_str());
    let name = record_name(dr, &record.volume);
    let mut object = pvr::volume_plugin_restore(
        dr,
        &name,
        backup,
        &record.volume,
        record.volume.uploader_type.as_deref(),
    );
    let version = match version {
        Some(version) => Some(version),
        None => match api.create(&PostParams::default(), &object).await {
            Ok(made) => made.resource_version(),
            // Made by a pass whose status write did not go through: written over, as
            // it holds nothing newer than this pass.
            Err(e) if is_conflict(&e) => api.get(&name).await?.resource_version(),
            Err(e) => return Err(e.into()),
        },
    };
    let mut status: VolumePluginRestoreStatus = pvr::plugin_status(&record.volume);
    status.record = Some(record);
    object.metadata.resource_version = version;
    object.status = Some(status);
    let written = object_writes::replace_status(&api, &object).await?;
    Ok(written.resource_version())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, GitOpsKind, GitOpsState, VolumePhase};

    fn volume(pvc: &str) -> VolumeStatus {
        VolumeStatus {
            pvc: pvc.into(),
            ..Default::default()
        }
    }

    fn consumer(name: &str, pvcs: &[&str]) -> ConsumerRecord {
        ConsumerRecord {
            kind: ConsumerKind::Deployment,
            namespace: "shop".into(),
            name: name.into(),
            pvcs: pvcs.iter().map(|p| p.to_string()).collect(),
            state: Default::default(),
            replicas: Some(1),
            original: None,
            held_by: None,
            switch_to: None,
            stopped_at: None,
            resumed_at: None,
            uid: None,
        }
    }

    fn managing(name: &str, workloads: &[&str]) -> GitOpsRecord {
        GitOpsRecord {
            kind: GitOpsKind::Kustomization,
            namespace: "flux-system".into(),
            name: name.into(),
            workloads: workloads
                .iter()
                .map(|w| format!("Deployment shop/{w}"))
                .collect(),
            state: GitOpsState::Found,
            original: None,
            message: None,
            paused_at: None,
            resumed_at: None,
        }
    }

    fn status(
        volumes: Vec<VolumeStatus>,
        consumers: Vec<ConsumerRecord>,
        git_ops: Vec<GitOpsRecord>,
    ) -> DataRestoreStatus {
        let mut status = DataRestoreStatus::default();
        Kept {
            volumes,
            consumers,
            git_ops,
        }
        .put(&mut status);
        status
    }

    fn abc() -> Vec<VolumeStatus> {
        vec![volume("shop/a"), volume("shop/b"), volume("shop/c")]
    }

    #[test]
    fn a_consumer_is_kept_with_the_first_of_its_volumes_and_a_gitops_object_with_its_first_consumer()
     {
        let s = status(
            abc(),
            vec![
                consumer("web", &["shop/c", "shop/b"]),
                consumer("db", &["shop/a"]),
                consumer("stray", &["other/x"]),
            ],
            vec![
                managing("apps", &["web", "late"]),
                managing("all", &["web", "db"]),
                managing("none", &[]),
            ],
        );
        assert_eq!(homes(&s.volumes, &s.consumers), vec![1, 0, 0]);
        assert_eq!(git_ops_homes(&s), vec![1, 0, 0]);
        let entries = entries(&s);
        let names = |i: usize| -> (Vec<&str>, Vec<&str>) {
            (
                entries[i]
                    .consumers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect(),
                entries[i].git_ops.iter().map(|g| g.name.as_str()).collect(),
            )
        };
        assert_eq!(
            (names(0), names(1), names(2)),
            (
                (vec!["db", "stray"], vec!["all", "none"]),
                (vec!["web"], vec!["apps"]),
                (vec![], vec![])
            )
        );
    }

    #[test]
    fn only_changed_volumes_and_the_homes_of_changed_consumers_and_gitops_objects_are_written() {
        let before = status(
            abc(),
            vec![consumer("web", &["shop/b"])],
            vec![managing("apps", &["web"])],
        );
        let mut after = before.clone();
        after.volumes[2].phase = VolumePhase::Quiescing;
        after.consumers[0].replicas = Some(3);
        let (old, new) = (entries(&before), entries(&after));
        assert_eq!(changed(&old, &new), vec![1, 2]);
        assert!(changed(&old, &old).is_empty());
        assert_eq!(changed(&[], &old), vec![0, 1, 2], "all new");
        let mut paused = before.clone();
        paused.git_ops[0].state = GitOpsState::Paused;
        assert_eq!(changed(&old, &entries(&paused)), vec![1]);
    }

    #[test]
    fn a_record_that_only_says_what_was_seen_waits_until_a_step_needs_it_or_it_lagged_too_long() {
        let restoring = |phase, bytes| VolumeStatus {
            phase,
            bytes_done: bytes,
            stand_in_uid: Some("u1".into()),
            ..volume("shop/a")
        };
        let before = status(
            vec![restoring(VolumePhase::Restoring, 0), volume("shop/b")],
            vec![consumer("web", &["shop/a"])],
            vec![],
        );
        let mut after = before.clone();
        after.volumes[0] = restoring(VolumePhase::RemovingStandIn, 40);
        after.volumes[1].phase = VolumePhase::Quiescing;
        let (old, new) = (entries(&before), entries(&after));
        let t0 = Instant::now();
        let lag = Duration::from_secs(5);
        let none = BTreeMap::new();
        let made = [true, true];
        let plan = |lagging: &BTreeMap<usize, Instant>, due: &[usize], now: Instant| {
            let due: BTreeSet<usize> = due.iter().copied().collect();
            to_write(&old, &new, &made, lagging, &due, (now, lag))
        };
        // The node agent wrote volume a and is done: only seen, it waits; b's start goes out.
        assert_eq!(plan(&none, &[], t0), (vec![1], vec![0]));
        // Lagging since t0: written once due, or once it lagged 5 s, changed or not.
        let lagging = BTreeMap::from([(0, t0)]);
        assert_eq!(plan(&lagging, &[], t0 + lag / 2), (vec![1], vec![0]));
        assert_eq!(plan(&lagging, &[0], t0 + lag / 2), (vec![0, 1], vec![]));
        assert_eq!(plan(&lagging, &[], t0 + lag), (vec![0, 1], vec![]));
        let same = entries(&after);
        let unchanged = to_write(
            &same,
            &same,
            &made,
            &lagging,
            &BTreeSet::from([0]),
            (t0, lag),
        );
        assert_eq!(unchanged, (vec![0], vec![]));
        // A record never made, or whose consumers changed, goes out at once.
        assert_eq!(
            to_write(
                &old,
                &new,
                &[false, true],
                &none,
                &BTreeSet::new(),
                (t0, lag)
            )
            .0,
            vec![0, 1]
        );
        let mut stopping = after.clone();
        stopping.consumers[0].state = crate::api::ConsumerState::Stopping;
        let marked = entries(&stopping);
        assert_eq!(
            to_write(&old, &marked, &made, &none, &BTreeSet::new(), (t0, lag)),
            (vec![0, 1], vec![])
        );
    }

    #[test]
    fn records_read_back_are_what_was_written_in_the_same_order() {
        let mut s = status(
            abc(),
            vec![
                consumer("late", &["shop/c"]),
                consumer("web", &["shop/b"]),
                consumer("db", &["shop/a"]),
            ],
            vec![managing("late", &["late"]), managing("db", &["db"])],
        );
        in_read_order(&mut s);
        let records: Vec<VolumeRecord> = entries(&s)
            .into_iter()
            .enumerate()
            .rev()
            .map(|(i, e)| VolumeRecord {
                index: i as u32,
                volume: e.volume.clone(),
                consumers: e.consumers.into_iter().cloned().collect(),
                git_ops: e.git_ops.into_iter().cloned().collect(),
            })
            .collect();
        let mut read = DataRestoreStatus::default();
        assemble(records).put(&mut read);
        assert_eq!(read, s);
        let names: Vec<&str> = s.consumers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["db", "web", "late"]);
        let names: Vec<&str> = s.git_ops.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["db", "late"]);
    }
}

#[cfg(test)]
mod requests;
