//! The `restore-wait` init container, with the settings Velero itself would give it, so
//! users who configured Velero's restore helper (a private registry, a restricted
//! namespace) get the same from refill.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, EnvVar, EnvVarSource, ObjectFieldSelector,
    ResourceRequirements, SeccompProfile, SecurityContext, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::api::{ConsumerSecurity, RestoreHelperOverrides};
use crate::labels;

/// The init container's name: Velero's node agent looks for a container of this name
/// to know the pod waits for a restore.
pub(crate) const CONTAINER_NAME: &str = "restore-wait";
/// Velero's helper binary in its image, run when nothing names another.
pub(crate) const DEFAULT_COMMAND: &str = "/velero-restore-helper";
/// Used only when neither the DataRestore, Velero's ConfigMap nor a Velero Deployment
/// names an image.
pub const FALLBACK_IMAGE: &str = "velero/velero:v1.17.0";

/// What Velero's namespace says about the helper: its ConfigMap's data and the image of
/// the Velero server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HelperSource {
    /// The data of Velero's restore-helper ConfigMap (image, resources, security).
    pub config: BTreeMap<String, String>,
    /// The Velero server's image, whose tag the helper image follows.
    pub velero_image: Option<String>,
}

/// Reads the restore-helper ConfigMap and the Velero server image.
pub(crate) async fn read_source(
    client: &Client,
    velero_namespace: &str,
) -> kube::Result<HelperSource> {
    let selector = format!(
        "{},{}=RestoreItemAction",
        labels::PLUGIN_CONFIG,
        labels::POD_VOLUME_RESTORE_PLUGIN
    );
    let maps = Api::<ConfigMap>::namespaced(client.clone(), velero_namespace)
        .list(&ListParams::default().labels(&selector))
        .await?;
    let config = maps
        .items
        .into_iter()
        .next()
        .and_then(|cm| cm.data)
        .unwrap_or_default();
    let velero_image = Api::<Deployment>::namespaced(client.clone(), velero_namespace)
        .get_opt("velero")
        .await?
        .and_then(|d| d.spec)
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image);
    Ok(HelperSource {
        config,
        velero_image,
    })
}

fn image_tag(image: &str) -> Option<&str> {
    let last = image.rsplit('/').next()?;
    last.split_once(':').map(|(_, tag)| tag)
}

/// The image: the override, else the ConfigMap's (tagged like the server when it has no
/// tag), else the Velero server's own.
fn image(overrides: Option<&RestoreHelperOverrides>, source: &HelperSource) -> String {
    if let Some(image) = overrides.and_then(|o| o.image.clone()) {
        return image;
    }
    let server = source.velero_image.as_deref();
    match source.config.get("image") {
        Some(image) if image_tag(image).is_none() && !image.contains('@') => {
            match server.and_then(image_tag) {
                Some(tag) => format!("{image}:{tag}"),
                None => image.clone(),
            }
        }
        Some(image) => image.clone(),
        None => server.unwrap_or(FALLBACK_IMAGE).to_string(),
    }
}

fn resources(config: &BTreeMap<String, String>) -> ResourceRequirements {
    // "0" means unbounded, as in Velero.
    let pick = |key: &str, default: &str| -> Option<Quantity> {
        let value = config.get(key).map(String::as_str).unwrap_or(default);
        (value != "0").then(|| Quantity(value.to_string()))
    };
    let map = |cpu: Option<Quantity>, mem: Option<Quantity>| {
        let mut m = BTreeMap::new();
        if let Some(cpu) = cpu {
            m.insert("cpu".to_string(), cpu);
        }
        if let Some(mem) = mem {
            m.insert("memory".to_string(), mem);
        }
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements {
        requests: map(pick("cpuRequest", "100m"), pick("memRequest", "128Mi")),
        limits: map(pick("cpuLimit", "100m"), pick("memLimit", "128Mi")),
        ..Default::default()
    }
}

fn restricted_default() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(1000),
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The ConfigMap's security settings when it has any; `secCtx` wins over the rest.
fn configured_security(
    config: &BTreeMap<String, String>,
) -> Result<Option<SecurityContext>, String> {
    if let Some(yaml) = config.get("secCtx") {
        return yaml_serde::from_str(yaml).map(Some).map_err(|e| {
            format!("restore-helper ConfigMap key secCtx is not a SecurityContext: {e}")
        });
    }
    let int = |key: &str| -> Result<Option<i64>, String> {
        config
            .get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("restore-helper ConfigMap key {key} is not a number: {v}"))
            })
            .transpose()
    };
    let user = int("secCtxRunAsUser")?;
    let group = int("secCtxRunAsGroup")?;
    let escalation = config
        .get("secCtxAllowPrivilegeEscalation")
        .map(|v| {
            v.parse::<bool>()
                .map_err(|_| format!("secCtxAllowPrivilegeEscalation is not true/false: {v}"))
        })
        .transpose()?;
    if user.is_none() && group.is_none() && escalation.is_none() {
        return Ok(None);
    }
    Ok(Some(SecurityContext {
        run_as_user: user,
        run_as_group: group,
        allow_privilege_escalation: escalation,
        ..Default::default()
    }))
}

