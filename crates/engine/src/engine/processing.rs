//! One processing cycle of one object: from a raw watch event to the handlers
//! to call (causes, filters, progress) and the patch that records the outcome.
//! The patch is applied by `applying`; the order of events is kept by `queueing`.

use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{Change, Cycle, Memory, ResourceContext};
use crate::engine::daemons::{Daemons, ObjectDaemons};
use crate::engine::executing::{self, SharedPatch};
use crate::engine::selecting::{self, Verdicts};
use crate::intents::handlers::{Match, Reason, SpawningHandler};
use crate::intents::hooks::{self, HandlerKind};
use crate::object_log;
use crate::state::diffs::{self, Diff};
use crate::state::digests;
use crate::state::patches::{FinalizerOp, Patch};
use crate::state::progress::ProgressStorage;
use crate::state::progression::State;
use crate::state::StorageResult;
use crate::util::dicts;
use crate::util::encoding::to_python_repr;
use crate::util::logging::ObjectRef;
use crate::util::redaction;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tracing::Level;

/// An object's daemons and the registry they belong to (for resources with daemons or timers).
pub type Spawning<'a> = Option<(&'a Arc<Daemons>, &'a Arc<ObjectDaemons>)>;

/// The change-handling part of a cycle, on the latest known state of an object; daemons
/// and timers are spawned or stopped first. `patch` holds what must be applied anyway
/// (e.g. from `on.event` handlers).
///
/// If a storage fails, what the cycle wanted to patch so far is kept for the next cycle.
pub(crate) async fn process_changing(
    ctx: &Arc<ResourceContext>,
    memory: &mut Memory,
    event: &RawEvent,
    patch: Patch,
    spawning: Spawning<'_>,
) -> StorageResult<Cycle> {
    let mut cycle = Cycle {
        patch: memory.remaining_patch.take().unwrap_or_default(),
        ..Default::default()
    };
    cycle.patch.merge_from(&Value::Object(patch.merge));
    if ctx.changing.is_empty() && spawning.is_none() {
        return Ok(cycle);
    }
    match process_cycle(ctx, memory, event, &mut cycle, spawning).await {
        Ok(()) => Ok(cycle),
        Err(error) => {
            memory.remaining_patch = Some(cycle.patch);
            Err(error)
        }
    }
}

