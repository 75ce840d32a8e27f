//! What the core's log lines never show: the values of core Secrets' `data` and `stringData`,
//! and of the field paths that `settings.secrets.fields` names for any resource (custom ones
//! that carry credentials). Keys stay, values become [`MARKER`]; the JSON held in annotations
//! (kubectl's `last-applied-configuration`, Kopf's diff base) is redacted the same way.
//!
//! Each operator has its own fields: its run is [`scoped`] with them, and the tasks it spawns
//! (through `util::tasks`) carry them, as they carry its log subscriber; several operators in
//! one process redact each by its own settings. A log line is formatted with [`redacted`] (a
//! body or a patch) or [`redacted_at`] (a value found at a field, as a diff's).

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use crate::util::dicts::FieldPath;
use crate::util::logging::ObjectRef;

/// What a redacted value is shown as.
pub const MARKER: &str = "<redacted>";

/// The field paths of an operator's `settings.secrets.fields`.
pub type Fields = Arc<Vec<FieldPath>>;

tokio::task_local! {
    static FIELDS: Fields;
}

/// Run an operator's future with its field paths redacted for every resource (besides
/// Secrets' `data` and `stringData`), in it and in the tasks it spawns.
pub async fn scoped<F: Future>(fields: Vec<FieldPath>, future: F) -> F::Output {
    FIELDS.scope(Arc::new(fields), future).await
}

/// The current operator's fields (none outside of an operator), for a task it spawns.
pub fn current() -> Fields {
    FIELDS.try_with(Arc::clone).unwrap_or_default()
}

/// A future that runs with these fields (a task spawned with its spawner's).
pub fn carrying<F: Future>(fields: Fields, future: F) -> impl Future<Output = F::Output> {
    FIELDS.scope(fields, future)
}

fn paths(object: &ObjectRef) -> Vec<FieldPath> {
    let mut paths = FIELDS
        .try_with(|fields| fields.as_ref().clone())
        .unwrap_or_default();
    if object.api_version == "v1" && object.kind == "Secret" {
        paths.push(vec!["data".into()]);
        paths.push(vec!["stringData".into()]);
    }
    paths
}

/// An object's body, or a patch of it, as a log line may show it.
pub fn redacted<'a>(object: &ObjectRef, value: &'a Value) -> Cow<'a, Value> {
    redacted_at(object, &[], value)
}

/// A value found at `field` of the object (a diff's old or new side), as a log line may show it.
pub fn redacted_at<'a>(object: &ObjectRef, field: &[String], value: &'a Value) -> Cow<'a, Value> {
    let paths = paths(object);
    if paths.is_empty() {
        return Cow::Borrowed(value);
    }
    let mut copy = value.clone();
    let mut at = field.to_vec();
    if redact(&paths, &mut at, &mut copy) {
        Cow::Owned(copy)
    } else {
        Cow::Borrowed(value)
    }
}

/// Redacts in place what lies on or under the paths; whether anything changed.
fn redact(paths: &[FieldPath], at: &mut FieldPath, value: &mut Value) -> bool {
    if paths.iter().any(|path| at.starts_with(path)) {
        return hide(value);
    }
    if is_annotation(at) {
        return redact_annotation(paths, value);
    }
    let Value::Object(map) = value else {
        return false;
    };
    let mut changed = false;
    for (key, item) in map.iter_mut() {
        at.push(key.clone());
        if leads_somewhere(paths, at) {
            changed |= redact(paths, at, item);
        }
        at.pop();
    }
    changed
}

/// Whether a path to redact, or an annotation, lies on or under this field.
fn leads_somewhere(paths: &[FieldPath], at: &[String]) -> bool {
    let annotations = ["metadata", "annotations"];
    paths.iter().any(|path| path.starts_with(at))
        || (at.len() <= 2 && at.iter().zip(annotations).all(|(a, b)| a == b))
        || is_annotation(at)
}

fn is_annotation(at: &[String]) -> bool {
    at.len() == 3 && at[0] == "metadata" && at[1] == "annotations"
}

