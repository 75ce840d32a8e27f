//! The watch-stream of one resource in one namespace (or cluster-wide): list,
//! then watch from the list's resourceVersion with bookmarks; re-watch from the
//! last seen version when a stream ends, stalls or outlives `client_timeout`; re-list
//! on 410 Gone; back off with jitter on errors. Listed objects are marked as such
//! (no event type), so that nothing from before the listing is replayed as new.
//! With `initial_streaming`, the listing is the watch-stream's own initial events
//! (`sendInitialEvents`), until the bookmark that ends them.

use crate::client::backoff;
use crate::client::credentials::Credentials;
use crate::client::listing::ListSplitter;
use crate::client::resources::Resource;
use crate::settings::WatchingSettings;
use crate::util::logging::{ENGINE, WATCHING};
use futures::{AsyncBufReadExt, StreamExt};
use kube::core::WatchEvent;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

const MAX_BACKOFF: f64 = 30.0;

/// How an object came: in a listing, or by a watch event of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Listed (at the start, or again after a 410 or a pause): not news by itself.
    Listed,
    /// Created (or first seen in a watch).
    Added,
    /// Changed.
    Modified,
    /// Deleted.
    Deleted,
    /// Made by the engine, not the server: the object was not listed again after a re-listing
    /// (a 410 Gone, a pause), so it was deleted while nothing watched.
    Vanished,
    /// Made by the engine, not the server: an object it owns has changed, so its reconcile
    /// handlers are due; the body is the last one known (not news of the object itself).
    Woken,
}

impl EventType {
    /// The server's name of the event, as Kopf passes it to handlers (`None` for listings).
    pub fn as_kopf(self) -> Option<&'static str> {
        match self {
            EventType::Listed | EventType::Vanished | EventType::Woken => None,
            EventType::Added => Some("ADDED"),
            EventType::Modified => Some("MODIFIED"),
            EventType::Deleted => Some("DELETED"),
        }
    }
}

/// A raw event as the watcher delivers it.
#[derive(Debug, Clone)]
pub struct RawEvent {
    /// How it came.
    pub event_type: EventType,
    /// The object as it came.
    pub object: Arc<Value>,
}

/// What a watcher feeds: its events, and (for those who care) when a listing is complete.
#[derive(Debug, Clone)]
pub enum Watched {
    /// An object's event.
    Event(RawEvent),
    /// Every object that exists has been sent since the listing began (after the first
    /// listing, and again after each re-listing: a 410 Gone, a pause).
    Synced,
}

/// The items a watcher's receiver takes: plain events, or events and listings' ends.
pub trait Feed: Send + 'static {
    /// A plain event.
    fn event(event: RawEvent) -> Self;
    /// A listing's end, if this kind of receiver wants to know.
    fn synced() -> Option<Self>
    where
        Self: Sized;
    /// An `ERROR` event of the stream (a `Status`), if this kind of receiver wants to know;
    /// the watcher deals with it anyway (a 410 relists, others re-watch).
    fn failed(_status: Value) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }
}

/// Whether a stream is connected, and since when it is (or is not): its requests reach
/// the API server, or fail.
#[derive(Debug)]
pub struct StreamHealth {
    state: std::sync::Mutex<(bool, std::time::Instant)>,
}

impl Default for StreamHealth {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamHealth {
    /// Not connected yet, as of now.
    pub fn new() -> Self {
        Self {
            state: std::sync::Mutex::new((false, std::time::Instant::now())),
        }
    }

    /// Whether the stream is connected now (the time of a change is kept).
    pub fn report(&self, connected: bool) {
        let mut state = self.state.lock().expect("not poisoned");
        if state.0 != connected {
            *state = (connected, std::time::Instant::now());
        }
    }

