//! The operator as a whole: resolve the handlers' resources through discovery,
//! then one watcher and one dispatcher per resource and namespace, until told to stop.
//!
//! Uses: every layer before it.

use crate::client::applying::ApiPatcher;
use crate::client::credentials::Credentials;
use crate::client::discovery::{self, DiscoveryError};
use crate::client::namespaces;
use crate::client::posting::{K8sEvent, Poster};
use crate::client::resources::{Resource, Selector};
use crate::client::watching::{EventType, RawEvent, Watched, Watcher};
use crate::conversions;
use crate::engine::context::ResourceContext;
use crate::engine::daemons::Daemons;
use crate::engine::logs::Logs;
use crate::engine::queueing::Dispatcher;
use crate::ha::leadership::{Leadership, LeaseLock};
use crate::ha::pausing::Pause;
use crate::ha::peering::{self, Peering, PeeringError, Target};
use crate::ha::sharding::{self, Sharding};
use crate::indices::{Indices, InitialListing};
use crate::intents::handlers::{
    ChangingHandler, ConversionHandler, IndexingHandler, LogHandler, SpawningHandler,
    WatchingHandler, WebhookHandler,
};
use crate::intents::hooks::{HandlerKind, Hooks};
use crate::intents::lifecycles::Lifecycle;
use crate::settings::LeadershipProblem;
use crate::settings::{ServerSelectors, Settings};
use crate::state::storages::{Storages, StoragesError};
use crate::util::dicts::FieldPath;
use crate::util::errors;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use crate::webhooks::admitting::Served;
use crate::webhooks::routing::Webhooks;
use crate::webhooks::{crd_managing, managing};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

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

/// The API groups the engine itself reads through discovery: the core API (as Kopf's
/// backbone has it), the CRDs (to rescan on their changes), and both groups of Kopf's
/// peering resources.
const OWN_GROUPS: [&str; 4] = ["", "apiextensions.k8s.io", "kopf.dev", "zalando.org"];

impl OperatorSpec {
    /// The API groups to discover, as Kopf narrows its scans: those the handlers' selectors
    /// name and the engine's own; all (`None`) if any selector leaves its group open (a bare
    /// name, `kopf.EVERYTHING`, a callable).
    fn api_groups(&self) -> Option<BTreeSet<String>> {
        let filters = (self.changing.iter().map(|h| &h.filters))
            .chain(self.watching.iter().map(|h| &h.filters))
            .chain(self.spawning.iter().map(|h| &h.filters))
            .chain(self.indexing.iter().map(|h| &h.filters))
            .chain(self.webhooks.iter().map(|h| &h.filters))
            .chain(self.logging.iter().map(|h| &h.filters));
        let mut groups: BTreeSet<String> = OWN_GROUPS.iter().map(|g| (*g).to_owned()).collect();
        let selectors = (filters.filter_map(|filters| filters.selector.as_ref()))
            .chain(self.conversions.iter().map(|h| &h.selector));
        for selector in selectors {
            match &selector.group {
                Some(group) if !selector.callable => groups.insert(group.clone()),
                _ => return None,
            };
        }
        Some(groups)
    }
}

/// How many events of a stream may wait for its dispatcher. The dispatcher never waits for
/// handlers, only for the listing's backlog (see `queueing`): a few dozen suffice, and
/// more only hold parsed bodies of a listing in memory (the figure: docs/benchmarks.md,
/// "Figures behind the code").
const STREAM_BACKLOG: usize = 64;

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

/// The resources a handler's selector picks; callable selectors are asked in Python.
async fn select<'r>(
    selector: &Selector,
    kind: HandlerKind,
    index: usize,
    resources: &'r [Resource],
    hooks: &dyn Hooks,
) -> Vec<&'r Resource> {
    if !selector.callable {
        return selector.select(resources);
    }
    // As in Kopf: a callable sees every version of every resource, except events.
    let candidates: Vec<&Resource> = resources.iter().filter(|r| !r.is_events()).collect();
    let owned = candidates.iter().map(|r| (*r).clone()).collect();
    let verdicts = hooks.select_resources(kind, index, owned).await;
    candidates
        .into_iter()
        .zip(verdicts)
        .filter_map(|(resource, wanted)| wanted.then_some(resource))
        .collect()
}

