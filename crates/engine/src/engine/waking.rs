//! Owners woken by their children (`@kopf.on.reconcile(owns=...)`, not in Kopf): a change of
//! a child — an object whose `ownerReferences` name an owner of a reconciled resource — makes
//! the owner's reconcile handlers due. The children's resource is watched once, whatever the
//! number of owners; only the owners named are queued, as an engine-made event
//! (`EventType::Woken`). Its worker takes the owner's body that its own latest cycle saw (the
//! event's may be older than a change queued before it), or a newer one that came with it.

use crate::client::watching::{EventType, RawEvent, Watched};
use crate::util::dicts;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// An owners' resource as its children's `ownerReferences` name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerKind {
    /// The API group (`""` for the core group).
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl OwnerKind {
    /// The kind that an owner reference's `apiVersion` and `kind` say, if any.
    fn of_reference(reference: &Value) -> Option<Self> {
        let api_version = reference.get("apiVersion")?.as_str()?;
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let kind = reference.get("kind")?.as_str()?;
        Some(Self {
            group: group.to_owned(),
            kind: kind.to_owned(),
        })
    }
}

/// The last body of each owner seen by its reconciling (by uid): what a wake-up queues.
#[derive(Debug, Default)]
pub struct OwnerBodies(Mutex<HashMap<String, Arc<Value>>>);

impl OwnerBodies {
    /// The owner's body as its latest cycle saw it (shared, not copied).
    pub fn remember(&self, uid: &str, body: &Arc<Value>) {
        let mut bodies = self.0.lock().unwrap_or_else(|e| e.into_inner());
        bodies.insert(uid.to_owned(), body.clone());
    }

    /// The owner is gone.
    pub fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
    }

    /// The owner's body as its latest cycle saw it, if it is known and not gone.
    pub fn get(&self, uid: &str) -> Option<Arc<Value>> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }
}

/// Where the owners of each kind are served: the queue of their events, per namespace watched
/// (`None`: all), and their last known bodies.
struct Served {
    namespace: Option<String>,
    /// Weak: the stream's end (its watcher's) closes the owners' queue, as without owners.
    events: mpsc::WeakSender<Watched>,
    bodies: Arc<OwnerBodies>,
}

/// The operator's owners that children may wake, by kind.
#[derive(Default)]
pub struct Wakers {
    owners: Mutex<HashMap<OwnerKind, Vec<Served>>>,
}

impl Wakers {
    /// The owners of this resource, served from this stream (in this namespace, or all).
    pub fn register(
        &self,
        kind: OwnerKind,
        namespace: Option<String>,
        events: mpsc::Sender<Watched>,
        bodies: Arc<OwnerBodies>,
    ) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let served = owners.entry(kind).or_default();
        served.retain(|s| s.events.strong_count() > 0);
        served.push(Served {
            namespace,
            events: events.downgrade(),
            bodies,
        });
    }

    /// A child has changed (or is gone): wake the owners it names, of the kinds `owners`,
    /// that have been seen (an owner not seen yet is reconciled when it comes anyway).
    pub fn wake(&self, child: &Value, owners: &[OwnerKind]) {
        let Some(references) = dicts::meta(child, "ownerReferences").and_then(Value::as_array)
        else {
            return;
        };
        let namespace = dicts::meta(child, "namespace").and_then(Value::as_str);
        let served = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        for reference in references {
            let Some(kind) = OwnerKind::of_reference(reference).filter(|k| owners.contains(k))
            else {
                continue;
            };
            let Some(uid) = reference.get("uid").and_then(Value::as_str) else {
                continue;
            };
            let streams = served.get(&kind).into_iter().flatten();
            for stream in
                streams.filter(|s| s.namespace.is_none() || s.namespace.as_deref() == namespace)
            {
                let Some(body) = stream.bodies.get(uid) else {
                    continue; // not seen in this stream
                };
                let Some(events) = stream.events.upgrade() else {
                    continue; // no longer served
                };
                let event = Watched::Event(RawEvent {
                    event_type: EventType::Woken,
                    object: body,
                });
                // Not lost when the owners' queue is full: sent when it has room.
                if let Err(mpsc::error::TrySendError::Full(event)) = events.try_send(event) {
                    crate::util::tasks::spawn(async move {
                        let _ = events.send(event).await;
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(kind: &str, uid: &str) -> Value {
        json!({"metadata": {"name": "c", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "demo.kopf.dev/v1", "kind": kind, "name": "o", "uid": uid}]}})
    }

    #[tokio::test]
    async fn a_child_wakes_the_owner_it_names_with_its_last_body() {
        let wakers = Wakers::default();
        let bodies = Arc::new(OwnerBodies::default());
        let (tx, mut rx) = mpsc::channel(8);
        let kind = OwnerKind {
            group: "demo.kopf.dev".into(),
            kind: "Greeting".into(),
        };
        let owners = std::slice::from_ref(&kind);
        wakers.register(kind.clone(), Some("ns".into()), tx.clone(), bodies.clone());
        let owner = Arc::new(json!({"metadata": {"name": "o", "uid": "u1"}}));
        bodies.remember("u1", &owner);

        wakers.wake(&child("Greeting", "u1"), owners);
        match rx.try_recv() {
            Ok(Watched::Event(event)) => {
                assert_eq!(event.event_type, EventType::Woken);
                assert!(
                    Arc::ptr_eq(&event.object, &owner),
                    "the owner's last body, shared"
                );
            }
            _ => panic!("the owner is not woken"),
        }
        wakers.wake(&child("Other", "u1"), owners); // another owner kind
        wakers.wake(&child("Greeting", "u2"), owners); // an owner not seen
        bodies.forget("u1");
        wakers.wake(&child("Greeting", "u1"), owners); // gone
        assert!(rx.try_recv().is_err(), "nobody else is woken");

        // The wakers do not keep the owners' stream open: it ends with its watcher.
        bodies.remember("u1", &owner);
        drop(tx);
        assert!(rx.recv().await.is_none());
        wakers.wake(&child("Greeting", "u1"), owners);
    }
}
