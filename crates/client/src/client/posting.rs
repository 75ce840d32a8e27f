//! Kubernetes Events about objects (`kopf.event/info/warn/exception`), posted in
//! the background, in order per object; a failed post is retried with its backoffs,
//! then logged, never fatal.

use crate::client::credentials::Credentials;
use crate::settings::Pauses;
use crate::util::encoding::to_python_repr;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

/// The API's limit for an event's message; longer ones are cut in the middle.
const MAX_MESSAGE_LENGTH: usize = 1024;
const CUT_MESSAGE_INFIX: &str = "...";

/// A Kubernetes Event to post about an object (`kopf.event()` & co., or a log line).
#[derive(Debug, Clone, Deserialize)]
pub struct K8sEvent {
    /// The involved object's reference: apiVersion, kind, namespace, name, uid.
    pub reference: Value,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The Event's reason (`Logging` for log lines).
    pub reason: String,
    /// The message (cut to 1024 characters).
    pub message: String,
    /// Delays before the retries of a failed post (`settings.posting.*_backoffs`, `backoffs=`).
    #[serde(default)]
    pub backoffs: Pauses,
}

/// Posts the Events, each object's in order, apart from the handlers.
pub struct Poster {
    /// The API's credentials.
    pub credentials: Arc<Credentials>,
    /// The Events' reporting component (`settings.posting.reporting_component`).
    pub component: String,
    /// The Events' reporting instance (`settings.posting.reporting_instance`).
    pub instance: String,
    /// The prefix of the Events' names (`settings.posting.event_name_prefix`).
    pub name_prefix: String,
    /// At most this many objects' workers at once (`settings.posting.worker_limit`).
    pub worker_limit: Option<usize>,
    /// A worker exits after this long without its object's events.
    pub idle_timeout: f64,
}

/// Kopf's cut: keep the head and the tail, with "..." between, within the limit (in characters).
pub(crate) fn cut_message(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= MAX_MESSAGE_LENGTH {
        return message.to_owned();
    }
    let infix = CUT_MESSAGE_INFIX.chars().count();
    let head = MAX_MESSAGE_LENGTH / 2 - infix / 2;
    let tail = MAX_MESSAGE_LENGTH / 2 - (infix - infix / 2);
    let prefix: String = chars[..head].iter().collect();
    let suffix: String = chars[chars.len() - tail..].iter().collect();
    format!("{prefix}{CUT_MESSAGE_INFIX}{suffix}")
}

impl Poster {
    /// Post each object's events in order, by a worker of its own (so that one object's
    /// retries never hold up another's), which exits when its object has been quiet a while.
    pub async fn run(self, mut events: mpsc::UnboundedReceiver<K8sEvent>) {
        let poster = Arc::new(self);
        let limiter = (poster.worker_limit).map(|limit| Arc::new(Semaphore::new(limit.max(1))));
        let mut queues: HashMap<String, mpsc::UnboundedSender<K8sEvent>> = HashMap::new();
        let mut workers: JoinSet<String> = JoinSet::new();
        loop {
            tokio::select! {
                event = events.recv() => {
                    let Some(event) = event else { break };
                    let key = object_key(&event.reference);
                    // A worker that has just exited for idleness closed its queue: start another.
                    let event = match queues.get(&key) {
                        Some(queue) => match queue.send(event) {
                            Ok(()) => continue,
                            Err(mpsc::error::SendError(event)) => event,
                        },
                        None => event,
                    };
                    let (tx, rx) = mpsc::unbounded_channel();
                    let _ = tx.send(event);
                    queues.insert(key.clone(), tx);
                    tasks::spawn_in(&mut workers, poster.clone().work(key, rx, limiter.clone()));
                }
                Some(Ok(key)) = workers.join_next() => {
                    if queues.get(&key).is_some_and(mpsc::UnboundedSender::is_closed) {
                        queues.remove(&key);
                    }
                }
            }
        }
    }

    /// One object's worker: its events in order, until none comes for the idle timeout.
    async fn work(
        self: Arc<Self>,
        key: String,
        mut queue: mpsc::UnboundedReceiver<K8sEvent>,
        limiter: Option<Arc<Semaphore>>,
    ) -> String {
        let _slot = match limiter {
            Some(limiter) => Some(limiter.acquire_owned().await.expect("never closed")),
            None => None,
        };
        let idle = Duration::from_secs_f64(self.idle_timeout.max(0.0));
        loop {
            match tokio::time::timeout(idle, queue.recv()).await {
                Ok(Some(event)) => self.post(event).await,
                Ok(None) => break,
                Err(_idle) => {
                    // No more events for this queue; those sent meanwhile are still posted.
                    queue.close();
                    while let Ok(event) = queue.try_recv() {
                        self.post(event).await;
                    }
                    break;
                }
            }
        }
        key
    }

    async fn post(&self, event: K8sEvent) {
        let reference = &event.reference;
        // Events about events would breed more events.
        if reference.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && reference.get("kind").and_then(Value::as_str) == Some("Event")
        {
            return;
        }
        // Events of cluster-scoped objects go to the login's namespace, as in Kopf.
        let namespace = (reference.get("namespace").and_then(Value::as_str))
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned)
            .or_else(|| self.credentials.default_namespace())
            .unwrap_or_else(|| "default".to_owned());
        let mut involved = reference.clone();
        involved["namespace"] = Value::String(namespace.clone());
        let now = crate::state::progression::format_time(crate::util::clock::now());
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"namespace": namespace, "generateName": self.name_prefix},
            "action": "Action?",
            "type": event.type_,
            "reason": event.reason,
            "message": cut_message(&event.message),
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "source": {"component": self.component},
            "involvedObject": involved,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": now,
        });
        let url = format!("/api/v1/namespaces/{namespace}/events");
        let result = (self.credentials)
            .post_with(&url, &body, Some(&event.backoffs))
            .await;
        if let Err(error) = result {
            if tracing::enabled!(target: ENGINE, tracing::Level::WARN) {
                let repr = |text: &str| to_python_repr(&Value::String(text.to_owned()));
                let what = match &error {
                    kube::Error::Api(status) => format!(
                        "Code: {}. Message: {}. Details: {}",
                        status.code,
                        status.message,
                        status.details.as_ref().map_or("None".into(), |d| {
                            to_python_repr(&serde_json::to_value(d).unwrap_or_default())
                        })
                    ),
                    other => format!("Message: {}.", crate::util::errors::chain(other)),
                };
                tracing::warn!(
                    target: ENGINE,
                    "Failed to post an event. Ignoring and continuing. {what}Event: type={}, reason={}, message={}.",
                    repr(&event.type_),
                    repr(&event.reason),
                    repr(&event.message)
                );
            }
        }
    }
}

/// Which object's worker posts an event: its uid, else its kind, namespace and name.
fn object_key(reference: &Value) -> String {
    match reference.get("uid").and_then(Value::as_str) {
        Some(uid) if !uid.is_empty() => uid.to_owned(),
        _ => reference.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_in_the_middle() {
        let message = format!("{}{}", "a".repeat(1000), "b".repeat(1000));
        let cut = cut_message(&message);
        assert_eq!(cut.chars().count(), 1024);
        assert!(cut.starts_with(&"a".repeat(511)));
        assert!(cut.contains("a..."));
        assert!(cut.ends_with(&"b".repeat(510)));
        assert_eq!(cut_message("short"), "short");
    }
}
