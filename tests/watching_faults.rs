//! Faults a real apiserver does not produce on demand, against a scripted mock API:
//! a 410 Gone in the watch stream (re-list), a silently stalled stream (re-watch
//! from the last version after the inactivity timeout), bookmarks, and errors
//! (backoff and retry).

// Mock servers and the watcher under test are plain tasks of the test.
#![allow(clippy::disallowed_methods)]

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kopf_rs::client::credentials::Credentials;
use kopf_rs::client::resources::Resource;
use kopf_rs::client::watching::{EventType, RawEvent, Watcher};
use kopf_rs::settings::WatchingSettings;
use kopf_rs::util::logging::Capture;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::instrument::WithSubscriber;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// What the mock answers to the n-th list and the n-th watch request.
#[derive(Clone)]
enum Answer {
    Json(u16, Value),
    /// Watch events, then either the end of the stream or a stall.
    Stream(Vec<Value>, bool),
    /// A gateway's throttling: this code, a `Retry-After` header, and no Status in the body.
    Throttled(u16, &'static str),
}

#[derive(Default)]
struct Script {
    lists: Vec<Answer>,
    watches: Vec<Answer>,
    requests: Vec<String>,
    /// When each request came.
    times: Vec<std::time::Instant>,
}

fn obj(name: &str, rv: &str) -> Value {
    json!({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
           "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv}})
}

fn list(items: Vec<Value>, rv: &str) -> Answer {
    Answer::Json(
        200,
        json!({"kind": "GreetingList", "metadata": {"resourceVersion": rv}, "items": items}),
    )
}

async fn serve(script: Arc<Mutex<Script>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let script = script.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let script = script.clone();
                    async move { Ok::<_, Infallible>(answer(&script, request)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{address}")
}

fn answer(script: &Mutex<Script>, request: Request<Incoming>) -> Response<Body> {
    let query = request.uri().query().unwrap_or_default().to_owned();
    let mut script = script.lock().unwrap();
    script.requests.push(query.clone());
    script.times.push(std::time::Instant::now());
    let queue = if query.contains("watch=true") {
        &mut script.watches
    } else {
        &mut script.lists
    };
    let next = if queue.len() > 1 {
        queue.remove(0)
    } else {
        queue[0].clone()
    };
    match next {
        Answer::Json(code, body) => Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(
                Full::new(Bytes::from(body.to_string()))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .unwrap(),
        Answer::Throttled(code, retry_after) => Response::builder()
            .status(code)
            .header("retry-after", retry_after)
            .body(
                Full::new(Bytes::from("Too Many Requests"))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .unwrap(),
        Answer::Stream(events, stall) => {
            let lines = events
                .into_iter()
                .map(|e| Ok::<_, Infallible>(Frame::data(Bytes::from(format!("{e}\n")))));
            let body: Body = if stall {
                let pending = futures::stream::pending::<Result<Frame<Bytes>, Infallible>>();
                StreamBody::new(futures::StreamExt::chain(
                    futures::stream::iter(lines),
                    pending,
                ))
                .boxed()
            } else {
                StreamBody::new(futures::stream::iter(lines)).boxed()
            };
            Response::builder()
                .header("content-type", "application/json")
                .body(body)
                .unwrap()
        }
    }
}

fn resource() -> Arc<Resource> {
    Arc::new(Resource {
        group: "demo.kopf.dev".into(),
        version: "v1".into(),
        plural: "greetings".into(),
        kind: "Greeting".into(),
        singular: "greeting".into(),
        shortcuts: vec![],
        categories: vec![],
        subresources: vec![],
        namespaced: true,
        preferred: true,
        verbs: vec!["list".into(), "watch".into()],
    })
}

async fn collect(
    script: Script,
    count: usize,
) -> (Vec<(EventType, String)>, Vec<String>, Vec<String>) {
    let (events, requests, warnings, _) = collect_timed(script, count).await;
    (events, requests, warnings)
}

/// The same, and when each request came.
async fn collect_timed(
    script: Script,
    count: usize,
) -> (
    Vec<(EventType, String)>,
    Vec<String>,
    Vec<String>,
    Vec<std::time::Instant>,
) {
    let script = Arc::new(Mutex::new(script));
    let server = serve(script.clone()).await;
    let config = kube::Config::new(server.parse().unwrap());
    let client = kopf_rs::client::transport::Transport::plain(&config).unwrap();
    let capture = Capture::default();
    let watcher = Watcher {
        credentials: Credentials::fixed(client),
        resource: resource(),
        namespace: Some("ns".into()),
        settings: WatchingSettings {
            inactivity_timeout: 0.5,
            reconnect_backoff: 0.01,
            ..Default::default()
        },
        paused: None,
        resume_from: None,
        health: None,
        shards: None,
    };
    let (tx, mut rx) = mpsc::channel::<RawEvent>(100);
    let task = tokio::spawn(watcher.run(tx).with_subscriber(capture.subscriber()));
    let mut events = Vec::new();
    while events.len() < count {
        let event = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("the events came in time")
            .expect("the watcher runs");
        let name = event.object["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        events.push((event.event_type, name));
    }
    task.abort();
    let (requests, times) = {
        let script = script.lock().unwrap();
        (script.requests.clone(), script.times.clone())
    };
    let warnings = capture.messages(tracing::Level::WARN);
    (events, requests, warnings, times)
}

#[tokio::test]
async fn gone_relists_and_bookmarks_move_the_version() {
    let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                  "reason": "Expired", "code": 410, "message": "too old"}});
    let script = Script {
        lists: vec![
            list(vec![obj("a", "5")], "10"),
            list(vec![obj("a", "5"), obj("b", "11")], "30"),
        ],
        watches: vec![
            Answer::Stream(
                vec![
                    json!({"type": "ADDED", "object": obj("b", "11")}),
                    json!({"type": "BOOKMARK", "object": {"kind": "Greeting", "apiVersion": "demo.kopf.dev/v1",
                                                           "metadata": {"resourceVersion": "20"}}}),
                ],
                false,
            ),
            Answer::Stream(vec![gone], false),
            Answer::Stream(
                vec![json!({"type": "MODIFIED", "object": obj("a", "31")})],
                true,
            ),
        ],
        ..Default::default()
    };
    let (events, requests, _) = collect(script, 5).await;
    assert_eq!(
        events,
        vec![
            (EventType::Listed, "a".into()),
            (EventType::Added, "b".into()),
            (EventType::Listed, "a".into()), // re-listed after 410 Gone: listing events again, not "new" ones
            (EventType::Listed, "b".into()),
            (EventType::Modified, "a".into()),
        ]
    );
    let watches: Vec<&String> = requests
        .iter()
        .filter(|q| q.contains("watch=true"))
        .collect();
    assert!(
        watches[0].contains("resourceVersion=10")
            && watches[0].contains("allowWatchBookmarks=true")
    );
    assert!(
        watches[1].contains("resourceVersion=20"),
        "re-watch from the bookmark: {watches:?}"
    );
    assert!(
        watches[2].contains("resourceVersion=30"),
        "watch from the new listing: {watches:?}"
    );
}

#[tokio::test]
async fn stalled_streams_are_restarted_from_the_last_version() {
    let script = Script {
        lists: vec![list(vec![], "7")],
        watches: vec![
            Answer::Stream(
                vec![json!({"type": "ADDED", "object": obj("c", "8")})],
                true,
            ), // then silence
            Answer::Stream(
                vec![json!({"type": "MODIFIED", "object": obj("c", "9")})],
                true,
            ),
        ],
        ..Default::default()
    };
    let (events, requests, _) = collect(script, 2).await;
    assert_eq!(
        events,
        vec![
            (EventType::Added, "c".into()),
            (EventType::Modified, "c".into())
        ]
    );
    let lists = requests
        .iter()
        .filter(|q| !q.contains("watch=true"))
        .count();
    assert_eq!(lists, 1, "a stall is not a reason to re-list: {requests:?}");
    assert!(requests
        .iter()
        .any(|q| q.contains("watch=true") && q.contains("resourceVersion=8")));
}

#[tokio::test]
async fn errors_are_retried_with_backoff_and_reported() {
    let script = Script {
        lists: vec![
            Answer::Json(
                500,
                json!({"kind": "Status", "code": 500, "message": "etcd is on fire"}),
            ),
            list(vec![obj("d", "3")], "3"),
        ],
        watches: vec![Answer::Stream(vec![], true)],
        ..Default::default()
    };
    let (events, _, warnings) = collect(script, 1).await;
    assert_eq!(events, vec![(EventType::Listed, "d".into())]);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("Listing failed")
                && w.contains("greetings.v1.demo.kopf.dev in \"ns\"")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn a_throttled_listing_waits_as_long_as_the_header_asks() {
    // A gateway's 429 or 503 with only a header: the watcher's own backoff (0.5-1 s for a
    // first failure) is stretched to the 2 s asked; 1.5 s is the margin of its jitter.
    for code in [429, 503] {
        let script = Script {
            lists: vec![Answer::Throttled(code, "2"), list(vec![obj("t", "5")], "5")],
            watches: vec![Answer::Stream(vec![], true)],
            ..Default::default()
        };
        let (events, _, warnings, times) = collect_timed(script, 1).await;
        assert_eq!(events, vec![(EventType::Listed, "t".into())]);
        let waited = times[1] - times[0];
        assert!(
            waited >= Duration::from_millis(1990),
            "{code}: retried after {waited:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("Listing failed")),
            "{warnings:?}"
        );
    }
}
