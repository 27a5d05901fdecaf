//! Pausing the GitOps objects that manage a restore's consumers, and letting them go:
//! thin API calls around the pure patches of [`crate::gitops::pause`].

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};

use crate::api::{
    ConsumerState, DataRestore, DataRestoreStatus, GitOpsKind, GitOpsRecord, GitOpsState,
};
use crate::gitops::pause::{self, Pause, Release};

use super::status::now;
use super::{Context, Result, reasons};
use crate::controller::runtime::concurrent::for_each_concurrently;
use crate::controller::runtime::error::{Category, category_of, is_not_found};

/// How long consumers wait for a paused GitOps tool to end what it began before the
/// pause ([`pause::still_applying`]). Flux shows within seconds that it saw a
/// suspension; an Argo CD sync goes through its waves and hooks to the end, which
/// may take minutes.
fn confirm_limit(kind: GitOpsKind) -> Duration {
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => Duration::from_secs(30),
        GitOpsKind::Application => Duration::from_secs(600),
    }
}

/// A dynamic object as one JSON value, metadata included, as [`pause`] reads it.
fn object_json(object: DynamicObject) -> serde_json::Value {
    let mut json = object.data;
    json["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
    json
}

fn api(client: &Client, record: &GitOpsRecord) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        &record.namespace,
        &record.kind.api_resource(),
    )
}

/// Records found but not yet acted on are marked Pausing before anything is written,
/// so that whatever happens next the end of the restore looks at each.
pub(super) fn mark(status: &mut DataRestoreStatus) {
    for record in &mut status.git_ops {
        if record.state == GitOpsState::Found {
            record.state = GitOpsState::Pausing;
        }
    }
}

/// Applies the pauses recorded as Pausing; their consumers wait for them.
pub(super) async fn pause_marked(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    uid: &str,
) -> Result<()> {
    let marked: Vec<usize> = (0..status.git_ops.len())
        .filter(|&i| status.git_ops[i].state == GitOpsState::Pausing)
        .collect();
    if marked.is_empty() {
        return Ok(());
    }
    each(
        dr,
        ctx,
        status,
        marked,
        reasons::GITOPS_PAUSED,
        |mut record| async move {
            let note = pause_one(&ctx.client, uid, &mut record).await?;
            Ok((record, note))
        },
    )
    .await
}

/// What to tell people of one object: whether it is a warning, and the note.
type Note = Option<(bool, String)>;

/// Runs `act` on the records at `indices` side by side, keeps what each did and
/// publishes its note under `reason`.
async fn each<F, Fut>(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    indices: Vec<usize>,
    reason: &str,
    act: F,
) -> Result<()>
where
    F: Fn(GitOpsRecord) -> Fut,
    Fut: std::future::Future<Output = Result<(GitOpsRecord, Note)>>,
{
    let records = status.git_ops.clone();
    let mut notes = Vec::new();
    let result = for_each_concurrently(
        indices,
        |i| act(records[i].clone()),
        |i, (record, note)| {
            status.git_ops[i] = record;
            notes.extend(note);
        },
    )
    .await;
    for (warning, note) in notes {
        ctx.event(dr, warning, reason, note);
    }
    result
}

