//! Which handlers a cycle calls. What the filters decide without Python (labels and
//! annotations, field values, the cause's reason) is decided here; the callbacks of the
//! handlers left undecided (`when=`, callable values) are asked in one trip to Python per
//! cycle, and their verdicts serve every question of the cycle.

use crate::client::watching::RawEvent;
use crate::engine::context::{Change, ResourceContext};
use crate::intents::handlers::{ChangingHandler, Filtered, Match, SpawningHandler};
use crate::intents::hooks::{HandlerKind, Invocation};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The callbacks' verdicts of one cycle, by handler (its position in the registry).
#[derive(Debug, Default)]
pub(crate) struct Verdicts {
    changing: HashMap<usize, bool>,
    spawning: HashMap<usize, bool>,
}

impl Verdicts {
    /// Ask, at once, the callbacks of every handler that this cycle may need and that the
    /// static filters leave undecided: the change handlers (for the cause, if any) and
    /// these daemons and timers.
    pub async fn ask(
        ctx: &ResourceContext,
        body: &Arc<Value>,
        change: Option<&Change>,
        spawning: &[(&Arc<SpawningHandler>, Match)],
    ) -> Self {
        let changing = match change {
            Some(change) => undecided(ctx, body, change),
            None => Vec::new(),
        };
        let spawning: Vec<&SpawningHandler> = (spawning.iter())
            .filter(|(_, m)| *m == Match::AskPython)
            .map(|(h, _)| Arc::as_ref(h))
            .collect();
        Self::trip(ctx, body, change, None, &changing, &spawning).await
    }

    /// Ask, at once, the callbacks of the sub-handlers of one scope that the cause's static
    /// filters leave undecided (sub-handlers have no other questions).
    pub(crate) async fn ask_children(
        ctx: &ResourceContext,
        scope: u64,
        children: &[ChangingHandler],
        body: &Arc<Value>,
        change: &Change,
    ) -> Self {
        let undecided: Vec<&ChangingHandler> = (children.iter())
            .filter(|h| cause_match(h, body, change) == Match::AskPython)
            .collect();
        Self::trip(ctx, body, Some(change), Some(scope), &undecided, &[]).await
    }

    /// One trip to Python for these handlers' callbacks (none if there are none).
    async fn trip(
        ctx: &ResourceContext,
        body: &Arc<Value>,
        change: Option<&Change>,
        scope: Option<u64>,
        changing: &[&ChangingHandler],
        spawning: &[&SpawningHandler],
    ) -> Self {
        if changing.is_empty() && spawning.is_empty() {
            return Self::default();
        }
        // Callbacks get the whole cause (as in Kopf), not one reduced to the handler's field.
        let changing_calls = (changing.iter()).map(|h| {
            let mut call = ctx.invocation(HandlerKind::Changing, h.index, None, body, change);
            call.scope = scope;
            call
        });
        let spawning_calls = (spawning.iter())
            .map(|h| ctx.invocation(HandlerKind::Spawning, h.index, None, body, None));
        let calls = changing_calls.chain(spawning_calls).collect();
        let mut verdicts = ctx.hooks.check_callbacks(calls).await.into_iter();
        Self {
            changing: (changing.iter())
                .map(|h| (h.index, verdicts.next().unwrap_or(false)))
                .collect(),
            spawning: (spawning.iter())
                .map(|h| (h.index, verdicts.next().unwrap_or(false)))
                .collect(),
        }
    }

    fn changing(&self, handler: &ChangingHandler) -> bool {
        self.changing.get(&handler.index).copied().unwrap_or(false)
    }
}

/// The change handlers whose callbacks the cycle's questions need (each once): any
/// handler matching at all, any matching handler that requires the finalizer (each
/// question decided statically if a handler matches without callbacks), and the
/// handlers of the cause.
fn undecided<'h>(
    ctx: &'h ResourceContext,
    body: &Value,
    change: &Change,
) -> Vec<&'h ChangingHandler> {
    let for_any = |handlers: Vec<&'h ChangingHandler>| {
        let statically: Vec<Match> = (handlers.iter())
            .map(|h| static_match(h, body, change))
            .collect();
        if statically.contains(&Match::Yes) {
            Vec::new()
        } else {
            (handlers.into_iter().zip(statically))
                .filter(|(_, m)| *m == Match::AskPython)
                .map(|(h, _)| h)
                .collect()
        }
    };
    let all: Vec<&ChangingHandler> = ctx.changing.iter().collect();
    let finalizing = all
        .iter()
        .copied()
        .filter(|h| h.requires_finalizer)
        .collect();
    let of_the_cause = (ctx.changing.iter()).filter(|h| {
        change.reason.is_for_handlers() && cause_match(h, body, change) == Match::AskPython
    });
    let mut seen = HashSet::new();
    (for_any(all).into_iter())
        .chain(for_any(finalizing))
        .chain(of_the_cause)
        .filter(|h| seen.insert(h.index))
        .collect()
}

