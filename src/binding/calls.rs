//! Calls from the core into the operator's asyncio loop without taking the GIL on the
//! core's threads: a call is queued with its argument builder and its result parser,
//! the loop is woken through a socket (once per batch), and the loop's own thread
//! builds the arguments, runs the coroutines, and parses their results — all while it
//! holds the GIL anyway. Tokio threads only push to a queue and await a channel.
//!
//! An argument (often a whole object's body) is built only when its call starts running
//! (`PendingArgument.build()`), not when the batch is taken: a burst of 10,000 queued
//! calls does not become 10,000 Python bodies at once.

use futures::future::BoxFuture;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

use crate::simulation::settling::{Busy, Guard, Hold};

type Argument = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send>;
type Completion = Box<dyn for<'py> FnOnce(Python<'py>, PyResult<Bound<'py, PyAny>>) + Send>;

/// The id of notes: calls that nobody awaits (calls are numbered from 1).
const NOTE: u64 = 0;

/// The call could not be made or answered: the operator's loop has stopped serving.
#[derive(Debug)]
pub struct Closed;

/// Which handler a call invokes (its kind and index), so that the loop can decide when to
/// start it before its argument is built.
pub type Target = Option<(&'static str, usize)>;

type Queued = (u64, &'static str, Target, Argument);

/// How many queued calls the spare queue may keep room for (a burst's room is not kept).
const SPARE_ROOM: usize = 256;

struct Shared {
    ready: Mutex<Vec<Queued>>,
    /// The queue's other half: empty, with room, swapped in when the loop takes a batch,
    /// so that the core's threads push into room made earlier instead of growing a new
    /// queue each batch (its reallocations were 7% of the core threads' time under 1 000 timers).
    spare: Mutex<Vec<Queued>>,
    waiting: Mutex<HashMap<u64, (Completion, Option<Guard>), foldhash::fast::RandomState>>,
    /// In a simulation: what keeps its clock still while calls and notes are in flight.
    busy: Option<Arc<Busy>>,
    /// The guards of the notes queued, until the loop has written them (`processed()`).
    noted: Mutex<Vec<Guard>>,
    next_id: AtomicU64,
    /// A wake-up byte is in the socket and not consumed yet: no need for another.
    woken: AtomicBool,
    /// Notes queued so far, taken by the loop so far (counted at `take()`, only by the
    /// loop), and written by it (as of the end of its last batch; all once it stops serving).
    notes_queued: AtomicU64,
    notes_taken: AtomicU64,
    notes_done: AtomicU64,
    /// The loop has finished a batch (`CallQueue.processed()`).
    progress: tokio::sync::Notify,
    sender: UnixStream,
    receiver: UnixStream,
}

/// The core's side: queue calls.
#[derive(Clone)]
pub struct Calls {
    shared: Arc<Shared>,
}

impl Calls {
    /// `busy`: a simulation's, whose clock stays still while calls are in flight.
    pub fn new(busy: Option<Arc<Busy>>) -> std::io::Result<Self> {
        let (sender, receiver) = UnixStream::pair()?;
        sender.set_nonblocking(true)?;
        receiver.set_nonblocking(true)?;
        Ok(Self {
            shared: Arc::new(Shared {
                ready: Mutex::default(),
                spare: Mutex::default(),
                waiting: Mutex::default(),
                busy,
                noted: Mutex::default(),
                next_id: AtomicU64::new(1),
                woken: AtomicBool::new(false),
                notes_queued: AtomicU64::new(0),
                notes_taken: AtomicU64::new(0),
                notes_done: AtomicU64::new(0),
                progress: tokio::sync::Notify::new(),
                sender,
                receiver,
            }),
        })
    }

    /// Call `bridge.<method>(argument)` (a coroutine) on the loop; `parse` turns its result
    /// (or exception) into `T` on the loop's thread. `settling`: a simulation's clock stays
    /// still until it returns (not for a daemon's call: it runs until it is stopped).
    pub fn call<T: Send + 'static>(
        &self,
        method: &'static str,
        target: Target,
        settling: bool,
        argument: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
        parse: impl for<'py> FnOnce(Python<'py>, PyResult<Bound<'py, PyAny>>) -> T + Send + 'static,
    ) -> BoxFuture<'static, Result<T, Closed>> {
        let (tx, rx) = oneshot::channel();
        let completion: Completion = Box::new(move |py, result| {
            let _ = tx.send(parse(py, result)); // the caller may have given up: fine
        });
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = self.guard().filter(|_| settling);
        self.shared
            .waiting
            .lock()
            .expect("not poisoned")
            .insert(id, (completion, guard));
        self.push(id, method, target, Box::new(argument));
        Box::pin(async move { rx.await.map_err(|_| Closed) })
    }

    /// Tell the loop something: `bridge.<method>(*arguments)`, a plain function, is called
    /// there in the order of all calls and notes; nothing waits for it. (Taking the GIL on
    /// the core's threads instead would make them wait while the loop runs Python.)
    pub fn notify(
        &self,
        method: &'static str,
        arguments: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
    ) {
        if let Some(guard) = self.guard() {
            self.shared.noted.lock().expect("not poisoned").push(guard);
        }
        self.push(NOTE, method, None, Box::new(arguments));
    }

    /// A simulation's guard of its clock (none outside simulations).
    pub fn guard(&self) -> Option<Guard> {
        self.shared.busy.as_ref().map(Busy::enter)
    }

    /// A simulation's hold of its clock for a daemon's call (none outside simulations).
    pub fn hold(&self) -> Option<Hold> {
        (self.shared.busy.as_ref()).map(|busy| busy.hold("A daemon".into()))
    }

    /// How many notes have been queued so far: for [`Calls::written`].
    pub fn notes_queued(&self) -> u64 {
        self.shared.notes_queued.load(Ordering::SeqCst)
    }

    /// Once the loop has written the first `notes` notes (at once if it has). A synchronous
    /// handler's thread waits for this before the call, so that the core's log lines
    /// about an object come before what its handler prints, as in Kopf's one loop.
    pub async fn written(&self, notes: u64) {
        let shared = &self.shared;
        if shared.notes_done.load(Ordering::SeqCst) >= notes {
            return; // the usual case, for every synchronous call: no waiter made
        }
        loop {
            // Made before the check: a batch finished in between still wakes it.
            let progress = shared.progress.notified();
            if shared.notes_done.load(Ordering::SeqCst) >= notes {
                return;
            }
            progress.await;
        }
    }

    fn push(&self, id: u64, method: &'static str, target: Target, argument: Argument) {
        let shared = &self.shared;
        let mut ready = shared.ready.lock().expect("not poisoned");
        if id == NOTE {
            // Counted in the queue's order, under its lock.
            shared.notes_queued.fetch_add(1, Ordering::SeqCst);
        }
        ready.push((id, method, target, argument));
        drop(ready);
        if !shared.woken.swap(true, Ordering::SeqCst) {
            // A full socket means a wake-up is pending already: nothing is lost.
            let _ = (&shared.sender).write(&[1]);
        }
    }

    pub fn queue(&self) -> CallQueue {
        CallQueue {
            shared: self.shared.clone(),
        }
    }
}

