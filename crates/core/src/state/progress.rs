//! Where handlers' progress is persisted between processing cycles, in Kopf's
//! formats: JSON records in annotations (`kopf.zalando.org/<handler id>`), or
//! a `status.kopf.progress.<handler id>` stanza; Kopf 1.45's default reads both
//! and writes only the annotations.

use crate::state::conventions::KeyForming;
use crate::state::patches::Patch;
use crate::state::{annotation, fetch_annotation, remove_empty_stanzas, StorageResult};
use crate::util::dicts::{self, FieldPath};
use crate::util::encoding::to_python_json;
use serde_json::Value;
use std::sync::Arc;

/// One storage of handlers' progress records.
pub trait ProgressStorage: Send + Sync {
    /// The handler's stored record, if any.
    fn fetch(&self, key: &str, body: &Value) -> StorageResult<Option<Value>>;
    /// Store the handler's record into the patch.
    fn store(
        &self,
        key: &str,
        record: &Value,
        body: &Value,
        patch: &mut Patch,
    ) -> StorageResult<()>;
    /// Remove the handler's record in the patch.
    fn purge(&self, key: &str, body: &Value, patch: &mut Patch) -> StorageResult<()>;
    /// Mark the object touched (a dummy change that brings a new event), or unmark it (`None`).
    fn touch(&self, body: &Value, patch: &mut Patch, value: Option<&str>) -> StorageResult<()>;
    /// Remove the storage's own traces from an essence, so they never count as changes.
    fn clear(&self, essence: &mut Value) -> StorageResult<()>;
    /// Called after a batch of stores or purges (for storages that write in batches).
    fn flush(&self) -> StorageResult<()> {
        Ok(())
    }
}

/// Progress as JSON strings in annotations (Kopf's `AnnotationsProgressStorage`).
pub(crate) struct AnnotationsProgressStorage {
    pub keys: KeyForming,
    pub verbose: bool,
    pub touch_key: String,
}

impl AnnotationsProgressStorage {
    pub fn new(prefix: &str, verbose: bool, touch_key: &str, v1: bool) -> Self {
        Self {
            keys: KeyForming::new(prefix, v1),
            verbose,
            touch_key: touch_key.to_owned(),
        }
    }

    fn store_marker(&self, body: &Value, patch: &mut Patch) {
        if let Some(marker) = self.keys.marker() {
            if annotation(body, &marker).is_none() && patch.annotation(&marker).is_none() {
                patch.set_annotation(&marker, Value::String("yes".into()));
            }
        }
    }
}

/// Null a field in the patch if the object has it; drop it from the patch otherwise.
fn purge_field(path: &[String], body: &Value, patch: &mut Patch) {
    if dicts::resolve(body, path).is_some() {
        patch.set(path, Value::Null);
    } else if patch.get(path).is_some() {
        patch.unset(path);
    }
}

fn annotation_path(key: &str) -> FieldPath {
    vec!["metadata".into(), "annotations".into(), key.into()]
}

impl ProgressStorage for AnnotationsProgressStorage {
    fn fetch(&self, key: &str, body: &Value) -> StorageResult<Option<Value>> {
        let keys = self.keys.make_keys(key, Some(body));
        fetch_annotation(body, &keys, "AnnotationsProgressStorage")
    }

    fn store(
        &self,
        key: &str,
        record: &Value,
        body: &Value,
        patch: &mut Patch,
    ) -> StorageResult<()> {
        let mut decoded = record.clone();
        if let (false, Some(fields)) = (self.verbose, decoded.as_object_mut()) {
            fields.retain(|_, v| !v.is_null());
        }
        let encoded = to_python_json(&decoded);
        for full_key in self.keys.make_keys(key, Some(body)).iter() {
            patch.set_annotation(full_key, Value::String(encoded.clone()));
        }
        self.store_marker(body, patch);
        Ok(())
    }

    fn purge(&self, key: &str, body: &Value, patch: &mut Patch) -> StorageResult<()> {
        for full_key in self.keys.make_keys(key, Some(body)).iter() {
            purge_field(&annotation_path(full_key), body, patch);
        }
        Ok(())
    }

    fn touch(&self, body: &Value, patch: &mut Patch, value: Option<&str>) -> StorageResult<()> {
        for full_key in self.keys.make_keys(&self.touch_key, Some(body)).iter() {
            let current = annotation(body, full_key).and_then(Value::as_str);
            if current != value {
                patch.set_annotation(full_key, value.map_or(Value::Null, Value::from));
                self.store_marker(body, patch);
            }
        }
        Ok(())
    }

    fn clear(&self, essence: &mut Value) -> StorageResult<()> {
        let prefix = format!("{}/", self.keys.prefix);
        if let Some(annotations) =
            dicts::meta_mut(essence, "annotations").and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| !key.starts_with(&prefix));
        }
        remove_empty_stanzas(essence);
        Ok(())
    }
}

/// Progress in a status stanza (Kopf's `StatusProgressStorage`), optionally read-only.
pub(crate) struct StatusProgressStorage {
    pub field: FieldPath,
    pub touch_field: FieldPath,
    pub writable: bool,
}

impl StatusProgressStorage {
    fn key_field(&self, key: &str) -> FieldPath {
        let mut path = self.field.clone();
        path.push(key.to_owned());
        path
    }
}