/// The resources that the admission handlers select, each with its handlers' positions.
async fn webhook_resources(
    spec: &OperatorSpec,
    resources: &[Resource],
    hooks: &dyn Hooks,
) -> Served {
    let mut served: BTreeMap<String, (Arc<Resource>, Vec<usize>)> = BTreeMap::new();
    for (at, handler) in spec.webhooks.iter().enumerate() {
        let Some(selector) = &handler.filters.selector else {
            continue;
        };
        for resource in select(
            selector,
            HandlerKind::Admission,
            handler.index,
            resources,
            hooks,
        )
        .await
        {
            let entry = served
                .entry(resource.name())
                .or_insert_with(|| (Arc::new(resource.clone()), Vec::new()));
            entry.1.push(at);
        }
    }
    served.into_values().collect()
}

/// A resource to serve, with its handlers.
struct Planned {
    resource: Resource,
    /// What its streams ask the server to filter (`settings.watching.*_selectors`).
    selectors: ServerSelectors,
    changing: Vec<ChangingHandler>,
    watching: Vec<WatchingHandler>,
    /// Shared by all the daemons and timers spawned for the objects.
    spawning: Vec<Arc<SpawningHandler>>,
    indexing: Vec<IndexingHandler>,
    logging: Vec<Arc<LogHandler>>,
}

