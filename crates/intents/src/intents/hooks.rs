//! The core's view of the code it does not own: handler functions and callback
//! filters live in Python; the binding layer implements [`Hooks`]. (Log lines go
//! through `tracing`: see `util::logging`.)

use crate::client::resources::Resource;
use crate::client::watching::EventType;
use crate::indices::datum::Datum;
use crate::intents::handlers::{ChangingHandler, Reason};
use crate::intents::lifecycles::Lifecycle;
use crate::metrics::{CallOutcome, HandlerLabels};
use crate::settings::ServerSelectors;
use crate::state::bodies::CompactBody;
use crate::state::diffs::Diff;
use crate::state::patches::Patch;
use crate::state::progression::{deliver_result, Outcome};
use crate::state::StorageError;
use futures::future::BoxFuture;
use opentelemetry::trace::{SpanKind, TraceContextExt};
use opentelemetry::KeyValue;
use serde_json::Value;
use std::sync::Arc;

/// Which kind of handler a call or a callback is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerKind {
    /// Change handlers (`@kopf.on.create` & co.).
    Changing,
    /// `@kopf.on.event` handlers.
    Watching,
    /// `@kopf.index` functions.
    Indexing,
    /// Daemons and timers.
    Spawning,
    /// `@kopf.on.validate` and `@kopf.on.mutate` handlers.
    Admission,
    /// `@kopf.on.log` handlers.
    Logging,
    /// `@kopf.on.reconcile` handlers (not in Kopf).
    Reconciling,
    /// `@kopf.related` functions (not in Kopf): which owners an object concerns.
    Relating,
}

impl HandlerKind {
    /// Every kind, in the order the Python side lists them.
    pub const ALL: [HandlerKind; 8] = [
        HandlerKind::Changing,
        HandlerKind::Watching,
        HandlerKind::Spawning,
        HandlerKind::Indexing,
        HandlerKind::Admission,
        HandlerKind::Logging,
        HandlerKind::Reconciling,
        HandlerKind::Relating,
    ];

    /// The kind's name, as the Python side calls it (`kopf._bridge.protocol.HandlerKind`).
    pub fn name(self) -> &'static str {
        match self {
            HandlerKind::Changing => "changing",
            HandlerKind::Watching => "watching",
            HandlerKind::Spawning => "spawning",
            HandlerKind::Indexing => "indexing",
            HandlerKind::Admission => "admission",
            HandlerKind::Logging => "logging",
            HandlerKind::Reconciling => "reconciling",
            HandlerKind::Relating => "relating",
        }
    }

    /// The kind that the Python side calls by this name.
    pub fn named(name: &str) -> Option<HandlerKind> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// What a daemon's or timer's call carries besides the usual: its stopper.
#[derive(Debug, Clone)]
pub struct DaemonCall {
    /// Identifies the daemon's stopper on the Python side (the `stopped` kwarg).
    pub token: u64,
    /// The object's key, for the live body that long-running daemons see.
    pub key: Arc<str>,
    /// The stopping reasons set so far (bits of `kopf.DaemonStoppingReason`).
    pub reason: u32,
    /// A daemon's call (it runs until it is stopped), not a timer's (it returns soon).
    pub endless: bool,
    /// The object's latest body, compact: shared with Python, which converts what it reads
    /// (and keeps it while the body stays the same).
    pub body: Arc<CompactBody>,
}

/// What a log handler's call carries besides the pod: the line.
#[derive(Debug, Clone)]
pub struct LogCall {
    /// The line, without its newline (bytes that are not UTF-8 are replaced).
    pub line: String,
    /// The container whose line it is.
    pub container: String,
    /// The line's time, as its container runtime gave it (RFC 3339, UTC, in microseconds).
    pub timestamp: String,
}

/// What an admission handler's call carries besides the object: the request's details.
#[derive(Debug, Clone, Default)]
pub struct AdmissionCall {
    /// The handler addressed by the request's path (none: all of them).
    pub webhook: Option<String>,
    /// The request's operation: `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: Option<String>,
    /// The subresource written (`status`, `scale`, ...), if any.
    pub subresource: Option<String>,
    /// Whether the request is a dry run.
    pub dryrun: bool,
    /// The requesting user, as the review says.
    pub userinfo: Value,
    /// The review request's HTTP headers.
    pub headers: Vec<(String, String)>,
    /// The client's verified certificate, as Python's `getpeercert()` describes it.
    pub sslpeer: Value,
}

