//! Annotation keys as Kopf forms them: the prefix, the V1 and V2 key forms with
//! their shortening by a hashed suffix, the `-ofDRS` mark for ReplicaSets owned by
//! Deployments (Kubernetes copies a Deployment's annotations down to them), and the
//! `kopf-managed` marker by which Kopf-based operators recognise each other's keys.

use base64::Engine as _;
use blake2::digest::{Update, VariableOutput};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// Kubernetes limits the name part of an annotation key to 63 characters.
const MAX_NAME_LENGTH: usize = 63;
const KNOWN_MARKERS: &[&str] = &["kopf-managed"];
const KNOWN_PREFIXES: &[&str] = &["kopf.zalando.org"];

/// How one storage names its keys: a prefix and whether V1 keys are kept too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyForming {
    pub prefix: String,
    pub v1: bool,
    formed: FormedKeys,
}

/// The keys formed so far, by storage key: the same few keys (one per handler) are
/// needed for every event, and forming them hashes and formats several strings.
#[derive(Debug, Clone, Default)]
struct FormedKeys(Arc<Mutex<HashMap<String, Arc<[String]>>>>);

impl PartialEq for FormedKeys {
    fn eq(&self, _: &Self) -> bool {
        true // a cache: it does not make two formings different
    }
}

impl Eq for FormedKeys {}

impl KeyForming {
    pub fn new(prefix: impl Into<String>, v1: bool) -> Self {
        Self {
            prefix: prefix.into(),
            v1,
            formed: FormedKeys::default(),
        }
    }

    /// The annotation keys for a storage key, V2 first; V1 only if different.
    pub(crate) fn make_keys(&self, key: &str, body: Option<&Value>) -> Arc<[String]> {
        let key: Cow<'_, str> = match body {
            Some(body) if is_marked(body) => format!("{key}{DEPLOYMENT_MARK}").into(),
            _ => key.into(),
        };
        let mut formed = self.formed.0.lock().expect("not poisoned");
        if let Some(keys) = formed.get(key.as_ref()) {
            return keys.clone();
        }
        let v2 = self.make_v2_key(&key);
        let mut keys = vec![v2.clone()];
        if self.v1 {
            let v1 = self.make_v1_key(&key);
            if v1 != v2 {
                keys.push(v1);
            }
        }
        let keys: Arc<[String]> = keys.into();
        formed.insert(key.into_owned(), keys.clone());
        keys
    }

    fn prefix_part(&self) -> String {
        if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        }
    }

    /// V1: the limit applies to the whole key, prefix included (overly strict, kept for rollbacks).
    pub(crate) fn make_v1_key(&self, key: &str) -> String {
        let safe_key = make_safe_key(key);
        let prefix = self.prefix_part();
        let prefix_length = prefix.chars().count();
        let suffix = if safe_key.chars().count() <= MAX_NAME_LENGTH.saturating_sub(prefix_length) {
            String::new()
        } else {
            make_suffix(&safe_key)
        };
        let keep = MAX_NAME_LENGTH
            .saturating_sub(prefix_length)
            .saturating_sub(suffix.len());
        format!("{prefix}{}{suffix}", truncate(&safe_key, keep))
    }

    /// V2: the limit applies to the name part only; the hash is of the unsafe key.
    pub(crate) fn make_v2_key(&self, key: &str) -> String {
        let prefix = self.prefix_part();
        let suffix = if key.chars().count() > MAX_NAME_LENGTH {
            make_suffix(key)
        } else {
            String::new()
        };
        let keep = MAX_NAME_LENGTH.saturating_sub(suffix.len());
        format!("{prefix}{}{suffix}", truncate(&make_safe_key(key), keep))
    }

    /// Kopf brands non-`kopf.`-prefixed storages so that other operators skip their keys.
    pub(crate) fn marker(&self) -> Option<String> {
        if !self.prefix.is_empty() && !self.prefix.starts_with("kopf.") {
            Some(format!("{}/kopf-managed", self.prefix))
        } else {
            None
        }
    }
}

/// Python slices strings by characters, not bytes: do the same.
fn truncate(s: &str, chars: usize) -> &str {
    match s.char_indices().nth(chars) {
        Some((index, _)) => &s[..index],
        None => s,
    }
}

fn make_safe_key(key: &str) -> String {
    key.replace('/', ".").replace(['<', '>'], "_")
}

/// A consistent 4-byte BLAKE2b hash, base64 with `-.` as altchars, trimmed like Kopf's.
fn make_suffix(key: &str) -> String {
    let mut hasher = blake2::Blake2bVar::new(4).expect("4 is a valid digest size");
    hasher.update(key.as_bytes());
    let mut digest = [0u8; 4];
    hasher
        .finalize_variable(&mut digest)
        .expect("buffer size matches");
    let encoded = base64::engine::general_purpose::STANDARD
        .encode(digest)
        .replace('+', "-")
        .replace('/', ".");
    format!("-{encoded}")
        .trim_end_matches(['=', '-', '.'])
        .to_owned()
}

