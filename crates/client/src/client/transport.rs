//! The HTTP stack under the credentials: hyper's client with our TLS (`client::tls`) and
//! authorization (`client::authorization`), hyper-util's proxies, and kube's layers for the
//! server's URL and extra headers, called directly. kube's own `Client` puts more around every
//! request that the engine does not want: a buffer (a channel to a task of its own:
//! one more task hop per request), a trace span, a copy of each request for its retry
//! layer, and that layer itself, which retried 429/503/504 up to 15 times before the
//! engine saw the error, where Kopf retries by `settings.networking.error_backoffs` alone.

use crate::client::authorization::Authorization;
use bytes::{Bytes, BytesMut};
use futures::{Stream, TryStreamExt};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::ConfigExt;
use kube::core::{Status, WatchEvent};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

type Service = BoxCloneSyncService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

/// How long a connection may wait in the pool for its next request before it is closed
/// (aiohttp's keep-alive, so Kopf's): a burst of requests leaves dozens of TLS connections
/// (a few more than `MAX_CONCURRENT_REQUESTS`), each with ~60 KB of buffers and TLS state
/// here and more in the API server, which hyper would otherwise keep until used again.
/// The pool's sweep stops once it is empty: at rest, nothing wakes up for it.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

/// Requests to one API server with one login's credentials; clones share the connections.
#[derive(Clone)]
pub struct Transport {
    service: Service,
}

impl Transport {
    /// The stack for these credentials: kube's `Config` for the server, the proxy and extra
    /// headers, with our TLS and authorization (see `client::tls`); connections time out by
    /// `connect_timeout` (none: no limit).
    pub fn new(
        config: &kube::Config,
        tls: rustls::ClientConfig,
        authorization: Authorization,
        connect_timeout: Option<Duration>,
    ) -> kube::Result<Self> {
        let stack = Stack {
            config,
            tls,
            authorization: Arc::new(authorization),
        };
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_connect_timeout(connect_timeout);
        match config.proxy_url.as_ref() {
            None => stack.over(connector),
            Some(url) => match url.scheme_str() {
                Some("socks5") => stack.over(SocksV5::new(url.clone(), connector)),
                Some("http") => stack.over(proxy_auth(url, Tunnel::new(url.clone(), connector))),
                Some("https") => {
                    let tls = stack.https(connector);
                    stack.over(proxy_auth(url, Tunnel::new(url.clone(), tls)))
                }
                _ => Err(kube::Error::ProxyProtocolUnsupported {
                    proxy_url: Box::new(url.clone()),
                }),
            },
        }
    }

    /// A transport without credentials, for servers of plain HTTP (tests' mock servers):
    /// no CA is trusted, no authorization is sent.
    pub fn plain(config: &kube::Config) -> kube::Result<Self> {
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        Self::new(config, tls, Authorization::None, None)
    }

    /// The response to a request as the server gave it, whatever its status (`kopf rbac
    /// record`'s proxy passes it on).
    pub async fn forward(&self, request: Request<Vec<u8>>) -> kube::Result<Response<Incoming>> {
        (self.service.clone())
            .oneshot(request.map(|body| Full::new(Bytes::from(body))))
            .await
            .map_err(|error| match error.downcast::<hyper::Error>() {
                Ok(error) => kube::Error::HyperError(*error),
                Err(error) => match error.downcast::<kube::Error>() {
                    Ok(error) => *error,
                    Err(error) => kube::Error::Service(error),
                },
            })
    }

