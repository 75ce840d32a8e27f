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

pub struct Webhooks {
    pub admission: Arc<Admission>,
    pub conversion: Arc<Conversion>,
}

impl Webhooks {
    /// Wait until the API is discovered: requests before it would find no resources.
    pub async fn discovered(&self) {
        tokio::join!(self.admission.discovered(), self.conversion.discovered());
    }

    /// Where the webhook server is reachable now: for the managed configurations and CRDs.
    pub fn configure(&self, client_config: Value) {
        self.conversion.configure(client_config.clone());
        self.admission.configure(client_config);
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
