//! HTTPS for the webhook server: rustls with the server's identity, client certificates
//! verified when asked (as `verify_mode` / `verify_ca*` ask Python's `ssl`), and a
//! verified client certificate described as Python's `SSLSocket.getpeercert()` does (the
//! `sslpeer` kwarg of admission handlers).

use super::certificates::Identity;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;

/// Whether clients present certificates: as `ssl.CERT_NONE`, `CERT_OPTIONAL`, `CERT_REQUIRED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// No client certificate is asked for.
    None,
    /// One is asked for; clients without one are served too.
    Optional,
    /// One is required.
    Required,
}

/// How client certificates are verified: the mode (none given: optional once CAs are
/// given, as Kopf does), and the CAs' PEM texts (from `verify_cafile`, the files of
/// `verify_capath`, and `verify_cadata`).
#[derive(Debug, Clone)]
pub struct ClientVerification {
    /// Whether clients present certificates (`None`: not asked).
    pub mode: Option<VerifyMode>,
    /// The CAs (PEM) that clients' certificates are verified by.
    pub cas: Vec<Vec<u8>>,
}

/// rustls' server configuration for this identity and these client settings.
pub fn server_config(
    identity: Identity,
    clients: &ClientVerification,
) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mode = match clients.mode {
        Some(mode) => mode,
        None if clients.cas.is_empty() => VerifyMode::None,
        None => VerifyMode::Optional,
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if mode == VerifyMode::None {
        builder.with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        for pem in &clients.cas {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("a CA for client certificates: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("a CA for client certificates: {e}"))?;
            }
        }
        if roots.is_empty() {
            return Err(
                "client certificates are to be verified, but no CA is given for them \
                 (verify_cafile=, verify_capath= or verify_cadata=)"
                    .into(),
            );
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = match mode {
            VerifyMode::Optional => verifier.allow_unauthenticated(),
            _ => verifier,
        };
        let verifier = verifier.build().map_err(|e| e.to_string())?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(identity.chain, identity.key)
        .map_err(|e| format!("the server's certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A verified client certificate as Python's `getpeercert()` describes it; `{}` if none.
pub fn describe_peer(cert: Option<&CertificateDer<'_>>) -> Value {
    let Some(cert) = cert else {
        return json!({});
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert) else {
        return json!({});
    };
    let names = |name: &x509_parser::x509::X509Name<'_>| -> Value {
        let rdns: Vec<Value> = name
            .iter_rdn()
            .map(|rdn| {
                let attributes: Vec<Value> = rdn
                    .iter()
                    .map(|attr| {
                        let key = long_name(attr.attr_type());
                        let value = attr.as_str().map(str::to_owned).unwrap_or_default();
                        json!([key, value])
                    })
                    .collect();
                Value::Array(attributes)
            })
            .collect();
        Value::Array(rdns)
    };
    let mut peer = json!({
        "subject": names(cert.subject()),
        "issuer": names(cert.issuer()),
        "version": cert.version().0 + 1,
        "serialNumber": serial_number(cert.raw_serial()),
        "notBefore": openssl_time(&cert.validity().not_before),
        "notAfter": openssl_time(&cert.validity().not_after),
    });
    if let Ok(Some(sans)) = cert.subject_alternative_name() {
        use x509_parser::extensions::GeneralName;
        let sans: Vec<Value> = (sans.value.general_names.iter())
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some(json!(["DNS", dns])),
                GeneralName::RFC822Name(email) => Some(json!(["email", email])),
                GeneralName::URI(uri) => Some(json!(["URI", uri])),
                GeneralName::IPAddress(bytes) => ip_text(bytes).map(|ip| json!(["IP Address", ip])),
                _ => None,
            })
            .collect();
        peer["subjectAltName"] = Value::Array(sans);
    }
    peer
}

/// OpenSSL's long names of the usual attributes, as Python's `ssl` shows them.
fn long_name(oid: &x509_parser::der_parser::oid::Oid<'_>) -> String {
    let text = oid.to_id_string();
    let known = match text.as_str() {
        "2.5.4.3" => "commonName",
        "2.5.4.6" => "countryName",
        "2.5.4.7" => "localityName",
        "2.5.4.8" => "stateOrProvinceName",
        "2.5.4.10" => "organizationName",
        "2.5.4.11" => "organizationalUnitName",
        "2.5.4.5" => "serialNumber",
        "1.2.840.113549.1.9.1" => "emailAddress",
        "0.9.2342.19200300.100.1.25" => "domainComponent",
        "0.9.2342.19200300.100.1.1" => "userId",
        _ => return text,
    };
    known.to_owned()
}

/// Upper-case hex without leading zero bytes, in whole bytes (OpenSSL's way).
fn serial_number(raw: &[u8]) -> String {
    let start = raw
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(raw.len().saturating_sub(1));
    raw[start..].iter().map(|b| format!("{b:02X}")).collect()
}

/// `Jan  5 09:03:07 2026 GMT`, as OpenSSL prints times.
fn openssl_time(time: &x509_parser::time::ASN1Time) -> String {
    let t = time.to_datetime();
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {:>2} {:02}:{:02}:{:02} {} GMT",
        MONTHS[usize::from(u8::from(t.month())) - 1],
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.year()
    )
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?).to_string()),
        // Python's ssl prints IPv6 SANs in full, upper-case, without compression.
        16 => Some(
            bytes
                .chunks(2)
                .map(|pair| format!("{:X}", u16::from_be_bytes([pair[0], pair[1]])))
                .collect::<Vec<_>>()
                .join(":"),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::certificates::self_signed;

    #[test]
    fn a_peer_as_python_describes_it() {
        let identity = self_signed(&["peer.test".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let peer = describe_peer(Some(&identity.chain[0]));
        assert_eq!(peer["subject"], json!([[["commonName", "peer.test"]]]));
        assert_eq!(peer["issuer"], peer["subject"]);
        assert_eq!(peer["version"], 3);
        assert_eq!(
            peer["subjectAltName"],
            json!([["DNS", "peer.test"], ["IP Address", "127.0.0.1"]])
        );
        assert_eq!(peer["notBefore"], "Jan  1 00:00:00 1975 GMT");
        assert!(peer["serialNumber"]
            .as_str()
            .unwrap()
            .chars()
            .all(|c| c.is_ascii_hexdigit()));
        assert_eq!(describe_peer(None), json!({}));
    }

    #[test]
    fn serial_numbers_and_addresses_as_openssl_prints_them() {
        assert_eq!(serial_number(&[0, 0x0a, 0xbc]), "0ABC");
        assert_eq!(serial_number(&[0]), "00");
        let v6 = "::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(ip_text(&v6).unwrap(), "0:0:0:0:0:0:0:1");
    }

    #[test]
    fn verification_needs_a_ca() {
        let identity = || self_signed(&["localhost".to_owned()]).unwrap();
        let none = ClientVerification {
            mode: None,
            cas: vec![],
        };
        assert!(server_config(identity(), &none).is_ok());
        let required = ClientVerification {
            mode: Some(VerifyMode::Required),
            cas: vec![],
        };
        let error = server_config(identity(), &required).unwrap_err();
        assert!(error.contains("no CA is given"), "{error}");
        let ca = identity().cert_pem;
        let optional = ClientVerification {
            mode: None,
            cas: vec![ca],
        };
        assert!(server_config(identity(), &optional).is_ok());
    }
}
