//! The `/metrics` endpoint: plain HTTP, `GET /metrics` answers the exposition.

use super::Metrics;
use crate::util::endpoints;
use crate::util::logging::ENGINE;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "unsupported metrics address {0:?}: expected [HOST:]PORT, e.g. 9090 or 127.0.0.1:9090"
    )]
    /// The address is not `[HOST:]PORT`.
    Address(String),
    /// The address cannot be listened on.
    #[error("cannot listen on {address} for the metrics: {source}")]
    Listen {
        /// The address as given.
        address: String,
        /// The listen's error.
        #[source]
        source: std::io::Error,
    },
}

/// `PORT` (on all interfaces) or `HOST:PORT` (`[::1]:PORT` for IPv6) as a bindable address.
pub(crate) fn parse_address(given: &str) -> Result<String, MetricsError> {
    let invalid = || MetricsError::Address(given.to_owned());
    let (host, port) = match given.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => (host, port),
        Some(_) => return Err(invalid()),
        None => ("0.0.0.0", given),
    };
    let port: u16 = port.parse().map_err(|_| invalid())?;
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(invalid()); // a bare IPv6 address: ambiguous with its port
    }
    Ok(format!("{host}:{port}"))
}

/// Start recording and bind the endpoint now (so that a taken port fails the start);
/// serve in the background.
pub async fn serve(given: &str) -> Result<tokio::task::JoinHandle<()>, MetricsError> {
    let address = parse_address(given)?;
    let listener = TcpListener::bind(&address)
        .await
        .map_err(|source| MetricsError::Listen {
            address: address.clone(),
            source,
        })?;
    let metrics = super::enable();
    tracing::info!(target: ENGINE, "Serving metrics at http://{address}/metrics");
    Ok(endpoints::serve(listener, move |request| {
        std::future::ready(respond(&request, metrics))
    }))
}

fn respond(request: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    if request.method() != Method::GET || request.uri().path() != "/metrics" {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"Not Found: see /metrics\n")))
            .expect("a static response");
    }
    Response::builder()
        .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
        .body(Full::new(Bytes::from(metrics.encode())))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::parse_address;

    #[test]
    fn addresses_are_a_port_or_a_host_and_port() {
        assert_eq!(parse_address("9090").unwrap(), "0.0.0.0:9090");
        assert_eq!(parse_address("127.0.0.1:9090").unwrap(), "127.0.0.1:9090");
        assert_eq!(parse_address("[::1]:9090").unwrap(), "[::1]:9090");
        assert_eq!(parse_address("localhost:80").unwrap(), "localhost:80");
        for wrong in [
            "",
            "x",
            ":9090",
            "host:",
            "host:99999",
            "::1:9090",
            "http://h:1",
        ] {
            assert!(parse_address(wrong).is_err(), "{wrong}");
        }
    }
}
