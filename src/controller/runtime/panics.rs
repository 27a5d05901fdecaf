//! A panic in one object's pass must not end the process: every other restore would
//! stop where it is, with its apps at 0, and the standby replica would panic on the
//! same object the moment it took over. Each reconcile runs under [`caught`]: a panic
//! becomes [`Error::Panicked`] for that object alone, which [`stall`] marks Stalled and
//! tells in a Warning Event, and the controller looks at it again after its backoff.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use tracing::error;

use super::context::Context;
use super::error::Category;
use super::error::{Error, Result};
use super::object_writes::{self, Precondition};
use crate::controller::reasons;
use crate::controller::status::{condition, now};

/// Runs one pass, turning a panic inside it into [`Error::Panicked`].
///
/// Unwind safety is asserted: what a pass shares with others is the Context, whose
/// locks survive poisoning (every lock is taken with `PoisonError::into_inner`) and
/// whose contents are caches the next pass corrects; the object's own state lives in
/// the cluster, written only by whole status writes.
pub(crate) async fn caught<T>(pass: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(pass).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(Error::Panicked(message(payload.as_ref()))),
    }
}

/// Runs `pass` over `object` under [`caught`]; after a panic, marks the object Stalled
/// ([`stall`]) before the error goes to the controller's error policy.
pub(crate) async fn guarded<K, F, Fut>(
    object: Arc<K>,
    ctx: Arc<Context>,
    kind: &'static str,
    audience: Audience,
    pass: F,
) -> Result<Action>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action>>,
{
    let result = caught(pass(object.clone(), ctx.clone())).await;
    if let Err(error) = &result
        && let Some(stalled) = stalled_by(kind, error, audience)
    {
        let api: Api<K> =
            Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
        stall(&api, kind, &object, &error.to_string(), stalled, &ctx).await;
    }
    result
}

/// The text a panic carried.
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Who may read what the stall says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Audience {
    /// The cluster's admins (DataRestores, DataRestoreSchedules): the panic's own words.
    Admin,
    /// A team (DataRestoreRequests): the panic's words may hold what the team cannot
    /// read, so they stay in the controller's log.
    Team,
}

/// Why an object is marked Stalled after its pass failed with `error`: a panic, or an
/// error no retry is expected to change that the pass could not turn into the end of a
/// volume (its records missing, a refusal by the API server). The reason and message of
/// the condition, or None for an error that passes by itself. Pure.
pub(crate) fn stalled_by(kind: &str, error: &Error, audience: Audience) -> Option<Stalled> {
    match error {
        Error::Panicked(panic) => Some(Stalled {
            reason: reasons::INTERNAL_ERROR,
            message: stalled_message(kind, panic, audience),
        }),
        e if e.category() == Category::Permanent => Some(Stalled {
            reason: reasons::CANNOT_PROCEED,
            message: cannot_proceed_message(kind, &e.reason(), audience),
        }),
        _ => None,
    }
}

/// The reason and message of a Stalled condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stalled {
    pub reason: &'static str,
    pub message: String,
}

/// The Stalled condition's message for an error no retry is expected to change.
pub(crate) fn cannot_proceed_message(kind: &str, why: &str, audience: Audience) -> String {
    let what = match audience {
        Audience::Admin => format!("refill cannot go on with this {kind}: {why}"),
        Audience::Team => {
            format!("refill cannot go on with this {kind}; the controller's log says why")
        }
    };
    format!("{what}; it is tried again with a growing delay, in case what stops it changes")
}

/// The Stalled condition's message for a panic.
pub(crate) fn stalled_message(kind: &str, panic: &str, audience: Audience) -> String {
    let what = match audience {
        Audience::Admin => format!("refill hit an internal error on this {kind}: {panic}"),
        Audience::Team => format!(
            "refill hit an internal error on this {kind}; the controller's log has the details"
        ),
    };
    format!(
        "{what}; other restores go on, and this one is tried again with a growing delay; please report it with the controller's log"
    )
}

/// `conditions` with Stalled set to True for `stalled` (its transition time kept when it
/// was True already), every other condition as it was.
pub(crate) fn with_stalled(conditions: &[Condition], stalled: &Stalled) -> Vec<Condition> {
    let previous = conditions.iter().find(|c| c.type_ == condition::STALLED);
    let stalled = Condition {
        type_: condition::STALLED.into(),
        status: "True".into(),
        reason: stalled.reason.into(),
        message: stalled.message.clone(),
        last_transition_time: match previous {
            Some(p) if p.status == "True" => p.last_transition_time.clone(),
            _ => now(),
        },
        observed_generation: previous.and_then(|p| p.observed_generation),
    };
    conditions
        .iter()
        .filter(|c| c.type_ != condition::STALLED)
        .cloned()
        .chain([stalled])
        .collect()
}

