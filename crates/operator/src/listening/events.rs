//! The events listeners get, as Skafos names them (`ADDED`, `MODIFIED`, `DELETED`, `ERROR`),
//! made from the watcher's stream so that each change comes once: after a re-listing (a 410
//! Gone) only what changed meanwhile is delivered, and objects that are gone come as
//! `DELETED`. What is kept per object: its uid, name, namespace and version.

use crate::client::watching::{EventType, Feed, RawEvent};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What the watcher feeds to listening.
#[derive(Debug)]
pub enum Listened {
    /// An object's event.
    Event(RawEvent),
    /// A listing is complete.
    Synced,
    /// The stream failed with this status.
    Failed(Value),
}

impl Feed for Listened {
    fn event(event: RawEvent) -> Self {
        Listened::Event(event)
    }
    fn synced() -> Option<Self> {
        Some(Listened::Synced)
    }
    fn failed(status: Value) -> Option<Self> {
        Some(Listened::Failed(status))
    }
}

/// An event for the listeners.
#[derive(Debug, Clone)]
pub struct Event {
    /// Skafos' kind of event: `ADDED`, `MODIFIED`, `DELETED` or `ERROR`.
    pub kind: &'static str,
    /// The object (or the error's status).
    pub object: Arc<Value>,
}

impl Event {
    /// The object's version (none for errors).
    pub fn version(&self) -> Option<String> {
        (self.kind != "ERROR")
            .then(|| text(&self.object, "resourceVersion"))
            .flatten()
    }
}

#[derive(Debug)]
struct Known {
    name: Option<String>,
    namespace: Option<String>,
    version: String,
}

/// Turns a watcher's events into the listeners' ones: each change once, none repeated by a re-listing.
pub struct Changes {
    api_version: String,
    kind: String,
    known: HashMap<String, Known>,
    /// The uids listed so far in the listing under way.
    listed: Option<HashSet<String>>,
    /// Listed objects of this version or older were delivered already (by the leader before
    /// us, whose handled version could not be resumed from): the first listing skips them.
    floor: Option<u64>,
}

impl Changes {
    /// For the objects of this kind; those not newer than `floor` (a leader's handled version) are not delivered.
    pub fn new(api_version: String, kind: String, floor: Option<&str>) -> Self {
        Self {
            api_version,
            kind,
            known: HashMap::new(),
            listed: None,
            floor: floor.and_then(|version| version.parse().ok()),
        }
    }

    /// The events that the watcher's news makes (none, one, or many after a listing).
    pub fn absorb(&mut self, news: Listened) -> Vec<Event> {
        let event = |kind, object| vec![Event { kind, object }];
        match news {
            Listened::Failed(status) => event("ERROR", Arc::new(status)),
            Listened::Synced => self.vanished(),
            Listened::Event(RawEvent { event_type, object }) => {
                let Some(uid) = text(&object, "uid") else {
                    return match event_type {
                        EventType::Listed | EventType::Added => event("ADDED", object),
                        EventType::Modified => event("MODIFIED", object),
                        EventType::Deleted | EventType::Vanished => event("DELETED", object),
                        EventType::Woken => Vec::new(), // the engine's own, not the server's
                    };
                };
                let version = text(&object, "resourceVersion").unwrap_or_default();
                match event_type {
                    EventType::Listed => {
                        self.listed.get_or_insert_default().insert(uid.clone());
                        let kind = match self.known.get(&uid) {
                            Some(known) if known.version == version => None,
                            Some(_) => Some("MODIFIED"),
                            None if self.delivered_before(&version) => None,
                            None => Some("ADDED"),
                        };
                        self.remember(uid, &object, version);
                        kind.map_or_else(Vec::new, |kind| event(kind, object))
                    }
                    EventType::Added | EventType::Modified => {
                        let known = self.known.contains_key(&uid);
                        self.remember(uid, &object, version);
                        let kind = if event_type == EventType::Added && !known {
                            "ADDED"
                        } else {
                            "MODIFIED"
                        };
                        event(kind, object)
                    }
                    EventType::Deleted | EventType::Vanished => {
                        self.known.remove(&uid);
                        event("DELETED", object)
                    }
                    EventType::Woken => Vec::new(), // the engine's own, not the server's
                }
            }
        }
    }

