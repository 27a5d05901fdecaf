//! Whether a GitOps object itself says it manages a workload. Pure.
//!
//! refill finds a workload's manager from marks on the workload ([`super::managers`]),
//! and those are written by whoever may edit the workload: a team with `edit` in its
//! own namespace can label its Deployment with the name of a platform Kustomization
//! elsewhere. So the marks only say where to look; a pause needs the object's own
//! word, from what the tool records of what it applies:
//!
//! - Flux Kustomization: `status.inventory.entries[].id`, each
//!   `<namespace>_<name>_<group>_<Kind>` (kustomize-controller writes the
//!   `ObjMetadata` string of each object it applied; the core group is empty, so a
//!   ConfigMap is `ns_cm__ConfigMap`).
//! - Flux HelmRelease: the same inventory where helm-controller keeps one. Older
//!   helm-controllers keep none: there the HelmRelease counts as managing the
//!   workload only when its last release (`status.history[0]`) was installed into
//!   the workload's own namespace. Helm's own annotations on the workload
//!   (`meta.helm.sh/release-name`) prove nothing, being written by the same hands as
//!   the labels; what the rule bounds is whom a forged mark can reach: only a
//!   HelmRelease that already installs into the namespace of whoever forged it, whose
//!   objects there carry its name for anyone in the namespace to read.
//! - Argo CD Application: `status.resources[]`, each `{group, kind, namespace, name}`.
//!
//! Workload namespaces and names are DNS names, which hold no `_`, so a Flux id is
//! compared whole: an id with extra `_` never matches a workload.

use std::borrow::Cow;

use serde::Deserialize;

use crate::api::{ConsumerKind, GitOpsKind};

/// A workload, as a GitOps tool lists what it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppliedWorkload<'a> {
    /// Its kind.
    pub kind: ConsumerKind,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

impl AppliedWorkload<'_> {
    /// Its API group, empty for the core group.
    fn group(&self) -> String {
        self.kind.api_resource().group
    }

    /// Its kind as the API spells it.
    fn kind_name(&self) -> String {
        format!("{:?}", self.kind)
    }

    /// Flux's inventory id of it: `<namespace>_<name>_<group>_<Kind>`.
    pub(crate) fn flux_id(&self) -> String {
        format!(
            "{}_{}_{}_{}",
            self.namespace,
            self.name,
            self.group(),
            self.kind_name()
        )
    }
}

/// What refill keeps of a GitOps object read to check whom it manages: the lists
/// only, borrowed from the text read, every other field skipped unread.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Listing<'a> {
    #[serde(borrow, default)]
    status: Option<Status<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct Status<'a> {
    /// Flux: what it applied.
    #[serde(borrow, default)]
    inventory: Option<Inventory<'a>>,
    /// Flux HelmRelease: its releases, the latest first.
    #[serde(borrow, default)]
    history: Option<Vec<LatestRelease<'a>>>,
    /// Argo CD: what the Application manages.
    #[serde(borrow, default)]
    resources: Option<Vec<Resource<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
struct Inventory<'a> {
    #[serde(borrow, default)]
    entries: Option<Vec<InventoryEntry<'a>>>,
}

#[derive(Debug, Deserialize)]
struct InventoryEntry<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct LatestRelease<'a> {
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct Resource<'a> {
    #[serde(borrow, default)]
    group: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

