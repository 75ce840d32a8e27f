//! One processing cycle of one object: from a raw watch event to the handlers
//! to call (causes, filters, progress) and the patch that records the outcome.
//! The patch is applied by `applying`; the order of events is kept by `queueing`.

use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{Cycle, Memory, ResourceContext};
use crate::engine::daemons::{Daemons, ObjectDaemons};
use crate::engine::handlers::{ChangingHandler, Match, Reason, SpawningHandler};
use crate::engine::hooks::{HandlerKind, Invocation};
use crate::object_log;
use crate::state::diffs::{self, Diff};
use crate::state::patches::{FinalizerOp, Patch};
use crate::state::progression::{deliver_result, State};
use crate::state::StorageResult;
use crate::util::dicts::{self, FieldPath};
use crate::util::encoding::to_python_repr;
use crate::util::logging::ObjectRef;
use chrono::Utc;
use serde_json::Value;
use std::sync::Arc;
use tracing::Level;

struct Change {
    reason: Reason,
    old: Option<Value>,
    new: Option<Value>,
    diff: Diff,
    initial: bool,
}

/// An object's daemons and the registry they belong to (for resources with daemons or timers).
pub type Spawning<'a> = Option<(&'a Arc<Daemons>, &'a Arc<ObjectDaemons>)>;

/// The change-handling part of a cycle, on the latest known state of an object; daemons
/// and timers are spawned or stopped first. `patch` holds what must be applied anyway
/// (e.g. from `on.event` handlers).
///
/// If a storage fails, what the cycle wanted to patch so far is kept for the next cycle.
pub async fn process_changing(
    ctx: &ResourceContext,
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
    ctx: &ResourceContext,
    memory: &mut Memory,
    event: &RawEvent,
    cycle: &mut Cycle,
    spawning: Spawning<'_>,
) -> StorageResult<()> {
    let body = &event.object;
    let object = ObjectRef::of(body);
    let patch_initially_empty = cycle.patch.is_empty();
    let finalizer = &ctx.settings.persistence.finalizer;
    let detected = detect_change(ctx, memory, event)?;
    let (spawning_delays, spawning_blocks) = match spawning {
        Some((daemons, object)) => {
            let deleted = event.event_type == EventType::Deleted;
            let essential = !detected.diff.is_empty();
            process_spawning(ctx, daemons, object, body, deleted, essential).await
        }
        None => (Vec::new(), false),
    };
    let mut change = (!ctx.changing.is_empty()).then_some(detected);
    if let Some(c) = &change {
        if !any_prematch(ctx, ctx.changing.iter(), body, c).await {
            change = None;
        }
    }

    let deletion_ongoing = is_deletion_ongoing(body);
    let deletion_blocked = is_deletion_blocked(body, finalizer);
    let must_block = spawning_blocks
        || match &change {
            Some(c) => {
                any_prematch(
                    ctx,
                    ctx.changing.iter().filter(|h| h.requires_finalizer),
                    body,
                    c,
                )
                .await
            }
            None => false,
        };
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

    if let Some(c) = &change {
        cycle.matched = true;
        let delays = process_change(ctx, memory, body, &object, c, &mut cycle.patch).await?;
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

/// Daemons and timers: refresh what they see, spawn the matching ones, stop the others
/// (all of them if the object is being deleted). The delays until the stopping ones are
/// checked again, and whether the object must keep the finalizer for them.
async fn process_spawning(
    ctx: &ResourceContext,
    daemons: &Arc<Daemons>,
    object: &Arc<ObjectDaemons>,
    body: &Arc<Value>,
    deleted: bool,
    essential_change: bool,
) -> (Vec<f64>, bool) {
    object.refresh(body, essential_change, ctx.hooks.as_ref());
    let excluded = object.forever_stopped();
    let candidates: Vec<(&SpawningHandler, Match)> = (ctx.spawning.iter())
        .filter(|h| !excluded.contains(&h.id))
        .map(|h| (h, h.filters.prematch(body, None)))
        .filter(|(_, m)| *m != Match::No)
        .collect();
    let matching = select_by(ctx, candidates, |h| {
        invocation(ctx, HandlerKind::Spawning, h.index, None, body, None)
    })
    .await;
    let delays = if deleted || is_deletion_ongoing(body) {
        daemons.stop_for_deletion(object).await
    } else {
        daemons.spawn_and_match(object, &matching).await
    };
    (delays, !matching.is_empty())
}

fn is_deletion_ongoing(body: &Value) -> bool {
    dicts::meta(body, "deletionTimestamp").is_some_and(|v| !v.is_null())
}

fn is_deletion_blocked(body: &Value, finalizer: &str) -> bool {
    dicts::meta(body, "finalizers")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|f| f.as_str() == Some(finalizer)))
}

fn detect_change(
    ctx: &ResourceContext,
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
    let diff = diffs::diff(old.as_ref(), Some(&new));
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
    Ok(Change {
        reason,
        old,
        new: Some(new),
        diff,
        initial,
    })
}

