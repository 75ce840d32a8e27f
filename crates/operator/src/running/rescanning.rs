//! Discovery, and the CRD events that make it look again.

use super::RunError;
use crate::client::credentials::Credentials;
use crate::client::discovery::{self, DiscoveryError};
use crate::client::resources::Resource;
use crate::client::watching::{EventType, RawEvent, Watcher};
use crate::settings::Settings;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Discovery, retried with the networking backoffs: an API server that is still starting
/// (or briefly unreachable) is waited for; one that stays away ends the operator with an error.
/// The served resources, retried as any request (`settings.networking.error_backoffs`).
pub(super) async fn discover(
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

/// New CRDs (or removed ones) change what can be served: their events, to rescan on. Without
/// scanning (or the rights to it), only the resources found at start are served.
pub(super) fn watch_crds(
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
pub(super) struct CrdVersions {
    seen: std::collections::HashMap<String, String>,
    watching: bool,
}

impl CrdVersions {
    pub(super) fn is_news(&mut self, event: &RawEvent) -> bool {
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
