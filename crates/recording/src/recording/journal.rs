//! What a recording has seen: each distinct request (its client, its attributes, the answer's
//! status) with how many times it was made and the first path that made it.

use super::attributes::Attributes;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One kind of request, as often as it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The client's `User-Agent` (each library says its name and version there).
    pub agent: String,
    /// What RBAC checks it against.
    #[serde(flatten)]
    pub attributes: Attributes,
    /// The API server's status code; 0: no answer (the server could not be reached).
    pub code: u16,
    /// How many requests of this kind came.
    pub count: u64,
    /// The first request of this kind: method, path and query.
    pub example: String,
}

/// The distinct requests that went through the proxy, counted.
#[derive(Default)]
pub struct Journal {
    entries: Mutex<BTreeMap<(String, Attributes, u16), Entry>>,
}

impl Journal {
    /// One more request.
    pub fn note(
        &self,
        agent: &str,
        attributes: Attributes,
        code: u16,
        example: impl FnOnce() -> String,
    ) {
        let mut entries = self
            .entries
            .lock()
            .expect("never poisoned: no panics while held");
        let key = (agent.to_owned(), attributes, code);
        match entries.get_mut(&key) {
            Some(entry) => entry.count += 1,
            None => {
                let entry = Entry {
                    agent: key.0.clone(),
                    attributes: key.1.clone(),
                    code,
                    count: 1,
                    example: example(),
                };
                entries.insert(key, entry);
            }
        }
    }

    /// Everything seen so far, in a stable order.
    pub fn entries(&self) -> Vec<Entry> {
        let entries = self
            .entries
            .lock()
            .expect("never poisoned: no panics while held");
        entries.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::attributes;
    use super::*;

    #[test]
    fn the_same_request_is_counted_and_its_first_path_kept() {
        let journal = Journal::default();
        for name in ["a", "b"] {
            let path = format!("/api/v1/namespaces/ns1/configmaps/{name}");
            journal.note("kr8s/0.20", attributes::of("GET", &path, None), 200, || {
                path.clone()
            });
        }
        journal.note(
            "kr8s/0.20",
            attributes::of("GET", "/api/v1/namespaces/ns1/configmaps/c", None),
            403,
            || "GET .../c".into(),
        );
        let entries = journal.entries();
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].code, entries[0].count), (200, 2));
        assert_eq!(entries[0].example, "/api/v1/namespaces/ns1/configmaps/a");
        assert_eq!((entries[1].code, entries[1].count), (403, 1));
    }
}
