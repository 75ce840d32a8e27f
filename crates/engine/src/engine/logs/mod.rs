//! Log handlers (`@kopf.on.log`): the lines of the pods' containers' logs, matched here and
//! handled in Python. For each pod that some log handler matches, one reader per running
//! container that a matching handler follows (`reading`), and one task that calls the
//! handlers for the matched lines of the pod, one line after another (`handling`). A line
//! that matches no handler never reaches Python.
//!
//! Here: which pods and containers are followed (`Logs::observe`, for every event of a
//! pod), and what is kept per pod: its latest body, its matched lines waiting for the
//! handlers, and how far each container's log was read. A container's log is read once,
//! from its start, in order: a stream that breaks, or is stopped by the operator pausing,
//! resumes at the first line not handled yet. A container that ends (or restarts) is read to
//! its end; a deleted pod's lines already read are still handled. Handlers get the lines
//! logged while they match the pod: a container followed again after no handler matched is
//! followed from then on.

use crate::client::credentials::Credentials;
use crate::client::logs::Position;
use crate::engine::context::ResourceContext;
use crate::ha::pausing::Pause;
use crate::intents::handlers::{LogHandler, Match};
use crate::intents::hooks::{HandlerKind, Invocation};
use crate::util::tasks;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, Notify, Semaphore};

mod handling;
mod reading;

/// A matched line of a container, waiting for its handlers.
struct Line {
    container: String,
    /// Where its log is to be read again from if this line is not handled.
    before: Position,
    text: String,
    /// RFC 3339, UTC, in microseconds.
    timestamp: String,
    /// The handlers it matched (positions in `ResourceContext::logging`), in their order.
    handlers: Vec<usize>,
}

/// Tells the readers apart (a reader that ends forgets itself, not its successor).
static NEXT_READER: AtomicU64 = AtomicU64::new(1);

/// A reader of one container's log.
struct Reader {
    token: u64,
    /// Raised when the container has ended: it reads what is left, then stops.
    draining: watch::Sender<bool>,
    task: tokio::task::AbortHandle,
}

/// What is kept for one pod.
#[derive(Default)]
struct PodState {
    body: Arc<Value>,
    /// The log handlers that match the pod now (positions in `ResourceContext::logging`).
    matching: Arc<[usize]>,
    /// By container name. A reader follows its container across restarts (the server
    /// serves the running instance's log; the position's time tells what is new).
    readers: HashMap<String, Reader>,
    /// How far each container's log was read, rewound to the first line not handled when
    /// lines are dropped unhandled.
    read: HashMap<String, Position>,
    queue: VecDeque<Line>,
    /// The handling task runs (while there are readers or lines).
    handling: bool,
    /// The line being handled now, if its handlers have not all succeeded (to rewind to).
    current: Option<(String, Position)>,
    /// The pod is gone: no new readers.
    gone: bool,
    /// Containers no longer followed because the handlers stopped matching: if they are
    /// followed again, it is from then on (a handler gets the lines logged while it matches).
    unfollowed: std::collections::HashSet<String>,
}

impl PodState {
    /// Lines dropped unhandled: their containers' logs are read again from the first of them.
    fn rewind(&mut self, container: &str, before: &Position) {
        self.advance(container, before.clone());
    }

    /// The container's log counts as read up to this position.
    fn advance(&mut self, container: &str, position: Position) {
        match self.read.get_mut(container) {
            Some(read) => *read = position,
            None => {
                self.read.insert(container.to_owned(), position);
            }
        }
    }

    /// Drop the waiting lines, to read them again later.
    fn drop_queue(&mut self) {
        let mut rewound = std::collections::HashSet::new();
        for line in std::mem::take(&mut self.queue) {
            if rewound.insert(line.container.clone()) {
                self.rewind(&line.container, &line.before);
            }
        }
    }
}

struct Pod {
    namespace: String,
    name: String,
    state: Mutex<PodState>,
    /// Wakes the handling task: a line came, the readers ended, or the operator pauses.
    wake: Notify,
    /// Wakes the readers waiting for room in the queue.
    room: Notify,
}

impl Pod {
    fn state(&self) -> std::sync::MutexGuard<'_, PodState> {
        self.state.lock().expect("not poisoned")
    }
}

/// The log handlers of one resource's stream (one dispatcher), and the pods they follow.
pub struct Logs {
    ctx: Arc<ResourceContext>,
    credentials: Arc<Credentials>,
    pause: Arc<Pause>,
    /// `settings.logs.max_streams`: a place for each container followed.
    streams: Arc<Semaphore>,
    pods: Mutex<HashMap<String, Arc<Pod>>>,
    /// Paused or exiting: no reader starts, no handler is called.
    halted: AtomicBool,
    closing: AtomicBool,
}

