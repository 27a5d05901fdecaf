//! Restores of apps a GitOps tool owns, against the real Flux source-controller and
//! kustomize-controller the local cluster runs (`e2e/cluster/flux.sh`): the app's
//! Deployment comes from a Bucket in the cluster's S3 server through a Kustomization,
//! and Flux puts it back as the Bucket has it whenever it reconciles, unless the
//! Kustomization is suspended. Here an Argo CD Application is only checked against
//! its CRD; `e2e/tests/gitops_argocd.rs` restores apps the real Argo CD syncs.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::api::{
    ConsumerState, DataRestore, GitOpsKind, GitOpsPolicy, GitOpsSpec, GitOpsState, Phase,
    VolumePhase,
};
use refill::gitops::pause::{ARGO_CD_REFRESH, ARGO_CD_SKIP_RECONCILE, FLUX_REQUESTED_AT};
use refill::labels::{PAUSED_BY, PAUSED_FROM};
use refill_e2e::fixture::{self, Scene, phase, pod_template};
use refill_e2e::flux::{self, FluxApp, Kind};
use refill_e2e::{TestEnv, TestNamespace, run_test, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn scene(env: TestEnv) -> Result<Scene> {
    Scene::new(env, TIMEOUT).await
}

/// The name of the Kustomization (and its Bucket) of a test's app.
const APP: &str = "shop";

/// Deployments of `replicas` pods, each on the claim of its name, as Flux applies them
/// from the test's own bucket through the Kustomization [`APP`]; waits until it is
/// Ready and the pods run.
async fn flux_app(s: &Scene, deployments: &[(&str, i32)]) -> Result<()> {
    let manifests: Vec<(String, String)> = deployments
        .iter()
        .map(|(name, replicas)| {
            let deployment = json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": pod_template(name, &[name]),
                },
            });
            // JSON is YAML, and the file name is what Flux's kustomize looks for.
            (format!("{name}.yaml"), deployment.to_string())
        })
        .collect();
    let files: Vec<(&str, &str)> = manifests
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let cluster_dir = &s.env.cluster.dir;
    flux::upload_manifests(cluster_dir, &s.ns, &files).await?;
    let app = FluxApp {
        namespace: &s.ns,
        name: APP,
        bucket: &s.ns,
        // Long: the tests ask for each reconcile they want, at the moment they want it.
        interval: Duration::from_secs(600),
    };
    flux::create_app(&s.client, cluster_dir, &app).await?;
    flux::wait_ready(&s.client, Kind::Bucket, &s.ns, APP, TIMEOUT).await?;
    flux::wait_ready(&s.client, Kind::Kustomization, &s.ns, APP, TIMEOUT).await?;
    for (name, replicas) in deployments {
        s.ready_pods(name, *replicas as usize).await?;
        fixture::wait_settled(&s.client, &s.ns, name, *replicas, s.timeout).await?;
    }
    Ok(())
}

async fn kustomization(s: &Scene) -> Result<DynamicObject> {
    Ok(flux::flux_api(&s.client, Kind::Kustomization, &s.ns)
        .get(APP)
        .await?)
}

/// The Kustomization, checked to be as it was before any restore paused it: not
/// suspended, and none of refill's marks left on it.
async fn put_back(s: &Scene) -> Result<DynamicObject> {
    let back = kustomization(s).await?;
    ensure!(
        back.data["spec"].get("suspend").is_none()
            && annotation(&back, PAUSED_BY).is_none()
            && annotation(&back, PAUSED_FROM).is_none(),
        "not put back: {:?} {:?}",
        back.data["spec"],
        back.metadata.annotations
    );
    Ok(back)
}

fn annotation<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Asks Flux to reconcile now and waits until it handled the request; returns the
/// request's token.
async fn reconcile(s: &Scene) -> Result<String> {
    let token = flux::request_reconcile(&s.client, Kind::Kustomization, &s.ns, APP).await?;
    flux::wait_reconciled(
        &s.client,
        Kind::Kustomization,
        &s.ns,
        APP,
        &token,
        s.timeout,
    )
    .await?;
    Ok(token)
}

