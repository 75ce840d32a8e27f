//! What to serve: the resources that the handlers' selectors pick among the discovered
//! ones, each with its handlers.

use super::OperatorSpec;
use crate::client::resources::{Resource, Selector};
use crate::engine::context::Relating;
use crate::engine::waking::OwnerKind;
use crate::intents::handlers::{
    ChangingHandler, IndexingHandler, LogHandler, ReconcilingHandler, ResourceFilters,
    SpawningHandler, WatchingHandler,
};
use crate::intents::hooks::{HandlerKind, Hooks};
use crate::settings::ServerSelectors;
use crate::util::dicts::FieldPath;
use crate::util::logging::ENGINE;
use crate::webhooks::admitting::Served;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The API groups the engine itself reads through discovery: the core API (as Kopf's
/// backbone has it), the CRDs (to rescan on their changes), and both groups of Kopf's
/// peering resources.
pub(super) const OWN_GROUPS: [&str; 4] = ["", "apiextensions.k8s.io", "kopf.dev", "zalando.org"];

impl OperatorSpec {
    /// Every resource handler of every kind: its kind, filters, index in Python, and position
    /// in the spec (the one list of kinds that the planning reads).
    pub(super) fn handlers(&self) -> Vec<(HandlerKind, &ResourceFilters, usize, usize)> {
        fn each<'s, H>(
            kind: HandlerKind,
            handlers: &'s [H],
            parts: impl Fn(&'s H) -> (&'s ResourceFilters, usize),
        ) -> impl Iterator<Item = (HandlerKind, &'s ResourceFilters, usize, usize)> {
            let found = handlers
                .iter()
                .enumerate()
                .map(move |(at, h)| (at, parts(h)));
            found.map(move |(at, (filters, index))| (kind, filters, index, at))
        }
        let mut all = Vec::new();
        for kind in HandlerKind::ALL {
            match kind {
                HandlerKind::Changing => {
                    all.extend(each(kind, &self.changing, |h| (&h.filters, h.index)))
                }
                HandlerKind::Watching => {
                    all.extend(each(kind, &self.watching, |h| (&h.filters, h.index)))
                }
                HandlerKind::Spawning => {
                    all.extend(each(kind, &self.spawning, |h| (&h.filters, h.index)))
                }
                HandlerKind::Indexing => {
                    all.extend(each(kind, &self.indexing, |h| (&h.filters, h.index)))
                }
                HandlerKind::Admission => {
                    all.extend(each(kind, &self.webhooks, |h| (&h.filters, h.index)))
                }
                HandlerKind::Logging => {
                    all.extend(each(kind, &self.logging, |h| (&h.filters, h.index)))
                }
                HandlerKind::Reconciling => {
                    all.extend(each(kind, &self.reconciling, |h| (&h.filters, h.index)))
                }
                HandlerKind::Relating => {
                    all.extend(each(kind, &self.relating, |h| (&h.filters, h.index)))
                }
            }
        }
        all
    }

    /// The API groups to discover, as Kopf narrows its scans: those the handlers' selectors
    /// name and the engine's own; all (`None`) if any selector leaves its group open (a bare
    /// name, `kopf.EVERYTHING`, a callable).
    pub(super) fn api_groups(&self) -> Option<BTreeSet<String>> {
        let filters = self
            .handlers()
            .into_iter()
            .map(|(_, filters, _, _)| filters);
        let mut groups: BTreeSet<String> = OWN_GROUPS.iter().map(|g| (*g).to_owned()).collect();
        // (and the resources named beside the handlers': children, owners of related objects)
        let selectors = (filters.filter_map(|filters| filters.selector.as_ref()))
            .chain(self.conversions.iter().map(|h| &h.selector))
            .chain(self.reconciling.iter().flat_map(|h| &h.owns))
            .chain(self.relating.iter().map(|h| &h.owners));
        for selector in selectors {
            match &selector.group {
                Some(group) if !selector.callable => groups.insert(group.clone()),
                _ => return None,
            };
        }
        Some(groups)
    }
}

