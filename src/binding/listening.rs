//! Skafos' `StreamWatch` on the core: a blocking stream of events for Python's threads
//! (Skafos' listeners are synchronous), and the core's log lines to the `skafos` logger.

use crate::client::connection::{self, ConnectionInfo};
use crate::client::credentials::Credentials;
use crate::listening::{Listening, Spec};
use crate::util::logging::{python_level, Line, Lines, Sink};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use tracing::instrument::WithSubscriber;
use tracing::Level;

/// Skafos logs to this logger; the core's lines about the stream go there too.
const LOGGER: &str = "skafos";

/// The events of one resource for Skafos' listeners (see `listening`).
#[pyclass(module = "kopf._engine", frozen)]
pub struct EventStream {
    listening: Arc<Listening>,
}

#[pymethods]
impl EventStream {
    /// Connect (JSON: a `ConnectionInfo`), make sure the resource is served, bind the
    /// health port, and start electing and streaming (`spec`: JSON, see `listening::Spec`).
    #[new]
    fn new(py: Python<'_>, connection: &str, spec: &str) -> PyResult<Self> {
        let info: ConnectionInfo = serde_json::from_str(connection)
            .map_err(|e| PyValueError::new_err(format!("invalid connection info: {e}")))?;
        let spec: Spec = serde_json::from_str(spec)
            .map_err(|e| PyValueError::new_err(format!("invalid stream: {e}")))?;
        let sink = PythonLog::new(py)?;
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        let starting = async move {
            let client = connection::client(&info, None)
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            (Listening::start(Credentials::fixed(client), spec).await)
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))
        };
        // The core's tasks inherit the subscriber: their lines go to Python's `skafos` logger.
        let starting = starting.with_subscriber(Lines(sink));
        let listening = py.detach(|| runtime.block_on(starting))?;
        Ok(Self { listening })
    }

    /// The next event as `(number, type, object)`, or `None` if none came in `timeout`
    /// seconds or the stream is stopped.
    fn next<'py>(
        &self,
        py: Python<'py>,
        timeout: f64,
    ) -> PyResult<Option<(u64, &'static str, Bound<'py, PyAny>)>> {
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        let waiting = self
            .listening
            .next(Duration::from_secs_f64(timeout.max(0.0)));
        let Some(delivery) = py.detach(|| runtime.block_on(waiting)) else {
            return Ok(None);
        };
        let object = super::values::to_python(py, &delivery.event.object)?;
        Ok(Some((delivery.number, delivery.event.kind, object)))
    }

    /// Whether the listeners may handle this event now (we still lead, in its term).
    fn may_handle(&self, number: u64) -> bool {
        self.listening.may_handle(number)
    }

    /// The listeners are done with this event (its version counts as handled).
    fn done(&self, number: u64) {
        self.listening.done(number);
    }

    /// No more events (`next` answers `None` at once).
    fn stop(&self) {
        self.listening.stop();
    }

    /// Stop and release the election's lock, recording how far the listeners got.
    fn close(&self, py: Python<'_>) {
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        py.detach(|| runtime.block_on(self.listening.close()));
    }
}

/// The core's lines to Python's `skafos` logger, at the levels it does not drop (read
/// once at the start). Skafos has no event loop: the line is logged from the core's thread.
struct PythonLog {
    threshold: u8,
}

impl PythonLog {
    fn new(py: Python<'_>) -> PyResult<Self> {
        let logger = py.import("logging")?.call_method1("getLogger", (LOGGER,))?;
        let threshold: u8 = logger.call_method0("getEffectiveLevel")?.extract()?;
        Ok(Self { threshold })
    }
}

impl Sink for PythonLog {
    fn enabled(&self, _logger: &str, level: &Level) -> bool {
        python_level(level) >= self.threshold
    }

    fn line(&self, line: Line) {
        Python::attach(|py| {
            let logged = (py.import("logging"))
                .and_then(|logging| logging.call_method1("getLogger", (LOGGER,)))
                .and_then(|logger| {
                    logger.call_method1("log", (python_level(&line.level), line.message))
                });
            if let Err(error) = logged {
                error.print(py);
            }
        });
    }
}
