//! What the engine keeps per resource (its handlers, storages and settings) and per
//! object (what is remembered between events), and what one processing cycle yields:
//! shared by the processing of changes and by the daemons.

use crate::client::applying::Patcher;
use crate::client::resources::Resource;
use crate::engine::waking::{OwnerBodies, OwnerKind, Wakers};
use crate::indices::Indices;
use crate::intents::handlers::{
    ChangingHandler, Filtered, IndexingHandler, LogHandler, Reason, ReconcilingHandler,
    RelatingHandler, ResourceFilters, SpawningHandler, WatchingHandler,
};
use crate::intents::hooks::{HandlerKind, Hooks, Invocation};
use crate::intents::lifecycles::Lifecycle;
use crate::settings::Settings;
use crate::state::diffbase::DiffBaseStorage;
use crate::state::diffs::{self, Diff};
use crate::state::patches::Patch;
use crate::state::progress::ProgressStorage;
use crate::state::progression::HandlerState;
use crate::util::dicts::{self, FieldPath};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What the engine remembers about one object between its events.
#[derive(Debug, Default)]
pub struct Memory {
    /// Seen first in the initial listing: resume handlers apply.
    pub noticed_by_listing: bool,
    /// All handlers succeeded once since the start: no more resuming.
    pub fully_handled_once: bool,
    /// What could not be applied last time (a finalizer change in a conflict).
    pub remaining_patch: Option<Patch>,
    /// The uid of the object whose deletion our finalizer's removal has let go: a later
    /// state that still has the finalizer is older than that write (its own event came
    /// late), and its deletion handlers must not run again.
    pub released: Option<Box<str>>,
    /// The failures of its indexing functions.
    pub indexing: IndexingMemory,
    /// Its reconciliation, for resources with `@kopf.on.reconcile` handlers.
    pub reconciling: Option<Box<ReconcileMemory>>,
    /// The owners its related functions named last (`@kopf.related`), if any.
    pub relating: Option<Box<RelatingMemory>>,
}

impl Memory {
    /// What is kept while no worker has the object: nothing allocated for most objects
    /// (only the two flags), the rest only when there is something in it.
    pub fn rest(self) -> Resting {
        let simple = self.remaining_patch.is_none() && self.reconciling.is_none();
        let simple = simple && self.released.is_none();
        let simple = simple && self.relating.as_ref().is_none_or(|r| r.is_empty());
        if simple && self.indexing.failures.is_empty() {
            Resting::Flags {
                noticed_by_listing: self.noticed_by_listing,
                fully_handled_once: self.fully_handled_once,
            }
        } else {
            Resting::Full(Box::new(self))
        }
    }
}

/// An object's memory while no worker has it (see `Memory::rest`).
#[derive(Debug)]
pub enum Resting {
    /// Only its two flags: nothing else was left to remember.
    Flags {
        /// See `Memory::noticed_by_listing`.
        noticed_by_listing: bool,
        /// See `Memory::fully_handled_once`.
        fully_handled_once: bool,
    },
    /// Everything it had.
    Full(Box<Memory>),
}

impl Resting {
    /// The memory back, for a worker.
    pub fn wake(self) -> Memory {
        match self {
            Resting::Flags {
                noticed_by_listing,
                fully_handled_once,
            } => Memory {
                noticed_by_listing,
                fully_handled_once,
                ..Memory::default()
            },
            Resting::Full(memory) => *memory,
        }
    }
}

/// What an object's worker remembers of its reconciliation between events (`reconciling`).
#[derive(Debug, Default)]
pub struct ReconcileMemory {
    /// A digest of the state last attempted (essence and deletion): the same again is not
    /// reconciled again unless it is due.
    pub attempted: Option<u64>,
    /// When it is to be reconciled again though its state stays (a requeue or a retry).
    pub due: Option<tokio::time::Instant>,
    /// Failures in a row since the last success (the `retry` kwarg).
    pub retry: u64,
    /// When the first of those attempts started (the `started` kwarg).
    pub started: Option<chrono::DateTime<chrono::Utc>>,
    /// The object's deletion was reconciled: its finalizer no longer waits for that.
    pub deletion_done: bool,
    /// An object it owns has changed since: due now (`waking`).
    pub woken: bool,
}

/// An owner named by a related function: its namespace (if any) and name.
pub type OwnerName = (Option<String>, String);

/// A related function with the owners' kinds its `owners=` selector picks.
#[derive(Debug, Clone)]
pub struct Relating {
    /// The function.
    pub handler: RelatingHandler,
    /// The kinds of the owners it names (one, unless its selector picks several resources).
    pub owners: Vec<OwnerKind>,
}

impl Filtered for Relating {
    fn index(&self) -> usize {
        self.handler.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.handler.filters
    }
}

/// The owners each related function named for an object last time, by the function's id.
pub type RelatingMemory = HashMap<String, Vec<OwnerName>>;

/// The failures of an object's indexing functions, by index id: retries and delays after
/// temporary errors, or a permanent one. Successes are not remembered (as in Kopf).
#[derive(Debug, Default)]
pub struct IndexingMemory {
    /// The failed ones' states, by index id.
    pub failures: HashMap<String, HandlerState>,
}

