//! One webhook server for both kinds of reviews: each request goes by its review's `kind`,
//! `ConversionReview` to the conversion handlers, anything else to the admission handlers
//! (so custom servers pass both to the same `webhookfn`, as the core's server does).

use super::admitting::Admission;
use super::converting::Conversion;
use super::reviews::{Review, ReviewError};
use super::serving::{AdmissionRequest, Reviewer};
use futures::future::BoxFuture;
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
        if review.get("kind").and_then(Value::as_str) == Some("ConversionReview") {
            return self.conversion.answer(review).await;
        }
        let review = Review::from_value(&review)?;
        self.admission.answer_review(request, review).await
    }
}

impl Reviewer for Webhooks {
    fn review(&self, request: AdmissionRequest) -> BoxFuture<'_, Result<Value, ReviewError>> {
        Box::pin(self.route(request))
    }
}
