//! Kubernetes Events about objects (`kopf.event/info/warn/exception`), posted in
//! the background, in order per object; a failed post is logged, never fatal.

use crate::client::credentials::Credentials;
use crate::util::encoding::to_python_repr;
use crate::util::logging::ENGINE;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The API's limit for an event's message; longer ones are cut in the middle.
const MAX_MESSAGE_LENGTH: usize = 1024;
const CUT_MESSAGE_INFIX: &str = "...";

#[derive(Debug, Clone, Deserialize)]
pub struct K8sEvent {
    /// The involved object's reference: apiVersion, kind, namespace, name, uid.
    pub reference: Value,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
}

pub struct Poster {
    pub credentials: Arc<Credentials>,
    pub component: String,
    pub instance: String,
    pub name_prefix: String,
}

/// Kopf's cut: keep the head and the tail, with "..." between, within the limit (in characters).
pub fn cut_message(message: &str) -> String {
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
    pub async fn run(self, mut events: mpsc::UnboundedReceiver<K8sEvent>) {
        while let Some(event) = events.recv().await {
            self.post(event).await;
        }
    }

    async fn post(&self, event: K8sEvent) {
        let reference = &event.reference;
        // Events about events would breed more events.
        if reference.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && reference.get("kind").and_then(Value::as_str) == Some("Event")
        {
            return;
        }
        let namespace = reference
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            .unwrap_or("default")
            .to_owned();
        let mut involved = reference.clone();
        involved["namespace"] = Value::String(namespace.clone());
        let now = crate::state::progression::format_time(chrono::Utc::now());
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
        let result = self.credentials.post(&url, &body).await;
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
