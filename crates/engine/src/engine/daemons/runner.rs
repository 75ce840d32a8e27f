//! One daemon's or timer's task: it calls the Python function, once and for long (a
//! daemon) or on schedule (a timer), applies its results, and retries on errors.

use crate::engine::coalescing;
use crate::intents::handlers::{SpawningHandler, SpawningKind};
use crate::intents::hooks::{self, DaemonCall, HandlerKind, Hooks, Invocation};
use crate::object_log;
use crate::state::bodies::CompactBody;
use crate::state::patches::Patch;
use crate::state::progression::format_time;
use crate::util::logging::ObjectRef;
use chrono::Utc;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Level;

use super::*;

/// One daemon or timer of one object, from its spawning to its exit.
pub(super) struct Runner {
    pub(super) daemons: Arc<Daemons>,
    pub(super) object: Arc<ObjectDaemons>,
    pub(super) handler: Arc<SpawningHandler>,
    pub(super) stopper: Arc<Stopper>,
}

/// A call's in-memory progress: retries and the first attempt's time (as in Kopf, not persisted).
pub(super) struct Attempts {
    pub(super) retry: u64,
    pub(super) started: chrono::DateTime<Utc>,
}

impl Attempts {
    pub(super) fn new() -> Self {
        Self {
            retry: 0,
            started: crate::util::clock::now(),
        }
    }
}

impl Runner {
    pub(super) fn hooks(&self) -> &dyn Hooks {
        self.daemons.ctx.hooks.as_ref()
    }

    pub(super) fn body(&self) -> Arc<CompactBody> {
        self.object.body.lock().expect("not poisoned").clone()
    }

    pub(super) fn invocation(&self, attempts: &Attempts) -> Invocation {
        let now = crate::util::clock::now();
        Invocation {
            retry: attempts.retry,
            started: Some(format_time(attempts.started)),
            runtime: (now - attempts.started).num_microseconds().unwrap_or(0) as f64 / 1e6,
            daemon: Some(DaemonCall {
                token: self.stopper.token,
                key: self.object.key.clone(),
                reason: self.stopper.reason(),
                endless: self.handler.kind == SpawningKind::Daemon,
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

    pub(super) async fn run(self) {
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
    pub(super) async fn initial_delay(&self) -> bool {
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
    pub(super) async fn call(
        &self,
        attempts: &mut Attempts,
    ) -> Option<crate::state::progression::Outcome> {
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

    pub(super) async fn apply(&self, patch: Patch) {
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
    pub(super) async fn run_daemon(&self) {
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
    pub(super) async fn run_timer(&self) {
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
                self.stopper.sleep(coalescing::coalesced(interval)).await;
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
    pub(super) fn finish(&self) {
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
pub(super) fn due_in(seconds: f64) -> Option<Instant> {
    Instant::now().checked_add(Duration::try_from_secs_f64(seconds).ok()?)
}

/// A runner counted in the metrics' daemons or timers running (if enabled), for as long as
/// it exists (also when it is aborted rather than finished).
pub(super) struct RunningGauge(Option<(String, bool)>);

impl RunningGauge {
    pub(super) fn start(resource: &crate::client::resources::Resource, kind: SpawningKind) -> Self {
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
