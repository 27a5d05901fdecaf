//! Pausing a GitOps object for a restore and letting it go, as merge patches computed
//! from the object as read. Pure.
//!
//! Several restores may share one object (two apps of one Kustomization restored side
//! by side). The object itself records who holds the pause ([`PAUSED_BY`]) and what it
//! was before the first of them ([`PAUSED_FROM`]); only the last to let go puts that
//! back, so no restore unpauses it under another. Every patch carries the
//! resourceVersion read: two restores writing at once cannot lose each other's mark.

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

/// Whether the tool has taken the pause in: setting `spec.suspend` does not stop a
/// reconciliation Flux is in the middle of, which may still apply the replica count
/// the restore just took away. Flux handles one object at a time and, suspended,
/// records the generation it saw: once `status.observedGeneration` reaches the
/// generation of the suspended spec, nothing started before the pause is running.
/// Argo CD gives no such sign: its pause counts at once.
pub(crate) fn in_force(kind: GitOpsKind, object: &Value) -> bool {
    if !paused(kind, object) {
        return false;
    }
    match kind {
        GitOpsKind::Kustomization | GitOpsKind::HelmRelease => {
            let seen = object["status"]["observedGeneration"].as_i64();
            let generation = object["metadata"]["generation"].as_i64();
            matches!((seen, generation), (Some(seen), Some(generation)) if seen >= generation)
        }
        GitOpsKind::Application => true,
    }
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

    #[test]
    fn a_suspension_counts_once_flux_has_seen_its_generation() {
        let mut object = kustomization(Some(true), json!({}));
        object["metadata"]["generation"] = json!(4);
        assert!(
            !in_force(GitOpsKind::Kustomization, &object),
            "never reconciled"
        );
        object["status"]["observedGeneration"] = json!(3);
        assert!(
            !in_force(GitOpsKind::Kustomization, &object),
            "a reconcile of the spec before the pause may still apply"
        );
        object["status"]["observedGeneration"] = json!(4);
        assert!(in_force(GitOpsKind::Kustomization, &object));
        object["spec"]["suspend"] = json!(false);
        assert!(
            !in_force(GitOpsKind::Kustomization, &object),
            "not suspended"
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
