//! `kopf._engine.Scope`: where a handler call's sub-handlers run. Python gets one with
//! each change handler's call; `kopf.execute()` (explicit, or implicit after the handler)
//! passes the declared sub-handlers to it, and the core executes them (`executing`).

use crate::intents::handlers::ChangingHandler;
use crate::intents::hooks::{Children, Executed};
use crate::intents::lifecycles::Lifecycle;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;

#[pyclass(module = "kopf._engine", frozen)]
pub struct Scope {
    pub inner: Arc<dyn Children>,
}

fn parse(children: &str, lifecycle: &str) -> PyResult<(Vec<ChangingHandler>, Lifecycle)> {
    let children = serde_json::from_str(children)
        .map_err(|e| PyValueError::new_err(format!("invalid sub-handlers: {e}")))?;
    let lifecycle = serde_json::from_value(serde_json::Value::String(lifecycle.to_owned()))
        .map_err(|e| PyValueError::new_err(format!("invalid lifecycle: {e}")))?;
    Ok((children, lifecycle))
}

fn answer(executed: Executed) -> String {
    serde_json::json!({"done": executed.done, "delay": executed.delay}).to_string()
}

#[pymethods]
impl Scope {
    /// How the calls of its sub-handlers name it.
    #[getter]
    fn id(&self) -> u64 {
        self.inner.id()
    }

    /// The id of the handler whose call it is.
    #[getter]
    fn parent(&self) -> String {
        self.inner.parent().to_owned()
    }

    /// Execute the sub-handlers (JSON descriptions) once by the lifecycle (its name): an
    /// awaitable of JSON `{"done": bool, "delay": float | null}`.
    fn execute<'py>(
        &self,
        py: Python<'py>,
        children: &str,
        lifecycle: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (children, lifecycle) = parse(children, lifecycle)?;
        let running = self.inner.clone().execute(children, lifecycle);
        super::awaiting::awaitable(py, async move {
            let executed = running.await;
            executed
                .map(answer)
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))
        })
    }

    /// The same, for a synchronous handler in a thread: waits (without the GIL) until done.
    /// The sub-handlers themselves run on the operator's loop and threads meanwhile.
    fn execute_blocking(
        &self,
        py: Python<'_>,
        children: &str,
        lifecycle: &str,
    ) -> PyResult<String> {
        let (children, lifecycle) = parse(children, lifecycle)?;
        let running = self.inner.clone().execute(children, lifecycle);
        // Nothing in it needs tokio's reactor: it waits for the loop's answers only.
        let executed = py.detach(|| futures::executor::block_on(running));
        executed
            .map(answer)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}