impl Logs {
    /// None followed yet; they follow the operator's pause.
    pub fn new(
        ctx: Arc<ResourceContext>,
        credentials: Arc<Credentials>,
        pause: Arc<Pause>,
    ) -> Self {
        let streams = Arc::new(Semaphore::new(ctx.settings.logs.max_streams.get()));
        Self {
            ctx,
            credentials,
            pause,
            streams,
            pods: Mutex::default(),
            halted: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        }
    }

    fn halted(&self) -> bool {
        self.halted.load(Ordering::SeqCst)
    }

    fn handlers(&self) -> &[Arc<LogHandler>] {
        &self.ctx.logging
    }

    /// A pod's new state: follow the containers that run and that its matching handlers
    /// follow; let the ended ones be read to their end; stop the others.
    pub async fn observe(self: &Arc<Self>, key: &str, body: &Arc<Value>) {
        let matching = self.matching(body).await;
        let pod = {
            let mut pods = self.pods.lock().expect("not poisoned");
            match pods.get(key) {
                Some(pod) => pod.clone(),
                None if matching.is_empty() => return,
                None => {
                    let text = |field: &str| {
                        (crate::util::dicts::meta(body, field).and_then(Value::as_str))
                            .unwrap_or_default()
                            .to_owned()
                    };
                    let pod = Arc::new(Pod {
                        namespace: text("namespace"),
                        name: text("name"),
                        state: Mutex::default(),
                        wake: Notify::new(),
                        room: Notify::new(),
                    });
                    pods.insert(key.to_owned(), pod.clone());
                    pod
                }
            }
        };
        let containers = containers(body);
        let mut state = pod.state();
        state.body = body.clone();
        state.matching = matching.clone().into();
        let followed = |name: &str| (matching.iter()).any(|&at| self.handlers()[at].follows(name));
        // Readers of containers that ended read to the end; those that no handler follows
        // any more stop now (their lines read so far are still handled).
        let mut unfollowed = Vec::new();
        state.readers.retain(|name, reader| {
            match containers.iter().find(|c| c.name == *name) {
                Some(container) if followed(name) => {
                    // (Running again after it ended: followed on, not drained.)
                    reader.draining.send_if_modified(|draining| {
                        let changed = *draining == container.running;
                        *draining = !container.running;
                        changed
                    });
                    true
                }
                _ => {
                    reader.task.abort();
                    unfollowed.push(name.clone());
                    false
                }
            }
        });
        state.unfollowed.extend(unfollowed);
        if self.halted() || state.gone {
            return;
        }
        for container in containers.iter().filter(|c| c.running && followed(&c.name)) {
            if !state.readers.contains_key(&container.name) {
                self.start_reader(&pod, &mut state, &container.name);
            }
        }
    }

    fn start_reader(self: &Arc<Self>, pod: &Arc<Pod>, state: &mut PodState, container: &str) {
        if state.unfollowed.remove(container) {
            state
                .read
                .insert(container.to_owned(), Position::since(chrono::Utc::now()));
        }
        let (draining, drained) = watch::channel(false);
        let token = NEXT_READER.fetch_add(1, Ordering::Relaxed);
        let reader = reading::Reader {
            logs: self.clone(),
            pod: pod.clone(),
            container: container.to_owned(),
            token,
            draining: drained,
            behind: false,
        };
        let task = tasks::spawn(reader.run()).abort_handle();
        let reader = Reader {
            token,
            draining,
            task,
        };
        state.readers.insert(container.to_owned(), reader);
        if !state.handling {
            state.handling = true;
            tasks::spawn(handling::handle(self.clone(), pod.clone()));
        }
    }

    /// Whether a reader of this container should run now: a handler that matches the pod
    /// follows it, and it runs (by the pod's latest status).
    fn wanted(&self, state: &PodState, container: &str) -> bool {
        let followed = (state.matching.iter()).any(|&at| self.handlers()[at].follows(container));
        let running = (containers(&state.body).iter()).any(|c| c.name == container && c.running);
        followed && running && !state.gone && !self.halted()
    }

    /// The log handlers that match the pod: the static filters here, the callbacks in one
    /// trip to Python for those left undecided.
    async fn matching(&self, body: &Arc<Value>) -> Vec<usize> {
        let verdicts: Vec<Match> = (self.handlers().iter())
            .map(|h| h.filters.prematch(body, None))
            .collect();
        let asking: Vec<usize> = (verdicts.iter().enumerate())
            .filter(|(_, m)| **m == Match::AskPython)
            .map(|(at, _)| at)
            .collect();
        let mut answers = HashMap::new();
        if !asking.is_empty() {
            let calls = (asking.iter())
                .map(|&at| self.invocation(at, body.clone()))
                .collect();
            let said = self.ctx.hooks.check_callbacks(calls).await;
            answers.extend(asking.into_iter().zip(said));
        }
        (verdicts.into_iter().enumerate())
            .filter(|(at, m)| *m == Match::Yes || answers.get(at).copied().unwrap_or(false))
            .map(|(at, _)| at)
            .collect()
    }

