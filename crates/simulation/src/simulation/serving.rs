//! The simulated API over HTTP, as Kubernetes' REST API: discovery (`/api`, `/apis`, the
//! groups' resource lists), and each resource's collection and objects (list, watch as a
//! stream of JSON lines, get, create, patch, replace, delete, the status subresource). So the
//! engine's own client and the handlers' clients (`kubernetes`, pykube, ...) reach it as they
//! reach a real API server: by a kubeconfig's URL. A CRD created here serves its resource.

use crate::simulation::faults::{Fault, Faults};
use crate::simulation::patching::PatchType;
use crate::simulation::selectors::LabelSelector;
use crate::simulation::store::{key, ApiError, Kind, Store, Watched};
use crate::util::accepting;
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// An answer: a JSON document, or a watch's stream.
type Answer = Response<BoxBody<Bytes, Infallible>>;

/// The version the simulation says it is (`/version`).
const VERSION: &str = "v1.36.3";

/// Serve the store on this listener until the task is aborted, failing the requests that
/// `faults` name.
pub fn serve(
    listener: TcpListener,
    store: Arc<Store>,
    faults: Arc<Faults>,
) -> tokio::task::JoinHandle<()> {
    accepting::accept(listener, "simulated API", move |stream| {
        let (store, faults) = (store.clone(), faults.clone());
        async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (store, faults) = (store.clone(), faults.clone());
                async move { Ok::<_, Infallible>(respond(&store, &faults, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
}

/// The resources that a new cluster serves, besides those of the CRDs created in it.
pub fn builtins() -> Vec<Kind> {
    // As a cluster of Kubernetes 1.36 serves them: their short names, and the `all` category.
    let kind =
        |group: &str, plural: &str, kind: &str, namespaced, status, short: &[&str], all| Kind {
            group: group.into(),
            version: "v1".into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status,
            short_names: short.iter().map(|&name| name.into()).collect(),
            categories: if all { vec!["all".into()] } else { vec![] },
            schema: None, // what they hold is not checked: only the CRDs' schemas are
        };
    vec![
        kind("", "namespaces", "Namespace", false, true, &["ns"], false),
        kind("", "configmaps", "ConfigMap", true, false, &["cm"], false),
        kind("", "secrets", "Secret", true, false, &[], false),
        kind("", "services", "Service", true, true, &["svc"], true),
        kind("", "pods", "Pod", true, true, &["po"], true),
        kind(
            "",
            "serviceaccounts",
            "ServiceAccount",
            true,
            false,
            &["sa"],
            false,
        ),
        kind("", "events", "Event", true, false, &["ev"], false),
        kind(
            "events.k8s.io",
            "events",
            "Event",
            true,
            false,
            &["ev"],
            false,
        ),
        kind(
            "apps",
            "deployments",
            "Deployment",
            true,
            true,
            &["deploy"],
            true,
        ),
        kind(
            "coordination.k8s.io",
            "leases",
            "Lease",
            true,
            false,
            &[],
            false,
        ),
        kind(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
            &["crd", "crds"],
            false,
        ),
    ]
}

const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Version,
    CoreVersions,
    Groups,
    Resources { group: String, version: String },
    Objects(Target),
}

/// A resource's collection or object, as the path names it.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let objects = |group: &str, version: &str, rest: &[&str]| {
        // `/api/v1/namespaces/{name}/status` is a namespace's own subresource, not a resource.
        let own = group.is_empty() && rest.len() == 3 && ["status", "finalize"].contains(&rest[2]);
        let (namespace, rest) = match rest {
            ["namespaces", namespace, rest @ ..] if !rest.is_empty() && !own => {
                (Some((*namespace).to_owned()), rest)
            }
            rest => (None, rest),
        };
        let (plural, name, subresource) = match rest {
            [plural] => (plural, None, None),
            [plural, name] => (plural, Some(name), None),
            [plural, name, subresource] => (plural, Some(name), Some(subresource)),
            _ => return None,
        };
        Some(Route::Objects(Target {
            group: group.to_owned(),
            version: version.to_owned(),
            namespace,
            plural: (*plural).to_owned(),
            name: name.map(|n| (*n).to_owned()),
            subresource: subresource.map(|s| (*s).to_owned()),
        }))
    };
    match segments.as_slice() {
        ["version"] => Some(Route::Version),
        ["api"] => Some(Route::CoreVersions),
        ["apis"] => Some(Route::Groups),
        ["api", version] => Some(Route::Resources {
            group: String::new(),
            version: (*version).to_owned(),
        }),
        ["apis", group, version] => Some(Route::Resources {
            group: (*group).to_owned(),
            version: (*version).to_owned(),
        }),
        ["api", version, rest @ ..] => objects("", version, rest),
        ["apis", group, version, rest @ ..] => objects(group, version, rest),
        _ => None,
    }
}

async fn respond(store: &Store, faults: &Faults, request: Request<Incoming>) -> Answer {
    let target = request.uri().path_and_query().map_or("", |p| p.as_str());
    if let Some(fault) = faults.take(request.method().as_str(), target) {
        return failure(&fault, target);
    }
    let query = query(request.uri().query().unwrap_or_default());
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let content_type = (request.headers().get(http::header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return error(&ApiError::bad_request(format!("the request's body: {e}"))),
    };
    match reply(store, &path, &method, &content_type, &body, &query) {
        Ok(Reply::Document(status, value)) => document(status, &value),
        Ok(Reply::Watch(events, timeout)) => watching(events, timeout),
        Err(e) => error(&e),
    }
}

/// A request answered without HTTP (a test's own reads and writes): its status code and
/// document. A watch is served over HTTP only.
pub fn answer(
    store: &Store,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, Value) {
    let (path, query_text) = uri.split_once('?').unwrap_or((uri, ""));
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        let e = ApiError::bad_request(format!("not an HTTP method: {method:?}"));
        return (e.code, e.status());
    };
    let body = Bytes::copy_from_slice(body);
    match reply(
        store,
        path,
        &method,
        content_type,
        &body,
        &query(query_text),
    ) {
        Ok(Reply::Document(status, value)) => (status.as_u16(), value),
        Ok(Reply::Watch(..)) => {
            let e = ApiError::bad_request("a watch is served over HTTP only".into());
            (e.code, e.status())
        }
        Err(e) => (e.code, e.status()),
    }
}

fn reply(
    store: &Store,
    path: &str,
    method: &Method,
    content_type: &str,
    body: &Bytes,
    query: &BTreeMap<String, String>,
) -> Result<Reply, ApiError> {
    let Some(route) = route(path) else {
        return Err(ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({path})"),
        });
    };
    let ok = |value: Value| Ok(Reply::Document(StatusCode::OK, value));
    match route {
        Route::Version => ok(json!({
            "major": "1", "minor": "36", "gitVersion": VERSION, "platform": "simulated"})),
        Route::CoreVersions => ok(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})),
        Route::Groups => ok(groups(&store.kinds())),
        Route::Resources { group, version } => ok(resources(&store.kinds(), &group, &version)),
        Route::Objects(target) => objects(store, &target, method, content_type, body, query),
    }
}