/// The objects of one conversion review, each with the steps (the conversion handlers'
/// positions, in order) that lead from its version to the desired one: converted in one
/// trip to the handlers' side.
#[derive(Debug, Clone)]
pub struct ConversionRequest {
    /// The custom resource, in the desired version (the handlers' `resource` kwarg).
    pub resource: Arc<Resource>,
    /// The objects to convert, each with its chain of steps (the handlers' positions).
    pub objects: Vec<(Value, Vec<usize>)>,
}

/// Why an admission handler rejected a request: `kopf.AdmissionError` (with its code),
/// Kopf's permanent or temporary errors, or any other exception; with the error's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// `kopf.AdmissionError`: refused with this message and HTTP code.
    Admission {
        /// What the API server tells the client.
        message: String,
        /// The HTTP status code (500 if none).
        code: Option<i64>,
    },
    /// `kopf.PermanentError`.
    Permanent(String),
    /// `kopf.TemporaryError`.
    Temporary(String),
    /// Any other exception.
    Other(String),
}

/// Everything a handler call needs that the core knows.
#[derive(Clone)]
pub struct Invocation {
    /// Which kind of handler is called.
    pub kind: HandlerKind,
    /// The handler's position in the Python registry, or in its scope's sub-handlers.
    pub handler: usize,
    /// A sub-handler's call: the scope (of its parent's call) where it was declared.
    pub scope: Option<u64>,
    /// A change handler's call: where its own sub-handlers are declared and executed.
    pub children: Option<Arc<dyn Children>>,
    /// The object's resource.
    pub resource: Arc<Resource>,
    /// The object's body as the core has it.
    pub body: Arc<Value>,
    /// For `on.event` handlers: how the object came.
    pub event_type: Option<EventType>,
    /// For change handlers: the cause.
    pub reason: Option<Reason>,
    /// Old and new essences and their diff, reduced to the handler's field if it has one.
    pub old: Option<Value>,
    /// The new essence (of a change or a field), if any.
    pub new: Option<Value>,
    /// What changed between the old and the new essence.
    pub diff: Option<Diff>,
    /// How many times this handler was retried before (the `retry` kwarg).
    pub retry: u64,
    /// When this handler was first called (the `started` kwarg), as stored.
    pub started: Option<String>,
    /// Seconds since then (the `runtime` kwarg).
    pub runtime: f64,
    /// For daemons and timers.
    pub daemon: Option<DaemonCall>,
    /// For admission handlers.
    pub admission: Option<Arc<AdmissionCall>>,
    /// For log handlers.
    pub log: Option<Arc<LogCall>>,
    /// The call's span, as a W3C `traceparent`, if traces are on (the handler's own spans
    /// nest under it).
    pub trace: Option<String>,
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
            scope: None,
            children: None,
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
            admission: None,
            log: None,
            trace: None,
        }
    }
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("Invocation"))
            .field("kind", &self.kind)
            .field("handler", &self.handler)
            .field("scope", &self.scope)
            .field("reason", &self.reason)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// How the sub-handlers of a scope did in one execution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Executed {
    /// All of them have finished (succeeded or failed for good).
    pub done: bool,
    /// Until the first of the unfinished ones may run again.
    pub delay: Option<f64>,
}

/// The sub-handlers of one handler call, as `kopf.subhandler` / `kopf.register` /
/// `kopf.execute` declare them in Python during the call: the core executes them (see
/// `executing::Scope`) and keeps their progress.
pub trait Children: Send + Sync {
    /// How sub-handler calls name this scope (`Invocation::scope`).
    fn id(&self) -> u64;
    /// The parent handler's id (the prefix of its sub-handlers' ids).
    fn parent(&self) -> &str;
    /// Execute these sub-handlers once, by this lifecycle: the lifecycle's pick of the
    /// awakened ones runs now; their progress is kept with the cycle's patch.
    fn execute(
        self: Arc<Self>,
        children: Vec<ChangingHandler>,
        lifecycle: Lifecycle,
    ) -> BoxFuture<'static, Result<Executed, StorageError>>;
}

/// A custom lifecycle's question: which of these handlers (by their position) run now.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// The scope of sub-handlers whose lifecycle this is, or none for the operator's.
    pub scope: Option<u64>,
    /// The cause's call (for the lifecycle's keyword arguments).
    pub call: Invocation,
    /// The awakened handlers: their positions (as in `Invocation::handler`) and ids.
    pub handlers: Vec<(usize, String)>,
    /// The states of all handlers of the cause, by id: their progress records.
    pub states: Vec<(String, Value)>,
}