/// An annotation whose value is an object's JSON (kubectl's, Kopf's diff base): redacted as a body.
fn redact_annotation(paths: &[FieldPath], value: &mut Value) -> bool {
    let Value::String(text) = value else {
        return false;
    };
    let Ok(mut parsed) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    if !parsed.is_object() || !redact(paths, &mut Vec::new(), &mut parsed) {
        return false;
    }
    *value = Value::String(parsed.to_string());
    true
}

/// Keys stay, every value under them becomes the marker (null stays null: it says nothing).
fn hide(value: &mut Value) -> bool {
    match value {
        Value::Null => false,
        Value::Object(map) => map
            .values_mut()
            .fold(false, |changed, item| hide(item) | changed),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| hide(item) | changed),
        other => {
            *other = Value::String(MARKER.into());
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secret() -> ObjectRef {
        ObjectRef::of(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))
    }

    #[test]
    fn a_secrets_values_are_hidden_and_its_keys_kept() {
        let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                          "data": {"password": "VG9wU2VjcmV0"}, "stringData": {"token": "t0k3n"},
                          "type": "Opaque"});
        let shown = redacted(&secret(), &body);
        assert_eq!(shown["data"], json!({"password": MARKER}));
        assert_eq!(shown["stringData"], json!({"token": MARKER}));
        assert_eq!(shown["type"], json!("Opaque"));
    }

    #[test]
    fn the_json_in_annotations_is_redacted_as_a_body() {
        let applied = json!({"data": {"password": "VG9wU2VjcmV0"}, "kind": "Secret"}).to_string();
        let patch = json!({"metadata": {"annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": applied,
            "kopf.zalando.org/last-handled-configuration": "{\"data\":{\"password\":\"VG9wU2VjcmV0\"}}",
            "plain": "VG9wU2VjcmV0",
        }}});
        let shown = redacted(&secret(), &patch).to_string();
        assert!(!shown.contains("VG9wU2VjcmV0\\\""), "{shown}");
        assert_eq!(shown.matches(MARKER).count(), 2, "{shown}");
        // An annotation that is not an object's JSON is the user's own text: left as it is.
        assert!(shown.contains("\"plain\":\"VG9wU2VjcmV0\""), "{shown}");
    }

    #[test]
    fn a_diffs_values_are_redacted_by_where_they_are() {
        let object = secret();
        let field = |path: &[&str]| path.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let at =
            |path: &[&str], value: Value| redacted_at(&object, &field(path), &value).into_owned();
        assert_eq!(at(&["data", "password"], json!("VG9w")), json!(MARKER));
        assert_eq!(at(&["data"], json!({"a": "b"})), json!({"a": MARKER}));
        assert_eq!(at(&["type"], json!("Opaque")), json!("Opaque"));
        assert_eq!(at(&["data", "gone"], Value::Null), Value::Null);
    }

    #[tokio::test]
    async fn each_operators_fields_are_redacted_in_any_resource_and_in_its_tasks_only() {
        let greeting =
            ObjectRef::of(&json!({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting"}));
        let body = json!({"spec": {"credentials": {"user": "ada", "password": "p4ss"}, "who": "Ada"},
                          "data": {"kept": "x"}});
        assert!(matches!(redacted(&greeting, &body), Cow::Borrowed(_)));
        let password = vec!["spec".into(), "credentials".into(), "password".into()];
        let user = vec!["spec".into(), "credentials".into(), "user".into()];
        // Two operators in one process, each with its own fields, each spawning a task.
        let shown = |fields: Vec<FieldPath>| {
            let (body, greeting) = (body.clone(), greeting.clone());
            scoped(fields, async move {
                let spawned =
                    crate::util::tasks::spawn(
                        async move { redacted(&greeting, &body).into_owned() },
                    );
                spawned.await.expect("the task ends")
            })
        };
        let (first, second) = tokio::join!(shown(vec![password]), shown(vec![user]));
        assert_eq!(
            first["spec"],
            json!({"credentials": {"user": "ada", "password": MARKER}, "who": "Ada"})
        );
        assert_eq!(
            second["spec"],
            json!({"credentials": {"user": MARKER, "password": "p4ss"}, "who": "Ada"})
        );
        assert_eq!(first["data"], json!({"kept": "x"}));
        assert!(matches!(redacted(&greeting, &body), Cow::Borrowed(_)));
    }
}
