//! Daemons and timers: for each object and each matching `@kopf.daemon` or
//! `@kopf.timer`, one tokio task (a runner) that calls the Python function —
//! once and for long (daemons) or on schedule (timers) — applies its results,
//! and stops when the object is deleted, stops matching, or the operator exits.
//! Python is called only when a function actually runs or a stop flag changes.
//!
//! Here: the daemons of each object and of the resource (`Daemons`), and what they keep
//! (apart: they live as long as their objects); `stopping`: stop flags and how a stopping
//! daemon is waited for; `runner`: one daemon's or timer's task; `tests`.

use crate::engine::context::ResourceContext;
use crate::ha::pausing::Pause;
use crate::intents::handlers::{SpawningHandler, SpawningKind};
use crate::intents::hooks::Hooks;
use crate::state::bodies::CompactBody;
use crate::util::logging::ObjectRef;
use crate::util::tasks;
use region::apart;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

mod runner;
mod stopping;
#[cfg(test)]
mod tests;

use runner::Runner;
use stopping::{Stopper, Stopping, NEXT_TOKEN};

/// The bits of `kopf.DaemonStoppingReason`, in Kopf's order.
pub mod reasons {
    pub(crate) const DONE: u32 = 1;
    pub(crate) const FILTERS_MISMATCH: u32 = 2;
    pub(crate) const RESOURCE_DELETED: u32 = 4;
    pub(crate) const OPERATOR_PAUSING: u32 = 8;
    pub(crate) const OPERATOR_EXITING: u32 = 16;
    pub(crate) const DAEMON_SIGNALLED: u32 = 32;
    pub(crate) const DAEMON_CANCELLED: u32 = 64;
    pub(crate) const DAEMON_ABANDONED: u32 = 128;
}

/// An object's latest state, compact between events: the runners parse it only for a
/// call or a patch.
type Latest = Arc<Mutex<Arc<CompactBody>>>;

/// A running daemon or timer of one object, as its stoppers see it.
#[derive(Clone)]
struct Daemon {
    handler: Arc<SpawningHandler>,
    stopper: Arc<Stopper>,
    /// The object's latest state (for log lines about it).
    body: Latest,
}

impl Daemon {
    fn object(&self) -> ObjectRef {
        self.body.lock().expect("not poisoned").object()
    }

    fn done(&self) -> bool {
        self.stopper.exited.is_raised()
    }

    /// Wait up to `seconds` for the runner to exit; true if it has.
    async fn wait_exit(&self, seconds: f64) -> bool {
        self.stopper.exited.wait(seconds.max(0.0)).await
    }
}

#[derive(Default)]
struct Running {
    daemons: HashMap<String, Daemon>,
    /// Handlers that exited on their own: never spawned again for this object.
    forever_stopped: HashSet<String>,
}

/// The daemons of one object, and what they share: the live body and the idle clock.
pub struct ObjectDaemons {
    /// Shared with every call of its daemons (a call names its object by it).
    key: Arc<str>,
    running: Mutex<Running>,
    body: Latest,
    /// The last essential change (for `idle=` timers).
    idle_reset: Mutex<Instant>,
    /// Wakes the object's worker when a daemon exits (to finish a deletion promptly).
    pub exited: Notify,
}

impl ObjectDaemons {
    /// Take the object's latest state; an essential change restarts the idle clocks.
    pub(crate) fn refresh(&self, body: &Arc<Value>, essential_change: bool, hooks: &dyn Hooks) {
        let compact = CompactBody::kept(body);
        *self.body.lock().expect("not poisoned") = compact.clone();
        if essential_change {
            *self.idle_reset.lock().expect("not poisoned") = Instant::now();
        }
        let long_running = (self.running.lock().expect("not poisoned").daemons.values())
            .any(|d| d.handler.kind == SpawningKind::Daemon);
        if long_running {
            hooks.refresh_body(&self.key, &compact);
        }
    }

    pub(crate) fn forever_stopped(&self) -> HashSet<String> {
        self.running
            .lock()
            .expect("not poisoned")
            .forever_stopped
            .clone()
    }

    fn snapshot(&self) -> Vec<Daemon> {
        let running = self.running.lock().expect("not poisoned");
        running.daemons.values().cloned().collect()
    }
}

/// All daemons of one resource's stream (one dispatcher).
pub struct Daemons {
    /// The resource's context: its handlers, settings and hooks.
    pub ctx: Arc<ResourceContext>,
    /// Nothing is called while the operator is paused (peering, leader election).
    pause: Arc<Pause>,
    objects: Mutex<HashMap<String, Arc<ObjectDaemons>>>,
    /// The operator is exiting: nothing new is spawned.
    closing: AtomicBool,
}

impl Daemons {
    /// None yet; they follow the operator's pause.
    pub fn new(ctx: Arc<ResourceContext>, pause: Arc<Pause>) -> Self {
        Self {
            ctx,
            pause,
            objects: Mutex::default(),
            closing: AtomicBool::new(false),
        }
    }

