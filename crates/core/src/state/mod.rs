//! State: what the engine keeps in the objects themselves, byte for byte as
//! Kopf 1.45.2 keeps it — patches (`patches`), annotation keys (`conventions`), the
//! handlers' progress records (`progress`, `progression`), the diff base and essences
//! (`diffbase`, `diffs`; Secrets' values as digests in it: `digests`), and the storages built from the settings (`storages`); and
//! what it keeps of an object's body between events (`bodies`). Here: what every storage
//! shares, the error of a storage that cannot read or write, and the forms in which Kopf
//! keeps values in objects.
//!
//! Uses: `util`.

pub mod bodies;
pub mod conventions;
pub mod diffbase;
pub mod diffs;
pub mod digests;
pub mod patches;
pub mod progress;
pub mod progression;
pub mod storages;

use serde_json::Value;

/// A storage could not read or write its state (a custom storage raised, or a stored
/// value is not what the storage itself would have written).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{storage}.{method}() failed: {message}")]
pub struct StorageError {
    /// The storage's class name.
    pub storage: String,
    /// The method that failed.
    pub method: &'static str,
    /// Why.
    pub message: String,
}

/// A storage's result.
pub type StorageResult<T> = Result<T, StorageError>;

/// A JSON string that a storage wrote itself, decoded; anything else is an error.
pub(crate) fn decode_stored(
    encoded: &Value,
    storage: &str,
    method: &'static str,
    location: &str,
) -> StorageResult<Value> {
    let error = |message: String| StorageError {
        storage: storage.to_owned(),
        method,
        message: format!("{location}: {message}"),
    };
    let text = encoded
        .as_str()
        .ok_or_else(|| error(format!("expected a JSON string, found {encoded}")))?;
    serde_json::from_str(text).map_err(|e| error(format!("malformed JSON ({e})")))
}

/// The first of these annotations that holds a stored value (JSON, not `null`), decoded.
pub(crate) fn fetch_annotation(
    body: &Value,
    keys: &[String],
    storage: &str,
) -> StorageResult<Option<Value>> {
    for key in keys {
        if let Some(encoded) = annotation(body, key) {
            let decoded = decode_stored(encoded, storage, "fetch", &format!("annotation {key}"))?;
            if !decoded.is_null() {
                return Ok(Some(decoded));
            }
        }
    }
    Ok(None)
}

/// The value of an annotation of the body, if it has it.
pub fn annotation<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    body.get("metadata")?.get("annotations")?.get(key)
}

/// Drop `metadata.annotations`, `metadata.labels`, `metadata` and `status` if empty.
pub(crate) fn remove_empty_stanzas(essence: &mut Value) {
    fn is_empty(v: Option<&Value>) -> bool {
        v.and_then(Value::as_object).is_some_and(|m| m.is_empty())
    }
    if let Some(meta) = essence.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["annotations", "labels"] {
            if is_empty(meta.get(key)) {
                meta.shift_remove(key);
            }
        }
    }
    if let Some(fields) = essence.as_object_mut() {
        for key in ["metadata", "status"] {
            if is_empty(fields.get(key)) {
                fields.shift_remove(key);
            }
        }
    }
}
