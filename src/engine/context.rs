//! What the engine keeps per resource (its handlers, storages and settings) and per
//! object (what is remembered between events), and what one processing cycle yields:
//! shared by the processing of changes and by the daemons.

use crate::client::applying::Patcher;
use crate::client::resources::Resource;
use crate::engine::handlers::{ChangingHandler, SpawningHandler, WatchingHandler};
use crate::engine::hooks::Hooks;
use crate::settings::Settings;
use crate::state::diffbase::DiffBaseStorage;
use crate::state::patches::Patch;
use crate::state::progress::ProgressStorage;
use crate::util::dicts::FieldPath;
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
}

/// Everything shared by the objects of one resource.
pub struct ResourceContext {
    pub resource: Arc<Resource>,
    /// Writes the objects' patches (handlers' results, progress, finalizers).
    pub patcher: Arc<dyn Patcher>,
    pub settings: Arc<Settings>,
    pub hooks: Arc<dyn Hooks>,
    pub changing: Vec<ChangingHandler>,
    pub watching: Vec<WatchingHandler>,
    pub spawning: Vec<SpawningHandler>,
    pub progress: Arc<dyn ProgressStorage>,
    pub diffbase: Arc<dyn DiffBaseStorage>,
    /// Fields handlers watch outside the default essence (e.g. in `status`).
    pub extra_fields: Vec<FieldPath>,
}

/// The result of a cycle: what to patch and how long until handlers want to run again.
#[derive(Debug, Default)]
pub struct Cycle {
    pub patch: Patch,
    pub delays: Vec<f64>,
    /// A changing cause was processed (for the "cycle is finished" log line).
    pub matched: bool,
}
