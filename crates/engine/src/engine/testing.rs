//! Fakes for the engine's tests: Python's side of the hooks (handlers that answer as told,
//! daemons that obey their stop flags or not) and an API that takes patches.

use crate::client::applying::{Applied, Patcher};
use crate::client::resources::Resource;
use crate::client::watching::{EventType, RawEvent};
use crate::engine::context::ResourceContext;
use crate::indices::datum::Datum;
use crate::intents::handlers::{
    ChangingHandler, IndexingHandler, ReconcilingHandler, SpawningHandler, WatchingHandler,
};
use crate::intents::hooks::{
    ConversionRequest, DaemonControl, HandlerCalls, HandlerKind, Invocation, Invoked,
    OperatorQueries, OperatorStorages, PlanRequest,
};
use crate::intents::lifecycles::Lifecycle;
use crate::settings::{ServerSelectors, Settings};
use crate::state::bodies::CompactBody;
use crate::state::patches::Patch;
use crate::state::progression::Outcome;
use crate::state::storages::Storages;
use crate::util::dicts;
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// One handler call as the fake Python side saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Which kind of handler was called.
    pub kind: HandlerKind,
    /// Its position in the registry (or in its scope's sub-handlers).
    pub handler: usize,
    /// The object's name and `metadata.resourceVersion` of the body the handler got.
    pub name: String,
    /// The version of the body it got.
    pub version: String,
    /// An `on.event` call's event type.
    pub event_type: Option<EventType>,
    /// A daemon's or timer's stopper.
    pub token: Option<u64>,
    /// A change handler's id (the parent of its scope of sub-handlers).
    pub id: Option<String>,
}

/// How a daemon's function behaves when asked to stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Daemon {
    /// Returns at once (as timers' functions do).
    Returning,
    /// Returns as soon as its `stopped` flag is raised.
    Obedient,
    /// Ignores the flag; ends when its task is cancelled (an async daemon).
    Cancellable,
    /// Ignores everything (a sync daemon in a thread): runs until the test ends.
    Stubborn,
}

#[derive(Default)]
struct Signals {
    /// The reasons raised per daemon token.
    stopping: Vec<(u64, u32)>,
    cancelled: Vec<u64>,
}

/// The Python side, faked: records the calls and answers as the test says.
pub struct FakeHooks {
    /// Every call, in order.
    pub calls: Mutex<Vec<Call>>,
    /// The sub-handlers that a handler (by id) declares in each call: executed after it
    /// returns, as `kopf.execute()` does implicitly.
    pub children: Mutex<HashMap<String, Vec<ChangingHandler>>>,
    /// Each trip to evaluate callback filters: the handlers asked.
    pub trips: Mutex<Vec<Vec<(HandlerKind, usize)>>>,
    /// How the next calls end (then: success), in order, for any handler.
    outcomes: Mutex<VecDeque<Outcome>>,
    daemon: Daemon,
    signals: watch::Sender<Signals>,
    /// The objects forgotten (deleted), by key.
    pub forgotten: Mutex<Vec<String>>,
    /// What indexing functions return for a body (by default: its name under its label `app`).
    pub indexer: Mutex<Indexer>,
    /// What admission handlers answer (by default: they succeed and change nothing).
    pub admitter: Mutex<Admitter>,
    /// Successes return a result (`{"by": <handler index>}`, for `status.<id>`), not None.
    pub results: std::sync::atomic::AtomicBool,
    /// What conversion handlers make of the objects (by default: each step that it went
    /// through, by position, in `spec.steps`).
    pub converter: Mutex<Converter>,
    /// Each conversion trip: the objects' steps.
    pub conversions: Mutex<Vec<Vec<Vec<usize>>>>,
}

/// What an admission handler answers to a call.
pub type Admitter = fn(&Invocation) -> Invoked;

/// What conversion handlers make of a review's objects.
pub type Converter = fn(&ConversionRequest) -> Result<Vec<Value>, String>;

