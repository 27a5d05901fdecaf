//! The connection to the cluster: a kube client from --kubeconfig/--context (or the
//! usual inference), Velero's namespace, and the API's URL for error messages.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Api, Client, Config, Resource};

use super::args::GlobalArgs;
use super::errors::{CliError, Result, Target, kube_error, root_cause};

/// The user agent of the CLI's requests.
pub const USER_AGENT: &str = concat!("refill-cli/", env!("CARGO_PKG_VERSION"));

/// What every command that talks to the cluster needs.
#[derive(Clone)]
pub struct Ctx {
    pub client: Client,
    /// Velero's namespace.
    pub namespace: String,
    /// The API server's URL, for messages.
    pub server: String,
}

impl Ctx {
    pub async fn connect(global: &GlobalArgs) -> Result<Ctx> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &global.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                    CliError::new(format!(
                        "cannot read the kubeconfig {}: {}",
                        path.display(),
                        root_cause(&e)
                    ))
                })?;
                let where_ = path.display().to_string();
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| kubeconfig_error(&e, &where_))?
            }
            None if global.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| kubeconfig_error(&e, "your kubeconfig"))?,
            None => Config::infer().await.map_err(|e| {
                CliError::new(format!(
                    "no Kubernetes configuration found; set KUBECONFIG or pass --kubeconfig ({e})"
                ))
            })?,
        };
        config.connect_timeout = Some(Duration::from_secs(10));
        // Tells the CLI's requests apart in audit logs (kube-rs sends no user agent).
        if let (Ok(name), Ok(value)) = ("user-agent".parse(), USER_AGENT.parse()) {
            config.headers.push((name, value));
        }
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| {
            CliError::new(format!(
                "cannot set up a client for {server}: {}",
                root_cause(&e)
            ))
        })?;
        Ok(Ctx {
            client,
            namespace: global.namespace.clone(),
            server,
        })
    }

    /// An API for a kind in Velero's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Words a kube error about `target`.
    pub fn error(&self, err: &kube::Error, target: Target<'_>) -> CliError {
        kube_error(err, target, &self.server)
    }
}

/// A kubeconfig that cannot be used, with the unknown context named plainly.
fn kubeconfig_error(e: &KubeconfigError, which: &str) -> CliError {
    match e {
        KubeconfigError::LoadContext(context) => CliError::new(format!(
            "context \"{context}\" not found in {which}; list contexts with: kubectl config get-contexts"
        )),
        other => CliError::new(format!("cannot use {which}: {}", root_cause(other))),
    }
}
