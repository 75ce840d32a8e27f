//! Kopf's peering: operators announce themselves in the status of a `KopfPeering`
//! (namespaced operators) or `ClusterKopfPeering` (cluster-wide ones) object, each with a
//! priority and a lifetime. While a live peer has a higher priority, we pause; peers of
//! the same priority pause each other (with a warning); we resume when they are gone.
//! The status layout is Kopf's, so our operators and Kopf's see each other.

use crate::client::credentials::Credentials;
use crate::client::resources::Resource;
use crate::client::watching::{EventType, Watched, Watcher};
use crate::ha::pausing::Pause;
use crate::settings::{PeeringSettings, ServerSelectors, WatchingSettings};
use crate::state::progression::{format_time, parse_time};
use crate::util::errors::chain;
use crate::util::logging::PEERING;
use crate::util::tasks;
use chrono::{DateTime, Duration as TimeDelta, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Why peering cannot start, or a record cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum PeeringError {
    /// The peering resource is not served (no CRD), and no name was asked for.
    #[error("the {kind} resource is not served (is its CRD installed?)")]
    NotServed {
        /// `KopfPeering` or `ClusterKopfPeering`.
        kind: &'static str,
    },
    #[error(
        "the {kind} resource is not served (is its CRD installed?); needed for the peering '{name}'."
    )]
    /// The peering resource is not served, and `--peering NAME` asks for one.
    NotServedFor {
        /// `KopfPeering` or `ClusterKopfPeering`.
        kind: &'static str,
        /// The peering's name (`--peering NAME`).
        name: String,
    },
    /// The namespaces cannot be listed (to find the peerings of the operator's ones).
    #[error("cannot list the namespaces: {}", chain(.0))]
    Namespaces(#[source] kube::Error),
    /// A peering object cannot be read.
    #[error("cannot read the {kind} '{name}' {place}: {}", chain(.source))]
    Read {
        /// `KopfPeering` or `ClusterKopfPeering`.
        kind: &'static str,
        /// The peering's name.
        name: String,
        /// Where: in which namespace, or cluster-wide.
        place: String,
        /// The API's error.
        #[source]
        source: kube::Error,
    },
    /// A mandatory peering (`--peering NAME`) does not exist.
    #[error("the {kind} '{name}' is not found {place}; create it, or run with --standalone.")]
    NotFound {
        /// `KopfPeering` or `ClusterKopfPeering`.
        kind: &'static str,
        /// The peering's name.
        name: String,
        /// Where: in which namespace, or cluster-wide.
        place: String,
    },
    /// Our record in a peering object cannot be written.
    #[error("{kind} {place}: {}", chain(.source))]
    Touch {
        /// `KopfPeering` or `ClusterKopfPeering`.
        kind: &'static str,
        /// Where: in which namespace, or cluster-wide.
        place: String,
        /// The API's error.
        #[source]
        source: kube::Error,
    },
}

/// The kind of the peering object for cluster-wide or namespaced operators.
pub fn peering_kind(clusterwide: bool) -> &'static str {
    if clusterwide {
        "ClusterKopfPeering"
    } else {
        "KopfPeering"
    }
}

/// Peers that publish no lifetime are trusted for this long (as Kopf does).
const DEFAULT_LIFETIME: i64 = 60;

/// One operator as its peering record shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Peer {
    pub identity: String,
    pub priority: i64,
    pub lifetime: i64,
    pub lastseen: DateTime<Utc>,
    /// Why a `kopf freeze` pauses the others (`--message`); not in Kopf's records, which
    /// Kopf reads past.
    pub message: Option<String>,
    /// It keeps Secrets' values as digests in the diff base (`"diffbase": "digests"`; not in
    /// Kopf's records, which Kopf reads past).
    pub digests: bool,
}

impl Peer {
    /// A record of the status; what is missing or unreadable gets Kopf's defaults.
    pub fn from_record(identity: &str, record: &Value, now: DateTime<Utc>) -> Self {
        let integer = |key: &str, default: i64| {
            record
                .get(key)
                .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
                .unwrap_or(default)
        };
        Self {
            identity: identity.to_owned(),
            priority: integer("priority", 0),
            lifetime: integer("lifetime", DEFAULT_LIFETIME),
            lastseen: (record.get("lastseen").and_then(Value::as_str))
                .and_then(parse_time)
                .unwrap_or(now),
            message: (record.get("message").and_then(Value::as_str)).map(str::to_owned),
            digests: record.get("diffbase").and_then(Value::as_str) == Some("digests"),
        }
    }

