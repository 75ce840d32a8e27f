//! The webhooks of a managed `ValidatingWebhookConfiguration` / `MutatingWebhookConfiguration`
//! (`settings.admission.managed`), derived from the handlers, the resources they serve and
//! where the server is reachable, as Kopf 1.45.2 writes them.

use crate::client::resources::Resource;
use crate::intents::handlers::{ValueFilter, WebhookHandler};
use crate::util::encoding::to_python_repr;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Map, Value};

/// One webhook per handler: its rules (a rule per resource it serves), its filters on labels
/// as an object selector, and the client config pointing at the handler's own path. When
/// the operator exits, only the `persistent` handlers' webhooks are kept.
pub(crate) fn build_webhooks(
    handlers: &[(&WebhookHandler, Vec<&Resource>)],
    name_suffix: &str,
    client_config: &Value,
    persistent_only: bool,
) -> Vec<Value> {
    handlers
        .iter()
        .filter(|(handler, _)| !persistent_only || handler.persistent == Some(true))
        .map(|(handler, resources)| webhook(handler, resources, name_suffix, client_config))
        .collect()
}

/// The webhooks as another manager of webhook configurations (OLM, from a bundle's CSV)
/// writes them: each handler's with its own path (`/<id>`) on the manager's service, whose
/// name, port and certificate the manager chooses.
pub fn for_other_manager(
    handlers: &[(&WebhookHandler, Vec<&Resource>)],
    name_suffix: &str,
) -> Vec<Value> {
    let service = json!({"service": {"path": ""}});
    build_webhooks(handlers, name_suffix, &service, false)
}

fn webhook(
    handler: &WebhookHandler,
    resources: &[&Resource],
    name_suffix: &str,
    client_config: &Value,
) -> Value {
    let operations = match &handler.operations {
        Some(ops) if !ops.is_empty() => json!(ops),
        _ => json!(["*"]),
    };
    let rules: Vec<Value> = resources
        .iter()
        .map(|resource| {
            let plural = match &handler.subresource {
                None => resource.plural.clone(),
                Some(sub) => format!("{}/{sub}", resource.plural),
            };
            json!({
                "apiGroups": [resource.group],
                "apiVersions": [resource.version],
                "resources": [plural],
                "operations": operations,
                "scope": "*",
            })
        })
        .collect();
    json!({
        "name": webhook_name(&handler.id, name_suffix),
        "sideEffects": if handler.side_effects == Some(true) { "NoneOnDryRun" } else { "None" },
        "failurePolicy": if handler.ignore_failures == Some(true) { "Ignore" } else { "Fail" },
        "matchPolicy": "Equivalent",
        "rules": rules,
        "objectSelector": labels_selector(&handler.filters.labels),
        "clientConfig": with_handler_id(client_config, &handler.id),
        "timeoutSeconds": 30, // the most the apiserver permits
        "admissionReviewVersions": ["v1", "v1beta1"],
    })
}

/// The static part of a handler's label filters; callbacks are checked when called.
fn labels_selector(labels: &[(String, ValueFilter)]) -> Value {
    let expressions: Vec<Value> = labels
        .iter()
        .filter_map(|(key, filter)| match filter {
            ValueFilter::Present => Some(json!({"key": key, "operator": "Exists"})),
            ValueFilter::Absent => Some(json!({"key": key, "operator": "DoesNotExist"})),
            ValueFilter::Equals(value) => {
                let text = match value {
                    Value::String(text) => text.clone(),
                    other => to_python_repr(other), // Python's str() of a number or a flag
                };
                Some(json!({"key": key, "operator": "In", "values": [text]}))
            }
            ValueFilter::Callback => None,
        })
        .collect();
    if expressions.is_empty() {
        Value::Null
    } else {
        json!({"matchExpressions": expressions})
    }
}

/// A webhook's name as Kubernetes accepts it: `/` and `_` made readable, any other
/// character but letters, digits, `.` and `-` as the hex of its UTF-8 bytes.
pub(crate) fn webhook_name(id: &str, suffix: &str) -> String {
    let mut name = String::with_capacity(id.len() + suffix.len() + 1);
    for c in id.replace('/', ".").replace('_', "-").chars() {
        if c.is_alphanumeric() || c == '.' || c == '-' {
            name.push(c);
        } else {
            let mut bytes = [0; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                name.push_str(&format!("{byte:02x}"));
            }
        }
    }
    if !suffix.is_empty() {
        name.push('.');
        name.push_str(suffix);
    }
    name
}

/// The client config with the handler's id as the last path segment of its URL or of its
/// service's path, so that each webhook calls only its own handler.
pub(crate) fn with_handler_id(client_config: &Value, id: &str) -> Value {
    let mut config = client_config.clone();
    let quoted = quote(id);
    if let Some(Value::String(url)) = config.get("url") {
        let url = format!("{}/{quoted}", url.trim_end_matches('/'));
        config["url"] = Value::String(url);
    }
    if let Some(Value::Object(service)) = config.get_mut("service") {
        let path = service.get("path").and_then(Value::as_str).unwrap_or("");
        let path = format!("{path}/{quoted}");
        service.insert("path".into(), Value::String(path));
    }
    config
}