/// The resources a handler's selector picks; callable selectors are asked in Python.
pub(super) async fn select<'r>(
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
pub(super) async fn webhook_resources(
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
pub(super) struct Planned {
    pub(super) resource: Resource,
    /// What its streams ask the server to filter (`settings.watching.*_selectors`).
    pub(super) selectors: ServerSelectors,
    pub(super) changing: Vec<ChangingHandler>,
    pub(super) watching: Vec<WatchingHandler>,
    /// Shared by all the daemons and timers spawned for the objects.
    pub(super) spawning: Vec<Arc<SpawningHandler>>,
    pub(super) indexing: Vec<IndexingHandler>,
    pub(super) logging: Vec<Arc<LogHandler>>,
    pub(super) reconciling: Vec<ReconcilingHandler>,
    /// The owners whose reconcile handlers own its objects (`owns=`): woken by their changes.
    pub(super) owners: Vec<OwnerKind>,
    /// Its related functions, each with its owners' kinds: they wake the owners they name.
    pub(super) relating: Vec<Relating>,
    /// Its objects are owners that children or related objects wake (`owns=`, `@kopf.related`).
    pub(super) wakeable: bool,
}

/// Which resources to serve, with the handlers of each; `warn` about the unresolved ones
/// (at start; later rescans stay quiet, as the same warning would repeat on every CRD change).
pub(super) async fn plan(
    spec: &OperatorSpec,
    resources: &[Resource],
    hooks: &dyn Hooks,
    warn: bool,
) -> Vec<Planned> {
    let assigned = assign(spec, resources, hooks, warn).await;
    let servable: Vec<Planned> = (assigned.into_values())
        .filter_map(|plan| servable(plan, warn))
        .collect();
    if !spec.settings.watching.selecting || servable.is_empty() {
        return servable;
    }
    with_server_selectors(servable, hooks).await
}

/// Each handler to the resources its selector picks, by resource name.
async fn assign(
    spec: &OperatorSpec,
    resources: &[Resource],
    hooks: &dyn Hooks,
    warn: bool,
) -> BTreeMap<String, Planned> {
    let mut planned: BTreeMap<String, Planned> = BTreeMap::new();
    let mut unresolved = BTreeSet::new();
    // (kind, filters, the handler's index in Python, its position in the spec); admission
    // handlers are served by the webhooks (`webhook_resources`), not watched.
    let all = spec.handlers().into_iter();
    let all = all.filter(|(kind, ..)| *kind != HandlerKind::Admission);
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
            let plan = (planned.entry(resource.name()))
                .or_insert_with(|| Planned::empty(resource.clone()));
            plan.add(spec, kind, at);
        }
    }
    // The children's resources of reconcile handlers that own some (`owns=`): watched, and
    // their objects' changes wake the owners (`engine::waking`).
    for handler in spec.reconciling.iter().filter(|h| !h.owns.is_empty()) {
        let Some(selector) = &handler.filters.selector else {
            continue;
        };
        let kind = HandlerKind::Reconciling;
        let owners = select(selector, kind, handler.index, resources, hooks).await;
        for owner in &owners {
            if let Some(plan) = planned.get_mut(&owner.name()) {
                plan.wakeable = true;
            }
        }
        for owned in &handler.owns {
            let children = select(owned, kind, handler.index, resources, hooks).await;
            if children.is_empty() {
                unresolved.insert(owned.repr.clone());
            }
            for child in children {
                let plan =
                    (planned.entry(child.name())).or_insert_with(|| Planned::empty(child.clone()));
                for owner in &owners {
                    let owner = OwnerKind {
                        group: owner.group.clone(),
                        kind: owner.kind.clone(),
                    };
                    if !plan.owners.contains(&owner) {
                        plan.owners.push(owner);
                    }
                }
            }
        }
    }
    // The owners of related functions: woken only if reconcile handlers serve them.
    for handler in &spec.relating {
        let owners = select(
            &handler.owners,
            HandlerKind::Relating,
            handler.index,
            resources,
            hooks,
        )
        .await;
        if owners.is_empty() {
            unresolved.insert(handler.owners.repr.clone());
        }
        let reconciled = |owner: &Resource| {
            (planned.get(&owner.name())).is_some_and(|p| !p.reconciling.is_empty())
        };
        for owner in owners.iter().filter(|owner| !reconciled(owner)) {
            if warn {
                tracing::error!(target: ENGINE,
                    "Related function '{}' names owners of {}, which no @kopf.on.reconcile handler serves: it wakes none of them",
                    handler.id, owner.name()
                );
            }
        }
        let owners: Vec<&Resource> = owners.into_iter().filter(|o| reconciled(o)).collect();
        for owner in &owners {
            if let Some(plan) = planned.get_mut(&owner.name()) {
                plan.wakeable = true;
            }
        }
        let kinds: Vec<OwnerKind> = (owners.into_iter())
            .map(|owner| OwnerKind {
                group: owner.group.clone(),
                kind: owner.kind.clone(),
            })
            .collect();
        let placed = (planned.values_mut()).flat_map(|plan| plan.relating.iter_mut());
        for relating in placed.filter(|r| r.handler.index == handler.index) {
            relating.owners = kinds.clone();
        }
    }
    // A related function that wakes nobody is not called (its error is said above).
    for plan in planned.values_mut() {
        plan.relating.retain(|relating| !relating.owners.is_empty());
    }
    planned.retain(|_, plan| !plan.is_idle());
    if warn && !unresolved.is_empty() {
        let names: Vec<String> = unresolved.into_iter().collect();
        tracing::warn!(target: ENGINE,
            "Unresolved resources cannot be served (try creating their CRDs): {}",
            names.join(", ")
        );
    }
    planned
}

