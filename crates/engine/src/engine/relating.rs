//! Related objects wake their owners (`@kopf.related`, not in Kopf): an object's latest state
//! goes through its resource's related functions, which name the owners it concerns (by
//! namespace and name: a label, a field, an index lookup); those owners' reconcile handlers are
//! woken (`waking`). The owners it named before are woken too: an object that stops naming an
//! owner (a label moved, the object deleted) has changed for that owner as well. The related
//! resource is watched once, whatever the number of owners.

use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{OwnerName, Relating, RelatingMemory, ResourceContext};
use crate::engine::selecting;
use crate::engine::waking::{Served, Wakers};
use crate::intents::hooks::{self, HandlerKind};
use crate::object_log;
use crate::util::logging::ObjectRef;
use std::collections::HashMap;
use tracing::Level;

/// Wake the owners that the object's latest state concerns, and those it concerned before.
pub async fn relate(ctx: &ResourceContext, memory: &mut RelatingMemory, event: &RawEvent) {
    let (Some(wakers), false) = (&ctx.wakers, ctx.relating.is_empty()) else {
        return;
    };
    let gone = matches!(event.event_type, EventType::Deleted | EventType::Vanished);
    let matching = selecting::for_event(ctx, HandlerKind::Relating, &ctx.relating, event).await;
    let calls = (matching.iter()).map(|(relating, call)| {
        hooks::invoke_metered(&*ctx.hooks, call.clone(), &relating.handler.id, "relating")
    });
    let outcomes = futures::future::join_all(calls).await;
    let mut named: HashMap<&str, Vec<OwnerName>> = HashMap::new();
    for ((relating, _), invoked) in matching.iter().zip(outcomes) {
        let id = relating.handler.id.as_str();
        // No owners told: it failed (said by the handlers' side), and those named before stay.
        let owners =
            (invoked.related).unwrap_or_else(|| memory.get(id).cloned().unwrap_or_default());
        named.insert(id, owners);
    }
    let object = ObjectRef::of(&event.object);
    for relating in &ctx.relating {
        let id = relating.handler.id.as_str();
        let now = named.remove(id).unwrap_or_default(); // (not matching: none)
        let before = memory.remove(id).unwrap_or_default();
        let mut woken: Vec<&OwnerName> = now.iter().collect();
        woken.extend(before.iter().filter(|owner| !now.contains(owner)));
        for (namespace, name) in woken {
            wake(relating, namespace.as_deref(), name, &object, wakers);
        }
        if !gone && !now.is_empty() {
            memory.insert(id.to_owned(), now);
        }
    }
}

/// Wake one owner named by a function, in all the kinds its selector picks; say so when no
/// such owner can be woken for a reason the user can fix.
fn wake(
    relating: &Relating,
    namespace: Option<&str>,
    name: &str,
    object: &ObjectRef,
    wakers: &Wakers,
) {
    for kind in &relating.owners {
        match wakers.wake_named(kind, namespace, name) {
            Served::Yes | Served::No => {} // (not served: nothing to wake, as for `owns=`)
            Served::NeedsNamespace => object_log!(
                Level::ERROR,
                object,
                "Related function '{}' named the owner '{name}' without a namespace, but {} objects are namespaced: return {{'namespace': ..., 'name': ...}}",
                relating.handler.id,
                kind.kind
            ),
        }
    }
}
