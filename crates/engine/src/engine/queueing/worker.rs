//! An object's worker: it takes the events from its inbox, runs the cycles (the handlers,
//! their patches, the delays they ask for), and ends when idle.

use crate::client::applying;
use crate::client::backoff::ForEver;
use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{Cycle, Memory, ResourceContext};
use crate::engine::daemons::ObjectDaemons;
use crate::engine::{indexing, processing, reconciling, relating};
use crate::ha::pausing::Busy;
use crate::object_log;
use crate::state::bodies::CompactBody;
use crate::state::patches::{FinalizerOp, Patch};
use crate::state::progression::format_time;
use crate::state::StorageError;
use crate::util::logging::ObjectRef;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Level;

use super::inbox::{Inbox, Queued, Receiving};
use super::{Dispatcher, Finished, Throttling};

/// Sleeps longer than this are cut, to re-check the object now and then.
const WAITING_KEEPALIVE: f64 = 600.0;

/// Why a cycle could not be completed: it is retried after a throttling delay.
#[derive(Debug, thiserror::Error)]
enum CycleError {
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("{}", crate::util::errors::chain(.0))]
    Api(kube::Error),
}

/// How a sleep for the handlers' delays ended.
enum Slept {
    Fully,
    /// New events came: they are in `latest` now.
    Interrupted,
    /// A daemon of the object has exited: a stopping may be complete.
    DaemonExited,
}

/// Our own patch, until its version comes back in the stream or its deadline passes:
/// until then, the object's state in the stream is older than what we know.
struct OwnChange {
    version: String,
    deadline: Instant,
}

/// What a cycle's write has left.
enum Written {
    /// The object is gone (the write found it deleted).
    Gone,
    /// Written or nothing to write; the cycle's event given back if nothing was written.
    Done(Option<RawEvent>),
}

/// What a cycle leaves the worker to do.
enum Flow {
    Next,
    /// The object is gone: nothing more will come.
    Exit,
}

/// An object's latest state: as the watcher delivered it, or as its compact text while our
/// own patch of it is on its way (its event is expected to replace it; a burst's cycles
/// waiting for their request slots kept a tree each, most of the burst's memory).
pub(super) enum Latest {
    Tree(RawEvent),
    Text(EventType, CompactBody),
}

impl Latest {
    pub(super) fn event(&self) -> RawEvent {
        match self {
            Latest::Tree(event) => event.clone(),
            Latest::Text(event_type, body) => RawEvent {
                event_type: *event_type,
                object: Arc::new(body.value()),
            },
        }
    }
}

/// One object's worker: its events in order, one processing cycle at a time.
pub(super) struct Worker {
    dispatcher: Arc<Dispatcher>,
    key: String,
    inbox: Receiving,
    memory: Memory,
    /// The object is gone: nothing of it is to be remembered.
    gone: bool,
    /// The latest state, while it is to be processed (now, or again after a delay).
    latest: Option<Latest>,
    /// What the `on.event` handlers want applied, with the next cycle's patch.
    watching_patch: Patch,
    own_change: Option<OwnChange>,
    /// After unexpected errors in a row: the configured delays, taken in turn while they
    /// repeat (the last one again after they end); none after a success.
    pub(super) throttling: Throttling,
    /// Go on at once, without waiting for news (after a throttled error or a wake-up).
    retry_now: bool,
}

impl Worker {
    pub(super) fn new(
        dispatcher: Arc<Dispatcher>,
        key: String,
        inbox: Arc<Inbox>,
        memory: Memory,
    ) -> Self {
        Worker {
            dispatcher,
            key,
            inbox: Receiving(inbox),
            memory,
            gone: false,
            latest: None,
            watching_patch: Patch::default(),
            own_change: None,
            throttling: None,
            retry_now: false,
        }
    }

    fn ctx(&self) -> &ResourceContext {
        &self.dispatcher.ctx
    }

