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

use super::status::{condition, now};
use super::{Context, Error, Result, reasons, status_write};

/// Runs one pass, turning a panic inside it into [`Error::Panicked`].
///
/// Unwind safety is asserted: what a pass shares with others is the Context, whose
/// locks survive poisoning (every lock is taken with `PoisonError::into_inner`) and
/// whose contents are caches the next pass corrects; the object's own state lives in
/// the cluster, written only by whole status writes.
pub async fn caught<T>(pass: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(pass).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(Error::Panicked(message(payload.as_ref()))),
    }
}

/// Runs `pass` over `object` under [`caught`]; after a panic, marks the object Stalled
/// ([`stall`]) before the error goes to the controller's error policy.
pub async fn guarded<K, F, Fut>(
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
    if let Err(Error::Panicked(panic)) = &result {
        let api: Api<K> =
            Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
        stall(&api, kind, &object, panic, audience, &ctx).await;
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
pub enum Audience {
    /// The cluster's admins (DataRestores, DataRestoreSchedules): the panic's own words.
    Admin,
    /// A team (DataRestoreRequests): the panic's words may hold what the team cannot
    /// read, so they stay in the controller's log.
    Team,
}

/// The Stalled condition's message for a panic.
pub fn stalled_message(kind: &str, panic: &str, audience: Audience) -> String {
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

/// `conditions` with Stalled set to True for `message` (its transition time kept when it
/// was True already), every other condition as it was.
pub fn with_stalled(conditions: &[Condition], message: &str) -> Vec<Condition> {
    let previous = conditions.iter().find(|c| c.type_ == condition::STALLED);
    let stalled = Condition {
        type_: condition::STALLED.into(),
        status: "True".into(),
        reason: reasons::INTERNAL_ERROR.into(),
        message: message.into(),
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

/// Marks `object` Stalled after a panic in its pass and publishes a Warning Event: the
/// rest of its status is written back as it is. Best effort: a failure here is logged,
/// and the object is tried again anyway.
async fn stall<K>(
    api: &Api<K>,
    kind: &str,
    object: &K,
    panic: &str,
    audience: Audience,
    ctx: &Context,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let name = object.name_any();
    error!(kind, %name, namespace = ?object.namespace(), "panic in a reconcile: {panic}");
    let message = stalled_message(kind, panic, audience);
    ctx.event_on(
        object.object_ref(&()),
        true,
        reasons::INTERNAL_ERROR,
        message.clone(),
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
        status["conditions"] = serde_json::to_value(with_stalled(&conditions, &message))
            .map_err(kube::Error::SerdeError)?;
        status_write::apply_status(api, kind, &name, &status).await
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
        let out = with_stalled(&[ready.clone(), old], &team);
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
}