    /// The response to a request, if it is a success; the server's `Status` if not.
    pub async fn send(&self, request: Request<Vec<u8>>) -> kube::Result<Response<Incoming>> {
        let response = self.forward(request).await?;
        let code = response.status();
        if !(code.is_client_error() || code.is_server_error()) {
            return Ok(response);
        }
        let retry_after = (response.headers().get(http::header::RETRY_AFTER))
            .and_then(|value| value.to_str().ok())
            .and_then(|value| retry_after_seconds(value, chrono::Utc::now()));
        let text = read(response).await?;
        // Not every refusal is a `Status` (a proxy's page, a path that is not served).
        let mut status = serde_json::from_slice::<Status>(&text).unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(&text);
            Status::failure(text.trim(), "Failed to parse error data").with_code(code.as_u16())
        });
        // A gateway's throttling may say when to come back only in the header: kept in the
        // Status's own field (the header wins, as in Kopf), where the retries read it.
        if let Some(seconds) = retry_after {
            let details = status.details.get_or_insert_with(|| {
                serde_json::from_str("{}").expect("every field of StatusDetails has a default")
            });
            details.retry_after_seconds = seconds;
        }
        Err(kube::Error::Api(Box::new(status)))
    }

    /// The response's JSON as `T`.
    pub async fn request<T: DeserializeOwned>(&self, request: Request<Vec<u8>>) -> kube::Result<T> {
        let body = read(self.send(request).await?).await?;
        serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
    }

    /// A GET's JSON as `T`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> kube::Result<T> {
        let request = Request::get(path).body(Vec::new());
        self.request(request.map_err(kube::Error::HttpError)?).await
    }

    /// The response's body as it arrives.
    pub(crate) async fn request_stream(
        &self,
        request: Request<Vec<u8>>,
    ) -> kube::Result<impl futures::AsyncBufRead + use<>> {
        let response = self.send(request).await?;
        let chunks = response.into_body().into_data_stream();
        Ok(chunks.map_err(std::io::Error::other).into_async_read())
    }

    /// A watch-stream: one event a line. It ends when the server ends it, or when the
    /// connection breaks mid-way (to be resumed from the last version); an `ERROR` line that
    /// is not an event is the server's `Status`.
    pub(crate) async fn request_events(
        &self,
        mut request: Request<Vec<u8>>,
    ) -> kube::Result<impl Stream<Item = kube::Result<WatchEvent<serde_json::Value>>> + use<>> {
        // Servers gzip watch-streams one member an event when asked; we never ask.
        (request.headers_mut())
            .entry(http::header::ACCEPT_ENCODING)
            .or_insert(http::HeaderValue::from_static("identity"));
        let response = self.send(request).await?;
        let lines = Lines {
            body: response.into_body(),
            buffer: BytesMut::new(),
            searched: 0,
            ended: false,
        };
        Ok(futures::stream::unfold(lines, |mut lines| async move {
            let line = lines.next().await?;
            Some((line.and_then(|line| event(&line)), lines))
        }))
    }
}

/// A `Retry-After` header's delay in whole seconds (rounded up, never sooner than asked):
/// a number of seconds, or an HTTP date (RFC 9110: IMF-fixdate; RFC 2822's form parses it).
fn retry_after_seconds(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<u32> {
    let value = value.trim();
    let seconds = match value.parse::<f64>() {
        Ok(seconds) => seconds,
        Err(_) => {
            let moment = chrono::DateTime::parse_from_rfc2822(value).ok()?;
            (moment.with_timezone(&chrono::Utc) - now).num_milliseconds() as f64 / 1000.0
        }
    };
    (seconds.is_finite() && seconds > 0.0).then(|| seconds.ceil().min(f64::from(u32::MAX)) as u32)
}

async fn read(response: Response<Incoming>) -> kube::Result<Bytes> {
    let body = response.into_body().collect().await;
    Ok(body.map_err(kube::Error::HyperError)?.to_bytes())
}

/// An event of the stream, or the server's complaint in its place.
fn event(line: &[u8]) -> kube::Result<WatchEvent<serde_json::Value>> {
    serde_json::from_slice(line).map_err(|error| match serde_json::from_slice::<Status>(line) {
        Ok(status) => kube::Error::Api(Box::new(status)),
        Err(_) => kube::Error::SerdeError(error),
    })
}

/// The lines of a response's body, as they complete.
struct Lines {
    body: Incoming,
    buffer: BytesMut,
    /// How much of the buffer is known to hold no newline (a large object comes in many
    /// chunks: each is searched once).
    searched: usize,
    ended: bool,
}

impl Lines {
    async fn next(&mut self) -> Option<kube::Result<Bytes>> {
        loop {
            let unsearched = &self.buffer[self.searched..];
            if let Some(at) = unsearched.iter().position(|&b| b == b'\n') {
                let at = self.searched + at;
                let line = self.buffer.split_to(at + 1).freeze().slice(..at);
                self.searched = 0;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(Ok(line));
            }
            self.searched = self.buffer.len();
            if self.ended {
                // A last line without its newline is incomplete: the stream broke mid-event.
                return None;
            }
            match self.body.frame().await {
                None => self.ended = true,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                // Ended mid-way (a broken connection, a server that went away): resumed
                // by the watcher from the last version it saw, as after a normal end.
                Some(Err(error)) if is_incomplete(&error) => self.ended = true,
                Some(Err(error)) => {
                    self.ended = true;
                    return Some(Err(kube::Error::ReadEvents(std::io::Error::other(error))));
                }
            }
        }
    }
}

/// The body ended before the server said it was complete.
fn is_incomplete(error: &hyper::Error) -> bool {
    if error.is_incomplete_message() || error.to_string().contains("unexpected EOF") {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::UnexpectedEof {
                return true;
            }
        }
        source = cause.source();
    }
    false
}

/// What a transport is built of, over whichever connector the proxy needs.
struct Stack<'c> {
    config: &'c kube::Config,
    tls: rustls::ClientConfig,
    authorization: Arc<Authorization>,
}

