//! The binding's one converter between JSON and Python. JSON values become Python objects
//! directly (not through a serializer), from a tree or from the text as it is parsed, with
//! the keys of objects made once: the same few dozen field names (`metadata`, `name`, `uid`,
//! ...) come in every body, and a kept `str` is neither allocated, decoded nor hashed again.
//! The core's own structures (a resource, a patch) go the same way through their JSON; Python
//! values come back through `pythonize`'s deserializer.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, Mutex, MutexGuard, TryLockError};

/// Keys longer than this are not kept: field names are short, map keys of users' data may not be.
const KEPT_KEY_LENGTH: usize = 64;
/// How many keys are kept at most; later ones are made each time (a resource whose maps have
/// ever new keys must not grow this without end).
const KEPT_KEYS: usize = 4096;

type Keys = HashMap<Box<str>, Py<PyString>, foldhash::fast::RandomState>;

static KEYS: LazyLock<Mutex<Keys>> = LazyLock::new(Mutex::default);

/// The kept keys, if no other thread has them now. Not waited for: a thread that holds them
/// may wait for the GIL (a finalizer run by the garbage collector while a body is made),
/// while this thread holds it.
fn kept_keys() -> Option<MutexGuard<'static, Keys>> {
    match KEYS.try_lock() {
        Ok(keys) => Some(keys),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// A Python value (dicts, lists, str, int, float, bool, None) as JSON, or as what is
/// deserialized from that JSON.
pub fn from_python<T: de::DeserializeOwned>(object: &Bound<'_, PyAny>) -> PyResult<T> {
    Ok(pythonize::depythonize(object)?)
}

/// A structure of the core (a resource, a patch) as the Python objects of its JSON.
pub fn serialized<'py, T: serde::Serialize + ?Sized>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let value = serde_json::to_value(value)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    to_python(py, &value)
}

/// The value as Python objects: dicts, lists, str, int, float, bool, None.
pub fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    let mut keys = kept_keys();
    convert(py, value, keys.as_deref_mut())
}

/// `f` given a seed that parses one JSON value straight into the same Python objects as
/// [`to_python`] makes of its tree (`serde_json`'s numbers: integers up to 64 bits, else floats).
pub fn parsing<'py, R>(py: Python<'py>, f: impl FnOnce(Parsed<'py, '_>) -> R) -> R {
    let mut keys = kept_keys();
    f(Parsed {
        py,
        keys: keys.as_deref_mut(),
    })
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

/// A JSON value to parse into Python objects (see [`parsing`]).
pub struct Parsed<'py, 'k> {
    py: Python<'py>,
    keys: Option<&'k mut Keys>,
}

impl<'py> Parsed<'py, '_> {
    /// A seed for one more value (a field's, an item's), with the same kept keys.
    pub fn again(&mut self) -> Parsed<'py, '_> {
        Parsed {
            py: self.py,
            keys: self.keys.as_deref_mut(),
        }
    }
}

impl<'de, 'py> DeserializeSeed<'de> for Parsed<'py, '_> {
    type Value = Bound<'py, PyAny>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, 'py> Visitor<'de> for Parsed<'py, '_> {
    type Value = Bound<'py, PyAny>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.py.None().into_bound(self.py))
    }

    fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Self::Value, E> {
        Ok(PyBool::new(self.py, flag).to_owned().into_any())
    }

    fn visit_i64<E: de::Error>(self, integer: i64) -> Result<Self::Value, E> {
        let Ok(integer) = integer.into_pyobject(self.py); // (infallible)
        Ok(integer.into_any())
    }

    fn visit_u64<E: de::Error>(self, integer: u64) -> Result<Self::Value, E> {
        let Ok(integer) = integer.into_pyobject(self.py); // (infallible)
        Ok(integer.into_any())
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Self::Value, E> {
        Ok(PyFloat::new(self.py, number).into_any())
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(PyString::new(self.py, text).into_any())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut items: A) -> Result<Self::Value, A::Error> {
        let list = PyList::empty(self.py);
        while let Some(item) = items.next_element_seed(self.again())? {
            list.append(item).map_err(de::Error::custom)?;
        }
        Ok(list.into_any())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut fields: A) -> Result<Self::Value, A::Error> {
        let dict = PyDict::new(self.py);
        while let Some(name) = fields.next_key_seed(Key(self.again()))? {
            let item = fields.next_value_seed(self.again())?;
            dict.set_item(name, item).map_err(de::Error::custom)?;
        }
        Ok(dict.into_any())
    }
}

/// An object's key, kept as [`to_python`] keeps it.
struct Key<'py, 'k>(Parsed<'py, 'k>);

impl<'de, 'py> DeserializeSeed<'de> for Key<'py, '_> {
    type Value = Bound<'py, PyString>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, 'py> Visitor<'de> for Key<'py, '_> {
    type Value = Bound<'py, PyString>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
        Ok(key(self.0.py, name, self.0.keys))
    }
}
