//! The core's tokio runtime, made on first use by pyo3-async-runtimes from the builder set here.

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;

/// Tokio's own variable for the number of worker threads.
const WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// One worker thread unless `TOKIO_WORKER_THREADS` asks for more, and the runtime's threads
/// yield to Python's on wake-up.
///
/// The core's work per event is short and the handlers run on Python's threads: a second
/// worker found little to take, yet woke for it (twice the workers' context switches).
/// Alone, though, a worker woken by the loop's thread (a call answered) took that thread's
/// CPU on the spot, and the loop was preempted once per call (19 000 times under 1 000
/// timers in 20 s). As `SCHED_BATCH` threads, the core's threads still run at once on an idle
/// CPU, but no longer preempt the thread that woke them. Together: 10–15% less CPU for the
/// whole process under timers, event storms and lifecycles, and no slower reactions.
pub fn configure() -> PyResult<()> {
    let workers = match std::env::var_os(WORKER_THREADS) {
        None => 1,
        Some(text) => (text.to_str())
            .and_then(|text| text.trim().parse().ok())
            .filter(|n: &usize| *n > 0)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{WORKER_THREADS} must be a positive integer, not {text:?}"
                ))
            })?,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .worker_threads(workers)
        .on_thread_start(no_wakeup_preemption);
    pyo3_async_runtimes::tokio::init(builder);
    Ok(())
}

/// Make the calling thread a batch thread (Linux): a scheduling hint, so a refusal (a
/// sandbox forbidding it) changes nothing but the CPU figures.
fn no_wakeup_preemption() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sets the calling thread's policy (pid 0); no memory is shared with the call.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        }
    }
}
