//! Indexing: each state of an object goes through the matching `@kopf.index` functions into
//! the operator's indices, before other handlers see the object. An object that is deleted
//! (or vanished), or that a function stops matching, leaves that index. Errors as Kopf
//! treats them: ignored ones keep the stale values; temporary ones remove the object's values
//! and keep it out until its delay passes (then retried, within the function's limits);
//! permanent ones keep it out for good (until the operator restarts).

use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{object_key, IndexingMemory, ResourceContext};
use crate::engine::selecting;
use crate::indices::index::ObjectKey;
use crate::intents::handlers::IndexingHandler;
use crate::intents::hooks::{self, HandlerKind};
use crate::state::progression::{format_time, HandlerState};

/// Index (or un-index) one state of an object in the indices of this resource.
pub async fn index(ctx: &ResourceContext, memory: &mut IndexingMemory, event: &RawEvent) {
    if ctx.indexing.is_empty() {
        return;
    }
    let object = ObjectKey::new(&object_key(&event.object));
    if matches!(event.event_type, EventType::Deleted | EventType::Vanished) {
        for handler in &ctx.indexing {
            discard(ctx, handler, &object);
        }
        memory.failures.clear();
        return;
    }
    let matching = selecting::for_event(ctx, HandlerKind::Indexing, &ctx.indexing, event).await;
    let now = crate::util::clock::now();
    let mut calls = Vec::new();
    for (handler, mut call) in matching {
        let state = (memory.failures.get(&handler.id).cloned())
            .unwrap_or_else(|| HandlerState::from_scratch(now, None));
        if !state.awakened(now) {
            continue; // kept out: for a while (temporary errors) or for good (permanent ones)
        }
        call.retry = state.retries;
        call.started = Some(format_time(state.started));
        call.runtime = state.runtime(now);
        calls.push((handler, state, call));
    }
    // All at once (Kopf's lifecycle for indexing): one trip for all the indices.
    let outcomes = futures::future::join_all((calls.iter()).map(|(handler, _, call)| {
        hooks::invoke_metered(&*ctx.hooks, call.clone(), &handler.id, "indexing")
    }))
    .await;
    let mut called = Vec::new();
    for ((handler, state, _), invoked) in calls.into_iter().zip(outcomes) {
        called.push(&handler.id);
        if invoked.outcome.exception.is_some() {
            discard(ctx, handler, &object);
            let failed = state.with_outcome(&invoked.outcome, crate::util::clock::now());
            memory.failures.insert(handler.id.clone(), failed);
            continue;
        }
        memory.failures.remove(&handler.id);
        if let Some(pairs) = invoked.indexed {
            let index = ctx.indices.index(&handler.id);
            index.write().expect("not poisoned").replace(&object, pairs);
        }
        // No result (`None`, or an ignored error): the values so far stay.
    }
    // Those that do not match (anymore), or are kept out: nothing of the object in them.
    for handler in (ctx.indexing.iter()).filter(|h| !called.contains(&&h.id)) {
        discard(ctx, handler, &object);
    }
}

fn discard(ctx: &ResourceContext, handler: &IndexingHandler, object: &ObjectKey) {
    let index = ctx.indices.index(&handler.id);
    index.write().expect("not poisoned").discard(object);
}
