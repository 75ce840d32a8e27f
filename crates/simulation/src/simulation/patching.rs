//! Patches as the API server applies them to an object: JSON merge patches (RFC 7386), JSON
//! patches (RFC 6902), and strategic merge patches. The strategic ones are applied as merge
//! patches: the lists of built-in kinds that the server merges by key (containers by name, say)
//! are replaced whole. That is the simulation's one known difference here.

use crate::util::dicts;
use serde_json::Value;

/// How a patch is written (its request's `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json` (applied as a merge patch).
    StrategicMerge,
}

impl PatchType {
    /// The patch type of a request's content type, if it is one.
    pub fn of_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            _ => None,
        }
    }
}

/// The object with the patch applied; the server's message if the patch cannot apply.
pub fn apply(object: &Value, kind: PatchType, patch: &Value) -> Result<Value, String> {
    let mut patched = object.clone();
    match kind {
        PatchType::Merge | PatchType::StrategicMerge => {
            if !patch.is_object() {
                return Err("the patch is not a JSON object".into());
            }
            dicts::merge(&mut patched, patch);
        }
        PatchType::Json => {
            let operations: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| format!("the JSON patch is malformed: {e}"))?;
            json_patch::patch(&mut patched, &operations).map_err(|e| e.to_string())?;
        }
    }
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_patch_sets_and_removes_fields() {
        let object = json!({"spec": {"a": 1, "b": 2}, "status": {}});
        let patched = apply(
            &object,
            PatchType::Merge,
            &json!({"spec": {"a": null, "c": 3}}),
        );
        assert_eq!(
            patched.unwrap(),
            json!({"spec": {"b": 2, "c": 3}, "status": {}})
        );
    }

    #[test]
    fn a_json_patch_applies_its_operations_or_fails_whole() {
        let object = json!({"metadata": {"finalizers": ["a", "b"]}});
        let patch = json!([{"op": "remove", "path": "/metadata/finalizers/0"}]);
        let patched = apply(&object, PatchType::Json, &patch).unwrap();
        assert_eq!(patched, json!({"metadata": {"finalizers": ["b"]}}));
        let failing = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "x"}]);
        assert!(apply(&object, PatchType::Json, &failing).is_err());
        assert!(apply(&object, PatchType::Json, &json!({"op": "add"})).is_err());
    }

    #[test]
    fn the_content_types_are_read_without_their_parameters() {
        let merge = PatchType::of_content_type("application/merge-patch+json; charset=utf-8");
        assert_eq!(merge, Some(PatchType::Merge));
        assert_eq!(PatchType::of_content_type("application/json"), None);
    }
}
