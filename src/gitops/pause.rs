//! Pausing a GitOps object for a restore and letting it go, as merge patches computed
//! from the object as read. Pure.
//!
//! Several restores may share one object (two apps of one Kustomization restored side
//! by side). The object itself records who holds the pause ([`PAUSED_BY`]) and what it
//! was before the first of them ([`PAUSED_FROM`]); only the last to let go puts that
//! back, so no restore unpauses it under another. Every patch carries the
//! resourceVersion read: two restores writing at once cannot lose each other's mark.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::api::GitOpsKind;
use crate::labels::{PAUSED_BY, PAUSED_FROM};

/// Flux reconciles an object again when this annotation changes.
pub const FLUX_REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// Argo CD skips an Application with this annotation `"true"`.
pub const ARGO_CD_SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";
/// Argo CD refreshes an Application when this annotation appears.
pub const ARGO_CD_REFRESH: &str = "argocd.argoproj.io/refresh";

/// What pausing needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Pause {
    /// This restore holds the pause already, and it is in force.
    Held {
        /// What it was before the first holder paused it (JSON).
        original: String,
    },
    /// Write this, conditional on the version read.
    Apply {
        /// A JSON merge patch.
        patch: Value,
        /// What it was before the first holder paused it (JSON).
        original: String,
    },
}

/// What letting go needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Release {
    /// This restore holds no pause on it (let go before, or never applied).
    NotHeld,
    /// Others still hold it: only this restore's mark goes.
    Leave {
        /// A JSON merge patch.
        patch: Value,
        /// How many restores still hold it.
        others: usize,
    },
    /// The last holder: the object is put back as it was, and asked to reconcile.
    Restore {
        /// A JSON merge patch.
        patch: Value,
    },
}

/// The restores holding a pause on the object, by UID.
pub fn holders(object: &Value) -> Vec<String> {
    annotation(object, PAUSED_BY)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

/// The setting a pause changes, as it is now (JSON; null when unset).
fn current(kind: GitOpsKind, object: &Value) -> Value {
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => object["spec"]["suspend"].clone(),
        GitOpsKind::Application => {
            object["metadata"]["annotations"][ARGO_CD_SKIP_RECONCILE].clone()
        }
    }
}

fn paused(kind: GitOpsKind, object: &Value) -> bool {
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => {
            object["spec"]["suspend"].as_bool() == Some(true)
        }
        GitOpsKind::Application => annotation(object, ARGO_CD_SKIP_RECONCILE) == Some("true"),
    }
}

/// How long after its pause an Argo CD sync requested before it (`operation` set,
/// not yet begun) may still begin: the application controller takes operations
/// from a queue filled before the pause, and runs them whatever the annotation says.
pub(crate) const ARGO_CD_QUEUED_GRACE: Duration = Duration::from_secs(10);

/// How long after a sync ends Argo CD still runs a sync someone requests, paused or
/// not: its application controller looks at an Application's operation again 30 s
/// after each sync it handled (v3.6's `appOperationMaxRequeueInterval`), from a
/// queue the annotation does not filter. 5 s on top for clocks and queue delays.
pub(crate) const ARGO_CD_AFTER_SYNC: Duration = Duration::from_secs(35);

/// What a paused object may still be applying, which the restore's consumers must
/// wait for before they are stopped; `None` once nothing begun or queued before the
/// pause can write their replica counts again. `paused_at` is when the pause was
/// written.
///
/// - Flux: setting `spec.suspend` does not stop a reconciliation in the middle of its
///   work. Flux handles one object at a time and, suspended, records the generation it
///   saw: once `status.observedGeneration` reaches the generation of the suspended
///   spec, nothing started before the pause is running.
/// - Argo CD: `skip-reconcile` stops refreshes and automatic syncs, but a sync
///   operation already running goes on to its end, wave after wave, and may apply the
///   replica count the restore just took away. Argo CD's own sign is
///   `status.operationState`: phase Running or Terminating while a sync goes on, then
///   Succeeded, Failed or Error with its `finishedAt`; for [`ARGO_CD_AFTER_SYNC`]
///   after that, a sync someone asks for would still run. A sync requested just
///   before the pause (`operation` set, not begun) may still begin during
///   [`ARGO_CD_QUEUED_GRACE`]; past both it waits, unstarted, for the pause to end.
pub(crate) fn still_applying(
    kind: GitOpsKind,
    object: &Value,
    paused_at: Timestamp,
    now: Timestamp,
) -> Option<String> {
    if !paused(kind, object) {
        return Some("to take the suspension in".into());
    }
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => {
            let seen = object["status"]["observedGeneration"].as_i64();
            let generation = object["metadata"]["generation"].as_i64();
            let taken_in =
                matches!((seen, generation), (Some(seen), Some(generation)) if seen >= generation);
            (!taken_in).then(|| "to take the suspension in".into())
        }
        GitOpsKind::Application => {
            let state = &object["status"]["operationState"];
            let phase = state["phase"].as_str().unwrap_or_default();
            if matches!(phase, "Running" | "Terminating") {
                let started = state["startedAt"].as_str().unwrap_or("at an unknown time");
                return Some(format!("to end the sync it began {started}"));
            }
            let finished = state["finishedAt"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok());
            if let Some(finished) = finished
                && elapsed(finished, now) < ARGO_CD_AFTER_SYNC
            {
                return Some(format!(
                    "to stop taking sync requests after the sync it ended {finished} (it runs any asked for within 30 s of its last, paused or not)"
                ));
            }
            let requested = !object["operation"].is_null();
            (requested && elapsed(paused_at, now) < ARGO_CD_QUEUED_GRACE)
                .then(|| "to start or drop the sync requested before the pause".into())
        }
    }
}