/// Prepare a call of a handler (with the cause reduced to its field, if any).
fn invocation(
    ctx: &ResourceContext,
    kind: HandlerKind,
    index: usize,
    field: Option<&FieldPath>,
    body: &Arc<Value>,
    change: Option<&Change>,
) -> Invocation {
    let (old, new, diff) = match (change, field) {
        (None, _) => (None, None, None),
        (Some(c), None) => (c.old.clone(), c.new.clone(), Some(c.diff.clone())),
        (Some(c), Some(field)) => (
            c.old
                .as_ref()
                .and_then(|o| dicts::resolve(o, field))
                .cloned(),
            c.new
                .as_ref()
                .and_then(|n| dicts::resolve(n, field))
                .cloned(),
            Some(diffs::reduce(&c.diff, field)),
        ),
    };
    Invocation {
        reason: change.map(|c| c.reason),
        old,
        new,
        diff,
        ..Invocation::new(kind, index, ctx.resource.clone(), body.clone())
    }
}

/// Static filters here; callbacks in one trip to Python for all undecided handlers.
async fn select<'h>(
    ctx: &ResourceContext,
    candidates: Vec<(&'h ChangingHandler, Match)>,
    body: &Arc<Value>,
    change: &Change,
) -> Vec<&'h ChangingHandler> {
    // Callbacks get the whole cause (as in Kopf), not one reduced to the handler's field.
    select_by(ctx, candidates, |h| {
        invocation(
            ctx,
            HandlerKind::Changing,
            h.index,
            None,
            body,
            Some(change),
        )
    })
    .await
}

/// The candidates that match: the static `Yes`es, and the undecided ones their callbacks
/// accept (`call` describes a handler's call for its callbacks).
async fn select_by<'h, H>(
    ctx: &ResourceContext,
    candidates: Vec<(&'h H, Match)>,
    call: impl Fn(&H) -> Invocation,
) -> Vec<&'h H> {
    let mut verdicts = ask_python(ctx, candidates.iter().map(|(h, m)| (*m, || call(h))))
        .await
        .into_iter();
    candidates
        .into_iter()
        .filter(|(_, m)| match m {
            Match::Yes => true,
            Match::AskPython => verdicts.next().unwrap_or(false),
            Match::No => false,
        })
        .map(|(h, _)| h)
        .collect()
}

/// The callbacks' verdicts for the undecided (`AskPython`) candidates, in their order:
/// one trip to Python for all of them, none if nothing is undecided.
async fn ask_python<F: FnOnce() -> Invocation>(
    ctx: &ResourceContext,
    candidates: impl Iterator<Item = (Match, F)>,
) -> Vec<bool> {
    let undecided: Vec<Invocation> = candidates
        .filter(|(m, _)| *m == Match::AskPython)
        .map(|(_, call)| call())
        .collect();
    if undecided.is_empty() {
        Vec::new()
    } else {
        ctx.hooks.check_callbacks(undecided).await
    }
}

fn static_prematch(h: &ChangingHandler, body: &Value, change: &Change) -> Match {
    h.filters
        .prematch(body, Some((change.old.as_ref(), change.new.as_ref())))
}

/// Does any of these handlers match (statically, or by its callbacks if needed)?
async fn any_prematch<'h>(
    ctx: &ResourceContext,
    handlers: impl Iterator<Item = &'h ChangingHandler>,
    body: &Arc<Value>,
    change: &Change,
) -> bool {
    let candidates: Vec<_> = handlers
        .map(|h| (h, static_prematch(h, body, change)))
        .filter(|(_, m)| *m != Match::No)
        .collect();
    if candidates.iter().any(|(_, m)| *m == Match::Yes) {
        return true;
    }
    !select(ctx, candidates, body, change).await.is_empty()
}

/// The handlers for this cause: by reason, initial/deleted flags, and all filters.
async fn cause_handlers<'h>(
    ctx: &'h ResourceContext,
    body: &Arc<Value>,
    change: &Change,
) -> Vec<&'h ChangingHandler> {
    let deleted = change.reason == Reason::Delete;
    let candidates: Vec<_> = ctx
        .changing
        .iter()
        .filter(|h| h.reason.is_none_or(|r| r == change.reason))
        // Resuming handlers only in initial causes, and on deletion only if they ask for it.
        .filter(|h| !h.initial || change.initial)
        .filter(|h| !h.initial || !deleted || h.deleted)
        .map(|h| {
            let m = match static_prematch(h, body, change) {
                Match::No => Match::No,
                first => match (
                    first,
                    h.match_field_changes(change.old.as_ref(), change.new.as_ref()),
                ) {
                    (_, Match::No) => Match::No,
                    (Match::Yes, Match::Yes) => Match::Yes,
                    _ => Match::AskPython,
                },
            };
            (h, m)
        })
        .filter(|(_, m)| *m != Match::No)
        .collect();
    let mut selected = select(ctx, candidates, body, change).await;
    // The same function under the same id runs once per cause (e.g. @on.create + @on.resume).
    let mut seen = std::collections::HashSet::new();
    selected.retain(|h| seen.insert(h.id.clone()));
    selected
}

