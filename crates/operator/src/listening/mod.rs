//! Skafos' listener API on the core (what `skafos.stream_watch.StreamWatch` runs
//! on): one resource's events as Skafos' listeners get them, each change once (`events`),
//! numbered and acknowledged by the listeners (`progress`), delivered only while leading
//! (`election`, a ConfigMap lock), with a health port (`health`). The listeners run in
//! Python threads; the binding hands them the deliveries.
//!
//! Uses: `util`, `settings`, `client`, `ha`.

pub mod election;
pub mod events;
pub mod health;
pub mod progress;

use crate::client::credentials::Credentials;
use crate::client::resources::Resource;
use crate::client::watching::{StreamHealth, Watcher};
use crate::ha::leadership::{Leadership, Lock};
use crate::ha::pausing::Pause;
use crate::settings::{LeadershipSettings, WatchingSettings};
use crate::util::logging::ENGINE;
use crate::util::tasks;
use election::ConfigMapLock;
use events::{Changes, Event, Listened};
use health::Health;
use progress::Progress;
use serde::Deserialize;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Deliveries waiting for Python's loop to take them (it hands them to its threads at once).
const DELIVERY_BACKLOG: usize = 64;
/// How long a created CRD may take to be served.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What to listen to, and how (from `StreamWatch` and its `run()` arguments).
#[derive(Debug, Clone, Deserialize)]
pub struct Spec {
    /// The resource's API group.
    pub group: String,
    /// Its version.
    pub version: String,
    /// Its plural name.
    pub plural: String,
    /// Its kind.
    pub kind: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// The CRD to create if the resource is not served yet (Skafos registers its CRD file).
    pub crd: Option<Value>,
    /// Where the CRD was read from, for messages.
    pub source: String,
    /// The watch requests' timeout (`timeoutSeconds`), and the health's grace.
    pub timeout: f64,
    /// Where to serve the health checks (none: not served).
    pub health_port: Option<u16>,
    /// The leader election's ConfigMap lock, if the listeners elect one.
    pub election: Option<ElectionSpec>,
}

/// Skafos' election by a ConfigMap lock.
#[derive(Debug, Clone, Deserialize)]
pub struct ElectionSpec {
    /// The lock's namespace.
    pub namespace: String,
    /// The lock's name.
    pub name: String,
    /// Who this replica is.
    pub identity: String,
}

impl Spec {
    fn resource(&self) -> Resource {
        Resource {
            group: self.group.clone(),
            version: self.version.clone(),
            plural: self.plural.clone(),
            kind: self.kind.clone(),
            singular: self.kind.to_lowercase(),
            shortcuts: vec![],
            categories: vec![],
            subresources: vec![],
            namespaced: self.namespaced,
            preferred: true,
            verbs: vec![],
        }
    }
}

/// Why a listener's stream cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ListeningError {
    /// Whether the resource is served cannot be told.
    #[error("cannot check whether {what} is served: {error}")]
    Discovery {
        /// The resource, as the listener names it.
        what: String,
        /// The discovery's error.
        error: String,
    },
    /// The resource is not served, and its CRD cannot be created.
    #[error("{what} is not served, and creating its CRD from {source_file} failed: {error}")]
    Registration {
        /// The resource, as the listener names it.
        what: String,
        /// The CRD's file.
        source_file: String,
        /// The API's error.
        error: String,
    },
    /// The CRD was created, but the resource is still not served.
    #[error("{what} is not served {seconds} seconds after its CRD was created from {source_file}")]
    NotServed {
        /// The resource, as the listener names it.
        what: String,
        /// The CRD's file.
        source_file: String,
        /// How long it was waited for.
        seconds: u64,
    },
    /// The health port cannot be listened on.
    #[error("cannot listen on port {port} for the health checks: {source}")]
    Listen {
        /// The port.
        port: u16,
        /// The listen's error.
        #[source]
        source: std::io::Error,
    },
}

/// An event for the listeners, with its number (to acknowledge it by).
#[derive(Debug)]
pub struct Delivery {
    /// The event's number in the stream, counting from 1.
    pub number: u64,
    /// The event.
    pub event: Event,
}