    /// Connected, or not for less than `grace`.
    pub fn is_healthy(&self, grace: Duration) -> bool {
        let (connected, since) = *self.state.lock().expect("not poisoned");
        connected || since.elapsed() < grace
    }
}

impl Feed for RawEvent {
    fn event(event: RawEvent) -> Self {
        event
    }
    fn synced() -> Option<Self> {
        None
    }
}

impl Feed for Watched {
    fn event(event: RawEvent) -> Self {
        Watched::Event(event)
    }
    fn synced() -> Option<Self> {
        Some(Watched::Synced)
    }
}

/// The bookmark's annotation that ends the initial events of a streaming list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The stream was refused for lack of permissions (RBAC).
#[derive(Debug)]
pub struct Forbidden;

/// Where a watch-stream starts after the listing.
enum Start {
    /// From the listing's version.
    From(String),
    /// From a version given at the start (no listing was made).
    Resumed(String),
    /// With the initial events in the stream itself (no listing was made).
    InitialEvents,
    ReceiverGone,
}

/// Why a watch loop restarts.
enum Restart {
    /// Continue from this version (stream closed, stalled, or failed).
    Rewatch,
    /// The version is too old (410 Gone): list again.
    Relist,
}

/// Lists, then watches one resource (in one namespace or all), for as long as it runs: re-watches, re-lists on 410, backs off on errors.
pub struct Watcher {
    /// The API's credentials.
    pub credentials: Arc<Credentials>,
    /// The resource to watch.
    pub resource: Arc<Resource>,
    /// Its namespace (`None`: cluster-wide).
    pub namespace: Option<String>,
    /// `settings.watching`, with the streams' server-side selectors.
    pub settings: WatchingSettings,
    /// The operator's pause (peering): no stream while it is on.
    pub paused: Option<watch::Receiver<bool>>,
    /// Start by watching from this version (events after it), not by listing.
    pub resume_from: Option<String>,
    /// Told whether the requests reach the server.
    pub health: Option<Arc<StreamHealth>>,
    /// The shard served now (automatic sharding): read whenever the stream (re)starts, in
    /// place of the settings' shard selector. It changes only while the operator is paused.
    pub shards: Option<watch::Receiver<Option<String>>>,
}

impl Watcher {
    /// Stream events into `tx` until the receiver is gone.
    pub async fn run<T: Feed>(self, tx: mpsc::Sender<T>) {
        let _ = self.stream(tx, false).await;
    }

    /// As `run`, for a stream the operator can do without: a refusal (403) ends it.
    pub async fn run_if_permitted<T: Feed>(self, tx: mpsc::Sender<T>) -> Result<(), Forbidden> {
        self.stream(tx, true).await
    }

