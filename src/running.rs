//! The operator as a whole: resolve the handlers' resources through discovery,
//! then one watcher and one dispatcher per resource and namespace, until told to stop.

use crate::dicts::FieldPath;
use crate::diffbase::AnnotationsDiffBaseStorage;
use crate::discovery;
use crate::errors;
use crate::handlers::{ChangingHandler, WatchingHandler};
use crate::invoking::{Hooks, Level};
use crate::namespaces;
use crate::posting::{K8sEvent, Poster};
use crate::processing::{RawEvent, ResourceContext};
use crate::progress::MultiProgressStorage;
use crate::queueing::Dispatcher;
use crate::resources::{Resource, Selector};
use crate::settings::Settings;
use crate::watching::Watcher;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

#[derive(Debug, Clone, Deserialize)]
pub struct OperatorSpec {
    #[serde(default)]
    pub changing: Vec<ChangingHandler>,
    #[serde(default)]
    pub watching: Vec<WatchingHandler>,
    /// Namespace patterns; empty means cluster-wide.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// `--liveness`: where to serve the probes' results.
    #[serde(default)]
    pub liveness_endpoint: Option<String>,
    #[serde(default)]
    pub settings: Settings,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Probing(#[from] crate::probing::ProbingError),
    #[error("API discovery at {server} failed: {reason}")]
    Discovery { server: String, reason: String },
}

fn selectors(spec: &OperatorSpec) -> Vec<&Selector> {
    let mut all: Vec<&Selector> = spec
        .changing
        .iter()
        .map(|h| &h.filters.selector)
        .chain(spec.watching.iter().map(|h| &h.filters.selector))
        .collect();
    all.dedup();
    all
}

/// Which resources to serve, with the handlers of each.
fn plan(
    spec: &OperatorSpec,
    resources: &[Resource],
    hooks: &dyn Hooks,
) -> Vec<(Resource, Vec<ChangingHandler>, Vec<WatchingHandler>)> {
    let unresolved: Vec<String> = selectors(spec)
        .into_iter()
        .filter(|s| s.select(resources).is_empty())
        .map(|s| s.repr.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !unresolved.is_empty() {
        hooks.log(
            Level::Warning,
            None,
            &format!(
                "Unresolved resources cannot be served (try creating their CRDs): {}",
                unresolved.join(", ")
            ),
        );
    }
    type Plan = (Resource, Vec<ChangingHandler>, Vec<WatchingHandler>);
    fn entry<'p>(planned: &'p mut BTreeMap<String, Plan>, resource: &Resource) -> &'p mut Plan {
        planned
            .entry(resource.name())
            .or_insert_with(|| (resource.clone(), Vec::new(), Vec::new()))
    }
    let mut planned: BTreeMap<String, Plan> = BTreeMap::new();
    for handler in &spec.changing {
        for resource in handler.filters.selector.select(resources) {
            entry(&mut planned, resource).1.push(handler.clone());
        }
    }
    for handler in &spec.watching {
        for resource in handler.filters.selector.select(resources) {
            entry(&mut planned, resource).2.push(handler.clone());
        }
    }
    let mut result = Vec::new();
    for (_, (resource, changing, watching)) in planned {
        let watchable = ["list", "watch"]
            .iter()
            .all(|v| resource.verbs.iter().any(|rv| rv == v));
        let patchable = resource.verbs.iter().any(|v| v == "patch");
        if !watchable {
            hooks.log(
                Level::Warning,
                None,
                &format!(
                    "Non-watchable resources will not be served: {}",
                    resource.name()
                ),
            );
        } else if !patchable && !changing.is_empty() {
            hooks.log(
                Level::Warning,
                None,
                &format!(
                    "Non-patchable resources will not be served: {}",
                    resource.name()
                ),
            );
        } else {
            result.push((resource, changing, watching));
        }
    }
    result
}

/// Handlers' fields outside the default essence are added to it (e.g. `status.phase`).
fn extra_fields(changing: &[ChangingHandler]) -> Vec<FieldPath> {
    let mut fields: Vec<FieldPath> = changing
        .iter()
        .filter_map(|h| h.filters.field.clone())
        .collect();
    fields.sort();
    fields.dedup();
    fields
}

