//! The "essence" of an object (what counts as a change) and its persisted last
//! handled version (`kopf.zalando.org/last-handled-configuration`), as Kopf has them.

use crate::state::conventions::{detect_marked_prefixes, KeyForming};
use crate::state::patches::Patch;
use crate::state::{decode_stored, fetch_annotation, remove_empty_stanzas, StorageResult};
use crate::util::dicts::{self, FieldPath};
use crate::util::encoding::to_python_json;
use serde_json::{Map, Value};
use std::sync::Arc;

/// One storage of the last handled essences (`settings.persistence.diffbase_storage`).
pub trait DiffBaseStorage: Send + Sync {
    /// The essence of a body: spec and the like, labels, useful annotations, extra fields.
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> StorageResult<Value>;
    /// The stored essence of the object, if any.
    fn fetch(&self, body: &Value) -> StorageResult<Option<Value>>;
    /// Store the essence into the patch.
    fn store(&self, body: &Value, patch: &mut Patch, essence: &Value) -> StorageResult<()>;
}

/// The storage-independent part of building an essence (Kopf's `DiffBaseStorage.build`).
pub(crate) fn build_essence(
    body: &Value,
    extra_fields: &[FieldPath],
    ignored: &[FieldPath],
) -> Value {
    // Only what is kept is copied: the metadata (managed fields, the stored diff base itself)
    // and the status are often most of a body, and this runs for every event.
    let mut essence: Map<String, Value> = body
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if let Some(meta) = body.get("metadata").and_then(Value::as_object) {
        let mut kept = Map::new();
        if let Some(labels) = meta.get("labels") {
            kept.insert("labels".into(), labels.clone());
        }
        if let Some(annotations) = meta.get("annotations") {
            kept.insert("annotations".into(), essential_annotations(annotations));
        }
        if !kept.is_empty() {
            essence.insert("metadata".into(), Value::Object(kept));
        }
    }
    let mut essence = Value::Object(essence);
    dicts::cherrypick(body, &mut essence, extra_fields);
    remove_empty_stanzas(&mut essence);
    for field in ignored {
        dicts::remove_pruning(&mut essence, field);
    }
    essence
}

/// The annotations without kubectl's last applied configuration and without the keys of
/// Kopf-based operators (by their marked prefixes).
fn essential_annotations(annotations: &Value) -> Value {
    let Some(annotations) = annotations.as_object() else {
        return annotations.clone();
    };
    let prefixes: Vec<String> = detect_marked_prefixes(annotations.keys())
        .into_iter()
        .map(|prefix| format!("{prefix}/"))
        .collect();
    Value::Object(
        annotations
            .iter()
            .filter(|(key, _)| {
                key.as_str() != "kubectl.kubernetes.io/last-applied-configuration"
                    && !prefixes.iter().any(|p| key.starts_with(p.as_str()))
            })
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
    )
}

/// The essence in an annotation, as JSON plus a newline (Kopf's default).
pub(crate) struct AnnotationsDiffBaseStorage {
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
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> StorageResult<Value> {
        let mut essence = build_essence(body, extra_fields, &self.ignored_fields);
        let own_keys = self.keys.make_keys(&self.key, Some(body));
        if let Some(annotations) =
            dicts::meta_mut(&mut essence, "annotations").and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| !own_keys.contains(key));
        }
        remove_empty_stanzas(&mut essence);
        Ok(essence)
    }

    fn fetch(&self, body: &Value) -> StorageResult<Option<Value>> {
        let keys = self.keys.make_keys(&self.key, Some(body));
        fetch_annotation(body, &keys, "AnnotationsDiffBaseStorage")
    }

    fn store(&self, body: &Value, patch: &mut Patch, essence: &Value) -> StorageResult<()> {
        // The newline makes kubectl show it unwrapped, as kubectl's own annotation.
        let encoded = format!("{}\n", to_python_json(essence));
        for key in self.keys.make_keys(&self.key, Some(body)).iter() {
            patch.set_annotation(key, Value::String(encoded.clone()));
        }
        if let Some(marker) = self.keys.marker() {
            let present = dicts::meta(body, "annotations")
                .and_then(|a| a.get(&marker))
                .is_some();
            if !present && patch.annotation(&marker).is_none() {
                patch.set_annotation(&marker, Value::String("yes".into()));
            }
        }
        Ok(())
    }
}

