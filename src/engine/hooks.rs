//! The core's view of the code it does not own: handler functions, callback
//! filters and logging live in Python; the binding layer implements [`Hooks`].

use crate::client::resources::Resource;
use crate::client::watching::EventType;
use crate::engine::handlers::Reason;
use crate::state::diffs::Diff;
use crate::state::progression::Outcome;
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug = 10,
    Info = 20,
    Warning = 30,
    Error = 40,
}

/// Which object a log line or an event is about.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
}

impl ObjectRef {
    pub fn of(body: &Value) -> Self {
        let text =
            |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let meta = body.get("metadata").unwrap_or(&Value::Null);
        Self {
            api_version: text(body, "apiVersion").unwrap_or_default(),
            kind: text(body, "kind").unwrap_or_default(),
            namespace: text(meta, "namespace"),
            name: text(meta, "name"),
            uid: text(meta, "uid"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerKind {
    Changing,
    Watching,
    /// Daemons and timers.
    Spawning,
}

/// What a daemon's or timer's call carries besides the usual: its stopper.
#[derive(Debug, Clone)]
pub struct DaemonCall {
    /// Identifies the daemon's stopper on the Python side (the `stopped` kwarg).
    pub token: u64,
    /// The object's key, for the live body that long-running daemons see.
    pub key: String,
    /// The stopping reasons set so far (bits of `kopf.DaemonStoppingReason`).
    pub reason: u32,
    /// The body differs from the one this daemon's previous call had (else it is not sent).
    pub fresh: bool,
}

/// Everything a handler call needs that the core knows.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub kind: HandlerKind,
    /// The handler's position in the Python registry.
    pub handler: usize,
    pub resource: Arc<Resource>,
    pub body: Arc<Value>,
    /// For `on.event` handlers: how the object came.
    pub event_type: Option<EventType>,
    /// For change handlers: the cause.
    pub reason: Option<Reason>,
    /// Old and new essences and their diff, reduced to the handler's field if it has one.
    pub old: Option<Value>,
    pub new: Option<Value>,
    pub diff: Option<Diff>,
    pub retry: u64,
    pub started: Option<String>,
    pub runtime: f64,
    /// For daemons and timers.
    pub daemon: Option<DaemonCall>,
}

impl Invocation {
    /// A call of this handler with this body, and nothing else known yet.
    pub fn new(
        kind: HandlerKind,
        handler: usize,
        resource: Arc<Resource>,
        body: Arc<Value>,
    ) -> Self {
        Self {
            kind,
            handler,
            resource,
            body,
            event_type: None,
            reason: None,
            old: None,
            new: None,
            diff: None,
            retry: 0,
            started: None,
            runtime: 0.0,
            daemon: None,
        }
    }
}

/// What came back from a handler call.
#[derive(Debug, Clone, Default)]
pub struct Invoked {
    pub outcome: Outcome,
    /// The handler's additions to the `patch` kwarg, as a merge-patch.
    pub patch: Option<Value>,
    /// The call was cancelled (a daemon stopped by force): there is no outcome.
    pub cancelled: bool,
}

/// What the core asks of the Python side.
pub trait Hooks: Send + Sync + 'static {
    fn log_enabled(&self, level: Level) -> bool;
    fn log(&self, level: Level, object: Option<&ObjectRef>, message: &str);
    /// A message of the operator as a whole, to the named logger (Kopf's logger names,
    /// e.g. `kopf._core.engines.peering`, which users filter by).
    fn log_to(&self, logger: &str, level: Level, message: &str) {
        let _ = logger;
        self.log(level, None, message);
    }
    /// Evaluate callback filters (`when=`, callable label values, ...) for these handlers.
    fn check_callbacks(&self, invocations: Vec<Invocation>) -> BoxFuture<'static, Vec<bool>>;
    fn invoke(&self, invocation: Invocation) -> BoxFuture<'static, Invoked>;
    /// The object is gone: drop what the Python side keeps for it (its `memo`).
    fn forget(&self, key: &str);
    /// Ask a handler's callable resource selector which of these resources it wants.
    fn select_resources(
        &self,
        kind: HandlerKind,
        handler: usize,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Vec<bool>>;
    /// Run the `@kopf.on.probe` handlers: their results by handler id.
    fn probe(&self) -> BoxFuture<'static, Value>;
    /// A daemon's or timer's `initial_delay` given as a function: its value for this object.
    fn initial_delay(&self, invocation: Invocation) -> BoxFuture<'static, f64>;
    /// Raise a daemon's `stopped` flag with these reasons (bits), waking its waits.
    fn daemon_stopping(&self, token: u64, reason: u32);
    /// Cancel a daemon's running call (async functions only; threads cannot be killed).
    fn daemon_cancel(&self, token: u64);
    /// The daemon's runner has exited: drop its stopper.
    fn daemon_forget(&self, token: u64);
    /// The object has changed: the long-running daemons' `body` shows the new state.
    fn refresh_body(&self, key: &str, body: &Value);
    /// The operator's own storages, which `settings.persistence` refers to by index.
    fn custom_storages(&self) -> &dyn crate::state::storages::CustomStorages {
        &crate::state::storages::NoCustomStorages
    }
}

/// Log with lazy formatting: the message is built only if the level is enabled.
#[macro_export]
macro_rules! object_log {
    ($hooks:expr, $level:expr, $object:expr, $($arg:tt)+) => {
        if $hooks.log_enabled($level) {
            $hooks.log($level, $object, &format!($($arg)+));
        }
    };
}