fn stepping(request: &ConversionRequest) -> Result<Vec<Value>, String> {
    let converted = request.objects.iter().map(|(object, steps)| {
        let mut object = object.clone();
        let mut all = object["spec"]["steps"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        all.extend(steps.iter().map(|step| json!(step)));
        object["spec"]["steps"] = Value::Array(all);
        object
    });
    Ok(converted.collect())
}

/// What an indexing function returns for a body: its keys and values (`None`: nothing).
pub type Indexer = fn(&Value) -> Option<Vec<(Datum, Datum)>>;

fn by_app(body: &Value) -> Option<Vec<(Datum, Datum)>> {
    let app = body["metadata"]["labels"]["app"].as_str()?;
    let name = body["metadata"]["name"].as_str()?;
    Some(vec![(Datum::Str(app.into()), Datum::Str(name.into()))])
}

impl FakeHooks {
    /// A fake whose daemons behave so.
    pub fn new(daemon: Daemon) -> Arc<Self> {
        Arc::new(Self {
            calls: Mutex::default(),
            children: Mutex::default(),
            trips: Mutex::default(),
            outcomes: Mutex::default(),
            daemon,
            signals: watch::channel(Signals::default()).0,
            forgotten: Mutex::default(),
            indexer: Mutex::new(by_app),
            admitter: Mutex::new(|_| Invoked::default()),
            results: Default::default(),
            converter: Mutex::new(stepping),
            conversions: Mutex::default(),
        })
    }

    /// The next call ends so (and the ones after it as queued, then in success).
    pub fn answer(&self, outcome: Outcome) {
        self.outcomes.lock().unwrap().push_back(outcome);
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The versions that the handlers of this kind got, in order.
    pub fn calls_of(&self, kind: HandlerKind) -> Vec<String> {
        self.calls_for(kind, None)
    }

    /// The versions of one object (or all) that the handlers of this kind got, in order.
    pub fn calls_for(&self, kind: HandlerKind, name: Option<&str>) -> Vec<String> {
        (self.calls().into_iter())
            .filter(|c| c.kind == kind && name.is_none_or(|n| c.name == n))
            .map(|c| c.version)
            .collect()
    }

    /// The stop reasons raised for a daemon so far (bits, or'ed).
    pub fn stopping(&self, token: u64) -> u32 {
        (self.signals.borrow().stopping.iter())
            .filter(|(t, _)| *t == token)
            .fold(0, |bits, (_, reason)| bits | reason)
    }

    /// Whether a daemon was cancelled.
    pub fn cancelled(&self, token: u64) -> bool {
        self.signals.borrow().cancelled.contains(&token)
    }
}

impl HandlerCalls for FakeHooks {
    fn check_callbacks(&self, invocations: Vec<Invocation>) -> BoxFuture<'static, Vec<bool>> {
        let asked = invocations.iter().map(|i| (i.kind, i.handler)).collect();
        self.trips.lock().unwrap().push(asked);
        let verdicts = vec![true; invocations.len()];
        Box::pin(async move { verdicts })
    }

    fn invoke(&self, invocation: Invocation) -> BoxFuture<'static, Invoked> {
        let meta = |key: &str| {
            (dicts::meta(&invocation.body, key).and_then(Value::as_str))
                .unwrap_or_default()
                .to_owned()
        };
        let (name, version) = (meta("name"), meta("resourceVersion"));
        self.calls.lock().unwrap().push(Call {
            kind: invocation.kind,
            handler: invocation.handler,
            name,
            version,
            event_type: invocation.event_type,
            token: invocation.daemon.as_ref().map(|d| d.token),
            id: invocation.children.as_ref().map(|c| c.parent().to_owned()),
        });
        let outcome = self.outcomes.lock().unwrap().pop_front();
        let results = self.results.load(std::sync::atomic::Ordering::Relaxed);
        let outcome = outcome.unwrap_or(Outcome {
            final_: true,
            result: results.then(|| json!({"by": invocation.handler})),
            ..Default::default()
        });
        if invocation.kind == HandlerKind::Admission {
            let invoked = (self.admitter.lock().unwrap())(&invocation);
            return Box::pin(async move { invoked });
        }
        if invocation.kind == HandlerKind::Indexing {
            let failed = outcome.exception.is_some();
            let indexed = (!failed).then(|| (self.indexer.lock().unwrap())(&invocation.body));
            return Box::pin(async move {
                Invoked {
                    outcome,
                    indexed: indexed.flatten(),
                    ..Default::default()
                }
            });
        }
        let declared = (invocation.children.as_ref())
            .and_then(|scope| self.children.lock().unwrap().get(scope.parent()).cloned());
        if let (Some(scope), Some(declared)) = (invocation.children.clone(), declared) {
            return Box::pin(async move {
                let executed = scope.execute(declared, Lifecycle::Asap).await.unwrap();
                let outcome = match executed.done {
                    true => outcome,
                    // As Kopf's `HandlerChildrenRetry` ends the parent's call.
                    false => Outcome {
                        final_: false,
                        delay: executed.delay,
                        exception: Some("None".into()),
                        ..Default::default()
                    },
                };
                Invoked {
                    outcome,
                    ..Default::default()
                }
            });
        }
        let Some(daemon) = invocation
            .daemon
            .filter(|_| self.daemon != Daemon::Returning)
        else {
            return Box::pin(async move {
                Invoked {
                    outcome,
                    ..Default::default()
                }
            });
        };
        let mut signals = self.signals.subscribe();
        let behaviour = self.daemon;
        let token = daemon.token;
        Box::pin(async move {
            let cancelled = match behaviour {
                Daemon::Obedient => {
                    let _ = signals
                        .wait_for(|s| s.stopping.iter().any(|(t, _)| *t == token))
                        .await;
                    false
                }
                Daemon::Cancellable => {
                    let _ = signals.wait_for(|s| s.cancelled.contains(&token)).await;
                    true
                }
                Daemon::Stubborn => std::future::pending().await,
                Daemon::Returning => false,
            };
            Invoked {
                outcome,
                cancelled,
                ..Default::default()
            }
        })
    }

    fn plan(&self, request: PlanRequest) -> BoxFuture<'static, Vec<usize>> {
        // A custom lifecycle of the tests: the last of the awakened handlers first.
        let picked = (0..request.handlers.len()).rev().collect();
        Box::pin(async move { picked })
    }

    fn initial_delay(&self, _: Invocation) -> BoxFuture<'static, f64> {
        Box::pin(async { 0.0 })
    }

    fn forget(&self, key: &str) {
        self.forgotten.lock().unwrap().push(key.to_owned());
    }

    fn convert(
        &self,
        request: ConversionRequest,
    ) -> BoxFuture<'static, Result<Vec<Value>, String>> {
        let steps = request.objects.iter().map(|(_, s)| s.clone()).collect();
        self.conversions.lock().unwrap().push(steps);
        let converted = (self.converter.lock().unwrap())(&request);
        Box::pin(async move { converted })
    }
}

