//! Daemons and timers: for each object and each matching `@kopf.daemon` or
//! `@kopf.timer`, one tokio task (a runner) that calls the Python function —
//! once and for long (daemons) or on schedule (timers) — applies its results,
//! and stops when the object is deleted, stops matching, or the operator exits.
//! Python is called only when a function actually runs or a stop flag changes.

use crate::engine::context::ResourceContext;
use crate::engine::handlers::{SpawningHandler, SpawningKind};
use crate::engine::hooks::{self, DaemonCall, HandlerKind, Hooks, Invocation};
use crate::engine::slack;
use crate::ha::pausing::Pause;
use crate::object_log;
use crate::state::bodies::CompactBody;
use crate::state::patches::Patch;
use crate::state::progression::format_time;
use crate::util::logging::ObjectRef;
use crate::util::tasks;
use chrono::Utc;
use region::apart;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Level;

/// The bits of `kopf.DaemonStoppingReason`, in Kopf's order.
pub mod reasons {
    pub const DONE: u32 = 1;
    pub const FILTERS_MISMATCH: u32 = 2;
    pub const RESOURCE_DELETED: u32 = 4;
    pub const OPERATOR_PAUSING: u32 = 8;
    pub const OPERATOR_EXITING: u32 = 16;
    pub const DAEMON_SIGNALLED: u32 = 32;
    pub const DAEMON_CANCELLED: u32 = 64;
    pub const DAEMON_ABANDONED: u32 = 128;
}

/// Tokens are unique across all resources: the Python side keeps one table of stoppers.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A flag raised once and never lowered, which tasks can wait for. (Each daemon and timer
/// has two: as watch channels, they took 0.7 KB of memory per timer, now 0.1 KB.)
#[derive(Default)]
struct Flag {
    raised: AtomicBool,
    waiters: Notify,
}

impl Flag {
    fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        self.waiters.notify_waiters();
    }

    fn is_raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    /// Wait up to `seconds` for the flag (forever if no duration holds them); whether it is
    /// raised.
    async fn wait(&self, seconds: f64) -> bool {
        let duration = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
        // Registered before the look at the flag: a raise in between is not missed.
        let raised = self.waiters.notified();
        if self.is_raised() {
            return true;
        }
        let _ = tokio::time::timeout(duration, raised).await;
        self.is_raised()
    }
}

/// A daemon's stop flag with its accumulated reasons; mirrored to Python's `stopped` kwarg.
pub struct Stopper {
    token: u64,
    /// The reasons so far and when the flag was first raised.
    state: Mutex<(u32, Option<Instant>)>,
    flag: Flag,
    /// The runner has exited.
    exited: Flag,
}

impl Stopper {
    fn new(token: u64) -> Self {
        Self {
            token,
            state: Mutex::new((0, None)),
            flag: Flag::default(),
            exited: Flag::default(),
        }
    }

    fn set(&self, reason: u32, hooks: &dyn Hooks) {
        let bits = {
            let mut state = self.state.lock().expect("not poisoned");
            state.0 |= reason;
            state.1.get_or_insert_with(Instant::now);
            state.0
        };
        self.flag.raise();
        hooks.daemon_stopping(self.token, bits);
    }

    fn is_set(&self) -> bool {
        self.flag.is_raised()
    }

    fn has(&self, reason: u32) -> bool {
        self.reason() & reason != 0
    }

    fn reason(&self) -> u32 {
        self.state.lock().expect("not poisoned").0
    }

    /// Seconds since the flag was first raised (zero if it is not).
    fn age(&self) -> f64 {
        let when = self.state.lock().expect("not poisoned").1;
        when.map_or(0.0, |w| w.elapsed().as_secs_f64())
    }

