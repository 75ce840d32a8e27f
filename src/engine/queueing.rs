//! Per-object queues: the events of one resource's stream are routed to one
//! worker per object, so each object's events are handled in order, one cycle
//! at a time, while different objects proceed concurrently. A worker takes all
//! the events that queued up while it was busy: `on.event` handlers see each
//! of them, change handlers only the latest state. Workers exit when idle; what
//! the engine remembers of an object outlives them.

use crate::client::applying;
use crate::client::watching::{EventType, RawEvent, Watched};
use crate::engine::context::{object_key, Memory, ResourceContext, Resting};
use crate::engine::daemons::{Daemons, ObjectDaemons};
use crate::engine::{indexing, processing};
use crate::ha::pausing::{Busy, Pause};
use crate::indices::InitialListing;
use crate::object_log;
use crate::state::bodies::CompactBody;
use crate::state::patches::Patch;
use crate::state::progression::format_time;
use crate::state::StorageError;
use crate::util::identity::ObjectId;
use crate::util::logging::ObjectRef;
use crate::util::tasks;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Level;

/// Sleeps longer than this are cut, to re-check the object now and then.
const WAITING_KEEPALIVE: f64 = 600.0;

pub struct Dispatcher {
    pub ctx: Arc<ResourceContext>,
    pub limiter: Option<Arc<Semaphore>>,
    /// The objects' daemons and timers; they outlive the workers.
    pub daemons: Arc<Daemons>,
    /// While paused (peering, leader election), events are dropped: they are listed again.
    pub pause: Arc<Pause>,
    /// For a resource with indices: its initial listing, which every handler waits for.
    pub listing: Option<Arc<InitialListing>>,
}

/// An event in an object's queue, whether it is one of the initial listing's (to count
/// when it has been indexed), and a listed event's place in the listing's backlog.
type Queued = (RawEvent, bool, Option<OwnedSemaphorePermit>);

/// An object's queue: the dispatcher puts its events in, its worker takes them out. Not a
/// channel: thousands of queues live at once after a listing, and a channel is ≈0.8 KB
/// before it holds anything (cache-padded halves, a block of 32 places), this ≈0.1 KB.
#[derive(Default)]
struct Inbox {
    state: std::sync::Mutex<InboxState>,
    news: tokio::sync::Notify,
}

#[derive(Default)]
struct InboxState {
    events: std::collections::VecDeque<Queued>,
    /// Its worker takes no more (idle, gone, or the operator stops): put them elsewhere.
    closed: bool,
}

impl Inbox {
    fn state(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.state.lock().expect("not poisoned")
    }

    /// In, unless the inbox is closed: then the event comes back.
    fn put(&self, item: Queued) -> Result<(), Queued> {
        let mut state = self.state();
        if state.closed {
            return Err(item);
        }
        state.events.push_back(item);
        drop(state);
        self.news.notify_one();
        Ok(())
    }

    /// The next event, waiting for it; `None` once the inbox is closed and empty.
    async fn next(&self) -> Option<Queued> {
        loop {
            // A permit stays if nobody waits: an event put in meanwhile is not missed.
            let news = self.news.notified();
            {
                let mut state = self.state();
                if let Some(item) = state.events.pop_front() {
                    return Some(item);
                }
                if state.closed {
                    return None;
                }
            }
            news.await;
        }
    }

    /// Closed if nothing is queued (its idle worker is to end): whether nothing was.
    fn close_if_empty(&self) -> bool {
        let mut state = self.state();
        let empty = state.events.is_empty();
        state.closed |= empty;
        empty
    }

    /// Whether events wait in it.
    fn has_news(&self) -> bool {
        !self.state().events.is_empty()
    }

    /// The next event if there is one; none left: the room for them is given back.
    fn try_next(&self) -> Option<Queued> {
        let mut state = self.state();
        let item = state.events.pop_front();
        if item.is_none() {
            state.events = Default::default();
        }
        item
    }

    fn close(&self) {
        self.state().closed = true;
        self.news.notify_one();
    }
}

/// A worker's end of its inbox: closed when the worker ends, however it ends (events that
/// come later go to a successor).
struct Receiving(Arc<Inbox>);

