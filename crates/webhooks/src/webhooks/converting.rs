//! Conversion reviews (`apiextensions.k8s.io/v1` `ConversionReview`): the API server sends
//! objects of a custom resource in the versions they are stored or written in, and wants
//! them in another one. Each object goes through the chain of `@kopf.on.convert` steps from
//! its version to the desired one; all objects of a review in one trip to Python. What the
//! API server forbids a conversion to change (kind, name, namespace, uid, any metadata but
//! labels and annotations) is checked here and refused with the reason.

use super::known::Known;
use super::reviews::ReviewError;
use super::versions::{self, Crd, Step};
use crate::client::resources::Resource;
use crate::intents::hooks::{ConversionRequest, HandlerCalls};
use crate::util::logging::ADMISSION;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// Where the API server sends a CRD's conversion reviews: `{root}/conversion/{crd name}`
/// (the name only shows in the server's logs: the objects' kind tells the CRD).
pub const PATH: &str = "conversion/";

/// The path of a CRD's reviews on a server at the root of its host (where another manager of
/// the CRDs' conversion, OLM, points them at its own service).
pub fn root_path(crd_name: &str) -> String {
    format!("/{PATH}{crd_name}")
}

/// A custom resource whose conversions are served.
#[derive(Debug, Clone)]
pub struct Served {
    /// The custom resource.
    pub crd: Crd,
    /// Its steps, in the order of declaration.
    pub steps: Vec<Step>,
    /// Its versions as discovered (the handlers' `resource` kwarg: the desired one).
    pub resources: Vec<Arc<Resource>>,
    /// Why its conversions cannot be served (the steps do not serve its versions): its
    /// reviews fail with this.
    pub problem: Option<String>,
    /// Its `spec.conversion` as read (with `settings.conversion.managed`: set again if it
    /// is not the operator's).
    pub conversion: Value,
}

/// The operator's conversion handlers and the custom resources they serve.
pub struct Conversion {
    hooks: Arc<dyn HandlerCalls>,
    /// The custom resources served (with their steps: the handlers' positions and versions).
    pub served: Known<Vec<Arc<Served>>>,
    /// The CRDs whose conversion points at the server (with `settings.conversion.managed`).
    configured: watch::Sender<BTreeSet<String>>,
}

impl Conversion {
    /// The conversion handlers, called through the hooks; no CRDs served until discovered.
    pub fn new(hooks: Arc<dyn HandlerCalls>) -> Self {
        Self {
            hooks,
            served: Known::new(),
            configured: watch::channel(BTreeSet::new()).0,
        }
    }

    /// The custom resources served from now on.
    pub fn serve(&self, served: Vec<Served>) {
        self.served.set(served.into_iter().map(Arc::new).collect());
    }

    /// This CRD's conversion points at the server now.
    pub(crate) fn mark_configured(&self, name: &str) {
        self.configured
            .send_if_modified(|names| names.insert(name.to_owned()));
    }

    pub(crate) fn is_configured(&self, name: &str) -> bool {
        self.configured.borrow().contains(name)
    }

    /// Wait until these CRDs' conversions point at the server.
    pub async fn configured(&self, names: &[String]) {
        let mut configured = self.configured.subscribe();
        let _ = configured
            .wait_for(|done| names.iter().all(|n| done.contains(n)))
            .await;
    }

    /// The response to a ConversionReview (a `Failed` one if the objects cannot be
    /// converted); an error only if the request is not a conversion review at all.
    pub async fn answer(&self, review: Value) -> Result<Value, ReviewError> {
        let mut request = Request::parse(review)?;
        let objects = std::mem::take(&mut request.objects);
        if objects.is_empty() {
            return Ok(request.respond(Ok(objects)));
        }
        let started = std::time::Instant::now();
        let count = objects.len() as u64;
        let (resource, outcome) = match self.find(&request, &objects) {
            Err(problem) => (None, Err(problem)),
            Ok(served) => {
                let resource = (served.resources.iter())
                    .find(|r| r.version == request.version)
                    .or(served.resources.first())
                    .cloned();
                let outcome = match (&served.problem, &resource) {
                    (Some(problem), _) => Err(problem.clone()),
                    (None, None) => Err(format!(
                        "{} is not served by the API server.",
                        served.crd.name
                    )),
                    (None, Some(resource)) => {
                        self.convert(&served, resource, &request.version, objects)
                            .await
                    }
                };
                (resource, outcome)
            }
        };
        if let (Some(metrics), Some(resource)) = (crate::metrics::get(), &resource) {
            metrics.conversion(&resource.name(), outcome.is_ok(), count, started.elapsed());
        }
        if let Err(problem) = &outcome {
            tracing::error!(target: ADMISSION, "Conversion to {} failed: {problem}", request.desired);
        }
        Ok(request.respond(outcome))
    }

