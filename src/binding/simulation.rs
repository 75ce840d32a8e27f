//! The simulated API of handler tests (`simulation`), served from the core's runtime on the
//! loopback for the Python side: its URL, and a stop.

use crate::simulation::serving;
use crate::simulation::store::Store;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

/// A running simulated API: where it listens, plain HTTP on 127.0.0.1.
#[pyclass(module = "kopf._engine")]
pub struct Simulation {
    #[pyo3(get)]
    url: String,
    server: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[pymethods]
impl Simulation {
    /// Stop serving (idempotent): its objects are gone with it.
    fn stop(&self) {
        if let Some(server) = self.server.lock().unwrap_or_else(|e| e.into_inner()).take() {
            server.abort();
        }
    }
}

/// Start a simulated API with the built-in resources on 127.0.0.1 (port 0: any free one); an
/// awaitable of a `Simulation`.
#[pyfunction]
pub fn start_simulation(py: Python<'_>, port: u16) -> PyResult<Bound<'_, PyAny>> {
    super::awaiting::awaitable(py, async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| PyRuntimeError::new_err(format!("cannot listen on port {port}: {e}")))?;
        let url = format!("http://{}", listener.local_addr()?);
        let store = Arc::new(Store::default());
        for kind in serving::builtins() {
            store.define(kind);
        }
        Ok(Simulation {
            url,
            server: Mutex::new(Some(serving::serve(listener, store))),
        })
    })
}
