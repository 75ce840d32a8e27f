//! The login handlers' credentials as the core gets them (Kopf's `ConnectionInfo`): a
//! server, its CA, and a token, a client certificate, or a username and password.

use serde::Deserialize;

/// How to reach the API and who we are: `kopf.ConnectionInfo`, as the login handlers return it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ConnectionInfo {
    /// The API server's URL.
    pub server: String,
    /// A file with the CA certificates that the server's certificate is verified by.
    pub ca_path: Option<String>,
    /// PEM bytes, as a string.
    pub ca_data: Option<String>,
    /// Whether the server's certificate is not verified at all.
    pub insecure: Option<bool>,
    /// Basic authentication's user.
    pub username: Option<String>,
    /// Basic authentication's password.
    pub password: Option<String>,
    /// The token's scheme (`Bearer` if none).
    pub scheme: Option<String>,
    /// The token.
    pub token: Option<String>,
    /// A file to re-read the token from (in-cluster service accounts rotate it).
    pub token_path: Option<String>,
    /// A file with the client certificate.
    pub certificate_path: Option<String>,
    /// The client certificate itself (PEM, or base64 of PEM).
    pub certificate_data: Option<String>,
    /// A file with the client certificate's key.
    pub private_key_path: Option<String>,
    /// The client certificate's key itself (PEM, or base64 of PEM).
    pub private_key_data: Option<String>,
    /// The namespace that the login's context names.
    pub default_namespace: Option<String>,
    /// An HTTP(S) or SOCKS5 proxy for every request (a kubeconfig's `proxy-url`).
    pub proxy_url: Option<String>,
    /// Without a proxy URL: take the proxy from `HTTPS_PROXY`/`HTTP_PROXY`, minus `NO_PROXY`.
    pub trust_env: bool,
    /// When the credentials expire (seconds since the epoch): renewed at the first request after.
    pub expiration: Option<f64>,
}