enum Reply {
    Document(StatusCode, Value),
    Watch(
        tokio::sync::mpsc::UnboundedReceiver<Watched>,
        Option<Duration>,
    ),
}

fn objects(
    store: &Store,
    target: &Target,
    method: &Method,
    content_type: &str,
    body: &Bytes,
    query: &BTreeMap<String, String>,
) -> Result<Reply, ApiError> {
    let resource = key(&target.group, &target.plural);
    let kind = (store.kinds().into_iter())
        .find(|k| k.key() == resource && k.version == target.version)
        .ok_or_else(|| ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({resource})"),
        })?;
    let namespace = target.namespace.as_deref();
    let json = || -> Result<Value, ApiError> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the request's body is not JSON: {e}")))
    };
    let ok = |value: Value| Ok(Reply::Document(StatusCode::OK, value));
    let subresource = target.subresource.as_deref();
    if let Some(other) = subresource.filter(|s| *s != "status" || !kind.status) {
        return Err(ApiError {
            code: 404,
            reason: "NotFound",
            message: format!(
                "the server could not find the requested resource ({resource}/{other})"
            ),
        });
    }
    match (method, &target.name) {
        (&Method::GET, None) => {
            let selector = match query.get("labelSelector").filter(|s| !s.is_empty()) {
                Some(text) => Some(LabelSelector::parse(text).map_err(ApiError::bad_request)?),
                None => None,
            };
            if query.get("fieldSelector").is_some_and(|s| !s.is_empty()) {
                return Err(ApiError::bad_request(
                    "field selectors are not simulated".into(),
                ));
            }
            if query.get("sendInitialEvents").is_some_and(|s| s == "true") {
                return Err(ApiError::bad_request(
                    "streaming lists (sendInitialEvents) are not simulated".into(),
                ));
            }
            if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
                let since = match query.get("resourceVersion").map(String::as_str) {
                    None | Some("") => None,
                    Some(text) => Some(text.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid resourceVersion: {text}"))
                    })?),
                };
                let timeout = query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs);
                let events = store.watch(&resource, namespace, selector, since)?;
                return Ok(Reply::Watch(events, timeout));
            }
            let (items, version) = store.list(&resource, namespace, selector.as_ref())?;
            ok(
                json!({"apiVersion": kind.api_version(), "kind": format!("{}List", kind.kind),
                      "metadata": {"resourceVersion": version.to_string()}, "items": items}),
            )
        }
        (&Method::POST, None) => {
            let made = store.create(&resource, namespace, json()?)?;
            if resource == CRDS {
                return Ok(Reply::Document(
                    StatusCode::CREATED,
                    established(store, made)?,
                ));
            }
            Ok(Reply::Document(StatusCode::CREATED, made))
        }
        (&Method::GET, Some(name)) => ok(store.get(&resource, namespace, name)?),
        (&Method::PATCH, Some(name)) => {
            let patch_type = PatchType::of_content_type(content_type).ok_or_else(|| ApiError {
                code: 415,
                reason: "UnsupportedMediaType",
                message: format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json ({content_type})"),
            })?;
            let patched = store.patch(
                &resource,
                namespace,
                name,
                patch_type,
                &json()?,
                subresource,
            )?;
            ok(if resource == CRDS {
                established(store, patched)?
            } else {
                patched
            })
        }
        (&Method::PUT, Some(name)) => {
            let replaced = store.replace(&resource, namespace, name, json()?, subresource)?;
            ok(if resource == CRDS {
                established(store, replaced)?
            } else {
                replaced
            })
        }
        (&Method::DELETE, Some(name)) => ok(store.delete(&resource, namespace, name)?),
        _ => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!("{method} is not simulated here"),
        }),
    }
}