    /// Until there is nothing to do (idle), the queue is closed and drained, or the object
    /// is gone; the object's key, memory (none if it is gone), and errors in a row.
    ///
    /// Not an `async fn`: its future would hold the worker twice (the argument, then the
    /// variable). Both waits are boxed, so that the task (one per busy object: a listing
    /// makes hundreds at once) holds only the worker and the one wait it is in: 376 bytes
    /// instead of 944.
    #[allow(clippy::manual_async_fn)] // deliberately not an `async fn`: see above
    pub(super) fn run(mut self) -> impl std::future::Future<Output = Finished> {
        async move {
            while let Some((batch, since)) = Box::pin(self.next_batch()).await {
                if let Flow::Exit = Box::pin(self.handle(batch, since)).await {
                    break;
                }
            }
            Finished {
                memory: (!self.gone).then_some(self.memory),
                throttling: if self.gone { None } else { self.throttling },
                key: self.key,
            }
        }
    }

    /// The batch's events, then a cycle of the latest state if one is due. The cycle's rare
    /// waits (a delay, a touch, the throttling) are boxed: inline, their room was in the
    /// state of every cycle waiting for its patch (856 bytes now, 1 216 with them).
    async fn handle(&mut self, batch: Vec<Queued>, since: Option<Instant>) -> Flow {
        // Counted before the pause is checked: a pause that comes later waits for it.
        let busy = self.dispatcher.pause.busy();
        if !self.dispatcher.pause.is_active() {
            self.latest = None; // dropped: everything is listed again on resuming
            self.indexed(&batch);
            return Flow::Next;
        }
        // Boxed: inline, the absorbing (1.5 KB) would be in the state of every cycle
        // waiting for its patch.
        Box::pin(self.absorb(batch)).await;
        match self.current() {
            Some(event) => self.cycle(event, busy, since).await,
            None => Flow::Next,
        }
    }

    /// Wait for news — until our own change is due, or not at all after a throttled error
    /// — and take all the events queued by then (none: what is known is due now). With
    /// nothing to do, not at all: `None`, the task ends, and the worker waits as data (its
    /// queue is closed: later events of the object go to a successor, which takes it over);
    /// `None` too once the queue is closed and drained (the operator stops). With the batch,
    /// since when its first event waited (only while traces are on).
    async fn next_batch(&mut self) -> Option<(Vec<Queued>, Option<Instant>)> {
        let wait = if std::mem::take(&mut self.retry_now) {
            Some(Duration::ZERO)
        } else if let Some(own) = &self.own_change {
            Some(own.deadline.saturating_duration_since(Instant::now()))
        } else if self.latest.is_some() {
            Some(self.ctx().settings.queueing.idle_duration())
        } else {
            None
        };
        let first = match wait {
            None if self.inbox.0.close_if_empty() => return None,
            None => None,
            Some(wait) => match tokio::time::timeout(wait, self.inbox.0.next()).await {
                Ok(Some(event)) => Some(event),
                Ok(None) => return None,
                Err(_) => None, // due: proceed with what is known
            },
        };
        let mut batch: Vec<Queued> = first.into_iter().collect();
        while let Some(event) = self.inbox.0.try_next() {
            batch.push(event);
        }
        if let Some(metrics) = crate::metrics::get().filter(|_| !batch.is_empty()) {
            let resource = self.ctx().resource.name();
            metrics.events_queued(&resource, -(batch.len() as i64));
            metrics.events_collapsed(&resource, batch.len() as u64 - 1);
        }
        Some((batch, self.inbox.0.waited_since()))
    }

    /// The object's latest state goes to the indices first; then, once every index is
    /// complete, every event goes to the `on.event` handlers (their patches are applied with
    /// the next cycle's); our own change is recognised; the last state is the latest.
    async fn absorb(&mut self, batch: Vec<Queued>) {
        let batch = self.woken(batch); // (never counted in a listing)
        if let Some((event, ..)) = batch.last() {
            let dispatcher = self.dispatcher.clone();
            indexing::index(&dispatcher.ctx, &mut self.memory.indexing, event).await;
        }
        self.indexed(&batch);
        let (mut batch, mut places): (Vec<RawEvent>, Vec<_>) = batch
            .into_iter()
            .map(|(event, _, place)| (event, place))
            .unzip();
        if !self.ctx().indices.readiness.is_ready() {
            places.clear(); // the indices wait for the whole listing: let it go on
            self.ctx().indices.readiness.wait().await;
        }
        if let Some(event) = batch.last().filter(|_| !self.ctx().relating.is_empty()) {
            // (after the indices: a related function may look its owners up in one)
            let dispatcher = self.dispatcher.clone();
            let memory = self.memory.relating.get_or_insert_with(Box::default);
            relating::relate(&dispatcher.ctx, memory, event).await;
        }
        for event in &batch {
            let own = (self.own_change.as_ref())
                .is_some_and(|own| version_of(&event.object).as_deref() == Some(&own.version));
            if own || matches!(event.event_type, EventType::Deleted | EventType::Vanished) {
                self.own_change = None;
            }
            if event.event_type != EventType::Vanished {
                self.watch(event).await;
            }
            if let Some(wakers) = &self.dispatcher.ctx.wakers {
                wakers.wake(&event.object, &self.dispatcher.ctx.owners);
            }
        }
        if let Some(event) = batch.pop() {
            self.latest = Some(Latest::Tree(event));
        }
        drop(places); // their `on.event` handlers are done: the next listed objects may come
    }

