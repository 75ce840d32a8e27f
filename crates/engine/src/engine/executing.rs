//! Executing the handlers of a cause once per cycle, as Kopf does: the lifecycle picks some
//! of the awakened ones; each is called with a scope of its own, where its sub-handlers
//! (declared in Python during the call: `kopf.subhandler`, `kopf.register`,
//! `kopf.execute`) are executed the same way, to any depth. The outcomes go to the
//! handlers' states; their results, and the sub-handlers' progress, to the cycle's patch.

use crate::engine::context::{Change, ResourceContext};
use crate::engine::selecting::{self, Verdicts};
use crate::intents::handlers::ChangingHandler;
use crate::intents::hooks::{self, Children, Executed, HandlerKind, PlanRequest};
use crate::intents::lifecycles::Lifecycle;
use crate::state::patches::Patch;
use crate::state::progression::{format_time, State};
use crate::state::{StorageError, StorageResult};
use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::instrument::WithSubscriber;

/// The cycle's patch, shared by the handlers' calls at every depth.
pub(crate) type SharedPatch = Arc<Mutex<Patch>>;

/// The ids of the sub-handlers (of any depth) under one handler's call.
type Refs = Arc<Mutex<BTreeSet<String>>>;

/// Scopes are numbered across all resources: the Python side keeps one table of them.
static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Call the handlers that the lifecycle picks among the awakened ones of these (the
/// cause's handlers, in the order of registration), once each, each with a scope for its
/// sub-handlers; their outcomes in the state, their results and patches in `patch`.
/// `scope` is where these handlers were declared (none: the operator's own handlers).
#[allow(clippy::too_many_arguments)] // the parts of one cycle; no struct would say more
pub(crate) async fn execute_once(
    ctx: &Arc<ResourceContext>,
    scope: Option<&Scope>,
    handlers: &[&ChangingHandler],
    state: State,
    lifecycle: Lifecycle,
    body: &Arc<Value>,
    change: &Arc<Change>,
    patch: &SharedPatch,
) -> State {
    let now = crate::util::clock::now();
    let awakened: Vec<&ChangingHandler> = (handlers.iter().copied())
        .filter(|h| state.get(&h.id).is_some_and(|s| s.awakened(now)))
        .collect();
    let retries = |h: &ChangingHandler| state.get(&h.id).map_or(0, |s| s.retries);
    let plan = match lifecycle.plan(awakened.clone(), retries) {
        Some(plan) => plan,
        None => ask_lifecycle(ctx, scope, awakened, &state, body, change).await,
    };
    let mut state = state;
    for handler in plan {
        let Some(handler_state) = state.get(&handler.id) else {
            continue; // a custom lifecycle's pick of a handler not of this cause
        };
        let children = Arc::new(Scope::of_call(ctx, scope, handler, body, change, patch));
        let field = handler.filters.field.as_ref();
        let kind = HandlerKind::Changing;
        let mut call = ctx.invocation(kind, handler.index, field, body, Some(change));
        call.scope = scope.map(|s| s.id);
        call.children = Some(children.clone());
        call.retry = handler_state.retries;
        call.started = Some(format_time(handler_state.started));
        call.runtime = handler_state.runtime(crate::util::clock::now());
        let mut invoked = hooks::invoke_metered(&*ctx.hooks, call, &handler.id, "changing").await;
        invoked.outcome.subrefs = children.own_refs();
        invoked.apply_to(&handler.id, &mut patch.lock().expect("not poisoned"));
        state = state.with_outcome(&handler.id, &invoked.outcome, crate::util::clock::now());
    }
    state
}

/// A custom lifecycle's pick, asked in Python.
async fn ask_lifecycle<'h>(
    ctx: &ResourceContext,
    scope: Option<&Scope>,
    awakened: Vec<&'h ChangingHandler>,
    state: &State,
    body: &Arc<Value>,
    change: &Change,
) -> Vec<&'h ChangingHandler> {
    if awakened.is_empty() {
        return awakened;
    }
    let mut call = ctx.invocation(
        HandlerKind::Changing,
        awakened[0].index,
        None,
        body,
        Some(change),
    );
    call.scope = scope.map(|s| s.id);
    let request = PlanRequest {
        scope: scope.map(|s| s.id),
        call,
        handlers: (awakened.iter()).map(|h| (h.index, h.id.clone())).collect(),
        states: (state.ids())
            .filter_map(|id| Some((id.clone(), state.get(id)?.record())))
            .collect(),
    };
    let picked = ctx.hooks.plan(request).await;
    (picked.into_iter())
        .filter_map(|at| awakened.get(at).copied())
        .collect()
}

