//! Paths into JSON documents: resolving, setting and removing nested fields,
//! as handlers and storages address them (`spec.field`, `status.kopf.progress`).

use serde_json::{Map, Value};

/// A field path: `["spec", "replicas"]`. Parsed from Kopf's dotted form.
pub type FieldPath = Vec<String>;

/// `"spec.replicas"` → `["spec", "replicas"]`; an empty string is the root (for tests: the
/// paths come parsed from Python).
#[cfg(test)]
pub(crate) fn parse_field(spec: &str) -> FieldPath {
    if spec.is_empty() {
        Vec::new()
    } else {
        spec.split('.').map(str::to_owned).collect()
    }
}

/// The value at a path, if every step exists and is an object.
pub fn resolve<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |current, key| current.as_object()?.get(key))
}

/// `metadata.<key>` of an object's body: a JSON pointer would allocate at every step,
/// and these are read for every event.
pub fn meta<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    body.get("metadata")?.get(key)
}

/// Whether the object's `metadata.finalizers` name this finalizer.
pub fn has_finalizer(body: &Value, finalizer: &str) -> bool {
    meta(body, "finalizers")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|f| f.as_str() == Some(finalizer)))
}

/// The mutable `metadata.<key>` of an object's body.
pub(crate) fn meta_mut<'a>(body: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    body.get_mut("metadata")?.get_mut(key)
}

/// The value at a path, creating the intermediate objects on the way.
/// Non-object intermediates are replaced: the caller asked for that path to exist.
pub(crate) fn ensure(value: &mut Value, path: &[String], new: Value) {
    let Some((last, parents)) = path.split_last() else {
        *value = new;
        return;
    };
    let mut current = value;
    for key in parents {
        current = object_mut(current)
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    object_mut(current).insert(last.clone(), new);
}

/// Remove the value at a path (if present); returns what was there.
pub fn remove(value: &mut Value, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut current = value;
    for key in parents {
        current = current.as_object_mut()?.get_mut(key)?;
    }
    current.as_object_mut()?.shift_remove(last)
}

/// Remove the value at a path, then every object on the path that is (or already was)
/// empty, as Kopf's storages clean essences: `{"status": {"kopf": {}}}` leaves nothing.
pub(crate) fn remove_pruning(value: &mut Value, path: &[String]) {
    let Some((head, rest)) = path.split_first() else {
        return;
    };
    let Some(fields) = value.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        fields.shift_remove(head);
    } else if let Some(child) = fields.get_mut(head) {
        if child.is_object() {
            remove_pruning(child, rest);
            if child.as_object().is_some_and(Map::is_empty) {
                fields.shift_remove(head);
            }
        }
    }
}

/// Copy the given fields (if present) from `src` into `dst` at the same paths.
pub(crate) fn cherrypick(src: &Value, dst: &mut Value, fields: &[FieldPath]) {
    for field in fields {
        if let Some(found) = resolve(src, field) {
            ensure(dst, field, found.clone());
        }
    }
}

/// Merge `patch` into `target` as a JSON merge-patch (RFC 7386): nulls delete.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            let target_fields = object_mut(target);
            for (key, value) in fields {
                if value.is_null() {
                    target_fields.shift_remove(key);
                } else {
                    merge(
                        target_fields.entry(key.clone()).or_insert(Value::Null),
                        value,
                    );
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Combine two merge-patches: unlike [`merge`], nulls are kept (they are deletions to send).
pub fn merge_patch_into_patch(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch) {
        (Some(target_fields), Value::Object(fields)) => merge_patch_maps(target_fields, fields),
        _ => *target = patch.clone(),
    }
}

/// [`merge_patch_into_patch`] of two merge-patches' top-level maps.
pub fn merge_patch_maps(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match target.get_mut(key) {
            Some(existing) if existing.is_object() && value.is_object() => {
                merge_patch_into_patch(existing, value)
            }
            _ => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

fn object_mut(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    value.as_object_mut().expect("just made an object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pruning_removal_drops_emptied_and_empty_parents() {
        let mut v = json!({"status": {"kopf": {"progress": {"h": 1}}}, "spec": {}});
        remove_pruning(&mut v, &parse_field("status.kopf.progress"));
        assert_eq!(v, json!({"spec": {}}));
        let mut v = json!({"status": {"kopf": {}, "x": 1}});
        remove_pruning(&mut v, &parse_field("status.kopf.progress"));
        assert_eq!(v, json!({"status": {"x": 1}}));
        let mut v = json!({"spec": "text"});
        remove_pruning(&mut v, &parse_field("spec.x"));
        assert_eq!(v, json!({"spec": "text"}));
    }

    #[test]
    fn resolving_and_ensuring() {
        let mut doc = json!({"spec": {"a": {"b": 1}}, "list": [1]});
        assert_eq!(resolve(&doc, &parse_field("spec.a.b")), Some(&json!(1)));
        assert_eq!(resolve(&doc, &parse_field("spec.x")), None);
        assert_eq!(resolve(&doc, &parse_field("list.0")), None);
        assert_eq!(resolve(&doc, &parse_field("")), Some(&doc.clone()));
        ensure(&mut doc, &parse_field("status.x.y"), json!("z"));
        assert_eq!(doc["status"], json!({"x": {"y": "z"}}));
        assert_eq!(remove(&mut doc, &parse_field("spec.a.b")), Some(json!(1)));
        assert_eq!(doc["spec"], json!({"a": {}}));
        assert_eq!(remove(&mut doc, &parse_field("nothing.here")), None);
    }

    #[test]
    fn merge_patch_semantics() {
        let mut doc = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge(
            &mut doc,
            &json!({"a": null, "b": {"c": null, "e": [1]}, "f": "g"}),
        );
        assert_eq!(doc, json!({"b": {"d": 3, "e": [1]}, "f": "g"}));
    }

    #[test]
    fn cherrypicking() {
        let src = json!({"metadata": {"labels": {"a": "b"}, "uid": "x"}});
        let mut dst = json!({});
        cherrypick(
            &src,
            &mut dst,
            &[parse_field("metadata.labels"), parse_field("metadata.nope")],
        );
        assert_eq!(dst, json!({"metadata": {"labels": {"a": "b"}}}));
    }
}