/// The time from `since` to `now`, zero if `now` is earlier.
pub(crate) fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::from_secs(now.as_second().saturating_sub(since.as_second()).max(0) as u64)
}

/// A merge patch that sets the setting to `value` (null removes it), with these
/// annotations, conditional on the version read.
fn patch(kind: GitOpsKind, object: &Value, value: Value, mut annotations: Value) -> Value {
    let version = object["metadata"]["resourceVersion"].clone();
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => json!({
            "metadata": { "resourceVersion": version, "annotations": annotations },
            "spec": { "suspend": value },
        }),
        GitOpsKind::Application => {
            annotations[ARGO_CD_SKIP_RECONCILE] = value;
            json!({ "metadata": { "resourceVersion": version, "annotations": annotations } })
        }
    }
}

/// How the restore `uid` pauses `object`.
pub fn pause(kind: GitOpsKind, object: &Value, uid: &str) -> Pause {
    let mut holders = holders(object);
    // Recorded by the first holder; a pause that lost it (edited away) keeps what is
    // there now rather than nothing.
    let original = match (holders.is_empty(), annotation(object, PAUSED_FROM)) {
        (false, Some(recorded)) => recorded.to_string(),
        _ => current(kind, object).to_string(),
    };
    if holders.iter().any(|h| h == uid) && paused(kind, object) {
        return Pause::Held { original };
    }
    if !holders.iter().any(|h| h == uid) {
        holders.push(uid.to_string());
    }
    let on = match kind {
        GitOpsKind::Application => json!("true"),
        _ => json!(true),
    };
    let marks = json!({ PAUSED_BY: holders.join(","), PAUSED_FROM: original });
    Pause::Apply {
        patch: patch(kind, object, on, marks),
        original,
    }
}