/// Where the sub-handlers of one handler call are declared and executed. Python holds it
/// during the call (`kopf.execute()` runs them through it) and names it in their calls.
pub struct Scope {
    id: u64,
    ctx: Arc<ResourceContext>,
    body: Arc<Value>,
    /// The cause as the parent handler sees it (reduced to its field, if it has one).
    change: Arc<Change>,
    parent: String,
    patch: SharedPatch,
    /// The references of the callers' calls (outermost first), and this call's own (last):
    /// sub-handlers of any depth are known to all their ancestors, as in Kopf.
    refs: Vec<Refs>,
    /// The operator's log subscriber: Python runs the scope's execution outside its tasks.
    logs: tracing::Dispatch,
    /// The event's span (if traces are on), for the same reason: the sub-handlers' spans are
    /// the event's children too.
    trace: Option<opentelemetry::Context>,
}

impl Scope {
    /// The scope of a call of `handler`, declared in `outer` (none: the operator's handler).
    fn of_call(
        ctx: &Arc<ResourceContext>,
        outer: Option<&Scope>,
        handler: &ChangingHandler,
        body: &Arc<Value>,
        change: &Change,
        patch: &SharedPatch,
    ) -> Self {
        let mut refs = outer.map(|o| o.refs.clone()).unwrap_or_default();
        refs.push(Refs::default());
        Self {
            id: NEXT_SCOPE.fetch_add(1, Ordering::Relaxed),
            ctx: ctx.clone(),
            body: body.clone(),
            change: Arc::new(change.reduced(handler.filters.field.as_ref())),
            parent: handler.id.clone(),
            patch: patch.clone(),
            refs,
            logs: tracing::dispatcher::get_default(tracing::Dispatch::clone),
            trace: crate::traces::enabled().then(opentelemetry::Context::current),
        }
    }

    /// The ids of the sub-handlers of any depth executed in this call.
    fn own_refs(&self) -> Vec<String> {
        let own = self.refs.last().expect("a scope has its own references");
        own.lock().expect("not poisoned").iter().cloned().collect()
    }

    /// Execute the sub-handlers once, as the operator's handlers are executed.
    async fn run(
        self: Arc<Self>,
        children: Vec<ChangingHandler>,
        lifecycle: Lifecycle,
    ) -> StorageResult<Executed> {
        let ctx = &self.ctx;
        let (body, change) = (&self.body, &self.change);
        let verdicts = Verdicts::ask_children(ctx, self.id, &children, body, change).await;
        let matching = selecting::cause_handlers(&children, &verdicts, body, change);
        let owned: Vec<String> = children.iter().map(|h| h.id.clone()).collect();
        let matching_ids: Vec<String> = matching.iter().map(|h| h.id.clone()).collect();
        let storage = ctx.progress.as_ref();
        let now = crate::util::clock::now();
        let state = State::from_storage(body, storage, &owned, now)?
            .with_purpose(change.reason.as_str(), &[])
            .with_handlers(&matching_ids, now);
        let state = execute_once(
            ctx,
            Some(&self),
            &matching,
            state,
            lifecycle,
            body,
            change,
            &self.patch,
        )
        .await;
        state.store(body, &mut self.patch.lock().expect("not poisoned"), storage)?;
        for refs in &self.refs {
            let mut refs = refs.lock().expect("not poisoned");
            refs.extend(state.ids().cloned());
        }
        let delays = state.delays(crate::util::clock::now());
        Ok(Executed {
            done: state.done(),
            delay: delays.into_iter().reduce(f64::min),
        })
    }
}

impl Children for Scope {
    fn id(&self) -> u64 {
        self.id
    }

