//! Stopping daemons and timers: the flags raised once (`Flag`), a daemon's stopper with
//! its reasons (`Stopper`, which Python polls), and how a stopping one is waited for.

use crate::intents::handlers::SpawningKind;
use crate::intents::hooks::Hooks;
use crate::object_log;
use crate::util::logging::ObjectRef;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Level;

use super::*;

/// Tokens are unique across all resources: the Python side keeps one table of stoppers.
pub(super) static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A flag raised once and never lowered, which tasks can wait for. (Each daemon and timer
/// has two: as watch channels, they took 0.7 KB of memory per timer, now 0.1 KB.)
#[derive(Default)]
pub(super) struct Flag {
    pub(super) raised: AtomicBool,
    pub(super) waiters: Notify,
}

impl Flag {
    pub(super) fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        self.waiters.notify_waiters();
    }

    pub(super) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    /// Wait up to `seconds` for the flag (forever if no duration holds them); whether it is
    /// raised.
    pub(super) async fn wait(&self, seconds: f64) -> bool {
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
pub(crate) struct Stopper {
    pub(super) token: u64,
    /// The reasons so far and when the flag was first raised.
    state: Mutex<(u32, Option<Instant>)>,
    flag: Flag,
    /// The runner has exited.
    pub(super) exited: Flag,
}

impl Stopper {
    pub(super) fn new(token: u64) -> Self {
        Self {
            token,
            state: Mutex::new((0, None)),
            flag: Flag::default(),
            exited: Flag::default(),
        }
    }

    pub(super) fn set(&self, reason: u32, hooks: &dyn Hooks) {
        let bits = {
            let mut state = self.state.lock().expect("not poisoned");
            state.0 |= reason;
            state.1.get_or_insert_with(Instant::now);
            state.0
        };
        self.flag.raise();
        hooks.daemon_stopping(self.token, bits);
    }

    pub(super) fn is_set(&self) -> bool {
        self.flag.is_raised()
    }

    pub(super) fn has(&self, reason: u32) -> bool {
        self.reason() & reason != 0
    }

    pub(super) fn reason(&self) -> u32 {
        self.state.lock().expect("not poisoned").0
    }

    /// Seconds since the flag was first raised (zero if it is not).
    pub(super) fn age(&self) -> f64 {
        let when = self.state.lock().expect("not poisoned").1;
        when.map_or(0.0, |w| w.elapsed().as_secs_f64())
    }

    /// Sleep for this long unless stopped first; true if slept in full (and not stopped).
    pub(super) async fn sleep(&self, seconds: f64) -> bool {
        if self.is_set() {
            return false;
        }
        if seconds <= 0.0 {
            return true;
        }
        !self.flag.wait(seconds).await
    }
}

/// Kopf's stopping of one daemon or timer, in steps: raise its flag with a reason (it may
/// exit at once); after its cancellation backoff, signal it to exit gracefully; after its
/// cancellation timeout, cancel its call; then abandon it. Timers are only flagged.
pub(super) struct Stopping<'a> {
    pub(super) daemons: &'a Daemons,
    pub(super) daemon: &'a Daemon,
    pub(super) backoff: Option<f64>,
    pub(super) timeout: Option<f64>,
    pub(super) object: ObjectRef,
    pub(super) title: String,
}

impl<'a> Stopping<'a> {
    pub(super) fn new(daemons: &'a Daemons, daemon: &'a Daemon) -> Self {
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

    pub(super) fn hooks(&self) -> &dyn Hooks {
        self.daemons.ctx.hooks.as_ref()
    }

    pub(super) fn stopper(&self) -> &Stopper {
        &self.daemon.stopper
    }

    /// Seconds that an exit on request may take before the next step.
    pub(super) fn instant_exit(&self) -> f64 {
        self.daemons.ctx.settings.background.instant_exit()
    }

    /// Raise the flag with this reason; true if the daemon exits right away.
    pub(super) async fn flag(&self, reason: u32) -> bool {
        self.stopper().set(reason, self.hooks());
        self.daemon.wait_exit(self.instant_exit()).await
    }

    /// Tell it again to exit gracefully; true if it exits within `wait` seconds.
    pub(super) async fn signal(&self, wait: f64) -> bool {
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
    pub(super) async fn cancel(&self, wait: f64) -> bool {
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
    pub(super) fn abandon(&self) {
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
    pub(super) async fn step(&self, reason: u32) -> Option<f64> {
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
    pub(super) async fn all_the_way(&self, reason: u32) {
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
