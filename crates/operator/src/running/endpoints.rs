//! The operator's own HTTP endpoints: the liveness probe and the metrics.

use super::{OperatorSpec, RunError};
use crate::intents::hooks::Hooks;
use std::sync::Arc;

/// The operator's own HTTP endpoints: the liveness probe (`--liveness`) and the metrics
/// (`--metrics`), if asked for.
pub(super) struct Endpoints(Vec<tokio::task::JoinHandle<()>>);

impl Endpoints {
    pub(super) async fn start(
        spec: &OperatorSpec,
        hooks: &Arc<dyn Hooks>,
        watching: &tokio::sync::watch::Receiver<bool>,
    ) -> Result<Self, RunError> {
        let mut served = Vec::new();
        if let Some(endpoint) = &spec.liveness_endpoint {
            let watching = watching.clone();
            served.push(crate::probing::serve(endpoint, hooks.clone(), watching).await?);
        }
        if let Some(address) = &spec.settings.metrics.address {
            served.push(crate::metrics::serving::serve(address).await?);
        }
        Ok(Endpoints(served))
    }

    pub(super) fn stop(self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}
