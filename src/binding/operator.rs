//! `kopf._engine.Operator`: runs the core for a Python-side operator and stops it on request.

use super::calls::Calls;
use super::hooks::PyHooks;
use super::indices::IndexView;
use super::logs::PyLogs;
use super::storages::PyCustomStorages;
use crate::client::connection::{self, ConnectionInfo};
use crate::client::credentials::{Credentials, Login};
use crate::client::posting::K8sEvent;
use crate::indices::Indices;
use crate::running::{self, Embedding, OperatorSpec};
use crate::util::logging::Lines;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};
use tracing::instrument::WithSubscriber;

#[pyclass(module = "kopf._engine")]
pub struct Operator {
    stop: watch::Sender<bool>,
    events: mpsc::UnboundedSender<K8sEvent>,
    /// Taken by `run()`: an operator runs once.
    pending: Mutex<Option<mpsc::UnboundedReceiver<K8sEvent>>>,
    indices: Arc<Indices>,
}

#[pymethods]
impl Operator {
    #[new]
    fn new() -> Self {
        let (events, pending) = mpsc::unbounded_channel();
        Self {
            stop: watch::channel(false).0,
            events,
            pending: Mutex::new(Some(pending)),
            indices: Arc::default(),
        }
    }

    /// Run the core until `stop()`; an awaitable for the operator's asyncio loop.
    /// `spec` and `connection` are JSON; `bridge` is the Python side of the hooks;
    /// `storages` are the custom storages that the spec's settings refer to by index.
    fn run<'py>(
        &self,
        py: Python<'py>,
        spec: &str,
        connection: &str,
        bridge: Py<PyAny>,
        storages: Vec<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let spec: OperatorSpec = serde_json::from_str(spec)
            .map_err(|e| PyValueError::new_err(format!("invalid operator spec: {e}")))?;
        let info: ConnectionInfo = serde_json::from_str(connection)
            .map_err(|e| PyValueError::new_err(format!("invalid connection info: {e}")))?;
        let calls = Calls::new()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot create the call queue: {e}")))?;
        bridge.call_method1(py, "attach", (calls.queue(),))?;
        let logs = tracing::Dispatch::new(Lines(PyLogs::new(py, &bridge, calls.clone())?));
        let ready_bridge = bridge.clone_ref(py);
        let storages = PyCustomStorages::new(py, storages)?;
        let hooks = Arc::new(PyHooks::new(
            py,
            bridge,
            calls,
            storages,
            self.indices.clone(),
        )?);
        let stop = self.stop.subscribe();
        let events = self
            .pending
            .lock()
            .expect("not poisoned")
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this operator has already run"))?;
        let networking = spec.settings.networking.clone();
        let indices = self.indices.clone();
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            async move {
                let (request_timeout, connect_timeout) =
                    (networking.request_timeout, networking.connect_timeout);
                let client = connection::client(&info, request_timeout, connect_timeout)
                    .await
                    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                let relogin_hooks = hooks.clone();
                let login: Login = Arc::new(move || relogin_hooks.relogin());
                let credentials =
                    Credentials::new(client, Some(login), request_timeout, connect_timeout);
                let ready = move || {
                    Python::attach(|py| {
                        if let Err(error) = ready_bridge.call_method0(py, "ready") {
                            error.print(py);
                        }
                    })
                };
                let trimming = super::memory::trim_periodically();
                let result = running::run(
                    credentials,
                    &info.server,
                    spec,
                    Embedding { hooks, indices },
                    stop,
                    events,
                    ready,
                )
                .await;
                trimming.abort();
                result.map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                Ok(())
            }
            // The core's tasks inherit it: their lines go to this operator's loggers.
            .with_subscriber(logs),
        )
    }

    /// Queue a Kubernetes Event (JSON: reference, type, reason, message) for posting.
    fn post_event(&self, event: &str) -> PyResult<()> {
        let event: K8sEvent = serde_json::from_str(event)
            .map_err(|e| PyValueError::new_err(format!("invalid event: {e}")))?;
        // After the operator has stopped, there is nobody to post: drop silently, as Kopf does.
        let _ = self.events.send(event);
        Ok(())
    }

    /// The index of this id (`@kopf.index`), as it is whenever it is read.
    fn index(&self, id: &str) -> IndexView {
        IndexView {
            index: self.indices.index(id),
            indices: self.indices.clone(),
        }
    }

    /// Ask the running core to stop (thread-safe; idempotent).
    fn stop(&self) {
        self.stop.send_replace(true);
    }
}
