//! Secrets' values kept out of the diff base (`settings.secrets.diffbase_digests`, not in
//! Kopf): in a core Secret's essence, each value of `data` and `stringData` is replaced by a
//! digest of it, salted with the object's uid, so that a changed value is still a change while
//! the annotation (which `kubectl describe` shows) holds no value.
//!
//! A digest reads `blake2b:<64 hex digits>`: base64 (a Secret's `data`) has no colon, so a
//! stored value is known for a digest by its form alone, whichever way the setting is now.

use blake2::digest::{Update, VariableOutput};
use serde_json::Value;

const PREFIX: &str = "blake2b:";
const FIELDS: [&str; 2] = ["data", "stringData"];

/// Whether the body is a core Secret (the only kind whose essence is digested).
pub fn is_secret(body: &Value) -> bool {
    body.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && body.get("kind").and_then(Value::as_str) == Some("Secret")
}

fn is_digest(text: &str) -> bool {
    text.strip_prefix(PREFIX)
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A value's digest, salted with the object's uid (guessing a weak password from the digest
/// takes a search per object; a strong secret cannot be found from it).
pub fn digest(uid: &str, value: &str) -> String {
    let mut hasher = blake2::Blake2bVar::new(32).expect("32 is a valid digest size");
    hasher.update(&(uid.len() as u64).to_le_bytes());
    hasher.update(uid.as_bytes());
    hasher.update(value.as_bytes());
    let mut out = [0u8; 32];
    hasher
        .finalize_variable(&mut out)
        .expect("the buffer is the digest's size");
    let hex: String = out.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{PREFIX}{hex}")
}

/// Replaces the values of an essence's `data` and `stringData` that are not digests yet
/// (Kopf's diff base holds the values) by their digests.
pub fn digest_values(essence: &mut Value, uid: &str) {
    for field in FIELDS {
        if let Some(Value::Object(values)) = essence.get_mut(field) {
            for value in values.values_mut() {
                if let Value::String(text) = value {
                    if !is_digest(text) {
                        *text = digest(uid, text);
                    }
                }
            }
        }
    }
}

/// Whether a stored essence holds digests (written while the setting was on).
pub fn has_digests(essence: &Value) -> bool {
    any_value(essence, is_digest)
}

/// Whether a stored essence holds values, not digests (Kopf's, or written with the setting off).
pub fn has_values(essence: &Value) -> bool {
    any_value(essence, |text| !is_digest(text))
}

fn any_value(essence: &Value, test: impl Fn(&str) -> bool) -> bool {
    FIELDS.iter().any(|field| {
        (essence.get(*field).and_then(Value::as_object))
            .is_some_and(|values| values.values().any(|v| v.as_str().is_some_and(&test)))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_become_salted_digests_once() {
        let mut essence = json!({"data": {"password": "VG9wU2VjcmV0"}, "type": "Opaque"});
        digest_values(&mut essence, "uid-1");
        let first = essence["data"]["password"].as_str().unwrap().to_owned();
        assert!(is_digest(&first) && has_digests(&essence), "{first}");
        assert!(!has_values(&essence));
        assert_eq!(essence["type"], json!("Opaque"));
        digest_values(&mut essence, "uid-1"); // a digest stays as it is
        assert_eq!(essence["data"]["password"], json!(first));
        assert_ne!(digest("uid-2", "VG9wU2VjcmV0"), first, "salted by the uid");
        assert_ne!(
            digest("uid-1", "VG9wU2VjcmV1"),
            first,
            "a changed value is a change"
        );
    }

    #[test]
    fn values_are_not_taken_for_digests() {
        assert!(!has_digests(&json!({"data": {"a": "Ymxha2UyYjp4"}})));
        assert!(has_values(&json!({"data": {"a": "Ymxha2UyYjp4"}})));
        assert!(!has_digests(
            &json!({"spec": {"a": format!("{PREFIX}{}", "0".repeat(64))}})
        ));
        assert!(is_secret(&json!({"apiVersion": "v1", "kind": "Secret"})));
        assert!(!is_secret(
            &json!({"apiVersion": "v1", "kind": "ConfigMap"})
        ));
    }
}