impl DaemonControl for FakeHooks {
    fn daemon_stopping(&self, token: u64, reason: u32) {
        self.signals
            .send_modify(|s| s.stopping.push((token, reason)));
    }

    fn daemon_cancel(&self, token: u64) {
        self.signals.send_modify(|s| s.cancelled.push(token));
    }

    fn daemon_forget(&self, _: u64) {}

    fn refresh_body(&self, _: &Arc<str>, _: &Arc<CompactBody>) {}
}

impl OperatorQueries for FakeHooks {
    fn select_resources(
        &self,
        _: HandlerKind,
        _: usize,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Vec<bool>> {
        let verdicts = vec![true; resources.len()];
        Box::pin(async move { verdicts })
    }

    fn server_selectors(
        &self,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Result<Vec<ServerSelectors>, String>> {
        let none = vec![ServerSelectors::default(); resources.len()];
        Box::pin(async move { Ok(none) })
    }

    fn probe(&self) -> BoxFuture<'static, Value> {
        Box::pin(async { json!({}) })
    }
}

impl OperatorStorages for FakeHooks {}

/// An API that takes every patch (or fails as told): each applied patch gets the next
/// resourceVersion, counting from 100.
#[derive(Default)]
pub struct FakePatcher {
    /// The patches written, with their objects' names.
    pub written: Mutex<Vec<(String, Value)>>,
    /// Errors for the next writes, in order.
    pub failures: Mutex<VecDeque<kube::Error>>,
}

impl FakePatcher {
    /// The patches written so far (of all objects).
    pub fn applied(&self) -> Vec<Value> {
        let written = self.written.lock().unwrap();
        written.iter().map(|(_, patch)| patch.clone()).collect()
    }

    /// The object as the server has it after our patches: `body` with them applied, at the
    /// version of the last one.
    pub fn patched(&self, body: &Value) -> Value {
        let mut body = body.clone();
        let name = body["metadata"]["name"].clone();
        let written = self.written.lock().unwrap();
        for (at, (_, patch)) in written.iter().enumerate().filter(|(_, (n, _))| *n == name) {
            dicts::merge(&mut body, patch);
            body["metadata"]["resourceVersion"] = json!(format!("{}", 100 + at));
        }
        body
    }