impl<'a> Listing<'a> {
    /// The lists of a GitOps object, from the JSON the API served.
    pub(crate) fn parse(text: &'a str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// Whether the object, of kind `kind`, lists `workload` among what it manages.
    pub(crate) fn lists(&self, kind: GitOpsKind, workload: &AppliedWorkload) -> bool {
        if workload.namespace.is_empty() || workload.name.is_empty() {
            return false;
        }
        let Some(status) = &self.status else {
            return false;
        };
        match kind {
            GitOpsKind::Kustomization => in_inventory(status.inventory.as_ref(), workload),
            GitOpsKind::HelmRelease => match &status.inventory {
                Some(inventory) => in_inventory(Some(inventory), workload),
                None => status
                    .history
                    .as_deref()
                    .and_then(<[LatestRelease]>::first)
                    .and_then(|latest| latest.namespace.as_deref())
                    .is_some_and(|namespace| namespace == workload.namespace),
            },
            GitOpsKind::Application => {
                let (group, kind) = (workload.group(), workload.kind_name());
                status.resources.iter().flatten().any(|r| {
                    r.group.as_deref().unwrap_or("") == group
                        && r.kind.as_deref() == Some(kind.as_str())
                        && r.namespace.as_deref() == Some(workload.namespace)
                        && r.name.as_deref() == Some(workload.name)
                })
            }
        }
    }
}

fn in_inventory(inventory: Option<&Inventory>, workload: &AppliedWorkload) -> bool {
    let id = workload.flux_id();
    inventory
        .and_then(|i| i.entries.as_ref())
        .into_iter()
        .flatten()
        .any(|entry| entry.id.as_deref() == Some(id.as_str()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const WEB: AppliedWorkload = AppliedWorkload {
        kind: ConsumerKind::Deployment,
        namespace: "h3",
        name: "web",
    };

    fn lists(kind: GitOpsKind, object: serde_json::Value, workload: &AppliedWorkload) -> bool {
        let text = object.to_string();
        Listing::parse(&text).unwrap().lists(kind, workload)
    }

    fn inventory(ids: &[&str]) -> serde_json::Value {
        let entries: Vec<_> = ids
            .iter()
            .map(|id| json!({ "id": id, "v": "v1" }))
            .collect();
        json!({ "status": { "inventory": { "entries": entries } } })
    }

    #[test]
    fn flux_ids_follow_kustomize_controller() {
        assert_eq!(WEB.flux_id(), "h3_web_apps_Deployment");
        let pod = AppliedWorkload {
            kind: ConsumerKind::Pod,
            namespace: "h3",
            name: "solo",
        };
        assert_eq!(pod.flux_id(), "h3_solo__Pod", "the core group is empty");
        let cron = AppliedWorkload {
            kind: ConsumerKind::CronJob,
            ..WEB
        };
        assert_eq!(cron.flux_id(), "h3_web_batch_CronJob");
    }

    #[test]
    fn a_kustomization_manages_only_what_its_inventory_lists() {
        let kind = GitOpsKind::Kustomization;
        let listed = inventory(&["h3_cm__ConfigMap", "h3_web_apps_Deployment"]);
        assert!(lists(kind, listed, &WEB));
        let other = AppliedWorkload { name: "api", ..WEB };
        assert!(!lists(kind, inventory(&["h3_web_apps_Deployment"]), &other));
        let statefulset = AppliedWorkload {
            kind: ConsumerKind::StatefulSet,
            ..WEB
        };
        assert!(
            !lists(kind, inventory(&["h3_web_apps_Deployment"]), &statefulset),
            "another kind of the same name"
        );
        let elsewhere = AppliedWorkload {
            namespace: "h4",
            ..WEB
        };
        assert!(!lists(
            kind,
            inventory(&["h3_web_apps_Deployment"]),
            &elsewhere
        ));
    }

    #[test]
    fn hostile_inventories_match_nothing() {
        let kind = GitOpsKind::Kustomization;
        for ids in [
            vec!["h3_web_apps_Deployment_"],
            vec!["_h3_web_apps_Deployment"],
            vec!["h3_web_extra_apps_Deployment"],
            vec!["h3__web_apps_Deployment"],
            vec!["h3_web_apps_deployment"],
            vec!["h3_web_apps"],
            vec![""],
            vec![],
        ] {
            assert!(!lists(kind, inventory(&ids), &WEB), "{ids:?}");
        }
        let odd = json!({ "status": { "inventory": { "entries": [
            {}, { "id": null }, { "v": "v1" },
        ] } } });
        assert!(!lists(kind, odd, &WEB));
        for object in [
            json!({}),
            json!({ "status": {} }),
            json!({ "status": { "inventory": {} } }),
            json!({ "status": { "inventory": null } }),
            json!({ "spec": { "suspend": false }, "metadata": { "name": "x" } }),
        ] {
            assert!(!lists(kind, object.clone(), &WEB), "{object}");
        }
        let nameless = AppliedWorkload {
            namespace: "",
            name: "",
            ..WEB
        };
        assert!(!lists(
            kind,
            inventory(&["___Deployment", "__apps_Deployment"]),
            &nameless
        ));
        // A list of the wrong shape is refused, not read as empty or as a match.
        let text = json!({ "status": { "inventory": { "entries": "h3_web_apps_Deployment" } } })
            .to_string();
        assert!(Listing::parse(&text).is_err());
    }

    #[test]
    fn a_long_inventory_is_searched_whole() {
        let mut ids: Vec<String> = (0..20_000)
            .map(|i| format!("h3_web-{i}_apps_Deployment"))
            .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert!(!lists(GitOpsKind::Kustomization, inventory(&refs), &WEB));
        ids.push("h3_web_apps_Deployment".into());
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert!(lists(GitOpsKind::Kustomization, inventory(&refs), &WEB));
    }

    #[test]
    fn escaped_ids_are_read_as_written() {
        // JSON may spell any character escaped; the id is compared once unescaped.
        let text = r#"{"status":{"inventory":{"entries":[{"id":"h3_web_apps_Deploy\u006dent"}]}}}"#;
        let listing = Listing::parse(text).unwrap();
        assert!(listing.lists(GitOpsKind::Kustomization, &WEB));
    }

    #[test]
    fn a_helm_release_with_an_inventory_is_held_to_it() {
        let kind = GitOpsKind::HelmRelease;
        let mut object = inventory(&["h3_web_apps_Deployment"]);
        object["status"]["history"] = json!([{ "name": "web", "namespace": "h3" }]);
        assert!(lists(kind, object.clone(), &WEB));
        let api = AppliedWorkload { name: "api", ..WEB };
        assert!(
            !lists(kind, object, &api),
            "its inventory decides, not the namespace of its release"
        );
    }

    #[test]
    fn a_helm_release_without_one_manages_only_the_namespace_it_installs_into() {
        let kind = GitOpsKind::HelmRelease;
        let release = |namespace: serde_json::Value| {
            json!({ "status": { "history": [
                { "name": "web", "namespace": namespace },
                { "name": "web", "namespace": "h3" },
            ] } })
        };
        assert!(lists(kind, release(json!("h3")), &WEB));
        assert!(
            !lists(kind, release(json!("platform")), &WEB),
            "the latest release decides"
        );
        assert!(!lists(kind, release(json!("")), &WEB));
        assert!(!lists(kind, release(json!(null)), &WEB));
        assert!(
            !lists(kind, json!({ "status": { "history": [] } }), &WEB),
            "never released: manages nothing"
        );
        assert!(!lists(
            kind,
            json!({ "spec": { "targetNamespace": "h3" } }),
            &WEB
        ));
    }

    #[test]
    fn an_application_manages_what_its_resources_list() {
        let kind = GitOpsKind::Application;
        let app = |resources: serde_json::Value| json!({ "status": { "resources": resources } });
        let web = json!({ "group": "apps", "version": "v1", "kind": "Deployment",
                          "namespace": "h3", "name": "web", "status": "Synced" });
        assert!(lists(kind, app(json!([web])), &WEB));
        for (field, value) in [
            ("group", json!("")),
            ("kind", json!("StatefulSet")),
            ("namespace", json!("h4")),
            ("name", json!("web2")),
            ("name", json!(null)),
        ] {
            let mut other = web.clone();
            other[field] = value;
            assert!(!lists(kind, app(json!([other])), &WEB), "{field}");
        }
        let pod = AppliedWorkload {
            kind: ConsumerKind::Pod,
            namespace: "h3",
            name: "solo",
        };
        let core = json!({ "version": "v1", "kind": "Pod", "namespace": "h3", "name": "solo" });
        assert!(
            lists(kind, app(json!([core])), &pod),
            "the core group is left out"
        );
        assert!(!lists(kind, app(json!([])), &WEB));
        assert!(
            !lists(kind, inventory(&["h3_web_apps_Deployment"]), &WEB),
            "a Flux inventory says nothing of an Application"
        );
    }
}
