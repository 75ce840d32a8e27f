//! One-shot commands of the CLI that only talk to the API: `kopf freeze` and `kopf resume`;
//! `kopf rbac generate` (the served resources) and `kopf rbac verify` (access reviews);
//! `kopf olm generate` (the CRDs read).

use crate::client::connection::{self, ConnectionInfo};
use crate::client::credentials::Credentials;
use crate::client::discovery::{self, DiscoveryError};
use crate::client::resources::Resource;
use crate::client::transport::Transport;
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
    let info = connection_info(connection)?;
    let request: TouchRequest = serde_json::from_str(request)
        .map_err(|e| PyValueError::new_err(format!("invalid peering request: {e}")))?;
    super::awaiting::awaitable(py, async move {
        let (client, resources) = connect(&info).await?;
        let credentials = Credentials::fixed(client);
        let results = peering::touch_all(&credentials, &resources, &request)
            .await
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(serde_json::to_string(&results).expect("pairs of strings and booleans serialise"))
    })
}

/// The resources the server serves (as the operator discovers them at start); an
/// awaitable of their JSON list.
#[pyfunction]
pub fn discover<'py>(py: Python<'py>, connection: &str) -> PyResult<Bound<'py, PyAny>> {
    let info = connection_info(connection)?;
    super::awaiting::awaitable(py, async move {
        let (_, resources) = connect(&info).await?;
        Ok(serde_json::to_string(&resources).expect("resources serialise"))
    })
}

/// Whether the current credentials may do each of these (SelfSubjectAccessReviews:
/// `resourceAttributes` objects); an awaitable of a JSON list of booleans.
#[pyfunction]
pub fn review_access<'py>(
    py: Python<'py>,
    connection: &str,
    attributes: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let info = connection_info(connection)?;
    let attributes: Vec<serde_json::Value> = serde_json::from_str(attributes)
        .map_err(|e| PyValueError::new_err(format!("invalid access reviews: {e}")))?;
    super::awaiting::awaitable(py, async move {
        let (client, _) = connect(&info).await?;
        let credentials = Credentials::fixed(client);
        let url = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        let mut allowed = Vec::with_capacity(attributes.len());
        for resource_attributes in attributes {
            let review = serde_json::json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": resource_attributes},
            });
            let answer = (credentials.post(url, &review).await)
                .map_err(|e| PyRuntimeError::new_err(format!("POST {url}: {e}")))?;
            allowed.push(answer.pointer("/status/allowed") == Some(&serde_json::Value::Bool(true)));
        }
        Ok(serde_json::to_string(&allowed).expect("booleans serialise"))
    })
}

/// The objects at these API paths as the server has them (e.g. CRDs that no `--crd` file gives,
/// a Helm release's Secrets); an awaitable of their JSON list, `null` for one that is absent.
#[pyfunction]
pub fn read_objects<'py>(
    py: Python<'py>,
    connection: &str,
    paths: Vec<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let info = connection_info(connection)?;
    super::awaiting::awaitable(py, async move {
        let client =
            connection::client(&info, None).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let credentials = Credentials::fixed(client);
        let mut found = Vec::with_capacity(paths.len());
        for path in paths {
            let object = (credentials.get_if_present(&path).await)
                .map_err(|e| PyRuntimeError::new_err(format!("GET {path}: {e}")))?;
            found.push(object.unwrap_or_default());
        }
        Ok(serde_json::to_string(&found).expect("objects serialise"))
    })
}

fn connection_info(connection: &str) -> PyResult<ConnectionInfo> {
    serde_json::from_str(connection)
        .map_err(|e| PyValueError::new_err(format!("invalid connection info: {e}")))
}

/// A client of these credentials, and what its server serves.
async fn connect(info: &ConnectionInfo) -> PyResult<(Transport, Vec<Resource>)> {
    let failed = |message: String| PyRuntimeError::new_err(message);
    let client = connection::client(info, None).map_err(|e| failed(e.to_string()))?;
    let resources = discovery::scan(&client, None).await.map_err(|source| {
        let server = info.server.clone();
        failed(DiscoveryError { server, source }.to_string())
    })?;
    Ok((client, resources))
}
