//! Owners woken by their children (`@kopf.on.reconcile(owns=...)`, not in Kopf): a change of
//! a child — an object whose `ownerReferences` name an owner of a reconciled resource — makes
//! the owner's reconcile handlers due. The children's resource is watched once, whatever the
//! number of owners; only the owners named are queued, as an engine-made event
//! (`EventType::Woken`). Its worker takes the owner's body that its own latest cycle saw (the
//! event's may be older than a change queued before it), or a newer one that came with it.
//! Related functions (`@kopf.related`) name owners by namespace and name instead (`relating`).

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

/// The last body of each owner seen by its reconciling (by uid): what a wake-up queues; and
/// the uids by namespace and name, for owners that related functions name (`relating`).
#[derive(Debug, Default)]
pub struct OwnerBodies(Mutex<Known>);

#[derive(Debug, Default)]
struct Known {
    bodies: HashMap<String, Arc<Value>>,
    uids: HashMap<(Option<String>, String), String>,
}

/// An owner's namespace (none: cluster-scoped) and name, as its body says.
fn identity(body: &Value) -> Option<(Option<String>, String)> {
    let name = dicts::meta(body, "name")?.as_str()?;
    let namespace = dicts::meta(body, "namespace").and_then(Value::as_str);
    Some((namespace.map(str::to_owned), name.to_owned()))
}

impl OwnerBodies {
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The owner's body as its latest cycle saw it (shared, not copied).
    pub fn remember(&self, uid: &str, body: &Arc<Value>) {
        let mut known = self.known();
        if let Some(identity) = identity(body) {
            known.uids.insert(identity, uid.to_owned());
        }
        known.bodies.insert(uid.to_owned(), body.clone());
    }

    /// The owner is gone.
    pub fn forget(&self, uid: &str) {
        let mut known = self.known();
        let Some(body) = known.bodies.remove(uid) else {
            return;
        };
        if let Some(identity) = identity(&body) {
            // (unless a new object of that name came meanwhile)
            if known.uids.get(&identity).is_some_and(|u| u == uid) {
                known.uids.remove(&identity);
            }
        }
    }

    /// The owner's body as its latest cycle saw it, if it is known and not gone.
    pub fn get(&self, uid: &str) -> Option<Arc<Value>> {
        self.known().bodies.get(uid).cloned()
    }

    /// The body of the owner of this namespace and name, if it is known and not gone.
    fn named(&self, namespace: Option<&str>, name: &str) -> Option<Arc<Value>> {
        let known = self.known();
        let uid = known
            .uids
            .get(&(namespace.map(str::to_owned), name.to_owned()))?;
        known.bodies.get(uid).cloned()
    }
}

/// Where the owners of each kind are served: the queue of their events, per namespace watched
/// (`None`: all), and their last known bodies.
struct Stream {
    namespace: Option<String>,
    /// Its owners are namespaced (others are named without a namespace).
    namespaced: bool,
    /// Weak: the stream's end (its watcher's) closes the owners' queue, as without owners.
    events: mpsc::WeakSender<Watched>,
    bodies: Arc<OwnerBodies>,
}

/// The operator's owners that children may wake, by kind.
#[derive(Default)]
pub struct Wakers {
    owners: Mutex<HashMap<OwnerKind, Vec<Stream>>>,
}

impl Wakers {
    /// The owners of this resource, served from this stream (in this namespace, or all).
    pub fn register(
        &self,
        kind: OwnerKind,
        namespaced: bool,
        namespace: Option<String>,
        events: mpsc::Sender<Watched>,
        bodies: Arc<OwnerBodies>,
    ) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let served = owners.entry(kind).or_default();
        served.retain(|s| s.events.strong_count() > 0);
        served.push(Stream {
            namespace,
            namespaced,
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
                if let Some(body) = stream.bodies.get(uid) {
                    stream.wake(body); // (if seen in this stream)
                }
            }
        }
    }

    /// Wake the owner of this kind and name, if it has been seen: in this namespace, unless
    /// its kind is cluster-scoped. Whether such owners are served (none: no such kind).
    pub fn wake_named(&self, kind: &OwnerKind, namespace: Option<&str>, name: &str) -> Served {
        let served = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let Some(streams) = served.get(kind).filter(|s| !s.is_empty()) else {
            return Served::No;
        };
        if streams.iter().any(|s| s.namespaced) && namespace.is_none() {
            return Served::NeedsNamespace;
        }
        for stream in streams {
            let namespace = namespace.filter(|_| stream.namespaced);
            if stream.namespace.is_some() && stream.namespace.as_deref() != namespace {
                continue;
            }
            if let Some(body) = stream.bodies.named(namespace, name) {
                stream.wake(body);
            }
        }
        Served::Yes
    }
}

