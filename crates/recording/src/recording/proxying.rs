//! The recording proxy: an HTTPS server on the loopback with a certificate of its own, which
//! forwards every request to the API server with the login's credentials (the clients behind
//! it send none) and passes the answer back as it comes (watch-streams included), noting each
//! request in the journal.
//!
//! Upgraded connections (exec, attach, port-forward over websockets or SPDY) are not
//! forwarded: they are noted, and answered 501.

use super::attributes;
use super::journal::Journal;
use crate::client::transport::Transport;
use crate::util::accepting;
use crate::webhooks::certificates;
use crate::webhooks::tls::{self, ClientVerification};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The largest request body forwarded (the API server's own limit is 3 MiB for objects).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How long a client may take for its TLS handshake and its headers.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Headers of one connection, not of the request: not passed on. The credentials are the
/// proxy's own; the host is the API server's.
const NOT_FORWARDED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "authorization",
    "host",
];

type Body = BoxBody<Bytes, hyper::Error>;

/// A running proxy: where it listens, its certificate's CA (what its clients trust), what it saw.
pub struct Proxy {
    /// Where it listens.
    pub local: SocketAddr,
    /// Its certificate (PEM), which its clients trust.
    pub cert_pem: Vec<u8>,
    /// The requests it forwarded.
    pub journal: Arc<Journal>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Stop listening.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listen on the loopback (port 0: any free one) and forward with this transport.
pub async fn start(transport: Transport, port: u16) -> Result<Proxy, String> {
    let identity = certificates::with_authority(&["127.0.0.1".to_owned(), "localhost".to_owned()])
        .map_err(|e| e.to_string())?;
    let cert_pem = identity.cert_pem.clone();
    let clients = ClientVerification {
        mode: None,
        cas: vec![],
    };
    let config = tls::server_config(identity, &clients)?;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let journal = Arc::new(Journal::default());
    let shared = Arc::new(Shared {
        transport,
        journal: journal.clone(),
    });
    let task = accepting::accept(listener, "recording proxy", move |stream| {
        connection(stream, config.clone(), shared.clone())
    });
    Ok(Proxy {
        local,
        cert_pem,
        journal,
        task,
    })
}

struct Shared {
    transport: Transport,
    journal: Arc<Journal>,
}

async fn connection(stream: TcpStream, config: Arc<rustls::ServerConfig>, shared: Arc<Shared>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let Ok(Ok(stream)) = tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await else {
        return; // a failed or slow handshake: nothing was requested
    };
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let shared = shared.clone();
        async move { Ok::<_, std::convert::Infallible>(forward(request, &shared).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn forward(request: Request<Incoming>, shared: &Shared) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let agent = (parts.headers.get(http::header::USER_AGENT))
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);
    let target = parts
        .uri
        .path_and_query()
        .map_or_else(|| path.clone(), |pq| pq.as_str().to_owned());
    let found = attributes::of(parts.method.as_str(), &path, query.as_deref());
    let note = |code: u16| {
        // (An empty query is shown as none: the engine's lists send a bare `?`.)
        let example = || format!("{} {}", parts.method, target.trim_end_matches('?'));
        shared.journal.note(&agent, found.clone(), code, example);
    };
    if parts.headers.contains_key(http::header::UPGRADE) {
        note(StatusCode::NOT_IMPLEMENTED.as_u16());
        return plain(
            StatusCode::NOT_IMPLEMENTED,
            "The recording proxy of `kopf rbac record` does not forward upgraded connections \
             (exec, attach, port-forward); the request is recorded.",
        );
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("The request's body cannot be read: {error}"),
            )
        }
    };
    let mut outgoing = Request::builder()
        .method(parts.method.clone())
        .uri(target.as_str());
    if let Some(headers) = outgoing.headers_mut() {
        copy_headers(&parts.headers, headers);
    }
    let outgoing = match outgoing.body(body.to_vec()) {
        Ok(outgoing) => outgoing,
        Err(error) => {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("An invalid request: {error}"),
            )
        }
    };
    match shared.transport.forward(outgoing).await {
        Ok(response) => {
            note(response.status().as_u16());
            let (mut parts, body) = response.into_parts();
            for name in NOT_FORWARDED {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, body.boxed())
        }
        Err(error) => {
            note(0);
            plain(
                StatusCode::BAD_GATEWAY,
                &format!("The API server cannot be reached: {error}"),
            )
        }
    }
}

fn copy_headers(from: &HeaderMap, into: &mut HeaderMap) {
    for (name, value) in from {
        if !NOT_FORWARDED.contains(&name.as_str()) {
            into.append(HeaderName::clone(name), value.clone());
        }
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(text.to_owned()))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    (response.headers_mut()).insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