/// Which resources to serve, with the handlers of each; `warn` about the unresolved ones
/// (at start; later rescans stay quiet, as the same warning would repeat on every CRD change).
async fn plan(
    spec: &OperatorSpec,
    resources: &[Resource],
    hooks: &dyn Hooks,
    warn: bool,
) -> Vec<Planned> {
    let mut planned: BTreeMap<String, Planned> = BTreeMap::new();
    let mut unresolved = std::collections::BTreeSet::new();
    // (kind, filters, the handler's index in Python, its position in the spec)
    let changing = (spec.changing.iter().enumerate())
        .map(|(at, h)| (HandlerKind::Changing, &h.filters, h.index, at));
    let watching = (spec.watching.iter().enumerate())
        .map(|(at, h)| (HandlerKind::Watching, &h.filters, h.index, at));
    let spawning = (spec.spawning.iter().enumerate())
        .map(|(at, h)| (HandlerKind::Spawning, &h.filters, h.index, at));
    let indexing = (spec.indexing.iter().enumerate())
        .map(|(at, h)| (HandlerKind::Indexing, &h.filters, h.index, at));
    let logging = (spec.logging.iter().enumerate())
        .map(|(at, h)| (HandlerKind::Logging, &h.filters, h.index, at));
    let all = (changing.chain(watching).chain(spawning))
        .chain(indexing)
        .chain(logging);
    for (kind, filters, index, at) in all {
        let Some(selector) = &filters.selector else {
            continue; // not the operator's own handler (none comes without a selector)
        };
        let found = select(selector, kind, index, resources, hooks).await;
        if found.is_empty() {
            unresolved.insert(selector.repr.clone());
        }
        if selector.is_specific() && found.len() > 1 {
            // As Kopf: a name that means several resources serves none of them (an operator
            // must not act on objects it was not meant for). Kopf also takes them from the
            // handlers that name them exactly; here those still serve them.
            if warn {
                let names: Vec<String> = found.iter().map(|r| r.name()).collect();
                tracing::warn!(target: ENGINE,
                    "Ambiguous resources will not be served (try specifying API groups): {} => {}",
                    selector.repr, names.join(", ")
                );
            }
            continue;
        }
        for resource in found {
            let plan = planned.entry(resource.name()).or_insert_with(|| Planned {
                resource: resource.clone(),
                selectors: ServerSelectors::default(),
                changing: Vec::new(),
                watching: Vec::new(),
                spawning: Vec::new(),
                indexing: Vec::new(),
                logging: Vec::new(),
            });
            match kind {
                HandlerKind::Changing => plan.changing.push(spec.changing[at].clone()),
                HandlerKind::Watching => plan.watching.push(spec.watching[at].clone()),
                HandlerKind::Spawning => plan.spawning.push(Arc::new(spec.spawning[at].clone())),
                HandlerKind::Indexing => plan.indexing.push(spec.indexing[at].clone()),
                HandlerKind::Logging => plan.logging.push(Arc::new(spec.logging[at].clone())),
                HandlerKind::Admission => {} // served by the webhooks, not watched
            }
        }
    }
    if warn && !unresolved.is_empty() {
        let names: Vec<String> = unresolved.into_iter().collect();
        tracing::warn!(target: ENGINE,
            "Unresolved resources cannot be served (try creating their CRDs): {}",
            names.join(", ")
        );
    }
    let mut result = Vec::new();
    for (_, mut plan) in planned {
        let logless = !plan.resource.subresources.iter().any(|s| s == "log");
        if logless && !plan.logging.is_empty() {
            // Only objects with a `log` subresource (pods) have logs to follow.
            plan.logging.clear();
            if warn {
                tracing::warn!(target: ENGINE,
                    "Log handlers are not served for {}: its objects have no logs",
                    plan.resource.name()
                );
            }
            let empty = plan.changing.is_empty() && plan.watching.is_empty();
            if empty && plan.spawning.is_empty() && plan.indexing.is_empty() {
                continue;
            }
        }
        let resource = &plan.resource;
        let can = |verb: &str| resource.verbs.iter().any(|v| v == verb);
        let patches = !plan.changing.is_empty() || !plan.spawning.is_empty();
        // (each message spelled whole, so that the source is found by what the log says)
        if !can("list") || !can("watch") {
            if warn {
                tracing::warn!(target: ENGINE, "Non-watchable resources will not be served: {}", resource.name());
            }
        } else if !can("patch") && patches {
            if warn {
                tracing::warn!(target: ENGINE, "Non-patchable resources will not be served: {}", resource.name());
            }
        } else {
            result.push(plan);
        }
    }
    if !spec.settings.watching.selecting || result.is_empty() {
        return result;
    }
    let resources = result.iter().map(|plan| plan.resource.clone()).collect();
    match hooks.server_selectors(resources).await {
        Ok(selectors) => {
            for (plan, selectors) in result.iter_mut().zip(selectors) {
                plan.selectors = selectors;
            }
            result
        }
        Err(error) => {
            tracing::error!(target: ENGINE, "The server-side selectors (settings.watching.*_selectors) failed, so no resource is served: {error}");
            Vec::new()
        }
    }
}