/// What Python's `urllib.parse.quote` leaves as it is by default: letters, digits, `_.-~/`.
const UNQUOTED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~')
    .remove(b'/');

/// Percent-encoding as Python's `urllib.parse.quote` does by default.
fn quote(text: &str) -> String {
    utf8_percent_encode(text, UNQUOTED).to_string()
}

/// The configuration object to create when it is absent (its webhooks are patched in).
pub(crate) fn empty_configuration(kind: &str, name: &str) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::String(name.into()));
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intents::handlers::WebhookHandler;

    fn handler(spec: Value) -> WebhookHandler {
        let mut base = json!({"index": 0, "id": "validate1", "reason": "validating"});
        for (k, v) in spec.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn resource(group: &str, version: &str, plural: &str) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            ..(*kopf_engine::engine::testing::resource()).clone()
        }
    }

    #[test]
    fn a_webhook_as_kopf_writes_it() {
        let h = handler(json!({
            "labels": [["somelabel", {"kind": "equals", "value": "somevalue"}],
                       ["present", {"kind": "present"}], ["cb", {"kind": "callback"}]],
        }));
        let kex = resource("kopf.dev", "v1", "kopfexamples");
        let config = json!({"url": "https://localhost:9443/", "caBundle": "Q0E="});
        let hooks = build_webhooks(&[(&h, vec![&kex])], "auto.kopf.dev", &config, false);
        assert_eq!(
            hooks,
            vec![json!({
                "name": "validate1.auto.kopf.dev",
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "rules": [{"apiGroups": ["kopf.dev"], "apiVersions": ["v1"],
                           "resources": ["kopfexamples"], "operations": ["*"], "scope": "*"}],
                "objectSelector": {"matchExpressions": [
                    {"key": "somelabel", "operator": "In", "values": ["somevalue"]},
                    {"key": "present", "operator": "Exists"}]},
                "clientConfig": {"url": "https://localhost:9443/validate1", "caBundle": "Q0E="},
                "timeoutSeconds": 30,
                "admissionReviewVersions": ["v1", "v1beta1"],
            })]
        );
    }

    #[test]
    fn options_shape_the_webhook() {
        let h = handler(json!({
            "id": "fn/sub_1", "operations": ["CREATE", "UPDATE"], "subresource": "status",
            "side_effects": true, "ignore_failures": true, "persistent": true,
        }));
        let kex = resource("kopf.dev", "v1", "kopfexamples");
        let config = json!({"service": {"name": "op", "namespace": "ns", "path": "/hooks"}});
        let hooks = build_webhooks(&[(&h, vec![&kex])], "", &config, true);
        let hook = &hooks[0];
        assert_eq!(hook["name"], "fn.sub-1");
        assert_eq!(hook["sideEffects"], "NoneOnDryRun");
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(
            hook["rules"][0]["resources"],
            json!(["kopfexamples/status"])
        );
        assert_eq!(hook["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
        assert_eq!(hook["objectSelector"], Value::Null);
        assert_eq!(hook["clientConfig"]["service"]["path"], "/hooks/fn/sub_1");
        let plain = handler(json!({}));
        assert!(build_webhooks(&[(&plain, vec![&kex])], "", &config, true).is_empty());
    }

    #[test]
    fn another_manager_gets_each_handlers_path() {
        let h = handler(json!({"id": "check/one"}));
        let kex = resource("kopf.dev", "v1", "kopfexamples");
        let hooks = for_other_manager(&[(&h, vec![&kex])], "greeter.kopf.dev");
        assert_eq!(hooks[0]["name"], "check.one.greeter.kopf.dev");
        assert_eq!(
            hooks[0]["clientConfig"],
            json!({"service": {"path": "/check/one"}})
        );
    }

    #[test]
    fn names_and_paths_survive_unusual_ids() {
        assert_eq!(webhook_name("a b:ü", "x"), "a20b3aü.x");
        assert_eq!(quote("a b/ü"), "a%20b/%C3%BC");
    }

    #[test]
    fn which_reviews_a_handler_serves() {
        let validating = handler(json!({}));
        assert!(validating.serves(None, None, Some("DELETE"), None));
        assert!(!validating.serves(None, Some("other"), None, None));
        assert!(!validating.serves(None, None, None, Some("status")));
        let mutating = handler(json!({"reason": "mutating"}));
        assert!(!mutating.serves(None, None, Some("DELETE"), None));
        let deleting = handler(json!({"reason": "mutating", "operations": ["DELETE"]}));
        assert!(deleting.serves(None, None, Some("DELETE"), None));
        let all_subs = handler(json!({"subresource": "*"}));
        assert!(
            all_subs.serves(None, None, None, Some("scale"))
                && all_subs.serves(None, None, None, None)
        );
    }
}
