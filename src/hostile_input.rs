//! Every function that reads text or objects a user wrote (a DataRestore's spec, the
//! labels, annotations and pod templates of a team's workloads) is thrown arbitrary
//! input here: it may refuse, never panic. A panic in the controller stops every
//! restore of the cluster until someone finds the object that caused it.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::api::{ConsumerKind, DataRestoreSpec, GitOpsSpec};

/// Text as hostile as a user can write it: any Unicode, names with a wide character
/// near the byte where values are cut (57, 63), separators selectors and keys split
/// on, and lengths past every limit.
pub(crate) fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,80}",
        "[a-z0-9./,=!()é€𝄞_ -]{0,80}",
        (0usize..300, "[é€𝄞]", 0usize..20).prop_map(|(a, wide, b)| format!(
            "{}{wide}{}",
            "a".repeat(a),
            "b".repeat(b)
        )),
        Just(String::new()),
        prop::sample::select(vec![
            "/", "//", "a/", "/a", ".", "..", "-", "a/b/c", "\0", "é"
        ])
        .prop_map(String::from),
    ]
}

/// Arbitrary JSON, keys and strings hostile, a few levels deep.
pub(crate) fn hostile_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        hostile_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    hostile_text(),
                    prop::sample::select(vec![
                        "spec",
                        "template",
                        "replicas",
                        "volumes",
                        "persistentVolumeClaim",
                        "claimName",
                        "metadata",
                        "annotations",
                        "labels",
                        "ownerReferences",
                        "suspend",
                        "nodeSelector",
                        "jobTemplate",
                        "status",
                        "containers",
                    ])
                    .prop_map(String::from),
                ],
                inner,
                0..8
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn texts() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(hostile_text(), 0..6)
}

/// A DataRestore spec with hostile text in every field a user fills in.
fn hostile_spec() -> impl Strategy<Value = DataRestoreSpec> {
    (
        (prop::option::of(hostile_text()), prop::option::of(hostile_text())),
        (texts(), texts()),
        prop::collection::btree_map(hostile_text(), texts(), 0..4),
        prop::collection::btree_map(hostile_text(), hostile_text(), 0..4),
        (texts(), texts()),
        (prop::option::of(hostile_text()), prop::option::of(hostile_text())),
        (prop::option::of(hostile_text()), prop::option::of(hostile_text())),
        (texts(), prop::option::of(hostile_text()), prop::option::of(hostile_text())),
    )
        .prop_filter_map(
            "a spec the API server would store",
            |(
                (backup, schedule),
                (namespaces, pvcs),
                candidates,
                match_labels,
                (include, exclude),
                (volume_timeout, timeout),
                (stand_in, helper_image),
                (expression_values, cpu, argo_namespace),
            )| {
                let spec = json!({
                    "backupName": backup,
                    "scheduleName": schedule,
                    "includedNamespaces": namespaces,
                    "pvcs": pvcs,
                    "candidateNodes": candidates,
                    "selector": {
                        "matchLabels": match_labels,
                        "matchExpressions": [{"key": expression_values.first(), "operator": "In", "values": expression_values}],
                    },
                    "paths": {"include": include, "exclude": exclude},
                    "pvcPaths": pvcs.iter().map(|p| (p.clone(), json!({"include": include, "exclude": exclude}))).collect::<BTreeMap<_, _>>(),
                    "volumeTimeout": volume_timeout,
                    "timeout": timeout,
                    "standInImage": stand_in,
                    "restoreHelper": {
                        "image": helper_image,
                        "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}},
                    },
                    "gitOps": {"argoCDNamespace": argo_namespace, "argoCDInstanceLabel": argo_namespace},
                });
                serde_json::from_value(strip_nulls(spec)).ok()
            },
        )
}

/// JSON nulls out, as a client leaves unset fields out.
fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .filter(|v| !v.is_null())
                .map(strip_nulls)
                .collect(),
        ),
        other => other,
    }
}

