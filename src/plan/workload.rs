//! Workloads whose pod templates mount claims, as listed: [`Listed`] is the shape an
//! object is parsed into, naming only the fields a decision reads (the rest of the
//! object is skipped by the parser, never built), and [`Workload`] what is held of one
//! found to be a consumer of its own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, PodSecurityContext, PodSpec, SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::{Deserialize, Serialize};

use crate::api::{ConsumerKind, GitOpsSpec};
use crate::gitops::{self, GitOpsRef};

/// A workload of any kind whose pod template can mount a claim, as the API lists it,
/// with only what deciding about it reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Listed {
    #[serde(default)]
    pub metadata: ListedMeta,
    #[serde(default)]
    spec: ListedSpec,
    #[serde(default)]
    status: ListedStatus,
}

/// The metadata of a [`Listed`] workload. Its labels and annotations are whole: they
/// live only while the object is looked at, and what is kept of them is decided then.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub owner_references: Option<Vec<OwnerReference>>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedSpec {
    replicas: Option<i32>,
    /// Every kind's pod template but a CronJob's.
    template: Option<PodTemplate>,
    /// A CronJob's.
    job_template: Option<JobTemplate>,
    /// A StatefulSet's.
    volume_claim_templates: Option<Vec<ClaimTemplate>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct JobTemplate {
    spec: Option<JobSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct JobSpec {
    template: Option<PodTemplate>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct PodTemplate {
    spec: Option<TemplateSpec>,
}

/// Of a pod template's spec: the claims its volumes name, and the identity and
/// tolerations a stand-in takes from it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TemplateSpec {
    volumes: Option<Vec<TemplateVolume>>,
    security_context: Option<PodSecurityContext>,
    containers: Option<Vec<TemplateContainer>>,
    tolerations: Option<Vec<Toleration>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TemplateVolume {
    persistent_volume_claim: Option<ClaimSource>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimSource {
    claim_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TemplateContainer {
    security_context: Option<SecurityContext>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ClaimTemplate {
    #[serde(default)]
    metadata: ClaimTemplateMeta,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ClaimTemplateMeta {
    name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ListedStatus {
    conditions: Option<Vec<Condition>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: Option<String>,
    status: Option<String>,
}

impl Listed {
    /// Whether it is a consumer of its own: not one whose owner is (a Deployment's
    /// ReplicaSet, a CronJob's Job), and not a Job that finished.
    pub(crate) fn is_top(&self, kind: ConsumerKind) -> bool {
        let owned = self
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true));
        let finished_job = kind == ConsumerKind::Job
            && self.status.conditions.iter().flatten().any(|c| {
                matches!(c.kind.as_deref(), Some("Complete" | "Failed"))
                    && c.status.as_deref() == Some("True")
            });
        !owned && !finished_job
    }

    fn template(&self, kind: ConsumerKind) -> Option<&TemplateSpec> {
        let template = match kind {
            ConsumerKind::CronJob => self
                .spec
                .job_template
                .as_ref()?
                .spec
                .as_ref()?
                .template
                .as_ref(),
            _ => self.spec.template.as_ref(),
        };
        template?.spec.as_ref()
    }

    /// The claims its pod template's volumes name.
    pub(crate) fn claim_names(&self, kind: ConsumerKind) -> impl Iterator<Item = &str> {
        self.template(kind)
            .and_then(|t| t.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref()?.claim_name.as_deref())
    }

    /// Whether its pod template can mount no claim: it names none, and it is no
    /// StatefulSet making its own from claim templates.
    pub(crate) fn mounts_no_claim(&self, kind: ConsumerKind) -> bool {
        let from_templates = kind == ConsumerKind::StatefulSet
            && self
                .spec
                .volume_claim_templates
                .as_ref()
                .is_some_and(|t| !t.is_empty());
        self.claim_names(kind).next().is_none() && !from_templates
    }

    /// The annotations a decision reads of a workload: its GitOps tracking and the
    /// count a restore that holds it stopped recorded.
    pub(crate) const ANNOTATIONS_READ: [&str; 3] = [
        gitops::ARGO_CD_TRACKING_ID,
        crate::labels::QUIESCED_BY,
        crate::labels::ORIGINAL_REPLICAS,
    ];

    /// The replicas its spec sets now, refill's stop included.
    pub(crate) fn spec_replicas(&self) -> Option<i32> {
        self.spec.replicas
    }

    /// The replicas it asks for, for the scalable kinds (see [`replicas_asked`]).
    pub(crate) fn replicas(&self, kind: ConsumerKind) -> Option<i32> {
        kind.is_scalable()
            .then(|| replicas_asked(self.spec.replicas, self.metadata.annotations.as_ref()))
    }

    /// A label's value.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        lookup(self.metadata.labels.as_ref(), key)
    }

    /// An annotation's value.
    pub(crate) fn annotation(&self, key: &str) -> Option<&str> {
        lookup(self.metadata.annotations.as_ref(), key)
    }

    /// What is held of it as a consumer, its GitOps managers found with `git_ops`.
    pub(crate) fn into_workload(self, kind: ConsumerKind, git_ops: &GitOpsSpec) -> Workload {
        let managed_by = gitops::managers_marked(
            self.metadata.labels.as_ref(),
            self.metadata.annotations.as_ref(),
            git_ops,
        );
        let claims = self.claim_names(kind).map(str::to_string).collect();
        let replicas = self.replicas(kind);
        let template = self.template(kind).map(TemplateIdentity::text);
        let claim_templates = match kind {
            ConsumerKind::StatefulSet => self
                .spec
                .volume_claim_templates
                .into_iter()
                .flatten()
                .filter_map(|t| t.metadata.name)
                .collect(),
            _ => Box::default(),
        };
        Workload {
            kind,
            name: self.metadata.name.unwrap_or_default(),
            claims,
            claim_templates,
            replicas,
            managed_by,
            template,
        }
    }
}

/// The replicas a scalable workload asks for: `spec.replicas` (Kubernetes' default is
/// 1), or, while a restore holds it stopped (its mark is on it), the count it asked for
/// before, which that restore recorded beside its mark. Its 0 is the restore's: a
/// second restore that found it then and recorded 0 would keep a wrong count.
pub(crate) fn replicas_asked(
    spec_replicas: Option<i32>,
    annotations: Option<&BTreeMap<String, String>>,
) -> i32 {
    let before_stop = lookup(annotations, crate::labels::QUIESCED_BY)
        .and(lookup(annotations, crate::labels::ORIGINAL_REPLICAS))
        .and_then(|count| count.parse::<i32>().ok())
        .filter(|count| *count >= 0);
    before_stop.unwrap_or_else(|| spec_replicas.unwrap_or(1))
}

fn lookup<'a>(map: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map?.get(key).map(String::as_str)
}

/// A workload found as a consumer of its own, as held while a restore's consumers are
/// found: its name and the little deciding about it reads, not its spec (a thousand
/// namespaces' workloads are held at once).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Workload {
    pub kind: ConsumerKind,
    pub name: String,
    /// The claims its pod template's volumes name.
    claims: Box<[String]>,
    /// A StatefulSet's volumeClaimTemplates, by name.
    claim_templates: Box<[String]>,
    /// The replicas it asks for, for the scalable kinds.
    pub replicas: Option<i32>,
    /// The GitOps objects that manage it, from its marks.
    pub managed_by: Vec<GitOpsRef>,
    /// What a stand-in takes from its pod template ([`TemplateIdentity`] as JSON text);
    /// None without one.
    template: Option<Box<str>>,
}

/// The identity and tolerations a stand-in takes from a pod template when no pod of the
/// workload runs ([`PodSpec`]'s fields of the same names). A [`Workload`] holds it as
/// its JSON text: the typed security contexts take most of a KiB whatever they hold,
/// the text of a typical pair a quarter of that.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TemplateIdentity {
    #[serde(skip_serializing_if = "Option::is_none")]
    security_context: Option<PodSecurityContext>,
    /// The first container's.
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<SecurityContext>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tolerations: Option<Vec<Toleration>>,
}

impl TemplateIdentity {
    /// `spec`'s, as JSON text.
    fn text(spec: &TemplateSpec) -> Box<str> {
        let identity = TemplateIdentity {
            security_context: spec.security_context.clone(),
            container: spec
                .containers
                .iter()
                .flatten()
                .next()
                .and_then(|c| c.security_context.clone()),
            tolerations: spec.tolerations.clone(),
        };
        serde_json::to_string(&identity)
            .unwrap_or_default()
            .into_boxed_str()
    }
}

impl Workload {
    /// Whether its pod template mounts `claim`. A StatefulSet's volumeClaimTemplates
    /// name claims `<template>-<set>-<ordinal>`.
    pub(crate) fn mounts(&self, claim: &str) -> bool {
        let named = self.claims.iter().any(|c| c == claim);
        let from_claim_template = self.claim_templates.iter().any(|t| {
            claim
                .strip_prefix(&format!("{t}-{}-", self.name))
                .is_some_and(|ordinal| {
                    !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit())
                })
        });
        named || from_claim_template
    }

    /// Its pod template's spec with what a stand-in takes from it (security contexts and
    /// tolerations) and nothing else; None without a pod template.
    pub(crate) fn template_spec(&self) -> Option<PodSpec> {
        let text = self.template.as_deref()?;
        let identity: TemplateIdentity = serde_json::from_str(text).unwrap_or_default();
        let container = identity.container.map(|security| Container {
            security_context: Some(security),
            ..Default::default()
        });
        Some(PodSpec {
            security_context: identity.security_context,
            containers: container.into_iter().collect(),
            tolerations: identity.tolerations,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(json: serde_json::Value) -> Listed {
        serde_json::from_value(json).unwrap()
    }

    fn workload(kind: ConsumerKind, name: &str, json: serde_json::Value) -> Workload {
        let mut listed = listed(json);
        listed.metadata.name = Some(name.into());
        listed.into_workload(kind, &GitOpsSpec::default())
    }

    #[test]
    fn a_template_spec_is_read_from_each_kind() {
        let spec = serde_json::json!({
            "securityContext": {"runAsUser": 0},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "containers": [{"name": "app", "securityContext": {"runAsNonRoot": false}}],
        });
        let deployment = serde_json::json!({"spec": {"template": {"spec": spec}}});
        let cron =
            serde_json::json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}});
        for (kind, json) in [
            (ConsumerKind::Deployment, deployment),
            (ConsumerKind::CronJob, cron),
        ] {
            let parsed = workload(kind, "w", json)
                .template_spec()
                .expect("a pod spec");
            assert_eq!(
                parsed.security_context.and_then(|s| s.run_as_user),
                Some(0),
                "{kind:?}"
            );
            assert_eq!(parsed.tolerations.map(|t| t.len()), Some(1), "{kind:?}");
            let container = parsed
                .containers
                .first()
                .and_then(|c| c.security_context.clone());
            assert_eq!(
                container.and_then(|s| s.run_as_non_root),
                Some(false),
                "{kind:?}"
            );
        }
        let bare = workload(ConsumerKind::Deployment, "w", serde_json::json!({}));
        assert!(bare.template_spec().is_none());
    }

    #[test]
    fn templates_mount_their_claims_even_with_nothing_running() {
        let cron = serde_json::json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        }}}}}});
        let cron = workload(ConsumerKind::CronJob, "nightly", cron);
        assert!(cron.mounts("data"));
        assert!(!cron.mounts("other"));
        let deploy = serde_json::json!({"spec": {"replicas": 0, "template": {"spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        }}}});
        assert!(workload(ConsumerKind::Deployment, "web", deploy).mounts("data"));
        let sts = || serde_json::json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
        let db = workload(ConsumerKind::StatefulSet, "db", sts());
        assert!(db.mounts("data-db-0"));
        assert!(db.mounts("data-db-12"));
        assert!(!db.mounts("data-db-x"));
        assert!(!db.mounts("data-dbx-0"));
        assert!(!workload(ConsumerKind::StatefulSet, "other", sts()).mounts("data-db-0"));
    }

    #[test]
    fn only_top_workloads_and_running_jobs_count() {
        let owned = listed(
            serde_json::json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                "controller": true, "kind": "Deployment", "name": "web", "uid": "u"}]}}),
        );
        assert!(!owned.is_top(ConsumerKind::ReplicaSet));
        assert!(listed(serde_json::json!({})).is_top(ConsumerKind::ReplicaSet));
        let done =
            serde_json::json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert!(!listed(done).is_top(ConsumerKind::Job));
        assert!(listed(serde_json::json!({"status": {"active": 1}})).is_top(ConsumerKind::Job));
    }

    #[test]
    fn a_listed_workload_keeps_what_deciding_needs() {
        let object = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "namespace": "shop", "uid": "u1",
                "annotations": {"big": "x".repeat(1000)},
                "labels": {"a": "b", gitops::KUSTOMIZATION_NAME: "shop",
                    gitops::KUSTOMIZATION_NAMESPACE: "flux-system"}},
            "spec": {"replicas": 3, "template": {"spec": {"volumes": [
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "c", "configMap": {"name": "settings"}}]}}},
            "status": {"replicas": 3}
        });
        let kept = listed(object).into_workload(ConsumerKind::Deployment, &GitOpsSpec::default());
        assert_eq!(kept.name, "w");
        assert_eq!(kept.replicas, Some(3));
        assert_eq!(&*kept.claims, ["data"]);
        assert_eq!(kept.managed_by.len(), 1, "a GitOps tool's marks are read");
        assert_eq!(kept.managed_by[0].name, "shop");
        let unscaled = listed(serde_json::json!({"spec": {}}));
        assert_eq!(unscaled.replicas(ConsumerKind::StatefulSet), Some(1));
        let at_zero = |annotations: serde_json::Value| {
            listed(serde_json::json!({
                "metadata": {"annotations": annotations},
                "spec": {"replicas": 0},
            }))
        };
        let stopped = at_zero(serde_json::json!({
            crate::labels::QUIESCED_BY: "uid-other",
            crate::labels::ORIGINAL_REPLICAS: "3",
        }));
        assert_eq!(
            stopped.replicas(ConsumerKind::Deployment),
            Some(3),
            "what it asked for before another restore stopped it"
        );
        for annotations in [
            serde_json::json!({crate::labels::ORIGINAL_REPLICAS: "3"}),
            serde_json::json!({crate::labels::QUIESCED_BY: "u", crate::labels::ORIGINAL_REPLICAS: "x"}),
            serde_json::json!({crate::labels::QUIESCED_BY: "u", crate::labels::ORIGINAL_REPLICAS: "-2"}),
        ] {
            assert_eq!(
                at_zero(annotations.clone()).replicas(ConsumerKind::Deployment),
                Some(0),
                "{annotations}"
            );
        }
        assert_eq!(unscaled.replicas(ConsumerKind::CronJob), None);
    }

    /// A Deployment as the API server lists it: the benchmark's app (one claim, the
    /// security a `restricted` namespace asks), with the defaults the server fills in.
    fn listed_deployment() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "app", "namespace": "bench-0001", "uid": "6f1c2a52-3b8e-4c1e-9d0a-6a1b2c3d4e5f",
                "resourceVersion": "123456", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"deployment.kubernetes.io/revision": "1"}},
            "spec": {"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                "selector": {"matchLabels": {"app": "app"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": {"metadata": {"labels": {"app": "app", "bench-run": "r1"}}, "spec": {
                    "securityContext": {"runAsUser": 1001, "runAsGroup": 1001, "fsGroup": 1001,
                        "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "app", "image": "registry.local/app:1",
                        "imagePullPolicy": "IfNotPresent", "resources": {},
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                        "volumeMounts": [{"name": "data", "mountPath": "/data/0"}],
                        "securityContext": {"runAsUser": 1001, "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}}}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                    "terminationGracePeriodSeconds": 30}}},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                "availableReplicas": 1, "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}
        })
    }

    /// Bytes a JSON value takes in memory at least: each value 32, each string and key
    /// its text, each object entry its key and value (the map's nodes not counted).
    fn json_bytes(value: &serde_json::Value) -> usize {
        let inner = match value {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(items) => items.iter().map(json_bytes).sum(),
            serde_json::Value::Object(map) => {
                map.iter().map(|(k, v)| 24 + k.len() + json_bytes(v)).sum()
            }
            _ => 0,
        };
        32 + inner
    }

    /// Bytes a [`Workload`] takes, its strings included.
    fn workload_bytes(w: &Workload) -> usize {
        let strings = |v: &[String]| v.iter().map(|s| 24 + s.len()).sum::<usize>();
        let identity = w.template.as_ref().map_or(0, |t| t.len());
        size_of::<Workload>()
            + w.name.len()
            + strings(&w.claims)
            + strings(&w.claim_templates)
            + identity
    }

    #[test]
    fn a_listed_deployment_is_held_in_a_fraction_of_its_json() {
        let object = listed_deployment();
        // What was held of it before: its whole spec as JSON, with slim metadata.
        let mut before = object.clone();
        before["status"] = serde_json::Value::Null;
        before["metadata"] = serde_json::json!({"name": "app", "namespace": "bench-0001",
            "uid": object["metadata"]["uid"], "ownerReferences": []});
        let (text, json) = (
            serde_json::to_vec(&before).unwrap().len(),
            json_bytes(&before),
        );
        let after = listed(object).into_workload(ConsumerKind::Deployment, &GitOpsSpec::default());
        let held = workload_bytes(&after);
        println!(
            "a listed Deployment: {text} bytes of JSON text, some {json} bytes as a JSON value; {held} bytes as a Workload"
        );
        assert!(held * 5 < json, "{held} of {json}");
    }
}