/// Objects are told apart by uid (a re-created object is a new one).
pub fn object_key(body: &Value) -> String {
    let text = |key: &str| {
        dicts::meta(body, key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    match text("uid") {
        "" => format!("{}/{}", text("namespace"), text("name")),
        uid => uid.to_owned(),
    }
}

/// Everything shared by the objects of one resource.
pub struct ResourceContext {
    /// The resource served.
    pub resource: Arc<Resource>,
    /// Writes the objects' patches (handlers' results, progress, finalizers).
    pub patcher: Arc<dyn Patcher>,
    /// The operator's settings.
    pub settings: Arc<Settings>,
    /// The handlers' side (Python), through which they are called.
    pub hooks: Arc<dyn Hooks>,
    /// Its change handlers.
    pub changing: Vec<ChangingHandler>,
    /// Its indexing functions.
    pub indexing: Vec<IndexingHandler>,
    /// The operator's indices: filled by this resource's `indexing` handlers, if any.
    pub indices: Arc<Indices>,
    /// Which of the change handlers of a cause run in one cycle.
    pub lifecycle: Lifecycle,
    /// Its `on.event` handlers.
    pub watching: Vec<WatchingHandler>,
    /// Its daemons and timers.
    pub spawning: Vec<Arc<SpawningHandler>>,
    /// `@kopf.on.log` handlers (of pods).
    pub logging: Vec<Arc<LogHandler>>,
    /// `@kopf.on.reconcile` handlers (never beside change handlers: the Python side refuses).
    pub reconciling: Vec<ReconcilingHandler>,
    /// The retries of failed reconcile calls, of all resources together
    /// (`settings.reconciling.retry_rate`).
    pub retry_budget: Arc<crate::util::buckets::TokenBucket>,
    /// Its objects' last bodies, if its reconcile handlers own children (`owns=`): what their
    /// children's changes queue (`waking`).
    pub owner_bodies: Option<Arc<OwnerBodies>>,
    /// The owners' kinds whose reconcile handlers own this resource's objects, and where to
    /// wake them (empty and none: nobody owns them).
    pub owners: Vec<OwnerKind>,
    /// Its related functions (`@kopf.related`): the owners its objects concern.
    pub relating: Vec<Relating>,
    /// The operator's owners, to wake (`waking`): with owners or related functions only.
    pub wakers: Option<Arc<Wakers>>,
    /// Where the handlers' progress is kept.
    pub progress: Arc<dyn ProgressStorage>,
    /// Where the last handled essence is kept.
    pub diffbase: Arc<dyn DiffBaseStorage>,
    /// Fields handlers watch outside the default essence (e.g. in `status`).
    pub extra_fields: Vec<FieldPath>,
}

/// The cause of a cycle: why the object is processed, and how its essence has changed
/// since the last handled state.
#[derive(Debug, Clone)]
pub struct Change {
    /// Why the object is processed.
    pub reason: Reason,
    /// The last handled essence, if any.
    pub old: Option<Value>,
    /// The essence now (none once the object is gone).
    pub new: Option<Value>,
    /// What changed between them.
    pub diff: Diff,
    /// The first cycle of an object seen in the listing: resume handlers apply.
    pub initial: bool,
    /// The stored diff base is written again even if it equals `new`: it is in the other form
    /// of Secrets' values (digests or values) than `settings.secrets.diffbase_digests` says.
    pub rewrite_base: bool,
}

impl Change {
    /// The change as a handler of this field sees it: old, new and diff of the field only.
    pub(crate) fn reduced(&self, field: Option<&FieldPath>) -> Change {
        let Some(field) = field else {
            return self.clone();
        };
        let resolve = |essence: &Option<Value>| {
            (essence.as_ref())
                .and_then(|e| dicts::resolve(e, field))
                .cloned()
        };
        Change {
            reason: self.reason,
            old: resolve(&self.old),
            new: resolve(&self.new),
            diff: diffs::reduce(&self.diff, field),
            initial: self.initial,
            rewrite_base: self.rewrite_base,
        }
    }
}

impl ResourceContext {
    /// Prepare a call of a handler (with the cause reduced to its field, if any).
    pub fn invocation(
        &self,
        kind: HandlerKind,
        index: usize,
        field: Option<&FieldPath>,
        body: &Arc<Value>,
        change: Option<&Change>,
    ) -> Invocation {
        let change = change.map(|c| c.reduced(field));
        let reason = change.as_ref().map(|c| c.reason);
        let (old, new, diff) = match change {
            None => (None, None, None),
            Some(c) => (c.old, c.new, Some(c.diff)),
        };
        Invocation {
            reason,
            old,
            new,
            diff,
            ..Invocation::new(kind, index, self.resource.clone(), body.clone())
        }
    }
}

/// The result of a cycle: what to patch and how long until handlers want to run again.
#[derive(Debug, Default)]
pub(crate) struct Cycle {
    pub patch: Patch,
    pub delays: Vec<f64>,
    /// Until a reconcile handler is due again (a requeue or a retry): slept in memory, with
    /// no touch of the object when it is due.
    pub requeue: Option<f64>,
    /// A changing cause was processed (for the "cycle is finished" log line).
    pub matched: bool,
}