    fn invocation(&self, at: usize, body: Arc<Value>) -> Invocation {
        let index = self.handlers()[at].index;
        Invocation::new(HandlerKind::Logging, index, self.ctx.resource.clone(), body)
    }

    /// The pod is gone from the cluster: its readers read what is left (the server ends
    /// their streams), its lines read are handled, and then it is forgotten.
    pub fn forget(&self, key: &str) {
        let removed = self.pods.lock().expect("not poisoned").remove(key);
        if let Some(pod) = removed {
            let mut state = pod.state();
            state.gone = true;
            for reader in state.readers.values() {
                reader.draining.send_replace(true);
            }
            pod.wake.notify_one();
        }
    }

    /// The operator pauses (or resumes): all readers stop, and the lines not handled yet are
    /// read again after the pause (the streams list the pods again and restart them).
    pub fn set_paused(&self, paused: bool) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        self.halted.store(paused, Ordering::SeqCst);
        if paused {
            self.halt_all();
        }
    }

    /// The operator exits: no more lines are read or handled (a call in progress ends first).
    pub async fn stop_all(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.halted.store(true, Ordering::SeqCst);
        self.halt_all();
        // The handling tasks end after their calls in progress: wait for them as the
        // daemons are waited for, up to the exit timeout.
        let pods = self.all_pods();
        let timeout = std::time::Duration::from_secs_f64(self.ctx.settings.queueing.exit_timeout);
        let _ = tokio::time::timeout(timeout, async {
            for pod in pods {
                while pod.state().handling {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        })
        .await;
    }

    fn all_pods(&self) -> Vec<Arc<Pod>> {
        let pods = self.pods.lock().expect("not poisoned");
        pods.values().cloned().collect()
    }

    fn halt_all(&self) {
        let pods = self.all_pods();
        for pod in pods {
            let mut state = pod.state();
            for (_, reader) in state.readers.drain() {
                reader.task.abort();
            }
            state.drop_queue();
            drop(state);
            pod.wake.notify_one();
            pod.room.notify_waiters();
        }
    }
}

/// A container of a pod, as its status tells.
#[derive(Debug, Clone, PartialEq)]
struct Container {
    name: String,
    running: bool,
}

/// The pod's containers (init containers first), as their statuses tell.
fn containers(body: &Value) -> Vec<Container> {
    let lists = ["initContainerStatuses", "containerStatuses"];
    let statuses = (lists.iter())
        .filter_map(|list| body.pointer(&format!("/status/{list}"))?.as_array())
        .flatten();
    (statuses.filter_map(|status| {
        let state = status.get("state")?;
        Some(Container {
            name: status.get("name")?.as_str()?.to_owned(),
            running: state.get("running").is_some(),
        })
    }))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_are_read_from_the_status() {
        let body = json!({"status": {
            "initContainerStatuses": [
                {"name": "init", "containerID": "c://1", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [
                {"name": "main", "containerID": "c://2", "state": {"running": {}}},
                {"name": "side", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        }});
        let found = containers(&body);
        let brief: Vec<(&str, bool)> = (found.iter())
            .map(|c| (c.name.as_str(), c.running))
            .collect();
        assert_eq!(brief, [("init", false), ("main", true), ("side", false)]);
        assert!(containers(&json!({"status": {}})).is_empty());
    }

    fn position(seconds: i64) -> Position {
        let mut position = Position::default();
        position.read(chrono::DateTime::from_timestamp(seconds, 0).unwrap());
        position
    }

    fn line(container: &str, before: Position) -> Line {
        Line {
            container: container.into(),
            before,
            text: String::new(),
            timestamp: String::new(),
            handlers: vec![0],
        }
    }

    #[test]
    fn lines_dropped_unhandled_are_read_again_from_the_first_of_each_container() {
        let mut state = PodState::default();
        state.read.insert("main".into(), position(30));
        state.read.insert("side".into(), position(20));
        state.read.insert("quiet".into(), position(5));
        state.queue.push_back(line("main", position(10)));
        state.queue.push_back(line("side", position(15)));
        state.queue.push_back(line("main", position(11)));
        state.drop_queue();
        assert!(state.queue.is_empty());
        assert_eq!(state.read["main"], position(10));
        assert_eq!(state.read["side"], position(15));
        assert_eq!(state.read["quiet"], position(5)); // nothing of it waited
    }
}