const KINDS: [ConsumerKind; 8] = [
    ConsumerKind::Deployment,
    ConsumerKind::StatefulSet,
    ConsumerKind::ReplicaSet,
    ConsumerKind::ReplicationController,
    ConsumerKind::DaemonSet,
    ConsumerKind::CronJob,
    ConsumerKind::Job,
    ConsumerKind::Pod,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn names_and_label_values_never_panic(a in hostile_text(), b in hostile_text(), c in hostile_text()) {
        let value = crate::labels::label_value(&a);
        // Velero's cut of a name it accepts: 63 bytes at most.
        if a.is_ascii() {
            prop_assert!(value.len() <= 63);
        }
        let _ = crate::labels::stand_in_pod_name(&a);
        let _ = crate::labels::copier_pod_name(&a);
        let _ = crate::labels::new_claim_name(&a, &b);
        let _ = crate::labels::scratch_claim_name(&a, &b);
        let _ = crate::labels::pod_volume_restore_name(&a, &b, &c);
        let _ = crate::labels::schedule_run_name(&a, &b, &c);
    }

    #[test]
    fn spec_checks_never_panic(spec in hostile_spec()) {
        let _ = crate::plan::spec_errors(&spec);
    }

    #[test]
    fn durations_quantities_images_and_names_never_panic(text in hostile_text()) {
        let _ = crate::plan::duration(&text);
        let _ = crate::plan::spec::quantity(&text);
        let _ = crate::plan::spec::image_reference(&text);
        let _ = crate::k8s_names::dns_subdomain(&text);
        let _ = crate::plan::parse_pvc_key(&text);
        let _ = crate::cli::selector::parse(&text);
        let _ = crate::copy::pattern_error(&text);
    }

    #[test]
    fn path_selections_never_panic(include in texts(), exclude in texts(), path in hostile_text()) {
        let selection = crate::copy::Selection { include, exclude };
        if let Ok(matcher) = crate::copy::Matcher::new(&selection) {
            let _ = matcher.is_chosen(&path);
            let _ = matcher.is_excluded(&path);
            let _ = matcher.may_contain_chosen(&path);
            let _ = matcher.could_exclude_under(std::path::Path::new(&path));
        }
    }

    #[test]
    fn gitops_marks_never_panic(
        marks in prop::collection::btree_map(
            prop::sample::select(vec![
                crate::gitops::KUSTOMIZATION_NAME,
                crate::gitops::KUSTOMIZATION_NAMESPACE,
                crate::gitops::HELM_RELEASE_NAME,
                crate::gitops::HELM_RELEASE_NAMESPACE,
                crate::gitops::ARGO_CD_TRACKING_ID,
                "app.kubernetes.io/instance",
            ]),
            hostile_text(),
            0..6,
        ),
        instance in prop::option::of(Just("app.kubernetes.io/instance".to_string())),
        argo in prop::option::of(hostile_text()),
    ) {
        let spec = GitOpsSpec {
            argo_cd_instance_label: instance,
            argo_cd_namespace: argo,
            ..Default::default()
        };
        let get = |key: &str| marks.get(key).map(String::as_str);
        let _ = crate::gitops::managers(get, get, &spec);
    }

    #[test]
    fn workload_templates_never_panic(workload in hostile_json(), claim in hostile_text()) {
        let listed = serde_json::from_value::<crate::plan::Listed>(workload.clone());
        for kind in KINDS {
            let _ = crate::plan::template_claim_names(kind, &workload);
            if let Ok(listed) = &listed {
                let _ = listed.is_top(kind);
                let found = listed.clone().into_workload(kind, &GitOpsSpec::default());
                let _ = found.mounts(&claim);
                let _ = found.template_spec();
            }
        }
        if let Ok(pod) = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(workload) {
            let _ = crate::plan::mounts_claim(&pod, &claim);
        }
    }
}
