//! One container instance's reader: it follows the log (in a place of
//! `settings.logs.max_streams`), matches each line against the pod's matching handlers, and
//! queues the matched lines for the handling task, waiting while the queue is full.

use super::{Line, Logs, Pod};
use crate::client::backoff;
use crate::client::logs::{LogFollower, LogLine, Position};
use crate::object_log;
use crate::util::encoding::to_python_repr;
use crate::util::logging::ObjectRef;
use chrono::SecondsFormat;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::Level;

/// An ended container's log is read until no line has come for this long (or the server
/// ends the stream): a simulated node's streams never end by themselves.
const DRAIN_IDLE: Duration = Duration::from_secs(1);

/// A stream that ended while its container runs is opened again after this long.
const REOPEN_DELAY: Duration = Duration::from_millis(500);

/// Why a reader stopped reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Its container ended, and its log was read to the end.
    Drained,
    /// The pod is gone (or the operator exits).
    Gone,
}

pub(super) struct Reader {
    pub(super) logs: Arc<Logs>,
    pub(super) pod: Arc<Pod>,
    pub(super) container: String,
    pub(super) token: u64,
    pub(super) draining: watch::Receiver<bool>,
    /// Its container's lines wait for room in the queue (warned about once per stall).
    pub(super) behind: bool,
}

impl Reader {
    pub(super) async fn run(mut self) {
        let place = self.logs.streams.clone().acquire_owned().await;
        let ended = match place {
            Ok(_place) => {
                let _counted = StreamGauge::start(&self.logs.ctx.resource.name());
                self.follow().await
            }
            Err(_) => Ended::Gone,
        };
        let mut state = self.pod.state();
        if (state.readers.get(&self.container)).is_some_and(|r| r.token == self.token) {
            state.readers.remove(&self.container);
            // Its container ran again while it drained (and no event of the pod may follow).
            if ended == Ended::Drained && self.logs.wanted(&state, &self.container) {
                self.logs
                    .start_reader(&self.pod, &mut state, &self.container);
            }
        }
        drop(state);
        self.pod.wake.notify_one();
    }

    fn object(&self) -> ObjectRef {
        ObjectRef::of(&self.pod.state().body)
    }

    async fn follow(&mut self) -> Ended {
        let start = (self.pod.state().read.get(&self.container).cloned()).unwrap_or_default();
        let pod = &self.pod;
        let mut follower = LogFollower::new(&pod.namespace, &pod.name, &self.container, start);
        let credentials = self.logs.credentials.clone();
        let counters =
            (crate::metrics::get()).map(|m| m.log_counters(&self.logs.ctx.resource.name()));
        let mut failures = 0u32;
        let mut pauses: Option<backoff::ForEver> = None;
        loop {
            let before = follower.position().clone();
            let draining = *self.draining.borrow_and_update();
            let next = if draining {
                match tokio::time::timeout(DRAIN_IDLE, follower.next(&credentials)).await {
                    Ok(next) => next,
                    Err(_) => return Ended::Drained, // read to its end
                }
            } else {
                tokio::select! {
                    next = follower.next(&credentials) => next,
                    // `next()` is cancel-safe: a line half-read waits in the follower.
                    changed = self.draining.changed() => match changed {
                        Ok(()) => continue,
                        Err(_) => return Ended::Gone, // its pod's record let it go
                    },
                }
            };
            match next {
                Ok(Some(line)) => {
                    failures = 0;
                    pauses = None;
                    let matched = self
                        .deliver(line, before, follower.position().clone())
                        .await;
                    if let Some(counters) = &counters {
                        counters.read.inc();
                        if matched {
                            counters.matched.inc();
                        }
                    }
                }
                Ok(None) if draining => return Ended::Drained,
                Ok(None) => tokio::time::sleep(REOPEN_DELAY).await,
                Err(kube::Error::Api(status)) if status.code == 404 => return Ended::Gone,
                Err(error) => {
                    failures += 1;
                    let container = to_python_repr(&Value::String(self.container.clone()));
                    let error = crate::util::errors::chain(&error);
                    let object = self.object();
                    let line = format!(
                        "The log of container {container} could not be read (retrying): {error}"
                    );
                    if failures == 1 {
                        object_log!(Level::WARN, &object, "{line}");
                    } else {
                        object_log!(Level::DEBUG, &object, "{line}");
                    }
                    if draining {
                        return Ended::Drained;
                    }
                    let backoffs = &self.logs.ctx.settings.networking.error_backoffs;
                    let row = pauses.get_or_insert_with(|| backoff::ForEver::new(backoffs));
                    let pause = row.next_pause().unwrap_or(1.0);
                    tokio::time::sleep(Duration::from_secs_f64(pause)).await;
                }
            }
        }
    }

    /// Match the line; queue it for its handlers if any matches, waiting for room. The
    /// container's log counts as read up to it once it is queued (or matched nothing).
    /// Whether it matched.
    async fn deliver(&mut self, line: LogLine, before: Position, after: Position) -> bool {
        let read = after;
        let handlers: Vec<usize> = {
            let mut state = self.pod.state();
            let all = self.logs.handlers();
            let handlers: Vec<usize> = (state.matching.iter().copied())
                .filter(|&at| all[at].follows(&self.container) && all[at].matches(&line.text))
                .collect();
            if handlers.is_empty() {
                // Most lines: one lock, and no allocation for the position.
                state.advance(&self.container, read);
                return false;
            }
            handlers
        };
        let timestamp = line.time.to_rfc3339_opts(SecondsFormat::Micros, true);
        let text = match String::from_utf8(line.text) {
            Ok(text) => text,
            Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
        };
        let mut line = Some(Line {
            container: self.container.clone(),
            before,
            text,
            timestamp,
            handlers,
        });
        let capacity = self.logs.ctx.settings.logs.queue_size.get();
        loop {
            let room = self.pod.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = self.pod.state();
                if state.queue.len() < capacity {
                    if state.queue.is_empty() {
                        self.behind = false; // caught up: a new stall is warned about again
                    }
                    state.queue.extend(line.take());
                    state.advance(&self.container, read);
                    drop(state);
                    self.pod.wake.notify_one();
                    return true;
                }
            }
            if !self.behind {
                self.behind = true;
                let container = to_python_repr(&Value::String(self.container.clone()));
                object_log!(
                    Level::WARN,
                    &self.object(),
                    "The log handlers fall behind the log of container {container}: {capacity} matched lines wait (settings.logs.queue_size); it is read on when they catch up."
                );
            }
            room.await;
        }
    }
}

/// A followed log counted in the metrics (if enabled) for as long as its reader reads it
/// (also when the reader is aborted).
struct StreamGauge(Option<String>);

impl StreamGauge {
    fn start(resource: &str) -> Self {
        StreamGauge(crate::metrics::get().map(|metrics| {
            metrics.log_streams(resource, 1);
            resource.to_owned()
        }))
    }
}

impl Drop for StreamGauge {
    fn drop(&mut self) {
        if let (Some(resource), Some(metrics)) = (&self.0, crate::metrics::get()) {
            metrics.log_streams(resource, -1);
        }
    }
}
