//! The webhook server: HTTPS (or plain HTTP when asked) on a local address, admission
//! reviews POSTed to `{path}/{handler id}` (or to `{path}` for all handlers), each
//! answered by the [`Reviewer`]; a broken request gets an HTTP error, and the server goes on.
//! Abusive clients are bounded: a review's size, the bytes of reviews in flight, and the
//! time a client takes to send its request.

use super::converting::PATH as CONVERSION_PATH;
use super::reviews::ReviewError;
use super::tls;
use crate::intents::handlers::WebhookType;
use crate::util::accepting;
use crate::util::logging::ENGINE;
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

/// The largest review taken: the API server sends at most two objects (the new one and the
/// old one), each of at most 3 MiB (its own limit on a request's body), in one envelope.
/// Anything bigger is not from the API server: refused (413) by its Content-Length before it
/// is read, or as soon as a chunked body crosses the limit.
pub(crate) const MAX_REVIEW_BYTES: usize = 7 * 1024 * 1024;

/// The largest conversion review taken: the API server sends all objects of a list that
/// need converting in one review (hence its own path, `conversion/...`, known before the
/// body is read).
pub(crate) const MAX_CONVERSION_BYTES: usize = 30 * 1024 * 1024;

/// The bytes of the reviews being read and handled at once. A review costs 2-3 times its
/// size while in flight (its bytes, its parsed JSON, its Python objects); beyond this budget
/// a review waits for others to finish (within the review timeout), then is refused (503,
/// Retry-After), so that abusive clients cannot grow the operator's memory (~100 MiB at most).
pub const MAX_REVIEW_BYTES_IN_FLIGHT: usize = 32 * 1024 * 1024;

/// How long a review may take: the webhook configurations promise the apiserver 30 s.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(30);

/// One admission request as it came: what the handlers may look at besides the review.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    /// The request's body, as it came.
    pub body: Bytes,
    /// The handler's id from the path; none: all handlers.
    pub webhook: Option<String>,
    /// Its HTTP headers.
    pub headers: Vec<(String, String)>,
    /// The client's verified certificate, as Python's `getpeercert()` gives it.
    pub sslpeer: Value,
    /// Only the handlers of this kind (a custom server's hint); none: all kinds.
    pub reason: Option<WebhookType>,
}

/// Answers reviews: the operator's admission handlers.
pub trait Reviewer: Send + Sync + 'static {
    /// Answer one admission request with its `AdmissionReview` response.
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
    /// How long a review may take (see [`REVIEW_TIMEOUT`]); also how long a client may take
    /// to send a request (its TLS handshake, its headers, its body): then it is cut off.
    pub timeout: Duration,
    /// See [`MAX_REVIEW_BYTES_IN_FLIGHT`].
    pub in_flight_bytes: usize,
}

/// A running server: where it listens, until dropped or stopped.
pub struct Server {
    /// Where it listens.
    pub local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Stop listening.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listen, and answer requests until stopped.
pub async fn start(spec: ServerSpec, reviewer: Arc<dyn Reviewer>) -> std::io::Result<Server> {
    let listener = TcpListener::bind((spec.addr.as_str(), spec.port)).await?;
    let local = listener.local_addr()?;
    let scheme = if spec.tls.is_some() { "https" } else { "http" };
    tracing::debug!(target: ENGINE, "Listening for webhooks at {scheme}://{local}{}", spec.path);
    let budget = Arc::new(tokio::sync::Semaphore::new(spec.in_flight_bytes));
    let spec = Arc::new(spec);
    let task = accepting::accept(listener, "webhook", move |stream| {
        connection(stream, spec.clone(), reviewer.clone(), budget.clone())
    });
    Ok(Server { local, task })
}

/// What the connections share: the server's spec, the reviewer, the in-flight budget.
type Shared = (
    Arc<ServerSpec>,
    Arc<dyn Reviewer>,
    Arc<tokio::sync::Semaphore>,
);

async fn connection(
    stream: TcpStream,
    spec: Arc<ServerSpec>,
    reviewer: Arc<dyn Reviewer>,
    budget: Arc<tokio::sync::Semaphore>,
) {
    let shared = (spec.clone(), reviewer, budget);
    match &spec.tls {
        None => {
            serve_http(
                TokioIo::new(stream),
                shared,
                Value::Object(Default::default()),
            )
            .await
        }
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
            let stream = match tokio::time::timeout(spec.timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(target: ENGINE, "A webhook client's TLS handshake failed: {error}");
                    return;
                }
                Err(_) => {
                    tracing::debug!(target: ENGINE, "A webhook client's TLS handshake took too long.");
                    return;
                }
            };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first());
            let sslpeer = tls::describe_peer(peer);
            serve_http(TokioIo::new(stream), shared, sslpeer).await;
        }
    }
}

async fn serve_http<S>(io: TokioIo<S>, shared: Shared, sslpeer: Value)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let timeout = shared.0.timeout;
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let ((spec, reviewer, budget), sslpeer) = (shared.clone(), sslpeer.clone());
        async move {
            let response = respond(request, &spec, reviewer, &budget, sslpeer).await;
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    // A client that does not send its headers in time is cut off (a slow-loris holds nothing).
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(io, service)
        .await;
}

