//! How a restore treats the GitOps tools (Flux, Argo CD) that own the workloads it
//! stops: they would put `replicas` back within seconds of a scale-down.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The namespace Argo CD's Applications are looked for in when spec.gitOps does not say.
pub(crate) const DEFAULT_ARGO_CD_NAMESPACE: &str = "argocd";

/// spec.gitOps: what to do with a GitOps object that manages a consumer.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsSpec {
    /// Pause (the default), Ignore or Refuse.
    #[serde(default)]
    pub policy: GitOpsPolicy,
    /// Where Argo CD's Applications live (default `argocd`), for workloads whose
    /// tracking id names an Application without a namespace.
    #[serde(
        default,
        rename = "argoCDNamespace",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = super::bounds::LABEL))]
    pub argo_cd_namespace: Option<String>,
    /// The label Argo CD tracks its resources with, when it is set to label tracking
    /// (`application.resourceTrackingMethod: label`), e.g. `app.kubernetes.io/instance`.
    /// Unset, only the `argocd.argoproj.io/tracking-id` annotation (Argo CD's default)
    /// is read: the instance label is also set by Helm charts Argo CD has nothing to do
    /// with.
    #[serde(
        default,
        rename = "argoCDInstanceLabel",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = super::bounds::LABEL_KEY))]
    pub argo_cd_instance_label: Option<String>,
}

impl GitOpsSpec {
    /// The namespace of Argo CD's Applications.
    pub(crate) fn argo_cd_namespace(&self) -> &str {
        self.argo_cd_namespace
            .as_deref()
            .unwrap_or(DEFAULT_ARGO_CD_NAMESPACE)
    }
}

/// What a restore does with the GitOps objects managing its consumers.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum GitOpsPolicy {
    /// Suspend each one for the restore (Flux `spec.suspend: true`; Argo CD the
    /// `argocd.argoproj.io/skip-reconcile: "true"` annotation), recording on it and in
    /// status what it was before, and put it back afterwards, asking it to reconcile.
    #[default]
    Pause,
    /// Leave them alone: one that scales a stopped consumer back up fails its volumes
    /// (safely: the data is not written under it).
    Ignore,
    /// Refuse the restore when a consumer is managed by one.
    Refuse,
}

/// A kind of GitOps object refill knows how to pause.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum GitOpsKind {
    /// Flux `kustomize.toolkit.fluxcd.io/v1`.
    Kustomization,
    /// Flux `helm.toolkit.fluxcd.io/v2`.
    HelmRelease,
    /// Argo CD `argoproj.io/v1alpha1`.
    Application,
}

impl GitOpsKind {
    /// Where the API serves this kind.
    pub(crate) fn api_resource(self) -> kube::api::ApiResource {
        let (group, version, plural) = match self {
            GitOpsKind::Kustomization => ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations"),
            GitOpsKind::HelmRelease => ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
            GitOpsKind::Application => ("argoproj.io", "v1alpha1", "applications"),
        };
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &format!("{self:?}"));
        kube::api::ApiResource::from_gvk_with_plural(&gvk, plural)
    }

    /// `Flux Kustomization flux-system/shop`, for messages.
    pub fn describe(self, namespace: &str, name: &str) -> String {
        format!("{} {namespace}/{name}", self.tool())
    }

    /// The tool, for messages: `Flux Kustomization`.
    pub fn tool(self) -> &'static str {
        match self {
            GitOpsKind::Kustomization => "Flux Kustomization",
            GitOpsKind::HelmRelease => "Flux HelmRelease",
            GitOpsKind::Application => "Argo CD Application",
        }
    }
}

/// Where a GitOps object is in the restore.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum GitOpsState {
    /// Found managing a consumer; nothing done yet.
    #[default]
    Found,
    /// Recorded before the pause is applied: from then on the end of the restore looks
    /// at the object and puts it back if refill's mark is on it. It stays Pausing while
    /// the tool may still apply what it began before the pause (`message` says what):
    /// until Flux shows it saw the suspension (status.observedGeneration), at most
    /// 30 s; while an Argo CD sync runs (status.operationState) and for 35 s after it
    /// ends, as Argo CD still runs a sync requested then, at most 10 min. Its consumers
    /// are stopped only then (past the limit, with a warning).
    Pausing,
    /// Suspended by this restore (and maybe others: see the `refill.dev/paused-by`
    /// annotation on it); its consumers may be stopped.
    Paused,
    /// Put back as it was, and asked to reconcile; or still paused for another restore
    /// that shares it, which puts it back when it ends.
    Resumed,
    /// Left paused on purpose: a consumer it manages was kept stopped
    /// (spec.onFailure: KeepStopped).
    KeptPaused,
    /// Not paused (spec.gitOps.policy: Ignore, or the object is gone, or the pause was
    /// refused: `message` says); a consumer it scales back up fails its volumes.
    NotPaused,
}

/// A GitOps object that manages consumers of the restore, and what was done with it.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsRecord {
    /// Its kind, which decides how it is paused.
    pub kind: GitOpsKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The consumers it manages, as `Kind namespace/name`.
    #[serde(default)]
    pub workloads: Vec<String>,
    /// Where it is.
    #[serde(default)]
    pub state: GitOpsState,
    /// What it was before the pause, as JSON (Flux: spec.suspend; Argo CD: the
    /// skip-reconcile annotation), or null when the field was unset. The same is on the
    /// object as the `refill.dev/paused-from` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// Why it is not paused, or what else is worth knowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When this restore paused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<Time>,
    /// When this restore let it go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<Time>,
}

impl GitOpsRecord {
    /// `Flux Kustomization flux-system/shop`, for messages.
    pub fn describe(&self) -> String {
        self.kind.describe(&self.namespace, &self.name)
    }
}
