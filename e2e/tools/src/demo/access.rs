//! refill's ServiceAccount as the demo shows it: a kubeconfig with a token for it, and
//! what RBAC lets it do, asked as that account.

use std::path::Path;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::scene::NS;
use super::ui::Ui;
use super::{Args, USER_AGENT};
use refill_e2e::controller_process::write_token_kubeconfig;
use refill_e2e::fixture::CONTROLLER_SA;

/// A kubeconfig for refill's ServiceAccount, with a token from the TokenRequest API,
/// readable by its owner only.
pub(super) async fn write_service_account_kubeconfig(args: &Args, path: &Path) -> Result<()> {
    let output = tokio::process::Command::new(&args.kubectl)
        .arg("--kubeconfig")
        .arg(&args.kubeconfig)
        .args(["create", "token", CONTROLLER_SA.1, "-n", CONTROLLER_SA.0])
        .arg("--duration=2h")
        .output()
        .await
        .context("running kubectl create token")?;
    if !output.status.success() {
        bail!(
            "kubectl create token failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let token = String::from_utf8(output.stdout)?.trim().to_string();
    std::fs::create_dir_all(&args.dir)?;
    write_token_kubeconfig(&args.kubeconfig, &token, path)
}

/// What RBAC lets refill's ServiceAccount do, asked as that account.
pub(super) async fn show_access(ui: &Ui, sa: &Client) -> Result<()> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(sa.clone());
    let mut answers = Vec::new();
    for (verb, group, resource, expected) in [
        ("patch", "apps", "deployments", true),
        ("delete", "apps", "deployments", false),
        ("get", "", "secrets", false),
    ] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(NS.into()),
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let allowed = reviews
            .create(&PostParams::default(), &review)
            .await
            .context("asking the apiserver what refill's ServiceAccount may do")?
            .status
            .is_some_and(|s| s.allowed);
        if allowed != expected {
            bail!(
                "refill's ServiceAccount {} {verb} {resource}, which manifests/rbac.yaml does not intend",
                if allowed { "may" } else { "may not" }
            );
        }
        let answer = if allowed { "yes" } else { "no" };
        answers.push(format!("{verb} {resource} {answer}"));
    }
    ui.ok(&format!("asked as refill: {}", answers.join(", ")));
    Ok(())
}

/// A client for `kubeconfig` with the demo's user agent, also when the kubeconfig is
/// refill's ServiceAccount's: those requests are the demo's, and the audit log must not
/// count them as the controller's.
pub(super) async fn client(kubeconfig: &Path) -> Result<Client> {
    Ok(refill::connect::connect(Some(kubeconfig), None, USER_AGENT).await?)
}