/// The essence as a JSON string in a status field (Kopf's `StatusDiffBaseStorage`).
pub(crate) struct StatusDiffBaseStorage {
    pub field: FieldPath,
    pub ignored_fields: Vec<FieldPath>,
}

impl DiffBaseStorage for StatusDiffBaseStorage {
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> StorageResult<Value> {
        let mut essence = build_essence(body, extra_fields, &self.ignored_fields);
        dicts::remove_pruning(&mut essence, &self.field);
        Ok(essence)
    }

    fn fetch(&self, body: &Value) -> StorageResult<Option<Value>> {
        match dicts::resolve(body, &self.field) {
            None | Some(Value::Null) => Ok(None),
            Some(encoded) => {
                let location = format!("field {}", self.field.join("."));
                decode_stored(encoded, "StatusDiffBaseStorage", "fetch", &location).map(Some)
            }
        }
    }

    fn store(&self, _body: &Value, patch: &mut Patch, essence: &Value) -> StorageResult<()> {
        patch.set(&self.field, Value::String(to_python_json(essence)));
        Ok(())
    }
}

/// Several storages: the first stored essence is read, all are written; each storage
/// also takes its own fields out of the essence (Kopf's `MultiDiffBaseStorage`).
pub(crate) struct MultiDiffBaseStorage {
    pub storages: Vec<Arc<dyn DiffBaseStorage>>,
    pub ignored_fields: Vec<FieldPath>,
}

impl DiffBaseStorage for MultiDiffBaseStorage {
    fn build(&self, body: &Value, extra_fields: &[FieldPath]) -> StorageResult<Value> {
        let mut essence = build_essence(body, extra_fields, &self.ignored_fields);
        for storage in &self.storages {
            // What is left of the body so far is the body the next storage sees.
            essence = storage.build(&essence, extra_fields)?;
        }
        Ok(essence)
    }

    fn fetch(&self, body: &Value) -> StorageResult<Option<Value>> {
        for storage in &self.storages {
            if let Some(essence) = storage.fetch(body)? {
                return Ok(Some(essence));
            }
        }
        Ok(None)
    }

    fn store(&self, body: &Value, patch: &mut Patch, essence: &Value) -> StorageResult<()> {
        (self.storages.iter()).try_for_each(|s| s.store(body, patch, essence))
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
        let essence = storage
            .build(&body, &[dicts::parse_field("status.st")])
            .unwrap();
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
        storage.store(&json!({}), &mut patch, &essence).unwrap();
        let expected = "{\"spec\":{\"field\":\"v\\u00e4lue\",\"n\":1}}\n";
        assert_eq!(
            patch.annotation("kopf.zalando.org/last-handled-configuration"),
            Some(&json!(expected))
        );
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": expected}}});
        assert_eq!(storage.fetch(&body).unwrap(), Some(essence));
    }

    #[test]
    fn status_and_multi_storages_as_kopf_has_them() {
        let status = StatusDiffBaseStorage {
            field: dicts::parse_field("status.kopf.last-handled-configuration"),
            ignored_fields: vec![dicts::parse_field("spec.skip")],
        };
        let body = json!({"spec": {"a": 1, "skip": 2}, "status": {"kopf": {"last-handled-configuration": "{}"}}});
        let extra = [dicts::parse_field("status.kopf")];
        assert_eq!(
            status.build(&body, &extra).unwrap(),
            json!({"spec": {"a": 1}})
        );
        let mut patch = Patch::default();
        status
            .store(&body, &mut patch, &json!({"spec": {"a": 1}}))
            .unwrap();
        assert_eq!(
            Value::Object(patch.merge.clone()),
            json!({"status": {"kopf": {"last-handled-configuration": "{\"spec\":{\"a\":1}}"}}})
        );
        assert_eq!(status.fetch(&body).unwrap(), Some(json!({})));

        let multi = MultiDiffBaseStorage {
            storages: vec![
                Arc::new(status),
                Arc::new(AnnotationsDiffBaseStorage::default()),
            ],
            ignored_fields: Vec::new(),
        };
        let mut patch = Patch::default();
        multi
            .store(&json!({}), &mut patch, &json!({"spec": {}}))
            .unwrap();
        assert_eq!(patch.merge.len(), 2, "both storages write: {patch:?}");
        let broken = json!({"status": {"kopf": {"last-handled-configuration": 5}}});
        assert!(multi.fetch(&broken).is_err());
    }
}
