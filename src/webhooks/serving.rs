//! The webhook server: HTTPS (or plain HTTP when asked) on a local address, admission
//! reviews POSTed to `{path}/{handler id}` (or to `{path}` for all handlers), each
//! answered by the [`Reviewer`]; a broken request gets an HTTP error, and the server goes on.

use super::reviews::ReviewError;
use super::tls;
use crate::engine::handlers::WebhookType;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use percent_encoding::percent_decode_str;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The apiserver sends objects of up to ~3 MiB (etcd's limit), old and new in one review.
const MAX_REVIEW_BYTES: usize = 16 * 1024 * 1024;

/// How long a review may take: the webhook configurations promise the apiserver 30 s.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(30);

/// One admission request as it came: what the handlers may look at besides the review.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    pub body: Bytes,
    /// The handler's id from the path; none: all handlers.
    pub webhook: Option<String>,
    pub headers: Vec<(String, String)>,
    /// The client's verified certificate, as Python's `getpeercert()` gives it.
    pub sslpeer: Value,
    /// Only the handlers of this kind (a custom server's hint); none: all kinds.
    pub reason: Option<WebhookType>,
}

/// Answers reviews: the operator's admission handlers.
pub trait Reviewer: Send + Sync + 'static {
    fn review(&self, request: AdmissionRequest) -> BoxFuture<'_, Result<Value, ReviewError>>;
}

/// Where and how to listen.
pub struct ServerSpec {
    /// The address to listen on (`0.0.0.0`, `::`, a host name).
    pub addr: String,
    /// `0`: a free port, chosen by the system.
    pub port: u16,
    /// The root path of the webhooks (``""`` or ``/something``).
    pub path: String,
    /// `None`: plain HTTP (`insecure=True`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// How long a review may take (see [`REVIEW_TIMEOUT`]).
    pub timeout: Duration,
}

/// A running server: where it listens, until dropped or stopped.
pub struct Server {
    pub local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start(spec: ServerSpec, reviewer: Arc<dyn Reviewer>) -> std::io::Result<Server> {
    let listener = TcpListener::bind((spec.addr.as_str(), spec.port)).await?;
    let local = listener.local_addr()?;
    let scheme = if spec.tls.is_some() { "https" } else { "http" };
    tracing::debug!(target: ENGINE, "Listening for webhooks at {scheme}://{local}{}", spec.path);
    let spec = Arc::new(spec);
    let task = tasks::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(target: ENGINE, "Cannot accept a webhook connection: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            tasks::spawn(connection(stream, spec.clone(), reviewer.clone()));
        }
    });
    Ok(Server { local, task })
}

async fn connection(stream: TcpStream, spec: Arc<ServerSpec>, reviewer: Arc<dyn Reviewer>) {
    match &spec.tls {
        None => {
            serve_http(
                TokioIo::new(stream),
                spec,
                reviewer,
                Value::Object(Default::default()),
            )
            .await
        }
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
            let stream = match acceptor.accept(stream).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(target: ENGINE, "A webhook client's TLS handshake failed: {error}");
                    return;
                }
            };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first());
            let sslpeer = tls::describe_peer(peer);
            serve_http(TokioIo::new(stream), spec, reviewer, sslpeer).await;
        }
    }
}

async fn serve_http<S>(
    io: TokioIo<S>,
    spec: Arc<ServerSpec>,
    reviewer: Arc<dyn Reviewer>,
    sslpeer: Value,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (spec, reviewer, sslpeer) = (spec.clone(), reviewer.clone(), sslpeer.clone());
        async move {
            Ok::<_, std::convert::Infallible>(respond(request, &spec, reviewer, sslpeer).await)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}

async fn respond(
    request: Request<Incoming>,
    spec: &ServerSpec,
    reviewer: Arc<dyn Reviewer>,
    sslpeer: Value,
) -> Response<Full<Bytes>> {
    let Some(webhook) = webhook_of(request.uri().path(), &spec.path) else {
        return plain(StatusCode::NOT_FOUND, "Not Found".into());
    };
    if request.method() != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed".into());
    }
    let headers = (request.headers().iter())
        .map(|(k, v)| {
            (
                header_name(k.as_str()),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match Limited::new(request.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("Cannot read the request: {error}"),
            )
        }
    };
    let incoming = AdmissionRequest {
        body,
        webhook,
        headers,
        sslpeer,
        reason: None,
    };
    match tokio::time::timeout(spec.timeout, reviewer.review(incoming)).await {
        Ok(Ok(response)) => Response::builder()
            .header(
                http::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )
            .body(Full::new(Bytes::from(
                serde_json::to_vec(&response).expect("JSON values serialise"),
            )))
            .expect("a valid response"),
        Ok(Err(error)) => {
            let status = StatusCode::from_u16(error.http_status()).expect("a valid status");
            plain(status, error.to_string())
        }
        Err(_) => plain(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "The admission handlers did not finish within {:.0?}.",
                spec.timeout
            ),
        ),
    }
}

