//! The operator's own storages (Python classes deriving from `kopf.ProgressStorage` or
//! `kopf.DiffBaseStorage`, or anything with their methods), called as Kopf calls them:
//! synchronously, with keyword arguments, `kopf.Body` bodies and a `kopf.Patch` to fill.
//! Calls into one storage never overlap (Kopf makes them all from one thread).

use super::values;
use crate::state::diffbase::DiffBaseStorage;
use crate::state::patches::Patch;
use crate::state::progress::ProgressStorage;
use crate::state::storages::CustomStorages;
use crate::state::{StorageError, StorageResult};
use crate::util::dicts::FieldPath;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyTuple};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// The custom storages of one operator, in the order `OperatorSettings.for_engine()` listed them.
pub struct PyCustomStorages {
    storages: Vec<Arc<PyStorage>>,
}

impl PyCustomStorages {
    pub fn new(py: Python<'_>, objects: Vec<Py<PyAny>>) -> PyResult<Self> {
        let structs = py.import("kopf._structures.structs")?;
        let body_type: Py<PyAny> = structs.getattr("Body")?.unbind();
        let patch_type: Py<PyAny> = structs.getattr("Patch")?.unbind();
        let storages = (objects.into_iter())
            .map(|object| {
                let name = object
                    .bind(py)
                    .get_type()
                    .qualname()
                    .map_or_else(|_| "storage".to_owned(), |n| n.to_string());
                Arc::new(PyStorage {
                    object,
                    name,
                    body_type: body_type.clone_ref(py),
                    patch_type: patch_type.clone_ref(py),
                    lock: Mutex::new(()),
                })
            })
            .collect();
        Ok(Self { storages })
    }
}

impl CustomStorages for PyCustomStorages {
    fn progress(&self, index: usize) -> Option<Arc<dyn ProgressStorage>> {
        let storage = self.storages.get(index)?.clone();
        Some(Arc::new(PyProgressStorage(storage)))
    }
    fn diffbase(&self, index: usize) -> Option<Arc<dyn DiffBaseStorage>> {
        let storage = self.storages.get(index)?.clone();
        Some(Arc::new(PyDiffBaseStorage(storage)))
    }
}

pub struct PyStorage {
    object: Py<PyAny>,
    name: String,
    body_type: Py<PyAny>,
    patch_type: Py<PyAny>,
    lock: Mutex<()>,
}

type Kwargs<'a> = &'a [(&'static str, Arg<'a>)];