#[tokio::test]
async fn flux_is_paused_through_a_controller_restart_and_reconciles_the_app_after() -> Result<()> {
    run_test("gitops-pause", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("web", "node-a", &[("f", b"broken")]).await?;
        flux_app(&s, &[("web", 2)]).await?;
        s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"good")])])
            .await?;

        // No node agent yet: the restore holds the app stopped in Restoring.
        let controller = s.controller().await?;
        s.restore("r1", s.spec("b1", &["web"])).await?;
        let dr = s.wait_gitops_saying("r1", GitOpsState::Paused, "").await?;
        let record = dr.status.unwrap().git_ops.remove(0);
        ensure!(
            record.kind == GitOpsKind::Kustomization
                && record.name == APP
                && record.workloads == [format!("Deployment {}/web", s.ns)]
                && record.original.as_deref() == Some("null"),
            "{record:#?}"
        );
        s.wait_volume("r1", VolumePhase::Restoring).await?;
        ensure!(s.replicas("web").await?.0 == 0, "the app is stopped");
        let paused = kustomization(&s).await?;
        ensure!(paused.data["spec"]["suspend"] == true, "{:?}", paused.data);
        let uid = s.restore_uid("r1").await?;
        ensure!(annotation(&paused, PAUSED_BY) == Some(uid.as_str()));
        ensure!(annotation(&paused, PAUSED_FROM) == Some("null"));

        // Flux, asked to reconcile, leaves the stopped app alone; so it does after
        // refill itself is gone for a while.
        reconcile(&s).await?;
        controller.kill().await;
        reconcile(&s).await?;
        ensure!(
            s.replicas("web").await?.0 == 0,
            "a suspended Kustomization must not scale the app back up"
        );

        let _controller = s.controller().await?;
        let _agent = s.node_agent();
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        ensure!(fixture::read(&dir, "f")? == b"good");
        ensure!(
            status.git_ops[0].state == GitOpsState::Resumed
                && status.git_ops[0].paused_at.is_some(),
            "{:#?}",
            status.git_ops
        );

        // Put back as it was (suspend unset), its marks gone, and asked to reconcile:
        // Flux handles that request and is Ready, with the app as the Bucket has it.
        let back = put_back(&s).await?;
        let asked = annotation(&back, FLUX_REQUESTED_AT)
            .expect("refill asks Flux to reconcile")
            .to_string();
        flux::wait_reconciled(
            &s.client,
            Kind::Kustomization,
            &s.ns,
            APP,
            &asked,
            s.timeout,
        )
        .await?;
        ensure!(s.replicas("web").await? == (2, None));
        s.ready_pods("web", 2).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn with_gitops_ignored_flux_scales_the_app_back_and_the_volume_fails_unwritten() -> Result<()>
{
    run_test("gitops-ignore", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("web", "node-a", &[("f", b"live")]).await?;
        flux_app(&s, &[("web", 1)]).await?;
        s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"old")])])
            .await?;
        let _controller = s.controller().await?;
        // Extra files kept: the volume is untouched until the node agent writes.
        let mut spec = s.spec("b1", &["web"]);
        spec.extra_files = refill::api::ExtraFiles::Keep;
        spec.git_ops = Some(GitOpsSpec {
            policy: GitOpsPolicy::Ignore,
            ..Default::default()
        });
        s.restore("r1", spec).await?;
        s.wait_volume("r1", VolumePhase::Restoring).await?;
        ensure!(
            kustomization(&s).await?.data["spec"]
                .get("suspend")
                .is_none()
        );

        // What Flux does every interval, now: the app goes back to its one replica.
        reconcile(&s).await?;
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Failed, "{status:#?}");
        let message = status.volumes[0].message.clone().unwrap_or_default();
        ensure!(message.contains("kustomize-controller"), "{message}");
        ensure!(
            status.git_ops[0].state == GitOpsState::NotPaused,
            "{:#?}",
            status.git_ops
        );
        ensure!(
            fixture::read(&dir, "f")? == b"live",
            "nothing may be written under the app Flux started"
        );
        s.no_stand_ins().await?;
        s.ready_pods("web", 1).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn two_restores_sharing_a_kustomization_never_unpause_it_under_each_other() -> Result<()> {
    run_test("gitops-shared", |env| async move {
        let s = scene(env).await?;
        s.volume("web", "node-a", &[("f", b"x")]).await?;
        s.volume("db", "node-b", &[("f", b"x")]).await?;
        flux_app(&s, &[("web", 1), ("db", 1)]).await?;
        s.backup(
            "b1",
            &[
                s.backed_up("web", "web-0", &[("f", b"web")]),
                s.backed_up("db", "db-0", &[("f", b"db")]),
            ],
        )
        .await?;
        let _controller = s.controller().await?;
        s.restore("r-web", s.spec("b1", &["web"])).await?;
        s.restore("r-db", s.spec("b1", &["db"])).await?;
        s.wait_gitops_saying("r-web", GitOpsState::Paused, "")
            .await?;
        s.wait_gitops_saying("r-db", GitOpsState::Paused, "")
            .await?;
        let holders = |k: &DynamicObject| {
            let mut h: Vec<String> = annotation(k, PAUSED_BY)
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            h.sort();
            h
        };
        let (web_uid, db_uid) = (s.restore_uid("r-web").await?, s.restore_uid("r-db").await?);
        let mut both = vec![web_uid.clone(), db_uid.clone()];
        both.sort();
        ensure!(holders(&kustomization(&s).await?) == both);

        // Only node-a has a node agent: r-web ends, r-db waits on node-b.
        let mut only_a = s.node_agent_config();
        only_a.nodes = Some(vec!["node-a".into()]);
        let _agent_a = s.node_agent_with(only_a);
        let dr = s.finished("r-web").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        let shared = kustomization(&s).await?;
        ensure!(
            shared.data["spec"]["suspend"] == true && holders(&shared) == [db_uid.clone()],
            "r-web let go, r-db still holds it: {:?} {:?}",
            shared.data["spec"],
            shared.metadata.annotations
        );
        reconcile(&s).await?;
        ensure!(s.replicas("db").await?.0 == 0, "db is still stopped");

        let mut only_b = s.node_agent_config();
        only_b.nodes = Some(vec!["node-b".into()]);
        let _agent_b = s.node_agent_with(only_b);
        let dr = s.finished("r-db").await?;
        ensure!(phase(&dr) == Phase::Completed, "{:#?}", dr.status);
        put_back(&s).await?;
        flux::wait_ready(&s.client, Kind::Kustomization, &s.ns, APP, TIMEOUT).await?;
        s.ready_pods("web", 1).await?;
        s.ready_pods("db", 1).await?;
        Ok(())
    })
    .await
}

