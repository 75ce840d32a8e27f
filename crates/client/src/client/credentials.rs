//! The API client that requests go through, and its renewal: when the server answers 401
//! (an expired token, a rotated certificate), or the credentials have passed their
//! expiration, the login handlers are asked again — once, however many requests
//! failed at the same time — and a new client replaces the old one for every request
//! from then on. Requests are retried as Kopf retries them (`error_backoffs`), each
//! attempt within `request_timeout`.

use crate::client::backoff;
use crate::client::connection::{self, ConnectionError, ConnectionInfo};
use crate::client::transport::Transport;
use crate::settings::{NetworkingSettings, Pauses, WatchingSettings};
use crate::util::logging::ENGINE;
use futures::future::BoxFuture;
use opentelemetry::trace::{SpanKind, TraceContextExt};
use opentelemetry::KeyValue;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// One-shot requests in flight at once (watches are not counted). Each needs a TLS
/// connection of its own (HTTP/1.1), kept in the client's pool afterwards (until idle
/// for a while, see `transport`): unbounded, a burst of a thousand objects left a
/// thousand connections and their memory behind, while a few dozen already saturate an
/// API server (the figure: docs/benchmarks.md, "Figures behind the code").
const MAX_CONCURRENT_REQUESTS: usize = 32;

/// Runs the login handlers again; their best connection, or why there is none.
pub type Login =
    Arc<dyn Fn() -> BoxFuture<'static, Result<ConnectionInfo, LoginError>> + Send + Sync>;

/// The login handlers gave no usable connection (their own account of why).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoginError(pub String);

/// Why the credentials could not be renewed after a 401.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RenewError {
    #[error("the credentials cannot be renewed: there are no login handlers")]
    NotRenewable,
    #[error("re-login failed: {0}")]
    Login(#[from] LoginError),
    #[error(transparent)]
    Connection(#[from] ConnectionError),
}

/// "/9" after an attempt's number when the attempts are counted (Kopf's "#2/9"), else nothing.
struct OfAttempts(Option<usize>);

impl std::fmt::Display for OfAttempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(count) => write!(f, "/{count}"),
            None => Ok(()),
        }
    }
}

/// A request that took longer than `settings.networking.request_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no response within {0} s (settings.networking.request_timeout)")]
pub(crate) struct TimedOut(pub f64);

/// How requests are made (`settings.networking`, and the watches' connect timeout).
#[derive(Debug, Clone, Default)]
pub struct Network {
    /// Each one-shot attempt's deadline, from connecting to the whole response.
    pub request_timeout: Option<f64>,
    /// Connecting's deadline (`settings.networking.connect_timeout`).
    pub connect_timeout: Option<f64>,
    /// Watches connect with their own timeout (Kopf: `settings.watching.connect_timeout`).
    pub watch_connect_timeout: Option<f64>,
    /// Delays before the retries of a failed request (none: fail at once).
    pub error_backoffs: Pauses,
    /// A server's `Retry-After` replaces the backoff even when shorter.
    pub enforce_retry_after: bool,
}

impl Network {
    /// As the settings say.
    pub fn of(settings: &NetworkingSettings, watching: &WatchingSettings) -> Self {
        Self {
            request_timeout: settings.request_timeout,
            connect_timeout: settings.connect_timeout,
            watch_connect_timeout: (watching.connect_timeout)
                .or(settings.connect_timeout)
                .or(settings.request_timeout),
            error_backoffs: settings.error_backoffs.clone(),
            enforce_retry_after: settings.enforce_retry_after,
        }
    }
}

/// The clients of one login: one-shot requests and watches connect with different timeouts.
#[derive(Clone)]
struct Clients {
    generation: u64,
    requests: Transport,
    watches: Transport,
    /// Seconds since the epoch.
    expiration: Option<f64>,
    /// Where Events about cluster-scoped objects go.
    default_namespace: Option<String>,
}