    pub fn deadline(&self) -> DateTime<Utc> {
        self.lastseen + TimeDelta::seconds(self.lifetime)
    }

    pub(crate) fn is_dead(&self, now: DateTime<Utc>) -> bool {
        self.deadline() <= now
    }

    pub fn record(&self) -> Value {
        let mut record = json!({"priority": self.priority, "lifetime": self.lifetime,
               "lastseen": format_time(self.lastseen)});
        if let Some(message) = &self.message {
            record["message"] = Value::String(message.clone());
        }
        if self.digests {
            record["diffbase"] = Value::String("digests".into());
        }
        record
    }

    /// As Kopf logs a peer: `<Peer id: priority=0, lifetime=60, lastseen='...'>`.
    pub fn repr(&self) -> String {
        format!(
            "<Peer {}: priority={}, lifetime={}, lastseen='{}'>",
            self.identity,
            self.priority,
            self.lifetime,
            format_time(self.lastseen)
        )
    }
}

fn reprs(peers: &[&Peer]) -> String {
    let items: Vec<String> = peers.iter().map(|p| p.repr()).collect();
    format!("[{}]", items.join(", "))
}

/// All peers of a peering object's status.
pub(crate) fn peers_of(body: &Value, now: DateTime<Utc>) -> Vec<Peer> {
    let empty = Map::new();
    let status = body
        .get("status")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    (status.iter())
        .filter(|(_, record)| record.is_object())
        .map(|(identity, record)| Peer::from_record(identity, record, now))
        .collect()
}

/// What the peers mean for us.
#[derive(Debug, PartialEq)]
pub(crate) struct Judgement<'a> {
    pub dead: Vec<&'a Peer>,
    pub higher: Vec<&'a Peer>,
    pub same: Vec<&'a Peer>,
}

#[cfg(test)]
impl Judgement<'_> {
    fn must_pause(&self) -> bool {
        !self.higher.is_empty() || !self.same.is_empty()
    }
}

impl Judgement<'_> {
    /// When the first of the blocking peers expires (the verdict may change then).
    pub(crate) fn next_deadline(&self) -> Option<DateTime<Utc>> {
        (self.higher.iter().chain(&self.same))
            .map(|p| p.deadline())
            .min()
    }
}

pub(crate) fn judge<'a>(
    peers: &'a [Peer],
    identity: &str,
    priority: i64,
    now: DateTime<Utc>,
) -> Judgement<'a> {
    let live = || {
        peers
            .iter()
            .filter(move |p| !p.is_dead(now) && p.identity != identity)
    };
    Judgement {
        dead: peers.iter().filter(|p| p.is_dead(now)).collect(),
        higher: live().filter(|p| p.priority > priority).collect(),
        same: live().filter(|p| p.priority == priority).collect(),
    }
}

/// Where to peer: the peering resource and namespace (`None`: cluster-wide).
#[derive(Debug, Clone)]
pub struct Target {
    /// The peering resource (`kopf.dev` or `zalando.org`, namespaced or cluster-wide).
    pub resource: Resource,
    /// The namespace of a namespaced peering; `None` for a cluster-wide one.
    pub namespace: Option<String>,
}

impl Target {
    fn url(&self, name: &str) -> String {
        self.resource
            .url(self.namespace.as_deref(), Some(name), None)
    }

    fn place(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("in '{namespace}'"),
            None => "cluster-wide".into(),
        }
    }
}

/// The peering resource for this kind of operator: `kopf.dev` first, the older
/// `zalando.org` group otherwise.
pub fn peering_resource(resources: &[Resource], clusterwide: bool) -> Option<&Resource> {
    let plural = if clusterwide {
        "clusterkopfpeerings"
    } else {
        "kopfpeerings"
    };
    ["kopf.dev", "zalando.org"].iter().find_map(|group| {
        resources
            .iter()
            .find(|r| r.group == *group && r.version == "v1" && r.plural == plural)
    })
}

/// Our record in a peering object: announced (with a lifetime) or withdrawn (lifetime 0).
/// Returns whether the object exists.
pub async fn touch(
    credentials: &Credentials,
    target: &Target,
    settings: &PeeringSettings,
    lifetime: i64,
    message: Option<&str>,
) -> Result<bool, kube::Error> {
    let record = if lifetime > 0 {
        Peer {
            identity: settings.identity.clone(),
            priority: settings.priority,
            lifetime,
            lastseen: Utc::now(),
            message: message.map(str::to_owned),
            digests: settings.diffbase_digests,
        }
        .record()
    } else {
        Value::Null
    };
    let mut patch = Map::new();
    patch.insert(settings.identity.clone(), record);
    patch_status(credentials, target, &settings.name, Value::Object(patch)).await
}

