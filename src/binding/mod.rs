//! The thin PyO3 layer: the only code that touches Python. It converts at the
//! edge (JSON values <-> Python objects) and schedules Python coroutines on the
//! operator's asyncio loop; everything else happens in the core.

mod calls;
mod commands;
mod hooks;
mod operator;
mod storages;

use pyo3::prelude::*;

/// The `kopf._engine` extension module.
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    limit_malloc_arenas();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<operator::Operator>()?;
    m.add_class::<calls::CallQueue>()?;
    m.add_function(wrap_pyfunction!(commands::touch_peering, m)?)?;
    Ok(())
}

/// glibc gives every thread that allocates under contention an arena of its own, and
/// the core's threads allocate a lot of short-lived JSON: with the default (8 per core)
/// half of an operator's memory was arenas' slack. Two are plenty for a loop and tokio.
/// An explicit `MALLOC_ARENA_MAX` in the environment is respected.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable of the allocator; it is safe to call at any time.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}