    fn delivered_before(&self, version: &str) -> bool {
        let version: Option<u64> = version.parse().ok();
        matches!((self.floor, version), (Some(floor), Some(version)) if version <= floor)
    }

    fn remember(&mut self, uid: String, object: &Value, version: String) {
        let known = Known {
            name: text(object, "name"),
            namespace: text(object, "namespace"),
            version,
        };
        self.known.insert(uid, known);
    }

    /// A listing ended: what was known and not listed is gone.
    fn vanished(&mut self) -> Vec<Event> {
        self.floor = None;
        let listed = self.listed.take().unwrap_or_default();
        let gone: Vec<String> = (self.known.keys())
            .filter(|uid| !listed.contains(*uid))
            .cloned()
            .collect();
        (gone.into_iter())
            .filter_map(|uid| {
                let known = self.known.remove(&uid)?;
                // Only its identity is known: the rest of it is gone with it.
                let object = json!({
                    "apiVersion": self.api_version, "kind": self.kind,
                    "metadata": {"name": known.name, "namespace": known.namespace,
                                 "uid": uid, "resourceVersion": known.version},
                });
                Some(Event {
                    kind: "DELETED",
                    object: Arc::new(object),
                })
            })
            .collect()
    }
}

fn text(object: &Value, key: &str) -> Option<String> {
    crate::util::dicts::meta(object, key)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(uid: &str, version: &str) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": uid, "uid": uid, "resourceVersion": version}}))
    }

    fn news(event_type: EventType, uid: &str, version: &str) -> Listened {
        Listened::Event(RawEvent {
            event_type,
            object: object(uid, version),
        })
    }

    fn kinds(changes: &mut Changes, all: Vec<Listened>) -> Vec<(String, String)> {
        (all.into_iter())
            .flat_map(|news| changes.absorb(news))
            .map(|e| (e.kind.to_owned(), text(&e.object, "uid").unwrap()))
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        (expected.iter())
            .map(|(k, u)| ((*k).to_owned(), (*u).to_owned()))
            .collect()
    }

    #[test]
    fn the_first_listing_is_added_and_a_relisting_only_what_changed() {
        let mut changes = Changes::new("v1".into(), "Thing".into(), None);
        let first = vec![
            news(EventType::Listed, "a", "1"),
            news(EventType::Listed, "b", "2"),
            news(EventType::Listed, "c", "3"),
            Listened::Synced,
            news(EventType::Modified, "a", "4"),
        ];
        let expected = [
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("ADDED", "c"),
            ("MODIFIED", "a"),
        ];
        assert_eq!(kinds(&mut changes, first), pairs(&expected));
        let relisted = vec![
            news(EventType::Listed, "a", "4"),
            news(EventType::Listed, "b", "5"),
            news(EventType::Listed, "d", "6"),
            Listened::Synced,
        ];
        let expected = [("MODIFIED", "b"), ("ADDED", "d"), ("DELETED", "c")];
        assert_eq!(kinds(&mut changes, relisted), pairs(&expected));
    }

    #[test]
    fn a_listing_after_a_handover_skips_what_the_former_leader_handled() {
        let mut changes = Changes::new("v1".into(), "Thing".into(), Some("10"));
        let listed = vec![
            news(EventType::Listed, "a", "9"),
            news(EventType::Listed, "b", "11"),
            Listened::Synced,
            news(EventType::Listed, "c", "3"),
            Listened::Synced,
        ];
        let expected = [
            ("ADDED", "b"),
            ("ADDED", "c"),
            ("DELETED", "a"),
            ("DELETED", "b"),
        ];
        let mut got = kinds(&mut changes, listed);
        got[2..].sort();
        assert_eq!(got, pairs(&expected));
    }

    #[test]
    fn errors_are_delivered_without_a_version() {
        let mut changes = Changes::new("v1".into(), "Thing".into(), None);
        let events = changes.absorb(Listened::Failed(json!({"code": 410})));
        assert_eq!(events[0].kind, "ERROR");
        assert_eq!(events[0].version(), None);
    }
}
