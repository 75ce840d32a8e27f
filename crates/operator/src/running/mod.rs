//! The operator as a whole: resolve the handlers' resources through discovery, then one
//! watcher and one dispatcher per resource and namespace, until told to stop. `run` reads as
//! its steps; each concern is a module of its own: what to serve (`planning`), serving it
//! (`serving`), rescanning on CRD changes (`rescanning`), high availability (`ha`), the
//! operator's own endpoints (`endpoints`), its traces' export (`traces`) and its webhooks
//! (`webhooks`).
//!
//! Uses: every layer before it.

mod endpoints;
mod ha;
mod planning;
mod rescanning;
mod serving;
mod traces;
mod webhooks;

use crate::client::credentials::Credentials;
use crate::client::discovery::DiscoveryError;
use crate::client::posting::{K8sEvent, Poster};
use crate::ha::peering::PeeringError;
use crate::indices::Indices;
use crate::intents::handlers::{
    ChangingHandler, ConversionHandler, IndexingHandler, LogHandler, ReconcilingHandler,
    RelatingHandler, SpawningHandler, WatchingHandler, WebhookHandler,
};
use crate::intents::hooks::Hooks;
use crate::intents::lifecycles::Lifecycle;
use crate::settings::LeadershipProblem;
use crate::settings::Settings;
use crate::state::storages::{Storages, StoragesError};
use crate::util::tasks;
use crate::webhooks::routing::Webhooks;
use endpoints::Endpoints;
use ha::{peering_targets, Ha};
use planning::plan;
use rescanning::Scanner;
use serde::Deserialize;
use serving::Serving;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use traces::Traces;
use webhooks::WebhookServing;

/// What the operator's code declares, as the Python side sends it. A key the core does not
/// read (a kind of handlers misnamed on one side) fails the start rather than drops them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSpec {
    /// `@kopf.on.create/update/delete/resume/field` handlers.
    #[serde(default)]
    pub changing: Vec<ChangingHandler>,
    /// `@kopf.on.event` handlers.
    #[serde(default)]
    pub watching: Vec<WatchingHandler>,
    /// Daemons and timers.
    #[serde(default)]
    pub spawning: Vec<SpawningHandler>,
    /// Indexing functions (`@kopf.index`).
    #[serde(default)]
    pub indexing: Vec<IndexingHandler>,
    /// Admission handlers (`@kopf.on.validate/mutate`).
    #[serde(default)]
    pub webhooks: Vec<WebhookHandler>,
    /// Log handlers (`@kopf.on.log`).
    #[serde(default)]
    pub logging: Vec<LogHandler>,
    /// Conversion handlers (`@kopf.on.convert`).
    #[serde(default)]
    pub conversions: Vec<ConversionHandler>,
    /// Reconcile handlers (`@kopf.on.reconcile`; not in Kopf).
    #[serde(default)]
    pub reconciling: Vec<ReconcilingHandler>,
    /// Related functions (`@kopf.related`; not in Kopf).
    #[serde(default)]
    pub relating: Vec<RelatingHandler>,
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
    /// The settings the core acts on.
    #[serde(default)]
    pub settings: Settings,
}

