//! The core's log lines (`tracing` events, see `util::logging`) to Python's `logging`.
//! Each operator has its own sink (of a `Lines` subscriber): it passes on the lines of the core's loggers
//! at the levels Python would not drop, as notes to the operator's loop, where they are
//! logged in order with the calls (no GIL is taken on the core's threads).

use super::calls::Calls;
use crate::util::logging::{python_level, Line, ObjectRef, Sink, LOGGERS};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use tracing::Level;

pub struct PyLogs {
    calls: Calls,
    /// Python's effective level of each of the core's loggers, read once at start.
    levels: HashMap<&'static str, u8>,
}

impl PyLogs {
    pub fn new(py: Python<'_>, bridge: &Py<PyAny>, calls: Calls) -> PyResult<Self> {
        let answer = bridge.call_method1(py, "log_levels", (LOGGERS.to_vec(),))?;
        let found: HashMap<String, u8> = answer.extract(py)?;
        let levels = (LOGGERS.iter())
            .filter_map(|logger| Some((*logger, *found.get(*logger)?)))
            .collect();
        Ok(Self { calls, levels })
    }
}

/// Which object a line is about (`kopf._bridge.protocol.ObjectRef`).
pub(super) fn object_dict<'py>(
    py: Python<'py>,
    object: &ObjectRef,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("apiVersion", &object.api_version)?;
    dict.set_item("kind", &object.kind)?;
    dict.set_item("namespace", &object.namespace)?;
    dict.set_item("name", &object.name)?;
    dict.set_item("uid", &object.uid)?;
    Ok(dict)
}

impl Sink for PyLogs {
    fn enabled(&self, logger: &str, level: &Level) -> bool {
        (self.levels.get(logger)).is_some_and(|threshold| python_level(level) >= *threshold)
    }

    fn line(&self, line: Line) {
        self.calls.notify("log", move |py| {
            let object = line
                .object
                .as_ref()
                .map(|o| object_dict(py, o))
                .transpose()?;
            let level = python_level(&line.level);
            Ok((line.logger, level, object, line.message)
                .into_pyobject(py)?
                .into_any())
        });
    }
}
