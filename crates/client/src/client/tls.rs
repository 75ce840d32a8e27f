//! The API client's TLS, as the login handlers' credentials say: the server's CA (or the
//! system's trusted roots without one), a client certificate, or no verification at all
//! (`insecure`, as Kopf's `ssl=False`).
//!
//! Made here, not by kube's `Config`: kube's TLS builder asks its exec-plugin and
//! auth-provider code for a certificate first, and that code brings YAML, JSONPath and
//! regular expressions (~1 MB of code, nearly all resident in every operator) that Kopf's
//! logins never need: they hand the core finished credentials.

use crate::client::connection_info::ConnectionInfo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_platform_verifier::BuilderVerifierExt;
use std::sync::Arc;

/// Why the TLS settings of a connection cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file cannot be read.
    #[error("cannot read the {what} from {path}: {source}")]
    Read {
        /// Which file: the CA certificate, the client certificate or its key.
        what: &'static str,
        /// The file's path.
        path: String,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key is not valid PEM.
    #[error("the {what} is not valid PEM: {source}")]
    Pem {
        /// Which one: the CA certificate, the client certificate or its key.
        what: &'static str,
        /// The parser's error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error("the {what} has no certificate in it")]
    NoCertificate {
        /// Which file: the CA certificate or the client certificate.
        what: &'static str,
    },
    /// The CA certificate is refused by rustls.
    #[error("the CA certificate is not accepted: {0}")]
    Root(#[source] rustls::Error),
    /// The client certificate and key are refused by rustls.
    #[error("the client certificate or its key is not accepted: {0}")]
    Identity(#[source] rustls::Error),
    /// The platform's trusted roots cannot be loaded.
    #[error("the system's trusted roots cannot be used: {0}")]
    Platform(#[source] rustls::Error),
}

/// The TLS configuration of these credentials.
pub fn client_config(info: &ConnectionInfo) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder();
    let builder = match pem(info.ca_data.as_deref(), info.ca_path.as_deref(), "CA")? {
        Some(text) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(&text, "CA")? {
                roots.add(certificate).map_err(TlsError::Root)?;
            }
            builder.with_root_certificates(roots)
        }
        // As client-go and aiohttp do without a CA: the system's trusted roots.
        None => builder
            .with_platform_verifier()
            .map_err(TlsError::Platform)?,
    };
    let certificate = pem(
        info.certificate_data.as_deref(),
        info.certificate_path.as_deref(),
        "client certificate",
    )?;
    let key = pem(
        info.private_key_data.as_deref(),
        info.private_key_path.as_deref(),
        "client key",
    )?;
    let mut config = match (certificate, key) {
        (Some(certificate), Some(key)) => {
            let chain = certificates(&certificate, "client certificate")?;
            let key =
                PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|source| TlsError::Pem {
                    what: "client key",
                    source,
                })?;
            (builder.with_client_auth_cert(chain, key)).map_err(TlsError::Identity)?
        }
        _ => builder.with_no_client_auth(),
    };
    if info.insecure == Some(true) {
        let provider = config.crypto_provider().clone();
        (config.dangerous()).set_certificate_verifier(Arc::new(Unverified(provider)));
    }
    Ok(config)
}

/// The PEM text given inline, else read from its file; none if neither is given.
fn pem(
    data: Option<&str>,
    path: Option<&str>,
    what: &'static str,
) -> Result<Option<String>, TlsError> {
    match (
        data.filter(|d| !d.is_empty()),
        path.filter(|p| !p.is_empty()),
    ) {
        (Some(data), _) => Ok(Some(data.to_owned())),
        (None, Some(path)) => {
            std::fs::read_to_string(path)
                .map(Some)
                .map_err(|source| TlsError::Read {
                    what,
                    path: path.to_owned(),
                    source,
                })
        }
        (None, None) => Ok(None),
    }
}

fn certificates(text: &str, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let found: Vec<_> = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Pem { what, source })?;
    if found.is_empty() {
        return Err(TlsError::NoCertificate { what });
    }
    Ok(found)
}

/// Any server certificate is accepted (`insecure`); its handshake signatures are still
/// checked, as they prove nothing about trust but guard the session itself.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_or_missing_pem_is_an_error_that_names_what() {
        let info = ConnectionInfo {
            ca_data: Some("not a certificate".into()),
            ..Default::default()
        };
        let error = client_config(&info).unwrap_err().to_string();
        assert!(error.contains("CA"), "{error}");
        let info = ConnectionInfo {
            ca_path: Some("/nonexistent/ca.crt".into()),
            ..Default::default()
        };
        let error = client_config(&info).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/ca.crt"), "{error}");
    }

    #[test]
    fn a_generated_ca_and_client_certificate_are_accepted() {
        let ca = rcgen::generate_simple_self_signed(vec!["ca.local".into()]).unwrap();
        let client = rcgen::generate_simple_self_signed(vec!["client".into()]).unwrap();
        let info = ConnectionInfo {
            ca_data: Some(ca.cert.pem()),
            certificate_data: Some(client.cert.pem()),
            private_key_data: Some(client.signing_key.serialize_pem()),
            insecure: Some(true),
            ..Default::default()
        };
        let config = client_config(&info).unwrap();
        assert!(config.client_auth_cert_resolver.has_certs());
    }
}
