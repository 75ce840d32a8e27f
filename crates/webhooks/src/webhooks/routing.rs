//! One webhook server for both kinds of reviews: each request goes by its review's `kind`,
//! `ConversionReview` to the conversion handlers, anything else to the admission handlers
//! (so custom servers pass both to the same `webhookfn`, as the core's server does).

use super::admitting::Admission;
use super::converting::Conversion;
use super::reviews::{Review, ReviewError};
use super::serving::{AdmissionRequest, Reviewer};
use futures::future::BoxFuture;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::watch;

/// The webhook server's handlers: admission and conversion reviews, each to its kind.
pub struct Webhooks {
    /// The admission handlers.
    pub admission: Arc<Admission>,
    /// The conversion handlers.
    pub conversion: Arc<Conversion>,
    /// Where the API server reaches the server, as it yields it (none until it listens).
    client_config: watch::Sender<Option<Value>>,
}

impl Webhooks {
    /// Nothing reachable yet.
    pub fn new(admission: Arc<Admission>, conversion: Arc<Conversion>) -> Self {
        Self {
            admission,
            conversion,
            client_config: watch::channel(None).0,
        }
    }

    /// Wait until the API is discovered: requests before it would find no resources.
    pub async fn discovered(&self) {
        tokio::join!(
            self.admission.served.known(),
            self.conversion.served.known()
        );
    }

    /// Where the webhook server is reachable now: for the managed configurations and CRDs.
    pub fn configure(&self, client_config: Value) {
        self.client_config.send_replace(Some(client_config));
    }

    /// Follow where the server is reachable.
    pub fn watch_client_config(&self) -> watch::Receiver<Option<Value>> {
        self.client_config.subscribe()
    }

    async fn route(&self, request: AdmissionRequest) -> Result<Value, ReviewError> {
        let review: Value = serde_json::from_slice(&request.body)
            .map_err(|e| ReviewError::BadRequest(format!("The review is not JSON: {e}")))?;
        let conversion = review.get("kind").and_then(Value::as_str) == Some("ConversionReview");
        // A span of the review, under the caller's (the API server's `traceparent`, if it sends one).
        let span = crate::traces::get().map(|tracer| {
            let headers = request
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()));
            let parent = crate::traces::remote_parent(headers);
            let (name, attributes) =
                review_attributes(&review, conversion, request.webhook.as_deref());
            tracer.start(name, SpanKind::Server, attributes, Some(&parent))
        });
        let answering = async {
            if conversion {
                return self.conversion.answer(review).await;
            }
            let review = Review::from_value(&review)?;
            self.admission.answer_review(request, review).await
        };
        let answer = crate::traces::within(span.as_ref(), answering).await;
        if let Some(cx) = &span {
            let problem = match &answer {
                Err(error) => Some(("ReviewError", error.to_string())),
                Ok(response) => refusal(response, conversion).map(|message| ("Refused", message)),
            };
            crate::traces::end(
                cx,
                problem
                    .as_ref()
                    .map(|(kind, message)| (*kind, message.as_str())),
            );
        }
        answer
    }
}

/// A review span's name and attributes: the review's kind, its object and operation.
fn review_attributes(
    review: &Value,
    conversion: bool,
    webhook: Option<&str>,
) -> (&'static str, Vec<KeyValue>) {
    let request = &review["request"];
    if conversion {
        let objects = request["objects"].as_array().map_or(0, Vec::len);
        let attributes = vec![
            KeyValue::new(
                "kopf.conversion.desired_api_version",
                request["desiredAPIVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ),
            KeyValue::new("kopf.conversion.objects", objects as i64),
        ];
        return ("ConversionReview", attributes);
    }
    let mut attributes = vec![];
    for (key, field) in [
        ("kopf.admission.operation", "operation"),
        ("k8s.namespace.name", "namespace"),
        ("kopf.object.name", "name"),
    ] {
        if let Some(value) = request[field].as_str() {
            attributes.push(KeyValue::new(key, value.to_owned()));
        }
    }
    if let Some(resource) = request["resource"]["resource"].as_str() {
        attributes.push(KeyValue::new(
            "kopf.admission.resource",
            resource.to_owned(),
        ));
    }
    if let Some(webhook) = webhook {
        attributes.push(KeyValue::new("kopf.webhook", webhook.to_owned()));
    }
    ("AdmissionReview", attributes)
}

/// What the response refuses: a failed conversion's message, or a denied admission's.
fn refusal(response: &Value, conversion: bool) -> Option<String> {
    let response = &response["response"];
    // (A conversion's outcome is its `result`, an admission's its `status`.)
    let (refused, status) = match conversion {
        true => (
            response["result"]["status"].as_str() == Some("Failed"),
            &response["result"],
        ),
        false => (
            response["allowed"].as_bool() == Some(false),
            &response["status"],
        ),
    };
    refused.then(|| status["message"].as_str().unwrap_or_default().to_owned())
}

impl Reviewer for Webhooks {
    fn review(&self, request: AdmissionRequest) -> BoxFuture<'_, Result<Value, ReviewError>> {
        Box::pin(self.route(request))
    }
}
