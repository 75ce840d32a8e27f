//! Per-object queues: the events of one resource's stream are routed to one
//! worker per object, so each object's events are handled in order, one cycle
//! at a time, while different objects proceed concurrently. A worker takes all
//! the events that queued up while it was busy: `on.event` handlers see each
//! of them, change handlers only the latest state. Workers exit when idle; what
//! the engine remembers of an object outlives them.

use crate::client::applying;
use crate::client::credentials::Credentials;
use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::{Memory, ResourceContext};
use crate::engine::daemons::{Daemons, ObjectDaemons};
use crate::engine::processing;
use crate::ha::pausing::Pause;
use crate::object_log;
use crate::state::patches::Patch;
use crate::state::StorageError;
use crate::util::logging::ObjectRef;
use crate::util::tasks;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Level;

/// Sleeps longer than this are cut, to re-check the object now and then.
const WAITING_KEEPALIVE: f64 = 600.0;

pub struct Dispatcher {
    pub ctx: Arc<ResourceContext>,
    pub credentials: Arc<Credentials>,
    pub limiter: Option<Arc<Semaphore>>,
    /// The objects' daemons and timers; they outlive the workers.
    pub daemons: Arc<Daemons>,
    /// While paused (peering, leader election), events are dropped: they are listed again.
    pub pause: Arc<Pause>,
}

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

type Memories = Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<Memory>>>>>;