async fn process_cycle(
    ctx: &Arc<ResourceContext>,
    memory: &mut Memory,
    event: &RawEvent,
    cycle: &mut Cycle,
    spawning: Spawning<'_>,
) -> StorageResult<()> {
    let body = &event.object;
    let object = ObjectRef::of(body);
    let patch_initially_empty = cycle.patch.is_empty();
    let finalizer = &ctx.settings.persistence.finalizer;
    let released = memory.released.as_deref();
    // (the DELETED event's body may still name the finalizer: the state before the write)
    let stale = event.event_type != EventType::Deleted && is_deletion_blocked(body, finalizer);
    if stale && released.is_some() && released == deleted_uid(body) {
        // Kopf runs the deletion handlers again here, once its consistency timeout is over.
        object_log!(
            Level::DEBUG,
            &object,
            "The finalizer is removed already: this state is older than that write. Waiting for the deletion."
        );
        return Ok(());
    }
    let detected = detect_change(ctx, memory, event)?;
    let candidates = match spawning {
        Some((_, object)) => spawning_candidates(ctx, object, body, !detected.diff.is_empty()),
        None => Vec::new(),
    };
    // A diff base in the other form of Secrets' values than the settings say, while nothing
    // has changed: written again in the settings' form even if no handler runs for it.
    let rewrite = (detected.rewrite_base
        && matches!(detected.reason, Reason::Noop | Reason::Resume))
    .then(|| detected.new.clone())
    .flatten();
    let change = (!ctx.changing.is_empty()).then_some(detected);
    let verdicts = Verdicts::ask(ctx, body, change.as_ref(), &candidates).await;
    let (spawning_delays, spawning_blocks) = match spawning {
        Some((daemons, object)) => {
            let matching = selecting::matching_spawning(&verdicts, &candidates);
            let deleted = event.event_type == EventType::Deleted;
            process_spawning(daemons, object, body, deleted, &matching).await
        }
        None => (Vec::new(), false),
    };
    let mut change =
        change.filter(|c| selecting::any_matches(&verdicts, ctx.changing.iter(), body, c));

    let deletion_ongoing = is_deletion_ongoing(body);
    let deletion_blocked = is_deletion_blocked(body, finalizer);
    let finalizing = ctx.changing.iter().filter(|h| h.requires_finalizer);
    // A reconcile handler's finalizer stays until it has reconciled the deletion (`reconciling`).
    let reconciling_blocks = ctx.reconciling.iter().any(|h| h.finalizer)
        && !(memory.reconciling.as_ref()).is_some_and(|r| r.deletion_done);
    let must_block = spawning_blocks
        || reconciling_blocks
        || (change.as_ref())
            .is_some_and(|c| selecting::any_matches(&verdicts, finalizing, body, c));
    if must_block && !deletion_blocked && !deletion_ongoing {
        object_log!(
            Level::DEBUG,
            &object,
            "Adding the finalizer, thus preventing the actual deletion."
        );
        cycle.patch.finalizer = Some(FinalizerOp::Add);
        change = None; // no handlers this time: the finalizer's patch comes first
    }
    if !must_block && deletion_blocked {
        object_log!(
            Level::DEBUG,
            &object,
            "Removing the finalizer, as there are no handlers requiring it."
        );
        cycle.patch.finalizer = Some(FinalizerOp::Remove);
        change = None;
    }
    cycle.delays = spawning_delays;
    // Handlers run only on a consistent view: not while our own patch is still pending.
    if change.is_some() && !patch_initially_empty {
        return Ok(());
    }

    if let (None, Some(new)) = (&change, &rewrite) {
        if patch_initially_empty && !deletion_ongoing {
            let mut base = Patch::default();
            ctx.diffbase.store(body, &mut base, new)?;
            cycle.patch.then(base);
        }
    }
    if let Some(c) = &change {
        cycle.matched = true;
        let delays =
            process_change(ctx, memory, &verdicts, body, &object, c, &mut cycle.patch).await?;
        cycle.delays.extend(delays);
    }

    let deleted = event.event_type == EventType::Deleted;
    if !deleted && deletion_ongoing && deletion_blocked && cycle.delays.is_empty() {
        object_log!(
            Level::DEBUG,
            &object,
            "Removing the finalizer, thus allowing the actual deletion."
        );
        cycle.patch.finalizer = Some(FinalizerOp::Remove);
    }
    Ok(())
}

/// Daemons and timers see the object's latest state; those that may run for it (not
/// finished for good, and not excluded by the static filters) are the candidates.
fn spawning_candidates<'h>(
    ctx: &'h ResourceContext,
    object: &ObjectDaemons,
    body: &Arc<Value>,
    essential_change: bool,
) -> Vec<(&'h Arc<SpawningHandler>, Match)> {
    object.refresh(body, essential_change, ctx.hooks.as_ref());
    let excluded = object.forever_stopped();
    (ctx.spawning.iter())
        .filter(|h| !excluded.contains(&h.id))
        .map(|h| (h, h.filters.prematch(body, None)))
        .filter(|(_, m)| *m != Match::No)
        .collect()
}

/// Spawn the matching daemons and timers, stop the others (all of them if the object is
/// being deleted). The delays until the stopping ones are checked again, and whether the
/// object must keep the finalizer for them.
async fn process_spawning(
    daemons: &Arc<Daemons>,
    object: &Arc<ObjectDaemons>,
    body: &Value,
    deleted: bool,
    matching: &[&Arc<SpawningHandler>],
) -> (Vec<f64>, bool) {
    let delays = if deleted || is_deletion_ongoing(body) {
        daemons.stop_for_deletion(object).await
    } else {
        daemons.spawn_and_match(object, matching).await
    };
    (delays, !matching.is_empty())
}

/// The uid of an object that is being deleted (none if it is not).
pub(crate) fn deleted_uid(body: &Value) -> Option<&str> {
    is_deletion_ongoing(body)
        .then(|| dicts::meta(body, "uid").and_then(Value::as_str))
        .flatten()
}

fn is_deletion_ongoing(body: &Value) -> bool {
    dicts::meta(body, "deletionTimestamp").is_some_and(|v| !v.is_null())
}

fn is_deletion_blocked(body: &Value, finalizer: &str) -> bool {
    dicts::has_finalizer(body, finalizer)
}

