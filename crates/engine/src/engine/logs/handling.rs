//! The handling task of one pod: its matched lines, one after another, each to its
//! handlers in their order; a handler's failure is retried as its `errors=`, `retries=`,
//! `timeout=` and `backoff=` say (decided on the Python side), before the next line. The
//! task lives while the pod has readers or lines waiting.

use super::{Line, Logs, Pod};
use crate::intents::hooks::{self, HandlerKind, Invocation, LogCall};
use crate::object_log;
use crate::state::patches::Patch;
use crate::state::progression::format_time;
use crate::util::logging::ObjectRef;
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tracing::Level;

pub(super) async fn handle(logs: Arc<Logs>, pod: Arc<Pod>) {
    loop {
        let woken = pod.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let next = {
            let mut state = pod.state();
            if logs.halted() {
                state.drop_queue();
            }
            match state.queue.pop_front() {
                Some(line) => {
                    let at = (line.container.clone(), line.before.clone());
                    state.current = Some(at);
                    Some(line)
                }
                None if state.readers.is_empty() || logs.halted() => {
                    state.handling = false;
                    return;
                }
                None => None,
            }
        };
        let Some(line) = next else {
            woken.await;
            continue;
        };
        pod.room.notify_waiters();
        let handled = handle_line(&logs, &pod, &line).await;
        let mut state = pod.state();
        state.current = None;
        if !handled {
            // Halted amid its retries: it is read (and handled) again after the pause.
            state.rewind(&line.container, &line.before);
        }
    }
}

/// Call the line's handlers; false if the operator halted before they all succeeded.
async fn handle_line(logs: &Logs, pod: &Pod, line: &Line) -> bool {
    let call = Arc::new(LogCall {
        line: line.text.clone(),
        container: line.container.clone(),
        timestamp: line.timestamp.clone(),
    });
    for &at in &line.handlers {
        let handler = &logs.handlers()[at];
        let started = Utc::now();
        let mut retry = 0;
        loop {
            if logs.halted() {
                return false;
            }
            // Counted before the pause is checked: a pause that comes later waits for the call.
            let busy = logs.pause.busy();
            if !logs.pause.is_active() {
                drop(busy);
                // Paused, and not told yet (or a lease not renewed in time): the pause halts
                // this task soon, or ends.
                sleep_unless_halted(logs, pod, 1.0).await;
                continue;
            }
            let body = pod.state().body.clone();
            let runtime = (Utc::now() - started).num_microseconds().unwrap_or(0) as f64 / 1e6;
            let invocation = Invocation {
                retry,
                started: Some(format_time(started)),
                runtime,
                log: Some(call.clone()),
                ..Invocation::new(
                    HandlerKind::Logging,
                    handler.index,
                    logs.ctx.resource.clone(),
                    body.clone(),
                )
            };
            let invoked =
                hooks::invoke_metered(&*logs.ctx.hooks, invocation, &handler.id, "logging").await;
            drop(busy);
            let mut patch = Patch::default();
            invoked.apply_to(&handler.id, &mut patch);
            if !patch.is_empty() {
                let object = ObjectRef::of(&body);
                let writing = logs.ctx.patcher.apply(&body, patch);
                drop(body);
                if let Err(error) = writing.await {
                    let error = crate::util::errors::chain(&error);
                    let id = &handler.id;
                    object_log!(
                        Level::ERROR,
                        &object,
                        "Patching by log handler {id:?} failed: {error}"
                    );
                }
            }
            if invoked.outcome.final_ {
                break;
            }
            retry += 1;
            sleep_unless_halted(logs, pod, invoked.outcome.delay.unwrap_or(0.0)).await;
        }
    }
    true
}

/// Sleep this long, or less if the operator halts meanwhile (the pod's task is woken then).
async fn sleep_unless_halted(logs: &Logs, pod: &Pod, seconds: f64) {
    let delay = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX);
    let far = Duration::from_secs(365 * 24 * 3600);
    let deadline = (tokio::time::Instant::now().checked_add(delay))
        .unwrap_or_else(|| tokio::time::Instant::now() + far);
    while !logs.halted() {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return,
            _ = pod.wake.notified() => {}
        }
    }
}
