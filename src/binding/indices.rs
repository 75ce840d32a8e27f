//! Indices at the edge: an index function's result into the core's values (`Datum`), and
//! `kopf._engine.IndexView`, through which `kopf.Index` reads an index (its keys and values
//! converted to Python on each read; nothing is kept on the Python side but opaque objects).

use super::calls::Calls;
use crate::indices::datum::{Datum, Float, Opaque, Strings};
use crate::indices::index::Index;
use crate::indices::Indices;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple,
};
use region::apart;
use std::sync::{Arc, RwLock};

/// `kopf._structures.indices`: the table of opaque objects, and the views that bodies come back as.
fn module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("kopf._structures.indices")?.unbind())
    })?;
    Ok(module.bind(py))
}

/// The classes whose objects are views of a body: kept by their content, given back as such.
const VIEWS: &[&str] = &["Body", "Spec", "Meta", "Status", "Labels", "Annotations"];

/// How Python objects become values of the core.
pub struct Converter<'a> {
    pub strings: &'a Strings,
    /// Where released opaque objects are reported (none: a lookup, nothing is kept).
    pub calls: Option<&'a Calls>,
}

impl Converter<'_> {
    /// An index function's result: a `dict` (exactly) is keys to values; anything else is
    /// one value under the key `None`; `None` is nothing to index. Kept for long: apart.
    pub fn result(&self, result: &Bound<'_, PyAny>) -> PyResult<Option<Vec<(Datum, Datum)>>> {
        apart(|| self.pairs(result))
    }

    fn pairs(&self, result: &Bound<'_, PyAny>) -> PyResult<Option<Vec<(Datum, Datum)>>> {
        if result.is_none() {
            return Ok(None);
        }
        if result.is_exact_instance_of::<PyDict>() {
            let dict = result.cast::<PyDict>()?;
            let pairs = (dict.iter())
                .map(|(key, value)| Ok((self.datum(&key)?, self.datum(&value)?)))
                .collect::<PyResult<_>>()?;
            return Ok(Some(pairs));
        }
        Ok(Some(vec![(Datum::None, self.datum(result)?)]))
    }

    /// A key that a handler looks up: as Python would, unhashable ones are refused.
    pub fn key(&self, key: &Bound<'_, PyAny>) -> PyResult<Datum> {
        key.hash()?;
        self.datum(key)
    }

    /// A Python object as the core keeps it.
    pub fn datum(&self, obj: &Bound<'_, PyAny>) -> PyResult<Datum> {
        let items = |iterable: &Bound<'_, PyAny>| -> PyResult<Arc<[Datum]>> {
            iterable
                .try_iter()?
                .map(|item| self.datum(&item?))
                .collect()
        };
        Ok(if obj.is_none() {
            Datum::None
        } else if let Ok(b) = obj.cast_exact::<PyBool>() {
            Datum::Bool(b.is_true())
        } else if obj.is_exact_instance_of::<PyInt>() && obj.extract::<i64>().is_ok() {
            Datum::Int(obj.extract()?)
        } else if obj.is_exact_instance_of::<PyFloat>() {
            Datum::Float(Float(obj.extract()?))
        } else if let Ok(text) = obj.cast_exact::<PyString>() {
            Datum::Str(self.strings.intern(text.to_str()?))
        } else if let Ok(bytes) = obj.cast_exact::<PyBytes>() {
            Datum::Bytes(Arc::from(bytes.as_bytes()))
        } else if obj.is_exact_instance_of::<PyTuple>() {
            Datum::Tuple(items(obj)?)
        } else if obj.is_exact_instance_of::<PyList>() {
            Datum::List(items(obj)?)
        } else if obj.is_exact_instance_of::<PySet>() {
            Datum::Set(items(obj)?)
        } else if obj.is_exact_instance_of::<PyFrozenSet>() {
            Datum::FrozenSet(items(obj)?)
        } else if obj.is_exact_instance_of::<PyDict>() {
            let dict = obj.cast::<PyDict>()?;
            let pairs = (dict.iter())
                .map(|(k, v)| Ok((self.datum(&k)?, self.datum(&v)?)))
                .collect::<PyResult<_>>()?;
            Datum::Dict(pairs)
        } else if let Some(kind) = view_kind(obj)? {
            let content = obj
                .py()
                .import("builtins")?
                .getattr("dict")?
                .call1((obj,))?;
            Datum::View(self.strings.intern(&kind), Arc::new(self.datum(&content)?))
        } else {
            self.opaque(obj)?
        })
    }

    fn opaque(&self, obj: &Bound<'_, PyAny>) -> PyResult<Datum> {
        let py = obj.py();
        match self.calls {
            Some(calls) => {
                let id: u64 = module(py)?.call_method1("keep", (obj,))?.extract()?;
                let calls = calls.clone();
                let release = Box::new(move |id: u64| {
                    calls.notify("release", move |py| Ok((id,).into_pyobject(py)?.into_any()));
                });
                Ok(Datum::Opaque(Arc::new(Opaque::new(id, release))))
            }
            None => {
                // A lookup: an object that is not kept cannot be in any index.
                let found: Option<u64> = module(py)?.call_method1("lookup", (obj,))?.extract()?;
                let id = found.unwrap_or(0); // 0 is never given out: nothing matches it
                Ok(Datum::Opaque(Arc::new(Opaque::new(id, Box::new(|_| {})))))
            }
        }
    }
}