impl Drop for Receiving {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// How many listed objects may wait for their workers at once. A listing comes faster than
/// handlers take it: unbounded, all of a large listing's bodies sat in the objects' queues
/// at once (620 MiB at 50 000 objects). The watcher waits meanwhile (in the stream, not in
/// memory); the watch events after the listing are not held back. A few dozen cover the
/// handlers' pace (an object's place is free once its `on.event` handlers are done): 256
/// listed 10 000 objects no faster than 64 (3.1 s against 2.1), and cost 3 MiB more.
const LISTING_BACKLOG: usize = 64;

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

/// A worker's task has ended (idle, or its queue closed): its object's key, the object's
/// memory unless the object is gone, and the unexpected errors in a row (see `Idle`).
struct Finished {
    key: String,
    memory: Option<Memory>,
    errors_in_a_row: usize,
}

/// What an idle worker keeps besides its object's memory (which rests at once): the errors in
/// a row that its next throttling goes on from, if its object's next event comes within
/// `idle_timeout`; they are forgotten then, when it ends. Only workers with such errors have
/// this: the others have nothing left but the memory. (Thousands are idle at once after a
/// listing: as tasks, each waiting with a timeout, they cost 1.1 KiB apiece.)
struct Idle {
    errors_in_a_row: usize,
    until: Instant,
}

/// Where the dispatcher sends each object's events.
#[derive(Default)]
struct Routes {
    /// The queue of each object that has a worker (or one about to start).
    queues: HashMap<String, Arc<Inbox>>,
    /// The queues of workers to start once their object's previous worker, still finishing
    /// what it took before idling out, has ended: so that events never overtake each other.
    successors: HashMap<String, Arc<Inbox>>,
    /// The objects whose workers are idle (without a task) after unexpected errors.
    idle: HashMap<ObjectId, Idle>,
    /// When those idle workers end, in the order they became idle (all wait as long).
    idling: std::collections::VecDeque<(Instant, ObjectId)>,
    /// The objects known and at rest (no worker): what is remembered of them, compactly.
    resting: HashMap<ObjectId, Resting>,
    workers: JoinSet<Finished>,
}

impl Dispatcher {
    /// Route the stream's events to the objects' workers until the stream ends.
    pub async fn run(self, mut events: mpsc::Receiver<Watched>) {
        let this = Arc::new(self);
        let mut routes = Routes::default();
        // The objects listed since the listing began: the others known are gone.
        let mut listed: HashSet<ObjectId> = HashSet::new();
        let backlog = Arc::new(Semaphore::new(LISTING_BACKLOG));
        let mut known = Known::new(&this.ctx);
        // One timer for all idle workers: set for the first of them to end.
        let mut idle_ending = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut armed: Option<Instant> = None;
        loop {
            known.update(&routes);
            if let Some(&(until, _)) = routes.idling.front() {
                if armed != Some(until) {
                    idle_ending.as_mut().reset(until);
                    armed = Some(until);
                }
            }
            let watched = tokio::select! {
                watched = events.recv() => match watched {
                    Some(watched) => watched,
                    None => break,
                },
                Some(finished) = routes.workers.join_next() => {
                    if let Ok(finished) = finished {
                        this.finished(&mut routes, finished);
                    }
                    continue;
                }
                () = &mut idle_ending, if armed.is_some() => {
                    armed = None;
                    routes.end_idle(Instant::now());
                    continue;
                }
            };
            let event = match watched {
                Watched::Event(event) => event,
                Watched::Synced => {
                    let resting = (routes.resting.keys())
                        .filter(|id| !listed.contains(*id))
                        .map(ObjectId::to_string);
                    let busy = (routes.queues.keys())
                        .filter(|key| !listed.contains(&ObjectId::new(key)))
                        .cloned();
                    let vanished: Vec<String> = resting.chain(busy).collect();
                    for key in vanished {
                        // In order with its other events: through its own queue.
                        let body = serde_json::json!({"metadata": {"uid": key}});
                        let event = RawEvent {
                            event_type: EventType::Vanished,
                            object: Arc::new(body),
                        };
                        known.queued(1);
                        this.route(&mut routes, key, (event, false, None));
                    }
                    listed = HashSet::new(); // not kept at the listing's size meanwhile
                    if let Some(listing) = &this.listing {
                        listing.completed();
                    }
                    continue;
                }
            };
            let key = object_key(&event.object);
            let mut counted = false;
            let mut place = None;
            if event.event_type == EventType::Listed {
                listed.insert(ObjectId::new(&key));
                if let Some(listing) = this.listing.as_ref().filter(|l| l.is_listing()) {
                    listing.listed();
                    counted = true;
                }
                // Workers that end meanwhile are let go (their successors may hold places).
                place = loop {
                    tokio::select! {
                        permit = backlog.clone().acquire_owned() => break permit.ok(),
                        Some(finished) = routes.workers.join_next() => {
                            if let Ok(finished) = finished {
                                this.finished(&mut routes, finished);
                            }
                        }
                    }
                };
            }
            known.queued(1);
            this.route(&mut routes, key, (event, counted, place));
        }
        known.forget();
        // The stream has ended (the operator stops): stop the daemons, and meanwhile
        // let the workers finish their cycles.
        if let Some(listing) = &this.listing {
            listing.abandon();
        }
        let Routes {
            queues,
            successors,
            mut workers,
            ..
        } = routes;
        // Closed: the workers finish what they have and exit; successors never start.
        for inbox in queues.values() {
            inbox.close();
        }
        drop((queues, successors));
        let exit_timeout = Duration::from_secs_f64(this.ctx.settings.queueing.exit_timeout);
        let finishing = async {
            if tokio::time::timeout(exit_timeout, async {
                while workers.join_next().await.is_some() {}
            })
            .await
            .is_err()
            {
                workers.abort_all();
            }
        };
        tokio::join!(this.daemons.stop_all(), finishing);
    }