    /// The object's daemons (created on first use, with this body as the live one). What
    /// lives as long as the object's daemons is allocated `apart` (see `region::apart`).
    pub fn object(&self, key: &str, body: &Arc<Value>) -> Arc<ObjectDaemons> {
        let mut objects = self.objects.lock().expect("not poisoned");
        if let Some(object) = objects.get(key) {
            return object.clone();
        }
        // Without our finalizer, the body is replaced at once by our own write's (daemons
        // need the finalizer): kept apart, its slot would stay unused, as the next body is
        // bigger (a slot is reused only for a value of its size).
        let finalizer = &self.ctx.settings.persistence.finalizer;
        let compact = if crate::util::dicts::has_finalizer(body, finalizer) {
            CompactBody::kept(body)
        } else {
            Arc::new(CompactBody::of(body))
        };
        apart(|| {
            let object = Arc::new(ObjectDaemons {
                key: key.into(),
                running: Mutex::default(),
                body: Arc::new(Mutex::new(compact)),
                idle_reset: Mutex::new(Instant::now()),
                exited: Notify::new(),
            });
            objects.insert(key.to_owned(), object.clone());
            object
        })
    }

    /// The object is gone from the cluster: stop what may still run, and forget it.
    pub fn forget(self: &Arc<Self>, key: &str) {
        let removed = self.objects.lock().expect("not poisoned").remove(key);
        if let Some(object) = removed {
            let stoppable = (object.snapshot().into_iter())
                .filter(|d| !d.stopper.has(reasons::DAEMON_ABANDONED));
            for daemon in stoppable {
                let this = self.clone();
                tasks::spawn(
                    async move { this.stop_daemon(&daemon, reasons::RESOURCE_DELETED).await },
                );
            }
        }
    }

    /// Spawn the matching daemons that do not run yet; stop the running ones that do not match.
    /// The delays until the stopping ones should be checked again.
    pub(crate) async fn spawn_and_match(
        self: &Arc<Self>,
        object: &Arc<ObjectDaemons>,
        matching: &[&Arc<SpawningHandler>],
    ) -> Vec<f64> {
        // The pause itself, not a flag set by a task after it changes: the watch-streams
        // resume and list the objects again at once, and may come before that task.
        if !self.closing.load(Ordering::SeqCst) && !self.pause.is_paused() {
            for handler in matching {
                self.spawn(object, handler);
            }
        }
        let ids: HashSet<&str> = matching.iter().map(|h| h.id.as_str()).collect();
        let mismatching: Vec<Daemon> = (object.snapshot().into_iter())
            .filter(|d| !ids.contains(d.handler.id.as_str()))
            .collect();
        self.stop_daemons(&mismatching, reasons::FILTERS_MISMATCH)
            .await
    }

    /// The object is being deleted: stop all its daemons, over several cycles if needed.
    pub(crate) async fn stop_for_deletion(&self, object: &ObjectDaemons) -> Vec<f64> {
        self.stop_daemons(&object.snapshot(), reasons::RESOURCE_DELETED)
            .await
    }

    fn spawn(self: &Arc<Self>, object: &Arc<ObjectDaemons>, handler: &Arc<SpawningHandler>) {
        let mut running = object.running.lock().expect("not poisoned");
        if running.daemons.contains_key(&handler.id)
            || running.forever_stopped.contains(&handler.id)
        {
            return;
        }
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        // The daemon's record and its runner's task live as long as the daemon: kept apart.
        apart(|| {
            let daemon = Daemon {
                handler: handler.clone(),
                stopper: Arc::new(Stopper::new(token)),
                body: object.body.clone(),
            };
            running.daemons.insert(handler.id.clone(), daemon.clone());
            let runner = Runner {
                daemons: self.clone(),
                object: object.clone(),
                handler: daemon.handler,
                stopper: daemon.stopper,
            };
            tasks::spawn(runner.run());
        });
    }

    /// Kopf's multi-cycle stopping (for deletion and mismatching filters): one step of
    /// each daemon's stopping; the delays until the still running ones are looked at again.
    async fn stop_daemons(&self, daemons: &[Daemon], reason: u32) -> Vec<f64> {
        let mut delays = Vec::new();
        for daemon in daemons {
            delays.extend(Stopping::new(self, daemon).step(reason).await);
        }
        delays
    }

    /// Kopf's one-go stopping (for the operator's exit): all the steps, waiting in between.
    async fn stop_daemon(&self, daemon: &Daemon, reason: u32) {
        Stopping::new(self, daemon).all_the_way(reason).await;
    }

    /// The operator exits: stop all daemons of all objects at once, each in Kopf's one-go way.
    pub(crate) async fn stop_all(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.stop_everything(reasons::OPERATOR_EXITING).await;
    }

    /// The operator pauses (or resumes): stop all daemons; they are spawned again when
    /// their objects are seen after the pause (the watch-streams list them all again).
    pub async fn set_paused(&self, paused: bool) {
        // (not if it has resumed meanwhile: the daemons spawned since then stay)
        if paused && self.pause.is_paused() {
            self.stop_everything(reasons::OPERATOR_PAUSING).await;
        }
    }

    async fn stop_everything(&self, reason: u32) {
        let objects: Vec<Arc<ObjectDaemons>> = (self.objects.lock().expect("not poisoned"))
            .values()
            .cloned()
            .collect();
        let daemons = objects.iter().flat_map(|o| o.snapshot());
        let stopping = daemons.map(|daemon| async move { self.stop_daemon(&daemon, reason).await });
        futures::future::join_all(stopping).await;
    }
}