    /// The served resource of the review's objects (by their group and kind).
    fn find(&self, request: &Request, objects: &[Value]) -> Result<Arc<Served>, String> {
        let first = objects.first();
        let kind = (first.and_then(|o| o.get("kind")).and_then(Value::as_str)).unwrap_or_default();
        (self.served.get().into_iter())
            .find(|s| s.crd.group == request.group && s.crd.kind == kind)
            .ok_or_else(|| {
                format!(
                    "No @kopf.on.convert handlers serve {kind} of {}: nothing converts it.",
                    request.group
                )
            })
    }

    /// The objects in the desired version, in their order. Those already in it stay as they
    /// are; the others are taken (not copied) into one trip to the handlers, and what comes
    /// back is checked against what was kept of them.
    async fn convert(
        &self,
        served: &Served,
        resource: &Arc<Resource>,
        version: &str,
        mut objects: Vec<Value>,
    ) -> Result<Vec<Value>, String> {
        let mut originals = Vec::new();
        let mut pending = Vec::new();
        for (at, object) in objects.iter_mut().enumerate() {
            let steps = chain(served, object, version)?;
            if !steps.is_empty() {
                originals.push((at, Original::of(object)));
                pending.push((std::mem::take(object), steps));
            }
        }
        if pending.is_empty() {
            return Ok(objects);
        }
        let request = ConversionRequest {
            resource: resource.clone(),
            objects: pending,
        };
        let converted = self.hooks.convert(request).await?;
        if converted.len() != originals.len() {
            return Err(format!(
                "The conversion handlers returned {} objects for {}.",
                converted.len(),
                originals.len()
            ));
        }
        let desired = format!("{}/{version}", served.crd.group);
        for ((at, original), object) in originals.into_iter().zip(converted) {
            objects[at] = checked(original, object, &desired)?;
        }
        Ok(objects)
    }
}

/// What the checks of a converted object need of the original: its kind and metadata.
struct Original {
    kind: Option<Value>,
    metadata: Map<String, Value>,
    described: String,
}

impl Original {
    fn of(object: &Value) -> Self {
        Self {
            kind: object.get("kind").cloned(),
            metadata: (object.get("metadata").and_then(Value::as_object).cloned())
                .unwrap_or_default(),
            described: describe(object),
        }
    }
}

/// The steps that lead an object from its version to the desired one.
fn chain(served: &Served, object: &Value, version: &str) -> Result<Vec<usize>, String> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, own) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if group != served.crd.group {
        return Err(format!(
            "{} is of {api_version:?}, not of {}.",
            describe(object),
            served.crd.group
        ));
    }
    versions::path(&served.steps, own, version).ok_or_else(|| {
        format!(
            "No chain of @kopf.on.convert steps leads {} from {own} to {version} in {}.",
            describe(object),
            served.crd.name
        )
    })
}

/// The converted object as the API server takes it: in the desired version, and with what
/// the conversion may not change kept as it was; or why it cannot be taken.
fn checked(original: Original, converted: Value, desired: &str) -> Result<Value, String> {
    let name = &original.described;
    let Value::Object(mut converted) = converted else {
        return Err(format!("The conversion of {name} did not make an object."));
    };
    if converted.get("kind") != original.kind.as_ref() {
        return Err(format!(
            "The conversion of {name} changed its kind to {}: a conversion keeps the kind.",
            converted.get("kind").unwrap_or(&Value::Null)
        ));
    }
    let mut metadata = original.metadata;
    let after = match converted.remove("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(after)) => after,
        Some(other) => {
            return Err(format!(
                "The conversion of {name} made metadata of {other}."
            ))
        }
    };
    for (key, value) in &after {
        match key.as_str() {
            "labels" | "annotations" => {}
            _ if metadata.get(key) == Some(value) => {}
            _ => {
                return Err(format!(
                    "The conversion of {name} changed metadata.{key} (from {} to {value}): a \
                     conversion may change only the labels and annotations.",
                    metadata.get(key).unwrap_or(&Value::Null),
                ))
            }
        }
    }
    for key in ["labels", "annotations"] {
        match after.get(key) {
            None | Some(Value::Null) => {
                metadata.remove(key);
            }
            Some(Value::Object(map)) => {
                if let Some((k, v)) = map.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!(
                        "The conversion of {name} made metadata.{key}[{k:?}] {v}: it must be a string."
                    ));
                }
                metadata.insert(key.into(), Value::Object(map.clone()));
            }
            Some(other) => {
                return Err(format!(
                    "The conversion of {name} made metadata.{key} of {other}."
                ))
            }
        }
    }
    converted.insert("apiVersion".into(), Value::String(desired.to_owned()));
    converted.insert("metadata".into(), Value::Object(metadata));
    Ok(Value::Object(converted))
}