    fn parent(&self) -> &str {
        &self.parent
    }

    fn execute(
        self: Arc<Self>,
        children: Vec<ChangingHandler>,
        lifecycle: Lifecycle,
    ) -> BoxFuture<'static, Result<Executed, StorageError>> {
        let logs = self.logs.clone();
        let trace = self.trace.clone();
        let running = crate::traces::within(trace.as_ref(), self.run(children, lifecycle));
        Box::pin(running.with_subscriber(logs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::watching::EventType;
    use crate::engine::context::Memory;
    use crate::engine::processing;
    use crate::engine::testing::{self, event, object, Daemon, FakeHooks, FakePatcher, Handlers};
    use crate::settings::Settings;
    use crate::util::dicts;
    use serde_json::json;

    fn child(index: usize, id: &str) -> ChangingHandler {
        testing::handler(json!({"index": index, "id": id}))
    }

    fn record(patch: &Value, key: &str) -> Value {
        let text = patch["metadata"]["annotations"][format!("kopf.zalando.org/{key}")].as_str();
        serde_json::from_str(text.expect("a stored record")).unwrap()
    }

    fn called(hooks: &FakeHooks) -> Vec<String> {
        hooks.calls().into_iter().filter_map(|c| c.id).collect()
    }

    #[tokio::test]
    async fn sub_handlers_run_to_any_depth_and_their_parent_waits_for_them() {
        let hooks = FakeHooks::new(Daemon::Returning);
        {
            let mut children = hooks.children.lock().unwrap();
            let (a, b) = (child(0, "create_fn/a"), child(1, "create_fn/b"));
            children.insert("create_fn".into(), vec![a, b]);
            children.insert("create_fn/a".into(), vec![child(0, "create_fn/a/x")]);
        }
        let parent = testing::handler(json!({"index": 0, "id": "create_fn", "reason": "create"}));
        let handlers = Handlers {
            changing: vec![parent],
            watching: vec![],
            spawning: vec![],
            ..Default::default()
        };
        let patcher = Arc::new(FakePatcher::default());
        let ctx = testing::context(handlers, Settings::default(), hooks.clone(), patcher);
        let mut memory = Memory::default();
        let mut body = object("a", "1", json!({}));
        let mut cycle = async |body: &Value| {
            let event = event(EventType::Modified, body.clone());
            let none = Patch::default();
            let cycle = processing::process_changing(&ctx, &mut memory, &event, none, None);
            testing::flattened(cycle.await.unwrap().patch)
        };

        // One at a time (asap): a, with its own x, in the first cycle; the parent waits.
        let patch = cycle(&body).await;
        assert_eq!(
            called(&hooks),
            ["create_fn", "create_fn/a", "create_fn/a/x"]
        );
        let parent = record(&patch, "create_fn");
        assert_eq!(
            (&parent["success"], &parent["message"]),
            (&json!(false), &json!("None"))
        );
        let all = json!(["create_fn/a", "create_fn/a/x", "create_fn/b"]);
        assert_eq!(parent["subrefs"], all, "references to every depth");
        let a = record(&patch, "create_fn.a");
        assert_eq!(
            (&a["success"], &a["subrefs"]),
            (&json!(true), &json!(["create_fn/a/x"]))
        );
        assert_eq!(record(&patch, "create_fn.a.x")["success"], true);
        assert_eq!(record(&patch, "create_fn.b")["retries"], 0);
        dicts::merge(&mut body, &patch);

        // The parent runs again, and b; all are done: every record is purged.
        let patch = cycle(&body).await;
        assert_eq!(
            called(&hooks)[3..],
            ["create_fn", "create_fn/b"],
            "a and x do not rerun"
        );
        let annotations = &patch["metadata"]["annotations"];
        for key in ["create_fn", "create_fn.a", "create_fn.a.x", "create_fn.b"] {
            let key = format!("kopf.zalando.org/{key}");
            assert_eq!(annotations.get(&key), Some(&Value::Null), "{key} is purged");
        }
        assert!(annotations["kopf.zalando.org/last-handled-configuration"].is_string());
    }
}
