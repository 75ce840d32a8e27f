//! The resources being served: a watcher and a dispatcher per resource and namespace,
//! started and stopped as the plan changes.

use super::ha::Ha;
use super::planning::{extra_fields, Planned};
use super::OperatorSpec;
use crate::client::applying::ApiPatcher;
use crate::client::credentials::Credentials;
use crate::client::namespaces;
use crate::client::watching::{Watched, Watcher};
use crate::engine::context::ResourceContext;
use crate::engine::daemons::Daemons;
use crate::engine::logs::Logs;
use crate::engine::queueing::Dispatcher;
use crate::engine::waking::{OwnerKind, Wakers};
use crate::ha::pausing::Pause;
use crate::indices::{Indices, InitialListing};
use crate::intents::hooks::Hooks;
use crate::intents::lifecycles::Lifecycle;
use crate::settings::Settings;
use crate::state::storages::Storages;
use crate::util::buckets::TokenBucket;
use crate::util::tasks;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

/// How many events of a stream may wait for its dispatcher. The dispatcher never waits for
/// handlers, only for the listing's backlog (see `queueing`): a few dozen suffice, and
/// more only hold parsed bodies of a listing in memory (the figure: docs/benchmarks.md,
/// "Figures behind the code").
pub(super) const STREAM_BACKLOG: usize = 64;

/// The resources being served: their watchers by resource name, and all dispatchers.
pub(super) struct Serving {
    credentials: Arc<Credentials>,
    settings: Arc<Settings>,
    hooks: Arc<dyn Hooks>,
    storages: Storages,
    indices: Arc<Indices>,
    lifecycle: Lifecycle,
    limiter: Option<Arc<Semaphore>>,
    /// The retries of failed reconcile calls, of all resources together.
    retry_budget: Arc<TokenBucket>,
    /// The owners that their children's changes wake (`owns=`).
    wakers: Arc<Wakers>,
    patterns: Vec<String>,
    /// The operator's pause (peering): watchers stop streaming, daemons stop.
    paused: watch::Receiver<bool>,
    /// The same, for `pause_changed` to tell the changes (the watchers' copies see them too).
    pause_seen: watch::Receiver<bool>,
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
    /// Nothing served yet: `update` serves the plan.
    pub(super) fn new(
        spec: &OperatorSpec,
        settings: &Arc<Settings>,
        credentials: &Arc<Credentials>,
        embedded: (&Arc<dyn Hooks>, Arc<Indices>),
        storages: Storages,
        ha: &mut Ha,
    ) -> Self {
        let (hooks, indices) = embedded;
        let limiter = (settings.queueing.worker_limit).map(|n| Arc::new(Semaphore::new(n.max(1))));
        let paused = ha.pause.subscribe();
        if let Some(metrics) = crate::metrics::get() {
            metrics.set_paused(*paused.borrow());
        }
        Serving {
            credentials: credentials.clone(),
            settings: settings.clone(),
            hooks: hooks.clone(),
            storages,
            indices,
            lifecycle: spec.lifecycle,
            limiter,
            retry_budget: Arc::new(TokenBucket::new(
                settings.reconciling.retry_rate,
                settings.reconciling.retry_burst,
            )),
            wakers: Arc::default(),
            patterns: spec.namespaces.clone(),
            pause_seen: paused.clone(),
            paused,
            pause: ha.pause.clone(),
            shards: ha.shards.take(),
            daemons: Vec::new(),
            logs: Vec::new(),
            watchers: BTreeMap::new(),
            dispatchers: JoinSet::new(),
        }
    }

    /// Serve what is planned and not served yet; stop serving what is gone from the plan.
    pub(super) fn update(&mut self, planned: Vec<Planned>) {
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
            reconciling: plan.reconciling,
            retry_budget: self.retry_budget.clone(),
            owner_bodies: plan.wakeable.then(Arc::default),
            wakers: (!plan.owners.is_empty() || !plan.relating.is_empty())
                .then(|| self.wakers.clone()),
            owners: plan.owners,
            relating: plan.relating,
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
            if let Some(bodies) = &ctx.owner_bodies {
                // Its objects' children wake them through this stream (`engine::waking`).
                let kind = OwnerKind {
                    group: resource.group.clone(),
                    kind: resource.kind.clone(),
                };
                let namespaced = resource.namespaced;
                (self.wakers).register(
                    kind,
                    namespaced,
                    namespace.clone(),
                    tx.clone(),
                    bodies.clone(),
                );
            }
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

    /// The operator paused or resumed (the watchers follow by themselves). Safe to cancel.
    pub(super) async fn pause_changed(&mut self) -> bool {
        if self.pause_seen.changed().await.is_err() {
            return std::future::pending().await; // nobody votes any more (stopping)
        }
        *self.pause_seen.borrow_and_update()
    }

    /// Pause or resume the daemons and the logs' followers.
    pub(super) fn set_paused(&self, paused: bool) {
        if let Some(metrics) = crate::metrics::get() {
            metrics.set_paused(paused);
        }
        for logs in &self.logs {
            logs.set_paused(paused);
        }
        for daemons in &self.daemons {
            let daemons = daemons.clone();
            tasks::spawn(async move { daemons.set_paused(paused).await });
        }
    }

    pub(super) async fn stop(mut self) {
        for watchers in self.watchers.values_mut() {
            watchers.abort_all();
            while watchers.join_next().await.is_some() {}
        }
        while self.dispatchers.join_next().await.is_some() {}
    }
}

pub(super) async fn filter<T>(
    mut rx: mpsc::Receiver<T>,
    tx: mpsc::Sender<T>,
    keep: impl Fn(&T) -> bool,
) {
    while let Some(event) = rx.recv().await {
        if keep(&event) && tx.send(event).await.is_err() {
            return;
        }
    }
}