    /// The batch without the engine's wake-ups (`EventType::Woken`): they make the object's
    /// reconcile handlers due. The state processed is the latest known: the batch's own, or
    /// the one the object's last cycle saw (a wake-up's own body may be older than a change
    /// queued before it); none if the object is gone or not seen.
    fn woken(&mut self, batch: Vec<Queued>) -> Vec<Queued> {
        // Only owners are woken: the other resources' events are not looked through.
        let Some(bodies) = self.ctx().owner_bodies.clone() else {
            return batch;
        };
        if batch
            .iter()
            .all(|(event, ..)| event.event_type != EventType::Woken)
        {
            return batch;
        }
        let (_, batch): (Vec<Queued>, Vec<Queued>) =
            (batch.into_iter()).partition(|(event, ..)| event.event_type == EventType::Woken);
        let Some(seen) = bodies.get(&self.key) else {
            return batch; // gone, or not seen yet: its first cycle reconciles it anyway
        };
        self.memory
            .reconciling
            .get_or_insert_with(Box::default)
            .woken = true;
        if self.latest.is_none() && batch.is_empty() {
            self.latest = Some(Latest::Tree(RawEvent {
                event_type: EventType::Modified,
                object: seen,
            }));
        }
        batch
    }

    /// The initial listing's events of this batch are done with.
    fn indexed(&self, batch: &[Queued]) {
        if let Some(listing) = &self.dispatcher.listing {
            listing.indexed(batch.iter().filter(|(_, counted, _)| *counted).count());
        }
    }

    /// The `on.event` handlers of one event.
    async fn watch(&mut self, event: &RawEvent) {
        if let Some(logs) = &self.dispatcher.logs {
            if event.event_type == EventType::Deleted {
                logs.forget(&self.key);
            } else {
                logs.observe(&self.key, &event.object).await;
            }
        }
        let patch = processing::process_watching(&self.dispatcher.ctx, event).await;
        self.watching_patch.merge_from(&Value::Object(patch.merge));
    }

    /// The state to process now, if any: not a stale one while our own change is due.
    fn current(&mut self) -> Option<RawEvent> {
        let latest = self.latest.as_ref()?;
        if (self.own_change.as_ref()).is_some_and(|own| own.deadline > Instant::now()) {
            return None;
        }
        let event = latest.event();
        self.own_change = None;
        Some(event)
    }

