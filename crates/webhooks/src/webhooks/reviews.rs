//! Admission reviews as the apiserver sends them and expects them back
//! (`admission.k8s.io/v1`, and `v1beta1` as it is the same shape): what a request says,
//! which served resource it is about, and the response built from the handlers' outcomes.

use crate::client::resources::Resource;
use crate::intents::hooks::Rejection;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// A request that cannot be reviewed at all: answered with an HTTP error, not a review
/// (the API operation under review may be fine, but it could not be checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The review is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// Its resource is not served (404).
    #[error("{0}")]
    UnknownResource(String),
    /// Its resource names several (409).
    #[error("{0}")]
    AmbiguousResource(String),
}

impl ReviewError {
    /// The HTTP status of the answer (as Kopf answers these cases).
    pub fn http_status(&self) -> u16 {
        match self {
            ReviewError::BadRequest(_) => 400,
            ReviewError::UnknownResource(_) => 404,
            ReviewError::AmbiguousResource(_) => 409,
        }
    }
}

/// The parts of an admission request that the handlers and the response need.
#[derive(Debug, Clone, PartialEq)]
pub struct Review {
    /// The request's uid, echoed in the response.
    pub uid: String,
    /// The resource's API group.
    pub group: String,
    /// Its version.
    pub version: String,
    /// Its plural name.
    pub plural: String,
    /// The subresource written, if any.
    pub subresource: Option<String>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: Option<String>,
    /// Checked by [`Review::check`] (after the resource is found, as Kopf checks them).
    pub userinfo: Option<Value>,
    /// Whether the request is a dry run.
    pub dryrun: bool,
    /// The new object (absent for deletions).
    pub new: Option<Value>,
    /// The old object (absent for creations).
    pub old: Option<Value>,
    /// The review's own `apiVersion`, echoed in the response.
    pub api_version: Option<Value>,
    /// The review's own `kind`, echoed in the response.
    pub kind: Option<Value>,
}

impl Review {
    /// Read an AdmissionReview from the request's body.
    pub fn parse(text: &[u8]) -> Result<Self, ReviewError> {
        let review: Value = serde_json::from_slice(text).map_err(|e| {
            ReviewError::BadRequest(format!("The admission review is not JSON: {e}"))
        })?;
        Self::from_value(&review)
    }

