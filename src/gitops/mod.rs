//! GitOps objects (Flux Kustomizations and HelmReleases, Argo CD Applications) that
//! manage a workload, found from the marks each tool leaves on what it applies. Pure.
//!
//! Such a tool puts a workload's `replicas` back within seconds of a scale-down, so a
//! restore pauses it first ([`pause`]) and lets it go afterwards.

pub mod pause;
pub mod verify;

use std::collections::BTreeMap;

use crate::api::{GitOpsKind, GitOpsSpec};

/// Label Flux's kustomize-controller puts on everything it applies: the
/// Kustomization's name.
pub(crate) const KUSTOMIZATION_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
/// Beside [`KUSTOMIZATION_NAME`]: the Kustomization's namespace.
pub(crate) const KUSTOMIZATION_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// Label Flux's helm-controller puts on everything a HelmRelease installs: its name.
pub(crate) const HELM_RELEASE_NAME: &str = "helm.toolkit.fluxcd.io/name";
/// Beside [`HELM_RELEASE_NAME`]: the HelmRelease's namespace.
pub(crate) const HELM_RELEASE_NAMESPACE: &str = "helm.toolkit.fluxcd.io/namespace";
/// Argo CD's annotation tracking (its default since v3):
/// `<application>:<group>/<kind>:<namespace>/<name>`, the application as `name` or,
/// with Applications in any namespace, `namespace_name`.
pub(crate) const ARGO_CD_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";

/// A GitOps object, by kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GitOpsRef {
    /// Which tool's object.
    pub kind: GitOpsKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl GitOpsRef {
    /// `Flux Kustomization flux-system/shop`, for messages.
    pub(crate) fn describe(&self) -> String {
        self.kind.describe(&self.namespace, &self.name)
    }
}

/// The GitOps objects that manage an object, given how to read one of its labels and
/// one of its annotations: it is asked about every workload a restore starts with, so
/// it looks up the few keys it needs rather than copying the object's metadata.
pub(crate) fn managers<'a>(
    label: impl Fn(&str) -> Option<&'a str>,
    annotation: impl Fn(&str) -> Option<&'a str>,
    spec: &GitOpsSpec,
) -> Vec<GitOpsRef> {
    let mut found = Vec::new();
    let flux = [
        (
            GitOpsKind::Kustomization,
            KUSTOMIZATION_NAME,
            KUSTOMIZATION_NAMESPACE,
        ),
        (
            GitOpsKind::HelmRelease,
            HELM_RELEASE_NAME,
            HELM_RELEASE_NAMESPACE,
        ),
    ];
    for (kind, name_key, namespace_key) in flux {
        if let (Some(name), Some(namespace)) = (label(name_key), label(namespace_key))
            && !name.is_empty()
        {
            found.push(GitOpsRef {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
    }
    let application = annotation(ARGO_CD_TRACKING_ID)
        .and_then(|id| id.split_once(':').map(|(app, _)| app))
        .or_else(|| label(spec.argo_cd_instance_label.as_deref()?))
        .filter(|app| !app.is_empty());
    if let Some(app) = application {
        let (namespace, name) = match app.split_once('_') {
            Some((namespace, name)) => (namespace, name),
            None => (spec.argo_cd_namespace(), app),
        };
        found.push(GitOpsRef {
            kind: GitOpsKind::Application,
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }
    found
}

/// [`managers`] of an object with these labels and annotations.
pub(crate) fn managers_marked(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
    spec: &GitOpsSpec,
) -> Vec<GitOpsRef> {
    fn lookup<'a>(map: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
        map?.get(key).map(String::as_str)
    }
    managers(|k| lookup(labels, k), |k| lookup(annotations, k), spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`managers`] of an object with these labels and annotations.
    fn of(
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        spec: &GitOpsSpec,
    ) -> Vec<GitOpsRef> {
        managers_marked(Some(labels), Some(annotations), spec)
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn one(kind: GitOpsKind, namespace: &str, name: &str) -> Vec<GitOpsRef> {
        vec![GitOpsRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }]
    }

    #[test]
    fn each_tool_is_found_by_its_own_marks() {
        let spec = GitOpsSpec::default();
        let none = BTreeMap::new();
        let kustomized = map(&[
            (KUSTOMIZATION_NAME, "shop"),
            (KUSTOMIZATION_NAMESPACE, "flux-system"),
        ]);
        assert_eq!(
            of(&kustomized, &none, &spec),
            one(GitOpsKind::Kustomization, "flux-system", "shop")
        );
        let helm = map(&[(HELM_RELEASE_NAME, "db"), (HELM_RELEASE_NAMESPACE, "data")]);
        assert_eq!(
            of(&helm, &none, &spec),
            one(GitOpsKind::HelmRelease, "data", "db")
        );
        let tracked = map(&[(ARGO_CD_TRACKING_ID, "shop:apps/Deployment:shop/web")]);
        assert_eq!(
            of(&none, &tracked, &spec),
            one(GitOpsKind::Application, "argocd", "shop"),
            "an Application without a namespace is in spec.gitOps.argoCDNamespace"
        );
        let any_namespace = map(&[(ARGO_CD_TRACKING_ID, "team-a_shop:apps/Deployment:shop/web")]);
        assert_eq!(
            of(&none, &any_namespace, &spec),
            one(GitOpsKind::Application, "team-a", "shop")
        );
        let elsewhere = GitOpsSpec {
            argo_cd_namespace: Some("gitops".into()),
            ..Default::default()
        };
        assert_eq!(
            of(&none, &tracked, &elsewhere),
            one(GitOpsKind::Application, "gitops", "shop")
        );
    }

    #[test]
    fn half_marks_and_helm_instance_labels_are_no_manager() {
        let spec = GitOpsSpec::default();
        let none = BTreeMap::new();
        let half = map(&[(KUSTOMIZATION_NAME, "shop")]);
        assert!(of(&half, &none, &spec).is_empty());
        // Helm charts set it whether or not Argo CD is there.
        let instance = map(&[("app.kubernetes.io/instance", "shop")]);
        assert!(of(&instance, &none, &spec).is_empty());
        let label_tracking = GitOpsSpec {
            argo_cd_instance_label: Some("app.kubernetes.io/instance".into()),
            ..Default::default()
        };
        assert_eq!(
            of(&instance, &none, &label_tracking),
            one(GitOpsKind::Application, "argocd", "shop")
        );
    }
}