/// How a failed call failed: the exception's class on the Python side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `kopf.TemporaryError`.
    Temporary,
    /// `kopf.PermanentError`.
    Permanent,
    /// Any other exception.
    Exception,
}

/// What came back from a handler call.
#[derive(Debug, Clone, Default)]
pub struct Invoked {
    /// How the call ended: done, to retry when, with which message.
    pub outcome: Outcome,
    /// If it failed, how (for the metrics; the outcome says what follows).
    pub failure: Option<Failure>,
    /// If it failed, the exception's class name (for the traces).
    pub error_type: Option<String>,
    /// An indexing function's result, as (key, value) pairs (a plain value under `None`);
    /// none if it returned `None` (or failed).
    pub indexed: Option<Vec<(Datum, Datum)>>,
    /// The handler's additions to the `patch` kwarg, as a merge-patch.
    pub patch: Option<Value>,
    /// The call was cancelled (a daemon stopped by force): there is no outcome.
    pub cancelled: bool,
    /// An admission handler's additions to the `warnings` kwarg.
    pub warnings: Vec<String>,
    /// An admission handler's error, as the response tells it.
    pub rejection: Option<Rejection>,
    /// A reconcile handler's request to be called again after so many seconds, though
    /// nothing changes (`kopf.Requeue`).
    pub requeue: Option<f64>,
    /// A related function's owners: each as (namespace, name); the namespace is the object's
    /// own unless the function named another (none: a cluster-scoped object's).
    pub related: Option<Vec<(Option<String>, String)>>,
}

impl Invoked {
    fn call_outcome(&self) -> CallOutcome {
        match (self.cancelled, self.failure, &self.outcome.exception) {
            (true, ..) => CallOutcome::Cancelled,
            (_, Some(Failure::Temporary), _) => CallOutcome::Temporary,
            (_, Some(Failure::Permanent), _) => CallOutcome::Permanent,
            (_, Some(Failure::Exception), _) | (_, None, Some(_)) => CallOutcome::Exception,
            (_, None, None) => CallOutcome::Success,
        }
    }

    /// The call's effects on the object: the handler's own patch, and its result in
    /// `status.<handler id>`.
    pub fn apply_to(&self, id: &str, patch: &mut Patch) {
        if let Some(own) = &self.patch {
            patch.merge_from(own);
        }
        deliver_result(id, &self.outcome, patch);
    }
}

/// A handler call, counted and timed in the metrics, and a span of its own in the traces, if
/// they are enabled. `kind` is the metrics' label: changing, watching, indexing, daemon,
/// timer, admission, logging.
///
/// A plain function returning the hooks' boxed future (not an `async fn`): an `async fn`
/// would keep the whole invocation in its state, and every caller's future would be that
/// much bigger — the daemons' call, boxed per call, crossed the allocator's size of cheap
/// (thread-cached) blocks with it.
pub fn invoke_metered(
    hooks: &dyn HandlerCalls,
    mut call: Invocation,
    id: &str,
    kind: &'static str,
) -> BoxFuture<'static, Invoked> {
    let span = crate::traces::get().map(|tracer| {
        let cx = tracer.start(
            format!("handler {id}"),
            SpanKind::Internal,
            call_attributes(&call, id, kind),
            None,
        );
        call.trace = crate::traces::traceparent(&cx);
        cx
    });
    let metrics = crate::metrics::get();
    if metrics.is_none() && span.is_none() {
        return hooks.invoke(call);
    }
    let labels = metrics.map(|_| HandlerLabels {
        resource: call.resource.name(),
        handler: id.to_owned(),
        kind: kind.to_owned(),
    });
    let retry = call.retry > 0;
    let started = std::time::Instant::now();
    let invoking = hooks.invoke(call);
    Box::pin(async move {
        let invoked = invoking.await;
        if let (Some(metrics), Some(labels)) = (metrics, labels) {
            metrics.handler_call(labels, invoked.call_outcome(), retry, started.elapsed());
        }
        if let Some(cx) = span {
            let outcome = invoked.call_outcome();
            cx.span()
                .set_attribute(KeyValue::new("kopf.handler.outcome", outcome.label()));
            let error = (invoked.outcome.exception.as_deref())
                .filter(|_| outcome != CallOutcome::Success)
                .map(|message| {
                    (
                        invoked.error_type.as_deref().unwrap_or("Exception"),
                        message,
                    )
                });
            crate::traces::end(&cx, error);
        }
        invoked
    })
}