    /// The request's parts, from an `AdmissionReview`.
    pub fn from_value(review: &Value) -> Result<Self, ReviewError> {
        let Some(review) = review.as_object() else {
            return Err(ReviewError::BadRequest(
                "The admission review is not a JSON object.".into(),
            ));
        };
        let request = match review.get("request") {
            Some(Value::Object(request)) => request,
            _ => {
                return Err(ReviewError::BadRequest(
                    "The admission review has no request.".into(),
                ))
            }
        };
        let resource = match request.get("resource") {
            Some(Value::Object(resource)) => resource,
            _ => {
                return Err(ReviewError::BadRequest(
                    "The admission request names no resource.".into(),
                ))
            }
        };
        let field = |name: &str| -> Result<String, ReviewError> {
            match resource.get(name) {
                Some(Value::String(text)) => Ok(text.clone()),
                _ => Err(ReviewError::BadRequest(format!(
                    "The admission request's resource has no {name:?}."
                ))),
            }
        };
        let (group, version, plural) = (field("group")?, field("version")?, field("resource")?);
        let text = |name: &str| request.get(name).and_then(Value::as_str).map(str::to_owned);
        let body = |name: &str| match request.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(object @ Value::Object(_)) => Ok(Some(object.clone())),
            Some(_) => Err(ReviewError::BadRequest(format!(
                "The admission request's {name:?} is not an object."
            ))),
        };
        let (new, old) = (body("object")?, body("oldObject")?);
        let userinfo = request.get("userInfo").filter(|u| !u.is_null()).cloned();
        Ok(Review {
            uid: text("uid").unwrap_or_default(),
            group,
            version,
            plural,
            subresource: text("subResource"),
            operation: text("operation"),
            userinfo,
            dryrun: request.get("dryRun").is_some_and(truthy),
            new,
            old,
            api_version: review.get("apiVersion").cloned(),
            kind: review.get("kind").cloned(),
        })
    }

    /// What every handler relies on: who asks, and about which object.
    pub fn check(&self) -> Result<(), ReviewError> {
        if self.userinfo.is_none() {
            return Err(ReviewError::BadRequest(
                "User info is missing from the admission request.".into(),
            ));
        }
        if self.new.is_none() && self.old.is_none() {
            return Err(ReviewError::BadRequest(
                "Either old or new object is missing from the admission request.".into(),
            ));
        }
        Ok(())
    }

    /// The object the handlers see: the new one, or the old one when it is being deleted
    /// (none only if [`Review::check`] fails).
    pub fn body(&self) -> Option<&Value> {
        self.new.as_ref().or(self.old.as_ref())
    }

    /// Which of the served resources this request is about: exactly one, or an error.
    pub(crate) fn find_resource<'a>(
        &self,
        served: &'a [Arc<Resource>],
    ) -> Result<&'a Arc<Resource>, ReviewError> {
        let found: Vec<&Arc<Resource>> = served
            .iter()
            .filter(|r| {
                (&r.group, &r.version, &r.plural) == (&self.group, &self.version, &self.plural)
            })
            .collect();
        let described = || {
            format!(
                "{{'group': {:?}, 'version': {:?}, 'resource': {:?}}}",
                self.group, self.version, self.plural
            )
        };
        match found.as_slice() {
            [one] => Ok(one),
            [] => Err(ReviewError::UnknownResource(format!(
                "The specified resource has no handlers: {}",
                described()
            ))),
            _ => Err(ReviewError::AmbiguousResource(format!(
                "The specified resource is ambiguous: {}",
                described()
            ))),
        }
    }
}

/// JSON's notion of "true" for a flag that may come as anything.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Admission errors first, then Kopf's own errors, then arbitrary ones (Kopf's choice of
/// the one error reported when several handlers fail).
fn rank(rejection: &Rejection) -> u8 {
    match rejection {
        Rejection::Admission { .. } => 0,
        Rejection::Permanent(_) => 1,
        Rejection::Temporary(_) => 2,
        Rejection::Other(_) => 9,
    }
}

