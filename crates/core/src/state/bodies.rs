//! An object's body as the engine keeps it between events: compact JSON text.
//!
//! A parsed body is a tree of maps and strings, each its own allocation: a small custom
//! object of 450 bytes of JSON takes 4–5 KB as a tree, and a pod's tree tens of KB. Kept
//! for every object with a daemon or timer, the trees were most of the core's memory in
//! such operators. Between events nothing reads the tree: Python gets the text itself and
//! converts what a handler reads (`binding/bodies.rs`); a runner parses it back only to
//! patch the object or for a log line about it, a few microseconds each time.

use crate::util::logging::ObjectRef;
use region::apart;
use serde_json::Value;
use std::sync::Arc;

/// An object's body as compact JSON text: what waits in queues and for daemons, where a tree would take several times the memory.
pub struct CompactBody {
    text: Box<str>,
}

/// Only the size: a body may hold a secret's data, and debug output may reach logs.
impl std::fmt::Debug for CompactBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompactBody({} bytes)", self.text.len())
    }
}

impl CompactBody {
    /// The body, made into text.
    pub fn of(body: &Value) -> Self {
        Self {
            text: text_of(body).into_boxed_str(),
        }
    }

    /// The same, for a body kept for long (a daemon's or timer's live body): its text is
    /// copied `apart` once made, out of the heap where events come and go. Interleaved
    /// with the listing's short-lived trees, timers' bodies had kept freed memory from going
    /// back to the system (docs/benchmarks.md, "Figures behind the code").
    pub fn kept(body: &Value) -> Arc<Self> {
        let text = text_of(body);
        apart(|| {
            Arc::new(Self {
                text: Box::from(text.as_str()),
            })
        })
    }

    /// The body as a tree again (an equal one: numbers, strings and key order round-trip).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null) // written from a `Value`
    }

    /// The body's compact JSON.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The object's identity, for log lines: only those fields are read of the text (a
    /// timer's "succeeded" line is written for every call; parsing the whole body for it
    /// was a fifth of the core's time per call).
    pub fn object(&self) -> ObjectRef {
        let Ok(identity) = serde_json::from_str::<Identity>(&self.text) else {
            return ObjectRef::default(); // (not written from an object's `Value`)
        };
        let meta = identity.metadata.unwrap_or_default();
        ObjectRef {
            api_version: identity.api_version.unwrap_or_default(),
            kind: identity.kind.unwrap_or_default(),
            namespace: meta.namespace,
            name: meta.name,
            uid: meta.uid,
        }
    }
}

/// What `ObjectRef::of` reads of a body; the rest of the text is skipped, not built.
#[derive(serde::Deserialize)]
struct Identity {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<IdentityMeta>,
}

#[derive(serde::Deserialize, Default)]
struct IdentityMeta {
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

fn text_of(body: &Value) -> String {
    // A `Value` always serializes: its map keys are strings.
    serde_json::to_string(body).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_identity_is_read_as_of_the_whole_body() {
        let bodies = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n", "namespace": "ns",
                "uid": "u", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            json!({"kind": "Thing", "metadata": {"name": null, "uid": "u"}}),
            json!({"spec": {}}),
        ];
        for body in bodies {
            assert_eq!(
                CompactBody::of(&body).object(),
                ObjectRef::of(&body),
                "{body}"
            );
        }
    }

    #[test]
    fn a_kept_body_is_the_same_text_kept_apart() {
        let body = json!({"metadata": {"name": "n"}, "spec": {"list": [1, 2], "text": "x"}});
        let kept = CompactBody::kept(&body);
        assert_eq!(kept.text(), CompactBody::of(&body).text());
        assert!(region::holds(kept.text()), "no region on this system?");
        assert!(!region::holds(CompactBody::of(&body).text()));
    }

    #[test]
    fn a_body_round_trips_exactly() {
        let body = json!({
            "apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
            "metadata": {"name": "n", "namespace": "ns", "uid": "u", "generation": 3,
                         "labels": {"z": "1", "a": "2"}},
            "spec": {"ratio": 0.1, "big": u64::MAX, "neg": -5, "text": "\u{e9}\"\n", "none": null,
                     "list": [1, {"b": true}], "empty": {}},
        });
        let compact = CompactBody::of(&body);
        assert_eq!(compact.value(), body);
        let keys: Vec<_> = compact.value()["metadata"]["labels"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["z", "a"]); // the order as received
        let object = compact.object();
        assert_eq!(object.name.as_deref(), Some("n"));
        assert_eq!(object.namespace.as_deref(), Some("ns"));
        assert_eq!(object.uid.as_deref(), Some("u"));
    }

    #[test]
    fn the_text_is_compact_json() {
        let body =
            json!({"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"x": [1, 2, 3]}});
        let compact = CompactBody::of(&body);
        assert_eq!(&*compact.text, serde_json::to_string(&body).unwrap());
    }
}
