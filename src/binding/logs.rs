//! The core's log lines (`tracing` events, see `util::logging`) to Python's `logging`.
//! Each operator has its own subscriber: it passes on the lines of the core's loggers
//! at the levels Python would not drop, as notes to the operator's loop, where they are
//! logged in order with the calls (no GIL is taken on the core's threads).

use super::calls::Calls;
use crate::util::logging::{logger_of, python_level, Line, ObjectRef, LOGGERS};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

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

fn object_dict<'py>(py: Python<'py>, object: &ObjectRef) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("apiVersion", &object.api_version)?;
    dict.set_item("kind", &object.kind)?;
    dict.set_item("namespace", &object.namespace)?;
    dict.set_item("name", &object.name)?;
    dict.set_item("uid", &object.uid)?;
    Ok(dict)
}

impl Subscriber for PyLogs {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // The HTTP stack's own events are not Kopf's lines.
        if logger_of(metadata).is_some() {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        (self.levels.get(metadata.target()))
            .is_some_and(|threshold| python_level(metadata.level()) >= *threshold)
    }

    fn event(&self, event: &Event<'_>) {
        let Some(line) = Line::of(event) else { return };
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

    // The core logs no spans: these are never enabled.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
