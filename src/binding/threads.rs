//! The threads that run synchronous handlers: at most as many as the operator's executor
//! has, started when first needed, each with one Python thread state for its whole life.
//!
//! Why not tokio's blocking threads: taking the GIL on a thread that has no Python thread
//! state creates one and destroys it again on release — a page mapped and unmapped and the
//! thread's id asked of the kernel on every call — and the blocking pool spreads a burst of
//! calls over dozens of threads. Here a thread waits without the GIL, takes it once per
//! call, and takes the next queued call before it waits again. A call queued while another
//! thread has just started one is left to that thread, and another is woken only if the
//! call still waits a moment later (see `util::waking`): threads woken only to wait for the
//! GIL cost switches and make no progress.

use crate::util::waking::{Crew, Handoff};
use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a call is left to a busy thread before another is woken for it: Python's switch
/// interval, for which a second thread would wait anyway while the first runs Python. A busy
/// thread is mostly one preempted for a few milliseconds (the API server shares the CPUs),
/// and it holds the GIL: with 1 ms, a second thread was woken only to wait for it, and
/// storm-100 took 8% more CPU. A handler that blocks delays the next calls by this at most.
const GRACE: Duration = Duration::from_millis(5);

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
    /// One for each thread: the crew picks which one to wake.
    wakeups: Vec<Condvar>,
}

struct State {
    jobs: VecDeque<Job>,
    crew: Crew,
    closed: bool,
}

impl HandlerThreads {
    pub fn new(limit: usize) -> Self {
        Self {
            pool: Arc::new(Pool {
                state: Mutex::new(State {
                    jobs: VecDeque::new(),
                    crew: Crew::new(limit, GRACE),
                    closed: false,
                }),
                wakeups: (0..limit.max(1)).map(|_| Condvar::new()).collect(),
            }),
        }
    }

    /// Run `job` with the GIL on one of the threads; its result when it has run.
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl for<'py> FnOnce(Python<'py>) -> T + Send + 'static,
    ) -> Result<T, Closed> {
        let (sender, mut receiver) = oneshot::channel();
        let handed = self.push(Box::new(move |py| {
            let _ = sender.send(job(py)); // the caller may have given up: fine
        }))?;
        if !handed {
            // Left to a busy thread: if it is still busy a moment later, another one takes it.
            // (Boxed: only calls left this way carry a timer.)
            tokio::select! {
                answer = &mut receiver => return answer.map_err(|_| Closed),
                () = Box::pin(tokio::time::sleep(GRACE)) => self.spread(),
            }
        }
        receiver.await.map_err(|_| Closed)
    }

    /// Queue the job: whether a thread was woken or started for it.
    fn push(&self, job: Job) -> Result<bool, Closed> {
        let mut state = self.pool.state.lock().expect("not poisoned");
        if state.closed {
            return Err(Closed);
        }
        state.jobs.push_back(job);
        let handoff = state.crew.place(Instant::now());
        match self.hand(&mut state, handoff) {
            // No thread at all to take it: the call fails (and is retried as any call that
            // the bridge could not make); with some, they take it when done.
            Err(Closed) if state.crew.started() == 0 => {
                state.jobs.pop_back();
                Err(Closed)
            }
            Err(Closed) => Ok(false),
            Ok(handed) => Ok(handed),
        }
    }

    /// Jobs that still wait: another thread for them, if one is free.
    fn spread(&self) {
        let mut state = self.pool.state.lock().expect("not poisoned");
        if !state.jobs.is_empty() && !state.closed {
            let handoff = state.crew.spread();
            let _ = self.hand(&mut state, handoff);
        }
    }

    /// Wake or start a thread as the crew says: whether one was; an error if none could start.
    fn hand(&self, state: &mut State, handoff: Handoff) -> Result<bool, Closed> {
        match handoff {
            Handoff::Leave => Ok(false),
            Handoff::Wake(thread) => {
                self.pool.wakeups[thread].notify_one();
                Ok(true)
            }
            Handoff::Start => {
                let number = state.crew.start();
                let pool = self.pool.clone();
                let spawned = std::thread::Builder::new()
                    .name("kopf-handlers".into())
                    .spawn(move || pool.serve(number));
                if spawned.is_err() {
                    state.crew.unstart();
                    return Err(Closed);
                }
                Ok(true)
            }
        }
    }
}

impl Drop for HandlerThreads {
    /// The threads finish the queued calls, then end.
    fn drop(&mut self) {
        self.pool.state.lock().expect("not poisoned").closed = true;
        for wakeup in &self.pool.wakeups {
            wakeup.notify_one();
        }
    }
}

impl Pool {
    fn serve(&self, number: usize) {
        // SAFETY: the thread takes a thread state (and the GIL) once, and hands the GIL back
        // and forth with the state it saved. The state is left behind when the pool closes:
        // releasing it needs the GIL, and taking the GIL while the interpreter finalizes
        // ends the thread in a way Rust cannot unwind through.
        unsafe {
            pyo3::ffi::PyGILState_Ensure();
            let mut saved = pyo3::ffi::PyEval_SaveThread();
            while let Some(job) = self.next(number) {
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

    /// The next call for this thread, waiting for one; `None` once the pool is closed and
    /// drained.
    fn next(&self, number: usize) -> Option<Job> {
        let mut state = self.state.lock().expect("not poisoned");
        loop {
            if let Some(job) = state.jobs.pop_front() {
                state.crew.busy(number, Instant::now());
                return Some(job);
            }
            if state.closed {
                return None;
            }
            state.crew.rest(number);
            state = self.wakeups[number]
                .wait_while(state, |state| {
                    state.crew.is_resting(number) && !state.closed
                })
                .expect("not poisoned");
            state.crew.woke(number);
        }
    }
}