const DEPLOYMENT_MARK: &str = "-ofDRS";

/// The `-ofDRS` mark: a ReplicaSet owned by a Deployment keeps its own state apart.
fn is_marked(body: &Value) -> bool {
    let is_replicaset = body.get("kind").and_then(Value::as_str) == Some("ReplicaSet");
    let owned_by_deployment = body
        .get("metadata")
        .and_then(|meta| meta.get("ownerReferences"))
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|owner| owner.get("kind").and_then(Value::as_str) == Some("Deployment"))
        });
    is_replicaset && owned_by_deployment
}

/// The annotation prefixes used by Kopf-based operators (ours or others'), by their marks.
pub(crate) fn detect_marked_prefixes<'a>(
    keys: impl IntoIterator<Item = &'a String>,
) -> BTreeSet<String> {
    let mut prefixes = BTreeSet::new();
    for key in keys {
        let Some((prefix, name)) = key.split_once('/') else {
            continue;
        };
        let known = KNOWN_MARKERS.contains(&name)
            || KNOWN_PREFIXES.iter().any(|p| {
                prefix
                    .strip_suffix(p)
                    .is_some_and(|rest| rest.is_empty() || rest.ends_with('.'))
            });
        if known {
            prefixes.insert(prefix.to_owned());
        }
    }
    prefixes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected values were computed with Kopf 1.45.2's StorageKeyFormingConvention.
    #[test]
    fn short_keys_are_kept() {
        let forming = KeyForming::new("kopf.zalando.org", true);
        assert_eq!(
            forming.make_keys("create_fn", None).to_vec(),
            vec!["kopf.zalando.org/create_fn"]
        );
        assert_eq!(
            forming.make_keys("create_fn/sub<1>", None).to_vec(),
            vec!["kopf.zalando.org/create_fn.sub_1_"]
        );
    }

    #[test]
    fn long_keys_are_hashed() {
        let forming = KeyForming::new("kopf.zalando.org", true);
        let key = "a_very_long_handler_name_that_goes_on_and_on_and_on";
        assert_eq!(
            forming.make_keys(key, None).to_vec(),
            vec![
                format!("kopf.zalando.org/{key}"),
                "kopf.zalando.org/a_very_long_handler_name_that_goes_on_a-2xD4dQ".to_owned(),
            ]
        );
        assert_eq!(
            forming.make_keys(&"x".repeat(70), None).to_vec(),
            vec![
                format!("kopf.zalando.org/{}-j8bZbQ", "x".repeat(56)),
                format!("kopf.zalando.org/{}-j8bZbQ", "x".repeat(39)),
            ]
        );
        let unicode = "ünïcode".repeat(10);
        assert_eq!(
            forming.make_keys(&unicode, None).to_vec(),
            vec![
                format!("kopf.zalando.org/{}-J3POKQ", "ünïcode".repeat(8)),
                "kopf.zalando.org/ünïcodeünïcodeünïcodeünïcodeünïcodeünïc-J3POKQ".to_owned(),
            ]
        );
    }

    #[test]
    fn suffixes_match_kopf() {
        assert_eq!(make_suffix("hello"), "-6mcG9w");
    }

    #[test]
    fn replicasets_of_deployments_are_marked() {
        let rs = json!({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}});
        let forming = KeyForming::new("kopf.zalando.org", false);
        assert_eq!(
            *forming.make_keys("k", Some(&rs)),
            ["kopf.zalando.org/k-ofDRS"]
        );
        let alone = json!({"kind": "ReplicaSet"});
        assert_eq!(
            *forming.make_keys("k", Some(&alone)),
            ["kopf.zalando.org/k"]
        );
        // Formed once, then remembered: the same answers again.
        assert_eq!(
            *forming.make_keys("k", Some(&rs)),
            ["kopf.zalando.org/k-ofDRS"]
        );
    }

    #[test]
    fn markers_and_prefixes() {
        assert_eq!(KeyForming::new("kopf.zalando.org", true).marker(), None);
        assert_eq!(
            KeyForming::new("my-op.example.com", true)
                .marker()
                .as_deref(),
            Some("my-op.example.com/kopf-managed")
        );
        let keys: Vec<String> = vec![
            "kopf.zalando.org/x".into(),
            "other.com/kopf-managed".into(),
            "sub.kopf.zalando.org/y".into(),
            "unrelated.com/z".into(),
            "plain".into(),
        ];
        let found: Vec<String> = detect_marked_prefixes(&keys).into_iter().collect();
        assert_eq!(
            found,
            vec!["kopf.zalando.org", "other.com", "sub.kopf.zalando.org"]
        );
    }
}
