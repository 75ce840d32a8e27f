//! The simulated API of handler tests (`simulation`) and its virtual clock: a runtime of its
//! own (one thread, tokio's clock paused) serves the API on the loopback, and runs the
//! operators started with it; the clock moves only when the test says so (`advance`), or by
//! the clock's resolution (a millisecond) to let what is pending happen (`settle`).

use crate::simulation::faults::{Fault, Faults};
use crate::simulation::serving;
use crate::simulation::settling::{Busy, Guard, Hold};
use crate::simulation::store::Store;
use crate::util::clock;
use chrono::{DateTime, SubsecRound, Utc};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A running simulated API: where it listens (plain HTTP on 127.0.0.1), and its clock.
#[pyclass(module = "kopf._engine")]
pub struct Simulation {
    #[pyo3(get)]
    url: String,
    store: Arc<Store>,
    faults: Arc<Faults>,
    pub(super) runtime: Handle,
    pub(super) busy: Arc<Busy>,
    /// Held while the test is between its steps: the clock stays still.
    brake: Arc<Mutex<Option<Guard>>>,
    /// The virtual time of day when the clock started, and tokio's instant then.
    start: (DateTime<Utc>, Instant),
    /// Sent (or dropped) to end the runtime's thread, and with it everything on it.
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

#[pymethods]
impl Simulation {
    /// Stop serving (idempotent): its objects are gone with it, and so are the operators
    /// that run on its clock.
    fn stop(&self) {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Let the clock move by itself from now on, whenever nothing else can happen (for an
    /// operator's stop: its timeouts pass at once).
    fn release(&self) {
        drop(self.brake.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Seconds of virtual time since the simulation started.
    fn now(&self) -> f64 {
        let _runtime = self.runtime.enter();
        self.start.1.elapsed().as_secs_f64()
    }

    /// The virtual time of day (ISO 8601, UTC), as the objects' timestamps have it.
    fn today(&self) -> String {
        let _runtime = self.runtime.enter();
        clock::since(self.start.0, self.start.1).to_rfc3339()
    }

    /// Let the clock move by `seconds`: what is due meanwhile happens in order, each when
    /// what came before it is done; then what is pending at the end. An awaitable.
    fn advance<'py>(&self, py: Python<'py>, seconds: f64) -> PyResult<Bound<'py, PyAny>> {
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(PyValueError::new_err(format!(
                "the clock moves forward by a number of seconds, not by {seconds}"
            )));
        }
        let (brake, busy) = (self.brake.clone(), self.busy.clone());
        let duration = Duration::from_secs_f64(seconds);
        super::awaiting::awaitable_on(py, &self.runtime, async move {
            let target = Instant::now() + duration;
            release_until(&brake, &busy, tokio::time::sleep_until(target)).await;
            // What is due at the end, and what it causes (at most a millisecond later).
            settle(&brake, &busy).await;
            Ok(())
        })
    }

    /// Let everything pending happen (handlers, patches, events), the clock moving only
    /// when nothing else can (by its resolution, a millisecond, at most). An awaitable.
    fn settle<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (brake, busy) = (self.brake.clone(), self.busy.clone());
        super::awaiting::awaitable_on(py, &self.runtime, async move {
            settle(&brake, &busy).await;
            Ok(())
        })
    }

    /// Fail the requests to come that match (by method, and by a part of the path with its
    /// query) with this status and `Retry-After`: `times` of them, or all if none.
    #[pyo3(signature = (method, path, status, retry_after = None, times = None))]
    fn fail(
        &self,
        method: Option<String>,
        path: String,
        status: u16,
        retry_after: Option<u64>,
        times: Option<u64>,
    ) -> PyResult<()> {
        if !(400..=599).contains(&status) || times == Some(0) {
            return Err(PyValueError::new_err(format!(
                "a failure is a status from 400 to 599, for at least one request: not {status} for {times:?}"
            )));
        }
        self.faults.add(Fault {
            method,
            path,
            status,
            retry_after,
            times,
        });
        Ok(())
    }

    /// The daemon that has held the clock for longer than `seconds` of real time, if any: its
    /// name; it holds the clock no more (one that sleeps other than by waiting for its stop
    /// would hold it for ever).
    fn stuck(&self, seconds: f64) -> Option<String> {
        self.busy
            .stuck(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO))
    }

    /// Fail no more requests.
    fn heal(&self) {
        self.faults.clear();
    }

    /// End every watch now; with `expire`, the versions before now are gone too (410).
    fn cut_watches(&self, expire: bool) {
        self.store.cut_watches(expire);
    }

