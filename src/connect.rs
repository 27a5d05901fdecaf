//! The one way to a cluster: a client configuration from a kubeconfig (or the usual
//! inference: in-cluster, then `KUBECONFIG`), carrying a user agent so that refill's
//! requests can be told apart in audit logs (kube-rs sends none by default).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

/// Why no client could be made, with what was tried.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig file given could not be read or parsed.
    #[error("cannot read the kubeconfig {}: {source}", path.display())]
    Read {
        /// The file given.
        path: PathBuf,
        /// What was wrong with it.
        source: KubeconfigError,
    },
    /// The kubeconfig was read but gives no usable configuration (an unknown context,
    /// credentials that cannot be loaded).
    #[error("cannot use {which}: {source}")]
    Kubeconfig {
        /// The kubeconfig file, or "your kubeconfig" when inferred.
        which: String,
        /// What was wrong with it.
        source: KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("no Kubernetes configuration found; set KUBECONFIG or pass --kubeconfig ({0})")]
    NotFound(#[from] InferConfigError),
    /// The configuration is there but no client could be built from it (TLS setup, say).
    #[error("cannot set up a client for {server}: {source}")]
    Client {
        /// The API server's URL.
        server: String,
        /// Why the client could not be built.
        source: kube::Error,
    },
}

/// The configuration from `kubeconfig` (or the usual inference) and `context`, with
/// `user_agent` on every request.
pub async fn config(
    kubeconfig: Option<&Path>,
    context: Option<String>,
    user_agent: &'static str,
) -> Result<Config, ConnectError> {
    let options = KubeConfigOptions {
        context,
        ..KubeConfigOptions::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ConnectError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    which: path.display().to_string(),
                    source,
                })?
        }
        None if options.context.is_some() => {
            Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    which: "your kubeconfig".into(),
                    source,
                })?
        }
        None => Config::infer().await?,
    };
    // A server that does not answer is reported in seconds, not after the OS gives up.
    config.connect_timeout = Some(Duration::from_secs(10));
    set_user_agent(&mut config, user_agent);
    Ok(config)
}

/// Sets the user agent of every request made with `config`.
pub fn set_user_agent(config: &mut Config, user_agent: &'static str) {
    config
        .headers
        .retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(user_agent),
    ));
}

/// A client for `config`.
pub fn client(config: Config) -> Result<Client, ConnectError> {
    let server = config.cluster_url.to_string();
    Client::try_from(config).map_err(|source| ConnectError::Client { server, source })
}

/// [`config`] and [`client`] in one.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<String>,
    user_agent: &'static str,
) -> Result<Client, ConnectError> {
    client(config(kubeconfig, context, user_agent).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_kubeconfig_is_named_and_the_user_agent_is_set_once() {
        let missing = Path::new("/nonexistent/kubeconfig");
        let err = config(Some(missing), None, "refill-test/1")
            .await
            .expect_err("no such file");
        assert!(
            err.to_string()
                .starts_with("cannot read the kubeconfig /nonexistent/kubeconfig"),
            "{err}"
        );
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        set_user_agent(&mut config, "one/1");
        set_user_agent(&mut config, "two/2");
        let agents: Vec<_> = config
            .headers
            .iter()
            .filter(|(n, _)| n == http::header::USER_AGENT)
            .map(|(_, v)| v.to_str().unwrap().to_string())
            .collect();
        assert_eq!(agents, ["two/2"]);
    }
}