async fn patch_status(
    credentials: &Credentials,
    target: &Target,
    name: &str,
    status: Value,
) -> Result<bool, kube::Error> {
    let mut url = target.url(name);
    if target.resource.has_status_subresource() {
        url.push_str("/status");
    }
    match credentials
        .merge_patch::<serde::de::IgnoredAny>(&url, &json!({ "status": status }))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

/// Does the peering object exist?
pub async fn exists(
    credentials: &Credentials,
    target: &Target,
    name: &str,
) -> Result<bool, kube::Error> {
    match credentials.get(&target.url(name)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

/// One peering object: our keep-alives in it, and watching the others in it.
pub struct Peering {
    /// The API's credentials.
    pub credentials: Arc<Credentials>,
    /// The peering object to keep our record in.
    pub target: Target,
    /// `settings.peering`: name, priority, lifetime, stealth.
    pub settings: PeeringSettings,
    /// How the peering object is watched (`settings.watching`).
    pub watching: WatchingSettings,
    /// The operator's pause, which this peering votes on.
    pub pause: Arc<Pause>,
    /// This peering's place among the pause's voters.
    pub voter: usize,
}

impl Peering {
    /// Run until `stop`; then withdraw our record.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let observing = self.observe();
        let keeping = self.keep_alive();
        tokio::select! {
            () = observing => {}
            () = keeping => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
        if let Err(error) = touch(&self.credentials, &self.target, &self.settings, 0, None).await {
            tracing::error!(target: PEERING,
                "Couldn't remove self from the peering. Ignoring. ({})",
                chain(&error)
            );
        }
    }

    async fn keep_alive(&self) {
        let lifetime = self.settings.lifetime;
        loop {
            let result = touch(
                &self.credentials,
                &self.target,
                &self.settings,
                lifetime,
                None,
            )
            .await;
            let outcome = match &result {
                Ok(true) => "ok".to_owned(),
                Ok(false) => "not found".to_owned(),
                Err(error) => format!("failed: {}", chain(error)),
            };
            if !self.settings.stealth || !matches!(result, Ok(true)) {
                tracing::debug!(target: PEERING,
                    "Keep-alive in '{}' {}: {outcome}.",
                    self.settings.name,
                    self.target.place()
                );
            }
            // A little earlier than the record expires, spread randomly among the peers.
            let margin = rand::random_range(5..=10);
            let seconds = lifetime.min((lifetime - margin).max(1)).max(1);
            tokio::time::sleep(Duration::from_secs(seconds.unsigned_abs())).await;
        }
    }

    async fn observe(&self) {
        let mut watching = self.watching.clone();
        watching.selectors = ServerSelectors {
            field: Some(format!("metadata.name={}", self.settings.name)),
            ..Default::default()
        };
        let watcher = Watcher {
            credentials: self.credentials.clone(),
            resource: Arc::new(self.target.resource.clone()),
            namespace: self.target.namespace.clone(),
            settings: watching,
            paused: None,
            resume_from: None,
            health: None,
            shards: None,
        };
        let (tx, mut rx) = mpsc::channel::<Watched>(16);
        let streaming = tasks::spawn(watcher.run(tx));
        let mut body: Option<Arc<Value>> = None;
        // Unknown until the first look: a mandatory peering starts paused (and says when
        // it resumes), as Kopf's does; an auto-detected one resumes silently.
        let mut paused = self.settings.mandatory.then_some(true);
        let mut next_check: Option<DateTime<Utc>> = None;
        let mut refusing = false;
        loop {
            let wait = next_check
                .map(|deadline| (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO));
            let sleep = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = rx.recv() => match event {
                    None => break,
                    // Listed, and not there (yet): a peering with nobody in it. The
                    // auto-detected `default` one is joined when somebody creates it.
                    Some(Watched::Synced) => {
                        body.get_or_insert_with(|| Arc::new(json!({})));
                    }
                    Some(Watched::Event(event))
                        if matches!(event.event_type, EventType::Deleted | EventType::Vanished) =>
                    {
                        body = Some(Arc::new(json!({})));
                    }
                    Some(Watched::Event(event)) => body = Some(event.object),
                },
                () = sleep => {}
            }
            let Some(body) = &body else { continue };
            next_check = self.evaluate(body, &mut paused, &mut refusing).await;
        }
        streaming.abort();
    }

    /// Judge the peers; clean the dead ones; pause or resume. When to look again.
    async fn evaluate(
        &self,
        body: &Value,
        paused: &mut Option<bool>,
        refusing: &mut bool,
    ) -> Option<DateTime<Utc>> {
        let now = Utc::now();
        let peers = peers_of(body, now);
        let judgement = judge(&peers, &self.settings.identity, self.settings.priority, now);
        if !judgement.dead.is_empty() {
            let gone: Map<String, Value> = (judgement.dead.iter())
                .map(|p| (p.identity.clone(), Value::Null))
                .collect();
            let cleaned = patch_status(
                &self.credentials,
                &self.target,
                &self.settings.name,
                Value::Object(gone),
            )
            .await;
            if let Err(error) = cleaned {
                tracing::warn!(target: PEERING, "Cleaning the dead peers failed: {}", chain(&error));
            }
        }
        let was_paused = *paused == Some(true);
        // Secrets' diff base holds digests: an operator that reads it as values (Kopf) must not
        // serve beside us, nor take over from us; we refuse by pausing, and say why.
        let unaware: Vec<&Peer> = if self.settings.diffbase_digests {
            (peers.iter())
                .filter(|p| !p.is_dead(now) && p.identity != self.settings.identity && !p.digests)
                .collect()
        } else {
            Vec::new()
        };
        if !unaware.is_empty() {
            if !*refusing {
                tracing::error!(target: PEERING,
                    "Refusing a hand-over with {}: Secrets' diff base holds digests \
                     (settings.secrets.diffbase_digests), which Kopf, or this engine without that \
                     setting, would take for values. Pausing until they are gone; turn the setting \
                     off everywhere to hand over.",
                    reprs(&unaware)
                );
            }
            *paused = Some(true);
        } else if !judgement.higher.is_empty() {
            if !was_paused {
                tracing::info!(target: PEERING,
                    "Pausing operations in favour of {}.",
                    reprs(&judgement.higher)
                );
                for peer in &judgement.higher {
                    if let Some(message) = &peer.message {
                        tracing::info!(target: PEERING, "{} pauses us: {message}", peer.identity);
                    }
                }
            }
            *paused = Some(true);
        } else if !judgement.same.is_empty() && !self.settings.sharded {
            tracing::warn!(target: PEERING,
                "Possibly conflicting operators with the same priority: {}.",
                reprs(&judgement.same)
            );
            if !was_paused {
                let all: Vec<&Peer> = peers.iter().collect();
                tracing::warn!(target: PEERING, "Pausing all operators, including self: {}", reprs(&all));
            }
            *paused = Some(true);
        } else {
            if was_paused {
                tracing::info!(target: PEERING, "Resuming operations after the pause. Conflicting operators with the same priority are gone.");
            }
            *paused = Some(false);
        }
        *refusing = !unaware.is_empty();
        self.pause.vote(self.voter, *paused == Some(true));
        // A refused peer that dies without withdrawing is looked at again when it expires.
        let expiring = unaware.iter().map(|p| p.deadline());
        expiring.chain(judgement.next_deadline()).min()
    }
}

/// The namespaces the patterns name: as they are, or (with globs) those that exist now.
pub async fn namespaces(
    credentials: &Credentials,
    patterns: &[String],
) -> Result<Vec<String>, kube::Error> {
    if let Some(names) = crate::client::namespaces::specific_namespaces(patterns) {
        return Ok(names);
    }
    let list = credentials.get("/api/v1/namespaces").await?;
    let items = list.get("items").and_then(Value::as_array);
    Ok((items.into_iter().flatten())
        .filter_map(|ns| ns.pointer("/metadata/name")?.as_str())
        .filter(|name| crate::client::namespaces::matches_any(name, patterns))
        .map(str::to_owned)
        .collect())
}

/// What `kopf freeze` and `kopf resume` write.
#[derive(Debug, Clone, Deserialize)]
pub struct TouchRequest {
    /// Who: the operator's identity (`settings.peering.identity`).
    pub identity: String,
    /// The peering's name.
    pub name: String,
    /// The operator's priority (`--priority`): the highest one serves, the others pause.
    pub priority: i64,
    /// Zero removes the record (`kopf resume`).
    pub lifetime: i64,
    /// `kopf freeze --message`: why, for the paused operators to say.
    #[serde(default)]
    pub message: Option<String>,
    /// Whether the operator serves cluster-wide.
    pub clusterwide: bool,
    /// The namespaces' patterns it serves (empty: cluster-wide).
    pub namespaces: Vec<String>,
}

/// Write (or remove) a record in every peering object the request names: where, and
/// whether the object was there.
pub async fn touch_all(
    credentials: &Credentials,
    resources: &[Resource],
    request: &TouchRequest,
) -> Result<Vec<(String, bool)>, PeeringError> {
    let kind = peering_kind(request.clusterwide);
    let resource =
        peering_resource(resources, request.clusterwide).ok_or(PeeringError::NotServed { kind })?;
    let namespaces: Vec<Option<String>> = if request.clusterwide {
        vec![None]
    } else {
        (namespaces(credentials, &request.namespaces).await)
            .map_err(PeeringError::Namespaces)?
            .into_iter()
            .map(Some)
            .collect()
    };
    let settings = PeeringSettings {
        name: request.name.clone(),
        priority: request.priority,
        lifetime: request.lifetime,
        identity: request.identity.clone(),
        ..Default::default()
    };
    let mut results = Vec::new();
    for namespace in namespaces {
        let target = Target {
            resource: resource.clone(),
            namespace,
        };
        let found = touch(
            credentials,
            &target,
            &settings,
            request.lifetime,
            request.message.as_deref(),
        )
        .await
        .map_err(|source| PeeringError::Touch {
            kind,
            place: target.place(),
            source,
        })?;
        results.push((target.place(), found));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(identity: &str, priority: i64, seen_ago: i64, now: DateTime<Utc>) -> Value {
        json!({identity: {"priority": priority, "lifetime": 60,
                          "lastseen": format_time(now - TimeDelta::seconds(seen_ago))}})
    }

    #[test]
    fn kopfs_records_are_read_with_its_defaults() {
        let now = Utc::now();
        let body = json!({"status": {
            "kopf-op": {"priority": 10, "lifetime": 30, "lastseen": "2026-11-22T00:10:00.123456+00:00"},
            "old": {"lastseen": "2026-11-22T00:10:00"},
            "broken": "not a record",
        }});
        let peers = peers_of(&body, now);
        assert_eq!(peers.len(), 2);
        assert_eq!(peers[0].priority, 10);
        assert_eq!(peers[0].lifetime, 30);
        assert_eq!(
            peers[0].repr(),
            "<Peer kopf-op: priority=10, lifetime=30, lastseen='2026-11-22T00:10:00.123456+00:00'>"
        );
        assert_eq!((peers[1].priority, peers[1].lifetime), (0, 60));
        assert_eq!(
            peers[0].record(),
            json!({"priority": 10, "lifetime": 30, "lastseen": "2026-11-22T00:10:00.123456+00:00"})
        );
        assert!(!peers[0].digests, "Kopf's records say nothing of digests");
    }

    #[test]
    fn a_record_says_that_its_operator_keeps_digests() {
        let now = Utc::now();
        let record = json!({"priority": 0, "lifetime": 60, "lastseen": format_time(now),
                            "diffbase": "digests"});
        let peer = Peer::from_record("ours", &record, now);
        assert!(peer.digests);
        assert_eq!(peer.record(), record);
    }

    #[test]
    fn higher_and_equal_priorities_pause_dead_peers_do_not() {
        let now = Utc::now();
        let mut status = Map::new();
        for record in [
            peer("me", 5, 0, now),
            peer("higher", 10, 1, now),
            peer("same", 5, 1, now),
            peer("lower", 1, 1, now),
            peer("dead", 100, 61, now),
        ] {
            status.extend(record.as_object().unwrap().clone());
        }
        let peers = peers_of(&json!({ "status": status }), now);
        let judgement = judge(&peers, "me", 5, now);
        let ids = |list: &[&Peer]| list.iter().map(|p| p.identity.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&judgement.higher), ["higher"]);
        assert_eq!(ids(&judgement.same), ["same"]);
        assert_eq!(ids(&judgement.dead), ["dead"]);
        assert!(judgement.must_pause());
        assert_eq!(
            judgement.next_deadline(),
            Some(peers[1].deadline().min(peers[2].deadline()))
        );
        assert!(!judge(&peers, "me", 100, now).must_pause());
    }
}
