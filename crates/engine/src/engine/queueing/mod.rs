//! Per-object queues: the events of one resource's stream are routed to one
//! worker per object, so each object's events are handled in order, one cycle
//! at a time, while different objects proceed concurrently. A worker takes all
//! the events that queued up while it was busy: `on.event` handlers see each
//! of them, change handlers only the latest state. Workers exit when idle; what
//! the engine remembers of an object outlives them.
//!
//! Here: the `Dispatcher` (routing, successors, idle and resting objects); `inbox`: an
//! object's queue; `worker`: an object's cycles until it idles out; `tests`.

use crate::client::backoff::ForEver;
use crate::client::watching::{EventType, RawEvent, Watched};
use crate::engine::context::{object_key, Memory, ResourceContext, Resting};
use crate::engine::daemons::Daemons;
use crate::engine::logs::Logs;
use crate::ha::pausing::Pause;
use crate::indices::InitialListing;
use crate::util::identity::ObjectId;
use crate::util::tasks;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

mod inbox;
#[cfg(test)]
mod tests;
mod worker;

use inbox::{Inbox, Queued};
use worker::Worker;

/// Routes one resource's stream (in one namespace or all) to the objects' workers.
pub struct Dispatcher {
    /// The resource's context: its handlers, settings and hooks.
    pub ctx: Arc<ResourceContext>,
    /// The operator's limit of objects processed at once (`settings.queueing.worker_limit`).
    pub limiter: Option<Arc<Semaphore>>,
    /// The objects' daemons and timers; they outlive the workers.
    pub daemons: Arc<Daemons>,
    /// The pods' logs followed for the log handlers (none without them).
    pub logs: Option<Arc<Logs>>,
    /// While paused (peering, leader election), events are dropped: they are listed again.
    pub pause: Arc<Pause>,
    /// For a resource with indices: its initial listing, which every handler waits for.
    pub listing: Option<Arc<InitialListing>>,
}

/// How many listed objects may wait for their workers at once. A listing comes faster than
/// handlers take it: unbounded, all of a large listing's bodies sat in the objects' queues
/// at once. The watcher waits meanwhile (in the stream, not in memory); the watch events
/// after the listing are not held back. A few dozen cover the handlers' pace (an object's
/// place is free once its `on.event` handlers are done): more listed no faster, and cost
/// memory (the figures: docs/benchmarks.md, "Figures behind the code").
const LISTING_BACKLOG: usize = 64;

/// The throttling of an object after unexpected errors in a row (boxed: most have none).
type Throttling = Option<Box<ForEver>>;

/// A worker's task has ended (idle, or its queue closed): its object's key, the object's
/// memory unless the object is gone, and the unexpected errors in a row (see `Idle`).
struct Finished {
    key: String,
    memory: Option<Memory>,
    throttling: Throttling,
}

/// What an idle worker keeps besides its object's memory (which rests at once): the errors in
/// a row that its next throttling goes on from, if its object's next event comes within
/// `idle_timeout`; they are forgotten then, when it ends. Only workers with such errors have
/// this: the others have nothing left but the memory. (Thousands are idle at once after a
/// listing: as tasks, each waiting with a timeout, they would cost a kilobyte apiece.)
struct Idle {
    throttling: Throttling,
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

/// A dispatcher's state while it runs: the routes, the listing under way, and the one timer
/// for all idle workers (set for the first of them to end).
struct Dispatching {
    routes: Routes,
    /// The objects listed since the listing began: the others known are gone.
    listed: HashSet<ObjectId>,
    backlog: Arc<Semaphore>,
    known: Known,
    idle_ending: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: Option<Instant>,
}

impl Dispatching {
    fn new(ctx: &ResourceContext) -> Self {
        Dispatching {
            routes: Routes::default(),
            listed: HashSet::new(),
            backlog: Arc::new(Semaphore::new(LISTING_BACKLOG)),
            known: Known::new(ctx),
            idle_ending: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: None,
        }
    }

    /// The timer set for the first idle worker to end, if it is not yet.
    fn arm_idle_ending(&mut self) {
        if let Some(&(until, _)) = self.routes.idling.front() {
            if self.armed != Some(until) {
                self.idle_ending.as_mut().reset(until);
                self.armed = Some(until);
            }
        }
    }
}

impl Dispatcher {
    /// Route the stream's events to the objects' workers until the stream ends.
    pub async fn run(self, mut events: mpsc::Receiver<Watched>) {
        let this = Arc::new(self);
        let mut state = Dispatching::new(&this.ctx);
        while let Some(watched) = this.next(&mut state, &mut events).await {
            match watched {
                Watched::Event(event) => this.dispatch(&mut state, event).await,
                Watched::Synced => this.synced(&mut state),
            }
        }
        state.known.forget();
        this.stop(state.routes).await;
    }