impl Clients {
    async fn connect(
        generation: u64,
        info: &ConnectionInfo,
        network: &Network,
    ) -> Result<Self, ConnectionError> {
        let requests = connection::client(info, network.connect_timeout)?;
        let watches = if network.watch_connect_timeout == network.connect_timeout {
            requests.clone()
        } else {
            connection::client(info, network.watch_connect_timeout)?
        };
        Ok(Self {
            generation,
            requests,
            watches,
            expiration: info.expiration,
            default_namespace: info.default_namespace.clone(),
        })
    }

    /// One client for everything, without expiration.
    fn fixed(client: Transport) -> Self {
        Self {
            generation: 0,
            requests: client.clone(),
            watches: client,
            expiration: None,
            default_namespace: None,
        }
    }

    fn expired(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.expiration.is_some_and(|expiration| now >= expiration)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Channel {
    Requests,
    Watches,
}

/// One of the concurrent requests' slots, held while it lives.
pub struct Slot<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
}

/// The API's clients from the login handlers' credentials: renewed on 401 (by calling the logins again), with the requests' slots and retries.
pub struct Credentials {
    current: RwLock<Clients>,
    renewing: tokio::sync::Mutex<()>,
    requests: tokio::sync::Semaphore,
    login: Option<Login>,
    network: Network,
}

pub(crate) fn is_unauthorized(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 401)
}

/// What Kopf retries: the server's errors, throttling, refusals during upgrades (403),
/// connection failures and timeouts; not the client's own mistakes (other 4xx).
fn is_retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 403 | 429 | 500..),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// The API server's 429 while its cache of a resource fills (after a CRD changes, or while an
/// object of it fails its conversion): a known, passing state, not the request's failure.
fn is_cache_warming(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status)
        if status.code == 429 && status.message.contains("storage is (re)initializing"))
}

impl Credentials {
    /// Log in with the login handlers' connection; `login` runs them again when needed.
    pub async fn connect(
        info: &ConnectionInfo,
        login: Option<Login>,
        network: Network,
    ) -> Result<Arc<Self>, ConnectionError> {
        let clients = Clients::connect(0, info, &network).await?;
        Ok(Arc::new(Self::with(clients, login, network)))
    }

    /// A fixed client that is never renewed, and requests that are never retried (tests, tools).
    pub fn fixed(client: Transport) -> Arc<Self> {
        Arc::new(Self::with(Clients::fixed(client), None, Network::default()))
    }

