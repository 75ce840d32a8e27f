//! The "essence" of an object (what counts as a change) and its persisted last
//! handled version (`kopf.zalando.org/last-handled-configuration`), as Kopf has them.

use crate::conventions::{detect_marked_prefixes, KeyForming};
use crate::dicts::{self, FieldPath};
use crate::encoding::to_python_json;
use crate::patches::Patch;
use crate::progress::remove_empty_stanzas;
use serde_json::{Map, Value};

pub trait DiffBaseStorage: Send + Sync {
    /// The essence of a body: spec and the like, labels, useful annotations, extra fields.
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> Value;
    fn fetch(&self, body: &Value) -> Option<Value>;
    fn store(&self, body: &Value, patch: &mut Patch, essence: &Value);
}

/// The storage-independent part of building an essence (Kopf's `DiffBaseStorage.build`).
pub fn build_essence(body: &Value, extra_fields: &[FieldPath], ignored: &[FieldPath]) -> Value {
    let mut essence: Map<String, Value> = body.as_object().cloned().unwrap_or_default();
    for key in ["apiVersion", "kind", "metadata", "status"] {
        essence.shift_remove(key);
    }
    let mut essence = Value::Object(essence);
    dicts::cherrypick(
        body,
        &mut essence,
        &[
            dicts::parse_field("metadata.labels"),
            dicts::parse_field("metadata.annotations"),
        ],
    );
    if let Some(annotations) = essence
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        let prefixes = detect_marked_prefixes(annotations.keys());
        annotations.retain(|key, _| {
            key != "kubectl.kubernetes.io/last-applied-configuration"
                && !prefixes.iter().any(|p| key.starts_with(&format!("{p}/")))
        });
    }
    dicts::cherrypick(body, &mut essence, extra_fields);
    remove_empty_stanzas(&mut essence);
    for field in ignored {
        dicts::remove(&mut essence, field);
    }
    essence
}

/// The essence in an annotation, as JSON plus a newline (Kopf's default).
pub struct AnnotationsDiffBaseStorage {
    pub keys: KeyForming,
    pub key: String,
    pub ignored_fields: Vec<FieldPath>,
}

impl AnnotationsDiffBaseStorage {
    pub fn new(prefix: &str, key: &str, v1: bool, ignored_fields: Vec<FieldPath>) -> Self {
        Self {
            keys: KeyForming::new(prefix, v1),
            key: key.to_owned(),
            ignored_fields,
        }
    }
}

impl Default for AnnotationsDiffBaseStorage {
    fn default() -> Self {
        Self::new(
            "kopf.zalando.org",
            "last-handled-configuration",
            true,
            Vec::new(),
        )
    }
}

impl DiffBaseStorage for AnnotationsDiffBaseStorage {
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> Value {
        let mut essence = build_essence(body, extra_fields, &self.ignored_fields);
        let own_keys = self.keys.make_keys(&self.key, Some(body));
        if let Some(annotations) = essence
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| !own_keys.contains(key));
        }
        remove_empty_stanzas(&mut essence);
        essence
    }

    fn fetch(&self, body: &Value) -> Option<Value> {
        let annotations = body.pointer("/metadata/annotations")?;
        self.keys
            .make_keys(&self.key, Some(body))
            .iter()
            .filter_map(|key| annotations.get(key)?.as_str())
            .filter_map(|encoded| serde_json::from_str::<Value>(encoded).ok())
            .find(|decoded| !decoded.is_null())
    }

    fn store(&self, body: &Value, patch: &mut Patch, essence: &Value) {
        // The newline makes kubectl show it unwrapped, as kubectl's own annotation.
        let encoded = format!("{}\n", to_python_json(essence));
        for key in self.keys.make_keys(&self.key, Some(body)) {
            patch.set_annotation(&key, Value::String(encoded.clone()));
        }
        if let Some(marker) = self.keys.marker() {
            let present = body
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(&marker))
                .is_some();
            if !present && patch.annotation(&marker).is_none() {
                patch.set_annotation(&marker, Value::String("yes".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn essence_keeps_what_matters() {
        let body = json!({
            "apiVersion": "v1", "kind": "X",
            "metadata": {"name": "n", "uid": "u", "resourceVersion": "1",
                         "labels": {"l": "1"},
                         "annotations": {"a": "1",
                                         "kubectl.kubernetes.io/last-applied-configuration": "{}",
                                         "kopf.zalando.org/last-handled-configuration": "{}",
                                         "kopf.zalando.org/handler": "{}",
                                         "other.op/kopf-managed": "yes", "other.op/x": "y"}},
            "spec": {"s": 1}, "status": {"st": 1, "kopf": {}}, "data": {"d": "e"},
        });
        let storage = AnnotationsDiffBaseStorage::default();
        let essence = storage.build(&body, &[dicts::parse_field("status.st")]);
        assert_eq!(
            essence,
            json!({"spec": {"s": 1}, "data": {"d": "e"},
                   "metadata": {"labels": {"l": "1"}, "annotations": {"a": "1"}},
                   "status": {"st": 1}})
        );
    }

    #[test]
    fn stored_as_kopf_stores_it() {
        let storage = AnnotationsDiffBaseStorage::default();
        let mut patch = Patch::default();
        let essence = json!({"spec": {"field": "välue", "n": 1}});
        storage.store(&json!({}), &mut patch, &essence);
        let expected = "{\"spec\":{\"field\":\"v\\u00e4lue\",\"n\":1}}\n";
        assert_eq!(
            patch.annotation("kopf.zalando.org/last-handled-configuration"),
            Some(&json!(expected))
        );
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": expected}}});
        assert_eq!(storage.fetch(&body), Some(essence));
    }
}
