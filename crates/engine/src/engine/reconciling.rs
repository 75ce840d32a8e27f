//! `@kopf.on.reconcile` handlers (not in Kopf): level-based, as controllers are written with
//! controller-runtime or kube-rs. An object is reconciled when its state differs from the
//! one last attempted (created, changed, seen first since the start, being deleted), when a
//! requeue it asked for is due, or when its failure's backoff has passed. Events that come
//! meanwhile are coalesced by the object's worker. The handler's own status writes do not
//! bring it back: its essence (spec, labels, annotations; not the status) is compared.
//! Requeues and retries are timers of the worker: nothing is written to the object for them.

use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{Cycle, Memory, ResourceContext};
use crate::engine::selecting;
use crate::intents::hooks::{self, Failure, HandlerKind};
use crate::object_log;
use crate::state::patches::FinalizerOp;
use crate::state::progression::format_time;
use crate::state::StorageResult;
use crate::util::dicts;
use crate::util::logging::ObjectRef;
use serde_json::Value;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tokio::time::Instant;
use tracing::Level;

/// Reconcile the object if it is due, into the cycle's patch; `cycle.requeue` says when it
/// is due again, if it is.
pub(crate) async fn reconcile(
    ctx: &Arc<ResourceContext>,
    memory: &mut Memory,
    event: &RawEvent,
    cycle: &mut Cycle,
) -> StorageResult<()> {
    let body = &event.object;
    let uid = dicts::meta(body, "uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if ctx.reconciling.is_empty() || event.event_type == EventType::Deleted {
        if let Some(bodies) = &ctx.owner_bodies {
            bodies.forget(uid);
        }
        return Ok(()); // gone: nothing to reconcile, and the worker forgets it
    }
    if let Some(bodies) = &ctx.owner_bodies {
        bodies.remember(uid, body); // what its children's changes wake it with (`waking`)
    }
    let object = ObjectRef::of(body);
    let deleting = dicts::meta(body, "deletionTimestamp").is_some_and(|v| !v.is_null());
    let state = digest(ctx, body, deleting)?;
    let remembered = memory.reconciling.get_or_insert_with(Box::default);
    let now = Instant::now();
    let changed = remembered.attempted != Some(state);
    let woken = std::mem::take(&mut remembered.woken);
    let due = woken || remembered.due.is_some_and(|due| due <= now);
    if !changed && !due {
        cycle.requeue = remembered.due.map(|due| (due - now).as_secs_f64());
        return Ok(());
    }

    let handlers = selecting::for_event(ctx, HandlerKind::Reconciling, &ctx.reconciling, event);
    let handlers = handlers.await;
    let finalizer = &ctx.settings.persistence.finalizer;
    let blocked = dicts::has_finalizer(body, finalizer);
    let must_block = handlers.iter().any(|(handler, _)| handler.finalizer);
    if must_block && !blocked && !deleting {
        object_log!(
            Level::DEBUG,
            &object,
            "Adding the finalizer, thus preventing the actual deletion."
        );
        cycle.patch.finalizer = Some(FinalizerOp::Add);
        return Ok(()); // reconciled when the finalizer is there: the patch brings it back
    }
    if handlers.is_empty() {
        if blocked && deleting {
            object_log!(
                Level::DEBUG,
                &object,
                "Removing the finalizer, as there are no handlers requiring it."
            );
            cycle.patch.finalizer = Some(FinalizerOp::Remove);
        }
        remembered.attempted = Some(state);
        remembered.due = None;
        return Ok(());
    }

    cycle.matched = true;
    let started = *remembered
        .started
        .get_or_insert_with(crate::util::clock::now);
    let mut failed = false;
    let mut retry_after: Option<f64> = None; // a TemporaryError's own delay
    let mut requeue: Option<f64> = None;
    for (handler, mut call) in handlers {
        call.retry = remembered.retry;
        call.started = Some(format_time(started));
        call.runtime = (crate::util::clock::now() - started)
            .as_seconds_f64()
            .max(0.0);
        let invoked = hooks::invoke_metered(&*ctx.hooks, call, &handler.id, "reconciling").await;
        invoked.apply_to(&handler.id, &mut cycle.patch);
        let outcome = &invoked.outcome;
        if outcome.exception.is_some() && !outcome.final_ {
            failed = true;
            if invoked.failure == Some(Failure::Temporary) {
                retry_after = min(retry_after, outcome.delay);
            }
        } else if outcome.exception.is_none() {
            requeue = min(requeue, invoked.requeue);
        }
        // A permanent failure waits for the next change of the object; in a deletion, it lets
        // the object go, as Kopf's deletion handlers that failed for good do.
    }

    remembered.attempted = Some(state);
    let settings = &ctx.settings.reconciling;
    let wait = if failed {
        remembered.retry += 1;
        let backoff = settings.backoff(remembered.retry);
        let jitter = backoff * settings.backoff_jitter.max(0.0) * rand::random::<f64>();
        // The overall limit of retries, as controller-runtime's (a handler's own delay is not limited).
        let slot = ctx
            .retry_budget
            .take(tokio::time::Instant::now().into_std());
        Some(retry_after.unwrap_or((backoff + jitter).max(slot)).max(0.0))
    } else {
        remembered.retry = 0;
        remembered.started = None;
        remembered.deletion_done = deleting && requeue.is_none();
        if remembered.deletion_done && blocked && ctx.spawning.is_empty() {
            object_log!(
                Level::DEBUG,
                &object,
                "Removing the finalizer, as the object is reconciled in its deletion."
            );
            cycle.patch.finalizer = Some(FinalizerOp::Remove);
        }
        requeue.map(|after| after.max(0.0))
    };
    if let Some(wait) = wait.filter(|wait| *wait > 0.0) {
        let what = if failed {
            "Retrying"
        } else {
            "Requeued: reconciling again"
        };
        object_log!(Level::DEBUG, &object, "{what} in {wait} seconds.");
    }
    remembered.due = wait.and_then(|wait| {
        let wait = std::time::Duration::try_from_secs_f64(wait).ok()?;
        now.checked_add(wait)
    });
    cycle.requeue = remembered.due.map(|due| (due - now).as_secs_f64());
    if remembered.deletion_done && !ctx.spawning.is_empty() {
        // The finalizer is the daemons' side's to remove, once they are stopped too: a cycle
        // now (not remembered as due: the handler is not called again for it).
        cycle.requeue = Some(0.0);
    }
    Ok(())
}