fn detect_change(
    ctx: &Arc<ResourceContext>,
    memory: &Memory,
    event: &RawEvent,
) -> StorageResult<Change> {
    let body = &event.object;
    let mut old = ctx.diffbase.fetch(body)?;
    let mut new = ctx.diffbase.build(body, &ctx.extra_fields)?;
    if let Some(old) = old.as_mut() {
        ctx.progress.clear(old)?;
    }
    ctx.progress.clear(&mut new)?;
    let (diff, rewrite_base) = secrets_diff(ctx, body, old.as_mut(), &mut new);
    let initial = memory.noticed_by_listing && !memory.fully_handled_once;
    let finalizer = &ctx.settings.persistence.finalizer;
    let reason = if event.event_type == EventType::Deleted {
        Reason::Gone
    } else if is_deletion_ongoing(body) && !is_deletion_blocked(body, finalizer) {
        Reason::Free
    } else if is_deletion_ongoing(body) {
        Reason::Delete
    } else if old.is_none() {
        Reason::Create
    } else if diff.is_empty() && initial {
        Reason::Resume
    } else if diff.is_empty() {
        Reason::Noop
    } else {
        Reason::Update
    };
    // A creation is never mixed with resuming, even if first seen in a listing.
    let initial = initial && reason != Reason::Create;
    crate::traces::note(|| vec![opentelemetry::KeyValue::new("kopf.cause", reason.as_str())]);
    Ok(Change {
        reason,
        old,
        new: Some(new),
        diff,
        initial,
        rewrite_base,
    })
}

