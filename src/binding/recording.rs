//! `kopf rbac record`: the core's recording proxy, started with a login's credentials, and
//! what it journaled, as JSON for the Python side.

use crate::client::connection::{self, ConnectionInfo};
use crate::recording::proxying::{self, Proxy};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Mutex;

/// A running recording proxy: its port on the loopback, its certificate, its journal.
#[pyclass(module = "kopf._engine")]
pub struct Recording {
    proxy: Mutex<Option<Proxy>>,
    #[pyo3(get)]
    port: u16,
    cert_pem: Vec<u8>,
}

#[pymethods]
impl Recording {
    /// The proxy's own certificate (PEM): the CA that its clients are given.
    #[getter]
    fn cert_pem<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.cert_pem)
    }

    /// What was requested so far: a JSON list of the journal's entries.
    fn entries(&self) -> String {
        let proxy = self.proxy.lock().expect("not poisoned");
        let entries = proxy
            .as_ref()
            .map(|p| p.journal.entries())
            .unwrap_or_default();
        serde_json::to_string(&entries).expect("entries serialise")
    }

    /// Stop listening (idempotent); the journal stays readable until then.
    fn stop(&self) {
        if let Some(proxy) = self.proxy.lock().expect("not poisoned").as_ref() {
            proxy.stop();
        }
    }
}

/// Start a recording proxy on the loopback (port 0: any free one) that forwards with these
/// credentials; an awaitable of a `Recording`.
#[pyfunction]
pub fn start_recording<'py>(
    py: Python<'py>,
    connection: &str,
    port: u16,
) -> PyResult<Bound<'py, PyAny>> {
    let info: ConnectionInfo = serde_json::from_str(connection)
        .map_err(|e| PyValueError::new_err(format!("invalid connection info: {e}")))?;
    super::awaiting::awaitable(py, async move {
        let transport =
            connection::client(&info, None).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let proxy = proxying::start(transport, port)
            .await
            .map_err(PyRuntimeError::new_err)?;
        Ok(Recording {
            port: proxy.local.port(),
            cert_pem: proxy.cert_pem.clone(),
            proxy: Mutex::new(Some(proxy)),
        })
    })
}
