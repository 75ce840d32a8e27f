use super::*;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const GREETINGS: &str = "/apis/demo.kopf.dev/v1/namespaces/ns/greetings";

async fn started() -> (String, tokio::task::JoinHandle<()>) {
    let (url, server, _) = started_with_faults().await;
    (url, server)
}

async fn started_with_faults() -> (String, tokio::task::JoinHandle<()>, Arc<Faults>) {
    let store = Arc::new(Store::default());
    for kind in builtins() {
        store.define(kind);
    }
    let faults = Arc::new(Faults::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (url, serve(listener, store, faults.clone()), faults)
}

async fn call(
    url: &str,
    method: Method,
    path: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let request = Request::builder()
        .method(method)
        .uri(format!("{url}{path}"))
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn get(url: &str, path: &str) -> (u16, Value) {
    call(url, Method::GET, path, "application/json", Value::Null).await
}

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "greetings.demo.kopf.dev"},
           "spec": {"group": "demo.kopf.dev", "scope": "Namespaced",
                    "names": {"plural": "greetings", "singular": "greeting", "kind": "Greeting",
                              "shortNames": ["gr"], "categories": ["demo"]},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "subresources": {"status": {}}}]}})
}

#[test]
fn paths_are_routed_as_the_api_server_routes_them() {
    let objects = |path| match route(path) {
        Some(Route::Objects(t)) => (t.namespace, t.plural, t.name, t.subresource),
        other => panic!("{path}: {other:?}"),
    };
    assert_eq!(
        objects("/api/v1/namespaces"),
        (None, "namespaces".into(), None, None)
    );
    assert_eq!(
        objects("/api/v1/namespaces/ns1"),
        (None, "namespaces".into(), Some("ns1".into()), None)
    );
    assert_eq!(
        objects("/api/v1/namespaces/ns1/status"),
        (
            None,
            "namespaces".into(),
            Some("ns1".into()),
            Some("status".into())
        )
    );
    assert_eq!(
        objects("/api/v1/namespaces/ns1/pods"),
        (Some("ns1".into()), "pods".into(), None, None)
    );
    assert_eq!(
        objects("/apis/demo.kopf.dev/v1/namespaces/ns1/greetings/g1/status"),
        (
            Some("ns1".into()),
            "greetings".into(),
            Some("g1".into()),
            Some("status".into())
        )
    );
    assert_eq!(
        objects("/apis/demo.kopf.dev/v1/greetings"),
        (None, "greetings".into(), None, None)
    );
    assert_eq!(
        route("/apis/demo.kopf.dev/v1"),
        Some(Route::Resources {
            group: "demo.kopf.dev".into(),
            version: "v1".into()
        })
    );
    assert_eq!(route("/healthz"), None);
}

#[tokio::test]
async fn a_crd_created_serves_its_resource_in_discovery_and_by_its_paths() {
    let (url, server) = started().await;
    let (status, _) = get(&url, GREETINGS).await;
    assert_eq!(status, 404, "not served before its CRD");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (status, made) = call(&url, Method::POST, crds, "application/json", crd()).await;
    assert_eq!(status, 201);
    let established = made["status"]["conditions"].as_array().unwrap();
    assert!(established
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True"));

    let (_, groups) = get(&url, "/apis").await;
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"demo.kopf.dev") && names.contains(&"apps"),
        "{names:?}"
    );
    let (_, resources) = get(&url, "/apis/demo.kopf.dev/v1").await;
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["greetings", "greetings/status"]);
    // Its short names and categories, by which operators and kubectl name it too.
    assert_eq!(resources["resources"][0]["shortNames"], json!(["gr"]));
    assert_eq!(resources["resources"][0]["categories"], json!(["demo"]));
    let (_, core) = get(&url, "/api/v1").await;
    let configmaps = (core["resources"].as_array().unwrap().iter())
        .find(|r| r["name"] == "configmaps")
        .unwrap();
    assert_eq!(configmaps["shortNames"], json!(["cm"]));
    let (_, core) = get(&url, "/api").await;
    assert_eq!(core["versions"], json!(["v1"]));
    server.abort();
}