    async fn stream<T: Feed>(self, tx: mpsc::Sender<T>, optional: bool) -> Result<(), Forbidden> {
        let forbidden = |error: &kube::Error| {
            optional && matches!(error, kube::Error::Api(status) if status.code == 403)
        };
        let mut failures: u32 = 0;
        let mut resume = self.resume_from.clone();
        'relist: loop {
            self.wait_resumed().await;
            let listed = if let Some(version) = resume.take() {
                Ok(Start::Resumed(version))
            } else {
                tokio::select! {
                    listed = self.list(&tx), if !self.settings.initial_streaming => listed,
                    () = std::future::ready(()), if self.settings.initial_streaming => Ok(Start::InitialEvents),
                    () = self.paused_now() => {
                        self.restarted(Restart::Relist, "paused");
                        continue 'relist;
                    }
                }
            };
            // None: the initial events are still to come in the stream itself.
            let mut version = match listed {
                Ok(Start::InitialEvents) => None,
                Ok(Start::Resumed(version)) => Some(version),
                Ok(Start::From(version)) => {
                    failures = 0;
                    self.report(true);
                    if let Some(synced) = T::synced() {
                        if tx.send(synced).await.is_err() {
                            return Ok(());
                        }
                    }
                    Some(version)
                }
                Ok(Start::ReceiverGone) => return Ok(()),
                Err(error) if forbidden(&error) => return Err(Forbidden),
                Err(error) => {
                    self.report(false);
                    self.warn(&format!(
                        "Listing failed: {}",
                        crate::util::errors::chain(&error)
                    ));
                    self.restarted(Restart::Relist, "error");
                    self.backoff(&mut failures, &error).await;
                    continue 'relist;
                }
            };
            loop {
                let watched = tokio::select! {
                    watched = self.watch_within(&tx, &mut version) => watched,
                    () = self.paused_now() => {
                        self.restarted(Restart::Relist, "paused");
                        continue 'relist;
                    }
                };
                match watched {
                    Ok(None) => return Ok(()),
                    Ok(Some(Restart::Relist)) => {
                        self.restarted(Restart::Relist, "gone");
                        continue 'relist;
                    }
                    // Broken before its initial events ended: stream them all again.
                    Ok(Some(Restart::Rewatch)) if version.is_none() => {
                        self.restarted(Restart::Relist, "initial-events-broken");
                        continue 'relist;
                    }
                    Ok(Some(Restart::Rewatch)) => {
                        self.restarted(Restart::Rewatch, "closed");
                        failures = 0;
                        tokio::time::sleep(Duration::from_secs_f64(
                            self.settings.reconnect_backoff,
                        ))
                        .await;
                    }
                    Err(kube::Error::Api(e)) if e.code == 410 => {
                        self.restarted(Restart::Relist, "gone");
                        continue 'relist;
                    }
                    Err(error) if forbidden(&error) => return Err(Forbidden),
                    Err(error) => {
                        self.report(false);
                        self.warn(&format!(
                            "Watching failed: {}",
                            crate::util::errors::chain(&error)
                        ));
                        self.restarted(Restart::Rewatch, "error");
                        self.backoff(&mut failures, &error).await;
                    }
                }
            }
        }
    }

    /// While the operator is paused, wait; a stream starts afresh (listing) after a pause.
    async fn wait_resumed(&self) {
        let Some(paused) = &self.paused else { return };
        let mut paused = paused.clone();
        if !*paused.borrow_and_update() {
            return;
        }
        let place = match &self.namespace {
            Some(namespace) => format!("in '{namespace}'"),
            None => "cluster-wide".to_owned(),
        };
        let what = format!("the watch-stream for {} {place}", self.resource.name());
        tracing::debug!(target: WATCHING, "Pausing {what}.");
        let _ = paused.wait_for(|paused| !*paused).await;
        tracing::debug!(target: WATCHING, "Resuming {what}.");
    }