/// The diff of the essences; a Secret's values compared as digests when either side holds them
/// (`settings.secrets.diffbase_digests` on, or a diff base written while it was on). With the
/// setting on, `old` and `new` hold the digests; off, `new` keeps the values. Whether the diff
/// base must be written again in the setting's form.
fn secrets_diff(
    ctx: &ResourceContext,
    body: &Value,
    old: Option<&mut Value>,
    new: &mut Value,
) -> (Diff, bool) {
    if !digests::is_secret(body) {
        return (diffs::diff(old.as_deref(), Some(new)), false);
    }
    let uid = dicts::meta(body, "uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    let stored_digests = old.as_deref().is_some_and(digests::has_digests);
    if ctx.settings.secrets.diffbase_digests {
        digests::digest_values(new, uid);
        let rewrite = old.as_deref().is_some_and(digests::has_values);
        let old = old.map(|old| {
            digests::digest_values(old, uid);
            &*old
        });
        (diffs::diff(old, Some(new)), rewrite)
    } else if stored_digests {
        let mut digested = new.clone();
        digests::digest_values(&mut digested, uid);
        (diffs::diff(old.as_deref(), Some(&digested)), true)
    } else {
        (diffs::diff(old.as_deref(), Some(new)), false)
    }
}

/// A change's cycle: its cause's handlers (if it has any), the diff base once all are done
/// (or none apply), and a line for the changes nobody handles. The delays asked for.
async fn process_change(
    ctx: &Arc<ResourceContext>,
    memory: &mut Memory,
    verdicts: &Verdicts,
    body: &Arc<Value>,
    object: &ObjectRef,
    change: &Change,
    patch: &mut Patch,
) -> StorageResult<Vec<f64>> {
    let (delays, done_or_skipped) = if change.reason.is_for_handlers() {
        handle_cause(ctx, verdicts, body, object, change, patch).await?
    } else {
        (Vec::new(), false)
    };
    if done_or_skipped || (change.rewrite_base && change.reason == Reason::Noop) {
        if let Some(new) = &change.new {
            if change.old.as_ref() != Some(new) || change.rewrite_base {
                // Written after the outcome (results, progress and its purge): see `Patch::later`.
                let mut base = Patch::default();
                ctx.diffbase.store(body, &mut base, new)?;
                patch.then(base);
            }
        }
        memory.fully_handled_once = true;
    }
    match change.reason {
        Reason::Gone => object_log!(
            Level::DEBUG,
            object,
            "Deleted, really deleted, and we are notified."
        ),
        Reason::Free => object_log!(
            Level::DEBUG,
            object,
            "Deletion, but we are done with it, and we do not care."
        ),
        Reason::Noop => object_log!(
            Level::DEBUG,
            object,
            "Something has changed, but we are not interested (the essence is the same)."
        ),
        _ => {}
    }
    Ok(delays)
}

/// The cause's handlers run once each (those not done yet), their progress stored: the delays
/// they ask for, and whether all are done (or none apply).
async fn handle_cause(
    ctx: &Arc<ResourceContext>,
    verdicts: &Verdicts,
    body: &Arc<Value>,
    object: &ObjectRef,
    change: &Change,
    patch: &mut Patch,
) -> StorageResult<(Vec<f64>, bool)> {
    let purpose = change.reason.as_str();
    let title = Reason::title(purpose);
    let owned_ids: Vec<String> = dedup_ids(ctx.changing.iter().map(|h| h.id.clone()));
    let handlers = selecting::cause_handlers(&ctx.changing, verdicts, body, change);
    let handler_ids: Vec<String> = handlers.iter().map(|h| h.id.clone()).collect();
    let storage = ctx.progress.as_ref();
    let state = progress_state(
        body,
        storage,
        &owned_ids,
        object,
        purpose,
        &handler_ids,
        patch,
    )?;
    say_in_progress(object, body, change, &title);
    if handlers.is_empty() {
        return Ok((Vec::new(), true));
    }
    // The calls and their sub-handlers write into one patch, shared at every depth.
    let shared: SharedPatch = Arc::new(Mutex::new(std::mem::take(patch)));
    let lifecycle = ctx.lifecycle;
    let shared_change = Arc::new(change.clone());
    let state = executing::execute_once(
        ctx,
        None,
        &handlers,
        state,
        lifecycle,
        body,
        &shared_change,
        &shared,
    )
    .await;
    *patch = std::mem::take(&mut *shared.lock().expect("not poisoned"));
    state.store(body, patch, storage)?;
    let done = state.done();
    if done {
        let counters = state.counts();
        object_log!(
            Level::INFO,
            object,
            "{} is processed: {} succeeded; {} failed.",
            capitalize(&title),
            counters.success,
            counters.failure
        );
        state.purge(body, patch, storage, &owned_ids)?;
    }
    Ok((state.delays(crate::util::clock::now()), done))
}

/// The handlers' progress for this purpose, as stored in the object; the progress of another
/// purpose that this one supersedes (an update while a creation was under way) is said and
/// purged.
fn progress_state(
    body: &Value,
    storage: &dyn ProgressStorage,
    owned_ids: &[String],
    object: &ObjectRef,
    purpose: &str,
    handler_ids: &[String],
    patch: &mut Patch,
) -> StorageResult<State> {
    let now = crate::util::clock::now();
    let title = Reason::title(purpose);
    let mut state = State::from_storage(body, storage, owned_ids, now)?
        .with_purpose(purpose, &[])
        .with_handlers(handler_ids, now);
    let extras = state.extras();
    for (extra_purpose, counters) in &extras {
        object_log!(
            Level::INFO,
            object,
            "{} is superseded by {}: {} succeeded; {} failed; {} left to the moment.",
            capitalize(&Reason::title(extra_purpose)),
            title,
            counters.success,
            counters.failure,
            counters.running
        );
        state = state.with_purpose(purpose, handler_ids);
    }
    if !extras.is_empty() {
        state.purge(body, patch, storage, owned_ids)?;
    }
    Ok(state)
}

/// The debug lines of a cause's cycle: the object, and the diff of an update.
fn say_in_progress(object: &ObjectRef, body: &Value, change: &Change, title: &str) {
    object_log!(
        Level::DEBUG,
        object,
        "{} is in progress: {}",
        capitalize(title),
        to_python_repr(&redaction::redacted(object, body))
    );
    if !change.diff.is_empty() && change.old.is_some() && change.new.is_some() {
        object_log!(
            Level::DEBUG,
            object,
            "{} diff: {}",
            capitalize(title),
            diff_repr(object, &change.diff)
        );
    }
}

/// `on.event` handlers: called for every event, in order, silently; never retried.
/// Their results and patches are returned, to be applied with the cycle's patch.
pub(crate) async fn process_watching(ctx: &Arc<ResourceContext>, event: &RawEvent) -> Patch {
    let mut patch = Patch::default();
    if ctx.watching.is_empty() {
        return patch;
    }
    let watching = selecting::for_event(ctx, HandlerKind::Watching, &ctx.watching, event).await;
    for (handler, call) in watching {
        // Errors are logged by the Python side and otherwise ignored: events are not retried.
        let invoked = hooks::invoke_metered(&*ctx.hooks, call, &handler.id, "watching").await;
        invoked.apply_to(&handler.id, &mut patch);
    }
    patch
}

fn dedup_ids(ids: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    ids.filter(|id| seen.insert(id.clone())).collect()
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Kopf logs diffs as Python tuples: `(('change', ('spec', 'x'), 1, 2),)`; secret values redacted.
fn diff_repr(object: &ObjectRef, diff: &Diff) -> String {
    let items: Vec<String> = diff
        .iter()
        .map(|item| {
            let op = match item.op {
                diffs::Operation::Add => "add",
                diffs::Operation::Change => "change",
                diffs::Operation::Remove => "remove",
            };
            let field: Vec<String> = item
                .field
                .iter()
                .map(|f| to_python_repr(&Value::String(f.clone())))
                .collect();
            let field = match field.len() {
                1 => format!("({},)", field[0]),
                _ => format!("({})", field.join(", ")),
            };
            format!(
                "('{op}', {field}, {}, {})",
                to_python_repr(&redaction::redacted_at(object, &item.field, &item.old)),
                to_python_repr(&redaction::redacted_at(object, &item.field, &item.new))
            )
        })
        .collect();
    match items.len() {
        1 => format!("({},)", items[0]),
        _ => format!("({})", items.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::watching::EventType;
    use crate::engine::testing::{self, event, object, Daemon, FakeHooks, FakePatcher, Handlers};
    use crate::ha::pausing::Pause;
    use crate::intents::hooks::HandlerKind;
    use crate::settings::Settings;
    use serde_json::json;

    #[tokio::test(start_paused = true)]
    async fn a_cycle_asks_the_callback_filters_once() {
        let hooks = FakeHooks::new(Daemon::Returning);
        let handlers = Handlers {
            changing: vec![
                testing::handler(json!({"index": 0, "id": "create_fn", "reason": "create",
                                        "has_when": true, "requires_finalizer": true})),
                testing::handler(json!({"index": 1, "id": "update_fn", "reason": "update",
                                        "has_when": true, "requires_finalizer": true})),
            ],
            watching: vec![],
            spawning: vec![testing::handler(
                json!({"index": 0, "id": "timer_fn", "kind": "timer", "has_when": true}),
            )],
            ..Default::default()
        };
        let patcher = Arc::new(FakePatcher::default());
        let ctx = testing::context(handlers, Settings::default(), hooks.clone(), patcher);
        let daemons = Arc::new(Daemons::new(ctx.clone(), Pause::new(0)));
        let mut body = object("a", "1", json!({}));
        body["metadata"]["finalizers"] = json!(["kopf.zalando.org/KopfFinalizerMarker"]);
        let object_daemons = daemons.object("uid-a", &Arc::new(body.clone()));
        let spawning = Some((&daemons, &object_daemons));
        let mut memory = Memory::default();
        let event = event(EventType::Listed, body);
        let cycle = process_changing(&ctx, &mut memory, &event, Patch::default(), spawning)
            .await
            .unwrap();
        assert!(cycle.matched);
        let trips = hooks.trips.lock().unwrap().clone();
        assert_eq!(
            trips,
            [vec![
                (HandlerKind::Changing, 0),
                (HandlerKind::Changing, 1),
                (HandlerKind::Spawning, 0)
            ]],
            "one trip, each callback once"
        );
        let called: Vec<_> = (hooks.calls().into_iter())
            .filter(|c| c.kind == HandlerKind::Changing)
            .map(|c| c.handler)
            .collect();
        assert_eq!(called, [0], "the creation's handler");
        daemons.stop_all().await;
    }

    #[test]
    fn diffs_are_logged_as_python_tuples() {
        let d = diffs::diff(
            Some(&json!({"spec": {"x": 1}})),
            Some(&json!({"spec": {"x": 2}})),
        );
        let object = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "Secret"}));
        assert_eq!(diff_repr(&object, &d), "(('change', ('spec', 'x'), 1, 2),)");
        let d = diffs::diff(
            Some(&json!({"data": {"x": "b2xk"}})),
            Some(&json!({"data": {"x": "bmV3"}})),
        );
        assert_eq!(
            diff_repr(&object, &d),
            "(('change', ('data', 'x'), '<redacted>', '<redacted>'),)"
        );
    }
}