    fn with(clients: Clients, login: Option<Login>, network: Network) -> Self {
        Self {
            current: RwLock::new(clients),
            renewing: tokio::sync::Mutex::new(()),
            requests: tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS),
            login,
            network,
        }
    }

    fn clients(&self) -> Clients {
        self.current.read().expect("not poisoned").clone()
    }

    /// `settings.networking.enforce_retry_after`: a server's Retry-After even if shorter.
    pub(crate) fn enforces_retry_after(&self) -> bool {
        self.network.enforce_retry_after
    }

    /// The login's namespace (a kubeconfig context's, or the service account's), if any.
    pub(crate) fn default_namespace(&self) -> Option<String> {
        (self.current.read().expect("not poisoned").default_namespace).clone()
    }

    /// Log in again, unless another request has already done so since `generation` failed.
    async fn renew(&self, generation: u64) -> Result<(), RenewError> {
        let _one_at_a_time = self.renewing.lock().await;
        if self.clients().generation != generation {
            return Ok(());
        }
        let login = self.login.as_ref().ok_or(RenewError::NotRenewable)?;
        let info = login().await?;
        let clients = Clients::connect(generation + 1, &info, &self.network).await?;
        *self.current.write().expect("not poisoned") = clients;
        Ok(())
    }

    /// A request as Kopf makes it: retried with the backoffs (`settings.networking.error_backoffs`
    /// unless given) on what is worth retrying, each attempt with fresh credentials if needed.
    pub async fn call<T, F, Fut>(&self, what: &str, request: F) -> Result<T, kube::Error>
    where
        F: Fn(Transport) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retried(Channel::Requests, what, None, request).await
    }

    async fn retried<T, F, Fut>(
        &self,
        channel: Channel,
        what: &str,
        backoffs: Option<&Pauses>,
        request: F,
    ) -> Result<T, kube::Error>
    where
        F: Fn(Transport) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let backoffs = backoffs.unwrap_or(&self.network.error_backoffs);
        // As Kopf numbers the attempts: "#2/9" of a list, "#2" of an iterable without a length.
        let count = OfAttempts(backoffs.attempts());
        // Taken one at a time, when a retry needs one: an endless iterable is never read ahead.
        let mut pauses = backoffs.run();
        // Within an event, a call or a review: a span of it (the others are not traced).
        let span = (crate::traces::get())
            .filter(|_| crate::traces::in_span())
            .map(|tracer| request_span(&tracer, what));
        let span = span.as_ref();
        for attempt in 1.. {
            if attempt > 1 {
                tracing::debug!(target: ENGINE, "Request attempt #{attempt}{count}: {what}");
            }
            let started = std::time::Instant::now();
            let result = self.authorised(channel, &request).await;
            if let Some(metrics) = crate::metrics::get() {
                let verb = match what.contains("watch=true") {
                    true => "WATCH",
                    false => what.split(' ').next().unwrap_or_default(),
                };
                metrics.api_request(verb, &status_code(&result), started.elapsed());
            }
            let error = match result {
                Ok(result) => {
                    if attempt > 1 {
                        tracing::debug!(target: ENGINE, "Request attempt #{attempt}{count} succeeded: {what}");
                    }
                    end_request_span(span, attempt, None);
                    return Ok(result);
                }
                Err(error) if !is_retryable(&error) => {
                    end_request_span(span, attempt, Some(&error));
                    return Err(error);
                }
                Err(error) => error,
            };
            let reason = crate::util::errors::chain(&error);
            let Some(backoff) = pauses.next() else {
                tracing::error!(target: ENGINE, "Request attempt #{attempt}{count} failed; escalating: {what} -> {reason}");
                end_request_span(span, attempt, Some(&error));
                return Err(error);
            };
            let asked = backoff::honouring(backoff, &error, self.network.enforce_retry_after);
            if let Some(cx) = span {
                let mut attributes = vec![
                    KeyValue::new("kopf.request.attempt", attempt as i64),
                    KeyValue::new("kopf.request.backoff_s", asked),
                    KeyValue::new("error.type", error_code(&error)),
                ];
                if let Some(seconds) = backoff::retry_after(&error) {
                    attributes.push(KeyValue::new("kopf.request.retry_after_s", seconds));
                }
                cx.span().add_event("retry", attributes);
            }
            if asked != backoff {
                tracing::debug!(target: ENGINE, "Overriding the backoff {backoff}s with the retry-after {asked}s from the server: {what}");
            }
            let backoff = asked;
            if is_cache_warming(&error) {
                // Kopf logs it at ERROR like any failure; it is the server warming up.
                tracing::info!(target: ENGINE, "Request attempt #{attempt}{count} failed; will retry: {what} -> {reason}");
            } else {
                tracing::error!(target: ENGINE, "Request attempt #{attempt}{count} failed; will retry: {what} -> {reason}");
            }
            tokio::time::sleep(Duration::from_secs_f64(backoff)).await;
        }
        unreachable!("attempts are counted without end")
    }

    /// One attempt: with renewed credentials if they have expired or are refused (401, once).
    async fn authorised<T, F, Fut>(&self, channel: Channel, request: &F) -> Result<T, kube::Error>
    where
        F: Fn(Transport) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut clients = self.clients();
        if clients.expired() && self.login.is_some() {
            // As Kopf: expired credentials are not used; a failed renewal is the 401's to report.
            if self.renew(clients.generation).await.is_ok() {
                clients = self.clients();
            }
        }
        let client = |clients: Clients| match channel {
            Channel::Requests => clients.requests,
            Channel::Watches => clients.watches,
        };
        let generation = clients.generation;
        match self.timed(channel, request(client(clients))).await {
            Err(error) if is_unauthorized(&error) && self.login.is_some() => {
                if self.renew(generation).await.is_err() {
                    return Err(error);
                }
                self.timed(channel, request(client(self.clients()))).await
            }
            other => other,
        }
    }

    /// One-shot requests end by `request_timeout`; watches by their own timeouts (the watcher's).
    async fn timed<T>(
        &self,
        channel: Channel,
        attempt: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        match (channel, self.network.request_timeout) {
            (Channel::Requests, Some(timeout)) => {
                match tokio::time::timeout(Duration::from_secs_f64(timeout), attempt).await {
                    Ok(result) => result,
                    Err(_elapsed) => Err(kube::Error::Service(Box::new(TimedOut(timeout)))),
                }
            }
            _ => attempt.await,
        }
    }
}