/// `Kind namespace/name`, for messages.
fn describe(object: &Value) -> String {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let kind = text("/kind").unwrap_or("an object");
    match (text("/metadata/namespace"), text("/metadata/name")) {
        (Some(namespace), Some(name)) => format!("{kind} {namespace}/{name}"),
        (None, Some(name)) => format!("{kind} {name}"),
        _ => kind.to_owned(),
    }
}

/// What a ConversionReview asks.
struct Request {
    uid: String,
    /// `group/version`, and its parts.
    desired: String,
    group: String,
    version: String,
    objects: Vec<Value>,
    /// The review's own `apiVersion`, echoed in the response.
    api_version: Value,
}

impl Request {
    /// Read from the review, its objects taken out of it (not copied).
    fn parse(mut review: Value) -> Result<Self, ReviewError> {
        let bad = |what: &str| ReviewError::BadRequest(format!("The conversion review {what}."));
        let objects = match review.pointer_mut("/request/objects").map(Value::take) {
            Some(Value::Array(objects)) => objects,
            _ => return Err(bad("has no objects")),
        };
        let request = review.get("request").ok_or_else(|| bad("has no request"))?;
        let uid = (request.get("uid").and_then(Value::as_str)).ok_or_else(|| bad("has no uid"))?;
        let desired = (request.get("desiredAPIVersion").and_then(Value::as_str))
            .ok_or_else(|| bad("has no desiredAPIVersion"))?;
        let (group, version) = desired
            .rsplit_once('/')
            .ok_or_else(|| bad("wants a version without a group"))?;
        Ok(Self {
            uid: uid.to_owned(),
            desired: desired.to_owned(),
            group: group.to_owned(),
            version: version.to_owned(),
            objects,
            api_version: (review.get("apiVersion").cloned())
                .unwrap_or_else(|| json!("apiextensions.k8s.io/v1")),
        })
    }