    /// Into the object's queue; a closed one (its worker idled out) or none: a new worker.
    fn route(self: &Arc<Self>, routes: &mut Routes, key: String, item: Queued) {
        let item = match routes.queues.get(&key) {
            Some(queue) => match queue.put(item) {
                Ok(()) => return,
                Err(item) => item,
            },
            None => item,
        };
        let inbox = Arc::new(Inbox::default());
        let _ = inbox.put(item); // open: nobody has closed it yet
        if routes.queues.insert(key.clone(), inbox.clone()).is_some() {
            // Its worker is finishing what it took: the successor starts when it has ended.
            routes.successors.insert(key, inbox);
            return;
        }
        let id = ObjectId::new(&key);
        let memory = (routes.resting.remove(&id))
            .map(Resting::wake)
            .unwrap_or_default();
        let errors_in_a_row = (routes.idle.remove(&id)).map_or(0, |idle| idle.errors_in_a_row);
        self.start(routes, key, inbox, memory, errors_in_a_row);
    }

    /// An object's worker's task has ended: its successor takes over, or its object's memory
    /// rests (and its errors in a row, if any, wait for `idle_timeout`).
    fn finished(self: &Arc<Self>, routes: &mut Routes, finished: Finished) {
        let Finished {
            key,
            memory,
            errors_in_a_row,
        } = finished;
        if let Some(inbox) = routes.successors.remove(&key) {
            self.start(
                routes,
                key,
                inbox,
                memory.unwrap_or_default(),
                errors_in_a_row,
            );
            return;
        }
        routes.queues.remove(&key);
        shrink(&mut routes.queues);
        let Some(memory) = memory else {
            return;
        };
        let id = ObjectId::new(&key);
        if errors_in_a_row > 0 {
            let until = Instant::now() + self.ctx.settings.queueing.idle_duration();
            let idle = Idle {
                errors_in_a_row,
                until,
            };
            routes.idle.insert(id.clone(), idle);
            routes.idling.push_back((until, id.clone()));
        }
        routes.resting.insert(id, memory.rest());
    }

    fn start(
        self: &Arc<Self>,
        routes: &mut Routes,
        key: String,
        inbox: Arc<Inbox>,
        memory: Memory,
        errors_in_a_row: usize,
    ) {
        let mut worker = Worker::new(self.clone(), key, inbox, memory);
        worker.errors_in_a_row = errors_in_a_row;
        tasks::spawn_in(&mut routes.workers, worker.run());
    }
}

impl Routes {
    /// The idle workers whose time is up end: their errors are forgotten.
    fn end_idle(&mut self, now: Instant) {
        while let Some(&(until, _)) = self.idling.front() {
            if until > now {
                break;
            }
            let (_, id) = self.idling.pop_front().expect("just seen");
            // Not if it has resumed since (and maybe idles again, with a later entry).
            if self.idle.get(&id).is_some_and(|idle| idle.until == until) {
                self.idle.remove(&id);
            }
        }
        shrink(&mut self.idle);
        if self.idling.len() * 4 < self.idling.capacity() {
            self.idling.shrink_to(self.idling.len() * 2);
        }
    }
}

/// Give back most of a map's room once most of it is empty: a listing fills the maps of
/// the objects in work for a moment, and they are small again after it.
fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// What the metrics (if enabled) show of one dispatcher: the objects it knows (with a worker
/// or at rest) and the events in their queues, as its share of the resource's gauges.
struct Known {
    resource: String,
    objects: i64,
}

impl Known {
    fn new(ctx: &ResourceContext) -> Self {
        let resource = match crate::metrics::get() {
            Some(_) => ctx.resource.name(),
            None => String::new(),
        };
        Known {
            resource,
            objects: 0,
        }
    }

    fn update(&mut self, routes: &Routes) {
        if let Some(metrics) = crate::metrics::get() {
            let objects = (routes.queues.len() + routes.resting.len()) as i64;
            metrics.objects_watched(&self.resource, objects - self.objects);
            self.objects = objects;
        }
    }

    fn queued(&self, events: i64) {
        if let Some(metrics) = crate::metrics::get() {
            metrics.events_queued(&self.resource, events);
        }
    }