/// An API request's span: its method and path, as OpenTelemetry's HTTP conventions name them.
fn request_span(tracer: &crate::traces::Tracing, what: &str) -> opentelemetry::Context {
    let (method, target) = what.split_once(' ').unwrap_or(("", what));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut attributes = vec![
        KeyValue::new("http.request.method", method.to_owned()),
        KeyValue::new("url.path", path.to_owned()),
    ];
    if !query.is_empty() {
        attributes.push(KeyValue::new("url.query", query.to_owned()));
    }
    tracer.start(method.to_owned(), SpanKind::Client, attributes, None)
}

/// The request's span ended after `attempts`: with the server's status code and the error, if any.
fn end_request_span(
    span: Option<&opentelemetry::Context>,
    attempts: usize,
    error: Option<&kube::Error>,
) {
    let Some(cx) = span else { return };
    let span = cx.span();
    if attempts > 1 {
        span.set_attribute(KeyValue::new(
            "http.request.resend_count",
            attempts as i64 - 1,
        ));
    }
    if let Some(kube::Error::Api(status)) = error {
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.code),
        ));
    }
    let text = error.map(|error| crate::util::errors::chain(error));
    let kind = error.map(error_code);
    crate::traces::end(cx, kind.as_deref().zip(text.as_deref()));
}

/// The metrics' `code` label: a success's exact code is not kept by the client ("2xx").
fn status_code<T>(result: &Result<T, kube::Error>) -> String {
    match result {
        Ok(_) => "2xx".into(),
        Err(error) => error_code(error),
    }
}

/// A failed request's code: the server's status code, `timeout`, or `error` (no response).
fn error_code(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.code.to_string(),
        kube::Error::Service(error) if error.is::<TimedOut>() => "timeout".into(),
        _ => "error".into(),
    }
}