fn view_kind(obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let class = obj.get_type();
    let module: String = class.getattr("__module__")?.extract()?;
    let name: String = class.getattr("__name__")?.extract()?;
    Ok((module == "kopf._structures.structs" && VIEWS.contains(&name.as_str())).then_some(name))
}

/// A value of the core as a Python object.
pub fn to_python<'py>(py: Python<'py>, datum: &Datum) -> PyResult<Bound<'py, PyAny>> {
    let list = |items: &[Datum]| -> PyResult<Vec<Bound<'py, PyAny>>> {
        items.iter().map(|item| to_python(py, item)).collect()
    };
    Ok(match datum {
        Datum::None => py.None().into_bound(py),
        Datum::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Datum::Int(i) => i.into_pyobject(py)?.into_any(),
        Datum::Float(f) => PyFloat::new(py, f.0).into_any(),
        Datum::Str(s) => PyString::new(py, s).into_any(),
        Datum::Bytes(b) => PyBytes::new(py, b).into_any(),
        Datum::Tuple(items) => PyTuple::new(py, list(items)?)?.into_any(),
        Datum::List(items) => PyList::new(py, list(items)?)?.into_any(),
        Datum::Set(items) => PySet::new(py, list(items)?)?.into_any(),
        Datum::FrozenSet(items) => PyFrozenSet::new(py, list(items)?)?.into_any(),
        Datum::Dict(pairs) => {
            let dict = PyDict::new(py);
            for (key, value) in pairs.iter() {
                dict.set_item(to_python(py, key)?, to_python(py, value)?)?;
            }
            dict.into_any()
        }
        Datum::View(kind, content) => {
            module(py)?.call_method1("view", (kind.as_ref(), to_python(py, content)?))?
        }
        Datum::Opaque(opaque) => module(py)?.call_method1("get", (opaque.id,))?,
    })
}

/// `kopf._engine.IndexView`: one index of the operator, read as it is now.
#[pyclass(module = "kopf._engine", frozen)]
pub struct IndexView {
    pub index: Arc<RwLock<Index>>,
    pub indices: Arc<Indices>,
}

impl IndexView {
    fn key(&self, key: &Bound<'_, PyAny>) -> PyResult<Datum> {
        let converter = Converter {
            strings: &self.indices.strings,
            calls: None,
        };
        converter.key(key)
    }
}

#[pymethods]
impl IndexView {
    fn __len__(&self) -> usize {
        self.index.read().expect("not poisoned").len()
    }

    /// The keys, in their order.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let index = self.index.read().expect("not poisoned");
        let keys = index
            .keys()
            .map(|k| to_python(py, k))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, keys)
    }

    /// Every key with its values, in order: one call for a whole scan of the index.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let index = self.index.read().expect("not poisoned");
        let mut items = Vec::with_capacity(index.len());
        for (key, store) in index.entries() {
            let values = store
                .values()
                .map(|v| to_python(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            items.push((to_python(py, key)?, PyList::new(py, values)?));
        }
        PyList::new(py, items)
    }

    fn contains(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = self.key(key)?;
        Ok(self
            .index
            .read()
            .expect("not poisoned")
            .store(&key)
            .is_some())
    }

    /// The values under the key (none if the key is not in the index).
    fn values<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let key = self.key(key)?;
        let index = self.index.read().expect("not poisoned");
        let Some(store) = index.store(&key) else {
            return Ok(None);
        };
        let values = store
            .values()
            .map(|v| to_python(py, v))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Some(PyList::new(py, values)?))
    }

    /// How many values are under the key (0 if it is not in the index).
    fn count(&self, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        let key = self.key(key)?;
        let index = self.index.read().expect("not poisoned");
        Ok(index.store(&key).map_or(0, |store| store.len()))
    }
}