impl ProgressStorage for StatusProgressStorage {
    fn fetch(&self, key: &str, body: &Value) -> StorageResult<Option<Value>> {
        Ok(dicts::resolve(body, &self.key_field(key))
            .filter(|v| !v.is_null())
            .cloned())
    }

    fn store(
        &self,
        key: &str,
        record: &Value,
        _body: &Value,
        patch: &mut Patch,
    ) -> StorageResult<()> {
        if self.writable {
            patch.set(&self.key_field(key), record.clone());
        }
        Ok(())
    }

    fn purge(&self, key: &str, body: &Value, patch: &mut Patch) -> StorageResult<()> {
        purge_field(&self.key_field(key), body, patch);
        Ok(())
    }

    fn touch(&self, body: &Value, patch: &mut Patch, value: Option<&str>) -> StorageResult<()> {
        if self.writable {
            let current = dicts::resolve(body, &self.touch_field).and_then(Value::as_str);
            if current != value {
                patch.set(&self.touch_field, value.map_or(Value::Null, Value::from));
            }
        }
        Ok(())
    }

    fn clear(&self, essence: &mut Value) -> StorageResult<()> {
        dicts::remove_pruning(essence, &self.field);
        remove_empty_stanzas(essence);
        Ok(())
    }
}

/// Several storages: read from the first that has a record, write to all.
pub(crate) struct MultiProgressStorage {
    pub storages: Vec<Arc<dyn ProgressStorage>>,
}

impl ProgressStorage for MultiProgressStorage {
    fn fetch(&self, key: &str, body: &Value) -> StorageResult<Option<Value>> {
        for storage in &self.storages {
            if let Some(record) = storage.fetch(key, body)? {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }
    fn store(
        &self,
        key: &str,
        record: &Value,
        body: &Value,
        patch: &mut Patch,
    ) -> StorageResult<()> {
        (self.storages.iter()).try_for_each(|s| s.store(key, record, body, patch))
    }
    fn purge(&self, key: &str, body: &Value, patch: &mut Patch) -> StorageResult<()> {
        (self.storages.iter()).try_for_each(|s| s.purge(key, body, patch))
    }
    fn touch(&self, body: &Value, patch: &mut Patch, value: Option<&str>) -> StorageResult<()> {
        (self.storages.iter()).try_for_each(|s| s.touch(body, patch, value))
    }
    fn clear(&self, essence: &mut Value) -> StorageResult<()> {
        (self.storages.iter()).try_for_each(|s| s.clear(essence))
    }
    fn flush(&self) -> StorageResult<()> {
        self.storages.iter().try_for_each(|s| s.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotations_roundtrip_in_kopf_format() {
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let body = json!({"metadata": {"annotations": {}}});
        let mut patch = Patch::default();
        let record = json!({"started": "2026-01-01T00:00:00.000000+00:00", "stopped": null,
                            "delayed": null, "purpose": "create", "retries": 1, "success": true,
                            "failure": false, "message": null, "subrefs": null});
        storage
            .store("create_fn", &record, &body, &mut patch)
            .unwrap();
        assert_eq!(
            patch.annotation("kopf.zalando.org/create_fn"),
            Some(&json!(
                r#"{"started":"2026-01-01T00:00:00.000000+00:00","purpose":"create","retries":1,"success":true,"failure":false}"#
            ))
        );
        assert!(patch.get(&dicts::parse_field("status")).is_none());

        let mut stored = body.clone();
        dicts::merge(&mut stored, &Value::Object(patch.merge.clone()));
        assert_eq!(
            storage.fetch("create_fn", &stored).unwrap().unwrap()["retries"],
            json!(1)
        );

        let mut purge = Patch::default();
        storage.purge("create_fn", &stored, &mut purge).unwrap();
        assert_eq!(
            purge.annotation("kopf.zalando.org/create_fn"),
            Some(&Value::Null)
        );
    }

    #[test]
    fn legacy_status_progress_is_read_and_purged() {
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let body = json!({"status": {"kopf": {"progress": {"h": {"retries": 2}}}}});
        assert_eq!(
            storage.fetch("h", &body).unwrap(),
            Some(json!({"retries": 2}))
        );
        let mut patch = Patch::default();
        storage.purge("h", &body, &mut patch).unwrap();
        assert_eq!(
            Value::Object(patch.merge),
            json!({"status": {"kopf": {"progress": {"h": null}}}})
        );
    }

    #[test]
    fn prefixed_storages_brand_their_keys() {
        let storage =
            AnnotationsProgressStorage::new("my-op.example.com", false, "touch-dummy", true);
        let mut patch = Patch::default();
        storage
            .store("h", &json!({"retries": 0}), &json!({}), &mut patch)
            .unwrap();
        assert_eq!(
            patch.annotation("my-op.example.com/kopf-managed"),
            Some(&json!("yes"))
        );
    }

    #[test]
    fn clearing_essences() {
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let mut essence = json!({"metadata": {"annotations": {"kopf.zalando.org/x": "1"}},
                                 "status": {"kopf": {"progress": {}}}, "spec": {}});
        storage.clear(&mut essence).unwrap();
        assert_eq!(
            essence,
            json!({"spec": {}}),
            "emptied stanzas go, as in Kopf"
        );
    }

    #[test]
    fn malformed_records_are_errors() {
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/h": "{not json"}}});
        let error = storage.fetch("h", &body).unwrap_err();
        assert!(error.to_string().starts_with(
            "AnnotationsProgressStorage.fetch() failed: annotation kopf.zalando.org/h: malformed JSON"
        ));
    }
}
