//! The API client, built from the credentials the login handlers found
//! (Kopf's `ConnectionInfo`): a server, its CA, and a token, a client
//! certificate, or a username and password.

use crate::client::transport::Transport;
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
    /// An HTTP(S) or SOCKS5 proxy for every request (a kubeconfig's `proxy-url`).
    pub proxy_url: Option<String>,
    /// Without a proxy URL: take the proxy from `HTTPS_PROXY`/`HTTP_PROXY`, minus `NO_PROXY`.
    pub trust_env: bool,
    /// When the credentials expire (seconds since the epoch): renewed at the first request after.
    pub expiration: Option<f64>,
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
    #[error("the proxy URL {url:?} is not valid: {source}")]
    Proxy {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
}

fn b64(data: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(data.as_bytes())
}

/// Build a client, via an in-memory kubeconfig (so kube parses the credentials as kubectl does).
/// Requests' own deadlines are the caller's (`Credentials`): watches and one-shot requests
/// share the client's connections but not their timeouts.
pub async fn client(
    info: &ConnectionInfo,
    connect_timeout: Option<f64>,
) -> Result<Transport, ConnectionError> {
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
    // kube reads `HTTPS_PROXY` by itself; Kopf only when asked to (`trust_env`).
    config.proxy_url = proxy(info)?;
    // Told apart from other clients in the apiserver's audit log (as Kopf is by `kopf/x.y.z`).
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("kopf-rs/", env!("CARGO_PKG_VERSION"))),
    ));
    // Watches have their own inactivity timeout (no read timeout); the connect timeout is
    // none, as in Kopf, unless set (the request's whole timeout still applies).
    let connect_timeout = connect_timeout.map(Duration::from_secs_f64);
    Transport::new(&config, connect_timeout)
        .map_err(|source| ConnectionError::Client { server, source })
}

/// The proxy for the server, as Kopf's aiohttp session finds it: the connection's own URL,
/// else (with `trust_env`) the environment's for the server's scheme unless `NO_PROXY` names it.
fn proxy(info: &ConnectionInfo) -> Result<Option<http::Uri>, ConnectionError> {
    let env = |name: &str| {
        std::env::var(name)
            .or_else(|_| std::env::var(name.to_uppercase()))
            .ok()
            .filter(|value| !value.is_empty())
    };
    let url = match info.proxy_url.as_deref().filter(|url| !url.is_empty()) {
        Some(url) => Some(url.to_owned()),
        None if info.trust_env => {
            let server: http::Uri = info.server.parse().unwrap_or_default();
            let scheme = if server.scheme_str() == Some("http") {
                "http_proxy"
            } else {
                "https_proxy"
            };
            let host = server.host().unwrap_or_default();
            let port = server.port_u16();
            let bypassed = env("no_proxy").is_some_and(|list| bypasses(&list, host, port));
            env(scheme).filter(|_| !bypassed)
        }
        None => None,
    };
    url.map(|url| {
        url.parse().map_err(|source| ConnectionError::Proxy {
            url: url.clone(),
            source,
        })
    })
    .transpose()
}

/// Does `NO_PROXY` exempt the host? `*` for all; else names (`example.com` or `.example.com`
/// for it and its subdomains), optionally with a port.
fn bypasses(list: &str, host: &str, port: Option<u16>) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            let (name, entry_port) = match entry.rsplit_once(':') {
                Some((name, p)) if !name.contains(':') || name.ends_with(']') => {
                    (name, p.parse::<u16>().ok())
                }
                _ => (entry, None),
            };
            let name = name.trim_start_matches('[').trim_end_matches(']');
            let name = name.trim_start_matches('.').to_ascii_lowercase();
            let port_ok = entry_port.is_none() || entry_port == port;
            port_ok && (host == name || host.ends_with(&format!(".{name}")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_names_hosts_domains_and_ports() {
        assert!(bypasses("*", "anything", None));
        assert!(bypasses("localhost, 127.0.0.1", "127.0.0.1", Some(6443)));
        assert!(bypasses(".example.com", "api.example.com", None));
        assert!(bypasses("example.com", "example.com", None));
        assert!(bypasses("example.com", "api.example.com", Some(443)));
        assert!(!bypasses("example.com", "notexample.com", None));
        assert!(bypasses("api.local:6443", "api.local", Some(6443)));
        assert!(!bypasses("api.local:6443", "api.local", Some(443)));
        assert!(!bypasses("", "api.local", None));
    }

    #[test]
    fn the_proxy_from_the_connection_or_only_when_trusting_the_environment() {
        let mut info = ConnectionInfo {
            server: "https://10.0.0.1:6443".into(),
            ..Default::default()
        };
        assert_eq!(proxy(&info).unwrap(), None);
        info.proxy_url = Some("http://proxy.local:3128".into());
        assert_eq!(
            proxy(&info).unwrap().unwrap().to_string(),
            "http://proxy.local:3128/"
        );
        info.proxy_url = Some("http://bad url".into());
        assert!(proxy(&info).is_err());
    }
}
