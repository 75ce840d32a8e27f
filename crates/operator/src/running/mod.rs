//! The operator as a whole: resolve the handlers' resources through discovery, then one
//! watcher and one dispatcher per resource and namespace, until told to stop. `run` reads as
//! its steps; each concern is a module of its own: what to serve (`planning`), serving it
//! (`serving`), rescanning on CRD changes (`rescanning`), high availability (`ha`), the
//! operator's own endpoints (`endpoints`) and its webhooks (`webhooks`).
//!
//! Uses: every layer before it.

mod endpoints;
mod ha;
mod planning;
mod rescanning;
mod serving;
mod webhooks;

use crate::client::credentials::Credentials;
use crate::client::discovery::DiscoveryError;
use crate::client::posting::{K8sEvent, Poster};
use crate::conversions;
use crate::ha::peering::PeeringError;
use crate::indices::Indices;
use crate::intents::handlers::{
    ChangingHandler, ConversionHandler, IndexingHandler, LogHandler, SpawningHandler,
    WatchingHandler, WebhookHandler,
};
use crate::intents::hooks::Hooks;
use crate::intents::lifecycles::Lifecycle;
use crate::settings::LeadershipProblem;
use crate::settings::Settings;
use crate::state::storages::{Storages, StoragesError};
use crate::util::errors;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use crate::webhooks::crd_managing;
use crate::webhooks::routing::Webhooks;
use endpoints::Endpoints;
use ha::{peering_targets, Ha};
use planning::{plan, webhook_resources};
use rescanning::{discover, watch_crds, CrdVersions};
use serde::Deserialize;
use serving::Serving;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use webhooks::serve_webhooks;

#[derive(Debug, Clone, Deserialize)]
pub struct OperatorSpec {
    #[serde(default)]
    pub changing: Vec<ChangingHandler>,
    #[serde(default)]
    pub watching: Vec<WatchingHandler>,
    #[serde(default)]
    pub spawning: Vec<SpawningHandler>,
    #[serde(default)]
    pub indexing: Vec<IndexingHandler>,
    #[serde(default)]
    pub webhooks: Vec<WebhookHandler>,
    #[serde(default)]
    pub logging: Vec<LogHandler>,
    #[serde(default)]
    pub conversions: Vec<ConversionHandler>,
    /// `settings.admission.managed`: the webhook configurations to keep, by this name.
    #[serde(default)]
    pub admission_managed: Option<String>,
    /// Namespace patterns; empty means cluster-wide.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Which of the change handlers of a cause run in one cycle (`kopf.operator(lifecycle=)`).
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// `--liveness`: where to serve the probes' results.
    #[serde(default)]
    pub liveness_endpoint: Option<String>,
    #[serde(default)]
    pub settings: Settings,
}

