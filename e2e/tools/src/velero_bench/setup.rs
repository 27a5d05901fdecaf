//! The benchmark's two namespaces of apps: set up, removed, and checked against
//! the copies taken before the backup.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use refill_e2e::velero;
use refill_e2e::{LOCAL_PATH_CLASS, TESTBOX_IMAGE, fixture, real_node_annotations, wait_for};
use serde_json::json;

use crate::bench::real_data::{self, Size};

use super::{Args, BIG_NS, MANY_NS, MIB, Scene, TIMEOUT, parse_size, say};

/// Both namespaces with their apps Ready and their files written.
pub(super) async fn set_up(client: &Client, args: &Args) -> Result<Vec<Scene>> {
    remove_namespace(client, BIG_NS).await?;
    remove_namespace(client, MANY_NS).await?;
    say(&format!("setting up {BIG_NS}: one app of {} MiB", args.big));
    let big = vec!["big".to_string()];
    create_apps(
        client,
        BIG_NS,
        &big.iter().map(|a| (a.clone(), None)).collect::<Vec<_>>(),
    )
    .await?;
    let dir = velero::claim_dir(client, BIG_NS, "big").await?;
    let size = real_data::write_mixed_tree(&dir, args.big)?;
    let (large, small) = (parse_size(&args.large)?, parse_size(&args.small)?);
    let mut many = Vec::new();
    for i in 0..large.0 {
        many.push((format!("large-{i}"), Some(large.1)));
    }
    for i in 0..small.0 {
        many.push((format!("small-{i}"), Some(small.1)));
    }
    say(&format!("setting up {MANY_NS}: {} apps", many.len()));
    create_apps(client, MANY_NS, &many).await?;
    let mut scenes = vec![
        Scene {
            ns: BIG_NS,
            apps: big,
            label: format!("1 app, {} MiB", args.big),
            size,
        },
        Scene {
            ns: MANY_NS,
            apps: many.into_iter().map(|(a, _)| a).collect(),
            label: String::new(),
            size: Size::default(),
        },
    ];
    let dirs: Vec<PathBuf> = scenes[1]
        .dirs(client)
        .await?
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    scenes[1].size = real_data::size_of(&dirs)?;
    scenes[1].label = format!(
        "{} apps, {:.0} MiB",
        scenes[1].apps.len(),
        scenes[1].size.bytes as f64 / MIB
    );
    Ok(scenes)
}

pub(super) async fn remove_namespace(client: &Client, ns: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await?.is_some() {
        namespaces.delete(ns, &DeleteParams::default()).await?;
    }
    wait_for(format!("namespace {ns} gone"), TIMEOUT, || async {
        Ok(namespaces.get_opt(ns).await?.is_none().then_some(()))
    })
    .await
}

/// Each app: a Deployment of one pod (on a real node, by the namespace's
/// annotations) mounting its claim. With a size, its init container writes the
/// volume's files once (`testbox tree`, a no-op when they are there); without, the
/// benchmark writes them into the claim's directory.
async fn create_apps(client: &Client, ns: &str, apps: &[(String, Option<u32>)]) -> Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {
        "name": ns, "annotations": real_node_annotations(),
    }}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async {
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), ns);
            Ok(accounts.get_opt("default").await?.map(|_| ()))
        },
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for (app, mib) in apps {
        fixture::pvc_of_class(client, ns, app, None, &[], LOCAL_PATH_CLASS).await?;
        let mounts = json!([{"name": "data", "mountPath": "/data"}]);
        let init: Vec<serde_json::Value> = mib
            .iter()
            .map(|mib| {
                json!({"name": "write", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
                    "args": ["tree", "/data", mib.to_string()], "volumeMounts": mounts})
            })
            .collect();
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                        "initContainers": init,
                        "containers": [{"name": "app", "image": TESTBOX_IMAGE,
                            "imagePullPolicy": "Never", "args": ["sleep"], "volumeMounts": mounts}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": app}}],
                        "terminationGracePeriodSeconds": 1,
                    }
                }
            }
        }))?;
        deployments
            .create(&PostParams::default(), &deployment)
            .await?;
    }
    for (app, _) in apps {
        fixture::wait_ready_pods(client, ns, app, 1, TIMEOUT).await?;
    }
    Ok(())
}

/// Every app's volume against the copy taken before the backup.
pub(super) async fn check(client: &Client, scene: &Scene, refs: &Path) -> Result<()> {
    for (app, dir) in scene.dirs(client).await? {
        real_data::compare_trees(&refs.join(scene.ns).join(&app), &dir)?;
    }
    Ok(())
}
