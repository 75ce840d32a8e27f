//! `settings.admission.managed`: the operator creates a `ValidatingWebhookConfiguration` and
//! a `MutatingWebhookConfiguration` of that name (if absent) and keeps their webhooks as the
//! handlers, the served resources and the server's client config make them; on exit, only
//! the persistent handlers' webhooks stay (as Kopf does).

use super::admitting::Admission;
use super::configs::{build_webhooks, empty_configuration};
use crate::client::credentials::Credentials;
use crate::intents::handlers::{WebhookHandler, WebhookType};
use crate::util::errors;
use crate::util::logging::ADMISSION;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::watch;

const GROUP_URL: &str = "/apis/admissionregistration.k8s.io/v1";
/// How Kopf names the group's version in its messages.
const GROUP_NAME: &str = "v1.admissionregistration.k8s.io";

/// One managed configuration: its kind and which handlers go into it.
struct Managed {
    reason: WebhookType,
    kind: &'static str,
    plural: &'static str,
}

const MANAGED: [Managed; 2] = [
    Managed {
        reason: WebhookType::Validating,
        kind: "ValidatingWebhookConfiguration",
        plural: "validatingwebhookconfigurations",
    },
    Managed {
        reason: WebhookType::Mutating,
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
    },
];

/// Keep the configurations named `name` up to date until `stop`, then clean them up.
pub async fn manage(
    credentials: Arc<Credentials>,
    admission: Arc<Admission>,
    mut configs: watch::Receiver<Option<Value>>,
    name: String,
    mut stop: watch::Receiver<bool>,
) {
    let mut served = admission.served.watch();
    if !until_known(&mut configs, &mut served, &mut stop).await {
        return;
    }
    for managed in &MANAGED {
        if let Err(problem) = create(&credentials, managed, &name).await {
            tracing::error!(target: ADMISSION, "{problem}");
            return;
        }
    }
    loop {
        let config = configs.borrow_and_update().clone().unwrap_or_default();
        served.borrow_and_update();
        for managed in &MANAGED {
            tracing::info!(target: ADMISSION,
                "Reconfiguring the {} webhook {name}.", managed.reason.as_str());
            let webhooks = webhooks_of(&admission, managed.reason, &name, &config, false);
            patch(&credentials, managed, &name, webhooks).await;
        }
        tokio::select! {
            Ok(()) = configs.changed() => {}
            Ok(()) = served.changed() => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    let config = configs.borrow().clone().unwrap_or_default();
    for managed in &MANAGED {
        tracing::info!(target: ADMISSION, "Cleaning up the admission webhook {name}.");
        let webhooks = webhooks_of(&admission, managed.reason, &name, &config, true);
        patch(&credentials, managed, &name, webhooks).await;
    }
}

/// Wait until the server's client config and what is served are known; false if the
/// operator stops first.
pub(crate) async fn until_known<T>(
    configs: &mut watch::Receiver<Option<Value>>,
    served: &mut watch::Receiver<Option<T>>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let known = async {
        let _ = configs.wait_for(Option::is_some).await;
        let _ = served.wait_for(Option::is_some).await;
    };
    tokio::select! {
        _ = known => true,
        _ = stop.wait_for(|stopped| *stopped) => false,
    }
}

fn webhooks_of(
    admission: &Admission,
    reason: WebhookType,
    name: &str,
    config: &Value,
    persistent_only: bool,
) -> Vec<Value> {
    let served = admission.served.get();
    let handlers: Vec<(&WebhookHandler, Vec<&crate::client::resources::Resource>)> =
        (admission.handlers().iter().enumerate())
            .filter(|(_, h)| h.reason == reason)
            .map(|(at, handler)| {
                let resources = (served.iter())
                    .filter(|(_, handlers)| handlers.contains(&at))
                    .map(|(resource, _)| resource.as_ref())
                    .collect();
                (handler, resources)
            })
            .collect();
    build_webhooks(&handlers, name, config, persistent_only)
}

/// Create the configuration if it is absent (try, rather than check: fewer permissions).
async fn create(credentials: &Credentials, managed: &Managed, name: &str) -> Result<(), String> {
    let url = format!("{GROUP_URL}/{}", managed.plural);
    match credentials
        .post(&url, &empty_configuration(managed.kind, name))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()), // exists already
        Err(kube::Error::Api(status)) if status.code == 403 => Err(format!(
            "Not enough RBAC permissions to create a {}.{GROUP_NAME}: {}",
            managed.plural, status.message
        )),
        Err(error) => Err(format!(
            "Cannot create the {} {name:?}: {}",
            managed.kind,
            errors::chain(&error)
        )),
    }
}

async fn patch(credentials: &Credentials, managed: &Managed, name: &str, webhooks: Vec<Value>) {
    let url = format!("{GROUP_URL}/{}/{name}", managed.plural);
    let result = credentials
        .merge_patch::<serde::de::IgnoredAny>(&url, &json!({"webhooks": webhooks}))
        .await;
    if let Err(error) = result {
        tracing::error!(target: ADMISSION,
            "Cannot update the {} {name:?}: {}", managed.kind, errors::chain(&error));
    }
}
