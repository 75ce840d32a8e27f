//! The liveness endpoint (`--liveness http://host:port/path`): answers GET with the
//! results of the `@kopf.on.probe` handlers as JSON, re-run at most every 10 seconds; until
//! the operator watches its resources (its start may wait for discovery, the CRDs' conversion,
//! the peering), with 503 and what it waits for.
//!
//! Uses: `util`, `intents`.

use crate::intents::hooks::OperatorQueries;
use crate::util::endpoints;
use crate::util::logging::ENGINE;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Mutex;

const MAX_AGE: Duration = Duration::from_secs(10);

/// Why the liveness endpoint cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ProbingError {
    /// Not an `http://host:port/path` URL.
    #[error("unsupported liveness endpoint {0:?}: only http://host:port/path is supported")]
    Endpoint(String),
    /// The address cannot be listened on.
    #[error("cannot listen on {address} for the liveness endpoint: {source}")]
    Listen {
        /// The address.
        address: String,
        /// The listen's error.
        #[source]
        source: std::io::Error,
    },
}

struct Cache {
    value: Value,
    at: Option<Instant>,
}

/// Bind the endpoint now (so that a taken port fails the start), serve in the background;
/// `watching` says whether the operator watches its resources yet.
pub async fn serve(
    endpoint: &str,
    hooks: Arc<dyn OperatorQueries>,
    watching: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, ProbingError> {
    let url = url::Url::parse(endpoint).map_err(|_| ProbingError::Endpoint(endpoint.to_owned()))?;
    if url.scheme() != "http" {
        return Err(ProbingError::Endpoint(endpoint.to_owned()));
    }
    let host = url.host_str().unwrap_or("localhost").to_owned();
    let port = url.port().unwrap_or(80);
    let path = url.path().to_owned();
    let address = format!("{host}:{port}");
    let listener = TcpListener::bind(&address)
        .await
        .map_err(|source| ProbingError::Listen {
            address: address.clone(),
            source,
        })?;
    tracing::debug!(target: ENGINE, "Serving health status at http://{address}{path}");
    let cache = Arc::new(Mutex::new(Cache {
        value: Value::Object(Default::default()),
        at: None,
    }));
    Ok(endpoints::serve(listener, move |request| {
        let (hooks, cache, path) = (hooks.clone(), cache.clone(), path.clone());
        let watching = *watching.borrow();
        async move { respond(request, &path, hooks, &cache, watching).await }
    }))
}

async fn respond(
    request: Request<Incoming>,
    path: &str,
    hooks: Arc<dyn OperatorQueries>,
    cache: &Mutex<Cache>,
    watching: bool,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET || request.uri().path() != path {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"Not Found")))
            .expect("a static response");
    }
    if !watching {
        return Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(
                br#"{"starting": "the operator does not watch its resources yet"}"#,
            )))
            .expect("a static response");
    }
    let mut cache = cache.lock().await;
    if cache.at.is_none_or(|at| at.elapsed() >= MAX_AGE) {
        cache.value = hooks.probe().await;
        cache.at = Some(Instant::now());
    }
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&cache.value).expect("JSON values serialise"),
        )))
        .expect("a valid response")
}
