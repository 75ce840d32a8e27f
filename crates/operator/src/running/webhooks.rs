//! The webhooks' side of a run: the resources the admission handlers serve and the CRDs the
//! conversion handlers serve (at start and on every rescan), the managed webhook
//! configurations and the CRDs' conversion kept pointed at the server.

use super::planning::webhook_resources;
use super::{OperatorSpec, RunError};
use crate::client::credentials::Credentials;
use crate::client::resources::Resource;
use crate::conversions;
use crate::intents::hooks::Hooks;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use crate::webhooks::routing::Webhooks;
use crate::webhooks::{crd_managing, managing};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long the managers may take to clean up what they wrote, once told to stop.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The webhooks served in a run (none if the operator has no webhook server).
pub(super) struct WebhookServing {
    credentials: Arc<Credentials>,
    hooks: Arc<dyn Hooks>,
    webhooks: Option<Arc<Webhooks>>,
    /// The managed webhook configurations (`settings.admission.managed`): cleaned up by the
    /// operator's stop signal.
    configs: Option<JoinHandle<()>>,
    /// The CRDs' conversion (`settings.conversion.managed`): cleaned up by a signal of its
    /// own, sent only after the workers have stopped, as their last writes may need it.
    crds: Option<JoinHandle<()>>,
    crds_stop: watch::Sender<bool>,
}

impl WebhookServing {
    pub(super) fn new(
        credentials: &Arc<Credentials>,
        hooks: &Arc<dyn Hooks>,
        webhooks: Option<Arc<Webhooks>>,
    ) -> Self {
        WebhookServing {
            credentials: credentials.clone(),
            hooks: hooks.clone(),
            webhooks,
            configs: None,
            crds: None,
            crds_stop: watch::channel(false).0,
        }
    }

    /// The CRDs that the conversion handlers serve, checked against their declared steps:
    /// at start, a mismatch ends the operator; on a rescan, it is said and the rest served.
    pub(super) async fn serve_conversions(
        &self,
        spec: &OperatorSpec,
        resources: &[Resource],
        at_start: bool,
    ) -> Result<(), RunError> {
        let Some(webhooks) = &self.webhooks else {
            return Ok(());
        };
        let served = conversions::served(&self.credentials, &spec.conversions, resources, at_start);
        match served.await {
            Ok(served) => webhooks.conversion.serve(served),
            Err(problem) if at_start => return Err(RunError::Conversion(problem)),
            Err(problem) => tracing::error!(target: ENGINE, "{problem}"),
        }
        Ok(())
    }

    /// The resources that the admission handlers select.
    pub(super) async fn serve_admissions(&self, spec: &OperatorSpec, resources: &[Resource]) {
        if let Some(webhooks) = &self.webhooks {
            let served = webhook_resources(spec, resources, self.hooks.as_ref()).await;
            webhooks.admission.served.set(served);
        }
    }

    /// Keep the webhook configurations and the CRDs' conversion pointed at the server, as the
    /// settings ask.
    pub(super) fn manage(&mut self, spec: &OperatorSpec, stop: &watch::Receiver<bool>) {
        let Some(webhooks) = &self.webhooks else {
            return;
        };
        if let Some(name) = &spec.admission_managed {
            self.configs = Some(tasks::spawn(managing::manage(
                self.credentials.clone(),
                webhooks.admission.clone(),
                webhooks.watch_client_config(),
                name.clone(),
                stop.clone(),
            )));
        }
        if spec.settings.conversion.managed {
            self.crds = Some(tasks::spawn(crd_managing::manage(
                self.credentials.clone(),
                webhooks.conversion.clone(),
                webhooks.watch_client_config(),
                spec.settings.conversion.cleanup,
                self.crds_stop.subscribe(),
            )));
        }
    }

    /// Objects read or patched in another version than the stored one before the CRD points
    /// at the webhook would be converted by strategy `None` (relabelled, their other fields
    /// pruned by the version's schema: lost on the next write): the watchers wait for the
    /// managed CRDs' conversion, or for the stop signal.
    pub(super) async fn await_conversions(&self, stop: &mut watch::Receiver<bool>) {
        let Some(webhooks) = self.webhooks.as_ref().filter(|_| self.crds.is_some()) else {
            return;
        };
        let conversion = &webhooks.conversion;
        let waiting = async {
            let served = conversion.served.get();
            let pending: Vec<String> = served.iter().map(|s| s.crd.name.clone()).collect();
            if !pending.is_empty() {
                tracing::info!(target: ENGINE,
                    "Waiting for the conversion webhooks of {} before serving.", pending.join(", "));
            }
            conversion.configured(&pending).await;
        };
        tokio::select! {
            _ = waiting => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
    }

    /// The managed webhook configurations are cleaned up on the stop signal: let that finish.
    pub(super) async fn stopped_configs(&mut self) {
        if let Some(configs) = self.configs.take() {
            let _ = tokio::time::timeout(CLEANUP_TIMEOUT, configs).await;
        }
    }

    /// Take the CRDs' conversion away (if asked), once nothing writes the objects any more.
    pub(super) async fn stop_crds(mut self) {
        self.crds_stop.send_replace(true);
        if let Some(crds) = self.crds.take() {
            let _ = tokio::time::timeout(CLEANUP_TIMEOUT, crds).await;
        }
    }
}
