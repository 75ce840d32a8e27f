//! Discovery, and the CRD events that make it look again.

use super::RunError;
use crate::client::credentials::Credentials;
use crate::client::discovery::{self, DiscoveryError};
use crate::client::resources::Resource;
use crate::client::watching::{EventType, RawEvent, Watcher};
use crate::settings::Settings;
use crate::util::errors;
use crate::util::logging::ENGINE;
use crate::util::tasks;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Discovery now and again: the API groups to scan, and the CRD events that call for a rescan.
pub(super) struct Scanner {
    credentials: Arc<Credentials>,
    server: String,
    /// The groups to scan (`None`: all of them).
    groups: Option<BTreeSet<String>>,
    events: mpsc::Receiver<RawEvent>,
    versions: CrdVersions,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Scanner {
    pub(super) fn new(
        credentials: Arc<Credentials>,
        server: &str,
        groups: Option<BTreeSet<String>>,
    ) -> Self {
        let (_, events) = mpsc::channel(1);
        Scanner {
            credentials,
            server: server.to_owned(),
            groups,
            events,
            versions: CrdVersions::default(),
            watcher: None,
        }
    }

    /// Discovery, retried with the networking backoffs (`settings.networking.error_backoffs`):
    /// an API server that is still starting (or briefly unreachable) is waited for; one that
    /// stays away ends the operator with an error.
    pub(super) async fn discover(&self) -> Result<Vec<Resource>, RunError> {
        let server = &self.server;
        let what = format!("GET {server}/api & /apis (API discovery)");
        let groups = self.groups.as_ref();
        (self.credentials)
            .call(&what, |client| async move {
                discovery::scan(&client, groups).await
            })
            .await
            .map_err(|source| {
                let server = server.clone();
                DiscoveryError { server, source }.into()
            })
    }

    /// New CRDs (or removed ones) change what can be served: watch them, to rescan on their
    /// events. Without scanning (or the rights to it), only the resources found at start are
    /// served.
    pub(super) fn watch_crds(&mut self, resources: &[Resource], settings: &Settings) {
        let crds = resources
            .iter()
            .find(|r| {
                r.group == "apiextensions.k8s.io"
                    && r.plural == "customresourcedefinitions"
                    && r.preferred
            })
            .filter(|_| !settings.scanning.disabled);
        let Some(crds) = crds else {
            return;
        };
        let (tx, events) = mpsc::channel::<RawEvent>(64);
        let watcher = Watcher {
            credentials: self.credentials.clone(),
            resource: Arc::new(crds.clone()),
            namespace: None,
            settings: settings.watching.clone(),
            paused: None,
            resume_from: None,
            health: None,
            shards: None,
        };
        self.events = events;
        self.watcher = Some(tasks::spawn(async move {
            if watcher.run_if_permitted(tx).await.is_err() {
                tracing::warn!(target: ENGINE, "Not enough permissions to watch for resources: changes (creation/deletion/updates) will not be noticed; the resources are only refreshed on operator restarts.");
            }
        }));
    }

    /// Wait for a CRD event that may change what is served. Safe to cancel (in a `select!`):
    /// nothing is awaited after an event is taken.
    pub(super) async fn changed(&mut self) {
        loop {
            let Some(event) = self.events.recv().await else {
                return std::future::pending().await; // not watching: no news ever
            };
            if !self.versions.is_news(&event) {
                continue;
            }
            // A CRD of a group that was not scanned cannot change what is served.
            let group = event.object.pointer("/spec/group").and_then(|g| g.as_str());
            let scanned = |(groups, group): (&BTreeSet<String>, &str)| groups.contains(group);
            if self.groups.as_ref().zip(group).is_none_or(scanned) {
                return;
            }
        }
    }

    /// The resources after a change: a burst (a new CRD becoming established) is let settle
    /// first; `None` if the rescan failed (it is said; the served ones stay).
    pub(super) async fn rescan(&mut self) -> Option<Vec<Resource>> {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        while let Ok(event) = self.events.try_recv() {
            self.versions.is_news(&event);
        }
        match self.discover().await {
            Ok(resources) => Some(resources),
            Err(error) => {
                tracing::warn!(target: ENGINE, "Re-scanning the API failed: {}", errors::chain(&error));
                None
            }
        }
    }

    pub(super) fn stop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
    }
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
