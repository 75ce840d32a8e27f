//! One connection's making: a `Transport` (TLS, authorization, proxy) from what a
//! login handler returned (Kopf's `ConnectionInfo`: a server, its CA, and a token, a client
//! certificate, or a username and password). Renewing it is `credentials`' part.

use crate::client::authorization::{Authorization, AuthorizationError};
use crate::client::tls::{self, TlsError};
use crate::client::transport::Transport;
use std::time::Duration;

pub use crate::client::connection_info::ConnectionInfo;

/// Why a client cannot be made from a login's info.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The server's address is not a URL.
    #[error("the server's URL {server:?} is not valid: {source}")]
    Server {
        /// The server, as the login gave it.
        server: String,
        /// The parser's error.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The TLS settings cannot be used.
    #[error("the credentials cannot be used for {server}: {source}")]
    Tls {
        /// The server, as the login gave it.
        server: String,
        /// What is wrong with them.
        #[source]
        source: TlsError,
    },
    /// The credentials cannot authorize requests.
    #[error("the credentials cannot be used for {server}: {source}")]
    Authorization {
        /// The server, as the login gave it.
        server: String,
        /// What is wrong with them.
        #[source]
        source: AuthorizationError,
    },
    /// kube's client cannot be built.
    #[error("cannot build an API client for {server}: {source}")]
    Client {
        /// The server, as the login gave it.
        server: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// A token of another scheme than `Bearer`.
    #[error("only the bearer scheme is supported for tokens, not {0:?}")]
    Scheme(String),
    /// The proxy's address (`HTTPS_PROXY` & co.) is not a URL.
    #[error("the proxy URL {url:?} is not valid: {source}")]
    Proxy {
        /// The proxy's address as given.
        url: String,
        /// The parser's error.
        #[source]
        source: http::uri::InvalidUri,
    },
}

/// Build a client: TLS, authorization and proxy as these credentials say (made here, not
/// by kube's `Config`: see `client::tls`). Requests' own deadlines are the caller's
/// (`Credentials`): watches and one-shot requests share the client's connections but not
/// their timeouts.
pub fn client(
    info: &ConnectionInfo,
    connect_timeout: Option<f64>,
) -> Result<Transport, ConnectionError> {
    if let Some(scheme) = &info.scheme {
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(ConnectionError::Scheme(scheme.clone()));
        }
    }
    let server = info.server.clone();
    let url: http::Uri = server.parse().map_err(|source| ConnectionError::Server {
        server: server.clone(),
        source,
    })?;
    let mut config = kube::Config::new(url);
    if let Some(namespace) = &info.default_namespace {
        config.default_namespace = namespace.clone();
    }
    let tls = tls::client_config(info).map_err(|source| ConnectionError::Tls {
        server: server.clone(),
        source,
    })?;
    let authorization =
        Authorization::of(info).map_err(|source| ConnectionError::Authorization {
            server: server.clone(),
            source,
        })?;
    // Kopf reads `HTTPS_PROXY` & co only when asked to (`trust_env`).
    config.proxy_url = proxy(info)?;
    // Told apart from other clients in the apiserver's audit log (as Kopf is by `kopf/x.y.z`).
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("kopf-rs/", env!("CARGO_PKG_VERSION"))),
    ));
    // Watches have their own inactivity timeout (no read timeout); the connect timeout is
    // none, as in Kopf, unless set (the request's whole timeout still applies).
    let connect_timeout = connect_timeout.map(Duration::from_secs_f64);
    Transport::new(&config, tls, authorization, connect_timeout)
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