/// Why the operator could not start (it ends with this error).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Probing(#[from] crate::probing::ProbingError),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::serving::MetricsError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error("settings.persistence: {0}")]
    Storages(#[from] StoragesError),
    #[error("Peering: {0}")]
    Peering(#[from] PeeringError),
    #[error("Leader election: {0}")]
    Leadership(#[from] LeadershipProblem),
    #[error("Automatic sharding: {0}")]
    Sharding(String),
    #[error("{0}")]
    Conversion(String),
}

/// What the embedding program (the Python side) gives the core and reads from it.
pub struct Embedding {
    /// Its handlers and callbacks.
    pub hooks: Arc<dyn Hooks>,
    /// The indices that its handlers read while the core fills them.
    pub indices: Arc<Indices>,
    /// Its admission and conversion handlers, which the webhook server calls (if any).
    pub webhooks: Option<Arc<Webhooks>>,
}

/// Run until `stop` becomes true; `ready` is called once all watchers are started.
pub async fn run(
    credentials: Arc<Credentials>,
    server: &str,
    spec: OperatorSpec,
    Embedding {
        hooks,
        indices,
        webhooks,
    }: Embedding,
    mut stop: watch::Receiver<bool>,
    events: mpsc::UnboundedReceiver<K8sEvent>,
    ready: impl FnOnce(),
) -> Result<(), RunError> {
    crate::util::redaction::configure(spec.settings.secrets.fields.clone());
    let persistence = &spec.settings.persistence;
    let storages = Storages::build(
        &persistence.progress_storage,
        &persistence.diffbase_storage,
        hooks.custom_storages(),
    )?;
    let endpoints = Endpoints::start(&spec, &hooks).await?;
    let admission = webhooks.as_ref().map(|w| w.admission.clone());
    let conversion = webhooks.as_ref().map(|w| w.conversion.clone());
    let groups = spec.api_groups();
    let resources = discover(&credentials, server, groups.as_ref()).await?;
    if let Some(conversion) = &conversion {
        let served = conversions::served(&credentials, &spec.conversions, &resources, true);
        conversion.serve(served.await.map_err(RunError::Conversion)?);
    }
    let settings = Arc::new(spec.settings.clone());
    let targets = peering_targets(&credentials, &spec, &resources).await?;
    let mut ha = Ha::start(&credentials, &settings, targets, &stop).await?;
    let mut paused = ha.pause.subscribe();
    if let Some(metrics) = crate::metrics::get() {
        metrics.set_paused(*paused.borrow());
    }
    let poster = start_posting(&credentials, &settings, events);
    let limiter = settings
        .queueing
        .worker_limit
        .map(|n| Arc::new(Semaphore::new(n.max(1))));
    let mut serving = Serving {
        credentials: credentials.clone(),
        settings: settings.clone(),
        hooks: hooks.clone(),
        storages,
        indices,
        lifecycle: spec.lifecycle,
        limiter,
        patterns: spec.namespaces.clone(),
        paused: paused.clone(),
        pause: ha.pause.clone(),
        shards: ha.shards.take(),
        daemons: Vec::new(),
        logs: Vec::new(),
        watchers: BTreeMap::new(),
        dispatchers: JoinSet::new(),
    };
    let managing = serve_webhooks(&credentials, &spec, &resources, &hooks, &webhooks, &stop).await;
    // The CRDs' conversion is taken away (if asked) only after the workers have stopped:
    // their last writes may need it.
    let (crds_stop, crds_stopping) = watch::channel(false);
    let managing_crds = (webhooks.as_ref())
        .filter(|_| spec.settings.conversion.managed)
        .map(|webhooks| {
            let cleanup = spec.settings.conversion.cleanup;
            let task = crd_managing::manage(
                credentials.clone(),
                webhooks.conversion.clone(),
                webhooks.watch_client_config(),
                cleanup,
                crds_stopping,
            );
            tasks::spawn(task)
        });
    // Objects read or patched in another version than the stored one before the CRD points
    // at the webhook would be converted by strategy `None` (relabelled, their other fields
    // pruned by the version's schema: lost on the next write). Their watchers wait.
    if let Some(conversion) = conversion.as_ref().filter(|_| managing_crds.is_some()) {
        let waiting = async {
            let pending = conversion
                .served
                .get()
                .iter()
                .map(|s| s.crd.name.clone())
                .collect::<Vec<_>>();
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
    serving.update(plan(&spec, &resources, hooks.as_ref(), true).await);
    let (crd_watcher, mut crd_rx) = watch_crds(&credentials, &resources, &settings);
    let mut crd_versions = CrdVersions::default();
    ready();

    loop {
        tokio::select! {
            // The value, not `changed()`: a stop that came before the loop (while the watchers
            // waited for the CRDs' conversion) was seen there, and would be waited for forever.
            // Its guard is dropped at once: the other branches await while it would live.
            _ = async { stop.wait_for(|stopped| *stopped).await.map(|_| ()) } => break,
            Ok(()) = paused.changed() => {
                let now_paused = *paused.borrow_and_update();
                if let Some(metrics) = crate::metrics::get() {
                    metrics.set_paused(now_paused);
                }
                serving.set_paused(now_paused);
            }
            Some(event) = crd_rx.recv() => {
                if !crd_versions.is_news(&event) {
                    continue;
                }
                // A CRD of a group that was not scanned cannot change what is served.
                let group = event.object.pointer("/spec/group").and_then(|g| g.as_str());
                if groups.as_ref().zip(group).is_some_and(|(groups, group)| !groups.contains(group)) {
                    continue;
                }
                // Let a burst (a new CRD becoming established) settle, then look again.
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                while let Ok(event) = crd_rx.try_recv() {
                    crd_versions.is_news(&event);
                }
                match discover(&credentials, server, groups.as_ref()).await {
                    Ok(resources) => {
                        serving.update(plan(&spec, &resources, hooks.as_ref(), false).await);
                        if let Some(admission) = &admission {
                            admission.served.set(webhook_resources(&spec, &resources, hooks.as_ref()).await);
                        }
                        if let Some(conversion) = &conversion {
                            match conversions::served(&credentials, &spec.conversions, &resources, false).await {
                                Ok(served) => conversion.serve(served),
                                Err(problem) => tracing::error!(target: ENGINE, "{problem}"),
                            }
                        }
                    }
                    Err(error) => tracing::warn!(target: ENGINE, "Re-scanning the API failed: {}", errors::chain(&error)),
                }
            }
        }
    }
    if let Some(crd_watcher) = crd_watcher {
        crd_watcher.abort();
    }
    // The managed webhook configurations are cleaned up on the stop signal: let that finish.
    if let Some(managing) = managing {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), managing).await;
    }
    // Stopping the watchers ends the streams; the dispatchers then let their workers
    // finish the current cycles (within the exit timeout) and exit by themselves.
    serving.stop().await;
    crds_stop.send_replace(true);
    if let Some(managing) = managing_crds {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), managing).await;
    }
    ha.withdraw().await;
    poster.abort();
    endpoints.stop();
    Ok(())
}

/// Kubernetes Events (`kopf.event()` & co., and log lines posted as Events), posted apart.
fn start_posting(
    credentials: &Arc<Credentials>,
    settings: &Settings,
    events: mpsc::UnboundedReceiver<K8sEvent>,
) -> tokio::task::JoinHandle<()> {
    let poster = Poster {
        credentials: credentials.clone(),
        component: settings.posting.reporting_component.clone(),
        instance: settings.posting.reporting_instance.clone(),
        name_prefix: settings.posting.event_name_prefix.clone(),
        worker_limit: settings.posting.worker_limit,
        idle_timeout: settings.posting.idle_timeout,
    };
    tasks::spawn(poster.run(events))
}
