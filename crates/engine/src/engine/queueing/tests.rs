//! The dispatcher's and the workers' tests: events in order per object, bursts collapsed,
//! idling, consistency with our own patches.

use super::worker::Latest;
use super::*;
use crate::engine::testing::{self, event, object, Daemon, FakeHooks, FakePatcher, Handlers};
use crate::indices::datum::Datum;
use crate::intents::hooks::HandlerKind;
use crate::settings::{Pauses, Settings};
use crate::state::bodies::CompactBody;
use crate::state::progression::Outcome;
use crate::util::logging::Capture;
use serde_json::json;
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::instrument::WithSubscriber;
use tracing::Level;

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
        logs: None,
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
            throttling: Some(Box::new(ForEver::new(&Pauses::listed(&[1.0])))),
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

#[tokio::test(start_paused = true)]
async fn a_deletion_that_our_write_has_let_go_is_not_handled_again_when_its_event_is_late() {
    let handlers = Handlers {
        changing: vec![testing::handler(json!({
            "index": 0, "id": "delete_fn", "reason": "delete", "requires_finalizer": true}))],
        ..Default::default()
    };
    let setup = start_with(handlers, Pause::new(0));
    let mut deleted = object("a", "1", spec(1));
    deleted["metadata"]["deletionTimestamp"] = json!("2026-12-03T00:00:00Z");
    deleted["metadata"]["finalizers"] = json!(["kopf.zalando.org/KopfFinalizerMarker"]);
    setup.send(EventType::Modified, deleted.clone()).await;
    setup.pass(0.1).await;
    assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
    let written = setup.patcher.applied();
    assert_eq!(written.len(), 1, "{written:?}"); // the finalizer's removal: the object goes
                                                 // An older state comes (the timer's write before ours), and our own change's event does
                                                 // not come in time (a watch lagging under load): Kopf handles the deletion again.
    deleted["metadata"]["resourceVersion"] = json!("2");
    setup.send(EventType::Modified, deleted.clone()).await;
    setup.pass(10.0).await;
    assert_eq!(setup.hooks.calls_of(HandlerKind::Changing), ["1"]);
    assert_eq!(setup.patcher.applied().len(), 1);
    // The deletion's own event (its body as before our write, the finalizer in it) is noticed.
    deleted["metadata"]["resourceVersion"] = json!("3");
    setup.send(EventType::Deleted, deleted).await;
    setup.pass(0.1).await;
    let gone = "Deleted, really deleted, and we are notified.";
    assert!(setup
        .capture
        .messages(Level::DEBUG)
        .iter()
        .any(|m| m == gone));
    setup.stop().await;
}
