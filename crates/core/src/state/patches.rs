//! What the engine wants changed in an object: a JSON merge-patch plus the
//! finalizer operations (which a merge-patch cannot express for one list item).

use crate::util::dicts;
use serde_json::{Map, Value};

/// A change of the object's finalizers, applied under a version lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerOp {
    /// Add ours.
    Add,
    /// Remove ours.
    Remove,
}

/// What a cycle writes to an object: merge-patches, and a change of its finalizers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Patch {
    /// A JSON merge-patch (RFC 7386): nulls delete. What records the outcome: the handlers'
    /// results and own patches, their progress (and its purge).
    pub merge: Map<String, Value>,
    /// Merge-patches written after `merge`, in order: what declares a cause handled (the
    /// diff base). A crash between two writes then re-runs a handler; it never leaves the
    /// cause marked handled without its outcome.
    pub later: Vec<Map<String, Value>>,
    /// Our finalizer added or removed.
    pub finalizer: Option<FinalizerOp>,
}

impl Patch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.merge.is_empty() && self.later.iter().all(Map::is_empty) && self.finalizer.is_none()
    }

    /// Write `stage` (a patch of its own) after everything in this one.
    pub fn then(&mut self, stage: Patch) {
        self.later.push(stage.merge);
        self.later.extend(stage.later);
        self.finalizer = stage.finalizer.or(self.finalizer);
    }

    /// Set the field at this path (creating the dicts on the way).
    pub fn set(&mut self, path: &[String], value: Value) {
        let mut root = Value::Object(std::mem::take(&mut self.merge));
        dicts::ensure(&mut root, path, value);
        self.merge = into_map(root);
    }

    /// The value set at this path, if any.
    pub fn get(&self, path: &[String]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        dicts::resolve(self.merge.get(first)?, rest)
    }

    /// Remove a key from the patch itself (not from the object), and the parents it empties.
    pub fn unset(&mut self, path: &[String]) {
        let mut root = Value::Object(std::mem::take(&mut self.merge));
        dicts::remove(&mut root, path);
        for depth in (1..path.len()).rev() {
            let parent = &path[..depth];
            if dicts::resolve(&root, parent)
                .and_then(Value::as_object)
                .is_some_and(|m| m.is_empty())
            {
                dicts::remove(&mut root, parent);
            }
        }
        self.merge = into_map(root);
    }

    pub(crate) fn set_annotation(&mut self, key: &str, value: Value) {
        self.set(
            &["metadata".into(), "annotations".into(), key.into()],
            value,
        );
    }

    /// The value set for this annotation, if any (`null`: removed).
    pub fn annotation(&self, key: &str) -> Option<&Value> {
        self.get(&["metadata".into(), "annotations".into(), key.into()])
    }

    /// Merge another merge-patch (e.g. the handlers' own `patch` kwarg) into this one.
    pub fn merge_from(&mut self, other: &Value) {
        let mut root = Value::Object(std::mem::take(&mut self.merge));
        dicts::merge_patch_into_patch(&mut root, other);
        self.merge = into_map(root);
    }
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn building_patches() {
        let mut patch = Patch::default();
        assert!(patch.is_empty());
        patch.set_annotation("a/b", json!("x"));
        patch.set(&["status".into(), "h".into()], json!({"r": 1}));
        assert_eq!(patch.annotation("a/b"), Some(&json!("x")));
        patch.merge_from(&json!({"status": {"h": {"q": 2}}, "spec": {"z": null}}));
        assert_eq!(
            Value::Object(patch.merge.clone()),
            json!({"metadata": {"annotations": {"a/b": "x"}}, "status": {"h": {"r": 1, "q": 2}}, "spec": {"z": null}})
        );
        patch.unset(&["metadata".into(), "annotations".into(), "a/b".into()]);
        assert_eq!(patch.annotation("a/b"), None);
        assert!(
            !patch.merge.contains_key("metadata"),
            "emptied parents are gone"
        );
    }
}
