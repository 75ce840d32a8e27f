//! The admission webhooks' resources and the managed webhook configurations.

use super::planning::webhook_resources;
use super::OperatorSpec;
use crate::client::credentials::Credentials;
use crate::client::resources::Resource;
use crate::intents::hooks::Hooks;
use crate::util::tasks;
use crate::webhooks::managing;
use crate::webhooks::routing::Webhooks;
use std::sync::Arc;
use tokio::sync::watch;

/// The admission webhooks' resources served, and the managed webhook configurations kept
/// (`settings.admission.managed`): that task, to await on exit.
pub(super) async fn serve_webhooks(
    credentials: &Arc<Credentials>,
    spec: &OperatorSpec,
    resources: &[Resource],
    hooks: &Arc<dyn Hooks>,
    webhooks: &Option<Arc<Webhooks>>,
    stop: &watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let webhooks = webhooks.as_ref()?;
    let admission = &webhooks.admission;
    admission
        .served
        .set(webhook_resources(spec, resources, hooks.as_ref()).await);
    let name = spec.admission_managed.as_ref()?;
    let task = managing::manage(
        credentials.clone(),
        admission.clone(),
        webhooks.watch_client_config(),
        name.clone(),
        stop.clone(),
    );
    Some(tasks::spawn(task))
}