/// Whether owners of a kind are served, for a wake-up by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Yes: the owner is woken if it has been seen.
    Yes,
    /// No owners of that kind are served (yet, or any more).
    No,
    /// They are namespaced, and the name came without a namespace.
    NeedsNamespace,
}

impl Stream {
    /// Queue an engine-made event with the owner's body for its worker.
    fn wake(&self, body: Arc<Value>) {
        let Some(events) = self.events.upgrade() else {
            return; // no longer served
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn greetings() -> OwnerKind {
        OwnerKind {
            group: "demo.kopf.dev".into(),
            kind: "Greeting".into(),
        }
    }

    fn child(kind: &str, uid: &str) -> Value {
        json!({"metadata": {"name": "c", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "demo.kopf.dev/v1", "kind": kind, "name": "o", "uid": uid}]}})
    }

    #[tokio::test]
    async fn a_child_wakes_the_owner_it_names_with_its_last_body() {
        let (wakers, bodies, kind) = (
            Wakers::default(),
            Arc::new(OwnerBodies::default()),
            greetings(),
        );
        let (tx, mut rx) = mpsc::channel(8);
        let owners = std::slice::from_ref(&kind);
        wakers.register(
            kind.clone(),
            true,
            Some("ns".into()),
            tx.clone(),
            bodies.clone(),
        );
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

    #[tokio::test]
    async fn an_owner_named_is_woken_in_its_namespace_and_a_new_one_of_its_name_stays_known() {
        let (wakers, bodies, kind) = (
            Wakers::default(),
            Arc::new(OwnerBodies::default()),
            greetings(),
        );
        let (tx, mut rx) = mpsc::channel(8);
        wakers.register(kind.clone(), true, None, tx.clone(), bodies.clone());
        let owner =
            |uid: &str| Arc::new(json!({"metadata": {"name": "o", "namespace": "ns", "uid": uid}}));
        let woken = |rx: &mut mpsc::Receiver<Watched>| match rx.try_recv() {
            Ok(Watched::Event(event)) => Some(event.object["metadata"]["uid"].clone()),
            _ => None,
        };
        bodies.remember("u1", &owner("u1"));
        assert_eq!(wakers.wake_named(&kind, Some("ns"), "o"), Served::Yes);
        assert_eq!(woken(&mut rx), Some(json!("u1")));
        assert_eq!(wakers.wake_named(&kind, Some("other"), "o"), Served::Yes);
        assert_eq!(wakers.wake_named(&kind, Some("ns"), "p"), Served::Yes);
        assert_eq!(woken(&mut rx), None, "not seen: not woken");
        assert_eq!(wakers.wake_named(&kind, None, "o"), Served::NeedsNamespace);
        let other = OwnerKind {
            group: "demo.kopf.dev".into(),
            kind: "Other".into(),
        };
        assert_eq!(wakers.wake_named(&other, Some("ns"), "o"), Served::No);

        // Re-created under the same name: the old one's end does not hide the new one.
        bodies.remember("u2", &owner("u2"));
        bodies.forget("u1");
        assert_eq!(wakers.wake_named(&kind, Some("ns"), "o"), Served::Yes);
        assert_eq!(woken(&mut rx), Some(json!("u2")));
        bodies.forget("u2");
        wakers.wake_named(&kind, Some("ns"), "o");
        assert_eq!(woken(&mut rx), None, "gone: not woken");
    }
}
