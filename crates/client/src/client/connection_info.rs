//! The login handlers' credentials as the core gets them (Kopf's `ConnectionInfo`): a
//! server, its CA, and a token, a client certificate, or a username and password.

use serde::Deserialize;

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
