//! The core's futures as Python awaitables, completed without the GIL.
//!
//! Why not `pyo3_async_runtimes::future_into_py`: it completes the asyncio future from a
//! tokio thread with the GIL (`loop.call_soon_threadsafe`), and that call releases the GIL
//! to write its wake-up byte. The loop may then finish, the program return and the
//! interpreter finalize before the tokio thread takes the GIL back, and a thread that asks
//! for the GIL during finalization is ended by `pthread_exit`, which cannot unwind through
//! Rust: the process died of SIGSEGV after `asyncio.run()` had returned (one run in 30 of an
//! embedded operator under load). Here the tokio thread only keeps the outcome and writes a
//! byte to a socket; the loop's own thread (`kopf._bridge.awaiting`) reads it and converts
//! the outcome, while it holds the GIL anyway.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::BoundObject;
use std::future::Future;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use tokio::task::AbortHandle;

/// What a finished future leaves: its value made Python on the loop's thread, or its error.
type Outcome = PyResult<Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send>>;

struct Shared {
    outcome: Mutex<Option<Outcome>>,
    /// Both ends live as long as either side: the task never writes to a closed socket.
    sender: UnixStream,
    receiver: UnixStream,
}

/// A running core future; `await` it for its value (its error raised), cancel the awaiting
/// task to cancel the future.
#[pyclass(module = "kopf._engine")]
pub struct Pending {
    shared: Arc<Shared>,
    task: AbortHandle,
}

/// Run `future` on the core's runtime; an awaitable of its value (a `Pending`).
pub fn awaitable<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    awaitable_on(
        py,
        pyo3_async_runtimes::tokio::get_runtime().handle(),
        future,
    )
}

/// Run `future` on this runtime (a simulation's); an awaitable of its value (a `Pending`).
pub fn awaitable_on<'py, F, T>(
    py: Python<'py>,
    runtime: &tokio::runtime::Handle,
    future: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let (sender, receiver) = UnixStream::pair()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot create a wake-up socket: {e}")))?;
    for end in [&sender, &receiver] {
        end.set_nonblocking(true)
            .map_err(|e| PyRuntimeError::new_err(format!("cannot set up a wake-up socket: {e}")))?;
    }
    let shared = Arc::new(Shared {
        outcome: Mutex::new(None),
        sender,
        receiver,
    });
    let finished = shared.clone();
    let task = runtime.spawn(async move {
        let outcome: Outcome = future.await.map(|value| {
            Box::new(move |py: Python<'_>| {
                (value.into_pyobject(py))
                    .map(|object| object.into_any().unbind())
                    .map_err(Into::into)
            }) as Box<_>
        });
        *finished.outcome.lock().expect("not poisoned") = Some(outcome);
        // One byte in an empty socket always fits; an error would leave the awaiting side
        // waiting forever, so say it where it can be seen.
        if let Err(error) = (&finished.sender).write_all(b"!") {
            tracing::error!("A finished core call could not wake the operator's loop: {error}");
        }
    });
    let pending = Pending {
        shared,
        task: task.abort_handle(),
    };
    Ok(Bound::new(py, pending)?.into_any())
}

#[pymethods]
impl Pending {
    /// The file descriptor that becomes readable once the future has finished.
    fn fileno(&self) -> i32 {
        self.shared.receiver.as_raw_fd()
    }

    /// The future's value (its error raised); a `RuntimeError` if it has not finished or its
    /// value was taken already.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let outcome = self.shared.outcome.lock().expect("not poisoned").take();
        match outcome {
            Some(outcome) => outcome.and_then(|convert| convert(py)),
            None => Err(PyRuntimeError::new_err(
                "the core's call has not finished, or its result was taken already",
            )),
        }
    }

    /// Stop the future where it is (dropped on the core's runtime).
    fn cancel(&self) {
        self.task.abort();
    }

    fn __await__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        static SETTLE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        let settle = SETTLE.get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("kopf._bridge.awaiting")?
                    .getattr("settle")?
                    .unbind(),
            )
        })?;
        settle.bind(py).call1((slf,))?.call_method0("__await__")
    }
}
