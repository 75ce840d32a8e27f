//! What keeps a simulation's virtual clock still (`kopf.testing.Simulation`): tokio's paused
//! clock moves on by itself whenever its runtime has nothing to do, but a call into Python
//! in flight is work the runtime cannot see. Each such call holds a `Guard`, and so does the
//! test between its steps (the brake); while any guard is held, a blocking task is in
//! flight, which is what keeps tokio from moving its paused clock on.

use std::sync::{Arc, Condvar, Mutex};
use tokio::runtime::Handle;

/// How many guards are held, on one simulation's runtime.
pub struct Busy {
    count: Mutex<usize>,
    idle: Condvar,
    runtime: Handle,
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
        })
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
}
