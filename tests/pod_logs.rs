//! A container's log, followed through the real API server from a pod on a simulated node
//! (kwok, see python/kopf/_operating/cluster/kwok.yaml), resumes after a break without losing or repeating a
//! line, also among lines of the same time.

mod common;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kopf_rs::client::connection_info::ConnectionInfo;
use kopf_rs::client::credentials::{Credentials, Network};
use kopf_rs::client::logs::{LogFollower, Position};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::json;
use std::io::Write;
use std::time::Duration;

fn cri(time: &str, text: &str) -> String {
    format!("{time} stdout F {text}\n")
}

async fn credentials() -> std::sync::Arc<Credentials> {
    let pki = common::kubeconfig().parent().unwrap().join("pki");
    let kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::kubeconfig()).unwrap()).unwrap();
    let info = ConnectionInfo {
        server: kubeconfig["clusters"][0]["cluster"]["server"]
            .as_str()
            .unwrap()
            .into(),
        ca_path: Some(pki.join("ca.crt").display().to_string()),
        token: Some(
            std::fs::read_to_string(pki.join("admin.token"))
                .unwrap()
                .trim()
                .into(),
        ),
        ..Default::default()
    };
    Credentials::connect(&info, None, Network::default())
        .await
        .expect("connected")
}

/// The next line's text; retried while kwok does not know the pod's Logs yet (its stream
/// then ends at once, or is refused).
async fn read(follower: &mut LogFollower, credentials: &Credentials) -> String {
    for _ in 0..50 {
        let next = tokio::time::timeout(Duration::from_secs(20), follower.next(credentials));
        match next.await.expect("a line in time") {
            Ok(Some(line)) => return String::from_utf8(line.text).unwrap(),
            Ok(None) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    panic!("no line in 10 s");
}

#[tokio::test]
async fn a_followed_log_resumes_after_a_break_without_losses_or_repeats() {
    let client = common::client().await;
    let namespace = format!("pod-logs-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let manifest = json!({"metadata": {"name": namespace}});
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest).unwrap(),
        )
        .await
        .expect("a namespace");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let manifest = json!({"metadata": {"name": "talker"}, "spec": {
        "containers": [{"name": "main", "image": "example.com/main:1"}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(manifest).unwrap(),
    )
    .await
    .expect("a pod");
    for attempt in 0.. {
        let pod = pods.get("talker").await.unwrap();
        if pod.status.and_then(|s| s.phase).as_deref() == Some("Running") {
            break;
        }
        assert!(attempt < 150, "the pod did not run in 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Three lines share a time; the log is followed, broken after the second of them.
    let path = std::env::temp_dir().join(format!("pod-logs-{}.log", std::process::id()));
    let mut file = std::fs::File::create(&path).unwrap();
    for (time, text) in [
        ("2026-01-02T03:04:05.100000000Z", "one"),
        ("2026-01-02T03:04:05.500000000Z", "two"),
        ("2026-01-02T03:04:05.500000000Z", "three"),
        ("2026-01-02T03:04:05.500000000Z", "four"),
    ] {
        file.write_all(cri(time, text).as_bytes()).unwrap();
    }
    file.flush().unwrap();
    let logs_resource = ApiResource {
        group: "kwok.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "kwok.x-k8s.io/v1alpha1".into(),
        kind: "Logs".into(),
        plural: "logs".into(),
    };
    let logs: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &logs_resource);
    let manifest = json!({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": "talker"},
        "spec": {"logs": [{"containers": ["main"], "logsFile": path, "follow": true}]}});
    logs.create(
        &PostParams::default(),
        &serde_json::from_value(manifest).unwrap(),
    )
    .await
    .expect("the pod's Logs");

    let credentials = credentials().await;
    let mut first = LogFollower::new(&namespace, "talker", "main", Position::default());
    assert_eq!(read(&mut first, &credentials).await, "one");
    assert_eq!(read(&mut first, &credentials).await, "two");

    // A new stream from where the first one was: the server repeats the whole second.
    let mut second = LogFollower::new(&namespace, "talker", "main", first.position().clone());
    drop(first);
    assert_eq!(read(&mut second, &credentials).await, "three");
    assert_eq!(read(&mut second, &credentials).await, "four");
    file.write_all(cri("2026-01-02T03:04:06.000000000Z", "five").as_bytes())
        .unwrap();
    file.flush().unwrap();
    assert_eq!(read(&mut second, &credentials).await, "five");

    let _ = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await;
    let _ = std::fs::remove_file(&path);
}
