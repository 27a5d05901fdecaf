//! The connection to the cluster: a kube client from --kubeconfig/--context (or the
//! usual inference), Velero's namespace, and the API's URL for error messages.

use kube::config::KubeconfigError;
use kube::{Api, Client, Resource};

use crate::connect::{self, ConnectError};

use super::args::GlobalArgs;
use super::errors::{CliError, Kind, Result, Target, kube_error, root_cause};

/// The user agent of the CLI's requests.
pub const USER_AGENT: &str = concat!("refill-cli/", env!("CARGO_PKG_VERSION"));

/// A kind in Velero's namespace that the CLI reads by name or lists.
pub(super) trait Namespaced:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// What every command that talks to the cluster needs.
#[derive(Clone)]
pub(super) struct Ctx {
    pub client: Client,
    /// Velero's namespace.
    pub namespace: String,
    /// The API server's URL, for messages.
    pub server: String,
}

impl Ctx {
    pub(super) async fn connect(global: &GlobalArgs) -> Result<Ctx> {
        let config = connect::config(
            global.kubeconfig.as_deref(),
            global.context.clone(),
            USER_AGENT,
        )
        .await
        .map_err(|e| connect_error(&e))?;
        let server = config.cluster_url.to_string();
        let client = connect::client(config).map_err(|e| connect_error(&e))?;
        Ok(Ctx {
            client,
            namespace: global.namespace.clone(),
            server,
        })
    }

    /// An API for a kind in Velero's namespace.
    pub(super) fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// One object of a kind in Velero's namespace, or the error saying why not.
    pub(super) async fn get<K: Namespaced>(&self, kind: Kind, name: &str) -> Result<K> {
        self.api::<K>()
            .get(name)
            .await
            .map_err(|e| self.error(&e, Target::one(kind, name, &self.namespace)))
    }

    /// Words a kube error about `target`.
    pub(super) fn error(&self, err: &kube::Error, target: Target<'_>) -> CliError {
        kube_error(err, target, &self.server)
    }
}

/// Why no client could be made, in the CLI's words: an unknown context named plainly,
/// and only the root cause of the rest.
fn connect_error(e: &ConnectError) -> CliError {
    match e {
        ConnectError::Read { path, source } => CliError::new(format!(
            "cannot read the kubeconfig {}: {}",
            path.display(),
            root_cause(source)
        )),
        ConnectError::Kubeconfig {
            which,
            source: KubeconfigError::LoadContext(context),
        } => CliError::new(format!(
            "context \"{context}\" not found in {which}; list contexts with: kubectl config get-contexts"
        )),
        ConnectError::Kubeconfig { which, source } => {
            CliError::new(format!("cannot use {which}: {}", root_cause(source)))
        }
        ConnectError::NotFound(_) => CliError::new(e.to_string()),
        ConnectError::Client { server, source } => CliError::new(format!(
            "cannot set up a client for {server}: {}",
            root_cause(source)
        )),
    }
}