fn application_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ))
}

/// Argo CD's Applications of the test's namespace, as its CRD serves them.
fn applications(s: &Scene) -> Api<DynamicObject> {
    Api::namespaced_with(s.client.clone(), &s.ns, &application_resource())
}

/// The resourceVersions of everything a restore could touch, the Application's too.
async fn versions_with_application(s: &Scene) -> Result<BTreeMap<String, String>> {
    let mut versions = s.versions().await?;
    fixture::add_versions(&s.client, &s.ns, &application_resource(), &mut versions).await?;
    Ok(versions)
}

#[tokio::test]
async fn an_argo_cd_application_is_paused_by_annotation_and_refuse_touches_nothing() -> Result<()> {
    run_test("gitops-argo", |env| async move {
        let s = scene(env).await?;
        s.volume("web", "node-a", &[("f", b"x")]).await?;
        s.deployment("web", 1, &["web"]).await?;
        // The Application lives in the app's namespace (Applications in any
        // namespace), which its tracking id says as `<namespace>_<name>`.
        let app = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": APP, "namespace": s.ns},
            "spec": {
                "project": "default",
                "destination": {"server": "https://kubernetes.default.svc", "namespace": s.ns},
                "source": {"repoURL": "https://git.invalid/shop.git", "path": ".", "targetRevision": "HEAD"},
            },
            // What Argo CD records of what it manages (its CRD has no status
            // subresource): refill pauses an Application only for what it lists.
            "status": {"resources": [
                {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": s.ns, "name": "web"},
            ]},
        });
        applications(&s)
            .create(&Default::default(), &serde_json::from_value(app)?)
            .await?;
        let tracking = format!("{}_{APP}:apps/Deployment:{}/web", s.ns, s.ns);
        Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"argocd.argoproj.io/tracking-id": tracking}}})),
            )
            .await?;
        fixture::wait_settled(&s.client, &s.ns, "web", 1, s.timeout).await?;
        s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"good")])])
            .await?;
        let _controller = s.controller().await?;

        // Refuse: the restore fails naming the field, and nothing is touched.
        let before = versions_with_application(&s).await?;
        let mut refuse = s.spec("b1", &["web"]);
        refuse.git_ops = Some(GitOpsSpec {
            policy: GitOpsPolicy::Refuse,
            ..Default::default()
        });
        s.restore("refused", refuse).await?;
        let dr = s.finished("refused").await?;
        let errors = dr.status.clone().unwrap().errors;
        ensure!(phase(&dr) == Phase::Failed, "{:#?}", dr.status);
        ensure!(
            errors.iter().any(|e| e.starts_with("spec.gitOps.policy:")
                && e.contains(&format!("Argo CD Application {}/{APP}", s.ns))),
            "{errors:?}"
        );
        let after = versions_with_application(&s).await?;
        ensure!(before == after, "a refused restore changed {before:?} into {after:?}");
        ensure!(annotation(&applications(&s).get(APP).await?, ARGO_CD_SKIP_RECONCILE).is_none());

        // The CLI's dry run names the Application it would pause, and changes nothing.
        let pvc = format!("{}/web", s.ns);
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_refill"));
        let args = ["restore", "create", "r1", "--from-backup", "b1", "--pvc", &pvc, "--dry-run"];
        let dry = fixture::run_refill(bin, &s.env.cluster.kubeconfig, &s.ns, args)
            .await?
            .ok()?;
        ensure!(
            dry.stdout.contains("GitOps objects managing them (policy Pause):")
                && dry.stdout.contains(&format!("Argo CD Application   {}/{APP}   to pause", s.ns)),
            "{}",
            dry.stdout
        );
        ensure!(versions_with_application(&s).await? == after, "the dry run changed something");

        let _agent = s.node_agent();
        s.restore("r1", s.spec("b1", &["web"])).await?;
        s.wait_gitops_saying("r1", GitOpsState::Paused, "").await?;
        let paused = applications(&s).get(APP).await?;
        ensure!(
            annotation(&paused, ARGO_CD_SKIP_RECONCILE) == Some("true"),
            "{:?}",
            paused.metadata.annotations
        );
        let dr = s.finished("r1").await?;
        let status = dr.status.clone().unwrap();
        ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
        ensure!(status.consumers[0].state == ConsumerState::Resumed);
        let back = applications(&s).get(APP).await?;
        ensure!(
            annotation(&back, ARGO_CD_SKIP_RECONCILE).is_none()
                && annotation(&back, PAUSED_BY).is_none()
                && annotation(&back, ARGO_CD_REFRESH) == Some("normal"),
            "{:?}",
            back.metadata.annotations
        );
        ensure!(back.name_any() == APP);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_forged_flux_label_pauses_nothing_and_tells_nothing_of_the_object() -> Result<()> {
    run_test("gitops-forged", |env| async move {
        let s = scene(env).await?;
        // A platform team's Kustomization in a namespace of its own, applying
        // something else entirely.
        let platform = TestNamespace::create(&s.client, "gitops-platform").await?;
        let checked = async {
            let name = "platform-apps";
            let cluster_dir = &s.env.cluster.dir;
            let before =
                flux::platform_app(&s.client, cluster_dir, platform.name(), name, TIMEOUT).await?;
            let kustomizations = flux::flux_api(&s.client, Kind::Kustomization, platform.name());

            // A team's own Deployment, carrying the platform Kustomization's marks.
            let dir = s.volume("web", "node-a", &[("f", b"broken")]).await?;
            s.deployment("web", 1, &["web"]).await?;
            let forged = flux::kustomization_marks(platform.name(), name);
            Api::<Deployment>::namespaced(s.client.clone(), &s.ns)
                .patch("web", &PatchParams::default(), &Patch::Merge(forged))
                .await?;
            fixture::wait_settled(&s.client, &s.ns, "web", 1, s.timeout).await?;
            s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"good")])])
                .await?;

            let _controller = s.controller().await?;
            let _agent = s.node_agent();
            s.restore("r1", s.spec("b1", &["web"])).await?;
            let dr = s.finished("r1").await?;
            let status = dr.status.clone().unwrap();
            ensure!(phase(&dr) == Phase::Completed, "{status:#?}");
            ensure!(fixture::read(&dir, "f")? == b"good");
            ensure!(
                status.consumers[0].state == ConsumerState::Resumed,
                "{status:#?}"
            );

            // Not paused, not even written to.
            let after = kustomizations.get(name).await?;
            ensure!(
                after.resource_version() == before.resource_version()
                    && after.data["spec"].get("suspend").is_none()
                    && annotation(&after, PAUSED_BY).is_none(),
                "the forged label reached {:?} {:?}",
                after.data["spec"],
                after.metadata.annotations
            );
            // The restore says the marks were not backed, and nothing of the object:
            // neither its name nor its namespace, in its status or its Events.
            ensure!(status.git_ops.is_empty(), "{:#?}", status.git_ops);
            let told = format!("Deployment {}/web carries Flux Kustomization marks", s.ns);
            ensure!(
                status.warnings.iter().any(|w| w.starts_with(&told)),
                "{:?}",
                status.warnings
            );
            let events: Api<k8s_openapi::api::core::v1::Event> =
                Api::namespaced(s.client.clone(), &s.ns);
            let events = serde_json::to_string(&events.list(&Default::default()).await?.items)?;
            ensure!(
                events.contains(&told),
                "no Event says the marks were not backed"
            );
            let status_text = serde_json::to_string(&status)?;
            for secret in [platform.name(), name] {
                ensure!(
                    !status_text.contains(secret) && !events.contains(secret),
                    "the restore tells of {secret}: {status_text}"
                );
            }
            Ok(())
        }
        .await;
        platform.cleanup().await?;
        checked
    })
    .await
}