    /// A server-side error of the API.
    pub fn fail_next(&self, code: u16) {
        let status =
            kube::core::Status::failure("the fake API refuses", "InternalError").with_code(code);
        (self.failures.lock().unwrap()).push_back(kube::Error::Api(Box::new(status)));
    }
}

impl Patcher for FakePatcher {
    fn apply<'a>(
        &'a self,
        body: &Value,
        patch: Patch,
    ) -> BoxFuture<'a, Result<Applied, kube::Error>> {
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Box::pin(async move {
            if let Some(error) = self.failures.lock().unwrap().pop_front() {
                return Err(error);
            }
            let mut written = self.written.lock().unwrap();
            written.push((name, flattened(patch)));
            Ok(Applied {
                resource_version: Some(format!("{}", 99 + written.len())),
                ..Default::default()
            })
        })
    }
}

/// A patch's stages as one merge-patch (later ones over earlier ones): what the object
/// looks like once all its writes are applied.
pub fn flattened(patch: Patch) -> Value {
    let mut merged = patch.merge;
    for stage in &patch.later {
        dicts::merge_patch_maps(&mut merged, stage);
    }
    Value::Object(merged)
}

/// The tests' resource: Greetings.
pub fn resource() -> Arc<Resource> {
    Arc::new(Resource {
        group: "demo.kopf.dev".into(),
        version: "v1".into(),
        plural: "greetings".into(),
        kind: "Greeting".into(),
        singular: "greeting".into(),
        shortcuts: vec![],
        categories: vec![],
        subresources: vec![],
        namespaced: true,
        preferred: true,
        verbs: vec!["list".into(), "watch".into(), "patch".into()],
    })
}

/// Handlers of the tests' resource, from their descriptions as the Python side sends them.
pub fn handler<T: serde::de::DeserializeOwned>(spec: Value) -> T {
    let mut spec = spec;
    spec["selector"] = json!({"any_name": "greetings"});
    serde_json::from_value(spec).expect("a valid handler description")
}

/// The handlers of a test's context.
#[derive(Default)]
pub struct Handlers {
    /// Change handlers.
    pub changing: Vec<ChangingHandler>,
    /// `on.event` handlers.
    pub watching: Vec<WatchingHandler>,
    /// Daemons and timers.
    pub spawning: Vec<SpawningHandler>,
    /// Indexing functions.
    pub indexing: Vec<IndexingHandler>,
    /// Reconcile handlers.
    pub reconciling: Vec<ReconcilingHandler>,
}

/// A context of the tests' resource with these handlers, settings, hooks and patcher.
pub fn context(
    handlers: Handlers,
    settings: Settings,
    hooks: Arc<FakeHooks>,
    patcher: Arc<FakePatcher>,
) -> Arc<ResourceContext> {
    context_with(
        handlers,
        settings,
        hooks,
        patcher,
        Storages::default(),
        resource(),
    )
}

/// A context with these storages, for this resource.
pub fn context_with(
    handlers: Handlers,
    settings: Settings,
    hooks: Arc<FakeHooks>,
    patcher: Arc<dyn Patcher>,
    storages: Storages,
    resource: Arc<Resource>,
) -> Arc<ResourceContext> {
    let reconciling = &settings.reconciling;
    let retry_budget = Arc::new(crate::util::buckets::TokenBucket::new(
        reconciling.retry_rate,
        reconciling.retry_burst,
    ));
    Arc::new(ResourceContext {
        resource,
        patcher,
        settings: Arc::new(settings),
        hooks,
        changing: handlers.changing,
        indexing: handlers.indexing,
        indices: Default::default(),
        lifecycle: Default::default(),
        watching: handlers.watching,
        spawning: handlers.spawning.into_iter().map(Arc::new).collect(),
        logging: Vec::new(),
        reconciling: handlers.reconciling,
        retry_budget,
        owner_bodies: None,
        owners: Vec::new(),
        relating: Vec::new(),
        wakers: None,
        progress: storages.progress,
        diffbase: storages.diffbase,
        extra_fields: Vec::new(),
    })
}

/// A Greeting `name` at this resourceVersion, with a spec.
pub fn object(name: &str, version: &str, spec: Value) -> Value {
    json!({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
           "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"),
                        "resourceVersion": version},
           "spec": spec})
}

/// An event of this type for this object.
pub fn event(event_type: EventType, object: Value) -> RawEvent {
    RawEvent {
        event_type,
        object: Arc::new(object),
    }
}
