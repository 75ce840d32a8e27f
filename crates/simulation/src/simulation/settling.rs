//! What keeps a simulation's virtual clock still (`kopf.testing.Simulation`): tokio's paused
//! clock moves on by itself whenever its runtime has nothing to do, but a call into Python
//! in flight is work the runtime cannot see. Each such call holds a `Guard`, and so does the
//! test between its steps (the brake); while any guard is held, a blocking task is in
//! flight, which is what keeps tokio from moving its paused clock on.
//!
//! A daemon's call runs until it is stopped, so it cannot hold a guard all along: it has a
//! `Hold` instead, held while its code runs and let go while it waits for its stop
//! (`stopped.wait(...)`), taken again when that wait ends.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// How many guards are held, on one simulation's runtime.
pub struct Busy {
    count: Mutex<usize>,
    idle: Condvar,
    runtime: Handle,
    /// The daemons' holds so far, for `stuck()` (the ended ones are swept as it reads).
    holds: Mutex<Vec<Weak<HoldState>>>,
}

/// One reason for the clock to stay still; dropped, the reason is gone.
pub struct Guard(Arc<Busy>);

impl Busy {
    /// Guards for the clock of this runtime (a current-thread runtime, started paused).
    pub fn new(runtime: Handle) -> Arc<Self> {
        Arc::new(Busy {
            count: Mutex::new(0),
            idle: Condvar::new(),
            runtime,
            holds: Mutex::new(Vec::new()),
        })
    }

    /// A daemon's hold on the clock, held from now on; `what` names it for `stuck()`.
    pub fn hold(self: &Arc<Self>, what: String) -> Hold {
        let state = Arc::new(HoldState {
            busy: self.clone(),
            what: Mutex::new(what),
            inner: Mutex::new(HoldInner {
                guard: Some(self.enter()),
                since: Some(std::time::Instant::now()),
                stopped: false,
                ended: false,
            }),
            woken: Notify::new(),
        });
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.retain(|hold| hold.strong_count() > 0);
        holds.push(Arc::downgrade(&state));
        Hold(state)
    }

    /// A hold that has kept the clock still for longer than `limit` of real time, if any:
    /// its name; it holds the clock no more. (A daemon that sleeps by other means than
    /// waiting for its stop holds the clock for ever, and a test waiting for the clock,
    /// or for the operator's stop, would wait for ever too.)
    pub fn stuck(&self, limit: Duration) -> Option<String> {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let stuck = holds.iter().filter_map(Weak::upgrade).find(|state| {
            let inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.since.is_some_and(|since| since.elapsed() > limit)
        })?;
        drop(holds);
        Hold(stuck.clone()).end();
        let what = stuck.what.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(what)
    }

    /// Hold the clock still until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> Guard {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *count += 1;
        if *count == 1 {
            // Registered at once, as the task is spawned: no gap for the clock to move in.
            let busy = self.clone();
            drop(self.runtime.spawn_blocking(move || busy.wait_idle()));
        }
        Guard(self.clone())
    }

    fn wait_idle(&self) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        while *count > 0 {
            count = self.idle.wait(count).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut count = self.0.count.lock().unwrap_or_else(|e| e.into_inner());
        *count -= 1;
        if *count == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// A daemon's hold on the clock: held while its code runs, let go while it sleeps.
#[derive(Clone)]
pub struct Hold(Arc<HoldState>);

struct HoldState {
    busy: Arc<Busy>,
    what: Mutex<String>,
    inner: Mutex<HoldInner>,
    /// Wakes the sleeps when the daemon is told to stop, or its call ends.
    woken: Notify,
}

struct HoldInner {
    guard: Option<Guard>,
    /// Since when the guard is held (real time), for `Busy::stuck()`.
    since: Option<std::time::Instant>,
    /// The daemon is told to stop: it sleeps no more.
    stopped: bool,
    /// Its call is over: it holds nothing any longer.
    ended: bool,
}

impl HoldInner {
    fn take(&mut self, busy: &Arc<Busy>) {
        if self.guard.is_none() && !self.ended {
            self.guard = Some(busy.enter());
            self.since = Some(std::time::Instant::now());
        }
    }
}

impl Hold {
    /// Name the hold anew (as the daemon's handler and object are known).
    pub fn rename(&self, what: String) {
        *self.0.what.lock().unwrap_or_else(|e| e.into_inner()) = what;
    }

    /// Let the clock go until `seconds` of it have passed (for ever with none), or until the
    /// daemon is told to stop; then hold it again and call `done`. False if the daemon is
    /// told to stop already (or its call is over): there is nothing to wait for.
    pub fn sleep(&self, seconds: Option<f64>, done: impl FnOnce() + Send + 'static) -> bool {
        let state = &self.0;
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.stopped || inner.ended {
            return false;
        }
        let _runtime = state.busy.runtime.enter();
        let deadline = seconds.map(|s| tokio::time::Instant::now() + seconds_of(s));
        let sleeping = self.0.clone();
        // Spawned while the guard is still held: the clock cannot move before it starts.
        drop(crate::util::tasks::spawn(async move {
            let woken = sleeping.woken.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable(); // before the check: a wake-up in between is not lost
            let over = {
                let inner = sleeping.inner.lock().unwrap_or_else(|e| e.into_inner());
                inner.stopped || inner.ended
            };
            if !over {
                match deadline {
                    Some(deadline) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(deadline) => {}
                            () = woken => {}
                        }
                    }
                    None => woken.await,
                }
            }
            (sleeping.inner.lock().unwrap_or_else(|e| e.into_inner())).take(&sleeping.busy);
            done();
        }));
        inner.guard = None;
        inner.since = None;
        true
    }

    /// The daemon is told to stop (or cancelled): it holds the clock from now on, while it
    /// exits, and its sleeps end.
    pub fn wake(&self) {
        let state = &self.0;
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.stopped = true;
        inner.take(&state.busy); // now, not as the sleep ends: no gap for the clock
        drop(inner);
        state.woken.notify_waiters();
    }

    /// Ends the hold once dropped: for the daemon's call, over or given up.
    pub fn ending(&self) -> Ending {
        Ending(self.clone())
    }

    /// The daemon's call is over: it holds the clock no more, whatever it left behind.
    pub fn end(&self) {
        let state = &self.0;
        let mut inner = state.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.ended = true;
        inner.guard = None;
        inner.since = None;
        drop(inner);
        state.woken.notify_waiters();
    }
}

