//! The webhook server's certificate: a self-signed one generated here when none is given
//! (it is its own CA: the `caBundle` of the webhook configurations), or the operator's
//! own PEM files, their private key possibly encrypted (PKCS#8 with a password).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::IpAddr;
use std::path::Path;

/// Why the webhook server has no certificate.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// A self-signed certificate cannot be generated.
    #[error("Cannot generate a self-signed certificate for {hostnames:?}: {error}")]
    Generating {
        /// The names it was for.
        hostnames: Vec<String>,
        /// rcgen's error.
        error: rcgen::Error,
    },
    /// The given certificate file cannot be used.
    #[error("Cannot read the certificate file {path}: {error}")]
    Certificate {
        /// The certificate file.
        path: String,
        /// Why it cannot be used.
        error: String,
    },
    /// The given private key file cannot be used.
    #[error("Cannot read the private key file {path}: {error}")]
    Key {
        /// The private key file.
        path: String,
        /// Why it cannot be used.
        error: String,
    },
}

/// A certificate chain and its key, as the server presents them.
pub struct Identity {
    /// The certificate and the CAs above it.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key.
    pub key: PrivateKeyDer<'static>,
    /// The certificate's PEM: the CA bundle for clients when none is given otherwise.
    pub cert_pem: Vec<u8>,
}

// Never shows the key, not even in debugging output.
impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// A self-signed certificate (a CA of itself) for these hostnames and addresses: IP addresses
/// become IP SANs (except the unspecified ones, `0.0.0.0` and `::`, which nobody can reach),
/// names become DNS SANs; the common name is the first name, else the first address.
pub fn self_signed(hostnames: &[String]) -> Result<Identity, CertificateError> {
    let failed = |error| CertificateError::Generating {
        hostnames: hostnames.to_vec(),
        error,
    };
    let mut params = for_hosts(hostnames).map_err(failed)?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok(Identity {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        cert_pem: cert.pem().into_bytes(),
    })
}

/// A certificate for these hostnames and addresses (as `self_signed` names them), signed by a
/// CA made for it: for clients that refuse a CA as a server's own certificate (rustls, so the
/// engine itself). The identity's `cert_pem` is the CA's: what clients trust.
pub fn with_authority(hostnames: &[String]) -> Result<Identity, CertificateError> {
    let failed = |error| CertificateError::Generating {
        hostnames: hostnames.to_vec(),
        error,
    };
    let mut authority = rcgen::CertificateParams::default();
    (authority.distinguished_name).push(rcgen::DnType::CommonName, "kopf-rs local authority");
    authority.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    authority.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let authority_key = rcgen::KeyPair::generate().map_err(failed)?;
    let authority_cert = authority.self_signed(&authority_key).map_err(failed)?;
    let issuer = rcgen::Issuer::new(authority, authority_key);
    let mut params = for_hosts(hostnames).map_err(failed)?;
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = params.signed_by(&key, &issuer).map_err(failed)?;
    Ok(Identity {
        chain: vec![cert.der().clone(), authority_cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        cert_pem: authority_cert.pem().into_bytes(),
    })
}

/// A server certificate's parameters: its names and addresses as SANs, its common name.
fn for_hosts(hostnames: &[String]) -> Result<rcgen::CertificateParams, rcgen::Error> {
    let mut names: Vec<&str> = vec![];
    let mut addresses: Vec<IpAddr> = vec![];
    for hostname in hostnames {
        match hostname.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() => {}
            Ok(ip) if !addresses.contains(&ip) => addresses.push(ip),
            Ok(_) => {}
            Err(_) if !names.contains(&hostname.as_str()) => names.push(hostname),
            Err(_) => {}
        }
    }
    let common_name = match (names.first(), addresses.first()) {
        (Some(name), _) => name.to_string(),
        (None, Some(ip)) => ip.to_string(),
        (None, None) => "localhost".to_owned(),
    };
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    for name in &names {
        let name = (*name).to_owned().try_into()?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    for ip in &addresses {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(*ip));
    }
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    Ok(params)
}