    /// One processing cycle of the latest state: handlers, then their patch, then the
    /// sleep until the delayed handlers are due.
    /// `busy` counts it as handling in progress until the handlers' patch is applied (not
    /// while sleeping for a delayed handler or throttling). With traces on, the handlers and
    /// the write are a span of the event (`since`: when it was queued).
    async fn cycle(&mut self, event: RawEvent, busy: Busy, since: Option<Instant>) -> Flow {
        if event.event_type == EventType::Vanished {
            // Deleted while nothing watched: nothing to call, only to forget.
            self.forget();
            return Flow::Exit;
        }
        let deleted = event.event_type == EventType::Deleted;
        let dispatcher = self.dispatcher.clone();
        let _permit = match &dispatcher.limiter {
            Some(limiter) => Some(limiter.clone().acquire_owned().await.expect("never closed")),
            None => None,
        };
        if event.event_type == EventType::Listed {
            self.memory.noticed_by_listing = true;
        }
        let span = crate::traces::get().map(|tracer| {
            let name = format!("event {}", dispatcher.ctx.resource.name());
            tracer.start(
                name,
                SpanKind::Consumer,
                event_attributes(&dispatcher.ctx, &event, since),
                None,
            )
        });
        let object_daemons = (!dispatcher.ctx.spawning.is_empty())
            .then(|| dispatcher.daemons.object(&self.key, &event.object));
        let processing = self.process(&dispatcher, &event, object_daemons.as_ref());
        let cycle = match crate::traces::within(span.as_ref(), processing).await {
            Ok(cycle) => cycle,
            Err(error) if deleted => {
                // Nothing to retry on: the object is gone.
                object_log!(Level::ERROR, &ObjectRef::of(&event.object), "{error}");
                Default::default()
            }
            Err(error) => {
                if let Some(cx) = &span {
                    crate::traces::end(cx, Some(("StorageError", error.to_string().as_str())));
                }
                drop(busy);
                let object = ObjectRef::of(&event.object);
                Box::pin(self.throttle(&object, &CycleError::Storage(error))).await;
                return Flow::Next;
            }
        };
        if deleted {
            self.forget();
            return Flow::Exit;
        }
        let delay = cycle.delays.iter().copied().reduce(f64::min);
        // A reconcile handler's requeue (or retry) is slept in memory: no touch when it is due.
        let requeued = cycle.requeue.is_some_and(|r| delay.is_none_or(|d| r <= d));
        let delay = if requeued { cycle.requeue } else { delay };
        let had_patch = !cycle.patch.is_empty();
        // Lines about the object come only from here on, and only with a patch, a delay or a
        // matching handler: most cycles of an `on.event` operator have none (its fields were
        // copied for every event). Made before the event's tree is let go.
        let object = if had_patch || delay.is_some() || cycle.matched {
            ObjectRef::of(&event.object)
        } else {
            ObjectRef::default()
        };
        let writing = self.write(event, cycle.patch);
        let written = crate::traces::within(span.as_ref(), writing).await;
        if let Some(cx) = &span {
            let error = written.as_ref().err().map(ToString::to_string);
            crate::traces::end(cx, error.as_deref().map(|error| ("CycleError", error)));
        }
        let event = match written {
            Ok(Written::Gone) => return Flow::Next,
            Ok(Written::Done(event)) => event,
            Err(error) => {
                drop(busy);
                Box::pin(self.throttle(&object, &error)).await;
                return Flow::Next;
            }
        };
        drop(busy);
        let daemons = object_daemons.as_deref();
        self.follow_up(&object, delay, requeued, cycle.matched, event, daemons)
            .await;
        Flow::Next
    }

    /// The handlers' part of a cycle, with the patch that `on.event` handlers left.
    async fn process(
        &mut self,
        dispatcher: &Dispatcher,
        event: &RawEvent,
        object_daemons: Option<&Arc<ObjectDaemons>>,
    ) -> Result<Cycle, StorageError> {
        let patch = std::mem::take(&mut self.watching_patch);
        let spawning = object_daemons.map(|o| (&dispatcher.daemons, o));
        // Boxed: its state is big, and is not needed while the cycle then waits to patch
        // (in a burst, hundreds of cycles wait for a request slot at once).
        let processing =
            processing::process_changing(&dispatcher.ctx, &mut self.memory, event, patch, spawning);
        let mut cycle = Box::pin(processing).await?;
        if !dispatcher.ctx.reconciling.is_empty() {
            let ctx = &dispatcher.ctx;
            let reconciling = reconciling::reconcile(ctx, &mut self.memory, event, &mut cycle);
            Box::pin(reconciling).await?;
        }
        Ok(cycle)
    }

    /// The cycle's patch written (if any). With a patch, the event's tree is let go before the
    /// write waits for its request slot: our change's own event is expected next, and till
    /// then (or till it is overdue) the state is kept as text. Without, the event is given back.
    async fn write(&mut self, event: RawEvent, patch: Patch) -> Result<Written, CycleError> {
        let had_patch = !patch.is_empty();
        // Kept until applied: handlers that ran must not run again because a write failed.
        let unapplied = patch.clone();
        if had_patch {
            let text = Latest::Text(event.event_type, CompactBody::of(&event.object));
            self.latest = Some(text);
        }
        let before = had_patch.then(|| version_of(&event.object)).flatten();
        let releasing = (patch.finalizer == Some(FinalizerOp::Remove))
            .then(|| processing::deleted_uid(&event.object))
            .flatten()
            .map(Box::<str>::from);
        let applying = self.apply(&event.object, patch);
        let event = (!had_patch).then_some(event);
        match applying.await {
            // Processed: the throttling starts over (as Kopf's, written or not).
            Ok(None) => self.throttling = None,
            Ok(Some(applied)) => {
                self.throttling = None;
                if applied.remaining.is_none() && releasing.is_some() {
                    self.memory.released = releasing;
                }
                self.memory.remaining_patch = applied.remaining;
                if applied.gone {
                    self.latest = None;
                    return Ok(Written::Gone);
                }
                // A patch that changed nothing brings no event: nothing to wait for.
                if applied.resource_version.is_some() && applied.resource_version != before {
                    self.expect(applied.resource_version);
                }
            }
            Err(error) => {
                self.memory.remaining_patch = Some(unapplied);
                return Err(error);
            }
        }
        Ok(Written::Done(event))
    }