/// Ends its hold when dropped (`Hold::ending`).
pub struct Ending(Hold);

impl Drop for Ending {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Seconds as a duration: a negative or odd value is no time at all, a huge one is for ever.
fn seconds_of(seconds: f64) -> Duration {
    const CENTURY: f64 = 100.0 * 365.0 * 86400.0;
    if seconds.is_nan() || seconds <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(seconds.min(CENTURY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn paused() -> tokio::runtime::Runtime {
        (tokio::runtime::Builder::new_current_thread())
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    #[test]
    fn a_held_guard_keeps_the_paused_clock_still_and_a_dropped_one_lets_it_move() {
        let runtime = paused();
        let busy = Busy::new(runtime.handle().clone());
        let guard = busy.enter();
        let (tx, rx) = tokio::sync::oneshot::channel();
        runtime.block_on(async {
            let start = tokio::time::Instant::now();
            let sleeping = crate::util::tasks::spawn(async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                start.elapsed()
            });
            // Work outside the runtime (as a Python call is), answered while the guard is held.
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                tx.send(()).unwrap();
                drop(guard);
            });
            rx.await.unwrap();
            assert_eq!(
                start.elapsed(),
                Duration::ZERO,
                "moved while the call was in flight"
            );
            assert_eq!(sleeping.await.unwrap(), Duration::from_secs(60));
        });
    }

    #[test]
    fn a_daemon_holds_the_clock_while_it_runs_and_lets_it_go_while_it_sleeps() {
        let runtime = paused();
        let busy = Busy::new(runtime.handle().clone());
        let hold = busy.hold("the daemon".into());
        let (tx, rx) = tokio::sync::oneshot::channel();
        runtime.block_on(async {
            let start = tokio::time::Instant::now();
            // The daemon's code runs in another thread (as Python does), the clock held.
            let daemon = hold.clone();
            let running = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                let (woke, woken) = std::sync::mpsc::channel();
                assert!(daemon.sleep(Some(60.0), move || woke.send(()).unwrap()));
                woken.recv().unwrap();
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(30)); // held again: no time passes
                daemon.end();
            });
            let other = crate::util::tasks::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            });
            rx.await.unwrap();
            assert_eq!(start.elapsed(), Duration::from_secs(60));
            tokio::task::spawn_blocking(move || running.join().unwrap())
                .await
                .unwrap();
            assert_eq!(start.elapsed(), Duration::from_secs(60), "moved while held");
            other.await.unwrap();
            assert_eq!(
                start.elapsed(),
                Duration::from_secs(3600),
                "held after its end"
            );
        });
    }

    #[test]
    fn a_stop_ends_the_sleep_at_once_and_no_other_sleep_begins() {
        let runtime = paused();
        let busy = Busy::new(runtime.handle().clone());
        let hold = busy.hold("the daemon".into());
        runtime.block_on(async {
            let start = tokio::time::Instant::now();
            let (woke, woken) = tokio::sync::oneshot::channel();
            assert!(hold.sleep(None, move || woke.send(()).unwrap()));
            tokio::time::sleep(Duration::from_secs(5)).await; // the clock moves meanwhile
            hold.wake();
            woken.await.unwrap();
            assert_eq!(start.elapsed(), Duration::from_secs(5));
            assert!(!hold.sleep(Some(1.0), || panic!("slept after the stop")));
            assert!(
                busy.stuck(Duration::ZERO).is_some(),
                "it exits, holding the clock"
            );
            hold.end();
            assert_eq!(busy.stuck(Duration::ZERO), None);
        });
    }

    #[test]
    fn a_hold_kept_too_long_is_named() {
        let runtime = paused();
        let busy = Busy::new(runtime.handle().clone());
        let hold = busy.hold("the daemon".into());
        assert_eq!(busy.stuck(Duration::from_secs(60)), None);
        hold.rename("The daemon 'monitor' of default/x".into());
        std::thread::sleep(Duration::from_millis(5));
        let stuck = busy.stuck(Duration::from_millis(1));
        assert_eq!(stuck.as_deref(), Some("The daemon 'monitor' of default/x"));
        assert_eq!(busy.stuck(Duration::ZERO), None, "named once, and let go");
        let (woke, woken) = std::sync::mpsc::channel();
        assert!(
            !hold.sleep(None, move || woke.send(()).unwrap()),
            "no sleep after it"
        );
        assert!(woken.try_recv().is_err());
        let other = busy.hold("another".into());
        drop(other);
        assert_eq!(busy.stuck(Duration::ZERO), None, "dropped: nothing to name");
    }
}