    fn forget(&mut self) {
        if let Some(metrics) = crate::metrics::get() {
            metrics.objects_watched(&self.resource, -self.objects);
            self.objects = 0;
        }
    }
}

/// Our own patch, until its version comes back in the stream or its deadline passes:
/// until then, the object's state in the stream is older than what we know.
struct OwnChange {
    version: String,
    deadline: Instant,
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
enum Latest {
    Tree(RawEvent),
    Text(EventType, CompactBody),
}

impl Latest {
    fn event(&self) -> RawEvent {
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
struct Worker {
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
    /// Unexpected errors in a row: the next throttling delay is the configured one at this
    /// place (ever longer while the errors repeat; the last one after the list ends).
    errors_in_a_row: usize,
    /// Go on at once, without waiting for news (after a throttled error or a wake-up).
    retry_now: bool,
}

impl Worker {
    fn new(dispatcher: Arc<Dispatcher>, key: String, inbox: Arc<Inbox>, memory: Memory) -> Self {
        Worker {
            dispatcher,
            key,
            inbox: Receiving(inbox),
            memory,
            gone: false,
            latest: None,
            watching_patch: Patch::default(),
            own_change: None,
            errors_in_a_row: 0,
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
    fn run(mut self) -> impl std::future::Future<Output = Finished> {
        async move {
            while let Some(batch) = Box::pin(self.next_batch()).await {
                if let Flow::Exit = Box::pin(self.handle(batch)).await {
                    break;
                }
            }
            Finished {
                memory: (!self.gone).then_some(self.memory),
                errors_in_a_row: if self.gone { 0 } else { self.errors_in_a_row },
                key: self.key,
            }
        }
    }

    /// The batch's events, then a cycle of the latest state if one is due. The cycle's rare
    /// waits (a delay, a touch, the throttling) are boxed: inline, their room was in the
    /// state of every cycle waiting for its patch (856 bytes now, 1 216 with them).
    async fn handle(&mut self, batch: Vec<Queued>) -> Flow {
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
            Some(event) => self.cycle(event, busy).await,
            None => Flow::Next,
        }
    }

    /// Wait for news — until our own change is due, or not at all after a throttled error
    /// — and take all the events queued by then (none: what is known is due now). With
    /// nothing to do, not at all: `None`, the task ends, and the worker waits as data (its
    /// queue is closed: later events of the object go to a successor, which takes it over);
    /// `None` too once the queue is closed and drained (the operator stops).
    async fn next_batch(&mut self) -> Option<Vec<Queued>> {
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
        Some(batch)
    }

    /// The object's latest state goes to the indices first; then, once every index is
    /// complete, every event goes to the `on.event` handlers (their patches are applied with
    /// the next cycle's); our own change is recognised; the last state is the latest.
    async fn absorb(&mut self, batch: Vec<Queued>) {
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
        for event in &batch {
            let own = (self.own_change.as_ref())
                .is_some_and(|own| version_of(&event.object).as_deref() == Some(&own.version));
            if own || matches!(event.event_type, EventType::Deleted | EventType::Vanished) {
                self.own_change = None;
            }
            if event.event_type != EventType::Vanished {
                self.watch(event).await;
            }
        }
        if let Some(event) = batch.pop() {
            self.latest = Some(Latest::Tree(event));
        }
        drop(places); // their `on.event` handlers are done: the next listed objects may come
    }

    /// The initial listing's events of this batch are done with.
    fn indexed(&self, batch: &[Queued]) {
        if let Some(listing) = &self.dispatcher.listing {
            listing.indexed(batch.iter().filter(|(_, counted, _)| *counted).count());
        }
    }

    /// The `on.event` handlers of one event.
    async fn watch(&mut self, event: &RawEvent) {
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
    /// while sleeping for a delayed handler or throttling).
    async fn cycle(&mut self, event: RawEvent, busy: Busy) -> Flow {
        let dispatcher = self.dispatcher.clone();
        let ctx = &dispatcher.ctx;
        if event.event_type == EventType::Vanished {
            // Deleted while nothing watched: nothing to call, only to forget.
            self.forget();
            return Flow::Exit;
        }
        let deleted = event.event_type == EventType::Deleted;
        let _permit = match &dispatcher.limiter {
            Some(limiter) => Some(limiter.clone().acquire_owned().await.expect("never closed")),
            None => None,
        };
        if event.event_type == EventType::Listed {
            self.memory.noticed_by_listing = true;
        }
        let patch = std::mem::take(&mut self.watching_patch);
        let object_daemons =
            (!ctx.spawning.is_empty()).then(|| dispatcher.daemons.object(&self.key, &event.object));
        let spawning = object_daemons.as_ref().map(|o| (&dispatcher.daemons, o));
        // Boxed: its state is big, and is not needed while the cycle then waits to patch
        // (in a burst, hundreds of cycles wait for a request slot at once).
        let processed = Box::pin(processing::process_changing(
            ctx,
            &mut self.memory,
            &event,
            patch,
            spawning,
        ))
        .await;
        let cycle = match processed {
            Ok(cycle) => cycle,
            Err(error) if deleted => {
                // Nothing to retry on: the object is gone.
                object_log!(Level::ERROR, &ObjectRef::of(&event.object), "{error}");
                Default::default()
            }
            Err(error) => {
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
        let had_patch = !cycle.patch.is_empty();
        // Lines about the object come only from here on, and only with a patch, a delay or a
        // matching handler: most cycles of an `on.event` operator have none (its fields were
        // copied for every event). Made before the event's tree is let go.
        let object = if had_patch || delay.is_some() || cycle.matched {
            ObjectRef::of(&event.object)
        } else {
            ObjectRef::default()
        };
        // Kept until applied: handlers that ran must not run again because a write failed.
        let unapplied = cycle.patch.clone();
        // Our change's own event is expected next: till then (or till it is overdue), the
        // state is kept as text, not as a tree, while the patch waits for a request slot.
        if had_patch {
            let text = Latest::Text(event.event_type, CompactBody::of(&event.object));
            self.latest = Some(text);
        }
        let applying = self.apply(&event.object, cycle.patch);
        let event = (!had_patch).then_some(event);
        match applying.await {
            // Processed: the throttling starts over (as Kopf's, written or not).
            Ok(None) => self.errors_in_a_row = 0,
            Ok(Some(applied)) => {
                self.errors_in_a_row = 0;
                self.memory.remaining_patch = applied.remaining;
                if applied.gone {
                    self.latest = None;
                    return Flow::Next;
                }
                if applied.resource_version.is_some() {
                    self.expect(applied.resource_version);
                }
            }
            Err(error) => {
                self.memory.remaining_patch = Some(unapplied);
                drop(busy);
                Box::pin(self.throttle(&object, &error)).await;
                return Flow::Next;
            }
        }
        drop(busy);
        if had_patch && delay.is_some() {
            // Our own patch brings a new cycle anyway. (Kopf says so only for a real delay.)
            if let Some(delay) = delay.filter(|d| *d > 0.0) {
                object_log!(
                    Level::DEBUG,
                    &object,
                    "Sleeping was skipped because of the patch, {delay} seconds left."
                );
            }
        } else if let Some(delay) = delay {
            match Box::pin(self.sleep(&object, delay, object_daemons.as_deref())).await {
                // The new state is in `latest` already (or the daemons are to be re-checked).
                Slept::Interrupted | Slept::DaemonExited => self.retry_now = true,
                Slept::Fully => {
                    let event = event.expect("a delay is slept only without a patch");
                    Box::pin(self.touch(&object, &event.object)).await
                }
            }
        } else if !had_patch && cycle.matched {
            object_log!(
                Level::DEBUG,
                &object,
                "Handling cycle is finished, waiting for new changes."
            );
        }
        if !had_patch && delay.is_none() {
            self.latest = None; // nothing pending: wait for real news
        }
        Flow::Next
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
        self.ctx().hooks.forget(&self.key);
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
        let now = format_time(chrono::Utc::now());
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
        let configured = &self.ctx().settings.queueing.error_delays;
        let delay = (configured.get(self.errors_in_a_row))
            .or(configured.last())
            .copied()
            .unwrap_or(60.0);
        self.errors_in_a_row += 1;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::hooks::HandlerKind;
    use crate::engine::testing::{self, event, object, Daemon, FakeHooks, FakePatcher, Handlers};
    use crate::indices::datum::Datum;
    use crate::settings::Settings;
    use crate::state::progression::Outcome;
    use crate::util::logging::Capture;
    use serde_json::json;
    use tokio::task::JoinHandle;
    use tracing::instrument::WithSubscriber;

    struct Setup {
        hooks: Arc<FakeHooks>,
        patcher: Arc<FakePatcher>,
        capture: Capture,
        events: mpsc::Sender<Watched>,
        dispatcher: JoinHandle<()>,
        ctx: Arc<ResourceContext>,
    }

    #[test]
    fn a_state_kept_as_text_is_the_same_event_again() {
        let body = json!({"metadata": {"name": "a", "resourceVersion": "7"}, "spec": {"z": 1, "a": [1.5, "x", null]}, "kind": "K"});
        let text = Latest::Text(EventType::Modified, CompactBody::of(&body));
        let event = text.event();
        assert_eq!(event.event_type, EventType::Modified);
        assert_eq!(*event.object, body);
        let keys: Vec<&String> = event.object.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["metadata", "spec", "kind"]); // in the server's order, as handlers see it
    }

    /// A create handler (0) and an event handler (0).
    fn handlers() -> Handlers {
        Handlers {
            changing: vec![testing::handler(
                json!({"index": 0, "id": "create_fn", "reason": "create"}),
            )],
            watching: vec![testing::handler(json!({"index": 0, "id": "event_fn"}))],
            ..Default::default()
        }
    }

    fn start(pause: Arc<Pause>) -> Setup {
        start_with(handlers(), pause)
    }

    /// A dispatcher of these handlers (with indices, its listing is waited for).
    fn start_with(handlers: Handlers, pause: Arc<Pause>) -> Setup {
        let hooks = FakeHooks::new(Daemon::Returning);
        let patcher = Arc::new(FakePatcher::default());
        let ctx = testing::context(
            handlers,
            Settings::default(),
            hooks.clone(),
            patcher.clone(),
        );
        let listing = (!ctx.indexing.is_empty()).then(|| InitialListing::expect(&ctx.indices));
        let dispatcher = Dispatcher {
            daemons: Arc::new(Daemons::new(ctx.clone(), pause.clone())),
            ctx: ctx.clone(),
            limiter: None,
            pause,
            listing,
        };
        let capture = Capture::default();
        let (events, rx) = mpsc::channel::<Watched>(100);
        let dispatcher = tasks::spawn(dispatcher.run(rx).with_subscriber(capture.subscriber()));
        Setup {
            hooks,
            patcher,
            capture,
            events,
            dispatcher,
            ctx,
        }
    }

    impl Setup {
        async fn send(&self, event_type: EventType, body: Value) {
            let watched = Watched::Event(event(event_type, body));
            self.events.send(watched).await.unwrap();
        }

        /// Let the clock run (paused in the tests: it jumps when all tasks wait).
        async fn pass(&self, seconds: f64) {
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        }

        async fn stop(self) {
            drop(self.events);
            self.dispatcher.await.unwrap();
        }

        /// How often the throttling has said that it is over.
        fn throttling_over(&self) -> usize {
            let over = "Throttling is over. Switching back to normal operations.";
            let lines = self.capture.messages(Level::INFO);
            lines.iter().filter(|line| *line == over).count()
        }
    }

    fn spec(x: i64) -> Value {
        json!({"x": x})
    }

    #[test]
    fn idle_workers_end_when_their_time_is_up_unless_they_resumed() {
        let mut routes = Routes::default();
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        for (key, until) in [("a", 5), ("b", 6), ("c", 7)] {
            let idle = Idle {
                errors_in_a_row: 2,
                until: at(until),
            };
            routes.idle.insert(ObjectId::new(key), idle);
            routes.idling.push_back((at(until), ObjectId::new(key)));
        }
        // b resumed (its entry left the idle ones) and is idle again, until later.
        routes.idle.get_mut(&ObjectId::new("b")).unwrap().until = at(9);
        routes.idling.push_back((at(9), ObjectId::new("b")));
        routes.end_idle(at(6));
        let mut idle: Vec<String> = routes.idle.keys().map(|id| id.to_string()).collect();
        idle.sort();
        assert_eq!(idle, ["b", "c"]);
        routes.end_idle(at(8));
        assert_eq!(
            routes
                .idle
                .keys()
                .map(|id| id.to_string())
                .collect::<Vec<_>>(),
            ["b"]
        );
        routes.end_idle(at(9));
        assert!(routes.idle.is_empty() && routes.idling.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn every_event_is_seen_in_order_but_changes_only_in_their_latest_state() {
        let setup = start(Pause::new(0));
        // Queued before the worker starts: one batch.
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup
            .send(EventType::Modified, object("a", "2", spec(2)))
            .await;
        setup
            .send(EventType::Modified, object("a", "3", spec(3)))
            .await;
        setup.pass(0.1).await;
        let events: Vec<(String, Option<EventType>)> = (setup.hooks.calls().into_iter())
            .filter(|c| c.kind == HandlerKind::Watching)
            .map(|c| (c.version, c.event_type))
            .collect();
        assert_eq!(
            events,
            [
                ("1".into(), Some(EventType::Listed)),
                ("2".into(), Some(EventType::Modified)),
                ("3".into(), Some(EventType::Modified)),
            ]
        );
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["3"]);
        let applied = setup.patcher.applied();
        assert_eq!(applied.len(), 1, "one write for the cycle: {applied:?}");
        assert!(applied[0]["metadata"]["annotations"]
            .get("kopf.zalando.org/last-handled-configuration")
            .is_some());
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_state_waits_for_our_own_change() {
        let setup = start(Pause::new(0));
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.pass(0.1).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        // The stream lags behind our patch: this state has no diff base yet and would
        // look like a creation again.
        setup
            .send(EventType::Modified, object("a", "2", spec(1)))
            .await;
        setup.pass(1.0).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        // Our own change arrives: it is the latest state, and nothing has changed.
        let ours = setup.patcher.patched(&object("a", "1", spec(1)));
        assert_eq!(ours["metadata"]["resourceVersion"], "100");
        setup.send(EventType::Modified, ours).await;
        setup.pass(10.0).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        assert_eq!(setup.patcher.applied().len(), 1);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn without_our_own_change_the_latest_state_is_processed_after_the_timeout() {
        let setup = start(Pause::new(0));
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.pass(0.1).await;
        setup
            .send(EventType::Modified, object("a", "2", spec(1)))
            .await;
        setup.pass(4.0).await; // the consistency timeout is 5 s
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        setup.pass(2.0).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1", "2"]);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_write_errors_wait_ever_longer_and_a_success_starts_over() {
        let setup = start(Pause::new(0));
        for _ in 0..3 {
            setup.patcher.fail_next(500);
        }
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.pass(10.0).await; // 1 + 1 + 2 seconds of throttling, then written
        let written = setup.patcher.applied().len();
        assert!(written > 0);
        setup.patcher.fail_next(500);
        setup
            .send(EventType::Modified, object("a", "2", spec(2)))
            .await;
        setup.pass(10.0).await;
        let delays: Vec<String> = (setup.capture.messages(Level::ERROR).iter())
            .map(|message| {
                message
                    .split(" due to")
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            delays,
            [
                "Throttling for 1 seconds",
                "Throttling for 1 seconds",
                "Throttling for 2 seconds",
                "Throttling for 1 seconds"
            ]
        );
        assert!(setup.patcher.applied().len() > written);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn events_during_the_throttling_make_it_say_when_it_is_over() {
        let setup = start(Pause::new(0));
        setup.patcher.fail_next(500);
        let created = object("a", "1", spec(1));
        setup.send(EventType::Listed, created.clone()).await;
        setup.pass(0.5).await;
        setup
            .send(EventType::Modified, object("a", "2", spec(2)))
            .await;
        setup.pass(0.4).await;
        assert_eq!(setup.throttling_over(), 0);
        setup.pass(0.2).await;
        assert_eq!(setup.throttling_over(), 1);
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_cycle_that_succeeds_without_writing_starts_the_throttling_over() {
        // As Kopf's throttler: any successful processing resets it, not only a write.
        let setup = start(Pause::new(0));
        let created = object("a", "1", spec(1));
        setup.send(EventType::Listed, created.clone()).await;
        setup.pass(0.5).await;
        let handled = setup.patcher.patched(&created); // our own change's event: nothing to do
        setup.send(EventType::Modified, handled.clone()).await;
        setup.pass(0.5).await;
        let written = setup.patcher.applied().len();
        let at = |version: &str, stored: Option<&str>| {
            let mut body = handled.clone();
            body["metadata"]["resourceVersion"] = json!(version);
            if let Some(stored) = stored {
                let key = "kopf.zalando.org/last-handled-configuration";
                body["metadata"]["annotations"][key] = json!(stored);
            }
            body
        };
        setup
            .send(EventType::Modified, at("201", Some("not JSON")))
            .await;
        setup.pass(1.5).await; // failed twice: 1 + 1 s
        setup.send(EventType::Modified, at("202", None)).await;
        setup.pass(1.5).await; // the retry takes the mended state: handled, nothing written
        setup
            .send(EventType::Modified, at("203", Some("not JSON")))
            .await;
        setup.pass(0.5).await;
        let delays: Vec<String> = (setup.capture.messages(Level::ERROR).iter())
            .filter_map(|message| message.split(" due to").next())
            .map(str::to_owned)
            .collect();
        assert_eq!(
            delays,
            [
                "Throttling for 1 seconds",
                "Throttling for 1 seconds",
                "Throttling for 1 seconds"
            ]
        );
        assert_eq!(setup.patcher.applied().len(), written);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_is_retried_without_calling_the_handler_again() {
        let setup = start(Pause::new(0));
        setup.patcher.fail_next(500);
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.pass(0.5).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        assert!(setup.patcher.applied().is_empty());
        assert_eq!(
            setup.capture.messages(Level::ERROR),
            ["Throttling for 1 seconds due to an unexpected error: HTTP 500 InternalError: the fake API refuses"]
        );
        setup.pass(1.0).await;
        assert_eq!(setup.throttling_over(), 0, "nothing came meanwhile");
        let applied = setup.patcher.applied();
        assert_eq!(applied.len(), 1, "the same patch, written now: {applied:?}");
        assert!(applied[0]["metadata"]["annotations"]
            .get("kopf.zalando.org/last-handled-configuration")
            .is_some());
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn while_paused_events_are_dropped() {
        let pause = Pause::new(1); // paused until the voter says otherwise
        let setup = start(pause.clone());
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.pass(1.0).await;
        assert!(setup.hooks.calls().is_empty());
        pause.vote(0, false);
        setup
            .send(EventType::Listed, object("a", "2", spec(1)))
            .await;
        setup.pass(1.0).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Watching), ["2"]);
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["2"]);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_object_is_forgotten_and_idle_workers_exit() {
        let setup = start(Pause::new(0));
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup
            .send(EventType::Listed, object("b", "1", spec(1)))
            .await;
        setup.pass(0.1).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1", "1"]);
        for name in ["a", "b"] {
            let ours = setup.patcher.patched(&object(name, "1", spec(1)));
            setup.send(EventType::Modified, ours).await;
        }
        setup
            .send(EventType::Deleted, object("a", "5", spec(1)))
            .await;
        setup.pass(0.1).await;
        assert_eq!(*setup.hooks.forgotten.lock().unwrap(), ["uid-a"]);
        // b's worker exits when idle; a successor takes b's next events.
        setup.pass(20.0).await;
        let mut later = setup.patcher.patched(&object("b", "1", spec(1)));
        later["metadata"]["resourceVersion"] = json!("200");
        setup.send(EventType::Modified, later).await;
        setup.pass(0.1).await;
        let events = |name| setup.hooks.calls_for(HandlerKind::Watching, Some(name));
        assert_eq!(events("a"), ["1", "100", "5"]);
        assert_eq!(events("b"), ["1", "101", "200"]);
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1", "1"]);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_streams_end_busy_workers_exit_without_idling_out() {
        let setup = start(Pause::new(0));
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.pass(0.1).await;
        let started = Instant::now();
        setup.stop().await;
        // Neither waiting for them to idle out, nor cut at the exit timeout.
        let queueing = Settings::default().queueing;
        let soon = queueing.idle_timeout.min(queueing.exit_timeout) / 2.0;
        assert!(started.elapsed() < Duration::from_secs_f64(soon));
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_at_rest_is_not_resumed_again_by_a_relisting() {
        let resuming = Handlers {
            changing: vec![
                testing::handler(json!({"index": 0, "id": "create_fn", "reason": "create"})),
                testing::handler(
                    json!({"index": 1, "id": "resume_fn", "reason": null, "initial": true}),
                ),
            ],
            ..Default::default()
        };
        let setup = start_with(resuming, Pause::new(0));
        setup
            .send(EventType::Listed, object("a", "1", spec(1)))
            .await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        let ours = setup.patcher.patched(&object("a", "1", spec(1)));
        setup.send(EventType::Modified, ours.clone()).await;
        setup.pass(20.0).await; // the worker idles out: the object's memory rests
                                // A re-listing (after a pause, or a 410 Gone): the object is as we left it.
        setup.send(EventType::Listed, ours).await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
        assert!(setup.hooks.forgotten.lock().unwrap().is_empty());
        setup.stop().await;
    }

    fn labelled(name: &str, version: &str, app: &str) -> Value {
        let mut body = object(name, version, spec(1));
        body["metadata"]["labels"] = json!({"app": app});
        body
    }

    /// The index `by_app` as `app: [names]` (the fake indexes an object's name by its app).
    fn by_app(setup: &Setup) -> Vec<(String, Vec<String>)> {
        let index = setup.ctx.indices.index("by_app");
        let index = index.read().unwrap();
        let text = |d: &Datum| match d {
            Datum::Str(s) => s.to_string(),
            other => format!("{other:?}"),
        };
        (index.keys())
            .map(|k| {
                (
                    text(k),
                    index.store(k).unwrap().values().map(text).collect(),
                )
            })
            .collect()
    }

    fn indexed() -> Handlers {
        Handlers {
            indexing: vec![testing::handler(json!({"index": 0, "id": "by_app"}))],
            ..handlers()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn objects_enter_change_and_leave_the_index() {
        let setup = start_with(indexed(), Pause::new(0));
        setup.send(EventType::Listed, labelled("a", "1", "x")).await;
        setup.send(EventType::Listed, labelled("b", "1", "x")).await;
        setup.send(EventType::Listed, labelled("c", "1", "y")).await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            by_app(&setup),
            [
                ("x".into(), names(&["a", "b"])),
                ("y".into(), names(&["c"]))
            ]
        );
        setup
            .send(EventType::Modified, labelled("b", "2", "z"))
            .await;
        setup
            .send(EventType::Deleted, labelled("a", "3", "x"))
            .await;
        setup.pass(0.1).await;
        assert_eq!(
            by_app(&setup),
            [("y".into(), names(&["c"])), ("z".into(), names(&["b"]))]
        );
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn handlers_wait_until_the_initial_listing_is_indexed() {
        let setup = start_with(indexed(), Pause::new(0));
        setup.send(EventType::Listed, labelled("a", "1", "x")).await;
        setup.pass(1.0).await;
        assert_eq!(by_app(&setup).len(), 1, "indexed at once");
        assert!(
            setup.hooks.calls_of(HandlerKind::Watching).is_empty(),
            "but no handler yet"
        );
        assert!(setup.hooks.calls_of(HandlerKind::Changing).is_empty());
        setup.send(EventType::Listed, labelled("b", "1", "y")).await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        assert_eq!(setup.hooks.calls_of(HandlerKind::Watching), ["1", "1"]);
        assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1", "1"]);
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_relisting_lets_the_vanished_objects_go() {
        let setup = start_with(indexed(), Pause::new(0));
        setup.send(EventType::Listed, labelled("a", "1", "x")).await;
        setup.send(EventType::Listed, labelled("b", "1", "y")).await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        // A re-listing (after a pause, or a 410 Gone): b was deleted meanwhile.
        setup.send(EventType::Listed, labelled("a", "1", "x")).await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        assert_eq!(by_app(&setup), [("x".to_owned(), vec!["a".to_owned()])]);
        assert_eq!(*setup.hooks.forgotten.lock().unwrap(), ["uid-b"]);
        let events = setup.hooks.calls_for(HandlerKind::Watching, Some("b"));
        assert_eq!(events, ["1"], "no event handler for the vanishing");
        setup.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_index_function_keeps_the_object_out_for_its_delay() {
        let setup = start_with(indexed(), Pause::new(0));
        setup.send(EventType::Listed, labelled("a", "1", "x")).await;
        setup.events.send(Watched::Synced).await.unwrap();
        setup.pass(0.1).await;
        assert_eq!(by_app(&setup).len(), 1);
        setup.hooks.answer(Outcome {
            final_: false,
            delay: Some(0.3),
            exception: Some("not now".into()),
            ..Default::default()
        });
        setup
            .send(EventType::Modified, labelled("a", "2", "x"))
            .await;
        setup.pass(0.1).await;
        assert!(by_app(&setup).is_empty(), "out while it fails temporarily");
        setup
            .send(EventType::Modified, labelled("a", "3", "x"))
            .await;
        setup.pass(0.1).await;
        assert!(by_app(&setup).is_empty(), "and until its delay has passed");
        let indexings = setup.hooks.calls_of(HandlerKind::Indexing);
        assert_eq!(indexings, ["1", "2"], "not called while kept out");
        // The handlers' delays are on the wall clock (as they are stored): let it pass.
        std::thread::sleep(Duration::from_millis(400));
        setup
            .send(EventType::Modified, labelled("a", "4", "x"))
            .await;
        setup.pass(0.1).await;
        assert_eq!(by_app(&setup).len(), 1, "back after the delay");
        setup.stop().await;
    }
}
