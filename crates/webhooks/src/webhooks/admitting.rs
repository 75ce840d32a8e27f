//! One admission review answered by the operator's handlers: which resource, which
//! handlers (the one of the request's path, or all; their filters here, callbacks in one
//! trip to Python), each called once in order, as Kopf does (no retries: any error
//! rejects), then the response with their warnings and their mutations as a JSON-patch.

use super::known::Known;
use super::reviews::{respond, Review, ReviewError};
use super::serving::{AdmissionRequest, Reviewer};
use crate::client::resources::Resource;
use crate::intents::handlers::{Match, WebhookHandler};
use crate::intents::hooks::{
    self, AdmissionCall, HandlerCalls, HandlerKind, Invocation, Rejection,
};
use crate::state::diffs;
use crate::util::dicts;
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

/// Each served resource with the handlers (positions in `Admission::handlers`) selecting it.
pub type Served = Vec<(Arc<Resource>, Vec<usize>)>;

/// The operator's admission handlers and the resources they serve.
pub struct Admission {
    hooks: Arc<dyn HandlerCalls>,
    handlers: Vec<WebhookHandler>,
    /// The resources served, each with its handlers' positions.
    pub served: Known<Served>,
}

impl Admission {
    /// The admission handlers, called through the hooks; no resources served until discovered.
    pub fn new(hooks: Arc<dyn HandlerCalls>, handlers: Vec<WebhookHandler>) -> Self {
        Self {
            hooks,
            handlers,
            served: Known::new(),
        }
    }

    /// The admission handlers.
    pub fn handlers(&self) -> &[WebhookHandler] {
        &self.handlers
    }

    async fn answer(&self, request: AdmissionRequest) -> Result<Value, ReviewError> {
        let review = Review::parse(&request.body)?;
        self.answer_review(request, review).await
    }

    /// Answer a review already read from the request's body.
    pub(crate) async fn answer_review(
        &self,
        request: AdmissionRequest,
        review: Review,
    ) -> Result<Value, ReviewError> {
        let served = self.served.get();
        let resources: Vec<Arc<Resource>> = served.iter().map(|(r, _)| r.clone()).collect();
        let resource = review.find_resource(&resources)?.clone();
        review.check()?;
        let body = Arc::new(review.body().cloned().unwrap_or_default());
        let selecting: &[usize] = (served.iter())
            .find(|(r, _)| Arc::ptr_eq(r, &resource))
            .map_or(&[], |(_, handlers)| handlers.as_slice());
        let reason = request.reason;
        let call = Arc::new(AdmissionCall {
            webhook: request.webhook.clone(),
            operation: review.operation.clone(),
            subresource: review.subresource.clone(),
            dryrun: review.dryrun,
            userinfo: review.userinfo.clone().unwrap_or_default(),
            headers: request.headers,
            sslpeer: request.sslpeer,
        });
        let invocation = |handler: &WebhookHandler| Invocation {
            old: review.old.clone(),
            new: review.new.clone(),
            diff: Some(diffs::diff(review.old.as_ref(), review.new.as_ref())),
            admission: Some(call.clone()),
            ..Invocation::new(
                HandlerKind::Admission,
                handler.index,
                resource.clone(),
                body.clone(),
            )
        };

        // Which handlers: the static filters here, the callbacks of the undecided in one trip.
        let mut candidates: Vec<(&WebhookHandler, Match)> = vec![];
        for handler in selecting.iter().filter_map(|&at| self.handlers.get(at)) {
            let serves = handler.serves(
                reason,
                call.webhook.as_deref(),
                call.operation.as_deref(),
                call.subresource.as_deref(),
            );
            let verdict = handler.filters.prematch(&body, None);
            if serves && verdict != Match::No {
                candidates.push((handler, verdict));
            }
        }
        let undecided: Vec<Invocation> = (candidates.iter())
            .filter(|(_, m)| *m == Match::AskPython)
            .map(|(h, _)| invocation(h))
            .collect();
        let mut verdicts = if undecided.is_empty() {
            vec![]
        } else {
            self.hooks.check_callbacks(undecided).await
        }
        .into_iter();
        let chosen: Vec<&WebhookHandler> = (candidates.into_iter())
            .filter(|(_, m)| *m == Match::Yes || verdicts.next().unwrap_or(false))
            .map(|(h, _)| h)
            .collect();

        // Each once, in order (as Kopf's all-at-once lifecycle runs them): their effects add up.
        let mut rejections: Vec<Rejection> = vec![];
        let mut warnings: Vec<String> = vec![];
        let mut patch = Value::Object(Default::default());
        for handler in chosen {
            let call = invocation(handler);
            let invoked = hooks::invoke_metered(&*self.hooks, call, &handler.id, "admission").await;
            warnings.extend(invoked.warnings);
            if let Some(own) = &invoked.patch {
                dicts::merge_patch_into_patch(&mut patch, own);
            }
            match invoked.rejection {
                Some(rejection) => rejections.push(rejection),
                None if invoked.outcome.exception.is_some() => {
                    let message = invoked.outcome.exception.unwrap_or_default();
                    rejections.push(Rejection::Other(message));
                }
                None => {}
            }
        }
        let ops = json_patch_of(&body, &patch);
        Ok(respond(&review, &rejections, &warnings, &ops))
    }
}

impl Reviewer for Admission {
    fn review(&self, request: AdmissionRequest) -> BoxFuture<'_, Result<Value, ReviewError>> {
        Box::pin(self.answer(request))
    }
}