    /// After a cycle: sleep for the handlers' delay (unless our own patch brings a new cycle
    /// anyway), then touch the object; or wait for real news. `event`: the cycle's event,
    /// given back when nothing was written.
    async fn follow_up(
        &mut self,
        object: &ObjectRef,
        delay: Option<f64>,
        requeued: bool,
        matched: bool,
        event: Option<RawEvent>,
        daemons: Option<&ObjectDaemons>,
    ) {
        let had_patch = event.is_none();
        // (a requeue after a patch that changed nothing has no event coming: it is slept)
        let coming = had_patch && (!requeued || self.own_change.is_some());
        if coming && delay.is_some() {
            // Our own patch brings a new cycle anyway. (Kopf says so only for a real delay.)
            if let Some(delay) = delay.filter(|d| *d > 0.0) {
                object_log!(
                    Level::DEBUG,
                    object,
                    "Sleeping was skipped because of the patch, {delay} seconds left."
                );
            }
        } else if let Some(delay) = delay {
            match Box::pin(self.sleep(object, delay, daemons)).await {
                // The new state is in `latest` already (or the daemons are to be re-checked).
                Slept::Interrupted | Slept::DaemonExited => self.retry_now = true,
                // Due: the same state is processed again, the object left as it is.
                Slept::Fully if requeued => self.retry_now = true,
                Slept::Fully => {
                    let event = event.expect("a delay is slept only without a patch");
                    Box::pin(self.touch(object, &event.object)).await
                }
            }
        } else if !had_patch && matched {
            object_log!(
                Level::DEBUG,
                object,
                "Handling cycle is finished, waiting for new changes."
            );
        }
        if !had_patch && delay.is_none() {
            self.latest = None; // nothing pending: wait for real news
        }
    }

    /// Our own change is on its way: its version, and how long to wait for it.
    fn expect(&mut self, version: Option<String>) {
        let timeout = self.ctx().settings.persistence.consistency_timeout;
        self.own_change = version.map(|version| OwnChange {
            version,
            deadline: Instant::now() + Duration::from_secs_f64(timeout),
        });
    }

    /// The object is gone from the cluster: forget it everywhere.
    fn forget(&mut self) {
        self.gone = true;
        self.dispatcher.daemons.forget(&self.key);
        if let Some(logs) = &self.dispatcher.logs {
            logs.forget(&self.key);
        }
        self.ctx().hooks.forget(&self.key);
        if let Some(bodies) = &self.ctx().owner_bodies {
            bodies.forget(&self.key); // (vanished too: no cycle of its own tells reconciling)
        }
    }

