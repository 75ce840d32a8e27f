//! Daemons' and timers' tests.

use super::stopping::Flag;
use super::*;
use crate::engine::testing::{self, object, Daemon as Behaviour, FakeHooks, FakePatcher, Handlers};
use crate::settings::Settings;
use crate::util::logging::Capture;
use serde_json::json;
use std::time::Duration;
use tracing::instrument::WithSubscriber;
use tracing::Level;

struct Setup {
    hooks: Arc<FakeHooks>,
    daemons: Arc<Daemons>,
    object: Arc<ObjectDaemons>,
    capture: Capture,
}

/// One object with one running daemon `d` (or timer), described by `spec`.
async fn start(behaviour: Behaviour, spec: Value) -> Setup {
    let hooks = FakeHooks::new(behaviour);
    let mut spec = spec;
    spec["index"] = json!(0);
    spec["id"] = json!("d");
    let handlers = Handlers {
        changing: vec![],
        watching: vec![],
        spawning: vec![testing::handler(spec)],
        ..Default::default()
    };
    let patcher = Arc::new(FakePatcher::default());
    let ctx = testing::context(handlers, Settings::default(), hooks.clone(), patcher);
    let daemons = Arc::new(Daemons::new(ctx.clone(), Pause::new(0)));
    let body = Arc::new(object("a", "1", json!({})));
    let object = daemons.object("uid-a", &body);
    let capture = Capture::default();
    let spawning = async {
        let handlers: Vec<&Arc<SpawningHandler>> = ctx.spawning.iter().collect();
        daemons.spawn_and_match(&object, &handlers).await
    };
    let delays = spawning.with_subscriber(capture.subscriber()).await;
    assert!(delays.is_empty());
    tokio::time::sleep(Duration::from_millis(10)).await; // its first call
    Setup {
        hooks,
        daemons,
        object,
        capture,
    }
}

impl Setup {
    fn token(&self) -> u64 {
        (self.hooks.calls().iter().find_map(|c| c.token)).expect("the daemon was called")
    }

    /// One look of the stopping for the object's deletion: the delays until the next.
    async fn stop_for_deletion(&self) -> Vec<f64> {
        let stopping = self.daemons.stop_for_deletion(&self.object);
        stopping.with_subscriber(self.capture.subscriber()).await
    }

    fn running(&self) -> usize {
        self.object.snapshot().len()
    }
}

#[test]
fn a_first_body_is_kept_apart_only_if_our_write_will_not_replace_it() {
    let hooks = FakeHooks::new(Behaviour::Returning);
    let patcher = Arc::new(FakePatcher::default());
    let ctx = testing::context(Handlers::default(), Settings::default(), hooks, patcher);
    let daemons = Daemons::new(ctx.clone(), Pause::new(0));
    let finalizer = ctx.settings.persistence.finalizer.clone();
    let mut finalized = object("b", "1", json!({}));
    finalized["metadata"]["finalizers"] = json!([finalizer]);
    let new = daemons.object("uid-a", &Arc::new(object("a", "1", json!({}))));
    let old = daemons.object("uid-b", &Arc::new(finalized));
    let kept = |o: &ObjectDaemons| region::holds(o.body.lock().unwrap().text());
    assert!(!kept(&new), "its finalizer's write brings the body to keep");
    assert!(kept(&old));
    new.refresh(
        &Arc::new(object("a", "2", json!({}))),
        false,
        ctx.hooks.as_ref(),
    );
    assert!(kept(&new));
}

#[tokio::test(start_paused = true)]
async fn a_flag_wakes_its_waiters_and_stays_raised() {
    let flag = Arc::new(Flag::default());
    assert!(!flag.wait(1.0).await, "not raised: waited in full");
    let waiting = tasks::spawn({
        let flag = flag.clone();
        async move { flag.wait(3600.0).await }
    });
    tokio::task::yield_now().await; // the waiter is waiting
    let raised_at = Instant::now();
    flag.raise();
    assert!(waiting.await.unwrap());
    assert_eq!(
        raised_at.elapsed(),
        Duration::ZERO,
        "woken at once, not at the timeout"
    );
    assert!(flag.wait(3600.0).await, "raised for later waiters too");
    assert!(flag.is_raised());
}