/// A listener's stream of events, from start to close.
pub struct Listening {
    deliveries: tokio::sync::Mutex<mpsc::Receiver<Delivery>>,
    progress: Arc<Progress>,
    pause: Arc<Pause>,
    stop_stream: watch::Sender<bool>,
    stop_election: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    electing: Mutex<Option<JoinHandle<()>>>,
}

impl Listening {
    /// Make sure the resource is served (creating its CRD if given), bind the health port,
    /// and start electing (if asked) and streaming.
    pub async fn start(
        credentials: Arc<Credentials>,
        spec: Spec,
    ) -> Result<Arc<Self>, ListeningError> {
        let resource = Arc::new(spec.resource());
        ensure_served(&credentials, &resource, &spec).await?;
        let listener = match spec.health_port {
            Some(port) => Some(
                (TcpListener::bind(("0.0.0.0", port)).await)
                    .map_err(|source| ListeningError::Listen { port, source })?,
            ),
            None => None,
        };
        let progress = Arc::new(Progress::default());
        let pause = Pause::new(usize::from(spec.election.is_some()));
        let (stop_stream, _) = watch::channel(false);
        let (stop_election, _) = watch::channel(false);
        let lock = (spec.election.as_ref()).map(|election| {
            let (name, namespace) = (election.name.clone(), election.namespace.clone());
            Arc::new(ConfigMapLock::new(name, namespace, progress.clone()))
        });
        let electing = (lock.clone().zip(spec.election.as_ref())).map(|(lock, election)| {
            let leadership = Leadership {
                credentials: credentials.clone(),
                settings: election_settings(),
                lock: lock as Arc<dyn Lock>,
                identity: election.identity.clone(),
                pause: pause.clone(),
                voter: 0,
            };
            tasks::spawn(leadership.run(stop_election.subscribe()))
        });
        let stream_health = Arc::new(StreamHealth::new());
        let mut running = Vec::new();
        if let Some(listener) = listener {
            let health = Health {
                stream: stream_health.clone(),
                election: lock.as_ref().map(|lock| lock.health.clone()),
                pause: pause.clone(),
                grace: Duration::from_secs_f64(spec.timeout.max(1.0)),
            };
            running.push(health::serve(listener, health));
        }
        let (tx, rx) = mpsc::channel(DELIVERY_BACKLOG);
        let streaming = Streaming {
            credentials,
            resource,
            settings: WatchingSettings {
                server_timeout: Some(spec.timeout),
                ..WatchingSettings::default()
            },
            progress: progress.clone(),
            pause: pause.clone(),
            lock,
            health: stream_health,
        };
        running.push(tasks::spawn(streaming.run(tx, stop_stream.subscribe())));
        Ok(Arc::new(Self {
            deliveries: tokio::sync::Mutex::new(rx),
            progress,
            pause,
            stop_stream,
            stop_election,
            tasks: Mutex::new(running),
            electing: Mutex::new(electing),
        }))
    }

    /// The next event to handle, if one comes within `timeout` (none either when stopped).
    pub async fn next(&self, timeout: Duration) -> Option<Delivery> {
        let mut deliveries = self.deliveries.lock().await;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let delivery = (tokio::time::timeout_at(deadline, deliveries.recv()).await).ok()??;
            if self.may_handle(delivery.number) {
                return Some(delivery);
            }
        }
    }

    /// Whether an event may be handled now: it is of the current term, and we lead (the
    /// lock renewed in time) or do not elect. Checked again right before the listeners.
    pub fn may_handle(&self, number: u64) -> bool {
        self.progress.is_current(number) && self.pause.is_active()
    }

    /// The listeners are done with this event.
    pub fn done(&self, number: u64) {
        self.progress.done(number);
    }

    /// No more events: the stream ends (`next` answers at once); the lock is still held.
    pub fn stop(&self) {
        self.stop_stream.send_replace(true);
    }

    /// Stop (when the listeners are done): release the lock with the handled version.
    pub async fn close(&self) {
        self.stop();
        self.stop_election.send_replace(true);
        let electing = self.electing.lock().expect("not poisoned").take();
        if let Some(electing) = electing {
            let _ = electing.await;
        }
        for task in self.tasks.lock().expect("not poisoned").drain(..) {
            task.abort();
        }
    }
}

