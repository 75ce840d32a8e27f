//! `kopf._engine.Operator`: runs the core for a Python-side operator and stops it on request.

use super::calls::Calls;
use super::hooks::PyHooks;
use super::indices::IndexView;
use super::logs::PyLogs;
use super::pauses::PySources;
use super::simulation::Simulation;
use super::storages::PyCustomStorages;
use super::webhooks;
use crate::client::connection::ConnectionInfo;
use crate::client::credentials::{Credentials, Login, Network};
use crate::client::posting::K8sEvent;
use crate::indices::Indices;
use crate::intents::handlers::WebhookType;
use crate::running::{self, Embedding, OperatorSpec};
use crate::util::logging::Lines;
use crate::webhooks::admitting::Admission;
use crate::webhooks::converting::Conversion;
use crate::webhooks::routing::Webhooks;
use crate::webhooks::serving::AdmissionRequest;
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
    webhooks: webhooks::Slot,
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
            webhooks: Arc::default(),
        }
    }

    /// Run the core until `stop()`; an awaitable for the operator's asyncio loop.
    /// `spec` and `connection` are JSON; `bridge` is the Python side of the hooks;
    /// `storages` are the Python objects that the spec's settings refer to by index: the
    /// custom storages and the iterables of pauses read lazily. With `simulation`, the core
    /// runs on the simulation's runtime and clock (`kopf.testing.Simulation`).
    #[pyo3(signature = (spec, connection, bridge, storages, simulation = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        spec: &str,
        connection: &str,
        bridge: Py<PyAny>,
        storages: Vec<Py<PyAny>>,
        simulation: Option<PyRef<'py, Simulation>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut spec: OperatorSpec = serde_json::from_str(spec)
            .map_err(|e| PyValueError::new_err(format!("invalid operator spec: {e}")))?;
        (spec.settings)
            .attach_pauses(&PySources(&storages))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let info: ConnectionInfo = serde_json::from_str(connection)
            .map_err(|e| PyValueError::new_err(format!("invalid connection info: {e}")))?;
        let busy = simulation.as_ref().map(|s| s.busy.clone());
        let runtime = match &simulation {
            Some(simulation) => simulation.runtime.clone(),
            None => pyo3_async_runtimes::tokio::get_runtime().handle().clone(),
        };
        let calls = Calls::new(busy)
            .map_err(|e| PyRuntimeError::new_err(format!("cannot create the call queue: {e}")))?;
        bridge.call_method1(py, "attach", (calls.queue(),))?;
        let logs = PyLogs::new(
            py,
            &bridge,
            calls.clone(),
            self.events.clone(),
            spec.settings.posting.logging_backoffs.clone(),
        )?;
        let logs = tracing::Dispatch::new(Lines(logs));
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
        let network = Network::of(&spec.settings.networking, &spec.settings.watching);
        let indices = self.indices.clone();
        // Always: a configured webhook server runs even with no admission handlers (as Kopf).
        let admission = Arc::new(Admission::new(hooks.clone(), spec.webhooks.clone()));
        let conversion = Arc::new(Conversion::new(hooks.clone()));
        let webhooks = Arc::new(Webhooks::new(admission, conversion));
        *self.webhooks.lock().expect("not poisoned") = Some(webhooks.clone());
        super::awaiting::awaitable_on(
            py,
            &runtime,
            async move {
                let relogin_hooks = hooks.clone();
                let login: Login = Arc::new(move || relogin_hooks.relogin());
                let credentials = Credentials::connect(&info, Some(login), network)
                    .await
                    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
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
                    Embedding {
                        hooks,
                        indices,
                        webhooks: Some(webhooks),
                    },
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

    /// Queue a Kubernetes Event (JSON: reference, type, reason, message, backoffs) for
    /// posting; `drawn`: the iterable of its backoffs if they are not a list (then the JSON's
    /// backoffs say `{"drawn": 0, ...}`).
    #[pyo3(signature = (event, drawn=None))]
    fn post_event(&self, event: &str, drawn: Option<Py<PyAny>>) -> PyResult<()> {
        let mut event: K8sEvent = serde_json::from_str(event)
            .map_err(|e| PyValueError::new_err(format!("invalid event: {e}")))?;
        let drawn: Vec<Py<PyAny>> = drawn.into_iter().collect();
        (event.backoffs)
            .attach(&PySources(&drawn))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
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

    /// Start the core's webhook server (`options`: JSON, see `webhooks::Options`) once the
    /// API is discovered; an awaitable of a `WebhookServing`.
    fn serve_webhooks<'py>(&self, py: Python<'py>, options: &str) -> PyResult<Bound<'py, PyAny>> {
        let options: webhooks::Options = serde_json::from_str(options)
            .map_err(|e| PyValueError::new_err(format!("invalid webhook server options: {e}")))?;
        let served = webhooks::webhooks(&self.webhooks)?;
        super::awaiting::awaitable(py, webhooks::start(served, options))
    }

    /// Review an AdmissionReview (JSON) that a custom webhook server received: an awaitable
    /// of `(200, the response as JSON)` or `(an HTTP status, why)`.
    fn review<'py>(
        &self,
        py: Python<'py>,
        request: Vec<u8>,
        webhook: Option<String>,
        headers: Vec<(String, String)>,
        sslpeer: &str,
        reason: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let reason = match reason.as_deref() {
            None => None,
            Some("validating") => Some(WebhookType::Validating),
            Some("mutating") => Some(WebhookType::Mutating),
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "unknown webhook reason: {other:?}"
                )))
            }
        };
        let sslpeer = serde_json::from_str(sslpeer)
            .map_err(|e| PyValueError::new_err(format!("invalid sslpeer: {e}")))?;
        let served = webhooks::webhooks(&self.webhooks)?;
        let request = AdmissionRequest {
            body: request.into(),
            webhook,
            headers,
            sslpeer,
            reason,
        };
        super::awaiting::awaitable(
            py,
            async move { Ok(webhooks::review(served, request).await) },
        )
    }

    /// Where the apiserver reaches the webhooks now (a client config, JSON), as the webhook
    /// server yields it: the managed configurations follow.
    fn webhooks_configured(&self, client_config: &str) -> PyResult<()> {
        let config = serde_json::from_str(client_config)
            .map_err(|e| PyValueError::new_err(format!("invalid client config: {e}")))?;
        webhooks::webhooks(&self.webhooks)?.configure(config);
        Ok(())
    }

    /// Ask the running core to stop (thread-safe; idempotent).
    fn stop(&self) {
        self.stop.send_replace(true);
    }
}
