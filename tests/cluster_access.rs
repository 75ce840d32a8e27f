//! The test cluster's admin credentials work for the Rust kube client (rustls, client certificate).

mod common;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

#[tokio::test]
async fn kube_client_lists_and_writes() {
    let client = common::client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("listing namespaces")
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    assert!(names.iter().any(|n| n == "kube-system"), "{names:?}");

    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let name = format!("rust-client-{}", std::process::id());
    let created = configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": name}, "data": {"k": "v"}}),
            )
            .unwrap(),
        )
        .await
        .expect("creating a configmap");
    assert_eq!(created.data.unwrap()["k"], "v");
    configmaps
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the configmap");
}
