//! JSON values as Python objects, converted directly (not through a serializer), with the
//! keys of objects made once: the same few dozen field names (`metadata`, `name`, `uid`, ...)
//! come in every body, and a kept `str` is neither allocated, decoded nor hashed again.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// Keys longer than this are not kept: field names are short, map keys of users' data may not be.
const KEPT_KEY_LENGTH: usize = 64;
/// How many keys are kept at most; later ones are made each time (a resource whose maps have
/// ever new keys must not grow this without end).
const KEPT_KEYS: usize = 4096;

type Keys = HashMap<Box<str>, Py<PyString>>;

static KEYS: LazyLock<Mutex<Keys>> = LazyLock::new(Mutex::default);

/// The value as Python objects: dicts, lists, str, int, float, bool, None.
pub fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    // Not waited for: a thread that holds the keys may wait for the GIL (a finalizer run by
    // the garbage collector while a body is made), while this thread holds it.
    match KEYS.try_lock() {
        Ok(mut keys) => convert(py, value, Some(&mut keys)),
        Err(_) => convert(py, value, None),
    }
}

fn convert<'py>(
    py: Python<'py>,
    value: &Value,
    mut keys: Option<&mut Keys>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(integer), _) => integer.into_pyobject(py)?.into_any(),
            (None, Some(integer)) => integer.into_pyobject(py)?.into_any(),
            (None, None) => PyFloat::new(py, number.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(convert(py, item, keys.as_deref_mut())?)?;
            }
            list.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (name, item) in fields {
                let key = key(py, name, keys.as_deref_mut());
                dict.set_item(key, convert(py, item, keys.as_deref_mut())?)?;
            }
            dict.into_any()
        }
    })
}

fn key<'py>(py: Python<'py>, name: &str, keys: Option<&mut Keys>) -> Bound<'py, PyString> {
    let Some(keys) = keys.filter(|_| name.len() <= KEPT_KEY_LENGTH) else {
        return PyString::new(py, name);
    };
    if let Some(kept) = keys.get(name) {
        return kept.bind(py).clone();
    }
    let made = PyString::new(py, name);
    if keys.len() < KEPT_KEYS {
        keys.insert(name.into(), made.clone().unbind());
    }
    made
}