/// A keyword argument, converted to Python when the call is made.
enum Arg<'a> {
    Str(&'a str),
    OptStr(Option<&'a str>),
    Json(&'a Value),
    Body(&'a Value),
    Fields(&'a [FieldPath]),
}

impl PyStorage {
    /// Call a method; if `patch` is given, it goes as `patch=` and comes back with the changes.
    fn call<T>(
        &self,
        method: &'static str,
        kwargs: Kwargs<'_>,
        patch: Option<&mut Patch>,
        parse: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
    ) -> StorageResult<T> {
        Python::attach(|py| {
            let _serial = self
                .lock
                .lock_py_attached(py)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.call_attached(py, method, kwargs, patch, parse)
                .map_err(|error| StorageError {
                    storage: self.name.clone(),
                    method,
                    message: describe(py, &error),
                })
        })
    }

    fn call_attached<T>(
        &self,
        py: Python<'_>,
        method: &'static str,
        kwargs: Kwargs<'_>,
        patch: Option<&mut Patch>,
        parse: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
    ) -> PyResult<T> {
        let dict = PyDict::new(py);
        for (name, arg) in kwargs {
            let value = match arg {
                Arg::Str(text) => text.into_pyobject(py)?.into_any(),
                Arg::OptStr(text) => text.into_pyobject(py)?.into_any(),
                Arg::Json(value) => super::values::to_python(py, value)?,
                Arg::Body(body) => {
                    (self.body_type.bind(py)).call1((super::values::to_python(py, body)?,))?
                }
                Arg::Fields(fields) => {
                    let paths = fields.iter().map(|f| PyTuple::new(py, f));
                    pyo3::types::PyList::new(py, paths.collect::<PyResult<Vec<_>>>()?)?.into_any()
                }
            };
            dict.set_item(name, value)?;
        }
        let py_patch = match &patch {
            Some(patch) => {
                let merge = values::serialized(py, &patch.merge)?;
                let py_patch = self.patch_type.bind(py).call1((merge,))?;
                dict.set_item("patch", &py_patch)?;
                Some(py_patch)
            }
            None => None,
        };
        let result = self.object.bind(py).call_method(method, (), Some(&dict))?;
        if let (Some(patch), Some(py_patch)) = (patch, py_patch) {
            let dict = py_patch.cast::<PyDict>()?.copy()?; // a plain dict: no subclass surprises
            patch.merge = values::from_python(dict.as_any())?;
        }
        parse(&result)
    }
}

/// `ValueError: the message`, as a log line shows an exception briefly.
fn describe(py: Python<'_>, error: &PyErr) -> String {
    let kind = error
        .get_type(py)
        .qualname()
        .map_or_else(|_| "Exception".to_owned(), |n| n.to_string());
    let text = error.value(py).to_string();
    if text.is_empty() {
        kind
    } else {
        format!("{kind}: {text}")
    }
}

fn optional_json(result: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    if result.is_none() {
        Ok(None)
    } else {
        Ok(Some(values::from_python(result)?))
    }
}

fn nothing(_: &Bound<'_, PyAny>) -> PyResult<()> {
    Ok(())
}

struct PyProgressStorage(Arc<PyStorage>);

impl ProgressStorage for PyProgressStorage {
    fn fetch(&self, key: &str, body: &Value) -> StorageResult<Option<Value>> {
        let kwargs = [("key", Arg::Str(key)), ("body", Arg::Body(body))];
        self.0.call("fetch", &kwargs, None, optional_json)
    }

    fn store(
        &self,
        key: &str,
        record: &Value,
        body: &Value,
        patch: &mut Patch,
    ) -> StorageResult<()> {
        let kwargs = [
            ("key", Arg::Str(key)),
            ("record", Arg::Json(record)),
            ("body", Arg::Body(body)),
        ];
        self.0.call("store", &kwargs, Some(patch), nothing)
    }

    fn purge(&self, key: &str, body: &Value, patch: &mut Patch) -> StorageResult<()> {
        let kwargs = [("key", Arg::Str(key)), ("body", Arg::Body(body))];
        self.0.call("purge", &kwargs, Some(patch), nothing)
    }

    fn touch(&self, body: &Value, patch: &mut Patch, value: Option<&str>) -> StorageResult<()> {
        let kwargs = [("body", Arg::Body(body)), ("value", Arg::OptStr(value))];
        self.0.call("touch", &kwargs, Some(patch), nothing)
    }

    fn clear(&self, essence: &mut Value) -> StorageResult<()> {
        let kwargs = [("essence", Arg::Json(essence))];
        let cleared = self.0.call("clear", &kwargs, None, |result| {
            values::from_python::<Value>(result)
        })?;
        *essence = cleared;
        Ok(())
    }

    fn flush(&self) -> StorageResult<()> {
        self.0.call("flush", &[], None, nothing)
    }
}

struct PyDiffBaseStorage(Arc<PyStorage>);

impl DiffBaseStorage for PyDiffBaseStorage {
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> StorageResult<Value> {
        let kwargs = [
            ("body", Arg::Body(body)),
            ("extra_fields", Arg::Fields(extra_fields)),
        ];
        self.0.call("build", &kwargs, None, |result| {
            values::from_python::<Value>(result)
        })
    }

    fn fetch(&self, body: &Value) -> StorageResult<Option<Value>> {
        self.0
            .call("fetch", &[("body", Arg::Body(body))], None, optional_json)
    }

    fn store(&self, body: &Value, patch: &mut Patch, essence: &Value) -> StorageResult<()> {
        let kwargs = [("body", Arg::Body(body)), ("essence", Arg::Json(essence))];
        self.0.call("store", &kwargs, Some(patch), nothing)
    }
}