async fn respond(
    request: Request<Incoming>,
    spec: &ServerSpec,
    reviewer: Arc<dyn Reviewer>,
    budget: &tokio::sync::Semaphore,
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
    let declared = (request.headers().get(http::header::CONTENT_LENGTH))
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
    let converting = webhook
        .as_deref()
        .is_some_and(|w| w.starts_with(CONVERSION_PATH));
    let limit = if converting {
        MAX_CONVERSION_BYTES
    } else {
        MAX_REVIEW_BYTES
    };
    if declared.is_some_and(|length| length > limit) {
        return too_large(limit);
    }
    // Its share of the budget: as declared, or the most a review may be (a chunked body).
    let share = declared.unwrap_or(limit).clamp(1, spec.in_flight_bytes);
    let share = u32::try_from(share).unwrap_or(u32::MAX);
    let _permit = match tokio::time::timeout(spec.timeout, budget.acquire_many(share)).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) | Err(_) => {
            let mut response = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Too many admission reviews at once; retry.".into(),
            );
            let retry = http::HeaderValue::from_static("1");
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, retry);
            return response;
        }
    };
    let reading = Limited::new(request.into_body(), limit).collect();
    let body = match tokio::time::timeout(spec.timeout, reading).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
            return too_large(limit)
        }
        Ok(Err(error)) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("Cannot read the request: {error}"),
            )
        }
        Err(_) => {
            let mut response = plain(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "The request's body did not come within {:.0?}.",
                    spec.timeout
                ),
            );
            close(&mut response);
            return response;
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

/// 413, and the connection closed: the rest of the body is not read.
fn too_large(limit: usize) -> Response<Full<Bytes>> {
    let mut response = plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("A review is at most {limit} bytes here."),
    );
    close(&mut response);
    response
}

fn close(response: &mut Response<Full<Bytes>>) {
    let close = http::HeaderValue::from_static("close");
    response
        .headers_mut()
        .insert(http::header::CONNECTION, close);
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
                if request.body.starts_with(b"hang") {
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

    async fn server(timeout_ms: u64, in_flight_bytes: usize) -> Server {
        let spec = ServerSpec {
            addr: "127.0.0.1".into(),
            port: 0,
            path: "/hooks".into(),
            tls: None,
            timeout: Duration::from_millis(timeout_ms),
            in_flight_bytes,
        };
        start(spec, Arc::new(Echo)).await.unwrap()
    }

    /// Sends `head` (and then `body`, if any, after `pause`); the response's status line,
    /// or `None` if the server closed the connection without one; and when it came.
    async fn exchange(
        port: u16,
        head: String,
        body: Option<(Duration, Vec<u8>)>,
    ) -> (Option<u16>, Duration) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let started = tokio::time::Instant::now();
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        if let Some((pause, body)) = body {
            tokio::time::sleep(pause).await;
            let _ = stream.write_all(&body).await; // the server may have closed already
        }
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response);
        (
            text.get(9..12).and_then(|code| code.parse().ok()),
            started.elapsed(),
        )
    }

    fn head(length: &str) -> String {
        format!("POST /hooks/x HTTP/1.1\r\nHost: x\r\n{length}\r\nConnection: close\r\n\r\n")
    }

    #[tokio::test]
    async fn an_oversized_review_is_refused_before_it_is_read() {
        let server = server(5_000, MAX_REVIEW_BYTES_IN_FLIGHT).await;
        let port = server.local.port();
        let declared = head(&format!("Content-Length: {}", MAX_REVIEW_BYTES + 1));
        let (status, took) = exchange(port, declared, None).await;
        assert_eq!(status, Some(413));
        assert!(
            took < Duration::from_secs(2),
            "not waiting for the body: {took:?}"
        );
        // Chunked: refused once it crosses the limit.
        let chunk = vec![b'x'; 1024 * 1024];
        let mut body = Vec::new();
        for _ in 0..8 {
            body.extend(format!("{:x}\r\n", chunk.len()).as_bytes());
            body.extend(&chunk);
            body.extend(b"\r\n");
        }
        body.extend(b"0\r\n\r\n");
        let chunked = head("Transfer-Encoding: chunked");
        let (status, _) = exchange(port, chunked, Some((Duration::ZERO, body))).await;
        assert_eq!(status, Some(413));
    }

    #[tokio::test]
    async fn slow_clients_are_cut_off_after_the_timeout() {
        let server = server(300, MAX_REVIEW_BYTES_IN_FLIGHT).await;
        let port = server.local.port();
        // Headers that never end: the connection is closed.
        let (status, took) =
            exchange(port, "POST /hooks/x HTTP/1.1\r\nHost: x\r\n".into(), None).await;
        assert!(status.is_none() || status == Some(408), "{status:?}");
        assert!(took < Duration::from_secs(2), "closed after {took:?}");
        // A body that never comes: 408.
        let (status, took) = exchange(port, head("Content-Length: 100"), None).await;
        assert_eq!(status, Some(408));
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }

    #[tokio::test]
    async fn reviews_beyond_the_bytes_in_flight_wait_then_are_refused() {
        let server = server(1_000, 100).await;
        let port = server.local.port();
        // The first takes the whole budget: its body comes late, then its review hangs
        // (answered 504 at ~1.5 s); the second waits for the budget, then is refused (~1.2 s).
        let body = format!("hang{}", " ".repeat(96)).into_bytes();
        let holding = exchange(
            port,
            head("Content-Length: 100"),
            Some((Duration::from_millis(500), body)),
        );
        let waiting = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            exchange(
                port,
                head("Content-Length: 100"),
                Some((Duration::ZERO, vec![b' '; 100])),
            )
            .await
        };
        let ((first, _), (second, _)) = tokio::join!(holding, waiting);
        assert_eq!((first, second), (Some(504), Some(503)));
        let (status, _) = exchange(
            port,
            head("Content-Length: 2"),
            Some((Duration::ZERO, b"{}".to_vec())),
        )
        .await;
        assert_eq!(status, Some(200), "the budget is back");
    }

    #[tokio::test]
    async fn requests_are_answered_and_bad_ones_refused() {
        let server = server(300, MAX_REVIEW_BYTES_IN_FLIGHT).await;
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