async fn process_change(
    ctx: &ResourceContext,
    memory: &mut Memory,
    body: &Arc<Value>,
    object: &ObjectRef,
    change: &Change,
    patch: &mut Patch,
) -> StorageResult<Vec<f64>> {
    let hooks = &ctx.hooks;
    let mut delays = Vec::new();
    let mut done_or_skipped = false;

    if change.reason.is_for_handlers() {
        let now = Utc::now();
        let purpose = change.reason.as_str();
        let title = Reason::title(purpose);
        let owned_ids: Vec<String> = dedup_ids(ctx.changing.iter().map(|h| h.id.clone()));
        let handlers = cause_handlers(ctx, body, change).await;
        let handler_ids: Vec<String> = handlers.iter().map(|h| h.id.clone()).collect();
        let storage = ctx.progress.as_ref();

        let mut state = State::from_storage(body, storage, &owned_ids, now)?
            .with_purpose(purpose, &[])
            .with_handlers(&handler_ids, now);
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
            state = state.with_purpose(purpose, &handler_ids);
        }
        if !extras.is_empty() {
            state.purge(body, patch, storage, &owned_ids)?;
        }

        object_log!(
            Level::DEBUG,
            object,
            "{} is in progress: {}",
            capitalize(&title),
            to_python_repr(body)
        );
        if !change.diff.is_empty() && change.old.is_some() && change.new.is_some() {
            object_log!(
                Level::DEBUG,
                object,
                "{} diff: {}",
                capitalize(&title),
                diff_repr(&change.diff)
            );
        }

        if handlers.is_empty() {
            done_or_skipped = true;
        } else {
            // Kopf's default lifecycle (`asap`): one awakened handler, the least retried first.
            let mut awakened: Vec<&&ChangingHandler> = handlers
                .iter()
                .filter(|h| state.get(&h.id).is_some_and(|s| s.awakened(now)))
                .collect();
            awakened.sort_by_key(|h| state.get(&h.id).map_or(0, |s| s.retries));
            if let Some(handler) = awakened.first() {
                let handler_state = state
                    .get(&handler.id)
                    .expect("selected handlers have states");
                let mut call = invocation(
                    ctx,
                    HandlerKind::Changing,
                    handler.index,
                    handler.filters.field.as_ref(),
                    body,
                    Some(change),
                );
                call.retry = handler_state.retries;
                call.started = Some(crate::state::progression::format_time(
                    handler_state.started,
                ));
                call.runtime = handler_state.runtime(Utc::now());
                let invoked = hooks.invoke(call).await;
                if let Some(handler_patch) = &invoked.patch {
                    patch.merge_from(handler_patch);
                }
                deliver_result(&handler.id, &invoked.outcome, patch);
                state = state.with_outcome(&handler.id, &invoked.outcome, Utc::now());
            }
            state.store(body, patch, storage)?;
            if state.done() {
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
                done_or_skipped = true;
            }
            delays = state.delays(Utc::now());
        }
    }

    if done_or_skipped {
        if let Some(new) = &change.new {
            if change.old.as_ref() != Some(new) {
                ctx.diffbase.store(body, patch, new)?;
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

/// `on.event` handlers: called for every event, in order, silently; never retried.
/// Their results and patches are returned, to be applied with the cycle's patch.
pub async fn process_watching(ctx: &ResourceContext, event: &RawEvent) -> Patch {
    let mut patch = Patch::default();
    if ctx.watching.is_empty() {
        return patch;
    }
    let body = &event.object;
    let mut candidates = Vec::new();
    for handler in &ctx.watching {
        let m = handler.filters.prematch(body, None);
        if m != Match::No {
            let mut call = invocation(ctx, HandlerKind::Watching, handler.index, None, body, None);
            call.event_type = Some(event.event_type);
            candidates.push((handler, call, m));
        }
    }
    let mut verdicts = ask_python(
        ctx,
        candidates.iter().map(|(_, call, m)| (*m, || call.clone())),
    )
    .await
    .into_iter();
    for (handler, call, m) in candidates {
        let wanted = m == Match::Yes || verdicts.next().unwrap_or(false);
        if wanted {
            // Errors are logged by the Python side and otherwise ignored: events are not retried.
            let invoked = ctx.hooks.invoke(call).await;
            if let Some(handler_patch) = &invoked.patch {
                patch.merge_from(handler_patch);
            }
            deliver_result(&handler.id, &invoked.outcome, &mut patch);
        }
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

/// Kopf logs diffs as Python tuples: `(('change', ('spec', 'x'), 1, 2),)`.
fn diff_repr(diff: &Diff) -> String {
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
                to_python_repr(&item.old),
                to_python_repr(&item.new)
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
    use serde_json::json;

    #[test]
    fn diffs_are_logged_as_python_tuples() {
        let d = diffs::diff(
            Some(&json!({"spec": {"x": 1}})),
            Some(&json!({"spec": {"x": 2}})),
        );
        assert_eq!(diff_repr(&d), "(('change', ('spec', 'x'), 1, 2),)");
    }
}
