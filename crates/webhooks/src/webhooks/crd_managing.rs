//! `settings.conversion.managed`: the operator points the `spec.conversion` of the CRDs its
//! conversion handlers serve at its webhook server (strategy `Webhook`, the server's client
//! config, ConversionReview v1), at start, whenever the server's address or certificate
//! changes, and when somebody takes the webhook away. On exit the webhook stays (a CRD of several versions without it cannot serve its
//! objects in every version), unless `settings.conversion.cleanup` asks for strategy `None`.

use super::configs::with_handler_id;
use super::converting::{Conversion, Served, PATH};
use super::managing::until_known;
use crate::client::credentials::Credentials;
use crate::util::errors;
use crate::util::logging::ADMISSION;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;

const CRDS_URL: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// How long the API server is given to apply a changed conversion before the watchers of its
/// resource start (its CRD informer and storage re-making take milliseconds: ample).
const SETTLING: std::time::Duration = std::time::Duration::from_secs(2);

/// Keep the served CRDs' conversion pointed at the server until `stop`, then (if asked)
/// take it away.
pub async fn manage(
    credentials: Arc<Credentials>,
    conversion: Arc<Conversion>,
    mut configs: watch::Receiver<Option<Value>>,
    cleanup: bool,
    mut stop: watch::Receiver<bool>,
) {
    let mut served = conversion.served.watch();
    if !until_known(&mut configs, &mut served, &mut stop).await {
        return;
    }
    // What each CRD was last patched with. The CRDs are read again on every change of theirs
    // (the API's rescan): a CRD is patched when the server's config changes, and when its
    // webhook was taken away (strategy `None`); one that points at another server (another
    // replica's, with a certificate of its own) is left alone: replicas would patch in turns.
    let mut patched: BTreeMap<String, Value> = BTreeMap::new();
    loop {
        let config = configs.borrow_and_update().clone().unwrap_or_default();
        let crds = served.borrow_and_update().clone().unwrap_or_default();
        for crd in &crds {
            let wanted = webhook_conversion(&config, crd);
            let ours = covers(&crd.conversion, &wanted);
            let removed = crd.conversion.get("strategy").and_then(Value::as_str) != Some("Webhook");
            let changed = patched.get(&crd.crd.name) != Some(&wanted);
            if ours || !(changed || removed) {
                conversion.mark_configured(&crd.crd.name);
                patched.insert(crd.crd.name.clone(), wanted);
                continue;
            }
            tracing::info!(target: ADMISSION, "Reconfiguring the conversion webhook of {}.", crd.crd.name);
            if patch(&credentials, &crd.crd.name, &wanted).await
                && !conversion.is_configured(&crd.crd.name)
            {
                // The API server applies a CRD's change a moment after it is written (its
                // storage is re-made): reads before that would still convert by the old way.
                tokio::time::sleep(SETTLING).await;
                conversion.mark_configured(&crd.crd.name);
            }
            patched.insert(crd.crd.name.clone(), wanted);
        }
        tokio::select! {
            Ok(()) = configs.changed() => {}
            Ok(()) = served.changed() => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    if cleanup {
        for name in patched.keys() {
            tracing::info!(target: ADMISSION, "Cleaning up the conversion webhook of {name}.");
            let none = json!({"strategy": "None", "webhook": null});
            patch(&credentials, name, &none).await;
        }
    }
}

/// The CRD's `spec.conversion` that sends its reviews to the server's `conversion/{name}`.
/// The client config's other form (`url` or `service`) is removed, as a merge-patch does
/// only when told.
pub(crate) fn webhook_conversion(client_config: &Value, served: &Served) -> Value {
    let path = format!("{PATH}{}", served.crd.name);
    let mut config = with_handler_id(client_config, &path);
    if let Value::Object(fields) = &mut config {
        for key in ["url", "service", "caBundle"] {
            fields.entry(key).or_insert(Value::Null);
        }
    }
    json!({
        "strategy": "Webhook",
        "webhook": {"clientConfig": config, "conversionReviewVersions": ["v1"]},
    })
}

/// Whether the CRD's conversion as read is the wanted one: every field wanted is there (the
/// API server adds defaults, e.g. a service's port), and those wanted absent (null) are.
fn covers(read: &Value, wanted: &Value) -> bool {
    match (read, wanted) {
        (_, Value::Null) => read.is_null(),
        (Value::Object(read), Value::Object(wanted)) => wanted
            .iter()
            .all(|(key, value)| covers(read.get(key).unwrap_or(&Value::Null), value)),
        _ => read == wanted,
    }
}

async fn patch(credentials: &Credentials, name: &str, conversion: &Value) -> bool {
    let url = format!("{CRDS_URL}/{name}");
    let body = json!({"spec": {"conversion": conversion}});
    match (credentials.merge_patch::<serde::de::IgnoredAny>(&url, &body)).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::error!(target: ADMISSION,
                "Not enough RBAC permissions to patch the CustomResourceDefinition {name:?}: {}",
                status.message);
            false
        }
        Err(error) => {
            tracing::error!(target: ADMISSION,
                "Cannot update the conversion of the CustomResourceDefinition {name:?}: {}",
                errors::chain(&error));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::versions::Crd;

    #[test]
    fn the_conversion_points_at_the_crds_own_path() {
        let served = Served {
            crd: Crd {
                name: "greetings.demo.kopf.dev".into(),
                group: "demo.kopf.dev".into(),
                kind: "Greeting".into(),
                versions: vec![],
                served: vec![],
                storage: None,
            },
            steps: vec![],
            resources: vec![],
            problem: None,
            conversion: Value::Null,
        };
        let by_url = json!({"url": "https://host:1234/hooks", "caBundle": "Q0E="});
        assert_eq!(
            webhook_conversion(&by_url, &served),
            json!({"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": "https://host:1234/hooks/conversion/greetings.demo.kopf.dev",
                                 "caBundle": "Q0E=", "service": null},
                "conversionReviewVersions": ["v1"]}})
        );
        let wanted = webhook_conversion(&by_url, &served);
        assert!(!covers(&json!({"strategy": "None"}), &wanted));
        let mut read = wanted.clone();
        read["webhook"]["clientConfig"]
            .as_object_mut()
            .unwrap()
            .remove("service");
        assert!(
            covers(&read, &wanted),
            "as the API server keeps it (no nulls)"
        );
        read["webhook"]["clientConfig"]["service"] = json!({"name": "other"});
        assert!(!covers(&read, &wanted), "a service set by others");
        let by_service = json!({"service": {"namespace": "ns", "name": "op", "port": 443}});
        let conversion = webhook_conversion(&by_service, &served);
        assert_eq!(
            conversion["webhook"]["clientConfig"],
            json!({"service": {"namespace": "ns", "name": "op", "port": 443,
                               "path": "/conversion/greetings.demo.kopf.dev"},
                   "url": null, "caBundle": null})
        );
    }
}
