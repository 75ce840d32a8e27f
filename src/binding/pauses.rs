//! The iterables of pauses that the settings (or a `backoffs=` argument) give and that are not
//! plain lists: read as Kopf reads them, a new `iter()` at each use and one `next()` for each
//! retry, so that an endless one (a generator, an object whose `__iter__` yields for ever) is
//! never read ahead. A failure of the iterable's own code ends its pauses, with its reason logged.

use crate::settings::pauses::{PauseRun, PauseSource, PauseSources};
use crate::util::logging::ENGINE;
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use std::sync::Arc;

/// A Python iterable of pauses, named by the setting (or argument) that gave it.
pub struct PyPauseSource {
    iterable: Py<PyAny>,
    name: Arc<str>,
}

impl PyPauseSource {
    pub fn new(iterable: Py<PyAny>, name: &str) -> Self {
        Self {
            iterable,
            name: name.into(),
        }
    }
}

struct PyPauseRun {
    iterator: Option<Py<PyAny>>,
    name: Arc<str>,
}

impl PauseSource for PyPauseSource {
    fn run(&self) -> Box<dyn PauseRun> {
        let iterator = Python::attach(|py| match self.iterable.bind(py).try_iter() {
            Ok(iterator) => Some(iterator.into_any().unbind()),
            Err(error) => {
                tracing::error!(target: ENGINE, "{} cannot be iterated: no pauses, no retries: {error}", self.name);
                None
            }
        });
        Box::new(PyPauseRun {
            iterator,
            name: self.name.clone(),
        })
    }
}

impl PauseRun for PyPauseRun {
    fn next_pause(&mut self) -> Option<f64> {
        let iterator = self.iterator.as_ref()?;
        let pause = Python::attach(|py| {
            let next = iterator
                .bind(py)
                .call_method0(pyo3::intern!(py, "__next__"));
            match next {
                Ok(value) => match value.extract::<f64>() {
                    Ok(pause) => Some(pause),
                    Err(_) => {
                        let repr = value.repr().map_or_else(|_| "?".into(), |r| r.to_string());
                        tracing::error!(target: ENGINE, "{} gave {repr}, not a number of seconds: no more retries", self.name);
                        None
                    }
                },
                Err(error) if error.is_instance_of::<PyStopIteration>(py) => None,
                Err(error) => {
                    tracing::error!(target: ENGINE, "{} failed to give a pause: no more retries: {error}", self.name);
                    None
                }
            }
        });
        if pause.is_none() {
            self.iterator = None; // over: not asked again
        }
        pause
    }
}

/// The operator's Python objects that the spec's settings refer to by index (its custom
/// storages and its iterables of pauses, as `OperatorSettings.for_engine()` listed them).
pub struct PySources<'a>(pub &'a [Py<PyAny>]);

impl PauseSources for PySources<'_> {
    fn source(&self, index: usize, name: &str) -> Option<Arc<dyn PauseSource>> {
        let object = Python::attach(|py| self.0.get(index).map(|object| object.clone_ref(py)))?;
        Some(Arc::new(PyPauseSource::new(object, name)))
    }
}