impl Stack<'_> {
    fn https<C>(&self, connector: C) -> hyper_rustls::HttpsConnector<C> {
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.tls.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector)
    }

    fn over<C>(&self, connector: C) -> kube::Result<Transport>
    where
        C: tower::Service<http::Uri> + Clone + Send + Sync + 'static,
        C::Response: hyper::rt::Read
            + hyper::rt::Write
            + hyper_util::client::legacy::connect::Connection
            + Send
            + Unpin
            + 'static,
        C::Future: Send + 'static,
        C::Error: Into<BoxError>,
    {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
                // Without a timer, hyper closes an idle connection only when it is next
                // taken from the pool, and keeps the rest for ever.
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build(self.https(connector));
        let authorization = self.authorization.clone();
        let service = ServiceBuilder::new()
            .layer(self.config.base_uri_layer())
            .map_request(move |mut request: Request<Full<Bytes>>| {
                if let Some(value) = authorization.header() {
                    request
                        .headers_mut()
                        .insert(http::header::AUTHORIZATION, value);
                }
                request
            })
            .layer(self.config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(client);
        Ok(Transport {
            service: BoxCloneSyncService::new(service),
        })
    }
}

/// A proxy URL's `user:password@` as the tunnel's basic authentication.
fn proxy_auth<C>(url: &http::Uri, tunnel: Tunnel<C>) -> Tunnel<C> {
    match proxy_authorization(url) {
        Some(header) => tunnel.with_auth(header),
        None => tunnel,
    }
}

/// The `Proxy-Authorization` of a proxy URL with credentials (percent-escapes decoded).
fn proxy_authorization(url: &http::Uri) -> Option<http::HeaderValue> {
    use base64::Engine as _;
    let (userinfo, _) = url.authority()?.as_str().rsplit_once('@')?;
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(userinfo).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(decoded);
    let mut header = http::HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    header.set_sensitive(true);
    Some(header)
}

#[cfg(test)]
mod tests {
    // The mock server is a plain task of the test.
    #![allow(clippy::disallowed_methods)]

    use super::*;
    use futures::StreamExt;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    type Chunks = Vec<&'static [u8]>;

    /// What the mock server has seen: requests, and connections still open.
    #[derive(Clone, Default)]
    struct Seen {
        requests: Arc<AtomicUsize>,
        open: Arc<AtomicUsize>,
    }

    /// A server that answers every request with `code` and these chunks of a body (each
    /// sent on its own); a transport to it, and what the server has seen.
    async fn serve(code: u16, chunks: Chunks) -> (Transport, Seen) {
        serve_with(code, &[], chunks).await
    }

