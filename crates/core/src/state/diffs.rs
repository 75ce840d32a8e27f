//! Diffs between two essences, in Kopf's form: `(op, field, old, new)` items,
//! where lists are compared as whole values and `null` means absent.

use crate::util::dicts;
use serde::Serialize;
use serde_json::Value;

/// What happened to a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// It appeared.
    Add,
    /// Its value changed.
    Change,
    /// It disappeared.
    Remove,
}

/// One change of a diff, as Kopf's `(op, field, old, new)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffItem {
    /// What happened.
    pub op: Operation,
    /// The field's path.
    pub field: Vec<String>,
    /// The value before (`null` if none).
    pub old: Value,
    /// The value after (`null` if none).
    pub new: Value,
}

/// The changes between two essences, in Kopf's order.
pub type Diff = Vec<DiffItem>;

/// The differences from `a` to `b`; absent values are `None` (or JSON null).
pub fn diff(a: Option<&Value>, b: Option<&Value>) -> Diff {
    let mut items = Vec::new();
    diff_into(a, b, &mut Vec::new(), &mut items);
    items
}

fn diff_into(a: Option<&Value>, b: Option<&Value>, path: &mut Vec<String>, out: &mut Diff) {
    let a = a.filter(|v| !v.is_null());
    let b = b.filter(|v| !v.is_null());
    match (a, b) {
        (None, None) => {}
        (Some(a), Some(b)) if a == b => {}
        (None, Some(b)) => out.push(item(Operation::Add, path, Value::Null, b.clone())),
        (Some(a), None) => out.push(item(Operation::Remove, path, a.clone(), Value::Null)),
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            for (key, value) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
                path.push(key.clone());
                diff_into(None, Some(value), path, out);
                path.pop();
            }
            for (key, value) in a.iter().filter(|(k, _)| !b.contains_key(*k)) {
                path.push(key.clone());
                diff_into(Some(value), None, path, out);
                path.pop();
            }
            for (key, value) in a.iter().filter(|(k, _)| b.contains_key(*k)) {
                path.push(key.clone());
                diff_into(Some(value), b.get(key), path, out);
                path.pop();
            }
        }
        (Some(a), Some(b)) => out.push(item(Operation::Change, path, a.clone(), b.clone())),
    }
}

fn item(op: Operation, path: &[String], old: Value, new: Value) -> DiffItem {
    DiffItem {
        op,
        field: path.to_vec(),
        old,
        new,
    }
}

/// The part of a diff that concerns one field, with paths relative to it
/// (what field handlers receive as `diff`).
pub fn reduce(diff: &Diff, path: &[String]) -> Diff {
    let mut out = Vec::new();
    for entry in diff {
        if path.is_empty() {
            out.push(entry.clone());
        } else if entry.field.starts_with(path) {
            out.push(DiffItem {
                field: entry.field[path.len()..].to_vec(),
                ..entry.clone()
            });
        } else if path.starts_with(&entry.field) {
            // A whole parent was added/removed/changed: diff the values within it.
            let tail = &path[entry.field.len()..];
            let old = dicts::resolve(&entry.old, tail);
            let new = dicts::resolve(&entry.new, tail);
            diff_into(old, new, &mut Vec::new(), &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(path: &str) -> Vec<String> {
        dicts::parse_field(path)
    }

    #[test]
    fn nested_changes() {
        let a = json!({"spec": {"x": 1, "gone": true, "list": [1]}, "same": 0});
        let b = json!({"spec": {"x": 2, "new": "n", "list": [1, 2]}, "same": 0});
        let d = diff(Some(&a), Some(&b));
        assert_eq!(d.len(), 4);
        assert!(d.contains(&item(
            Operation::Add,
            &f("spec.new"),
            Value::Null,
            json!("n")
        )));
        assert!(d.contains(&item(
            Operation::Remove,
            &f("spec.gone"),
            json!(true),
            Value::Null
        )));
        assert!(d.contains(&item(Operation::Change, &f("spec.x"), json!(1), json!(2))));
        assert!(d.contains(&item(
            Operation::Change,
            &f("spec.list"),
            json!([1]),
            json!([1, 2])
        )));
    }

    #[test]
    fn absent_roots() {
        assert_eq!(diff(None, None), vec![]);
        assert_eq!(
            diff(None, Some(&json!({"a": 1}))),
            vec![item(Operation::Add, &[], Value::Null, json!({"a": 1}))]
        );
        assert_eq!(diff(Some(&json!(null)), None), vec![]);
    }

    #[test]
    fn reducing_to_a_field() {
        let a = json!({"spec": {"x": {"y": 1}}});
        let b = json!({"spec": {"x": {"y": 2}, "z": 1}});
        let d = diff(Some(&a), Some(&b));
        assert_eq!(
            reduce(&d, &f("spec.x")),
            vec![item(Operation::Change, &f("y"), json!(1), json!(2))]
        );
        let whole = diff(None, Some(&b));
        assert_eq!(
            reduce(&whole, &f("spec.x.y")),
            vec![item(Operation::Add, &[], Value::Null, json!(2))]
        );
        assert_eq!(reduce(&d, &f("spec.none")), vec![]);
    }
}