    /// The stream's next event (none: it has ended); meanwhile, the workers that end are let
    /// go, and the idle ones whose time is up end.
    async fn next(
        self: &Arc<Self>,
        state: &mut Dispatching,
        events: &mut mpsc::Receiver<Watched>,
    ) -> Option<Watched> {
        loop {
            state.known.update(&state.routes);
            state.arm_idle_ending();
            tokio::select! {
                watched = events.recv() => return watched,
                Some(finished) = state.routes.workers.join_next() => {
                    if let Ok(finished) = finished {
                        self.finished(&mut state.routes, finished);
                    }
                }
                () = &mut state.idle_ending, if state.armed.is_some() => {
                    state.armed = None;
                    state.routes.end_idle(Instant::now());
                }
            }
        }
    }

    /// An object's event into its queue; a listed one waits for its place in the backlog.
    async fn dispatch(self: &Arc<Self>, state: &mut Dispatching, event: RawEvent) {
        let key = object_key(&event.object);
        let (counted, place) = match event.event_type {
            EventType::Listed => self.listed(state, &key).await,
            _ => (false, None),
        };
        state.known.queued(1);
        self.route(&mut state.routes, key, (event, counted, place));
    }

    /// A listed object: counted in the indices' initial listing (if it is under way), and its
    /// place in the listing's backlog, waited for. Workers that end meanwhile are let go
    /// (their successors may hold places).
    async fn listed(
        self: &Arc<Self>,
        state: &mut Dispatching,
        key: &str,
    ) -> (bool, Option<OwnedSemaphorePermit>) {
        state.listed.insert(ObjectId::new(key));
        let mut counted = false;
        if let Some(listing) = self.listing.as_ref().filter(|l| l.is_listing()) {
            listing.listed();
            counted = true;
        }
        loop {
            tokio::select! {
                permit = state.backlog.clone().acquire_owned() => return (counted, permit.ok()),
                Some(finished) = state.routes.workers.join_next() => {
                    if let Ok(finished) = finished {
                        self.finished(&mut state.routes, finished);
                    }
                }
            }
        }
    }

    /// The listing is complete: the objects known but not listed are gone. Each is told so
    /// through its own queue, in order with its other events.
    fn synced(self: &Arc<Self>, state: &mut Dispatching) {
        let listed = std::mem::take(&mut state.listed); // not kept at the listing's size meanwhile
        let routes = &state.routes;
        let resting = (routes.resting.keys())
            .filter(|id| !listed.contains(*id))
            .map(ObjectId::to_string);
        let busy = (routes.queues.keys())
            .filter(|key| !listed.contains(&ObjectId::new(key)))
            .cloned();
        let vanished: Vec<String> = resting.chain(busy).collect();
        for key in vanished {
            let body = serde_json::json!({"metadata": {"uid": key}});
            let event = RawEvent {
                event_type: EventType::Vanished,
                object: Arc::new(body),
            };
            state.known.queued(1);
            self.route(&mut state.routes, key, (event, false, None));
        }
        if let Some(listing) = &self.listing {
            listing.completed();
        }
    }

    /// The stream has ended (the operator stops): stop the daemons and the logs' followers,
    /// and meanwhile let the workers finish their cycles (within the exit timeout).
    async fn stop(&self, routes: Routes) {
        if let Some(listing) = &self.listing {
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
        let exit_timeout = Duration::from_secs_f64(self.ctx.settings.queueing.exit_timeout);
        let finishing = async {
            let all_joined = async { while workers.join_next().await.is_some() {} };
            if tokio::time::timeout(exit_timeout, all_joined)
                .await
                .is_err()
            {
                workers.abort_all();
            }
        };
        let logs = async {
            if let Some(logs) = &self.logs {
                logs.stop_all().await;
            }
        };
        tokio::join!(self.daemons.stop_all(), logs, finishing);
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
        let throttling = (routes.idle.remove(&id)).and_then(|idle| idle.throttling);
        self.start(routes, key, inbox, memory, throttling);
    }

    /// An object's worker's task has ended: its successor takes over, or its object's memory
    /// rests (and its errors in a row, if any, wait for `idle_timeout`).
    fn finished(self: &Arc<Self>, routes: &mut Routes, finished: Finished) {
        let Finished {
            key,
            memory,
            throttling,
        } = finished;
        if let Some(inbox) = routes.successors.remove(&key) {
            self.start(routes, key, inbox, memory.unwrap_or_default(), throttling);
            return;
        }
        routes.queues.remove(&key);
        shrink(&mut routes.queues);
        let Some(memory) = memory else {
            return;
        };
        let id = ObjectId::new(&key);
        if throttling.is_some() {
            let until = Instant::now() + self.ctx.settings.queueing.idle_duration();
            let idle = Idle { throttling, until };
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
        throttling: Throttling,
    ) {
        let mut worker = Worker::new(self.clone(), key, inbox, memory);
        worker.throttling = throttling;
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