/// Handlers' fields outside the default essence are added to it (e.g. `status.phase`).
fn extra_fields(plan: &Planned) -> Vec<FieldPath> {
    let changing = plan.changing.iter().map(|h| &h.filters);
    let spawning = plan.spawning.iter().map(|h| &h.filters);
    let mut fields: Vec<FieldPath> = changing
        .chain(spawning)
        .filter_map(|f| f.field.clone())
        .collect();
    fields.sort();
    fields.dedup();
    fields
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

/// The operator's own HTTP endpoints: the liveness probe (`--liveness`) and the metrics
/// (`--metrics`), if asked for.
struct Endpoints(Vec<tokio::task::JoinHandle<()>>);

impl Endpoints {
    async fn start(spec: &OperatorSpec, hooks: &Arc<dyn Hooks>) -> Result<Self, RunError> {
        let mut served = Vec::new();
        if let Some(endpoint) = &spec.liveness_endpoint {
            served.push(crate::probing::serve(endpoint, hooks.clone()).await?);
        }
        if let Some(address) = &spec.settings.metrics.address {
            served.push(crate::metrics::serving::serve(address).await?);
        }
        Ok(Endpoints(served))
    }

    fn stop(self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// High availability as the settings ask for it: Kopf's peering with the targets found, a
/// Lease election (`--lease`), or automatic sharding (`--shards auto`). They all vote on one
/// pause; sharding also says which range of the objects this replica serves.
struct Ha {
    pause: Arc<Pause>,
    /// The voters' tasks: on the stop signal they withdraw (records, leases) and end.
    voters: JoinSet<()>,
    shards: Option<watch::Receiver<Option<String>>>,
}

impl Ha {
    async fn start(
        credentials: &Arc<Credentials>,
        settings: &Arc<Settings>,
        targets: Vec<Target>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Self, RunError> {
        let lease = &settings.leadership;
        let (lease_name, shard_channel) = Self::election(credentials, settings).await?;
        let electing = lease_name.is_some() || shard_channel.is_some();
        let pause = Pause::new(targets.len() + usize::from(electing));
        let mut voters = JoinSet::new();
        if let Some(name) = lease_name {
            let lock = LeaseLock {
                name,
                namespace: lease.namespace(),
                duration: lease.lease_duration,
            };
            let leadership = Leadership {
                credentials: credentials.clone(),
                settings: lease.clone(),
                lock: Arc::new(lock),
                identity: settings.peering.identity.clone(),
                pause: pause.clone(),
                voter: targets.len(),
            };
            tasks::spawn_in(&mut voters, leadership.run(stop.clone()));
        }
        let shards = shard_channel.map(|(range, shards)| {
            let members = Sharding {
                credentials: credentials.clone(),
                settings: lease.clone(),
                group: settings.sharding.group.clone(),
                identity: settings.peering.identity.clone(),
                pause: pause.clone(),
                voter: targets.len(),
                range,
            };
            tasks::spawn_in(&mut voters, members.run(stop.clone()));
            shards
        });
        for (voter, target) in targets.into_iter().enumerate() {
            let peering = Peering {
                credentials: credentials.clone(),
                target,
                settings: settings.peering.clone(),
                watching: settings.watching.clone(),
                pause: pause.clone(),
                voter,
            };
            tasks::spawn_in(&mut voters, peering.run(stop.clone()));
        }
        Ok(Ha {
            pause,
            voters,
            shards,
        })
    }

    /// The Lease to elect a leader by, or the shards' channel: `--shards auto` falls back to
    /// a leader's Lease where the API server cannot filter by shards.
    async fn election(
        credentials: &Arc<Credentials>,
        settings: &Settings,
    ) -> Result<(Option<String>, Option<ShardChannel>), RunError> {
        let lease = &settings.leadership;
        let auto = settings.sharding.auto;
        if let (true, Some(problem)) = (lease.lease_name.is_some() || auto, lease.problem()) {
            return Err(problem.into());
        }
        if !auto {
            return Ok((lease.lease_name.clone(), None));
        }
        if lease.lease_name.is_some() {
            return Err(RunError::Sharding("a replica serves either its shard (--shards auto) or everything as the leader (--lease NAME), not both".into()));
        }
        let lease_namespace = lease.namespace();
        let supported = sharding::supported(credentials, &lease_namespace)
            .await
            .map_err(|error| {
                RunError::Sharding(format!(
                    "the shards' leases in the namespace {lease_namespace:?} cannot be listed: {}",
                    errors::chain(&error)
                ))
            })?;
        if supported {
            return Ok((None, Some(watch::channel(None))));
        }
        let name = format!("{}-leader", settings.sharding.group);
        tracing::warn!(target: ENGINE,
            "The API server does not filter lists and watches by shards (it needs Kubernetes 1.36+ with the ShardedListAndWatch feature gate): instead of sharing the objects, the replicas elect one leader by the lease '{lease_namespace}/{name}'; the others wait."
        );
        Ok((Some(name), None))
    }

    /// The peerings withdraw our records (the election releases the lease) on the stop
    /// signal: let them finish that.
    async fn withdraw(mut self) {
        let withdrawn = async { while self.voters.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), withdrawn).await;
    }
}

/// The range this replica serves, as sharding decides it (sender) and the watchers follow it.
type ShardChannel = (
    watch::Sender<Option<String>>,
    watch::Receiver<Option<String>>,
);

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

/// The admission webhooks' resources served, and the managed webhook configurations kept
/// (`settings.admission.managed`): that task, to await on exit.
async fn serve_webhooks(
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

/// New CRDs (or removed ones) change what can be served: their events, to rescan on. Without
/// scanning (or the rights to it), only the resources found at start are served.
fn watch_crds(
    credentials: &Arc<Credentials>,
    resources: &[Resource],
    settings: &Settings,
) -> (
    Option<tokio::task::JoinHandle<()>>,
    mpsc::Receiver<RawEvent>,
) {
    let (crd_tx, crd_rx) = mpsc::channel::<RawEvent>(64);
    let crds = resources
        .iter()
        .find(|r| {
            r.group == "apiextensions.k8s.io"
                && r.plural == "customresourcedefinitions"
                && r.preferred
        })
        .cloned()
        .filter(|_| !settings.scanning.disabled);
    let watcher = crds.map(|crds| {
        let watcher = Watcher {
            credentials: credentials.clone(),
            resource: Arc::new(crds),
            namespace: None,
            settings: settings.watching.clone(),
            paused: None,
            resume_from: None,
            health: None,
            shards: None,
        };
        tasks::spawn(async move {
            if watcher.run_if_permitted(crd_tx).await.is_err() {
                tracing::warn!(target: ENGINE, "Not enough permissions to watch for resources: changes (creation/deletion/updates) will not be noticed; the resources are only refreshed on operator restarts.");
            }
        })
    });
    (watcher, crd_rx)
}

/// Which CRD events are news: not the first listing (the discovery has just seen those
/// CRDs), nor a re-listing of versions already seen.
#[derive(Default)]
struct CrdVersions {
    seen: std::collections::HashMap<String, String>,
    watching: bool,
}

impl CrdVersions {
    fn is_news(&mut self, event: &RawEvent) -> bool {
        let text = |pointer: &str| {
            (event.object.pointer(pointer))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (uid, version) = (text("/metadata/uid"), text("/metadata/resourceVersion"));
        let listed = event.event_type == EventType::Listed;
        let first_listing = listed && !self.watching;
        self.watching |= !listed;
        if event.event_type == EventType::Deleted {
            self.seen.remove(&uid);
            return true;
        }
        let previous = self.seen.insert(uid, version.clone());
        !first_listing && previous.as_deref() != Some(version.as_str())
    }
}

/// The resources being served: their watchers by resource name, and all dispatchers.
struct Serving {
    credentials: Arc<Credentials>,
    settings: Arc<Settings>,
    hooks: Arc<dyn Hooks>,
    storages: Storages,
    indices: Arc<Indices>,
    lifecycle: Lifecycle,
    limiter: Option<Arc<Semaphore>>,
    patterns: Vec<String>,
    /// The operator's pause (peering): watchers stop streaming, daemons stop.
    paused: watch::Receiver<bool>,
    pause: Arc<Pause>,
    /// The shard served now, with automatic sharding.
    shards: Option<watch::Receiver<Option<String>>>,
    daemons: Vec<Arc<Daemons>>,
    /// The pods' logs followed for log handlers, paused with the daemons.
    logs: Vec<Arc<Logs>>,
    watchers: BTreeMap<String, JoinSet<()>>,
    dispatchers: JoinSet<()>,
}

impl Serving {
    /// Serve what is planned and not served yet; stop serving what is gone from the plan.
    fn update(&mut self, planned: Vec<Planned>) {
        let names: Vec<String> = planned.iter().map(|p| p.resource.name()).collect();
        self.watchers.retain(|name, watchers| {
            let keep = names.contains(name);
            if !keep {
                watchers.abort_all(); // its CRD is gone: the dispatchers drain and exit
            }
            keep
        });
        for plan in planned {
            let name = plan.resource.name();
            if !self.watchers.contains_key(&name) {
                let tasks = self.serve(plan);
                self.watchers.insert(name, tasks);
            }
        }
    }

    fn serve(&mut self, plan: Planned) -> JoinSet<()> {
        let extra_fields = extra_fields(&plan);
        let mut watching = self.settings.watching.clone();
        watching.selectors = plan.selectors;
        let resource = Arc::new(plan.resource);
        let patcher = ApiPatcher {
            credentials: self.credentials.clone(),
            resource: resource.clone(),
            finalizer: self.settings.persistence.finalizer.clone(),
        };
        let ctx = Arc::new(ResourceContext {
            resource: resource.clone(),
            patcher: Arc::new(patcher),
            settings: self.settings.clone(),
            hooks: self.hooks.clone(),
            lifecycle: self.lifecycle,
            extra_fields,
            changing: plan.changing,
            watching: plan.watching,
            spawning: plan.spawning,
            logging: plan.logging,
            indexing: plan.indexing,
            indices: self.indices.clone(),
            progress: self.storages.progress.clone(),
            diffbase: self.storages.diffbase.clone(),
        });
        let specific = namespaces::specific_namespaces(&self.patterns);
        let targets: Vec<Option<String>> =
            match (&specific, resource.namespaced && !self.patterns.is_empty()) {
                (Some(names), true) => names.iter().cloned().map(Some).collect(),
                _ => vec![None], // cluster-scoped, cluster-wide, or globs (filtered below)
            };
        let filter_namespaces =
            resource.namespaced && !self.patterns.is_empty() && specific.is_none();
        let mut watchers = JoinSet::new();
        for namespace in targets {
            let (tx, mut rx) = mpsc::channel::<Watched>(STREAM_BACKLOG);
            let watcher = Watcher {
                credentials: self.credentials.clone(),
                resource: resource.clone(),
                namespace,
                settings: watching.clone(),
                paused: Some(self.paused.clone()),
                resume_from: None,
                health: None,
                shards: self.shards.clone(),
            };
            tasks::spawn_in(&mut watchers, watcher.run(tx));
            if filter_namespaces {
                let (filtered_tx, filtered_rx) = mpsc::channel::<Watched>(STREAM_BACKLOG);
                let patterns = self.patterns.clone();
                tasks::spawn_in(
                    &mut watchers,
                    filter(rx, filtered_tx, move |watched: &Watched| match watched {
                        Watched::Synced => true,
                        Watched::Event(event) => (event.object.pointer("/metadata/namespace"))
                            .and_then(|ns| ns.as_str())
                            .is_some_and(|ns| namespaces::matches_any(ns, &patterns)),
                    }),
                );
                rx = filtered_rx;
            }
            let daemons = Arc::new(Daemons::new(ctx.clone(), self.pause.clone()));
            self.daemons.push(daemons.clone());
            // Registered now, before any stream starts: handlers wait for this one too.
            let listing = (!ctx.indexing.is_empty()).then(|| InitialListing::expect(&self.indices));
            let logs = (!ctx.logging.is_empty()).then(|| {
                let logs = Logs::new(ctx.clone(), self.credentials.clone(), self.pause.clone());
                Arc::new(logs)
            });
            self.logs.extend(logs.clone());
            let dispatcher = Dispatcher {
                ctx: ctx.clone(),
                limiter: self.limiter.clone(),
                daemons,
                logs,
                pause: self.pause.clone(),
                listing,
            };
            tasks::spawn_in(&mut self.dispatchers, dispatcher.run(rx));
        }
        watchers
    }

    /// Pause or resume the daemons (the watchers follow the pause by themselves).
    fn set_paused(&self, paused: bool) {
        for logs in &self.logs {
            logs.set_paused(paused);
        }
        for daemons in &self.daemons {
            let daemons = daemons.clone();
            tasks::spawn(async move { daemons.set_paused(paused).await });
        }
    }

    async fn stop(mut self) {
        for watchers in self.watchers.values_mut() {
            watchers.abort_all();
            while watchers.join_next().await.is_some() {}
        }
        while self.dispatchers.join_next().await.is_some() {}
    }
}

/// Discovery, retried with the networking backoffs: an API server that is still starting
/// (or briefly unreachable) is waited for; one that stays away ends the operator with an error.
/// The served resources, retried as any request (`settings.networking.error_backoffs`).
async fn discover(
    credentials: &Credentials,
    server: &str,
    groups: Option<&BTreeSet<String>>,
) -> Result<Vec<Resource>, RunError> {
    let what = format!("GET {server}/api & /apis (API discovery)");
    (credentials
        .call(&what, |client| async move {
            discovery::scan(&client, groups).await
        })
        .await)
        .map_err(|source| {
            let server = server.to_owned();
            DiscoveryError { server, source }.into()
        })
}

async fn filter<T>(mut rx: mpsc::Receiver<T>, tx: mpsc::Sender<T>, keep: impl Fn(&T) -> bool) {
    while let Some(event) = rx.recv().await {
        if keep(&event) && tx.send(event).await.is_err() {
            return;
        }
    }
}

/// The peering objects to announce ourselves in (none: standalone). A mandatory peering
/// (`--peering NAME`) that is absent stops the start. The auto-detected `default` one is
/// kept alive whether it exists or not, as Kopf does: its keep-alives say "not found"
/// (in debug lines) until somebody creates it, and then the operator joins it. Either
/// one that cannot be read (no permission, say) stops the start.
async fn peering_targets(
    credentials: &Credentials,
    spec: &OperatorSpec,
    resources: &[Resource],
) -> Result<Vec<Target>, RunError> {
    let settings = &spec.settings.peering;
    if settings.standalone {
        return Ok(Vec::new());
    }
    let clusterwide = settings.clusterwide || spec.namespaces.is_empty();
    let kind = peering::peering_kind(clusterwide);
    let Some(resource) = peering::peering_resource(resources, clusterwide) else {
        if settings.mandatory {
            let name = settings.name.clone();
            return Err(PeeringError::NotServedFor { kind, name }.into());
        }
        tracing::debug!(target: ENGINE, "No {kind} resource is served: running in the standalone mode.");
        return Ok(Vec::new());
    };
    let namespaces: Vec<Option<String>> = if clusterwide {
        vec![None]
    } else {
        let names = peering::namespaces(credentials, &spec.namespaces)
            .await
            .map_err(PeeringError::Namespaces)?;
        names.into_iter().map(Some).collect()
    };
    let mut targets = Vec::new();
    for namespace in namespaces {
        let target = Target {
            resource: resource.clone(),
            namespace,
        };
        let place = match &target.namespace {
            Some(namespace) => format!("in the namespace '{namespace}'"),
            None => "cluster-wide".to_owned(),
        };
        let name = settings.name.clone();
        let found = match peering::exists(credentials, &target, &name).await {
            Ok(found) => found,
            Err(source) => {
                return Err(PeeringError::Read {
                    kind,
                    name,
                    place,
                    source,
                }
                .into())
            }
        };
        if !found && settings.mandatory {
            return Err(PeeringError::NotFound { kind, name, place }.into());
        }
        targets.push(target); // (an absent `default` one is joined when somebody creates it)
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd_event(event_type: EventType, uid: &str, version: &str) -> RawEvent {
        RawEvent {
            event_type,
            object: Arc::new(json!({"metadata": {"uid": uid, "resourceVersion": version}})),
        }
    }

    #[test]
    fn only_changed_crds_are_news() {
        let mut versions = CrdVersions::default();
        assert!(
            !versions.is_news(&crd_event(EventType::Listed, "a", "1")),
            "the first listing is known"
        );
        assert!(versions.is_news(&crd_event(EventType::Added, "b", "2")));
        assert!(versions.is_news(&crd_event(EventType::Modified, "b", "3")));
        assert!(
            !versions.is_news(&crd_event(EventType::Listed, "a", "1")),
            "re-listed, unchanged"
        );
        assert!(
            versions.is_news(&crd_event(EventType::Listed, "a", "4")),
            "re-listed, changed"
        );
        assert!(versions.is_news(&crd_event(EventType::Deleted, "a", "5")));
    }
}