#[tokio::test]
async fn objects_are_created_listed_patched_and_deleted_over_http() {
    let (url, server) = started().await;
    call(
        &url,
        Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        crd(),
    )
    .await;
    let (status, made) = call(
        &url,
        Method::POST,
        GREETINGS,
        "application/json",
        json!({"metadata": {"name": "g1", "labels": {"l": "x"}}, "spec": {"who": "w"}}),
    )
    .await;
    assert_eq!(
        (status, made["metadata"]["namespace"].clone()),
        (201, json!("ns"))
    );
    let (_, list) = get(&url, &format!("{GREETINGS}?labelSelector=l%3Dx")).await;
    assert_eq!(
        (
            list["kind"].clone(),
            list["items"].as_array().unwrap().len()
        ),
        (json!("GreetingList"), 1)
    );
    let (_, none) = get(&url, &format!("{GREETINGS}?labelSelector=l%3Dy")).await;
    assert!(none["items"].as_array().unwrap().is_empty());

    let merge = "application/merge-patch+json";
    let (status, patched) = call(
        &url,
        Method::PATCH,
        &format!("{GREETINGS}/g1/status"),
        merge,
        json!({"status": {"ok": true}}),
    )
    .await;
    assert_eq!(
        (status, patched["status"]["ok"].clone()),
        (200, json!(true))
    );
    let (status, refused) = call(
        &url,
        Method::PATCH,
        &format!("{GREETINGS}/g1"),
        "application/json",
        json!({}),
    )
    .await;
    assert_eq!(
        (status, refused["reason"].clone()),
        (415, json!("UnsupportedMediaType"))
    );
    let (status, _) = get(&url, &format!("{GREETINGS}/g1/log")).await;
    assert_eq!(status, 404);
    let (status, missing) = get(&url, &format!("{GREETINGS}/g2")).await;
    assert_eq!(
        (status, missing["kind"].clone(), missing["code"].clone()),
        (404, json!("Status"), json!(404))
    );
    let (status, _) = call(
        &url,
        Method::DELETE,
        &format!("{GREETINGS}/g1"),
        "application/json",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(get(&url, &format!("{GREETINGS}/g1")).await.0, 404);
    server.abort();
}

#[tokio::test]
async fn a_watch_streams_json_lines_from_a_version_until_its_timeout() {
    let (url, server) = started().await;
    let configmaps = "/api/v1/namespaces/ns/configmaps";
    let (_, first) = call(
        &url,
        Method::POST,
        configmaps,
        "application/json",
        json!({"metadata": {"name": "c1"}}),
    )
    .await;
    let since = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    call(
        &url,
        Method::POST,
        configmaps,
        "application/json",
        json!({"metadata": {"name": "c2"}}),
    )
    .await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let uri = format!("{url}{configmaps}?watch=true&resourceVersion={since}&timeoutSeconds=1");
    let response = client.get(uri.parse().unwrap()).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.into_body().collect().await.unwrap().to_bytes(); // ends with the timeout
    let lines: Vec<Value> = String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(
        (
            lines[0]["type"].clone(),
            lines[0]["object"]["metadata"]["name"].clone()
        ),
        (json!("ADDED"), json!("c2"))
    );
    server.abort();
}

#[tokio::test]
async fn a_fault_is_answered_as_the_api_server_fails_and_then_served_again() {
    let (url, server, faults) = started_with_faults().await;
    faults.add(Fault {
        method: Some("GET".into()),
        path: "/configmaps".into(),
        status: 429,
        retry_after: Some(3),
        times: Some(1),
    });
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = Request::get(format!("{url}/api/v1/namespaces/ns/configmaps"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()[http::header::RETRY_AFTER], "3");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let status: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(status["reason"], "TooManyRequests");
    let (code, list) = get(&url, "/api/v1/namespaces/ns/configmaps").await;
    assert_eq!((code, list["items"].clone()), (200, json!([])));
    server.abort();
}

#[tokio::test]
async fn a_watch_opened_again_after_a_cut_gets_the_changes_that_follow() {
    let store = Arc::new(Store::default());
    for kind in builtins() {
        store.define(kind);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = serve(listener, store.clone(), Arc::default());
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let watch = |version: &str| {
        Request::get(format!(
            "{url}/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion={version}"
        ))
        .body(Full::new(Bytes::new()))
        .unwrap()
    };
    let first = client.request(watch("0")).await.unwrap();
    store.cut_watches(false);
    let ended = first.into_body().collect().await.unwrap().to_bytes();
    assert!(ended.is_empty());
    // Opened again on the same connection (the client's pool), as a client resumes.
    let again = client.request(watch("0")).await.unwrap();
    let (status, _) = call(
        &url,
        Method::POST,
        "/api/v1/namespaces/ns/configmaps",
        "application/json",
        json!({"metadata": {"name": "c1"}}),
    )
    .await;
    assert_eq!(status, 201);
    let mut body = again.into_body();
    let frame = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame()).await;
    let chunk = frame
        .expect("a change in time")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&chunk).contains("\"ADDED\""),
        "{chunk:?}"
    );
    server.abort();
}