    /// Resolves when the operator gets paused (never, if it cannot be).
    async fn paused_now(&self) {
        if let Some(paused) = &self.paused {
            if paused.clone().wait_for(|paused| *paused).await.is_ok() {
                return;
            }
        }
        std::future::pending().await
    }

    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} in {ns:?}", self.resource.name()),
            None => format!("{} cluster-wide", self.resource.name()),
        }
    }

    /// Counted in the metrics (if enabled), by the cause's label.
    fn restarted(&self, how: Restart, cause: &str) {
        if let Some(metrics) = crate::metrics::get() {
            match how {
                Restart::Relist => metrics.relist(&self.resource.name(), cause),
                Restart::Rewatch => metrics.watch_restart(&self.resource.name(), cause),
            }
        }
    }

    fn report(&self, connected: bool) {
        if let Some(health) = &self.health {
            health.report(connected);
        }
    }

    fn warn(&self, message: &str) {
        tracing::warn!(target: ENGINE, "{message} ({}); will retry.", self.describe());
    }

    /// Exponential backoff with full jitter, capped; never sooner than a throttling server
    /// asked (its Retry-After), or exactly then if `enforce_retry_after`.
    async fn backoff(&self, failures: &mut u32, error: &kube::Error) {
        *failures = failures.saturating_add(1);
        let pause = backoff::doubling(*failures, MAX_BACKOFF);
        let pause = backoff::honouring(pause, error, self.credentials.enforces_retry_after());
        tokio::time::sleep(Duration::from_secs_f64(pause)).await;
    }

    fn query(&self, extra: &[(&str, String)]) -> String {
        let mut pairs: Vec<(&str, String)> = extra.to_vec();
        let selectors = &self.settings.selectors;
        if let Some(labels) = &selectors.label {
            pairs.push(("labelSelector", labels.clone()));
        }
        if let Some(fields) = &selectors.field {
            pairs.push(("fieldSelector", fields.clone()));
        }
        let shard = match &self.shards {
            Some(shards) => shards.borrow().clone(),
            None => selectors.shard.clone(),
        };
        if let Some(shard) = shard {
            pairs.push(("shardSelector", shard));
        }
        let encoded: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect();
        encoded.join("&")
    }

    /// A listed object as an event; list items come without their kind: restore it, as
    /// single objects have it.
    fn listed(&self, mut item: Value) -> RawEvent {
        if let Some(fields) = item.as_object_mut() {
            fields
                .entry("apiVersion")
                .or_insert_with(|| self.resource.api_version().into());
            fields
                .entry("kind")
                .or_insert_with(|| self.resource.kind.clone().into());
        }
        RawEvent {
            event_type: EventType::Listed,
            object: Arc::new(item),
        }
    }

    /// List every object (paginated) and pass each on as a listing event; the list's version.
    async fn list<T: Feed>(&self, tx: &mpsc::Sender<T>) -> Result<Start, kube::Error> {
        let url = self.resource.url(self.namespace.as_deref(), None, None);
        let mut token: Option<String> = None;
        loop {
            let mut params = Vec::new();
            if let Some(limit) = self.settings.chunk_size {
                params.push(("limit", limit.to_string()));
            }
            if let Some(token) = &token {
                params.push(("continue", token.clone()));
            }
            // Read as it arrives, item by item: a page of 50,000 objects is large, and the
            // rest of it waits in the stream (not in memory) while the receiver is busy.
            let url = format!("{url}?{}", self.query(&params));
            let mut reader = self.credentials.get_stream(&url).await?;
            let mut splitter = ListSplitter::new();
            let mut items = Vec::new();
            loop {
                let read = reader.fill_buf();
                let chunk = match self.credentials.read_timeout() {
                    Some(timeout) => (tokio::time::timeout(timeout, read).await)
                        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
                    None => read.await,
                }
                .map_err(kube::Error::ReadEvents)?;
                if chunk.is_empty() {
                    break;
                }
                let length = chunk.len();
                splitter.feed(chunk, &mut |item| items.push(item))?;
                reader.consume_unpin(length);
                for item in items.drain(..) {
                    if tx.send(T::event(self.listed(item))).await.is_err() {
                        return Ok(Start::ReceiverGone);
                    }
                }
            }
            let page = splitter.finish()?;
            token = crate::util::dicts::meta(&page, "continue")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                let version = crate::util::dicts::meta(&page, "resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                return Ok(Start::From(version));
            }
        }
    }

    /// One watch request, ended by `client_timeout` if set (then re-opened from where it was).
    async fn watch_within<T: Feed>(
        &self,
        tx: &mpsc::Sender<T>,
        version: &mut Option<String>,
    ) -> Result<Option<Restart>, kube::Error> {
        let Some(timeout) = self.settings.client_timeout else {
            return self.watch(tx, version).await;
        };
        let watching = self.watch(tx, version);
        match tokio::time::timeout(Duration::from_secs_f64(timeout), watching).await {
            Ok(watched) => watched,
            Err(_elapsed) => {
                tracing::debug!(target: WATCHING, "Watch-stream for {} reached the client timeout, reconnecting.", self.describe());
                Ok(Some(Restart::Rewatch))
            }
        }
    }

    /// One watch request, until it ends, stalls, or the version expires. Without a version,
    /// it starts with the initial events (a streaming list) and passes them on as listed.
    async fn watch<T: Feed>(
        &self,
        tx: &mpsc::Sender<T>,
        version: &mut Option<String>,
    ) -> Result<Option<Restart>, kube::Error> {
        let url = self.resource.url(self.namespace.as_deref(), None, None);
        let mut params = vec![
            ("watch", "true".to_owned()),
            ("allowWatchBookmarks", "true".to_owned()),
        ];
        match version {
            Some(version) => params.push(("resourceVersion", version.clone())),
            None => {
                params.push(("sendInitialEvents", "true".to_owned()));
                params.push(("resourceVersionMatch", "NotOlderThan".to_owned()));
            }
        }
        if let Some(timeout) = self.settings.server_timeout {
            params.push(("timeoutSeconds", (timeout as u64).to_string()));
        }
        let stream = self
            .credentials
            .watch(&format!("{url}?{}", self.query(&params)))
            .await?;
        self.report(true);
        let mut stream = std::pin::pin!(stream);
        let inactivity = Duration::from_secs_f64(self.settings.inactivity_timeout);
        loop {
            let next = match tokio::time::timeout(inactivity, stream.next()).await {
                Err(_elapsed) => return Ok(Some(Restart::Rewatch)), // silently stalled
                Ok(None) => return Ok(Some(Restart::Rewatch)),      // closed by the server
                Ok(Some(next)) => next?,
            };
            let (event_type, object) = match next {
                WatchEvent::Added(o) if version.is_none() => (EventType::Listed, o),
                WatchEvent::Added(o) => (EventType::Added, o),
                WatchEvent::Modified(o) => (EventType::Modified, o),
                WatchEvent::Deleted(o) => (EventType::Deleted, o),
                WatchEvent::Bookmark(bookmark) => {
                    let ends_initial = (bookmark.metadata.annotations.get(INITIAL_EVENTS_END))
                        .is_some_and(|value| value == "true");
                    if version.is_none() && !ends_initial {
                        continue; // the initial events' versions are not a place to resume from
                    }
                    if version.is_none() {
                        if let Some(synced) = T::synced() {
                            if tx.send(synced).await.is_err() {
                                return Ok(None);
                            }
                        }
                    }
                    *version = Some(bookmark.metadata.resource_version);
                    continue;
                }
                WatchEvent::Error(e) => {
                    if let Some(failed) = T::failed(status_of(&e)) {
                        if tx.send(failed).await.is_err() {
                            return Ok(None);
                        }
                    }
                    if e.code == 410 {
                        return Ok(Some(Restart::Relist));
                    }
                    return Err(kube::Error::Api(e));
                }
            };
            if let Some(v) =
                crate::util::dicts::meta(&object, "resourceVersion").and_then(Value::as_str)
            {
                if version.is_some() {
                    *version = Some(v.to_owned());
                }
            }
            let event = RawEvent {
                event_type,
                object: Arc::new(object),
            };
            if tx.send(T::event(event)).await.is_err() {
                return Ok(None);
            }
        }
    }
}

/// An `ERROR` event's object as the server sent it: a `Status`.
fn status_of(error: &kube::core::Status) -> Value {
    let mut status = serde_json::to_value(error).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(fields) = status.as_object_mut() {
        fields.insert("kind".into(), "Status".into());
        fields.insert("apiVersion".into(), "v1".into());
        fields
            .entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
    }
    status
}

/// All but RFC 3986's unreserved characters (letters, digits, `-_.~`): what a query parameter's
/// value or a path's segment may carry as it is.
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A query parameter's value (or a path's segment), percent-encoded.
pub fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, RESERVED).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn url_encoding() {
        assert_eq!(super::urlencode("a=b,c!=d"), "a%3Db%2Cc%21%3Dd");
        assert_eq!(
            super::urlencode("in(x-1_2.3~) é"),
            "in%28x-1_2.3~%29%20%C3%A9"
        );
    }
}