impl Dispatcher {
    /// Route the stream's events to the objects' workers until the stream ends.
    pub async fn run(self, mut events: mpsc::Receiver<RawEvent>) {
        let this = Arc::new(self);
        let memories: Memories = Arc::default();
        let mut queues: HashMap<String, mpsc::UnboundedSender<RawEvent>> = HashMap::new();
        let mut workers = JoinSet::new();
        while let Some(event) = events.recv().await {
            let key = object_key(&event.object);
            // A closed queue means its worker has exited (idle): start a new one.
            let event = match queues.get(&key) {
                Some(queue) => match queue.send(event) {
                    Ok(()) => continue,
                    Err(mpsc::error::SendError(event)) => event,
                },
                None => event,
            };
            let (tx, rx) = mpsc::unbounded_channel();
            tx.send(event).expect("the receiver is right here");
            queues.insert(key.clone(), tx);
            let memory = memories
                .lock()
                .expect("not poisoned")
                .entry(key.clone())
                .or_default()
                .clone();
            tasks::spawn_in(
                &mut workers,
                this.clone().worker(key, rx, memory, memories.clone()),
            );
            queues.retain(|_, q| !q.is_closed());
            while workers.try_join_next().is_some() {}
        }
        // The stream has ended (the operator stops): stop the daemons, and meanwhile
        // let the workers finish their cycles.
        drop(queues);
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

    async fn worker(
        self: Arc<Self>,
        key: String,
        mut rx: mpsc::UnboundedReceiver<RawEvent>,
        memory: Arc<tokio::sync::Mutex<Memory>>,
        memories: Memories,
    ) {
        let ctx = &self.ctx;
        // Held for the worker's whole life: a successor for the same object (started when
        // this one is closing) waits here, so the object's events never overtake each other.
        let mut memory = memory.lock().await;
        let idle = Duration::from_secs_f64(ctx.settings.queueing.idle_timeout);
        let mut expected_version: Option<String> = None;
        let mut consistency_deadline: Option<Instant> = None;
        let mut latest: Option<RawEvent> = None;
        let mut watching_patch = Patch::default();
        let mut error_delays = ctx.settings.queueing.error_delays.iter().copied();
        let mut retry_now = false;
        loop {
            // Wait for news: idly, or until our own patch should have come back;
            // not at all after a throttled error (its delay has been waited already).
            let wait = match (std::mem::take(&mut retry_now), consistency_deadline) {
                (true, _) => Duration::ZERO,
                (false, Some(deadline)) => deadline.saturating_duration_since(Instant::now()),
                (false, None) => idle,
            };
            let first = match tokio::time::timeout(wait, rx.recv()).await {
                Ok(Some(event)) => Some(event),
                Ok(None) => break,
                Err(_) if consistency_deadline.is_some() => None, // proceed without it
                Err(_) if latest.is_none() => {
                    // Idle: refuse new events (they start a successor), finish what is queued.
                    rx.close();
                    continue;
                }
                Err(_) => None,
            };
            let mut batch: Vec<RawEvent> = first.into_iter().collect();
            while let Ok(event) = rx.try_recv() {
                batch.push(event);
            }
            if !self.pause.is_active() {
                latest = None;
                continue;
            }
            // Every event goes to `on.event` handlers; their results are applied with the cycle.
            for event in &batch {
                let seen = version_of(&event.object);
                let deleted = event.event_type == EventType::Deleted;
                if deleted || (expected_version.is_some() && expected_version == seen) {
                    expected_version = None;
                    consistency_deadline = None;
                }
                let patch = processing::process_watching(ctx, event).await;
                watching_patch.merge_from(&Value::Object(patch.merge));
            }
            if let Some(event) = batch.pop() {
                latest = Some(event);
            }
            let Some(event) = latest.clone() else {
                continue;
            };
            if consistency_deadline.is_some_and(|d| d > Instant::now()) {
                continue; // a stale state: our patch is not seen yet
            }
            expected_version = None;
            consistency_deadline = None;
            let deleted = event.event_type == EventType::Deleted;

            let _permit = match &self.limiter {
                Some(limiter) => Some(limiter.clone().acquire_owned().await.expect("never closed")),
                None => None,
            };
            if event.event_type == EventType::Listed {
                memory.noticed_by_listing = true;
            }
            let patch = std::mem::take(&mut watching_patch);
            let object_daemons =
                (!ctx.spawning.is_empty()).then(|| self.daemons.object(&key, &event.object));
            let spawning = object_daemons.as_ref().map(|o| (&self.daemons, o));
            let object = ObjectRef::of(&event.object);
            let processed =
                processing::process_changing(ctx, &mut memory, &event, patch, spawning).await;
            let cycle = match processed {
                Ok(cycle) => cycle,
                Err(error) if deleted => {
                    // Nothing to retry on: the object is gone.
                    object_log!(Level::ERROR, &object, "{error}");
                    Default::default()
                }
                Err(error) => {
                    self.throttle(&object, &mut error_delays, &CycleError::Storage(error))
                        .await;
                    retry_now = true;
                    continue;
                }
            };
            if deleted {
                memories.lock().expect("not poisoned").remove(&key);
                self.daemons.forget(&key);
                ctx.hooks.forget(&key);
                break;
            }
            let delay = cycle.delays.iter().copied().reduce(f64::min);
            let had_patch = !cycle.patch.is_empty();
            // Kept until applied: handlers that ran must not run again because a write failed.
            let unapplied = cycle.patch.clone();
            match self.apply(&event.object, cycle.patch).await {
                Ok(Some(applied)) => {
                    error_delays = ctx.settings.queueing.error_delays.iter().copied();
                    memory.remaining_patch = applied.remaining;
                    if applied.gone {
                        latest = None;
                        continue;
                    }
                    if let Some(version) = applied.resource_version {
                        expected_version = Some(version);
                        consistency_deadline = Some(
                            Instant::now()
                                + Duration::from_secs_f64(
                                    ctx.settings.persistence.consistency_timeout,
                                ),
                        );
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    memory.remaining_patch = Some(unapplied);
                    self.throttle(&object, &mut error_delays, &error).await;
                    retry_now = true;
                    continue;
                }
            }
            if had_patch && delay.is_some() {
                object_log!(
                    Level::DEBUG,
                    &object,
                    "Sleeping was skipped because of the patch, {} seconds left.",
                    delay.unwrap_or(0.0)
                );
            } else if let Some(delay) = delay {
                let slept = self
                    .sleep_or_wake(
                        &object,
                        delay,
                        &mut rx,
                        &mut latest,
                        &mut watching_patch,
                        object_daemons.as_deref(),
                    )
                    .await;
                if matches!(slept, Slept::Interrupted | Slept::DaemonExited) {
                    // The new state is in `latest` already (or the daemons are to be re-checked).
                    retry_now = true;
                } else {
                    // Slept in full: touch the object, so that a fresh event wakes the handlers.
                    let mut touch = Patch::default();
                    let now = crate::state::progression::format_time(chrono::Utc::now());
                    let touched = ctx.progress.touch(&event.object, &mut touch, Some(&now));
                    let applied = match touched {
                        Ok(()) => self.apply(&event.object, touch).await,
                        Err(error) => Err(CycleError::Storage(error)),
                    };
                    if let Err(error) = &applied {
                        self.throttle(&object, &mut error_delays, error).await;
                        retry_now = true;
                    } else if let Ok(Some(applied)) = applied {
                        expected_version = applied.resource_version;
                        consistency_deadline = Some(
                            Instant::now()
                                + Duration::from_secs_f64(
                                    ctx.settings.persistence.consistency_timeout,
                                ),
                        );
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
                latest = None; // nothing pending: wait for real news
            }
        }
    }

    /// Apply the patch (removing the touch-dummy if set); `None` if there was nothing to apply.
    async fn apply(
        &self,
        body: &Value,
        mut patch: Patch,
    ) -> Result<Option<applying::Applied>, CycleError> {
        if patch.is_empty() {
            return Ok(None);
        }
        self.ctx.progress.touch(body, &mut patch, None)?;
        let finalizer = &self.ctx.settings.persistence.finalizer;
        applying::apply(
            &self.credentials,
            &self.ctx.resource,
            body,
            patch,
            finalizer,
        )
        .await
        .map(Some)
        .map_err(CycleError::Api)
    }

    /// Wait after an unexpected error (ever longer while they repeat); events queue meanwhile.
    async fn throttle(
        &self,
        object: &ObjectRef,
        delays: &mut impl Iterator<Item = f64>,
        error: &CycleError,
    ) {
        let configured = &self.ctx.settings.queueing.error_delays;
        let delay = delays.next().or(configured.last().copied()).unwrap_or(60.0);
        object_log!(
            Level::ERROR,
            object,
            "Throttling for {delay} seconds due to an unexpected error: {error}"
        );
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
    }

    /// Sleep for the handlers' delay, unless new events come first or a daemon exits.
    async fn sleep_or_wake(
        &self,
        object: &ObjectRef,
        delay: f64,
        rx: &mut mpsc::UnboundedReceiver<RawEvent>,
        latest: &mut Option<RawEvent>,
        watching_patch: &mut Patch,
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
            received = tokio::time::timeout(Duration::from_secs_f64(capped), rx.recv()) => received,
            () = exited => return Slept::DaemonExited,
        };
        match received {
            Ok(Some(event)) => {
                let left = capped - started.elapsed().as_secs_f64();
                object_log!(
                    Level::DEBUG,
                    object,
                    "Sleeping was interrupted by new changes, {left} seconds left."
                );
                let patch = processing::process_watching(&self.ctx, &event).await;
                watching_patch.merge_from(&Value::Object(patch.merge));
                *latest = Some(event);
                Slept::Interrupted
            }
            Ok(None) => Slept::Interrupted,
            Err(_) => Slept::Fully,
        }
    }
}

/// Objects are told apart by uid (a re-created object is a new one).
fn object_key(body: &Value) -> String {
    let text = |key: &str| {
        crate::util::dicts::meta(body, key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    match text("uid") {
        "" => format!("{}/{}", text("namespace"), text("name")),
        uid => uid.to_owned(),
    }
}

fn version_of(body: &Value) -> Option<String> {
    crate::util::dicts::meta(body, "resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}