/// The README's "Standby cluster" section: its YAML block and the `kubectl` lines of
/// the shell block right after it.
fn readme_standby() -> Result<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))?;
    let section = readme
        .split("### Standby cluster")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .ok_or_else(|| anyhow::anyhow!("README.md has no \"Standby cluster\" section"))?;
    let block = |fence: &str| -> Option<String> {
        let start = section.find(fence)? + fence.len();
        let end = section[start..].find("```")?;
        Some(section[start..start + end].to_string())
    };
    let yaml = block("```yaml\n").ok_or_else(|| anyhow::anyhow!("no yaml block"))?;
    let shell = block("```sh\n").ok_or_else(|| anyhow::anyhow!("no sh block"))?;
    let commands = shell
        .lines()
        .filter(|l| l.starts_with("kubectl "))
        .map(String::from)
        .collect();
    Ok((yaml, commands))
}

#[tokio::test]
async fn the_readme_standby_section_refreshes_a_flux_app_from_a_new_backup() -> Result<()> {
    run_test("gitops-standby", |env| async move {
        let s = scene(env).await?;
        // The shop of the README is the test's namespace, which is Velero's too.
        let dir = s
            .volume("web", "node-a", &[("f", b"standby's stale data")])
            .await?;
        flux_app(&s, &[("web", 1)]).await?;
        s.backup(
            "nightly-1",
            &[s.backed_up("web", "web-0", &[("f", b"primary's data")])],
        )
        .await?;
        s.made_by_schedule("nightly-1", "nightly", "2026-12-01T02:00:00Z")
            .await?;
        let _controller = s.controller().await?;
        let _agent = s.node_agent();

        let (yaml, commands) = readme_standby()?;
        let ours = |text: &str| {
            text.replace("-n velero", &format!("-n {}", s.ns))
                .replace("namespace: velero", &format!("namespace: {}", s.ns))
                .replace("[shop]", &format!("[{}]", s.ns))
        };
        let file = s.scratch.join("standby.yaml");
        std::fs::write(&file, ours(&yaml))?;
        ensure!(commands.len() == 2, "{commands:?}");
        for command in &commands {
            let command = ours(command).replace("standby.yaml", &file.to_string_lossy());
            let args: Vec<&str> = command.split_whitespace().skip(1).collect();
            let out = s.env.cluster.kubectl_command().args(&args).output().await?;
            ensure!(
                out.status.success(),
                "{command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }

        // `kubectl wait` returned: the standby holds the primary's data, its app runs
        // again, and Flux was paused for the refresh and reconciles again after it.
        ensure!(fixture::read(&dir, "f")? == b"primary's data");
        let restores = Api::<DataRestore>::namespaced(s.client.clone(), &s.ns)
            .list(&Default::default())
            .await?
            .items;
        ensure!(restores.len() == 1, "{} restores", restores.len());
        let whole = fixture::whole(&s.client, restores[0].clone()).await?;
        let status = whole.status.unwrap_or_default();
        ensure!(
            status.git_ops.len() == 1
                && status.git_ops[0].state == GitOpsState::Resumed
                && status.git_ops[0].paused_at.is_some(),
            "{:#?}",
            status.git_ops
        );
        put_back(&s).await?;
        flux::wait_ready(&s.client, Kind::Kustomization, &s.ns, APP, TIMEOUT).await?;
        ensure!(s.replicas("web").await? == (1, None));
        s.ready_pods("web", 1).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_cancel_or_a_delete_while_paused_puts_the_kustomization_back() -> Result<()> {
    run_test("gitops-cancel", |env| async move {
        let s = scene(env).await?;
        let dir = s.volume("web", "node-a", &[("f", b"live")]).await?;
        flux_app(&s, &[("web", 1)]).await?;
        s.backup("b1", &[s.backed_up("web", "web-0", &[("f", b"old")])])
            .await?;
        // No node agent: each restore is held in Restoring, its Kustomization paused.
        let _controller = s.controller().await?;
        let restores: Api<DataRestore> = Api::namespaced(s.client.clone(), &s.ns);
        for (name, how) in [("canceled", "cancel"), ("deleted", "delete")] {
            // Extra files kept: the volume is untouched until the node agent writes.
            let keep = refill::api::DataRestoreSpec {
                extra_files: refill::api::ExtraFiles::Keep,
                ..s.spec("b1", &["web"])
            };
            s.restore(name, keep).await?;
            s.wait_gitops_saying(name, GitOpsState::Paused, "").await?;
            s.wait_volume(name, VolumePhase::Restoring).await?;
            ensure!(kustomization(&s).await?.data["spec"]["suspend"] == true);
            if how == "cancel" {
                let cancel = json!({"spec": {"cancel": true}});
                restores
                    .patch(name, &PatchParams::default(), &Patch::Merge(cancel))
                    .await?;
                let dr = s.finished(name).await?;
                ensure!(phase(&dr) == Phase::Canceled, "{:#?}", dr.status);
                let status = dr.status.unwrap();
                ensure!(
                    status.git_ops[0].state == GitOpsState::Resumed,
                    "{:#?}",
                    status.git_ops
                );
            } else {
                restores.delete(name, &Default::default()).await?;
                wait_for(format!("{name} gone"), s.timeout, || async {
                    Ok(restores.get_opt(name).await?.is_none().then_some(()))
                })
                .await?;
            }
            put_back(&s)
                .await
                .map_err(|e| e.context(format!("after {how}")))?;
            ensure!(s.replicas("web").await? == (1, None), "after {how}");
            s.ready_pods("web", 1).await?;
        }
        ensure!(fixture::read(&dir, "f")? == b"live", "nothing was written");
        Ok(())
    })
    .await
}