/// How the restore `uid` lets go of `object`; `now` (RFC 3339) is the reconcile asked
/// of Flux.
pub fn release(kind: GitOpsKind, object: &Value, uid: &str, now: &str) -> Release {
    let holders = holders(object);
    if !holders.iter().any(|h| h == uid) {
        return Release::NotHeld;
    }
    let others: Vec<String> = holders.into_iter().filter(|h| h != uid).collect();
    let version = object["metadata"]["resourceVersion"].clone();
    if !others.is_empty() {
        return Release::Leave {
            patch: json!({ "metadata": {
                "resourceVersion": version,
                "annotations": { PAUSED_BY: others.join(",") },
            }}),
            others: others.len(),
        };
    }
    let original = annotation(object, PAUSED_FROM)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or(Value::Null);
    let mut marks = json!({ PAUSED_BY: null, PAUSED_FROM: null });
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => {
            marks[FLUX_REQUESTED_AT] = json!(now)
        }
        GitOpsKind::Application => marks[ARGO_CD_REFRESH] = json!("normal"),
    }
    Release::Restore {
        patch: patch(kind, object, original, marks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kustomization(suspend: Option<bool>, annotations: Value) -> Value {
        let mut object = json!({
            "metadata": { "name": "shop", "resourceVersion": "7", "annotations": annotations },
            "spec": { "interval": "1m" },
        });
        if let Some(suspend) = suspend {
            object["spec"]["suspend"] = json!(suspend);
        }
        object
    }

    /// `object` with `patch` applied as a JSON merge patch (RFC 7386).
    fn merged(mut object: Value, patch: &Value) -> Value {
        fn merge(target: &mut Value, patch: &Value) {
            let Some(fields) = patch.as_object() else {
                *target = patch.clone();
                return;
            };
            if !target.is_object() {
                *target = json!({});
            }
            let target = target.as_object_mut().expect("an object");
            for (key, value) in fields {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        merge(&mut object, patch);
        object
    }

    fn applied(pause: Pause) -> Value {
        match pause {
            Pause::Apply { patch, .. } => patch,
            held => panic!("expected a patch, got {held:?}"),
        }
    }

    #[test]
    fn a_pause_records_what_was_there_and_the_last_release_puts_it_back() {
        for before in [None, Some(false), Some(true)] {
            let object = kustomization(before, json!({}));
            let patch = applied(pause(GitOpsKind::Kustomization, &object, "a"));
            assert_eq!(patch["metadata"]["resourceVersion"], "7", "conditional");
            let paused = merged(object.clone(), &patch);
            assert_eq!(paused["spec"]["suspend"], true);
            assert_eq!(holders(&paused), ["a"]);
            assert_eq!(
                pause(GitOpsKind::Kustomization, &paused, "a"),
                Pause::Held {
                    original: json!(before).to_string()
                },
                "a second pause by the same restore changes nothing"
            );
            let Release::Restore { patch } = release(
                GitOpsKind::Kustomization,
                &paused,
                "a",
                "2026-12-02T17:00:00Z",
            ) else {
                panic!("the only holder restores it");
            };
            let back = merged(paused, &patch);
            assert_eq!(back["spec"].get("suspend"), object["spec"].get("suspend"));
            assert_eq!(back["metadata"]["annotations"][PAUSED_BY], Value::Null);
            assert_eq!(back["metadata"]["annotations"][PAUSED_FROM], Value::Null);
            assert_eq!(
                back["metadata"]["annotations"][FLUX_REQUESTED_AT],
                "2026-12-02T17:00:00Z"
            );
        }
    }

    #[test]
    fn two_restores_share_a_pause_and_only_the_last_ends_it() {
        let object = kustomization(Some(false), json!({ "team": "shop" }));
        let by_a = merged(
            object.clone(),
            &applied(pause(GitOpsKind::Kustomization, &object, "a")),
        );
        let by_both = merged(
            by_a.clone(),
            &applied(pause(GitOpsKind::Kustomization, &by_a, "b")),
        );
        assert_eq!(holders(&by_both), ["a", "b"]);
        assert_eq!(
            by_both["metadata"]["annotations"][PAUSED_FROM], "false",
            "the second holder keeps the first one's record, not the paused state"
        );
        let Release::Leave { patch, others } =
            release(GitOpsKind::Kustomization, &by_both, "a", "now")
        else {
            panic!("b still holds it");
        };
        assert_eq!(others, 1);
        let by_b = merged(by_both, &patch);
        assert_eq!(by_b["spec"]["suspend"], true, "still paused for b");
        assert_eq!(holders(&by_b), ["b"]);
        assert_eq!(
            release(GitOpsKind::Kustomization, &by_b, "a", "now"),
            Release::NotHeld,
            "a let go already"
        );
        let Release::Restore { patch } = release(GitOpsKind::Kustomization, &by_b, "b", "now")
        else {
            panic!("b is the last");
        };
        let back = merged(by_b, &patch);
        assert_eq!(back["spec"]["suspend"], false);
        assert_eq!(back["metadata"]["annotations"]["team"], "shop");
    }

    #[test]
    fn a_held_pause_undone_by_hand_is_applied_again() {
        let object = kustomization(Some(false), json!({ PAUSED_BY: "a", PAUSED_FROM: "null" }));
        let Pause::Apply { patch, original } = pause(GitOpsKind::Kustomization, &object, "a")
        else {
            panic!("suspend was set back to false: the pause is not in force");
        };
        assert_eq!(original, "null", "the first record stays");
        assert_eq!(merged(object, &patch)["spec"]["suspend"], true);
    }

    /// A time, `secs` seconds after 2026-12-04T19:00:00Z.
    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_796_410_800 + secs).unwrap()
    }

    /// [`still_applying`] right after the pause.
    fn applying(kind: GitOpsKind, object: &Value) -> bool {
        still_applying(kind, object, at(0), at(0)).is_some()
    }

    #[test]
    fn a_suspension_counts_once_flux_has_seen_its_generation() {
        let mut object = kustomization(Some(true), json!({}));
        object["metadata"]["generation"] = json!(4);
        assert!(
            applying(GitOpsKind::Kustomization, &object),
            "never reconciled"
        );
        object["status"]["observedGeneration"] = json!(3);
        assert!(
            applying(GitOpsKind::Kustomization, &object),
            "a reconcile of the spec before the pause may still apply"
        );
        object["status"]["observedGeneration"] = json!(4);
        assert!(!applying(GitOpsKind::Kustomization, &object));
        object["spec"]["suspend"] = json!(false);
        assert!(
            applying(GitOpsKind::Kustomization, &object),
            "not suspended"
        );
    }

    #[test]
    fn an_application_is_waited_for_while_argo_cd_shows_a_sync_running() {
        let skip = json!({ ARGO_CD_SKIP_RECONCILE: "true" });
        let mut app = json!({ "metadata": { "annotations": skip } });
        assert!(!applying(GitOpsKind::Application, &app), "no sync ever");
        app["status"]["operationState"] =
            json!({ "phase": "Running", "startedAt": "2026-12-04T18:00:00Z" });
        let why = still_applying(GitOpsKind::Application, &app, at(0), at(600));
        assert_eq!(
            why.as_deref(),
            Some("to end the sync it began 2026-12-04T18:00:00Z"),
            "a running sync is waited for however long it takes"
        );
        app["status"]["operationState"]["phase"] = json!("Terminating");
        assert!(applying(GitOpsKind::Application, &app));
        for ended in ["Succeeded", "Failed", "Error"] {
            app["status"]["operationState"]["phase"] = json!(ended);
            assert!(!applying(GitOpsKind::Application, &app), "{ended}");
        }
        app["metadata"]["annotations"] = json!({});
        assert!(applying(GitOpsKind::Application, &app), "not paused");
    }

    #[test]
    fn an_application_is_waited_for_while_argo_cd_still_takes_sync_requests() {
        let skip = json!({ ARGO_CD_SKIP_RECONCILE: "true" });
        let app = json!({
            "metadata": { "annotations": skip },
            "status": { "operationState": {
                "phase": "Succeeded", "finishedAt": "2026-12-04T19:00:00Z",
            } },
        });
        let waits = |secs| still_applying(GitOpsKind::Application, &app, at(0), at(secs));
        assert!(waits(0).is_some_and(|why| why.contains("2026-12-04T19:00:00Z")));
        assert!(waits(34).is_some(), "a sync asked for now would still run");
        assert_eq!(waits(35), None);
        assert!(
            waits(-5).is_some(),
            "a clock behind Argo CD's counts as no time gone"
        );
    }

    #[test]
    fn a_sync_requested_before_the_pause_is_waited_for_only_until_it_could_have_started() {
        let skip = json!({ ARGO_CD_SKIP_RECONCILE: "true" });
        let app = json!({
            "metadata": { "annotations": skip },
            "operation": { "sync": { "revision": "HEAD" } },
            "status": { "operationState": {
                "phase": "Succeeded", "finishedAt": "2026-12-04T18:00:00Z",
            } },
        });
        let waits = |secs| still_applying(GitOpsKind::Application, &app, at(0), at(secs));
        assert!(
            waits(0).is_some() && waits(9).is_some(),
            "it may still be queued"
        );
        assert_eq!(
            waits(10),
            None,
            "past the grace it waits for the pause to end, unstarted"
        );
    }

    #[test]
    fn an_application_is_paused_by_annotation() {
        let app = json!({ "metadata": { "resourceVersion": "3", "annotations": {} } });
        let paused = merged(
            app.clone(),
            &applied(pause(GitOpsKind::Application, &app, "a")),
        );
        assert_eq!(
            paused["metadata"]["annotations"][ARGO_CD_SKIP_RECONCILE],
            "true"
        );
        assert!(paused.get("spec").is_none(), "nothing but annotations");
        let Release::Restore { patch } = release(GitOpsKind::Application, &paused, "a", "now")
        else {
            panic!("the only holder");
        };
        let back = merged(paused, &patch);
        let annotations = &back["metadata"]["annotations"];
        assert_eq!(annotations[ARGO_CD_SKIP_RECONCILE], Value::Null);
        assert_eq!(annotations[ARGO_CD_REFRESH], "normal");
        assert_eq!(annotations[PAUSED_BY], Value::Null);
    }
}
