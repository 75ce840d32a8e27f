//! Bodies as handlers get them: converted to Python objects only as far as they are read.
//!
//! Most handlers read a field or two of their object, or nothing (a timer that counts), yet
//! a whole body converted is hundreds of Python objects per call, and a daemon's or timer's
//! live body keeps them for as long as it runs (≈5 KB per object for a small custom
//! resource). A [`CoreBody`] shares the core's own body (its tree, or its compact text) and
//! converts one top-level field when it is first asked for; the Python side
//! (`kopf._structures.structs.LazyRaw`) keeps what it has converted, as a dict would keep it.

use super::values::Parsed;
use crate::state::bodies::CompactBody;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// An object's body as the core holds it, for `kopf._structures.structs.LazyRaw`.
#[pyclass(frozen, module = "kopf._engine")]
pub struct CoreBody {
    source: Source,
}

enum Source {
    Tree(Arc<Value>),
    Text(Arc<CompactBody>),
}

impl CoreBody {
    pub fn tree(body: Arc<Value>) -> Self {
        Self {
            source: Source::Tree(body),
        }
    }

    pub fn text(body: Arc<CompactBody>) -> Self {
        Self {
            source: Source::Text(body),
        }
    }
}

#[pymethods]
impl CoreBody {
    /// The top-level keys, in the body's order.
    fn keys(&self) -> PyResult<Vec<String>> {
        match &self.source {
            Source::Tree(tree) => Ok(tree
                .as_object()
                .map_or_else(Vec::new, |map| map.keys().cloned().collect())),
            Source::Text(compact) => parse(compact, Keys),
        }
    }

    /// One top-level field as Python objects (a fresh conversion each time); `KeyError`
    /// if the body has no such field.
    fn item<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let found = match &self.source {
            Source::Tree(tree) => match tree.get(key) {
                Some(value) => Some(super::values::to_python(py, value)?),
                None => None,
            },
            Source::Text(compact) => {
                super::values::parsing(py, |value| parse(compact, Field { key, value }))?
            }
        };
        found.ok_or_else(|| PyKeyError::new_err(key.to_owned()))
    }

    /// Whether both are the same body of the core (not merely equal): a daemon's live body
    /// keeps what it has converted while its object stays the same.
    fn same(&self, other: &CoreBody) -> bool {
        match (&self.source, &other.source) {
            (Source::Tree(a), Source::Tree(b)) => Arc::ptr_eq(a, b),
            (Source::Text(a), Source::Text(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// What an object's logger and kwargs need of it, without converting its metadata:
    /// `(apiVersion, kind, name, uid, namespace)`, each `None` unless it is a string.
    #[allow(clippy::type_complexity)]
    fn identity(
        &self,
    ) -> PyResult<(
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    )> {
        let identity = match &self.source {
            Source::Tree(tree) => Identity::of(tree),
            // Only an odd body (metadata that is not an object) needs the tree.
            Source::Text(compact) => serde_json::from_str(compact.text())
                .unwrap_or_else(|_| Identity::of(&compact.value())),
        };
        let meta = identity.metadata.unwrap_or_default();
        Ok((
            identity.api_version.into_string(),
            identity.kind.into_string(),
            meta.name.into_string(),
            meta.uid.into_string(),
            meta.namespace.into_string(),
        ))
    }
}

fn parse<'de, V: Visitor<'de>>(compact: &'de CompactBody, visitor: V) -> PyResult<V::Value> {
    let mut json = serde_json::Deserializer::from_str(compact.text());
    json.deserialize_map(visitor)
        // Where, not what: the parser's message may quote the body (a secret's data).
        .map_err(|e| {
            let at = e.column();
            PyValueError::new_err(format!("The object's body is not readable (at byte {at})."))
        })
}

/// A body's top-level keys, its values skipped unparsed.
struct Keys;

impl<'de> Visitor<'de> for Keys {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut keys = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<IgnoredAny>()?;
            keys.push(key);
        }
        Ok(keys)
    }
}

/// One top-level field, straight from the text into Python objects; the others skipped.
struct Field<'k, 'py, 'v> {
    key: &'k str,
    value: Parsed<'py, 'v>,
}

impl<'de, 'py> Visitor<'de> for Field<'_, 'py, '_> {
    type Value = Option<Bound<'py, PyAny>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        // To the end: the parser checks that the object is whole.
        while let Some(wanted) = map.next_key_seed(IsKey(self.key))? {
            if wanted {
                found = Some(map.next_value_seed(self.value.again())?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a key is the wanted one, compared where it lies (no string made of it).
struct IsKey<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for IsKey<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsKey<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// The fields of a body that name the object; anything else in it is skipped unparsed.
#[derive(serde::Deserialize, Default)]
struct Identity {
    #[serde(rename = "apiVersion", default)]
    api_version: Scalar,
    #[serde(default)]
    kind: Scalar,
    #[serde(default)]
    metadata: Option<IdentityMeta>,
}

#[derive(serde::Deserialize, Default)]
struct IdentityMeta {
    #[serde(default)]
    name: Scalar,
    #[serde(default)]
    uid: Scalar,
    #[serde(default)]
    namespace: Scalar,
}

/// A field that names the object: a string, or anything else (then it names nothing).
#[derive(Default)]
struct Scalar(Option<String>);

impl Scalar {
    fn into_string(self) -> Option<String> {
        self.0
    }
}

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Scalar(match Value::deserialize(deserializer)? {
            Value::String(text) => Some(text),
            _ => None,
        }))
    }
}

impl Identity {
    fn of(tree: &Value) -> Self {
        let text = |value: Option<&Value>| Scalar(value.and_then(Value::as_str).map(str::to_owned));
        let meta = tree.get("metadata").filter(|meta| meta.is_object());
        Identity {
            api_version: text(tree.get("apiVersion")),
            kind: text(tree.get("kind")),
            metadata: meta.map(|meta| IdentityMeta {
                name: text(meta.get("name")),
                uid: text(meta.get("uid")),
                namespace: text(meta.get("namespace")),
            }),
        }
    }
}