/// A CRD as created or changed: its resource served, and the CRD told so in its status.
fn established(store: &Store, crd: Value) -> Result<Value, ApiError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let spec = &crd["spec"];
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let version = (versions.iter().find(|v| v["storage"] == json!(true)))
        .or_else(|| versions.iter().find(|v| v["served"] == json!(true)))
        .ok_or_else(|| ApiError::bad_request(format!("the CRD {name} serves no version")))?;
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    store.define(Kind {
        group: text(&spec["group"]),
        version: text(&version["name"]),
        plural: text(&spec["names"]["plural"]),
        kind: text(&spec["names"]["kind"]),
        namespaced: spec["scope"] != json!("Cluster"),
        status: version.pointer("/subresources/status").is_some(),
        short_names: texts(&spec["names"]["shortNames"]),
        categories: texts(&spec["names"]["categories"]),
        schema: (version.pointer("/schema/openAPIV3Schema").cloned()).map(Arc::new),
    });
    let conditions = ["NamesAccepted", "Established"].map(|type_| json!({
        "type": type_, "status": "True", "reason": type_, "message": "",
        "lastTransitionTime": crd.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null)}));
    let status = json!({"status": {"conditions": conditions, "acceptedNames": spec["names"],
                                   "storedVersions": [version["name"]]}});
    store.patch(CRDS, None, &name, PatchType::Merge, &status, Some("status"))
}

/// A list of strings in a document (none if it is not one).
fn texts(value: &Value) -> Vec<String> {
    (value.as_array().into_iter().flatten())
        .filter_map(|item| item.as_str().map(str::to_owned))
        .collect()
}

fn groups(kinds: &[Kind]) -> Value {
    let mut versions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for kind in kinds.iter().filter(|k| !k.group.is_empty()) {
        let found = versions.entry(&kind.group).or_default();
        if !found.contains(&kind.version.as_str()) {
            found.push(&kind.version);
        }
    }
    let groups: Vec<Value> = (versions.into_iter())
        .map(|(group, versions)| {
            let versions: Vec<Value> = (versions.iter())
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect();
            json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resources(kinds: &[Kind], group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for kind in kinds
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        let singular = kind.kind.to_lowercase();
        let mut resource = json!({"name": kind.plural, "singularName": singular,
            "namespaced": kind.namespaced, "kind": kind.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]});
        if !kind.short_names.is_empty() {
            resource["shortNames"] = json!(kind.short_names);
        }
        if !kind.categories.is_empty() {
            resource["categories"] = json!(kind.categories);
        }
        resources.push(resource);
        if kind.status {
            resources.push(json!({"name": format!("{}/status", kind.plural), "singularName": "",
                "namespaced": kind.namespaced, "kind": kind.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    let group_version = match group {
        "" => version.to_owned(),
        group => format!("{group}/{version}"),
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

fn query(text: &str) -> BTreeMap<String, String> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    (text.split('&').filter(|pair| !pair.is_empty()))
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => (decode(key), decode(value)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

fn document(status: StatusCode, value: &Value) -> Answer {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(value.to_string())).boxed())
        .expect("a valid response")
}

/// A failure asked for by a test, as the API server answers with that status.
fn failure(fault: &Fault, target: &str) -> Answer {
    let reason = match fault.status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let message = format!("a simulated failure of {target}");
    let mut answer = error(&ApiError::new(fault.status, reason, message));
    if let Some(seconds) = fault.retry_after {
        answer
            .headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    answer
}

fn error(error: &ApiError) -> Answer {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    document(status, &error.status())
}

/// A watch's answer: one JSON line per event, until the timeout asked for (if any). Its
/// connection is closed after it: the engine's next watch on a connection kept alive after
/// a watch that the server had ended got its headers, but never a line (nor its timeout).
fn watching(
    events: tokio::sync::mpsc::UnboundedReceiver<Watched>,
    timeout: Option<Duration>,
) -> Answer {
    let lines = futures::stream::unfold(events, |mut events| async move {
        let (event_type, object) = events.recv().await?;
        let line = format!(
            "{}\n",
            json!({"type": event_type.name(), "object": *object})
        );
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(line))), events))
    });
    let until = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(365 * 24 * 3600)));
    let body = StreamBody::new(lines.take_until(until));
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONNECTION, "close")
        .body(BodyExt::boxed(body))
        .expect("a valid response")
}

#[cfg(test)]
mod tests;
