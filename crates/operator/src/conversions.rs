//! Which custom resources the `@kopf.on.convert` handlers serve, as the API is discovered:
//! each one's CRD is read and its versions checked against the declared steps (every served
//! version must lead to every other one). At start, a CRD the steps do not serve stops the
//! operator with the versions named; found later (a new version added), it is logged, and
//! its reviews fail with the same message.
//!
//! Uses: `util`, `client`, `intents`, `webhooks`.

use crate::client::credentials::Credentials;
use crate::client::resources::Resource;
use crate::intents::handlers::ConversionHandler;
use crate::util::errors;
use crate::util::logging::ENGINE;
use crate::webhooks::converting::Served;
use crate::webhooks::versions::{self, Crd, Step};
use std::collections::BTreeMap;
use std::sync::Arc;

const CRDS_URL: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// The served custom resources; an error for what cannot be served at all (a handler of a
/// resource that is not a custom one; a CRD that cannot be read), or, with `strict`, for a
/// CRD whose versions the steps do not serve.
pub async fn served(
    credentials: &Credentials,
    handlers: &[ConversionHandler],
    resources: &[Resource],
    strict: bool,
) -> Result<Vec<Served>, String> {
    // The handlers' steps by CRD name (the selectors name no version: the preferred one is found).
    let mut steps: BTreeMap<String, (Resource, Vec<Step>)> = BTreeMap::new();
    for handler in handlers {
        let selected = handler.selector.select(resources);
        if selected.is_empty() {
            tracing::warn!(target: ENGINE,
                "Conversion handler {:?} serves nothing: {} is not found in the cluster (yet).",
                handler.id, handler.selector.repr);
        }
        for resource in selected {
            if !resource.group.contains('.') {
                return Err(format!(
                    "Conversion handler {:?} selects {}, which is not a custom resource: only \
                     CRDs' versions are converted by webhooks.",
                    handler.id,
                    resource.name()
                ));
            }
            let name = format!("{}.{}", resource.plural, resource.group);
            let entry = (steps.entry(name)).or_insert_with(|| (resource.clone(), Vec::new()));
            entry.1.push(Step {
                source: handler.source.clone(),
                target: handler.target.clone(),
                handler: handler.index,
                id: handler.id.clone(),
            });
        }
    }
    let mut served = Vec::with_capacity(steps.len());
    for (name, (resource, steps)) in steps {
        let object = (credentials.get(&format!("{CRDS_URL}/{name}")).await).map_err(|e| {
            format!(
                "Cannot read the CustomResourceDefinition {name:?} for its conversions: {}",
                errors::chain(&e)
            )
        })?;
        let crd = Crd::from_object(&object).ok_or_else(|| {
            format!("The CustomResourceDefinition {name:?} cannot be read: no versions.")
        })?;
        let problem = versions::check(&crd, &steps).err();
        match &problem {
            Some(problem) if strict => return Err(problem.clone()),
            Some(problem) => tracing::error!(target: ENGINE, "{problem}"),
            None => {}
        }
        let versions = (resources.iter())
            .filter(|r| r.group == resource.group && r.plural == resource.plural)
            .map(|r| Arc::new(r.clone()))
            .collect();
        let conversion = object
            .pointer("/spec/conversion")
            .cloned()
            .unwrap_or_default();
        served.push(Served {
            crd,
            steps,
            resources: versions,
            problem,
            conversion,
        });
    }
    Ok(served)
}