/// Skafos' timing: a leader silent for 30 seconds is replaced; ours renews every 5 seconds
/// and stops delivering if it could not renew for 20.
fn election_settings() -> LeadershipSettings {
    LeadershipSettings {
        lease_duration: 30.0,
        renew_deadline: 20.0,
        retry_period: 5.0,
        ..LeadershipSettings::default()
    }
}

/// The stream of events, restarted for each term of leading.
struct Streaming {
    credentials: Arc<Credentials>,
    resource: Arc<Resource>,
    settings: WatchingSettings,
    progress: Arc<Progress>,
    pause: Arc<Pause>,
    lock: Option<Arc<ConfigMapLock>>,
    health: Arc<StreamHealth>,
}

impl Streaming {
    async fn run(self, tx: mpsc::Sender<Delivery>, mut stop: watch::Receiver<bool>) {
        let mut paused = self.pause.subscribe();
        loop {
            tokio::select! {
                resumed = paused.wait_for(|paused| !*paused) => if resumed.is_err() { return },
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            // Taken over: from where the former leader got; else from where we got.
            let start = (self.lock.as_ref())
                .and_then(|lock| lock.take_handover())
                .unwrap_or_else(|| self.progress.handled());
            self.progress.begin_term(start.clone());
            match &start {
                Some(version) => tracing::info!(target: ENGINE,
                    "Streaming the events of {} from the handled version {version}.", self.resource.name()),
                None => tracing::info!(target: ENGINE,
                    "Streaming the events of {}: the existing objects first.", self.resource.name()),
            }
            let (feed, mut news) = mpsc::channel::<Listened>(DELIVERY_BACKLOG);
            let watcher = Watcher {
                credentials: self.credentials.clone(),
                resource: self.resource.clone(),
                namespace: None,
                settings: self.settings.clone(),
                paused: None,
                resume_from: start.clone(),
                health: Some(self.health.clone()),
                shards: None,
            };
            let mut changes = Changes::new(
                self.resource.api_version(),
                self.resource.kind.clone(),
                start.as_deref(),
            );
            let delivering = async {
                while let Some(news) = news.recv().await {
                    for event in changes.absorb(news) {
                        let number = self.progress.issue(event.version());
                        if tx.send(Delivery { number, event }).await.is_err() {
                            return;
                        }
                    }
                }
            };
            tokio::select! {
                () = watcher.run(feed) => return,
                () = delivering => return,
                _ = paused.wait_for(|paused| *paused) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
    }
}

/// Whether the server serves the resource; if not, create its CRD (as Skafos registers its
/// CRD file) and wait until it is served.
async fn ensure_served(
    credentials: &Credentials,
    resource: &Resource,
    spec: &Spec,
) -> Result<(), ListeningError> {
    let what = resource.name();
    if is_served(credentials, resource).await? {
        return Ok(());
    }
    let failed = |error: String| ListeningError::Registration {
        what: what.clone(),
        source_file: spec.source.clone(),
        error,
    };
    let crd = spec
        .crd
        .as_ref()
        .ok_or_else(|| failed("it has no CRD".into()))?;
    let api_version =
        (crd.get("apiVersion").and_then(Value::as_str)).unwrap_or("apiextensions.k8s.io/v1");
    let url = format!("/apis/{api_version}/customresourcedefinitions");
    tracing::info!(target: ENGINE, "Creating the CRD of {what} from {}.", spec.source);
    match credentials.post(&url, crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {} // created meanwhile
        Err(error) => return Err(failed(crate::util::errors::chain(&error))),
    }
    let deadline = tokio::time::Instant::now() + REGISTRATION_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if is_served(credentials, resource).await? {
            return Ok(());
        }
    }
    Err(ListeningError::NotServed {
        what,
        source_file: spec.source.clone(),
        seconds: REGISTRATION_TIMEOUT.as_secs(),
    })
}

async fn is_served(credentials: &Credentials, resource: &Resource) -> Result<bool, ListeningError> {
    let url = match resource.group.is_empty() {
        true => format!("/api/{}", resource.version),
        false => format!("/apis/{}/{}", resource.group, resource.version),
    };
    match credentials.get(&url).await {
        Ok(list) => Ok((list.get("resources").and_then(Value::as_array))
            .is_some_and(|all| all.iter().any(|r| r["name"] == resource.plural.as_str()))),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(ListeningError::Discovery {
            what: resource.name(),
            error: crate::util::errors::chain(&error),
        }),
    }
}