/// The handler id addressed by the path (`Some(None)`: the root, all handlers), or none
/// if the path is not under the server's root.
fn webhook_of(path: &str, root: &str) -> Option<Option<String>> {
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() || rest == "/" {
        return Some(None);
    }
    let id = rest.strip_prefix('/')?;
    Some(Some(
        percent_decode_str(id).decode_utf8_lossy().into_owned(),
    ))
}

/// Headers as a client wrote them (`User-Agent`), not as HTTP/1 normalises them.
fn header_name(lower: &str) -> String {
    lower
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(text)))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_address_handlers() {
        assert_eq!(webhook_of("/validate1", ""), Some(Some("validate1".into())));
        assert_eq!(
            webhook_of("/hooks/fn/sub", "/hooks/"),
            Some(Some("fn/sub".into()))
        );
        assert_eq!(webhook_of("/hooks", "/hooks"), Some(None));
        assert_eq!(webhook_of("/", ""), Some(None));
        assert_eq!(webhook_of("/other/x", "/hooks"), None);
        assert_eq!(webhook_of("/hooksx", "/hooks"), None);
        assert_eq!(
            webhook_of("/root/a%20b/%C3%BC", "/root/"),
            Some(Some("a b/ü".into()))
        );
    }

    #[test]
    fn header_names_as_written() {
        assert_eq!(header_name("user-agent"), "User-Agent");
        assert_eq!(header_name("content-type"), "Content-Type");
        assert_eq!(header_name("x-a--b"), "X-A--B");
    }

    struct Echo;
    impl Reviewer for Echo {
        fn review(&self, request: AdmissionRequest) -> BoxFuture<'_, Result<Value, ReviewError>> {
            Box::pin(async move {
                if request.body.as_ref() == b"bad" {
                    return Err(ReviewError::BadRequest("bad review".into()));
                }
                if request.body.as_ref() == b"hang" {
                    std::future::pending::<()>().await;
                }
                Ok(serde_json::json!({"webhook": request.webhook, "sslpeer": request.sslpeer}))
            })
        }
    }

    async fn post(port: u16, path: &str, body: &'static str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response[9..12].parse().unwrap();
        let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        (status, body)
    }

    #[tokio::test]
    async fn requests_are_answered_and_bad_ones_refused() {
        let spec = ServerSpec {
            addr: "127.0.0.1".into(),
            port: 0,
            path: "/hooks".into(),
            tls: None,
            timeout: Duration::from_millis(300),
        };
        let server = start(spec, Arc::new(Echo)).await.unwrap();
        let port = server.local.port();
        let (status, body) = post(port, "/hooks/validate1", "{}").await;
        assert_eq!(status, 200);
        assert_eq!(body, r#"{"webhook":"validate1","sslpeer":{}}"#);
        let (status, body) = post(port, "/hooks/x", "bad").await;
        assert_eq!((status, body.as_str()), (400, "bad review"));
        let (status, _) = post(port, "/elsewhere", "{}").await;
        assert_eq!(status, 404);
        let (status, body) = post(port, "/hooks/x", "hang").await;
        assert_eq!(status, 504, "a hanging handler is cut: {body}");
        let (status, _) = post(port, "/hooks", "{}").await;
        assert_eq!(status, 200, "the server goes on after errors");
    }
}