/// Pauses one object; safe to repeat. Returns what to tell people, and whether it is a
/// warning.
async fn pause_one(client: &Client, uid: &str, record: &mut GitOpsRecord) -> Result<Note> {
    let api = api(client, record);
    let what = record.describe();
    let not_paused = |record: &mut GitOpsRecord, why: String| {
        record.state = GitOpsState::NotPaused;
        record.message = Some(why.clone());
        Ok(Some((true, why)))
    };
    let Some(object) = api.get_opt(&record.name).await? else {
        return not_paused(record, format!("{what} is gone: nothing to pause"));
    };
    let object = object_json(object);
    let (original, object) = match pause::pause(record.kind, &object, uid) {
        Pause::Held { original } => (original, object),
        Pause::Apply { patch, original } => {
            match api
                .patch(&record.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(patched) => (original, object_json(patched)),
                Err(e) if is_not_found(&e) => {
                    return not_paused(record, format!("{what} is gone: nothing to pause"));
                }
                // Refused for good (RBAC, an admission policy): the consumers are
                // stopped anyway, and if it scales one back up its volumes fail safely.
                Err(e) if category_of(&e) == Category::Permanent => {
                    return not_paused(
                        record,
                        format!(
                            "pausing {what} was refused, so it may scale its workloads back up during the restore: {e}"
                        ),
                    );
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    record.original = Some(original);
    let asked = record.paused_at.get_or_insert_with(now).0;
    let now = Timestamp::now();
    let waited = pause::elapsed(asked, now);
    let Some(what_for) = pause::still_applying(record.kind, &object, asked, now) else {
        record.state = GitOpsState::Paused;
        record.message = None;
        return Ok(Some((false, format!("paused {what} for the restore"))));
    };
    // Its consumers wait (they stay Stopping) until the tool has ended what it began,
    // for a bounded while: past it, one it scales back up fails its volume unwritten.
    let limit = confirm_limit(record.kind);
    if waited >= limit {
        record.state = GitOpsState::Paused;
        let why = format!(
            "{what} is paused, but after {limit:?} refill was still waiting for it {what_for}; stopping its workloads anyway"
        );
        record.message = Some(why.clone());
        return Ok(Some((true, why)));
    }
    record.message = Some(format!(
        "waiting for {what} {what_for} before its workloads are stopped"
    ));
    Ok(None)
}

/// Lets go of every object this restore paused, once its consumers are back: the last
/// restore holding one puts it back as it was and asks it to reconcile. One managing a
/// consumer kept stopped (spec.onFailure: KeepStopped) stays paused.
pub(super) async fn release_all(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    uid: &str,
) -> Result<()> {
    let kept: Vec<String> = status
        .consumers
        .iter()
        .filter(|c| c.state == ConsumerState::KeptStopped)
        .map(super::consumer::describe)
        .collect();
    let held: Vec<usize> = (0..status.git_ops.len())
        .filter(|&i| {
            matches!(
                status.git_ops[i].state,
                GitOpsState::Pausing | GitOpsState::Paused
            )
        })
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let kept = &kept;
    each(
        dr,
        ctx,
        status,
        held,
        reasons::GITOPS_RESUMED,
        |mut record| async move {
            let note = if record.workloads.iter().any(|w| kept.contains(w)) {
                keep_paused(&mut record)
            } else {
                release_one(&ctx.client, uid, &mut record).await?
            };
            Ok((record, note))
        },
    )
    .await
}

fn keep_paused(record: &mut GitOpsRecord) -> Note {
    record.state = GitOpsState::KeptPaused;
    let why = format!(
        "left {} paused: a workload it manages was kept stopped (spec.onFailure: KeepStopped); when you bring that back, remove the refill.dev/paused-by and refill.dev/paused-from annotations and unpause it",
        record.describe()
    );
    record.message = Some(why.clone());
    Some((true, why))
}

async fn release_one(client: &Client, uid: &str, record: &mut GitOpsRecord) -> Result<Note> {
    let api = api(client, record);
    let what = record.describe();
    let resumed = |record: &mut GitOpsRecord, message: Option<String>| {
        record.state = GitOpsState::Resumed;
        record.message = message;
        record.resumed_at.get_or_insert_with(now);
    };
    let Some(object) = api.get_opt(&record.name).await? else {
        resumed(record, Some(format!("{what} is gone")));
        return Ok(None);
    };
    let object = object_json(object);
    let at = Timestamp::now().to_string();
    let (patch, note) = match pause::release(record.kind, &object, uid, &at) {
        Release::NotHeld => {
            // A pause recorded (Pausing) that never applied: it ran all along.
            resumed(record, None);
            return Ok(None);
        }
        Release::Leave { patch, others } => {
            let note = format!(
                "{what} stays paused for {others} other restore(s), the last of which puts it back"
            );
            (patch, note)
        }
        Release::Restore { patch } => {
            let note = format!("put {what} back as it was and asked it to reconcile");
            (patch, note)
        }
    };
    match api
        .patch(&record.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {
            resumed(record, Some(format!("{what} is gone")));
            return Ok(None);
        }
        Err(e) if category_of(&e) == Category::Permanent => {
            record.state = GitOpsState::KeptPaused;
            let why = format!(
                "{what} could not be put back and stays paused: {e}; unpause it yourself and remove the refill.dev/paused-by annotation"
            );
            record.message = Some(why.clone());
            return Ok(Some((true, why)));
        }
        Err(e) => return Err(e.into()),
    }
    resumed(record, Some(note.clone()));
    Ok(Some((false, note)))
}