/// Why the operator could not start (it ends with this error).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The liveness endpoint cannot be served.
    #[error(transparent)]
    Probing(#[from] crate::probing::ProbingError),
    /// The metrics cannot be served.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::serving::MetricsError),
    /// The API cannot be discovered.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// A storage the settings name is not supplied.
    #[error("settings.persistence: {0}")]
    Storages(#[from] StoragesError),
    /// The peering cannot be joined.
    #[error("Peering: {0}")]
    Peering(#[from] PeeringError),
    /// The Lease election's settings contradict each other.
    #[error("Leader election: {0}")]
    Leadership(#[from] LeadershipProblem),
    /// The sharding cannot start.
    #[error("Automatic sharding: {0}")]
    Sharding(String),
    /// The conversion handlers do not fit their CRDs.
    #[error("{0}")]
    Conversion(String),
    /// The traces cannot be exported as asked (`settings.tracing`, the `OTEL_*` variables).
    #[error("Traces: {0}")]
    Tracing(String),
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

/// Run until `stop` becomes true; `ready` is called once all watchers are started. The
/// operator's tasks redact its own `settings.secrets.fields` in their log lines (another
/// operator in the same process, its own).
pub async fn run(
    credentials: Arc<Credentials>,
    server: &str,
    spec: OperatorSpec,
    embedding: Embedding,
    stop: watch::Receiver<bool>,
    events: mpsc::UnboundedReceiver<K8sEvent>,
    ready: impl FnOnce(),
) -> Result<(), RunError> {
    let fields = spec.settings.secrets.fields.clone();
    let serving = serve(credentials, server, spec, embedding, stop, events, ready);
    crate::util::redaction::scoped(fields, serving).await
}

async fn serve(
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
    let settings = Arc::new(spec.settings.clone());
    let storages = build_storages(&settings, hooks.as_ref())?;
    // Until its watchers start, the liveness endpoint says that it is not ready.
    let (watching, watched) = watch::channel(false);
    let endpoints = Endpoints::start(&spec, &hooks, &watched).await?;
    let traces = Traces::start(&spec.settings.tracing).map_err(RunError::Tracing)?;
    let mut scanner = Scanner::new(credentials.clone(), server, spec.api_groups());
    let resources = scanner.discover().await?;
    let mut webhooks = WebhookServing::new(&credentials, &hooks, webhooks);
    webhooks.serve_conversions(&spec, &resources, true).await?;
    let targets = peering_targets(&credentials, &spec, &resources).await?;
    let mut ha = Ha::start(&credentials, &settings, targets, &stop).await?;
    let poster = start_posting(&credentials, &settings, events);
    let embedded = (&hooks, indices);
    let mut serving = Serving::new(&spec, &settings, &credentials, embedded, storages, &mut ha);
    webhooks.serve_admissions(&spec, &resources).await;
    webhooks.manage(&spec, &stop);
    webhooks.await_conversions(&mut stop).await;
    serving.update(plan(&spec, &resources, hooks.as_ref(), true).await);
    scanner.watch_crds(&resources, &settings);
    watching.send_replace(true);
    ready();

    loop {
        tokio::select! {
            // The value, not `changed()`: a stop that came before the loop (while the watchers
            // waited for the CRDs' conversion) was seen there, and would be waited for forever.
            // Its guard is dropped at once: the other branches await while it would live.
            _ = async { stop.wait_for(|stopped| *stopped).await.map(|_| ()) } => break,
            paused = serving.pause_changed() => serving.set_paused(paused),
            () = scanner.changed() => {
                let Some(resources) = scanner.rescan().await else {
                    continue;
                };
                serving.update(plan(&spec, &resources, hooks.as_ref(), false).await);
                webhooks.serve_admissions(&spec, &resources).await;
                let _ = webhooks.serve_conversions(&spec, &resources, false).await;
            }
        }
    }

    scanner.stop();
    webhooks.stopped_configs().await;
    // Stopping the watchers ends the streams; the dispatchers then let their workers
    // finish the current cycles (within the exit timeout) and exit by themselves.
    serving.stop().await;
    webhooks.stop_crds().await;
    ha.withdraw().await;
    poster.abort();
    endpoints.stop();
    if let Some(traces) = traces {
        traces.stop().await;
    }
    Ok(())
}

/// Where the handlers' progress and the diff base are kept (`settings.persistence`).
fn build_storages(settings: &Settings, hooks: &dyn Hooks) -> Result<Storages, StoragesError> {
    let persistence = &settings.persistence;
    Storages::build(
        &persistence.progress_storage,
        &persistence.diffbase_storage,
        hooks.custom_storages(),
    )
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