fn request(
    method: http::Method,
    url: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    let mut builder = http::Request::builder().method(method).uri(url);
    if let Some(content_type) = content_type {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    builder.body(body).map_err(kube::Error::HttpError)
}

fn json_bytes(value: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("JSON values serialise")
}

/// The requests the engine makes, each retried and renewing the credentials as `call` does.
impl Credentials {
    /// A GET of a JSON document, retried as any request.
    pub async fn get(&self, url: &str) -> Result<serde_json::Value, kube::Error> {
        let _slot = self.requests.acquire().await.expect("never closed");
        // Boxed (see `send`).
        Box::pin(self.call(&format!("GET {url}"), |client| async move {
            client
                .request(request(http::Method::GET, url, None, Vec::new())?)
                .await
        }))
        .await
    }

    /// A GET of one object: `None` if it is absent (404).
    pub async fn get_if_present(
        &self,
        url: &str,
    ) -> Result<Option<serde_json::Value>, kube::Error> {
        match self.get(url).await {
            Ok(object) => Ok(Some(object)),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A GET whose body is read as it arrives (a large listing); opening it is what is
    /// retried. Each read must bring bytes within `read_timeout()`.
    pub(crate) async fn get_stream(
        &self,
        url: &str,
    ) -> Result<impl futures::AsyncBufRead + Unpin, kube::Error> {
        let _slot = self.requests.acquire().await.expect("never closed");
        self.call(&format!("GET {url}"), |client| async move {
            let request = request(http::Method::GET, url, None, Vec::new())?;
            client.request_stream(request).await.map(Box::pin)
        })
        .await
    }

    /// How long a read may wait for the server (`settings.networking.request_timeout`).
    pub(crate) fn read_timeout(&self) -> Option<Duration> {
        self.network.request_timeout.map(Duration::from_secs_f64)
    }

    /// A watch request: the stream of its events (opening it is what can be refused or retried).
    pub async fn watch(
        &self,
        url: &str,
    ) -> Result<
        impl futures::Stream<Item = Result<kube::core::WatchEvent<serde_json::Value>, kube::Error>>,
        kube::Error,
    > {
        let what = format!("GET {url}");
        self.retried(Channel::Watches, &what, None, |client| async move {
            client
                .request_events(request(http::Method::GET, url, None, Vec::new())?)
                .await
        })
        .await
    }

    /// Merge-patch an object; the response is read as `T` (a whole `Value`, or only the
    /// fields the caller needs: parsing whole objects for every patch is costly).
    pub async fn merge_patch<T: DeserializeOwned>(
        &self,
        url: &str,
        patch: &serde_json::Value,
    ) -> Result<T, kube::Error> {
        let json = "application/merge-patch+json";
        self.send(None, http::Method::PATCH, url, json, patch, None)
            .await
    }

    /// A request slot, for a caller that makes its requests in it (`merge_patch_in`): it
    /// waits for the slot before it makes the requests' state.
    pub async fn slot(&self) -> Slot<'_> {
        let _permit = self.requests.acquire().await.expect("never closed");
        Slot { _permit }
    }

    /// `merge_patch` in a slot already taken.
    pub(crate) async fn merge_patch_in<T: DeserializeOwned>(
        &self,
        slot: &Slot<'_>,
        url: &str,
        patch: &serde_json::Value,
    ) -> Result<T, kube::Error> {
        let json = "application/merge-patch+json";
        self.send(Some(slot), http::Method::PATCH, url, json, patch, None)
            .await
    }

    /// Replace an object; its `metadata.resourceVersion` makes it a compare-and-swap.
    pub async fn put(
        &self,
        url: &str,
        object: &serde_json::Value,
    ) -> Result<serde_json::Value, kube::Error> {
        self.send(
            None,
            http::Method::PUT,
            url,
            "application/json",
            object,
            None,
        )
        .await
    }

    /// A POST of a JSON document, retried as any request.
    pub async fn post(
        &self,
        url: &str,
        object: &serde_json::Value,
    ) -> Result<serde_json::Value, kube::Error> {
        self.post_with(url, object, None).await
    }

    /// Delete an object with these `DeleteOptions` (e.g. a precondition on its version).
    pub async fn delete(
        &self,
        url: &str,
        options: &serde_json::Value,
    ) -> Result<serde_json::Value, kube::Error> {
        self.send(
            None,
            http::Method::DELETE,
            url,
            "application/json",
            options,
            None,
        )
        .await
    }

    /// Create an object; `backoffs`, if given, replace `error_backoffs` for its retries.
    pub(crate) async fn post_with(
        &self,
        url: &str,
        object: &serde_json::Value,
        backoffs: Option<&Pauses>,
    ) -> Result<serde_json::Value, kube::Error> {
        let json = "application/json";
        self.send(None, http::Method::POST, url, json, object, backoffs)
            .await
    }

    /// One request, in the caller's slot or in one taken now.
    async fn send<T: DeserializeOwned>(
        &self,
        slot: Option<&Slot<'_>>,
        method: http::Method,
        url: &str,
        content_type: &str,
        payload: &serde_json::Value,
        backoffs: Option<&Pauses>,
    ) -> Result<T, kube::Error> {
        let _own_slot = match slot {
            Some(_) => None,
            None => Some(self.slot().await),
        };
        let what = format!("{method} {url}");
        let body = json_bytes(payload);
        // Boxed once a slot is taken: a request in flight is a few KiB of state, and in a
        // burst hundreds of callers wait for a slot (each of their futures as big as the
        // biggest state they may reach, were it inline).
        Box::pin(self.retried(Channel::Requests, &what, backoffs, |client| {
            let (method, body) = (method.clone(), body.clone());
            async move {
                client
                    .request(request(method, url, Some(content_type), body)?)
                    .await
            }
        }))
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::time::Instant;

    fn credentials(backoffs: &[f64], enforce_retry_after: bool) -> Credentials {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let client = Transport::plain(&config).expect("a client");
        let network = Network {
            error_backoffs: Pauses::listed(backoffs),
            enforce_retry_after,
            ..Network::default()
        };
        Credentials::with(Clients::fixed(client), None, network)
    }

    fn status(code: u16, retry_after: Option<u32>) -> kube::Error {
        let mut status = kube::core::Status::failure("refused", "Refused").with_code(code);
        if let Some(seconds) = retry_after {
            let details = serde_json::json!({"retryAfterSeconds": seconds});
            status.details = Some(serde_json::from_value(details).expect("details"));
        }
        kube::Error::Api(Box::new(status))
    }

    /// Answers `errors` in turn, then succeeds; how many attempts, and how long it took.
    async fn attempts(credentials: &Credentials, errors: Vec<kube::Error>) -> (bool, usize, f64) {
        let errors = std::sync::Mutex::new(errors.into_iter());
        let count = AtomicUsize::new(0);
        let started = Instant::now();
        let result = credentials
            .call("GET /test", |_| {
                count.fetch_add(1, Ordering::SeqCst);
                let next = errors.lock().unwrap().next();
                async move { next.map_or(Ok(()), Err) }
            })
            .await;
        let elapsed = started.elapsed().as_secs_f64();
        (result.is_ok(), count.load(Ordering::SeqCst), elapsed)
    }

    #[tokio::test(start_paused = true)]
    async fn what_kopf_retries_is_retried_with_the_backoffs() {
        let credentials = credentials(&[1.0, 2.0], false);
        let (ok, count, elapsed) =
            attempts(&credentials, vec![status(500, None), status(403, None)]).await;
        assert!(ok);
        assert_eq!((count, elapsed.round()), (3, 3.0));
        let (ok, count, _) = attempts(&credentials, vec![status(404, None)]).await;
        assert!(!ok && count == 1, "a client's mistake is not retried");
        let errors = (0..3).map(|_| status(503, None)).collect();
        let (ok, count, _) = attempts(&credentials, errors).await;
        assert!(!ok && count == 3, "escalated after the last backoff");
    }

    #[tokio::test(start_paused = true)]
    async fn the_servers_retry_after_wins_when_longer_or_enforced() {
        let relaxed = credentials(&[10.0], false);
        let (_, _, elapsed) = attempts(&relaxed, vec![status(429, Some(30))]).await;
        assert_eq!(elapsed.round(), 30.0);
        let (_, _, elapsed) = attempts(&relaxed, vec![status(429, Some(3))]).await;
        assert_eq!(elapsed.round(), 10.0);
        let enforced = credentials(&[10.0], true);
        let (_, _, elapsed) = attempts(&enforced, vec![status(429, Some(3))]).await;
        assert_eq!(elapsed.round(), 3.0);
        let (_, _, elapsed) = attempts(&relaxed, vec![status(503, Some(30))]).await;
        assert_eq!(elapsed.round(), 30.0, "an unavailable server's too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_warming_cache_is_retried_quietly_and_other_429s_loudly() {
        // (what is logged is decided by `is_cache_warming`: the log lines themselves are not
        // captured here, as tracing's callsites are shared with the tests running beside)
        let credentials = credentials(&[1.0], false);
        let mut warming = status(429, None);
        if let kube::Error::Api(status) = &mut warming {
            status.message = "storage is (re)initializing".into();
        }
        assert!(is_cache_warming(&warming), "logged at INFO");
        assert!(!is_cache_warming(&status(429, None)), "logged at ERROR");
        assert!(!is_cache_warming(&status(503, None)), "logged at ERROR");
        let (ok, count, _) = attempts(&credentials, vec![warming]).await;
        assert!(ok && count == 2, "retried as any 429");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_request_ends_by_the_request_timeout() {
        let mut credentials = credentials(&[], false);
        credentials.network.request_timeout = Some(2.0);
        let started = Instant::now();
        let result: Result<(), kube::Error> = credentials
            .call("GET /slow", |_| std::future::pending())
            .await;
        let error = result.expect_err("timed out");
        assert!(
            error.to_string().contains("no response within 2 s"),
            "{error}"
        );
        assert_eq!(started.elapsed().as_secs_f64().round(), 2.0);
    }
}