/// The plan, if its resource can be served as its handlers need: listed and watched, and
/// patched if they write; log handlers only where objects have logs.
fn servable(mut plan: Planned, warn: bool) -> Option<Planned> {
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
        if plan.is_idle() {
            return None;
        }
    }
    if !plan.changing.is_empty() && !plan.reconciling.is_empty() {
        // Both would act on every change, each as if it owned the object. (The Python side
        // refuses it at the declaration where the selectors are the same.)
        if warn {
            tracing::error!(target: ENGINE,
                "Reconcile handlers and change handlers cannot serve the same resource, so it is not served: {} (choose one style per resource)",
                plan.resource.name()
            );
        }
        return None;
    }
    let resource = &plan.resource;
    let can = |verb: &str| resource.verbs.iter().any(|v| v == verb);
    let patches =
        !plan.changing.is_empty() || !plan.spawning.is_empty() || !plan.reconciling.is_empty();
    // (each message spelled whole, so that the source is found by what the log says)
    if !can("list") || !can("watch") {
        if warn {
            tracing::warn!(target: ENGINE, "Non-watchable resources will not be served: {}", resource.name());
        }
        None
    } else if !can("patch") && patches {
        if warn {
            tracing::warn!(target: ENGINE, "Non-patchable resources will not be served: {}", resource.name());
        }
        None
    } else {
        Some(plan)
    }
}

/// The server-side selectors of each resource's streams (`settings.watching.*_selectors`),
/// asked in Python; if that fails, nothing is served (an operator must not act on objects
/// it was not meant for).
async fn with_server_selectors(mut plans: Vec<Planned>, hooks: &dyn Hooks) -> Vec<Planned> {
    let resources = plans.iter().map(|plan| plan.resource.clone()).collect();
    match hooks.server_selectors(resources).await {
        Ok(selectors) => {
            for (plan, selectors) in plans.iter_mut().zip(selectors) {
                plan.selectors = selectors;
            }
            plans
        }
        Err(error) => {
            tracing::error!(target: ENGINE, "The server-side selectors (settings.watching.*_selectors) failed, so no resource is served: {error}");
            Vec::new()
        }
    }
}

impl Planned {
    fn empty(resource: Resource) -> Self {
        Planned {
            resource,
            selectors: ServerSelectors::default(),
            changing: Vec::new(),
            watching: Vec::new(),
            spawning: Vec::new(),
            indexing: Vec::new(),
            logging: Vec::new(),
            reconciling: Vec::new(),
            owners: Vec::new(),
            relating: Vec::new(),
            wakeable: false,
        }
    }

    /// Nothing to do with its objects: no handlers, nobody to wake.
    fn is_idle(&self) -> bool {
        let idle = self.changing.is_empty() && self.watching.is_empty();
        let idle = idle && self.spawning.is_empty() && self.indexing.is_empty();
        let idle = idle && self.logging.is_empty() && self.reconciling.is_empty();
        idle && self.owners.is_empty() && self.relating.is_empty()
    }

    /// The spec's handler of this kind at this position serves the resource too.
    fn add(&mut self, spec: &OperatorSpec, kind: HandlerKind, at: usize) {
        match kind {
            HandlerKind::Changing => self.changing.push(spec.changing[at].clone()),
            HandlerKind::Watching => self.watching.push(spec.watching[at].clone()),
            HandlerKind::Spawning => self.spawning.push(Arc::new(spec.spawning[at].clone())),
            HandlerKind::Indexing => self.indexing.push(spec.indexing[at].clone()),
            HandlerKind::Logging => self.logging.push(Arc::new(spec.logging[at].clone())),
            HandlerKind::Reconciling => self.reconciling.push(spec.reconciling[at].clone()),
            HandlerKind::Relating => self.relating.push(Relating {
                handler: spec.relating[at].clone(),
                owners: Vec::new(), // (resolved once all handlers are placed: `assign`)
            }),
            HandlerKind::Admission => {} // served by the webhooks, not watched
        }
    }
}

/// Handlers' fields outside the default essence are added to it (e.g. `status.phase`).
pub(super) fn extra_fields(plan: &Planned) -> Vec<FieldPath> {
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
