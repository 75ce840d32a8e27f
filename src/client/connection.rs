//! The API client, built from the credentials the login handlers found
//! (Kopf's `ConnectionInfo`): a server, its CA, and a token, a client
//! certificate, or a username and password.

use base64::Engine as _;
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ConnectionInfo {
    pub server: String,
    pub ca_path: Option<String>,
    /// PEM bytes, as a string.
    pub ca_data: Option<String>,
    pub insecure: Option<bool>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub scheme: Option<String>,
    pub token: Option<String>,
    /// A file to re-read the token from (in-cluster service accounts rotate it).
    pub token_path: Option<String>,
    pub certificate_path: Option<String>,
    pub certificate_data: Option<String>,
    pub private_key_path: Option<String>,
    pub private_key_data: Option<String>,
    pub default_namespace: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("the credentials cannot be used for {server}: {source}")]
    Config {
        server: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot build an API client for {server}: {source}")]
    Client {
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error("only the bearer scheme is supported for tokens, not {0:?}")]
    Scheme(String),
}

fn b64(data: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(data.as_bytes())
}

/// Build a client, via an in-memory kubeconfig (so kube parses the credentials as kubectl does).
pub async fn client(
    info: &ConnectionInfo,
    request_timeout: Option<f64>,
    connect_timeout: Option<f64>,
) -> Result<kube::Client, ConnectionError> {
    if let Some(scheme) = &info.scheme {
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(ConnectionError::Scheme(scheme.clone()));
        }
    }
    let cluster = Cluster {
        server: Some(info.server.clone()),
        insecure_skip_tls_verify: info.insecure,
        certificate_authority: info.ca_path.clone(),
        certificate_authority_data: info.ca_data.as_deref().map(b64),
        ..Default::default()
    };
    let auth = AuthInfo {
        username: info.username.clone(),
        password: info.password.clone().map(Into::into),
        token: info.token.clone().map(Into::into),
        token_file: info.token_path.clone(),
        client_certificate: info.certificate_path.clone(),
        client_certificate_data: info.certificate_data.as_deref().map(b64),
        client_key: info.private_key_path.clone(),
        client_key_data: info.private_key_data.as_deref().map(|d| b64(d).into()),
        ..Default::default()
    };
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "kopf".into(),
            cluster: Some(cluster),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "kopf".into(),
            auth_info: Some(auth),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: "kopf".into(),
            context: Some(Context {
                cluster: "kopf".into(),
                user: Some("kopf".into()),
                namespace: info.default_namespace.clone(),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some("kopf".into()),
        ..Default::default()
    };
    let server = info.server.clone();
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| ConnectionError::Config {
                server: server.clone(),
                source,
            })?;
    // Watches have their own inactivity timeout: reads must not end them early.
    config.read_timeout = None;
    config.write_timeout = request_timeout.map(Duration::from_secs_f64);
    config.connect_timeout = Some(Duration::from_secs_f64(connect_timeout.unwrap_or(30.0)));
    // Told apart from other clients in the apiserver's audit log (as Kopf is by `kopf/x.y.z`).
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("kopf-rs/", env!("CARGO_PKG_VERSION"))),
    ));
    kube::Client::try_from(config).map_err(|source| ConnectionError::Client { server, source })
}