    /// A request to the API, answered without HTTP (a test's own reads and writes): the
    /// status code and the document (JSON). `body`: JSON, or a patch of `content_type`.
    #[pyo3(signature = (method, uri, body = None, content_type = "application/json"))]
    fn request(
        &self,
        method: &str,
        uri: &str,
        body: Option<&str>,
        content_type: &str,
    ) -> (u16, String) {
        let body = body.unwrap_or_default().as_bytes();
        let (status, document) = serving::answer(&self.store, method, uri, content_type, body);
        (status, document.to_string())
    }
}

/// A daemon's hold on a simulation's clock (the `hold` of its call, kept by its stopper):
/// held while the daemon's code runs, let go while it waits for its stop.
#[pyclass(module = "kopf._engine", frozen)]
pub struct DaemonHold(pub(super) Hold);

#[pymethods]
impl DaemonHold {
    /// Name the daemon, for the message if it holds the clock too long.
    fn rename(&self, what: String) {
        self.0.rename(what);
    }

    /// Let the clock go for `seconds` of it (for ever with none), or until the daemon is told
    /// to stop; then hold it again and call `done()` (from the simulation's thread). False if
    /// the daemon is told to stop already: nothing to wait for, `done` is not called.
    #[pyo3(signature = (seconds, done))]
    fn sleep(&self, seconds: Option<f64>, done: Py<PyAny>) -> bool {
        self.0.sleep(seconds, move || {
            Python::attach(|py| {
                if let Err(error) = done.call0(py) {
                    error.print(py);
                }
            });
        })
    }

    /// The daemon is told to stop (or cancelled): it holds the clock while it exits.
    fn wake(&self) {
        self.0.wake();
    }
}

/// Let the clock move (the brake released) until `until` is over, then hold it again.
async fn release_until(
    brake: &Mutex<Option<Guard>>,
    busy: &Arc<Busy>,
    until: impl std::future::Future<Output = ()>,
) {
    let until = std::pin::pin!(until);
    let mut until = until;
    // Polled once first: a timer is registered then, before the clock may move to it.
    let pending = futures::poll!(until.as_mut()).is_pending();
    let released = brake.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(released);
    if pending {
        until.await;
    }
    *brake.lock().unwrap_or_else(|e| e.into_inner()) = Some(busy.enter());
}

/// Until nothing is left to do but wait for a later time: a probe a millisecond ahead (the
/// clock's resolution) fires only once the runtime is idle and no call is in flight.
async fn settle(brake: &Mutex<Option<Guard>>, busy: &Arc<Busy>) {
    let probe = tokio::time::sleep(Duration::from_millis(1));
    release_until(brake, busy, probe).await;
}

/// Start a simulated API with the built-in resources on 127.0.0.1 (port 0: any free one),
/// on a runtime and a virtual clock of its own. Its clock stands still until moved.
#[pyfunction]
pub fn start_simulation(port: u16) -> PyResult<Simulation> {
    let failed = |what: &str, e: std::io::Error| PyRuntimeError::new_err(format!("{what}: {e}"));
    let runtime = (tokio::runtime::Builder::new_current_thread())
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| failed("cannot start the simulation's runtime", e))?;
    let handle = runtime.handle().clone();
    let today = Utc::now().trunc_subsecs(0); // as the API's timestamps have it
    let start = (today, {
        let _runtime = handle.enter();
        Instant::now()
    });
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| failed(&format!("cannot listen on port {port}"), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed("cannot listen", e))?;
    let url = format!("http://{}", listener.local_addr()?);
    let timestamps = handle.clone();
    let store = Arc::new(Store::new(Box::new(move || {
        let _runtime = timestamps.enter();
        clock::since(start.0, start.1)
    })));
    for kind in serving::builtins() {
        store.define(kind);
    }
    let faults = Arc::new(Faults::default());
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("kopf-simulation".into())
        .spawn(move || {
            clock::make_virtual(start.0, start.1);
            runtime.block_on(async move {
                let _ = stopped.await;
            });
            runtime.shutdown_background();
        })
        .map_err(|e| failed("cannot start the simulation's thread", e))?;
    {
        let _runtime = handle.enter();
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|e| failed("cannot listen", e))?;
        drop(serving::serve(listener, store.clone(), faults.clone()));
    }
    let busy = Busy::new(handle.clone());
    let brake = Arc::new(Mutex::new(Some(busy.enter())));
    Ok(Simulation {
        url,
        store,
        faults,
        runtime: handle,
        busy,
        brake,
        start,
        stop: Mutex::new(Some(stop)),
    })
}