#[tokio::test(start_paused = true)]
async fn a_daemon_exits_when_its_flag_is_raised() {
    let setup = start(Behaviour::Obedient, json!({"kind": "daemon"})).await;
    assert_eq!(setup.running(), 1);
    assert!(setup.stop_for_deletion().await.is_empty());
    assert_eq!(setup.running(), 0);
    let token = setup.token();
    assert_eq!(
        setup.hooks.stopping(token),
        reasons::RESOURCE_DELETED | reasons::DONE
    );
    assert!(!setup.hooks.cancelled(token));
    assert!(
        setup.object.forever_stopped().is_empty(),
        "stopped, not done by itself"
    );
}

#[tokio::test(start_paused = true)]
async fn a_daemon_that_ignores_its_flag_is_signalled_then_cancelled() {
    let spec = json!({"kind": "daemon", "cancellation_backoff": 1.0, "cancellation_timeout": 10.0});
    let setup = start(Behaviour::Cancellable, spec).await;
    let delays = setup.stop_for_deletion().await;
    assert_eq!(delays.len(), 1);
    assert!((0.8..=1.0).contains(&delays[0]), "{delays:?}");
    let token = setup.token();
    assert!(!setup.hooks.cancelled(token));
    tokio::time::sleep(Duration::from_secs_f64(delays[0])).await;
    assert!(setup.stop_for_deletion().await.is_empty());
    assert!(setup.hooks.cancelled(token));
    assert_eq!(setup.running(), 0);
    assert_eq!(
        setup.capture.messages(Level::DEBUG),
        [
            "Daemon 'd' is signalled to exit gracefully.",
            "Daemon 'd' is signalled to exit by force.",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_daemon_that_never_exits_is_abandoned_after_its_timeout() {
    let spec = json!({"kind": "daemon", "cancellation_timeout": 1.0});
    let setup = start(Behaviour::Stubborn, spec).await;
    let delays = setup.stop_for_deletion().await;
    assert_eq!(
        delays.len(),
        1,
        "cancelled, and checked again after the timeout"
    );
    assert!(setup.hooks.cancelled(setup.token()));
    tokio::time::sleep(Duration::from_secs_f64(delays[0])).await;
    assert!(setup.stop_for_deletion().await.is_empty());
    assert_eq!(
        setup.capture.messages(Level::WARN),
        ["Daemon 'd' did not exit in time. Leaving it orphaned."]
    );
    let token = setup.token();
    assert_ne!(setup.hooks.stopping(token) & reasons::DAEMON_ABANDONED, 0);
}

#[tokio::test(start_paused = true)]
async fn without_a_timeout_a_stopping_daemon_is_polled() {
    let setup = start(Behaviour::Stubborn, json!({"kind": "daemon"})).await;
    assert_eq!(setup.stop_for_deletion().await, [60.0]);
    assert_eq!(
        setup.capture.messages(Level::DEBUG),
        ["Daemon 'd' is still exiting. The next check is in 60 seconds."]
    );
}

#[tokio::test(start_paused = true)]
async fn the_operator_exit_stops_daemons_in_one_go() {
    let spec = json!({"kind": "daemon", "cancellation_backoff": 0.5, "cancellation_timeout": 0.5});
    let setup = start(Behaviour::Cancellable, spec).await;
    let started = Instant::now();
    setup
        .daemons
        .stop_all()
        .with_subscriber(setup.capture.subscriber())
        .await;
    let token = setup.token();
    let reasons = setup.hooks.stopping(token);
    let expected =
        reasons::OPERATOR_EXITING | reasons::DAEMON_SIGNALLED | reasons::DAEMON_CANCELLED;
    assert_eq!(reasons & expected, expected);
    assert!(
        started.elapsed() >= Duration::from_secs_f64(0.5),
        "the backoff was waited"
    );
    assert_eq!(setup.running(), 0);
    assert!(setup.capture.messages(Level::WARN).is_empty());
}

#[tokio::test(start_paused = true)]
async fn timers_are_called_on_schedule_until_stopped() {
    let setup = start(
        Behaviour::Returning,
        json!({"kind": "timer", "interval": 1.0}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs_f64(3.5)).await;
    assert_eq!(setup.hooks.calls().len(), 4, "at 0, 1, 2 and 3 seconds");
    assert!(
        setup.stop_for_deletion().await.is_empty(),
        "timers only get the flag"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(setup.hooks.calls().len(), 4);
    assert_eq!(setup.running(), 0);
}
