//! The admission and conversion webhooks as Python drives them (`kopf.WebhookServer` and
//! custom servers): start the core's server, review a request that a custom server received,
//! tell the core where the apiserver reaches the webhooks. Reviews run in the core, handlers
//! in Python.

use crate::client::resources::Resource;
use crate::intents::handlers::WebhookHandler;
use crate::webhooks::routing::Webhooks;
use crate::webhooks::serving::{self, AdmissionRequest, Reviewer, Server, ServerSpec};
use crate::webhooks::tls::{self, ClientVerification, VerifyMode};
use crate::webhooks::{certificates, configs, converting};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The operator's webhooks, once its core runs.
pub type Slot = Arc<Mutex<Option<Arc<Webhooks>>>>;

pub fn webhooks(slot: &Slot) -> PyResult<Arc<Webhooks>> {
    slot.lock().expect("not poisoned").clone().ok_or_else(|| {
        PyRuntimeError::new_err("the operator is not running: its webhooks cannot be served")
    })
}

/// `kopf.WebhookServer`'s options as the Python side passes them (files already resolved).
#[derive(Debug, Deserialize)]
pub struct Options {
    addr: Option<String>,
    port: Option<u16>,
    #[serde(default)]
    path: String,
    #[serde(default)]
    insecure: bool,
    certfile: Option<PathBuf>,
    pkeyfile: Option<PathBuf>,
    password: Option<String>,
    /// For a generated certificate: its host names and addresses.
    #[serde(default)]
    hostnames: Vec<String>,
    /// `none`, `optional`, `required`; absent: as the CAs imply.
    verify_mode: Option<String>,
    /// The CAs of client certificates (PEM texts).
    #[serde(default)]
    verify_cas: Vec<String>,
}

/// A running webhook server of the core: where it listens, and the certificate it shows.
#[pyclass(module = "kopf._engine")]
pub struct WebhookServing {
    server: Mutex<Option<Server>>,
    #[pyo3(get)]
    port: u16,
    /// The certificate's PEM (generated or given); none for plain HTTP.
    cert_pem: Option<Vec<u8>>,
}

#[pymethods]
impl WebhookServing {
    #[getter]
    fn cert_pem<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.cert_pem.as_ref().map(|pem| PyBytes::new(py, pem))
    }

    /// Stop listening (idempotent).
    fn stop(&self) {
        if let Some(server) = self.server.lock().expect("not poisoned").take() {
            server.stop();
        }
    }
}

/// Start serving these options; the API is discovered first (else requests find nothing).
pub async fn start(webhooks: Arc<Webhooks>, options: Options) -> PyResult<WebhookServing> {
    webhooks.discovered().await;
    let (tls, cert_pem) = if options.insecure {
        (None, None)
    } else {
        let identity = match (&options.certfile, &options.pkeyfile) {
            (Some(cert), Some(key)) => {
                certificates::from_files(cert, key, options.password.as_deref())
            }
            _ => certificates::self_signed(&options.hostnames),
        }
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let cert_pem = identity.cert_pem.clone();
        let mode = match options.verify_mode.as_deref() {
            None => None,
            Some("none") => Some(VerifyMode::None),
            Some("optional") => Some(VerifyMode::Optional),
            Some("required") => Some(VerifyMode::Required),
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "unknown verify_mode: {other:?}"
                )))
            }
        };
        let clients = ClientVerification {
            mode,
            cas: options
                .verify_cas
                .into_iter()
                .map(String::into_bytes)
                .collect(),
        };
        let config = tls::server_config(identity, &clients)
            .map_err(|e| PyValueError::new_err(format!("The webhook server's TLS: {e}")))?;
        (Some(config), Some(cert_pem))
    };
    let path = options.path.trim_end_matches('/').to_owned();
    let port = options.port.unwrap_or(0);
    let reviewer: Arc<dyn Reviewer> = webhooks;
    // No address: every interface, IPv6 and IPv4 alike where the system has IPv6.
    let addresses = match options.addr {
        Some(addr) => vec![addr],
        None => vec!["::".to_owned(), "0.0.0.0".to_owned()],
    };
    let mut failure = None;
    for addr in addresses {
        let spec = ServerSpec {
            addr: addr.clone(),
            port,
            path: path.clone(),
            tls: tls.clone(),
            timeout: serving::REVIEW_TIMEOUT,
            in_flight_bytes: serving::MAX_REVIEW_BYTES_IN_FLIGHT,
        };
        match serving::start(spec, reviewer.clone()).await {
            Ok(server) => {
                return Ok(WebhookServing {
                    port: server.local.port(),
                    server: Mutex::new(Some(server)),
                    cert_pem,
                })
            }
            Err(error) => failure = Some(format!("cannot listen on {addr}:{port}: {error}")),
        }
    }
    Err(PyRuntimeError::new_err(failure.unwrap_or_default()))
}

/// A certificate (PEM) as Python's `getpeercert()` describes it, as JSON (`{}` if unreadable).
#[pyfunction]
pub fn describe_certificate(pem: &[u8]) -> String {
    use rustls::pki_types::pem::PemObject;
    let cert = rustls::pki_types::CertificateDer::from_pem_slice(pem).ok();
    tls::describe_peer(cert.as_ref()).to_string()
}

/// The webhooks as another manager (OLM) configures them (`kopf olm generate`): from a JSON
/// list of admission handlers as `[handler, [resources it serves]]` and the CRDs with
/// conversions, a JSON object of `admission` webhooks and `conversion` paths by CRD.
#[pyfunction]
pub fn webhooks_for_manager(
    handlers: &str,
    conversion_crds: Vec<String>,
    name_suffix: &str,
) -> PyResult<String> {
    let handlers: Vec<(WebhookHandler, Vec<Resource>)> = serde_json::from_str(handlers)
        .map_err(|e| PyValueError::new_err(format!("invalid webhook handlers: {e}")))?;
    let served: Vec<(&WebhookHandler, Vec<&Resource>)> = (handlers.iter())
        .map(|(handler, resources)| (handler, resources.iter().collect()))
        .collect();
    let paths: serde_json::Map<String, serde_json::Value> = (conversion_crds.into_iter())
        .map(|crd| {
            let path = converting::root_path(&crd);
            (crd, path.into())
        })
        .collect();
    let webhooks = serde_json::json!({
        "admission": configs::for_other_manager(&served, name_suffix),
        "conversion": paths,
    });
    Ok(webhooks.to_string())
}

/// A review that a custom server received: `(200, response)` or `(HTTP status, message)`.
pub async fn review(webhooks: Arc<Webhooks>, request: AdmissionRequest) -> (u16, String) {
    webhooks.discovered().await;
    match webhooks.review(request).await {
        Ok(response) => (200, response.to_string()),
        Err(error) => (error.http_status(), error.to_string()),
    }
}
