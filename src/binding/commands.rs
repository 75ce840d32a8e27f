//! One-shot commands of the CLI that only talk to the API: `kopf freeze` and `kopf resume`.

use crate::client::connection::{self, ConnectionInfo};
use crate::client::credentials::Credentials;
use crate::client::discovery::{self, DiscoveryError};
use crate::ha::peering::{self, TouchRequest};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// Write (or with lifetime 0, remove) our record in the peering objects; an awaitable
/// of a JSON list of `[where, found]` pairs.
#[pyfunction]
pub fn touch_peering<'py>(
    py: Python<'py>,
    connection: &str,
    request: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let info: ConnectionInfo = serde_json::from_str(connection)
        .map_err(|e| PyValueError::new_err(format!("invalid connection info: {e}")))?;
    let request: TouchRequest = serde_json::from_str(request)
        .map_err(|e| PyValueError::new_err(format!("invalid peering request: {e}")))?;
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let failed = |message: String| PyRuntimeError::new_err(message);
        let client = connection::client(&info, None)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let resources = discovery::scan(&client).await.map_err(|source| {
            let server = info.server.clone();
            failed(DiscoveryError { server, source }.to_string())
        })?;
        let credentials = Credentials::fixed(client);
        let results = peering::touch_all(&credentials, &resources, &request)
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok(serde_json::to_string(&results).expect("pairs of strings and booleans serialise"))
    })
}