    /// Sleep for this long unless stopped first; true if slept in full (and not stopped).
    async fn sleep(&self, seconds: f64) -> bool {
        if self.is_set() {
            return false;
        }
        if seconds <= 0.0 {
            return true;
        }
        !self.flag.wait(seconds).await
    }
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
    pub fn refresh(&self, body: &Arc<Value>, essential_change: bool, hooks: &dyn Hooks) {
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

    pub fn forever_stopped(&self) -> HashSet<String> {
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
    pub ctx: Arc<ResourceContext>,
    /// Nothing is called while the operator is paused (peering, leader election).
    pause: Arc<Pause>,
    objects: Mutex<HashMap<String, Arc<ObjectDaemons>>>,
    /// The operator is exiting: nothing new is spawned.
    closing: AtomicBool,
    /// The operator is paused (peering): nothing is spawned until it resumes.
    paused: AtomicBool,
}

impl Daemons {
    pub fn new(ctx: Arc<ResourceContext>, pause: Arc<Pause>) -> Self {
        Self {
            ctx,
            pause,
            objects: Mutex::default(),
            closing: AtomicBool::new(false),
            paused: AtomicBool::new(false),
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
    pub async fn spawn_and_match(
        self: &Arc<Self>,
        object: &Arc<ObjectDaemons>,
        matching: &[&Arc<SpawningHandler>],
    ) -> Vec<f64> {
        if !self.closing.load(Ordering::SeqCst) && !self.paused.load(Ordering::SeqCst) {
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
    pub async fn stop_for_deletion(&self, object: &ObjectDaemons) -> Vec<f64> {
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
    pub async fn stop_all(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.stop_everything(reasons::OPERATOR_EXITING).await;
    }

    /// The operator pauses (or resumes): stop all daemons; they are spawned again when
    /// their objects are seen after the pause (the watch-streams list them all again).
    pub async fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
        if paused {
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

/// Kopf's stopping of one daemon or timer, in steps: raise its flag with a reason (it may
/// exit at once); after its cancellation backoff, signal it to exit gracefully; after its
/// cancellation timeout, cancel its call; then abandon it. Timers are only flagged.
struct Stopping<'a> {
    daemons: &'a Daemons,
    daemon: &'a Daemon,
    backoff: Option<f64>,
    timeout: Option<f64>,
    object: ObjectRef,
    title: String,
}

impl<'a> Stopping<'a> {
    fn new(daemons: &'a Daemons, daemon: &'a Daemon) -> Self {
        let handler = &daemon.handler;
        let (backoff, timeout) = match handler.kind {
            SpawningKind::Daemon => (handler.cancellation_backoff, handler.cancellation_timeout),
            SpawningKind::Timer => (None, None),
        };
        Self {
            daemons,
            daemon,
            backoff,
            timeout,
            object: daemon.object(),
            title: handler.title(),
        }
    }

    fn hooks(&self) -> &dyn Hooks {
        self.daemons.ctx.hooks.as_ref()
    }

    fn stopper(&self) -> &Stopper {
        &self.daemon.stopper
    }

    /// Seconds that an exit on request may take before the next step.
    fn instant_exit(&self) -> f64 {
        self.daemons.ctx.settings.background.instant_exit()
    }

    /// Raise the flag with this reason; true if the daemon exits right away.
    async fn flag(&self, reason: u32) -> bool {
        self.stopper().set(reason, self.hooks());
        self.daemon.wait_exit(self.instant_exit()).await
    }

    /// Tell it again to exit gracefully; true if it exits within `wait` seconds.
    async fn signal(&self, wait: f64) -> bool {
        self.stopper().set(reasons::DAEMON_SIGNALLED, self.hooks());
        let title = &self.title;
        object_log!(
            Level::DEBUG,
            &self.object,
            "{title} is signalled to exit gracefully."
        );
        self.daemon.wait_exit(wait).await
    }

    /// Cancel its call (async functions only); true if it exits within `wait` seconds.
    async fn cancel(&self, wait: f64) -> bool {
        self.stopper().set(reasons::DAEMON_CANCELLED, self.hooks());
        let title = &self.title;
        object_log!(
            Level::DEBUG,
            &self.object,
            "{title} is signalled to exit by force."
        );
        self.hooks().daemon_cancel(self.stopper().token);
        self.daemon.wait_exit(wait).await
    }

    /// Give up on it: it runs on, unwatched.
    fn abandon(&self) {
        self.stopper().set(reasons::DAEMON_ABANDONED, self.hooks());
        let title = &self.title;
        object_log!(
            Level::WARN,
            &self.object,
            "{title} did not exit in time. Leaving it orphaned."
        );
    }

    /// One look in the multi-cycle stopping: the step that the time since the flag was
    /// raised calls for, once each; the delay until the next look, while it still runs.
    async fn step(&self, reason: u32) -> Option<f64> {
        let stopper = self.stopper();
        let age = stopper.age();
        if !stopper.has(reason) {
            self.flag(reason).await;
        }
        if self.daemon.done() {
            return None;
        }
        let backoff = self.backoff.unwrap_or(0.0);
        if self.backoff.is_some_and(|b| age < b) {
            if !stopper.has(reasons::DAEMON_SIGNALLED) {
                self.signal(self.instant_exit()).await;
            }
            (!self.daemon.done()).then_some(backoff - age)
        } else if let Some(timeout) = self.timeout.filter(|t| age < t + backoff) {
            if !stopper.has(reasons::DAEMON_CANCELLED) {
                self.cancel(self.instant_exit()).await;
            }
            (!self.daemon.done()).then_some(timeout + backoff - age)
        } else if self.timeout.is_some() {
            if !stopper.has(reasons::DAEMON_ABANDONED) {
                self.abandon();
            }
            None
        } else {
            let handler = &self.daemon.handler;
            let polling = (handler.cancellation_polling)
                .filter(|_| handler.kind == SpawningKind::Daemon)
                .unwrap_or(self.daemons.ctx.settings.background.cancellation_polling);
            let title = &self.title;
            object_log!(
                Level::DEBUG,
                &self.object,
                "{title} is still exiting. The next check is in {polling} seconds."
            );
            Some(polling)
        }
    }

    /// The one-go stopping: each step in turn, waiting for the daemon in between.
    async fn all_the_way(&self, reason: u32) {
        if self.flag(reason).await {
            let title = &self.title;
            object_log!(Level::DEBUG, &self.object, "{title} has exited gracefully.");
            return;
        }
        if let Some(backoff) = self.backoff {
            if self.signal(backoff).await {
                return;
            }
        }
        if let Some(timeout) = self.timeout {
            if self.cancel(timeout).await {
                return;
            }
        }
        self.abandon();
    }
}

/// One daemon or timer of one object, from its spawning to its exit.
struct Runner {
    daemons: Arc<Daemons>,
    object: Arc<ObjectDaemons>,
    handler: Arc<SpawningHandler>,
    stopper: Arc<Stopper>,
}

/// A call's in-memory progress: retries and the first attempt's time (as in Kopf, not persisted).
struct Attempts {
    retry: u64,
    started: chrono::DateTime<Utc>,
}

impl Attempts {
    fn new() -> Self {
        Self {
            retry: 0,
            started: Utc::now(),
        }
    }
}

impl Runner {
    fn hooks(&self) -> &dyn Hooks {
        self.daemons.ctx.hooks.as_ref()
    }

    fn body(&self) -> Arc<CompactBody> {
        self.object.body.lock().expect("not poisoned").clone()
    }

    fn invocation(&self, attempts: &Attempts) -> Invocation {
        let now = Utc::now();
        Invocation {
            retry: attempts.retry,
            started: Some(format_time(attempts.started)),
            runtime: (now - attempts.started).num_microseconds().unwrap_or(0) as f64 / 1e6,
            daemon: Some(DaemonCall {
                token: self.stopper.token,
                key: self.object.key.clone(),
                reason: self.stopper.reason(),
                body: self.body(),
            }),
            ..Invocation::new(
                HandlerKind::Spawning,
                self.handler.index,
                self.daemons.ctx.resource.clone(),
                Arc::new(Value::Null), // a daemon's body goes in `daemon.body`, compact
            )
        }
    }

    async fn run(self) {
        let _counted = RunningGauge::start(&self.daemons.ctx.resource, self.handler.kind);
        if self.initial_delay().await {
            match self.handler.kind {
                SpawningKind::Daemon => self.run_daemon().await,
                SpawningKind::Timer => self.run_timer().await,
            }
        }
        self.finish();
    }

    /// Sleep the initial delay; false if stopped meanwhile.
    async fn initial_delay(&self) -> bool {
        let delay = if self.handler.initial_delay_callable {
            let call = self.invocation(&Attempts::new());
            Some(self.hooks().initial_delay(call).await)
        } else {
            self.handler.initial_delay
        };
        match delay {
            Some(delay) => self.stopper.sleep(delay).await,
            None => !self.stopper.is_set(),
        }
    }

    /// Call the function once; apply its results; `None` if the call was cancelled.
    /// Boxed by the callers: the call's state was 0.9 KB of a runner's 1.5 KB, and a runner
    /// needs it only during a call, not while it waits for the next one.
    async fn call(&self, attempts: &mut Attempts) -> Option<crate::state::progression::Outcome> {
        // Counted before the pause is checked: a pause that comes later waits for the call.
        let busy = self.daemons.pause.busy();
        if !self.daemons.pause.is_active() {
            drop(busy);
            // Paused (or a lease not renewed in time): the pause stops this runner soon.
            self.stopper.sleep(f64::from(u32::MAX)).await;
            return None;
        }
        let kind = match self.handler.kind {
            SpawningKind::Daemon => "daemon",
            SpawningKind::Timer => "timer",
        };
        let call = self.invocation(attempts);
        let invoked = hooks::invoke_metered(self.hooks(), call, &self.handler.id, kind).await;
        drop(busy);
        if invoked.cancelled {
            return None;
        }
        let mut patch = Patch::default();
        invoked.apply_to(&self.handler.id, &mut patch);
        if !patch.is_empty() {
            // Boxed: most calls write nothing, and this call's future is made for each one.
            Box::pin(self.apply(patch)).await;
        }
        if invoked.outcome.final_ {
            *attempts = Attempts::new();
        } else {
            attempts.retry += 1;
        }
        Some(invoked.outcome)
    }

    async fn apply(&self, patch: Patch) {
        let body = self.body().value();
        let object = ObjectRef::of(&body);
        let writing = self.daemons.ctx.patcher.apply(&body, patch);
        drop(body); // not held while the write waits for its request slot
        if let Err(error) = writing.await {
            object_log!(
                Level::ERROR,
                &object,
                "Patching by {} failed: {}",
                self.handler.title(),
                crate::util::errors::chain(&error)
            );
        }
    }

    /// Kopf's daemons: call until done (retrying errors as configured) or stopped.
    async fn run_daemon(&self) {
        let mut attempts = Attempts::new();
        while !self.stopper.is_set() {
            let Some(outcome) = Box::pin(self.call(&mut attempts)).await else {
                return; // cancelled: the stopper has logged why
            };
            if outcome.final_ {
                break;
            }
            self.stopper.sleep(outcome.delay.unwrap_or(0.0)).await;
        }
        let object = self.body().object();
        let title = self.handler.title();
        if self.stopper.is_set() {
            object_log!(
                Level::DEBUG,
                &object,
                "{title} has exited on request and will not be retried or restarted."
            );
        } else {
            object_log!(
                Level::DEBUG,
                &object,
                "{title} has exited on its own and will not be retried or restarted."
            );
        }
    }

    /// Kopf's timers: wait for idleness, call, then sleep the interval (or the error's delay).
    /// A cron timer waits for its schedule's next instant before each call (not before the
    /// retries of a failed one).
    async fn run_timer(&self) {
        let handler = &self.handler;
        let mut attempts = Attempts::new();
        let mut retrying = false;
        // When the next call is due by the schedule (not after an idleness or a retry's delay).
        let mut due: Option<Instant> = None;
        while !self.stopper.is_set() {
            if let (Some(schedule), false) = (&handler.cron, retrying) {
                let Some(wait) = schedule.until_next() else {
                    break; // the pattern names no more instants
                };
                due = Instant::now().checked_add(wait);
                if !self.stopper.sleep(wait.as_secs_f64()).await {
                    break;
                }
            }
            if let Some(idle) = handler.idle {
                loop {
                    let reset = *self.object.idle_reset.lock().expect("not poisoned");
                    let left = idle - reset.elapsed().as_secs_f64();
                    if left <= 0.0 {
                        break;
                    }
                    due = None; // waiting for idleness: not late by the schedule
                    if !self.stopper.sleep(left).await {
                        break;
                    }
                }
                if self.stopper.is_set() {
                    break;
                }
            }
            let started = Instant::now();
            if let (Some(due), Some(metrics)) = (due.take(), crate::metrics::get()) {
                let labels = crate::metrics::HandlerLabels {
                    resource: self.daemons.ctx.resource.name(),
                    handler: handler.id.clone(),
                    kind: "timer".into(),
                };
                metrics.timer_lateness(labels, started.saturating_duration_since(due));
            }
            let Some(outcome) = Box::pin(self.call(&mut attempts)).await else {
                return;
            };
            retrying = !outcome.final_;
            if !outcome.final_ {
                self.stopper.sleep(outcome.delay.unwrap_or(0.0)).await;
            } else if handler.cron.is_some() {
                continue; // the next instant is waited for at the top
            } else if let Some(interval) = handler.interval.filter(|_| handler.sharp) {
                // Stay on the grid of intervals from the call's start, however long it took.
                let passed = started.elapsed().as_secs_f64();
                let wait = interval - passed % interval;
                due = due_in(wait);
                self.stopper.sleep(wait).await;
            } else if let Some(interval) = handler.interval {
                due = due_in(interval);
                self.stopper.sleep(slack::coalesced(interval)).await;
            } else if let Some(idle) = handler.idle {
                // Idle-only: wait for a change (the idle clock restarting) and the idleness after it.
                while *self.object.idle_reset.lock().expect("not poisoned") <= started {
                    if !self.stopper.sleep(idle).await {
                        break;
                    }
                }
            } else {
                break; // neither interval nor idle: a one-shot timer
            }
        }
    }

    /// The runner ends: forget the daemon, remember if it finished for good, wake the worker.
    fn finish(&self) {
        let hooks = self.hooks();
        let on_its_own = !self.stopper.is_set();
        {
            let mut running = self.object.running.lock().expect("not poisoned");
            let ours = (running.daemons.get(&self.handler.id))
                .is_some_and(|d| Arc::ptr_eq(&d.stopper, &self.stopper));
            if ours {
                running.daemons.remove(&self.handler.id);
            }
            if on_its_own {
                running.forever_stopped.insert(self.handler.id.clone());
            }
        }
        self.stopper.exited.raise();
        self.stopper.set(reasons::DONE, hooks);
        hooks.daemon_forget(self.stopper.token);
        self.object.exited.notify_one();
    }
}

/// The instant that many seconds from now (none if beyond the clock's range).
fn due_in(seconds: f64) -> Option<Instant> {
    Instant::now().checked_add(Duration::try_from_secs_f64(seconds).ok()?)
}

/// A runner counted in the metrics' daemons or timers running (if enabled), for as long as
/// it exists (also when it is aborted rather than finished).
struct RunningGauge(Option<(String, bool)>);

impl RunningGauge {
    fn start(resource: &crate::client::resources::Resource, kind: SpawningKind) -> Self {
        let timer = kind == SpawningKind::Timer;
        RunningGauge(crate::metrics::get().map(|metrics| {
            metrics.spawned(&resource.name(), timer, 1);
            (resource.name(), timer)
        }))
    }
}

impl Drop for RunningGauge {
    fn drop(&mut self) {
        if let (Some((resource, timer)), Some(metrics)) = (&self.0, crate::metrics::get()) {
            metrics.spawned(resource, *timer, -1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::{
        self, object, Daemon as Behaviour, FakeHooks, FakePatcher, Handlers,
    };
    use crate::settings::Settings;
    use crate::util::logging::Capture;
    use serde_json::json;
    use tracing::instrument::WithSubscriber;

    struct Setup {
        hooks: Arc<FakeHooks>,
        daemons: Arc<Daemons>,
        object: Arc<ObjectDaemons>,
        capture: Capture,
    }

    /// One object with one running daemon `d` (or timer), described by `spec`.
    async fn start(behaviour: Behaviour, spec: Value) -> Setup {
        let hooks = FakeHooks::new(behaviour);
        let mut spec = spec;
        spec["index"] = json!(0);
        spec["id"] = json!("d");
        let handlers = Handlers {
            changing: vec![],
            watching: vec![],
            spawning: vec![testing::handler(spec)],
            ..Default::default()
        };
        let patcher = Arc::new(FakePatcher::default());
        let ctx = testing::context(handlers, Settings::default(), hooks.clone(), patcher);
        let daemons = Arc::new(Daemons::new(ctx.clone(), Pause::new(0)));
        let body = Arc::new(object("a", "1", json!({})));
        let object = daemons.object("uid-a", &body);
        let capture = Capture::default();
        let spawning = async {
            let handlers: Vec<&Arc<SpawningHandler>> = ctx.spawning.iter().collect();
            daemons.spawn_and_match(&object, &handlers).await
        };
        let delays = spawning.with_subscriber(capture.subscriber()).await;
        assert!(delays.is_empty());
        tokio::time::sleep(Duration::from_millis(10)).await; // its first call
        Setup {
            hooks,
            daemons,
            object,
            capture,
        }
    }

    impl Setup {
        fn token(&self) -> u64 {
            (self.hooks.calls().iter().find_map(|c| c.token)).expect("the daemon was called")
        }

        /// One look of the stopping for the object's deletion: the delays until the next.
        async fn stop_for_deletion(&self) -> Vec<f64> {
            let stopping = self.daemons.stop_for_deletion(&self.object);
            stopping.with_subscriber(self.capture.subscriber()).await
        }

        fn running(&self) -> usize {
            self.object.snapshot().len()
        }
    }

    #[test]
    fn a_first_body_is_kept_apart_only_if_our_write_will_not_replace_it() {
        let hooks = FakeHooks::new(Behaviour::Returning);
        let patcher = Arc::new(FakePatcher::default());
        let ctx = testing::context(Handlers::default(), Settings::default(), hooks, patcher);
        let daemons = Daemons::new(ctx.clone(), Pause::new(0));
        let finalizer = ctx.settings.persistence.finalizer.clone();
        let mut finalized = object("b", "1", json!({}));
        finalized["metadata"]["finalizers"] = json!([finalizer]);
        let new = daemons.object("uid-a", &Arc::new(object("a", "1", json!({}))));
        let old = daemons.object("uid-b", &Arc::new(finalized));
        let kept = |o: &ObjectDaemons| region::holds(o.body.lock().unwrap().text());
        assert!(!kept(&new), "its finalizer's write brings the body to keep");
        assert!(kept(&old));
        new.refresh(
            &Arc::new(object("a", "2", json!({}))),
            false,
            ctx.hooks.as_ref(),
        );
        assert!(kept(&new));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flag_wakes_its_waiters_and_stays_raised() {
        let flag = Arc::new(Flag::default());
        assert!(!flag.wait(1.0).await, "not raised: waited in full");
        let waiting = tasks::spawn({
            let flag = flag.clone();
            async move { flag.wait(3600.0).await }
        });
        tokio::task::yield_now().await; // the waiter is waiting
        let raised_at = Instant::now();
        flag.raise();
        assert!(waiting.await.unwrap());
        assert_eq!(
            raised_at.elapsed(),
            Duration::ZERO,
            "woken at once, not at the timeout"
        );
        assert!(flag.wait(3600.0).await, "raised for later waiters too");
        assert!(flag.is_raised());
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemon_exits_when_its_flag_is_raised() {
        let setup = start(Behaviour::Obedient, json!({"kind": "daemon"})).await;
        assert_eq!(setup.running(), 1);
        assert!(setup.stop_for_deletion().await.is_empty());
        assert_eq!(setup.running(), 0);
        let token = setup.token();
        assert_eq!(
            setup.hooks.stopping(token),
            reasons::RESOURCE_DELETED | reasons::DONE
        );
        assert!(!setup.hooks.cancelled(token));
        assert!(
            setup.object.forever_stopped().is_empty(),
            "stopped, not done by itself"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_ignores_its_flag_is_signalled_then_cancelled() {
        let spec =
            json!({"kind": "daemon", "cancellation_backoff": 1.0, "cancellation_timeout": 10.0});
        let setup = start(Behaviour::Cancellable, spec).await;
        let delays = setup.stop_for_deletion().await;
        assert_eq!(delays.len(), 1);
        assert!((0.8..=1.0).contains(&delays[0]), "{delays:?}");
        let token = setup.token();
        assert!(!setup.hooks.cancelled(token));
        tokio::time::sleep(Duration::from_secs_f64(delays[0])).await;
        assert!(setup.stop_for_deletion().await.is_empty());
        assert!(setup.hooks.cancelled(token));
        assert_eq!(setup.running(), 0);
        assert_eq!(
            setup.capture.messages(Level::DEBUG),
            [
                "Daemon 'd' is signalled to exit gracefully.",
                "Daemon 'd' is signalled to exit by force.",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_never_exits_is_abandoned_after_its_timeout() {
        let spec = json!({"kind": "daemon", "cancellation_timeout": 1.0});
        let setup = start(Behaviour::Stubborn, spec).await;
        let delays = setup.stop_for_deletion().await;
        assert_eq!(
            delays.len(),
            1,
            "cancelled, and checked again after the timeout"
        );
        assert!(setup.hooks.cancelled(setup.token()));
        tokio::time::sleep(Duration::from_secs_f64(delays[0])).await;
        assert!(setup.stop_for_deletion().await.is_empty());
        assert_eq!(
            setup.capture.messages(Level::WARN),
            ["Daemon 'd' did not exit in time. Leaving it orphaned."]
        );
        let token = setup.token();
        assert_ne!(setup.hooks.stopping(token) & reasons::DAEMON_ABANDONED, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_timeout_a_stopping_daemon_is_polled() {
        let setup = start(Behaviour::Stubborn, json!({"kind": "daemon"})).await;
        assert_eq!(setup.stop_for_deletion().await, [60.0]);
        assert_eq!(
            setup.capture.messages(Level::DEBUG),
            ["Daemon 'd' is still exiting. The next check is in 60 seconds."]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_operator_exit_stops_daemons_in_one_go() {
        let spec =
            json!({"kind": "daemon", "cancellation_backoff": 0.5, "cancellation_timeout": 0.5});
        let setup = start(Behaviour::Cancellable, spec).await;
        let started = Instant::now();
        setup
            .daemons
            .stop_all()
            .with_subscriber(setup.capture.subscriber())
            .await;
        let token = setup.token();
        let reasons = setup.hooks.stopping(token);
        let expected =
            reasons::OPERATOR_EXITING | reasons::DAEMON_SIGNALLED | reasons::DAEMON_CANCELLED;
        assert_eq!(reasons & expected, expected);
        assert!(
            started.elapsed() >= Duration::from_secs_f64(0.5),
            "the backoff was waited"
        );
        assert_eq!(setup.running(), 0);
        assert!(setup.capture.messages(Level::WARN).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn timers_are_called_on_schedule_until_stopped() {
        let setup = start(
            Behaviour::Returning,
            json!({"kind": "timer", "interval": 1.0}),
        )
        .await;
        tokio::time::sleep(Duration::from_secs_f64(3.5)).await;
        assert_eq!(setup.hooks.calls().len(), 4, "at 0, 1, 2 and 3 seconds");
        assert!(
            setup.stop_for_deletion().await.is_empty(),
            "timers only get the flag"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(setup.hooks.calls().len(), 4);
        assert_eq!(setup.running(), 0);
    }
}