    /// Apply the patch (removing the touch-dummy if set); `None` if there was nothing to apply.
    /// What it needs of `body` is read at once: the write does not hold it.
    fn apply(
        &self,
        body: &Value,
        mut patch: Patch,
    ) -> impl std::future::Future<Output = Result<Option<applying::Applied>, CycleError>> + '_ {
        let prepared = if patch.is_empty() {
            Ok(None)
        } else {
            (self.ctx().progress.touch(body, &mut patch, None))
                .map(|()| Some(self.ctx().patcher.apply(body, patch)))
        };
        async move {
            match prepared? {
                None => Ok(None),
                Some(writing) => writing.await.map(Some).map_err(CycleError::Api),
            }
        }
    }

    /// Slept in full for the delayed handlers: touch the object, so that a fresh event
    /// wakes them up.
    async fn touch(&mut self, object: &ObjectRef, body: &Value) {
        let mut touch = Patch::default();
        let now = format_time(crate::util::clock::now());
        let applied = match self.ctx().progress.touch(body, &mut touch, Some(&now)) {
            Ok(()) => self.apply(body, touch).await,
            Err(error) => Err(CycleError::Storage(error)),
        };
        match applied {
            Ok(Some(applied)) => self.expect(applied.resource_version),
            Ok(None) => {}
            Err(error) => self.throttle(object, &error).await,
        }
    }

    /// Wait after an unexpected error (ever longer while they repeat); events queue
    /// meanwhile; then go on at once. Kopf's throttler says when it is over if events came
    /// meanwhile (they cut its sleep short, and the rest is slept before the next one).
    async fn throttle(&mut self, object: &ObjectRef, error: &CycleError) {
        let configured = &self.dispatcher.ctx.settings.queueing.error_delays;
        let row = (self.throttling).get_or_insert_with(|| Box::new(ForEver::new(configured)));
        // Kopf does not throttle (nor log) when no delay is configured; a minute here, not a busy loop.
        let delay = row.next_pause().unwrap_or(60.0);
        object_log!(
            Level::ERROR,
            object,
            "Throttling for {delay} seconds due to an unexpected error: {error}"
        );
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
        if self.inbox.0.has_news() {
            object_log!(
                Level::INFO,
                object,
                "Throttling is over. Switching back to normal operations."
            );
        }
        self.retry_now = true;
    }

    /// Sleep for the handlers' delay, unless new events come first or a daemon exits.
    async fn sleep(
        &mut self,
        object: &ObjectRef,
        delay: f64,
        daemons: Option<&ObjectDaemons>,
    ) -> Slept {
        let capped = delay.min(WAITING_KEEPALIVE);
        if delay <= 0.0 {
            return Slept::Fully;
        }
        if capped < delay {
            object_log!(
                Level::DEBUG,
                object,
                "Sleeping for {delay} (capped {capped}) seconds for the delayed handlers."
            );
        } else {
            object_log!(
                Level::DEBUG,
                object,
                "Sleeping for {delay} seconds for the delayed handlers."
            );
        }
        let started = Instant::now();
        let exited = async {
            match daemons {
                Some(daemons) => daemons.exited.notified().await,
                _ => std::future::pending().await,
            }
        };
        let received = tokio::select! {
            received = tokio::time::timeout(Duration::from_secs_f64(capped), self.inbox.0.next()) => received,
            () = exited => return Slept::DaemonExited,
        };
        match received {
            Ok(Some(queued)) => {
                let left = capped - started.elapsed().as_secs_f64();
                object_log!(
                    Level::DEBUG,
                    object,
                    "Sleeping was interrupted by new changes, {left} seconds left."
                );
                if let Some(metrics) = crate::metrics::get() {
                    metrics.events_queued(&self.ctx().resource.name(), -1);
                }
                // Boxed, as in `handle`: inline, the absorbing (1.5 KB) would be in every
                // waiting cycle's state, here and while it waits for its patch.
                Box::pin(self.absorb(vec![queued])).await;
                Slept::Interrupted
            }
            Ok(None) => Slept::Interrupted,
            Err(_) => Slept::Fully,
        }
    }
}

fn version_of(body: &Value) -> Option<String> {
    crate::util::dicts::meta(body, "resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// An event span's attributes: the object, the event, and how long it waited in the queue.
fn event_attributes(
    ctx: &ResourceContext,
    event: &RawEvent,
    since: Option<Instant>,
) -> Vec<KeyValue> {
    let metadata = &event.object["metadata"];
    let mut attributes = vec![
        KeyValue::new("kopf.resource", ctx.resource.name()),
        // ADDED, MODIFIED, DELETED as the API names them; LISTED (or VANISHED) by the engine.
        KeyValue::new(
            "kopf.event.type",
            format!("{:?}", event.event_type).to_uppercase(),
        ),
    ];
    for (key, field) in [
        ("k8s.namespace.name", "namespace"),
        ("kopf.object.name", "name"),
        ("kopf.object.uid", "uid"),
        ("kopf.object.resource_version", "resourceVersion"),
    ] {
        if let Some(value) = metadata[field].as_str() {
            attributes.push(KeyValue::new(key, value.to_owned()));
        }
    }
    if let Some(since) = since {
        attributes.push(KeyValue::new(
            "kopf.queue.wait_s",
            since.elapsed().as_secs_f64(),
        ));
    }
    attributes
}