/// Labels, annotations and field values, in the old or the new essence.
fn static_match(handler: &ChangingHandler, body: &Value, change: &Change) -> Match {
    let essences = (change.old.as_ref(), change.new.as_ref());
    handler.filters.prematch(body, Some(essences))
}

/// All static filters of a handler for this cause: its reason, resuming and deletion
/// flags, metadata and field values, and the field's change.
fn cause_match(handler: &ChangingHandler, body: &Value, change: &Change) -> Match {
    let deleted = change.reason == crate::intents::handlers::Reason::Delete;
    let relevant = handler.reason.is_none_or(|r| r == change.reason)
        // Resuming handlers only in initial causes, and on deletion only if they ask for it.
        && (!handler.initial || change.initial)
        && (!handler.initial || !deleted || handler.deleted);
    if !relevant {
        return Match::No;
    }
    match static_match(handler, body, change) {
        Match::No => Match::No,
        first => match (
            first,
            handler.match_field_changes(change.old.as_ref(), change.new.as_ref()),
        ) {
            (_, Match::No) => Match::No,
            (Match::Yes, Match::Yes) => Match::Yes,
            _ => Match::AskPython,
        },
    }
}

fn decided(m: Match, callbacks: impl FnOnce() -> bool) -> bool {
    match m {
        Match::Yes => true,
        Match::AskPython => callbacks(),
        Match::No => false,
    }
}

/// Does any of these handlers match the change (statically, or by its callbacks)?
pub(crate) fn any_matches<'h>(
    verdicts: &Verdicts,
    mut handlers: impl Iterator<Item = &'h ChangingHandler>,
    body: &Value,
    change: &Change,
) -> bool {
    handlers.any(|h| decided(static_match(h, body, change), || verdicts.changing(h)))
}

/// The handlers of this cause among these, each id once (the same function may be
/// registered for several causes, e.g. `@on.create` and `@on.resume`: it runs once per cause).
pub(crate) fn cause_handlers<'h>(
    handlers: &'h [ChangingHandler],
    verdicts: &Verdicts,
    body: &Value,
    change: &Change,
) -> Vec<&'h ChangingHandler> {
    let mut seen = HashSet::new();
    (handlers.iter())
        .filter(|h| decided(cause_match(h, body, change), || verdicts.changing(h)))
        .filter(|h| seen.insert(h.id.clone()))
        .collect()
}

/// The daemons and timers of the candidates that match.
pub(crate) fn matching_spawning<'h>(
    verdicts: &Verdicts,
    candidates: &[(&'h Arc<SpawningHandler>, Match)],
) -> Vec<&'h Arc<SpawningHandler>> {
    (candidates.iter())
        .filter(|(h, m)| {
            decided(*m, || {
                verdicts.spawning.get(&h.index).copied().unwrap_or(false)
            })
        })
        .map(|(h, _)| *h)
        .collect()
}

/// The handlers of these (`on.event` or indexing ones) that match an event, each with its
/// call; the undecided ones' callbacks in one trip.
pub(crate) async fn for_event<'h, H: Filtered>(
    ctx: &ResourceContext,
    kind: HandlerKind,
    handlers: &'h [H],
    event: &RawEvent,
) -> Vec<(&'h H, Invocation)> {
    let body = &event.object;
    let candidates: Vec<(&H, Invocation, Match)> = (handlers.iter())
        .map(|h| (h, h.filters().prematch(body, None)))
        .filter(|(_, m)| *m != Match::No)
        .map(|(h, m)| {
            let mut call = ctx.invocation(kind, h.index(), None, body, None);
            // Only `on.event` handlers see the event itself (`type`, `event`).
            call.event_type = (kind == HandlerKind::Watching).then_some(event.event_type);
            (h, call, m)
        })
        .collect();
    let undecided: Vec<Invocation> = (candidates.iter())
        .filter(|(_, _, m)| *m == Match::AskPython)
        .map(|(_, call, _)| call.clone())
        .collect();
    let mut verdicts = if undecided.is_empty() {
        Vec::new()
    } else {
        ctx.hooks.check_callbacks(undecided).await
    }
    .into_iter();
    (candidates.into_iter())
        .filter(|(_, _, m)| decided(*m, || verdicts.next().unwrap_or(false)))
        .map(|(h, call, _)| (h, call))
        .collect()
}