/// Run until `stop` becomes true; `ready` is called once all watchers are started.
pub async fn run(
    client: kube::Client,
    server: &str,
    spec: OperatorSpec,
    hooks: Arc<dyn Hooks>,
    mut stop: watch::Receiver<bool>,
    events: mpsc::UnboundedReceiver<K8sEvent>,
    ready: impl FnOnce(),
) -> Result<(), RunError> {
    let liveness = match &spec.liveness_endpoint {
        Some(endpoint) => Some(crate::probing::serve(endpoint, hooks.clone()).await?),
        None => None,
    };
    let resources = discover(
        &client,
        server,
        &spec.settings.networking.error_backoffs,
        hooks.as_ref(),
    )
    .await?;
    let settings = Arc::new(spec.settings.clone());
    let poster = Poster {
        client: client.clone(),
        hooks: hooks.clone(),
        component: settings.posting.reporting_component.clone(),
        instance: settings.posting.reporting_instance.clone(),
        name_prefix: settings.posting.event_name_prefix.clone(),
    };
    let poster = tokio::spawn(poster.run(events));
    let limiter = settings
        .queueing
        .worker_limit
        .map(|n| Arc::new(Semaphore::new(n.max(1))));
    let namespaced_targets: Vec<Option<String>> = if spec.namespaces.is_empty() {
        vec![None]
    } else {
        match namespaces::specific_namespaces(&spec.namespaces) {
            Some(specific) => specific.into_iter().map(Some).collect(),
            None => vec![None], // globs: watch cluster-wide, filter below
        }
    };

    let mut watchers = JoinSet::new();
    let mut dispatchers = JoinSet::new();
    for (resource, changing, watching) in plan(&spec, &resources, hooks.as_ref()) {
        let resource = Arc::new(resource);
        let ctx = Arc::new(ResourceContext {
            resource: resource.clone(),
            settings: settings.clone(),
            hooks: hooks.clone(),
            extra_fields: extra_fields(&changing),
            changing,
            watching,
            progress: Arc::new(MultiProgressStorage::smart()),
            diffbase: Arc::new(AnnotationsDiffBaseStorage::default()),
        });
        let targets = if resource.namespaced {
            namespaced_targets.clone()
        } else {
            vec![None]
        };
        for namespace in targets {
            let (tx, rx) = mpsc::channel::<RawEvent>(1024);
            let watcher = Watcher {
                client: client.clone(),
                resource: resource.clone(),
                namespace,
                settings: settings.watching.clone(),
                hooks: hooks.clone(),
            };
            let patterns = spec.namespaces.clone();
            let filter_namespaces = resource.namespaced
                && !patterns.is_empty()
                && namespaces::specific_namespaces(&patterns).is_none();
            let (filtered_tx, filtered_rx) = mpsc::channel::<RawEvent>(1024);
            let dispatcher = Dispatcher {
                ctx: ctx.clone(),
                client: client.clone(),
                limiter: limiter.clone(),
            };
            watchers.spawn(watcher.run(tx));
            watchers.spawn(filter(rx, filtered_tx, move |event: &RawEvent| {
                !filter_namespaces
                    || event
                        .object
                        .pointer("/metadata/namespace")
                        .and_then(|ns| ns.as_str())
                        .is_some_and(|ns| namespaces::matches_any(ns, &patterns))
            }));
            dispatchers.spawn(dispatcher.run(filtered_rx));
        }
    }
    ready();

    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    // Stopping the watchers ends the streams; the dispatchers then let their workers
    // finish the current cycles (within the exit timeout) and exit by themselves.
    watchers.abort_all();
    while watchers.join_next().await.is_some() {}
    while dispatchers.join_next().await.is_some() {}
    poster.abort();
    if let Some(liveness) = liveness {
        liveness.abort();
    }
    Ok(())
}

/// Discovery, retried with the networking backoffs: an API server that is still starting
/// (or briefly unreachable) is waited for; one that stays away ends the operator with an error.
async fn discover(
    client: &kube::Client,
    server: &str,
    backoffs: &[f64],
    hooks: &dyn Hooks,
) -> Result<Vec<Resource>, RunError> {
    let what = format!("GET {server}/api & /apis (API discovery)");
    for attempt in 1.. {
        let error = match discovery::scan(client).await {
            Ok(resources) => return Ok(resources),
            Err(error) => errors::chain(&error),
        };
        let Some(delay) = backoffs.get(attempt - 1) else {
            hooks.log(
                Level::Error,
                None,
                &format!("Request attempt {attempt} failed; escalating: {what} -> {error}"),
            );
            return Err(RunError::Discovery {
                server: server.to_owned(),
                reason: error,
            });
        };
        hooks.log(
            Level::Error,
            None,
            &format!("Request attempt {attempt} failed; will retry: {what} -> {error}"),
        );
        tokio::time::sleep(std::time::Duration::from_secs_f64(*delay)).await;
    }
    Ok(Vec::new()) // `1..` does not end
}

async fn filter(
    mut rx: mpsc::Receiver<RawEvent>,
    tx: mpsc::Sender<RawEvent>,
    keep: impl Fn(&RawEvent) -> bool,
) {
    while let Some(event) = rx.recv().await {
        if keep(&event) && tx.send(event).await.is_err() {
            return;
        }
    }
}