    /// The same, with these headers in every response.
    async fn serve_with(
        code: u16,
        headers: &'static [(&'static str, &'static str)],
        chunks: Chunks,
    ) -> (Transport, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Seen::default();
        let counted = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (chunks, counted) = (chunks.clone(), counted.clone());
                let requests = counted.requests.clone();
                let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                    requests.fetch_add(1, Ordering::SeqCst);
                    // Collected: a closure's type in the body would be held across the
                    // connection's awaits, which the compiler cannot prove general enough.
                    let frames: Vec<Result<Frame<Bytes>, Infallible>> = (chunks.iter())
                        .map(|chunk| Ok(Frame::data(Bytes::from_static(chunk))))
                        .collect();
                    let body = StreamBody::new(futures::stream::iter(frames));
                    let response = (headers.iter())
                        .fold(Response::builder().status(code), |r, (k, v)| {
                            r.header(*k, *v)
                        })
                        .body(body);
                    async move { response }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                counted.open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let served = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                    counted.open.fetch_sub(1, Ordering::SeqCst);
                    served
                });
            }
        });
        let config = kube::Config::new(url.parse().unwrap());
        (Transport::plain(&config).unwrap(), seen)
    }

    fn get(path: &str) -> Request<Vec<u8>> {
        Request::get(path).body(Vec::new()).unwrap()
    }

    #[test]
    fn a_proxys_credentials_are_its_basic_authorization() {
        let url: http::Uri = "http://us%40er:p%3Ass@proxy:3128".parse().unwrap();
        let header = proxy_authorization(&url).expect("credentials");
        // base64("us@er:p:ss")
        assert_eq!(header.to_str().unwrap(), "Basic dXNAZXI6cDpzcw==");
        assert!(header.is_sensitive(), "never logged");
        assert!(proxy_authorization(&"http://proxy:3128".parse().unwrap()).is_none());
    }

    #[tokio::test]
    async fn a_refusal_is_the_servers_status_after_one_request() {
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"message":"busy"}"#;
        let (transport, seen) = serve(503, vec![status]).await;
        let result = transport.request::<serde_json::Value>(get("/x")).await;
        let Err(kube::Error::Api(status)) = result else {
            panic!("a refusal: {result:?}");
        };
        assert_eq!((status.code, status.message.as_str()), (503, "busy"));
        // Retries are the engine's (Kopf's `error_backoffs`), not the transport's.
        assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_retry_after_header_is_kept_in_the_status_over_its_body() {
        let (transport, _) =
            serve_with(429, &[("Retry-After", "3")], vec![b"Too Many Requests"]).await;
        let Err(kube::Error::Api(status)) = transport.request::<serde_json::Value>(get("/x")).await
        else {
            panic!("a refusal");
        };
        assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(3));
        let status = br#"{"kind":"Status","code":429,"details":{"retryAfterSeconds":1}}"#;
        let (transport, _) = serve_with(429, &[("Retry-After", "5")], vec![status]).await;
        let Err(kube::Error::Api(status)) = transport.request::<serde_json::Value>(get("/x")).await
        else {
            panic!("a refusal");
        };
        assert_eq!(
            status.details.map(|d| d.retry_after_seconds),
            Some(5),
            "the header wins"
        );
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-27T08:49:37Z")
            .unwrap()
            .to_utc();
        assert_eq!(retry_after_seconds("3", now), Some(3));
        assert_eq!(
            retry_after_seconds(" 1.2 ", now),
            Some(2),
            "never sooner than asked"
        );
        assert_eq!(
            retry_after_seconds("Fri, 27 Nov 2026 08:49:44 GMT", now),
            Some(7)
        );
        assert_eq!(
            retry_after_seconds("Fri, 27 Nov 2026 08:49:30 GMT", now),
            None,
            "past"
        );
        assert_eq!(retry_after_seconds("0", now), None);
        assert_eq!(retry_after_seconds("soon", now), None);
    }

    #[tokio::test]
    async fn a_refusal_that_is_not_a_status_keeps_its_code_and_text() {
        let (transport, _) = serve(404, vec![b"404 page not found\n"]).await;
        let result = transport.request::<serde_json::Value>(get("/x")).await;
        let Err(kube::Error::Api(status)) = result else {
            panic!("a refusal: {result:?}");
        };
        assert_eq!(
            (status.code, status.message.as_str()),
            (404, "404 page not found")
        );
    }

    #[tokio::test]
    async fn watch_events_are_whole_lines_however_the_chunks_cut_them() {
        let chunks: Chunks = vec![
            br#"{"type":"ADDED","object":{"n":1}}"#,
            b"\n\n{\"type\":\"MODIFIED\",",
            br#""object":{"n":2}}"#,
            b"\n{\"type\":\"DELETED\",\"object\":{\"n\":3}}\n{\"type\":\"MODI",
        ];
        let (transport, _) = serve(200, chunks).await;
        let events = transport.request_events(get("/w")).await.unwrap();
        let events: Vec<_> = events.collect().await;
        let seen: Vec<String> = (events.into_iter())
            .map(|event| match event.unwrap() {
                WatchEvent::Added(o) => format!("added {}", o["n"]),
                WatchEvent::Modified(o) => format!("modified {}", o["n"]),
                WatchEvent::Deleted(o) => format!("deleted {}", o["n"]),
                other => format!("{other:?}"),
            })
            .collect();
        // The last line never ended: the stream broke mid-event, to be resumed.
        assert_eq!(seen, ["added 1", "modified 2", "deleted 3"]);
    }

    #[tokio::test]
    async fn a_status_line_in_a_watch_stream_is_the_servers_error() {
        let line =
            b"{\"kind\":\"Status\",\"status\":\"Failure\",\"code\":500,\"message\":\"oops\"}\n";
        let (transport, _) = serve(200, vec![line]).await;
        let events = transport.request_events(get("/w")).await.unwrap();
        let events: Vec<_> = events.collect().await;
        assert!(
            matches!(&events[..], [Err(kube::Error::Api(status))] if status.code == 500),
            "{events:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_are_closed_after_a_while_and_reused_before() {
        let (transport, seen) = serve(200, vec![b"{}"]).await;
        transport.get::<serde_json::Value>("/a").await.unwrap();
        tokio::time::sleep(IDLE_CONNECTION_TIMEOUT / 2).await;
        transport.get::<serde_json::Value>("/b").await.unwrap();
        assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
        assert_eq!(
            seen.open.load(Ordering::SeqCst),
            1,
            "one connection, reused"
        );

        tokio::time::sleep(IDLE_CONNECTION_TIMEOUT * 2).await;
        // The close reaches the server through a real socket: wait for it in real time.
        let real = std::time::Instant::now();
        while seen.open.load(Ordering::SeqCst) > 0 && real.elapsed() < Duration::from_secs(5) {
            tokio::task::yield_now().await;
        }
        assert_eq!(seen.open.load(Ordering::SeqCst), 0, "closed when idle");
    }
}
