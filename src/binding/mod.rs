//! The thin PyO3 layer: the only code that touches Python. It converts at the
//! edge (JSON values <-> Python objects) and schedules Python coroutines on the
//! operator's asyncio loop; everything else happens in the core.
//!
//! Uses: every layer before it.

mod awaiting;
mod bodies;
mod calls;
mod commands;
mod hooks;
mod indices;
mod listening;
mod logs;
mod memory;
mod operator;
mod pauses;
mod protocol;
mod recording;
mod runtime;
mod scopes;
mod simulation;
mod storages;
mod threads;
mod values;
mod webhooks;

use pyo3::prelude::*;

/// The `kopf._engine` extension module.
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    memory::limit_malloc_arenas();
    runtime::configure()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<operator::Operator>()?;
    m.add_class::<awaiting::Pending>()?;
    m.add_class::<calls::CallQueue>()?;
    m.add_class::<bodies::CoreBody>()?;
    m.add_class::<scopes::Scope>()?;
    m.add_class::<indices::IndexView>()?;
    m.add_class::<webhooks::WebhookServing>()?;
    m.add_class::<listening::EventStream>()?;
    m.add_class::<recording::Recording>()?;
    m.add_class::<simulation::Simulation>()?;
    m.add_class::<simulation::DaemonHold>()?;
    m.add_function(wrap_pyfunction!(commands::touch_peering, m)?)?;
    m.add_function(wrap_pyfunction!(commands::discover, m)?)?;
    m.add_function(wrap_pyfunction!(commands::review_access, m)?)?;
    m.add_function(wrap_pyfunction!(webhooks::describe_certificate, m)?)?;
    m.add_function(wrap_pyfunction!(webhooks::webhooks_for_manager, m)?)?;
    m.add_function(wrap_pyfunction!(commands::read_objects, m)?)?;
    m.add_function(wrap_pyfunction!(recording::start_recording, m)?)?;
    m.add_function(wrap_pyfunction!(simulation::start_simulation, m)?)?;
    m.add_function(wrap_pyfunction!(check_cron, m)?)?;
    m.add_function(wrap_pyfunction!(log_pattern_matches, m)?)?;
    m.add_function(wrap_pyfunction!(parse_kubeconfig, m)?)?;
    m.add_function(wrap_pyfunction!(settings_as_read, m)?)?;
    m.add_function(wrap_pyfunction!(metrics_described, m)?)?;
    m.add_function(wrap_pyfunction!(protocol::protocol_samples, m)?)?;
    m.add_function(wrap_pyfunction!(protocol::invoked_as_read, m)?)?;
    m.add_function(wrap_pyfunction!(protocol::converted_as_read, m)?)?;
    m.add_function(wrap_pyfunction!(protocol::log_writing_as_read, m)?)?;
    Ok(())
}

/// Check a timer's cron pattern and time zone where it is declared: a `ValueError` saying
/// what is wrong, rather than an operator that fails to start later.
#[pyfunction]
#[pyo3(signature = (pattern, timezone=None))]
fn check_cron(pattern: &str, timezone: Option<&str>) -> PyResult<()> {
    crate::intents::schedules::Schedule::parse(pattern, timezone)
        .map(|_| ())
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// Which of these lines a log handler's pattern (Python's, with its `re` flags) matches as the
/// core matches it: a `ValueError` with the reason if the core cannot take the pattern. No
/// lines: only the check, for the declaration.
#[pyfunction]
fn log_pattern_matches(pattern: &str, flags: u32, lines: Vec<Vec<u8>>) -> PyResult<Vec<bool>> {
    let pattern = crate::intents::patterns::LogPattern::new(pattern, flags)
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(lines.iter().map(|line| pattern.is_match(line)).collect())
}

/// A kubeconfig file's text as Python values (`ValueError` if it is not valid YAML).
#[pyfunction]
fn parse_kubeconfig(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    let value = py
        .detach(|| crate::client::kubeconfigs::parse(text))
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(values::to_python(py, &value)?.unbind())
}

/// Every metric's `# HELP` and `# TYPE` lines as the exposition writes them, for the documentation.
#[pyfunction]
fn metrics_described() -> String {
    crate::metrics::Metrics::described()
}

/// The settings (`OperatorSettings.for_engine()`, as JSON) as the core reads them, as JSON:
/// what reaches the core, for the contract's test; a `ValueError` naming a key it does not know.
#[pyfunction]
fn settings_as_read(json: &str) -> PyResult<String> {
    let settings: crate::settings::Settings = serde_json::from_str(json)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid settings: {e}")))?;
    serde_json::to_string(&settings)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}