/// The handlers' merge-patch as the JSON-patch operations that turn the object into the
/// patched one (the form admission responses take); none if it changes nothing.
pub(crate) fn json_patch_of(body: &Value, patch: &Value) -> Vec<Value> {
    if patch.as_object().is_none_or(|p| p.is_empty()) {
        return vec![];
    }
    let mut patched = body.clone();
    dicts::merge(&mut patched, patch);
    let ops = json_patch::diff(body, &patched);
    match serde_json::to_value(ops) {
        Ok(Value::Array(ops)) => ops,
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_patch_becomes_json_patch_operations() {
        let body = json!({"spec": {"field": "x", "gone": 1}, "metadata": {"name": "n"}});
        let patch = json!({"spec": {"injected": 123, "gone": null, "field": "x"}});
        let ops = json_patch_of(&body, &patch);
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/spec/injected", "value": 123}),
                json!({"op": "remove", "path": "/spec/gone"}),
            ]
        );
        assert!(json_patch_of(&body, &json!({})).is_empty());
        assert!(json_patch_of(&body, &json!({"spec": {"field": "x"}})).is_empty());
    }

    use crate::intents::hooks::Invoked;
    use base64::Engine as _;
    use kopf_engine::engine::testing::{self, FakeHooks};

    /// The handlers of Kopf's admission example, in short: `validate1` rejects a wrong field
    /// (code 555), `mutate1` (only for objects labelled `somelabel=somevalue`) injects a
    /// field and warns.
    fn admission() -> (Arc<FakeHooks>, Admission) {
        let hooks = FakeHooks::new(testing::Daemon::Returning);
        *hooks.admitter.lock().unwrap() = |call| match call.handler {
            0 if call.body["spec"]["field"] == "wrong" => Invoked {
                rejection: Some(Rejection::Admission {
                    message: "Meh!".into(),
                    code: Some(555),
                }),
                ..Default::default()
            },
            1 => Invoked {
                patch: Some(json!({"spec": {"injected": 123}})),
                warnings: vec![format!(
                    "as {}",
                    call.admission.as_ref().unwrap().userinfo["username"]
                )],
                ..Default::default()
            },
            _ => Invoked::default(),
        };
        let validate: WebhookHandler = testing::handler(json!({
            "index": 0, "id": "validate1", "reason": "validating"}));
        let mutate: WebhookHandler = testing::handler(json!({
            "index": 1, "id": "mutate1", "reason": "mutating",
            "labels": [["somelabel", {"kind": "equals", "value": "somevalue"}]]}));
        let admission = Admission::new(hooks.clone(), vec![validate, mutate]);
        admission
            .served
            .set(vec![(testing::resource(), vec![0, 1])]);
        (hooks, admission)
    }

    fn review(operation: &str, spec: Value, labels: Value) -> AdmissionRequest {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "operation": operation, "userInfo": {"username": "alice"},
                "resource": {"group": "demo.kopf.dev", "version": "v1", "resource": "greetings"},
                "object": {"metadata": {"name": "g", "labels": labels}, "spec": spec},
            },
        });
        AdmissionRequest {
            body: serde_json::to_vec(&review).unwrap().into(),
            webhook: None,
            headers: vec![],
            sslpeer: json!({}),
            reason: None,
        }
    }

    fn patch_of(response: &Value) -> Value {
        let patch = response["response"]["patch"].as_str().unwrap();
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        serde_json::from_slice(&patch).unwrap()
    }

    #[tokio::test]
    async fn handlers_admit_reject_and_mutate() {
        let (hooks, admission) = admission();
        let labelled = json!({"somelabel": "somevalue"});
        let response = admission
            .answer(review("CREATE", json!({"field": "ok"}), labelled.clone()))
            .await
            .unwrap();
        assert_eq!(response["response"]["allowed"], true);
        assert_eq!(response["response"]["warnings"], json!(["as \"alice\""]));
        assert_eq!(
            patch_of(&response),
            json!([{"op": "add", "path": "/spec/injected", "value": 123}])
        );

        let response = admission
            .answer(review("UPDATE", json!({"field": "wrong"}), json!({})))
            .await
            .unwrap();
        assert_eq!(response["response"]["allowed"], false);
        assert_eq!(
            response["response"]["status"],
            json!({"message": "Meh!", "code": 555})
        );
        assert!(response["response"].get("patch").is_none(), "not labelled");

        // Mutations are not for deletions (unless a handler is for deletions only).
        let calls = hooks.calls().len();
        admission
            .answer(review("DELETE", json!({}), labelled))
            .await
            .unwrap();
        let handlers: Vec<usize> = hooks.calls()[calls..].iter().map(|c| c.handler).collect();
        assert_eq!(handlers, [0], "only the validating handler");
    }

    #[tokio::test]
    async fn a_path_addresses_one_handler_and_bad_requests_fail() {
        let (_, admission) = admission();
        let mut request = review("CREATE", json!({"field": "wrong"}), json!({}));
        request.webhook = Some("mutate1".into());
        let response = admission.answer(request).await.unwrap();
        assert_eq!(
            response["response"]["allowed"], true,
            "validate1 is not asked"
        );
        let mut request = review("CREATE", json!({"field": "wrong"}), json!({}));
        request.reason = Some(crate::intents::handlers::WebhookType::Mutating);
        let response = admission.answer(request).await.unwrap();
        assert_eq!(
            response["response"]["allowed"], true,
            "only the mutating ones"
        );

        let mut unknown = review("CREATE", json!({}), json!({}));
        unknown.body =
            br#"{"request": {"resource": {"group": "x", "version": "v1", "resource": "y"}}}"#
                .to_vec()
                .into();
        let error = admission.answer(unknown).await.unwrap_err();
        assert_eq!(error.http_status(), 404);
        let mut garbage = review("CREATE", json!({}), json!({}));
        garbage.body = b"{not json".to_vec().into();
        assert_eq!(
            admission.answer(garbage).await.unwrap_err().http_status(),
            400
        );
    }
}
