//! The threads that run synchronous handlers: at most as many as the operator's executor
//! has, started when first needed, each with one Python thread state for its whole life.
//!
//! Why not tokio's blocking threads: taking the GIL on a thread that has no Python thread
//! state creates one and destroys it again on release — a page mapped and unmapped and the
//! thread's id asked of the kernel on every call — and the blocking pool spreads a burst of
//! calls over dozens of threads. Here a thread waits without the GIL, takes it once per
//! call, and takes the next queued call before it waits again.

use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::oneshot;

type Job = Box<dyn for<'py> FnOnce(Python<'py>) + Send>;

/// The pool closed before the call ran (the operator is stopping), no thread could be
/// started for it, or the call panicked.
#[derive(Debug)]
pub struct Closed;

pub struct HandlerThreads {
    pool: Arc<Pool>,
}

struct Pool {
    state: Mutex<State>,
    wakeup: Condvar,
    limit: usize,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    idle: usize,
    started: usize,
    closed: bool,
}

impl HandlerThreads {
    pub fn new(limit: usize) -> Self {
        Self {
            pool: Arc::new(Pool {
                state: Mutex::default(),
                wakeup: Condvar::new(),
                limit: limit.max(1),
            }),
        }
    }

    /// Run `job` with the GIL on one of the threads; its result when it has run.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl for<'py> FnOnce(Python<'py>) -> T + Send + 'static,
    ) -> Result<T, Closed> {
        let (sender, receiver) = oneshot::channel();
        self.push(Box::new(move |py| {
            let _ = sender.send(job(py)); // the caller may have given up: fine
        }))?;
        receiver.await.map_err(|_| Closed)
    }

    fn push(&self, job: Job) -> Result<(), Closed> {
        let mut state = self.pool.state.lock().expect("not poisoned");
        if state.closed {
            return Err(Closed);
        }
        state.jobs.push_back(job);
        if state.idle > 0 {
            self.pool.wakeup.notify_one();
        } else if state.started < self.pool.limit {
            let pool = self.pool.clone();
            let spawned = std::thread::Builder::new()
                .name("kopf-handlers".into())
                .spawn(move || pool.serve());
            match spawned {
                Ok(_) => state.started += 1,
                // No thread at all to take it: the call fails (and is retried as any call
                // that the bridge could not make); with some, they take it when done.
                Err(_) if state.started == 0 => {
                    state.jobs.pop_back();
                    return Err(Closed);
                }
                Err(_) => {}
            }
        }
        Ok(())
    }
}

impl Drop for HandlerThreads {
    /// The threads finish the queued calls, then end.
    fn drop(&mut self) {
        self.pool.state.lock().expect("not poisoned").closed = true;
        self.pool.wakeup.notify_all();
    }
}

impl Pool {
    fn serve(&self) {
        // SAFETY: the thread takes a thread state (and the GIL) once, and hands the GIL back
        // and forth with the state it saved. The state is left behind when the pool closes:
        // releasing it needs the GIL, and taking the GIL while the interpreter finalizes
        // ends the thread in a way Rust cannot unwind through.
        unsafe {
            pyo3::ffi::PyGILState_Ensure();
            let mut saved = pyo3::ffi::PyEval_SaveThread();
            while let Some(job) = self.next() {
                pyo3::ffi::PyEval_RestoreThread(saved);
                // A job that panics drops its sender (its caller sees `Closed`); the thread
                // goes on with the next.
                Python::attach(|py| {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(py)));
                });
                saved = pyo3::ffi::PyEval_SaveThread();
            }
        }
    }

    /// The next call, waiting for one; `None` once the pool is closed and drained.
    fn next(&self) -> Option<Job> {
        let mut state = self.state.lock().expect("not poisoned");
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Some(job);
            }
            if state.closed {
                return None;
            }
            state.idle += 1;
            state = self.wakeup.wait(state).expect("not poisoned");
            state.idle -= 1;
        }
    }
}