/// The operator's own certificate chain and key from PEM files; an encrypted PKCS#8 key is
/// decrypted with the password.
pub fn from_files(
    certfile: &Path,
    pkeyfile: &Path,
    password: Option<&str>,
) -> Result<Identity, CertificateError> {
    let cert_error = |error: String| CertificateError::Certificate {
        path: certfile.display().to_string(),
        error,
    };
    let key_error = |error: String| CertificateError::Key {
        path: pkeyfile.display().to_string(),
        error,
    };
    let cert_pem = std::fs::read(certfile).map_err(|e| cert_error(e.to_string()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(format!("not a PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(cert_error("no certificate in it".into()));
    }
    let key_pem = std::fs::read(pkeyfile).map_err(|e| key_error(e.to_string()))?;
    let key = match encrypted_key(&key_pem) {
        Some(encrypted) => {
            let Some(password) = password else {
                return Err(key_error(
                    "the key is encrypted, and no password is given".into(),
                ));
            };
            decrypt(&encrypted, password).map_err(key_error)?
        }
        None if is_legacy_encrypted(&key_pem) => {
            return Err(key_error(
                "a key encrypted the legacy OpenSSL way is not supported; convert it to \
                 PKCS#8: openssl pkcs8 -topk8 -v2 aes-256-cbc -in OLD -out NEW"
                    .into(),
            ))
        }
        None => PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| key_error(format!("no usable private key in it: {e}")))?,
    };
    Ok(Identity {
        chain,
        key,
        cert_pem,
    })
}

/// The DER of an `ENCRYPTED PRIVATE KEY` PEM block, if the file holds one.
fn encrypted_key(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    let (label, der) = pkcs8::der::pem::decode_vec(text.trim().as_bytes()).ok()?;
    (label == "ENCRYPTED PRIVATE KEY").then_some(der)
}

fn is_legacy_encrypted(pem: &[u8]) -> bool {
    String::from_utf8_lossy(pem).contains("Proc-Type: 4,ENCRYPTED")
}

fn decrypt(der: &[u8], password: &str) -> Result<PrivateKeyDer<'static>, String> {
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der)
        .map_err(|e| format!("not an encrypted PKCS#8 key: {e}"))?;
    let document = info
        .decrypt(password)
        .map_err(|e| format!("cannot decrypt the key (a wrong password?): {e}"))?;
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        document.as_bytes().to_vec(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_names_its_hosts() {
        let hosts = [
            "example.test",
            "127.0.0.1",
            "0.0.0.0",
            "example.test",
            "::1",
        ];
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let identity = self_signed(&hosts).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&identity.chain[0]).unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), "example.test");
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        use x509_parser::extensions::GeneralName;
        let sans: Vec<String> = (sans.value.general_names.iter())
            .map(|name| match name {
                GeneralName::DNSName(dns) => dns.to_string(),
                GeneralName::IPAddress([a, b, c, d]) => IpAddr::from([*a, *b, *c, *d]).to_string(),
                GeneralName::IPAddress(v6) => {
                    IpAddr::from(<[u8; 16]>::try_from(*v6).unwrap()).to_string()
                }
                other => panic!("unexpected: {other}"),
            })
            .collect();
        assert_eq!(sans, ["example.test", "127.0.0.1", "::1"]);
        assert!(cert.is_ca());
        assert!(String::from_utf8(identity.cert_pem)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----"));
    }

    #[test]
    fn an_address_alone_is_the_common_name() {
        let identity = self_signed(&["10.1.2.3".to_owned()]).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&identity.chain[0]).unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), "10.1.2.3");
    }

    #[test]
    fn files_are_read_and_bad_ones_are_named() {
        let dir = std::env::temp_dir().join(format!("kopf-certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let generated = self_signed(&["localhost".to_owned()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, &generated.cert_pem).unwrap();
        let PrivateKeyDer::Pkcs8(der) = &generated.key else {
            panic!("generated keys are PKCS#8")
        };
        let key_pem = pkcs8::der::pem::encode_string(
            "PRIVATE KEY",
            pkcs8::der::pem::LineEnding::LF,
            der.secret_pkcs8_der(),
        )
        .unwrap();
        std::fs::write(&key, key_pem).unwrap();
        let identity = from_files(&cert, &key, None).unwrap();
        assert_eq!(identity.chain, generated.chain);

        std::fs::write(&key, "garbage").unwrap();
        let error = from_files(&cert, &key, None).unwrap_err().to_string();
        assert!(
            error.starts_with("Cannot read the private key file "),
            "{error}"
        );
        let error = from_files(&dir.join("absent.pem"), &key, None).unwrap_err();
        assert!(error.to_string().contains("absent.pem"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