/// A handler span's attributes: which handler, which object, which attempt.
fn call_attributes(call: &Invocation, id: &str, kind: &'static str) -> Vec<KeyValue> {
    let metadata = &call.body["metadata"];
    let mut attributes = vec![
        KeyValue::new("kopf.handler.id", id.to_owned()),
        KeyValue::new("kopf.handler.kind", kind),
        KeyValue::new("kopf.handler.retry", call.retry as i64),
        KeyValue::new("kopf.resource", call.resource.name()),
    ];
    for (key, field) in [
        ("k8s.namespace.name", "namespace"),
        ("kopf.object.name", "name"),
    ] {
        if let Some(value) = metadata[field].as_str() {
            attributes.push(KeyValue::new(key, value.to_owned()));
        }
    }
    attributes
}

/// What the core asks of the handlers' side (Python's, or the tests' fakes), by role: a part
/// of the core takes only the role it needs (the webhooks call handlers, the liveness
/// endpoint asks the probes), and every implementation of all four is one of these.
pub trait Hooks: HandlerCalls + DaemonControl + OperatorQueries + OperatorStorages {}

impl<T: HandlerCalls + DaemonControl + OperatorQueries + OperatorStorages> Hooks for T {}

/// Calls of handlers and of what decides about them for one object: filters' callbacks,
/// custom lifecycles, daemons' initial delays; and the end of what is kept for an object.
pub trait HandlerCalls: Send + Sync + 'static {
    /// Evaluate callback filters (`when=`, callable label values, ...) for these handlers.
    fn check_callbacks(&self, invocations: Vec<Invocation>) -> BoxFuture<'static, Vec<bool>>;
    /// Call a handler once.
    fn invoke(&self, invocation: Invocation) -> BoxFuture<'static, Invoked>;
    /// A custom lifecycle's pick: positions in `request.handlers`, in the order to run.
    fn plan(&self, request: PlanRequest) -> BoxFuture<'static, Vec<usize>>;
    /// A daemon's or timer's `initial_delay` given as a function: its value for this object.
    fn initial_delay(&self, invocation: Invocation) -> BoxFuture<'static, f64>;
    /// The object is gone: drop what the Python side keeps for it (its `memo`).
    fn forget(&self, key: &str);
    /// Convert the objects of a review through their steps: all converted (in order), or
    /// the first failure's message (which object, which handler, what error).
    fn convert(&self, request: ConversionRequest)
        -> BoxFuture<'static, Result<Vec<Value>, String>>;
}

/// The Python side of daemons and timers: their `stopped` flags, cancellation, live bodies.
pub trait DaemonControl: Send + Sync + 'static {
    /// Raise a daemon's `stopped` flag with these reasons (bits), waking its waits.
    fn daemon_stopping(&self, token: u64, reason: u32);
    /// Cancel a daemon's running call (async functions only; threads cannot be killed).
    fn daemon_cancel(&self, token: u64);
    /// The daemon's runner has exited: drop its stopper.
    fn daemon_forget(&self, token: u64);
    /// The object has changed: the long-running daemons' `body` shows the new state.
    fn refresh_body(&self, key: &Arc<str>, body: &Arc<CompactBody>);
}

/// Questions about the operator as a whole, not about one object: which resources to
/// serve and how to filter their streams, and the probes' answers.
pub trait OperatorQueries: Send + Sync + 'static {
    /// Ask a handler's callable resource selector which of these resources it wants.
    fn select_resources(
        &self,
        kind: HandlerKind,
        handler: usize,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Vec<bool>>;
    /// `settings.watching.*_selectors` that apply to each of these resources (Python keys them
    /// by resource selectors, callables included): what their streams ask the server to filter.
    /// An error (the Python side's, printed there) leaves the resources unserved: watching
    /// them unfiltered would handle what the user filtered out.
    fn server_selectors(
        &self,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Result<Vec<ServerSelectors>, String>>;
    /// Run the `@kopf.on.probe` handlers: their results by handler id.
    fn probe(&self) -> BoxFuture<'static, Value>;
}

/// The operator's own storages of progress and diff bases (Kopf's storage classes).
pub trait OperatorStorages: Send + Sync + 'static {
    /// The operator's own storages, which `settings.persistence` refers to by index.
    fn custom_storages(&self) -> &dyn crate::state::storages::CustomStorages {
        &crate::state::storages::NoCustomStorages
    }
}