fn min(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The object's state as reconciling sees it: its essence, and whether it is being deleted.
fn digest(ctx: &ResourceContext, body: &Value, deleting: bool) -> StorageResult<u64> {
    let mut essence = ctx.diffbase.build(body, &ctx.extra_fields)?;
    ctx.progress.clear(&mut essence)?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    essence.to_string().hash(&mut hasher);
    deleting.hash(&mut hasher);
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::{self, event, object, Daemon, FakeHooks, FakePatcher, Handlers};
    use crate::settings::Settings;
    use crate::state::progression::Outcome;
    use serde_json::json;
    use std::time::Duration;

    /// The versions of the bodies that the reconcile handler got.
    fn calls(hooks: &FakeHooks) -> Vec<String> {
        let calls = hooks.calls().into_iter();
        let calls = calls.filter(|c| c.kind == HandlerKind::Reconciling);
        calls.map(|c| c.version).collect()
    }

    /// A call's outcome: failed, to be retried.
    fn failure() -> Outcome {
        Outcome {
            final_: false,
            exception: Some("boom".into()),
            ..Default::default()
        }
    }

    /// One cycle of the object `a` at this version, with this `spec.who`: its requeue.
    async fn cycle(
        ctx: &Arc<ResourceContext>,
        memory: &mut Memory,
        version: &str,
        who: &str,
    ) -> Option<f64> {
        let event = event(
            EventType::Modified,
            object("a", version, json!({"who": who})),
        );
        let mut cycle = Cycle::default();
        reconcile(ctx, memory, &event, &mut cycle).await.unwrap();
        cycle.requeue
    }

    #[tokio::test(start_paused = true)]
    async fn a_state_is_reconciled_once_then_again_when_due_or_changed() {
        let hooks = FakeHooks::new(Daemon::Returning);
        let handlers = Handlers {
            reconciling: vec![testing::handler(json!({"index": 0, "id": "fn"}))],
            ..Default::default()
        };
        let mut settings = Settings::default();
        settings.reconciling.backoff_base = 2.0;
        settings.reconciling.backoff_jitter = 0.0;
        let patcher = Arc::new(FakePatcher::default());
        let ctx = testing::context(handlers, settings, hooks.clone(), patcher);
        let mut memory = Memory::default();
        let memory = &mut memory;
        assert_eq!(cycle(&ctx, memory, "1", "world").await, None);
        assert_eq!(
            cycle(&ctx, memory, "2", "world").await,
            None,
            "the same essence: not again"
        );
        assert_eq!(calls(&hooks).len(), 1);

        hooks.answer(failure());
        assert_eq!(
            cycle(&ctx, memory, "3", "moon").await,
            Some(2.0),
            "failed: the backoff's first wait"
        );
        assert_eq!(
            cycle(&ctx, memory, "4", "moon").await,
            Some(2.0),
            "not due yet: the rest of the wait"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        hooks.answer(failure());
        assert_eq!(
            cycle(&ctx, memory, "4", "moon").await,
            Some(4.0),
            "due, failed again: doubled"
        );
        assert_eq!(
            cycle(&ctx, memory, "5", "sun").await,
            None,
            "a change: at once, and it succeeds"
        );
        assert_eq!(calls(&hooks), ["1", "3", "4", "5"]);
    }
}