/// The helper's identity when neither the DataRestore nor Velero's ConfigMap sets one,
/// in Velero's (v1.18) order: the consumer's first container's security context; else
/// the restricted default with the pod-level user and group, if the pod sets either
/// (the workload's own identity wrote the files, and can remove the done files); else
/// the restricted default. A pod-level user 0 keeps the pod's own `runAsNonRoot`.
fn consumer_security(consumer: Option<&ConsumerSecurity>) -> SecurityContext {
    if let Some(container) = consumer.and_then(|c| c.container.clone()) {
        return container;
    }
    let pod = consumer.and_then(|c| c.pod.as_ref());
    let mut security = restricted_default();
    if let Some(pod) = pod.filter(|p| p.run_as_user.is_some() || p.run_as_group.is_some()) {
        if let Some(user) = pod.run_as_user {
            security.run_as_user = Some(user);
            if user == 0 {
                security.run_as_non_root = pod.run_as_non_root;
            }
        }
        if pod.run_as_group.is_some() {
            security.run_as_group = pod.run_as_group;
        }
    }
    security
}

/// Builds `restore-wait` for a stand-in pod. `uid` is the DataRestore's UID, the owner
/// the node agent names its done file after; `volume` is mounted at `/restores/<volume>`.
/// `consumer` is the security of the consumer's pod and its first container.
pub fn container(
    uid: &str,
    volume: &str,
    overrides: Option<&RestoreHelperOverrides>,
    source: &HelperSource,
    consumer: Option<&ConsumerSecurity>,
) -> Result<Container, String> {
    let command = overrides
        .and_then(|o| o.command.clone())
        .unwrap_or_else(|| {
            vec![
                source
                    .config
                    .get("command")
                    .cloned()
                    .unwrap_or_else(|| DEFAULT_COMMAND.to_string()),
            ]
        });
    let security = match overrides.and_then(|o| o.security_context.clone()) {
        Some(sc) => sc,
        None => match configured_security(&source.config)? {
            Some(sc) => sc,
            None => consumer_security(consumer),
        },
    };
    let field = |path: &str| EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            field_path: path.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(image(overrides, source)),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command),
        args: Some(vec![uid.to_string()]),
        env: Some(vec![
            EnvVar {
                name: "POD_NAMESPACE".into(),
                value_from: Some(field("metadata.namespace")),
                ..Default::default()
            },
            EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(field("metadata.name")),
                ..Default::default()
            },
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: volume.to_string(),
            mount_path: format!("/restores/{volume}"),
            ..Default::default()
        }]),
        resources: Some(
            overrides
                .and_then(|o| o.resources.clone())
                .unwrap_or_else(|| resources(&source.config)),
        ),
        security_context: Some(security),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSecurityContext;

    fn source(pairs: &[(&str, &str)], server: Option<&str>) -> HelperSource {
        HelperSource {
            config: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            velero_image: server.map(String::from),
        }
    }

    #[test]
    fn defaults_follow_velero() {
        let c = container(
            "uid-1",
            "data",
            None,
            &source(&[], Some("velero/velero:v1.16.2")),
            None,
        )
        .unwrap();
        assert_eq!(c.name, "restore-wait");
        assert_eq!(c.image.as_deref(), Some("velero/velero:v1.16.2"));
        assert_eq!(c.command, Some(vec!["/velero-restore-helper".to_string()]));
        assert_eq!(c.args, Some(vec!["uid-1".to_string()]));
        assert_eq!(c.volume_mounts.unwrap()[0].mount_path, "/restores/data");
        let res = c.resources.unwrap();
        assert_eq!(res.requests.unwrap()["cpu"], Quantity("100m".into()));
        assert_eq!(res.limits.unwrap()["memory"], Quantity("128Mi".into()));
        let sc = c.security_context.unwrap();
        assert_eq!(sc.run_as_user, Some(1000));
        assert_eq!(sc.run_as_non_root, Some(true));
        let env: Vec<String> = c.env.unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(env, vec!["POD_NAMESPACE", "POD_NAME"]);
    }

    #[test]
    fn the_config_map_is_honoured() {
        let src = source(
            &[
                ("image", "registry.local/velero"),
                ("cpuLimit", "0"),
                ("memRequest", "64Mi"),
                ("secCtxRunAsUser", "2000"),
                ("command", "/helper"),
            ],
            Some("velero/velero:v1.16.2"),
        );
        let c = container("u", "v", None, &src, None).unwrap();
        assert_eq!(c.image.as_deref(), Some("registry.local/velero:v1.16.2"));
        assert_eq!(c.command, Some(vec!["/helper".to_string()]));
        let res = c.resources.unwrap();
        assert!(!res.limits.as_ref().unwrap().contains_key("cpu"));
        assert_eq!(res.requests.unwrap()["memory"], Quantity("64Mi".into()));
        assert_eq!(c.security_context.unwrap().run_as_user, Some(2000));

        let yaml = source(
            &[
                ("secCtx", "runAsUser: 7\nrunAsGroup: 8"),
                ("secCtxRunAsUser", "2000"),
            ],
            None,
        );
        let sc = container("u", "v", None, &yaml, None)
            .unwrap()
            .security_context
            .unwrap();
        assert_eq!((sc.run_as_user, sc.run_as_group), (Some(7), Some(8)));
        assert_eq!(
            container("u", "v", None, &source(&[], None), None)
                .unwrap()
                .image
                .as_deref(),
            Some(FALLBACK_IMAGE)
        );
    }

    #[test]
    fn the_consumer_container_context_is_copied_and_overrides_win() {
        let consumer = ConsumerSecurity {
            container: Some(SecurityContext {
                run_as_user: Some(999),
                ..Default::default()
            }),
            pod: Some(PodSecurityContext {
                run_as_user: Some(7),
                ..Default::default()
            }),
        };
        let c = container("u", "v", None, &source(&[], None), Some(&consumer)).unwrap();
        assert_eq!(c.security_context.unwrap().run_as_user, Some(999));
        let overrides = RestoreHelperOverrides {
            image: Some("mine:1".into()),
            security_context: Some(SecurityContext {
                run_as_user: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = container(
            "u",
            "v",
            Some(&overrides),
            &source(&[("image", "x:2")], None),
            Some(&consumer),
        )
        .unwrap();
        assert_eq!(c.image.as_deref(), Some("mine:1"));
        assert_eq!(c.security_context.unwrap().run_as_user, Some(5));
    }

    /// Velero v1.18: without a container-level context, the pod-level user and group
    /// go onto the restricted default, and a pod-level root keeps the pod's
    /// runAsNonRoot (unset: the helper may run as root, as the workload does).
    #[test]
    fn the_pod_level_user_and_group_are_used_when_the_container_sets_none() {
        let helper = |pod: PodSecurityContext| {
            let consumer = ConsumerSecurity {
                container: None,
                pod: Some(pod),
            };
            container("u", "v", None, &source(&[], None), Some(&consumer))
                .unwrap()
                .security_context
                .unwrap()
        };
        let sc = helper(PodSecurityContext {
            run_as_user: Some(2000),
            run_as_group: Some(3000),
            ..Default::default()
        });
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.run_as_non_root),
            (Some(2000), Some(3000), Some(true))
        );
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        let sc = helper(PodSecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        });
        assert_eq!((sc.run_as_user, sc.run_as_non_root), (Some(0), None));
        // Only fsGroup: nothing of the pod's identity, so the default user.
        let sc = helper(PodSecurityContext {
            fs_group: Some(5),
            ..Default::default()
        });
        assert_eq!((sc.run_as_user, sc.run_as_group), (Some(1000), None));
    }

    #[test]
    fn a_broken_config_map_is_reported() {
        let err = container(
            "u",
            "v",
            None,
            &source(&[("secCtxRunAsUser", "root")], None),
            None,
        )
        .unwrap_err();
        assert!(err.contains("secCtxRunAsUser"), "{err}");
    }
}