/// The response to a review: allowed if no handler failed; the handlers' warnings; the
/// mutations as a base64 JSON-patch; the first failure by rank as the status.
pub fn respond(
    review: &Review,
    failures: &[Rejection],
    warnings: &[String],
    jsonpatch: &[Value],
) -> Value {
    let mut response = Map::new();
    response.insert("uid".into(), Value::String(review.uid.clone()));
    response.insert("allowed".into(), Value::Bool(failures.is_empty()));
    if !warnings.is_empty() {
        response.insert("warnings".into(), json!(warnings));
    }
    if !jsonpatch.is_empty() {
        let encoded = serde_json::to_vec(jsonpatch).expect("JSON values serialise");
        let encoded = base64::engine::general_purpose::STANDARD.encode(encoded);
        response.insert("patch".into(), Value::String(encoded));
        response.insert("patchType".into(), Value::String("JSONPatch".into()));
    }
    // The first of the best rank: a stable sort keeps the handlers' order among equals.
    if let Some(failure) = failures.iter().min_by_key(|r| rank(r)) {
        let (message, code) = match failure {
            Rejection::Admission { message, code } => (message.clone(), code.unwrap_or(500)),
            Rejection::Permanent(m) | Rejection::Temporary(m) | Rejection::Other(m) => {
                (m.clone(), 500)
            }
        };
        response.insert("status".into(), json!({"message": message, "code": code}));
    }
    json!({
        "apiVersion": review.api_version.clone().unwrap_or_else(|| json!("admission.k8s.io/v1")),
        "kind": review.kind.clone().unwrap_or_else(|| json!("AdmissionReview")),
        "response": response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(extra: Value) -> Value {
        let mut review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"metadata": {"name": "x"}},
            },
        });
        for (k, v) in extra.as_object().unwrap() {
            review["request"][k] = v.clone();
        }
        review
    }

    #[test]
    fn a_request_is_read_with_its_parts() {
        let review = Review::from_value(&request(json!({"subResource": "status", "dryRun": true})));
        let review = review.unwrap();
        assert_eq!(review.uid, "u-1");
        assert_eq!(
            (review.group.as_str(), review.plural.as_str()),
            ("kopf.dev", "kopfexamples")
        );
        assert_eq!(review.subresource.as_deref(), Some("status"));
        assert_eq!(review.operation.as_deref(), Some("CREATE"));
        assert!(review.dryrun);
        assert_eq!(review.body().unwrap()["metadata"]["name"], "x");
        assert_eq!(review.check(), Ok(()));
    }

    #[test]
    fn bad_requests_are_told_apart() {
        let bad = |text: &[u8]| Review::parse(text).unwrap_err();
        assert_eq!(bad(b"{nope").http_status(), 400);
        assert_eq!(bad(b"[]").http_status(), 400);
        assert_eq!(
            bad(b"{}").to_string(),
            "The admission review has no request."
        );
        let checked = |extra| Review::from_value(&request(extra)).unwrap().check();
        let no_user = checked(json!({"userInfo": null})).unwrap_err();
        assert_eq!(
            no_user.to_string(),
            "User info is missing from the admission request."
        );
        let no_body = checked(json!({"object": null})).unwrap_err();
        assert_eq!(
            no_body.to_string(),
            "Either old or new object is missing from the admission request."
        );
        let wrong_body = request(json!({"object": "text"}));
        assert_eq!(
            Review::from_value(&wrong_body).unwrap_err().http_status(),
            400
        );
    }

    #[test]
    fn the_resource_is_one_of_the_served_ones() {
        let review = Review::from_value(&request(json!({}))).unwrap();
        let kex = Arc::new(Resource {
            group: "kopf.dev".into(),
            plural: "kopfexamples".into(),
            ..(*kopf_engine::engine::testing::resource()).clone()
        });
        let other = kopf_engine::engine::testing::resource();
        let served = [other.clone(), kex.clone()];
        assert_eq!(
            review.find_resource(&served).unwrap().plural,
            "kopfexamples"
        );
        let err = review.find_resource(&served[..1]).unwrap_err();
        assert_eq!(err.http_status(), 404);
        assert_eq!(
            err.to_string(),
            "The specified resource has no handlers: \
             {'group': \"kopf.dev\", 'version': \"v1\", 'resource': \"kopfexamples\"}"
        );
        let twice = [kex.clone(), kex];
        assert_eq!(review.find_resource(&twice).unwrap_err().http_status(), 409);
    }

    #[test]
    fn the_response_reports_the_best_ranked_failure() {
        let review = Review::from_value(&request(json!({}))).unwrap();
        let allowed = respond(&review, &[], &[], &[]);
        assert_eq!(
            allowed,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u-1", "allowed": true}})
        );
        let failures = [
            Rejection::Other("boom".into()),
            Rejection::Temporary("later".into()),
            Rejection::Admission {
                message: "no".into(),
                code: Some(555),
            },
            Rejection::Admission {
                message: "second".into(),
                code: None,
            },
        ];
        let denied = respond(&review, &failures, &["careful".into()], &[]);
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(
            denied["response"]["status"],
            json!({"message": "no", "code": 555})
        );
        assert_eq!(denied["response"]["warnings"], json!(["careful"]));
        let other = respond(&review, &failures[..2], &[], &[]);
        assert_eq!(
            other["response"]["status"],
            json!({"message": "later", "code": 500})
        );
    }

    #[test]
    fn mutations_travel_as_a_base64_json_patch() {
        let review = Review::from_value(&request(json!({}))).unwrap();
        let ops = [json!({"op": "add", "path": "/spec/injected", "value": 123})];
        let response = respond(&review, &[], &[], &ops);
        assert_eq!(response["response"]["patchType"], "JSONPatch");
        let patch = response["response"]["patch"].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let decoded: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(decoded, json!(ops));
    }
}