    fn respond(self, outcome: Result<Vec<Value>, String>) -> Value {
        let response = match outcome {
            Ok(converted) => json!({
                "uid": self.uid,
                "convertedObjects": converted,
                "result": {"status": "Success"},
            }),
            Err(message) => json!({
                "uid": self.uid,
                "result": {"status": "Failed", "message": message},
            }),
        };
        json!({"apiVersion": self.api_version, "kind": "ConversionReview", "response": response})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::versions::step;
    use kopf_engine::engine::testing::{self, FakeHooks};

    fn conversion(problem: Option<&str>) -> (Arc<FakeHooks>, Conversion) {
        let hooks = FakeHooks::new(testing::Daemon::Returning);
        let conversion = Conversion::new(hooks.clone());
        let crd = Crd {
            name: "greetings.demo.kopf.dev".into(),
            group: "demo.kopf.dev".into(),
            kind: "Greeting".into(),
            versions: vec!["v1".into(), "v2".into(), "v3".into()],
            served: vec!["v1".into(), "v2".into(), "v3".into()],
            storage: Some("v1".into()),
        };
        let steps = vec![
            step("v1", "v2", 0),
            step("v2", "v3", 1),
            step("v3", "v1", 2),
        ];
        conversion.serve(vec![Served {
            crd,
            steps,
            resources: vec![testing::resource()],
            problem: problem.map(str::to_owned),
            conversion: Value::Null,
        }]);
        (hooks, conversion)
    }

    fn greeting(version: &str, name: &str) -> Value {
        json!({"apiVersion": format!("demo.kopf.dev/{version}"), "kind": "Greeting",
               "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                            "resourceVersion": "7", "labels": {"a": "b"}},
               "spec": {"steps": []}})
    }

    fn review(desired: &str, objects: Vec<Value>) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "request": {"uid": "r-1", "desiredAPIVersion": desired, "objects": objects}})
    }

    #[tokio::test]
    async fn objects_go_through_their_chains_in_one_trip() {
        let (hooks, conversion) = conversion(None);
        let objects = vec![
            greeting("v1", "a"),
            greeting("v3", "b"),
            greeting("v2", "c"),
        ];
        let response = conversion
            .answer(review("demo.kopf.dev/v2", objects))
            .await
            .unwrap();
        assert_eq!(response["kind"], "ConversionReview");
        assert_eq!(response["response"]["uid"], "r-1");
        assert_eq!(response["response"]["result"], json!({"status": "Success"}));
        let converted = response["response"]["convertedObjects"].as_array().unwrap();
        let steps: Vec<&Value> = converted.iter().map(|o| &o["spec"]["steps"]).collect();
        assert_eq!(steps, [&json!([0]), &json!([2, 0]), &json!([])]);
        assert!(converted
            .iter()
            .all(|o| o["apiVersion"] == "demo.kopf.dev/v2"));
        assert_eq!(converted[1]["metadata"]["uid"], "uid-b");
        // One trip, for the two objects that needed conversion.
        assert_eq!(
            *hooks.conversions.lock().unwrap(),
            vec![vec![vec![0], vec![2, 0]]]
        );
    }

    #[tokio::test]
    async fn failures_answer_failed_with_the_reason() {
        let (hooks, conversion) = conversion(None);
        *hooks.converter.lock().unwrap() = |_| Err("Greeting ns/a: 'v1_to_v2' failed: boom".into());
        let response = conversion
            .answer(review("demo.kopf.dev/v2", vec![greeting("v1", "a")]))
            .await
            .unwrap();
        assert_eq!(
            response["response"]["result"],
            json!({"status": "Failed", "message": "Greeting ns/a: 'v1_to_v2' failed: boom"})
        );
        assert!(response["response"].get("convertedObjects").is_none());

        let (_, conversion) = conversion_with_problem();
        let response = conversion
            .answer(review("demo.kopf.dev/v2", vec![greeting("v1", "a")]))
            .await
            .unwrap();
        assert_eq!(
            response["response"]["result"]["message"],
            "no way from v2 to v1"
        );

        let (_, conversion) = conversion_without_problem();
        let other =
            json!({"apiVersion": "other.dev/v1", "kind": "Other", "metadata": {"name": "x"}});
        let response = conversion
            .answer(review("other.dev/v2", vec![other]))
            .await
            .unwrap();
        let message = response["response"]["result"]["message"].as_str().unwrap();
        assert!(
            message.contains("No @kopf.on.convert handlers serve Other of other.dev"),
            "{message}"
        );

        let response = conversion
            .answer(review("demo.kopf.dev/v9", vec![greeting("v1", "a")]))
            .await
            .unwrap();
        let message = response["response"]["result"]["message"].as_str().unwrap();
        assert!(
            message.contains("leads Greeting ns/a from v1 to v9"),
            "{message}"
        );

        let error = conversion.answer(json!({"request": {}})).await.unwrap_err();
        assert_eq!(error.http_status(), 400);
    }

    fn conversion_with_problem() -> (Arc<FakeHooks>, Conversion) {
        conversion(Some("no way from v2 to v1"))
    }

    fn conversion_without_problem() -> (Arc<FakeHooks>, Conversion) {
        conversion(None)
    }

    #[tokio::test]
    async fn an_empty_review_is_answered_without_calls() {
        let (hooks, conversion) = conversion(None);
        let response = conversion
            .answer(review("demo.kopf.dev/v2", vec![]))
            .await
            .unwrap();
        assert_eq!(response["response"]["result"]["status"], "Success");
        assert_eq!(response["response"]["convertedObjects"], json!([]));
        assert!(hooks.conversions.lock().unwrap().is_empty());
    }

    #[test]
    fn only_labels_and_annotations_may_change() {
        let original = greeting("v1", "a");
        let desired = "demo.kopf.dev/v2";
        // Labels changed, metadata partly returned: the rest is kept as it was.
        let converted = json!({"kind": "Greeting", "apiVersion": "demo.kopf.dev/v1",
                               "metadata": {"labels": {"a": "c"}, "annotations": {"x": "y"}},
                               "spec": {"new": 1}});
        let object = checked(Original::of(&original), converted, desired).unwrap();
        assert_eq!(object["apiVersion"], desired);
        assert_eq!(object["metadata"]["uid"], "uid-a");
        assert_eq!(object["metadata"]["resourceVersion"], "7");
        assert_eq!(object["metadata"]["labels"], json!({"a": "c"}));
        assert_eq!(object["metadata"]["annotations"], json!({"x": "y"}));
        assert_eq!(object["spec"], json!({"new": 1}));

        let renamed = json!({"kind": "Greeting", "metadata": {"name": "other"}});
        let error = checked(Original::of(&original), renamed, desired).unwrap_err();
        assert!(
            error.contains("changed metadata.name (from \"a\" to \"other\")"),
            "{error}"
        );
        let rekinded = json!({"kind": "Salute", "metadata": {}});
        let error = checked(Original::of(&original), rekinded, desired).unwrap_err();
        assert!(error.contains("changed its kind to \"Salute\""), "{error}");
        let numeric = json!({"kind": "Greeting", "metadata": {"labels": {"n": 1}}});
        let error = checked(Original::of(&original), numeric, desired).unwrap_err();
        assert!(
            error.contains("metadata.labels[\"n\"] 1: it must be a string"),
            "{error}"
        );
        let error = checked(Original::of(&original), json!([1]), desired).unwrap_err();
        assert!(error.contains("did not make an object"), "{error}");
    }
}