/// The loop's side (`kopf._engine.CallQueue`): a readable socket, and the calls behind it.
#[pyclass(module = "kopf._engine")]
pub struct CallQueue {
    shared: Arc<Shared>,
}

#[pymethods]
impl CallQueue {
    /// The socket to watch with `loop.add_reader()`.
    fn fileno(&self) -> i32 {
        self.shared.receiver.as_raw_fd()
    }

    /// The queued calls as `(id, method, target, pending argument)`, consuming the wake-ups;
    /// notes have the id 0.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut buffer = [0u8; 256];
        while matches!(std::io::Read::read(&mut &self.shared.receiver, &mut buffer), Ok(n) if n > 0)
        {
        }
        self.shared.woken.store(false, Ordering::SeqCst);
        // Only the loop takes: the spare is never contended.
        let mut batch = std::mem::take(&mut *self.shared.spare.lock().expect("not poisoned"));
        std::mem::swap(
            &mut batch,
            &mut *self.shared.ready.lock().expect("not poisoned"),
        );
        let notes = batch.iter().filter(|(id, ..)| *id == NOTE).count() as u64;
        self.shared.notes_taken.fetch_add(notes, Ordering::SeqCst);
        let calls = PyList::empty(py);
        for (id, method, target, argument) in batch.drain(..) {
            let pending = PendingArgument {
                builder: Mutex::new(Some(argument)),
            };
            calls.append((id, method, target, pending))?;
        }
        if batch.capacity() <= SPARE_ROOM {
            *self.shared.spare.lock().expect("not poisoned") = batch;
        }
        Ok(calls)
    }

    /// The notes taken so far are written (the loop's batch is done); with `stopped`, the
    /// loop serves no more: nothing waits for notes any longer.
    #[pyo3(signature = (stopped = false))]
    fn processed(&self, stopped: bool) {
        let shared = &self.shared;
        let done = if stopped {
            u64::MAX
        } else {
            shared.notes_taken.load(Ordering::SeqCst)
        };
        // Waiters are woken only by progress: most batches of the loop hold no notes.
        if shared.notes_done.fetch_max(done, Ordering::SeqCst) < done {
            shared.progress.notify_waiters();
        }
        if shared.busy.is_some() {
            // (a note queued since the batch was taken is let go early: it is only a line)
            drop(std::mem::take(
                &mut *shared.noted.lock().expect("not poisoned"),
            ));
        }
    }

    /// A call has returned.
    fn complete(&self, py: Python<'_>, id: u64, result: Bound<'_, PyAny>) {
        self.finish(py, id, Ok(result));
    }

    /// A call has raised.
    fn fail(&self, py: Python<'_>, id: u64, error: Bound<'_, PyAny>) {
        self.finish(py, id, Err(PyErr::from_value(error)));
    }
}

/// A call's argument, built on first use (`build()`), once.
#[pyclass(module = "kopf._engine")]
pub struct PendingArgument {
    builder: Mutex<Option<Argument>>,
}

#[pymethods]
impl PendingArgument {
    fn build<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let builder = self.builder.lock().expect("not poisoned").take();
        match builder {
            Some(builder) => builder(py),
            None => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a call's argument is built only once",
            )),
        }
    }
}

impl CallQueue {
    fn finish<'py>(&self, py: Python<'py>, id: u64, result: PyResult<Bound<'py, PyAny>>) {
        let completion = self
            .shared
            .waiting
            .lock()
            .expect("not poisoned")
            .remove(&id);
        if let Some((completion, _guard)) = completion {
            completion(py, result);
        }
    }
}