/// Marks `object` Stalled after its pass failed (a panic, or an error no retry is
/// expected to change) and publishes a Warning Event: the rest of its status is written
/// back as it is. Best effort: a failure here is logged, and the object is tried again
/// anyway.
async fn stall<K>(
    api: &Api<K>,
    kind: &str,
    object: &K,
    error: &str,
    stalled: Stalled,
    ctx: &Context,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let name = object.name_any();
    error!(kind, %name, namespace = ?object.namespace(), "stalled: {error}");
    ctx.event_on(
        object.object_ref(&()),
        true,
        stalled.reason,
        stalled.message.clone(),
    );
    let written = async {
        let Some(fresh) = api.get_opt(&name).await? else {
            return Ok(());
        };
        let mut status = serde_json::to_value(&fresh)
            .map_err(kube::Error::SerdeError)?
            .get("status")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::Object(Default::default()));
        let conditions: Vec<Condition> =
            serde_json::from_value(status["conditions"].take()).unwrap_or_default();
        status["conditions"] = serde_json::to_value(with_stalled(&conditions, &stalled))
            .map_err(kube::Error::SerdeError)?;
        object_writes::apply_status(api, &name, Precondition::None, &status)
            .await
            .map(drop)
    };
    if let Err(e) = written.await {
        error!(kind, %name, "the Stalled condition was not written: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_in_a_pass_becomes_an_error_of_that_pass() {
        let wide = format!("{}é{}", "a".repeat(56), "b".repeat(10));
        let result: Result<()> = caught(async {
            // A byte index inside a character: the kind of panic user text caused.
            let _ = &wide[..57];
            Ok(())
        })
        .await;
        let Err(Error::Panicked(text)) = result else {
            panic!("expected a caught panic, got {result:?}");
        };
        assert!(text.contains("char boundary"), "{text}");
        assert_eq!(caught(async { Ok::<_, Error>(7) }).await.unwrap(), 7);
    }

    #[test]
    fn stalled_replaces_only_the_stalled_condition_and_tells_teams_no_details() {
        let ready = Condition {
            type_: condition::READY.into(),
            status: "False".into(),
            reason: "Restoring".into(),
            message: "1 of 2".into(),
            last_transition_time: now(),
            observed_generation: Some(3),
        };
        let old = Condition {
            type_: condition::STALLED.into(),
            status: "False".into(),
            ..ready.clone()
        };
        let team = stalled_message("DataRestoreRequest", "index 57 in 'secret'", Audience::Team);
        assert!(
            !team.contains("secret") && team.contains("controller's log"),
            "{team}"
        );
        let admin = stalled_message("DataRestore", "index 57", Audience::Admin);
        assert!(admin.contains("index 57"), "{admin}");
        let stalled = Stalled {
            reason: reasons::INTERNAL_ERROR,
            message: team.clone(),
        };
        let out = with_stalled(&[ready.clone(), old], &stalled);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], ready);
        assert_eq!(
            (
                out[1].status.as_str(),
                out[1].reason.as_str(),
                out[1].message.as_str()
            ),
            ("True", reasons::INTERNAL_ERROR, team.as_str())
        );
        assert_eq!(out[1].observed_generation, Some(3));
    }

    #[test]
    fn errors_no_retry_changes_stall_the_object_and_passing_ones_do_not() {
        let admin = |e: Error| stalled_by("DataRestore", &e, Audience::Admin);
        let missing = Error::Permanent("3 of the 10 VolumePluginRestores are missing".into());
        let stalled = admin(missing).expect("a permanent error stalls");
        assert_eq!(stalled.reason, reasons::CANNOT_PROCEED);
        assert!(
            stalled
                .message
                .contains("3 of the 10 VolumePluginRestores are missing"),
            "{stalled:?}"
        );
        let panicked = admin(Error::Panicked("index 57".into())).expect("a panic stalls");
        assert_eq!(panicked.reason, reasons::INTERNAL_ERROR);
        assert_eq!(admin(Error::Transient("not listed yet".into())), None);
        let team = stalled_by(
            "DataRestoreRequest",
            &Error::Permanent("namespace other-team is forbidden".into()),
            Audience::Team,
        )
        .expect("stalls");
        assert!(!team.message.contains("other-team"), "{team:?}");
    }
}
