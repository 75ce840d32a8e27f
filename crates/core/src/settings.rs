//! The part of `kopf.OperatorSettings` the core acts on, filled in by the binding
//! from the Python object at start-up (defaults are Kopf 1.45.2's). A key the core does
//! not know is refused (`deny_unknown_fields`), never taken as its default; the Python
//! side's mapping (`OperatorSettings.for_engine`) is checked against these structs by
//! `tests/compat/test_public_surface.py`, through `_engine.settings_as_read`.
//!
//! Uses: `state` (the storages' specs), `util` (field paths).

pub mod pauses;

pub use pauses::Pauses;
use serde::{Deserialize, Serialize};

/// The part of `kopf.OperatorSettings` the core acts on, as the Python side sends it; each section as Kopf names it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `settings.watching`.
    pub watching: WatchingSettings,
    /// `settings.queueing` and `settings.batching`: the objects' workers.
    pub queueing: QueueingSettings,
    /// `settings.persistence`.
    pub persistence: PersistenceSettings,
    /// `settings.posting`.
    pub posting: PostingSettings,
    /// `settings.networking`.
    pub networking: NetworkingSettings,
    /// `settings.background`: how stopping daemons are waited for.
    pub background: BackgroundSettings,
    /// `settings.peering`, with the operator's identity.
    pub peering: PeeringSettings,
    /// `settings.leadership` (`--lease`; not in Kopf).
    pub leadership: LeadershipSettings,
    /// `settings.sharding` (`--shards auto`; not in Kopf).
    pub sharding: ShardingSettings,
    /// `settings.scanning`.
    pub scanning: ScanningSettings,
    /// `settings.metrics` (`--metrics`; not in Kopf).
    pub metrics: MetricsSettings,
    /// `settings.tracing` (`--traces`; not in Kopf).
    pub tracing: TracingSettings,
    /// `settings.logs` (the log handlers; not in Kopf).
    pub logs: LogsSettings,
    /// `settings.secrets` (not in Kopf).
    pub secrets: SecretsSettings,
    /// `settings.conversion` (the conversion webhooks; not in Kopf).
    pub conversion: ConversionSettings,
    /// `settings.reconciling` (`@kopf.on.reconcile`; not in Kopf).
    pub reconciling: ReconcilingSettings,
}

impl Settings {
    /// Give the settings read lazily their iterables, as the binding keeps them.
    pub fn attach_pauses(
        &mut self,
        sources: &dyn pauses::PauseSources,
    ) -> Result<(), pauses::Unattached> {
        self.networking.error_backoffs.attach(sources)?;
        self.queueing.error_delays.attach(sources)?;
        self.posting.logging_backoffs.attach(sources)
    }
}

/// `settings.secrets` (not in Kopf): what the core's log lines never show, besides core
/// Secrets' `data` and `stringData` (`util::redaction`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsSettings {
    /// More field paths whose values are redacted, in every resource.
    pub fields: Vec<crate::util::dicts::FieldPath>,
    /// Keep core Secrets' values out of the diff base: digests instead (`state::digests`).
    pub diffbase_digests: bool,
}

/// `settings.conversion` (not in Kopf): the CRDs whose versions `@kopf.on.convert` handlers
/// convert.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConversionSettings {
    /// Point the CRDs' `spec.conversion` at the operator's webhook server, and keep it so.
    pub managed: bool,
    /// On exit, set the managed CRDs' conversion back to strategy `None`.
    pub cleanup: bool,
}

/// `settings.reconciling` (not in Kopf): how a failing `@kopf.on.reconcile` handler is
/// retried, per object: `base * 2^(failures - 1)`, at most `cap`, plus up to `jitter` of it
/// at random; a success starts over. All objects' retries together: at most `retry_rate` a
/// second after a burst of `retry_burst`. controller-runtime's defaults (5 ms, 1 000 s; 10/s,
/// 100).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilingSettings {
    /// Seconds before the first retry.
    pub backoff_base: f64,
    /// The longest wait between retries, in seconds.
    pub backoff_cap: f64,
    /// The share of the wait added at random (0.1: up to 10 % more), so that objects that
    /// failed together do not retry together.
    pub backoff_jitter: f64,
    /// Retries of all objects together, per second on average (0: no limit).
    pub retry_rate: f64,
    /// How many retries may start at once above that rate.
    pub retry_burst: f64,
}

impl Default for ReconcilingSettings {
    fn default() -> Self {
        Self {
            backoff_base: 0.005,
            backoff_cap: 1000.0,
            backoff_jitter: 0.1,
            retry_rate: 10.0,
            retry_burst: 100.0,
        }
    }
}

impl ReconcilingSettings {
    /// The wait before the next attempt after so many failures in a row (1: the first),
    /// before the jitter; never negative, never above the cap.
    pub fn backoff(&self, failures: u64) -> f64 {
        let exponent = failures.saturating_sub(1).min(1023) as i32;
        let delay = self.backoff_base.max(0.0) * 2f64.powi(exponent);
        delay.min(self.backoff_cap.max(0.0))
    }
}

/// `settings.logs` (not in Kopf): how `@kopf.on.log` handlers follow the pods' logs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogsSettings {
    /// How many containers' logs are followed at once; more wait for a place.
    pub max_streams: std::num::NonZeroUsize,
    /// How many matched lines of one pod may wait for its handlers: beyond that, its logs
    /// are read no further until the handlers catch up (the server keeps the rest).
    pub queue_size: std::num::NonZeroUsize,
}

impl Default for LogsSettings {
    fn default() -> Self {
        Self {
            max_streams: std::num::NonZeroUsize::new(500).expect("not zero"),
            queue_size: std::num::NonZeroUsize::new(1000).expect("not zero"),
        }
    }
}

/// `kopf run --metrics [HOST:]PORT` / `settings.metrics.address` (not in Kopf; opt-in).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Where `/metrics` is served; none: no metrics are kept.
    pub address: Option<String>,
}

/// `kopf run --traces URL` / `settings.tracing` (not in Kopf; opt-in): OpenTelemetry's traces,
/// exported with OTLP over HTTP; OpenTelemetry's `OTEL_*` variables say the rest (`traces::config`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingSettings {
    /// The collector's OTLP/HTTP endpoint (`/v1/traces` is added); none: `$OTEL_EXPORTER_OTLP_*`'s,
    /// else no traces.
    pub endpoint: Option<String>,
    /// The fraction of the traces kept (parent-based); none: `$OTEL_TRACES_SAMPLER`'s, else all.
    pub ratio: Option<f64>,
}

/// `kopf run --shards auto` / `settings.sharding` (not in Kopf; opt-in): the replicas split
/// the objects among themselves; their Leases follow `leadership`'s timings and namespace.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShardingSettings {
    /// Whether the replicas share the objects.
    pub auto: bool,
    /// The replicas that share the objects: their Leases are labelled with it.
    pub group: String,
}

/// Whether new and removed CRDs are noticed at runtime (else only those found at start).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScanningSettings {
    /// `settings.scanning.disabled`: only the resources found at start are served.
    pub disabled: bool,
}

/// `settings.watching`: how the streams are asked for and kept.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchingSettings {
    /// Asked of the server (`timeoutSeconds`); `None` lets the server choose.
    pub server_timeout: Option<f64>,
    /// A watch stream that stays silent this long is restarted.
    pub inactivity_timeout: f64,
    /// Seconds before a failed stream is watched again.
    pub reconnect_backoff: f64,
    /// Page size of the initial listing.
    pub chunk_size: Option<u32>,
    /// Whether `settings.watching.*_selectors` has any (then each resource's are asked of Python).
    pub selecting: bool,
    /// This stream's own server-side filters (per resource; not from the Python settings).
    #[serde(skip)]
    pub selectors: ServerSelectors,
    /// A watch request's whole life (then it is re-opened from where it was).
    pub client_timeout: Option<f64>,
    /// Connecting for a watch (else the networking's connect, else request timeout).
    pub connect_timeout: Option<f64>,
    /// The initial objects come in the watch-stream (`sendInitialEvents`), with no listing.
    pub initial_streaming: bool,
}

impl Default for WatchingSettings {
    fn default() -> Self {
        Self {
            server_timeout: None,
            inactivity_timeout: 70.0,
            reconnect_backoff: 0.1,
            chunk_size: None,
            selecting: false,
            selectors: ServerSelectors::default(),
            client_timeout: None,
            connect_timeout: None,
            initial_streaming: false,
        }
    }
}

/// What a stream asks the server to filter: `labelSelector`, `fieldSelector`, `shardSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ServerSelectors {
    /// `labelSelector`.
    pub label: Option<String>,
    /// `fieldSelector`.
    pub field: Option<String>,
    /// `shardSelector` (Kubernetes' sharded list and watch).
    pub shard: Option<String>,
}

/// `settings.queueing`: the objects' workers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueingSettings {
    /// An object's worker ends after this long without events. It waits without a task,
    /// as data: with nothing to do, only the progression of its throttling is left to end.
    pub idle_timeout: f64,
    /// How long to wait for the workers on exit.
    pub exit_timeout: f64,
    /// At most this many objects are processed at once (None: no limit).
    pub worker_limit: Option<usize>,
    /// Delays between retries of a failed processing cycle (not handlers' errors).
    pub error_delays: Pauses,
}

impl QueueingSettings {
    /// `idle_timeout` as a duration: none below zero; a century for one that no duration
    /// holds (`float('inf')`: Kopf's workers then wait forever).
    pub fn idle_duration(&self) -> std::time::Duration {
        const CENTURY: u64 = 100 * 365 * 24 * 3600;
        let forever = std::time::Duration::from_secs(CENTURY);
        std::time::Duration::try_from_secs_f64(self.idle_timeout.max(0.0))
            .map_or(forever, |idle| idle.min(forever))
    }
}

impl Default for QueueingSettings {
    fn default() -> Self {
        Self {
            idle_timeout: 5.0,
            exit_timeout: 2.0,
            worker_limit: None,
            error_delays: Pauses::listed(&[
                1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0, 89.0, 144.0, 233.0, 377.0,
                610.0,
            ]),
        }
    }
}

/// `settings.persistence`: where the engine keeps its state in the objects.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PersistenceSettings {
    /// The finalizer that blocks deletions until the deletion handlers are done.
    pub finalizer: String,
    /// Where handlers' progress is kept.
    pub progress_storage: crate::state::storages::ProgressSpec,
    /// Where the last handled essence is kept.
    pub diffbase_storage: crate::state::storages::DiffBaseSpec,
    /// How long to wait for our own patch to come back in the watch stream.
    pub consistency_timeout: f64,
}

impl Default for PersistenceSettings {
    fn default() -> Self {
        Self {
            finalizer: "kopf.zalando.org/KopfFinalizerMarker".into(),
            progress_storage: Default::default(),
            diffbase_storage: Default::default(),
            consistency_timeout: 5.0,
        }
    }
}

/// `settings.posting`: which log lines become Events, and as whom.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostingSettings {
    /// Whether log lines are posted as Events at all.
    pub enabled: bool,
    /// The Events' reporting component.
    pub reporting_component: String,
    /// The Events' reporting instance.
    pub reporting_instance: String,
    /// The prefix of the Events' generated names.
    pub event_name_prefix: String,
    /// At most this many objects' events are posted at once (None: no limit).
    pub worker_limit: Option<usize>,
    /// An object's posting worker exits after this long without events.
    pub idle_timeout: f64,
    /// Delays before the retries of a failed post of a log line's Event.
    pub logging_backoffs: Pauses,
}

impl Default for PostingSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            reporting_component: "kopf".into(),
            reporting_instance: "dev".into(),
            event_name_prefix: "kopf-event-".into(),
            worker_limit: None,
            idle_timeout: 1.0,
            logging_backoffs: Pauses::listed(&[1.0, 1.0, 2.0, 3.0, 5.0]),
        }
    }
}

/// `settings.networking`: the requests' timeouts and retries.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkingSettings {
    /// Each request's deadline in seconds (`None`: none).
    pub request_timeout: Option<f64>,
    /// Connecting's deadline in seconds (`None`: none).
    pub connect_timeout: Option<f64>,
    /// Delays before the retries of a failed request (none: fail at once).
    pub error_backoffs: Pauses,
    /// The server's `Retry-After` wins over the backoff even when shorter.
    pub enforce_retry_after: bool,
}

impl Default for NetworkingSettings {
    fn default() -> Self {
        Self {
            request_timeout: Some(300.0),
            connect_timeout: None,
            error_backoffs: Pauses::listed(&[1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]),
            enforce_retry_after: false,
        }
    }
}

/// Daemons and timers: how stopping ones are waited for.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackgroundSettings {
    /// How often a stopping daemon without a cancellation timeout is checked.
    pub cancellation_polling: f64,
    /// How long a daemon may take to exit "instantly" after being signalled.
    pub instant_exit_timeout: Option<f64>,
    /// Kopf's alternative: this many event-loop cycles; here, 10 ms each.
    pub instant_exit_zero_time_cycles: Option<u32>,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        Self {
            cancellation_polling: 60.0,
            instant_exit_timeout: None,
            instant_exit_zero_time_cycles: Some(10),
        }
    }
}

impl BackgroundSettings {
    /// The wait for an instant exit, in seconds.
    pub fn instant_exit(&self) -> f64 {
        match (
            self.instant_exit_timeout,
            self.instant_exit_zero_time_cycles,
        ) {
            (Some(timeout), _) => timeout,
            (None, Some(cycles)) => f64::from(cycles) * 0.01,
            (None, None) => 0.0,
        }
    }
}

/// `settings.peering` plus the operator's identity (`POD_ID`, or user@host/time/random).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeeringSettings {
    /// The peering's name.
    pub name: String,
    /// The operator's priority among its peers.
    pub priority: i64,
    /// Seconds that other operators take our record as current without a keep-alive.
    pub lifetime: i64,
    /// Whether its keep-alives go unlogged.
    pub stealth: bool,
    /// Whether the peering must exist (`--peering NAME`), or may be absent.
    pub mandatory: bool,
    /// Whether to run without peering at all.
    pub standalone: bool,
    /// Whether the peering is cluster-wide (`ClusterKopfPeering`).
    pub clusterwide: bool,
    /// Who this operator is among its peers.
    pub identity: String,
    /// With shard selectors, peers of the same priority serve different objects: no pause.
    pub sharded: bool,
    /// `settings.secrets.diffbase_digests`: said in our record; a peer that does not say it
    /// (Kopf) cannot read the digests, and we pause while it is there.
    pub diffbase_digests: bool,
}

impl Default for PeeringSettings {
    fn default() -> Self {
        Self {
            name: "default".into(),
            priority: 0,
            lifetime: 60,
            stealth: false,
            mandatory: false,
            standalone: false,
            clusterwide: false,
            identity: "kopf-rs".into(),
            sharded: false,
            diffbase_digests: false,
        }
    }
}

/// `settings.leadership`: no election without a lease name.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeadershipSettings {
    /// The Lease to elect a leader by (`--lease NAME`); none: no election.
    pub lease_name: Option<String>,
    /// Where the Lease lives; see `namespace()` for the default.
    pub lease_namespace: Option<String>,
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: f64,
    /// A holder that has not renewed for this long stops handling (less than the duration).
    pub renew_deadline: f64,
    /// How often the holder renews and the others try to take over.
    pub retry_period: f64,
}

impl Default for LeadershipSettings {
    fn default() -> Self {
        Self {
            lease_name: None,
            lease_namespace: None,
            lease_duration: 15.0,
            renew_deadline: 10.0,
            retry_period: 2.0,
        }
    }
}

/// Timings of a Lease election that contradict each other.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LeadershipProblem {
    /// A timing is zero or negative.
    #[error("the lease duration, renew deadline and retry period must be positive")]
    NotPositive,
    /// The renew deadline is not shorter than the lease.
    #[error("the renew deadline ({renew_deadline}) must be shorter than the lease duration ({lease_duration})")]
    RenewDeadline {
        /// Seconds.
        renew_deadline: f64,
        /// Seconds.
        lease_duration: f64,
    },
    /// The retry period is not shorter than the renew deadline.
    #[error("the retry period ({retry_period}) must be shorter than the renew deadline ({renew_deadline})")]
    RetryPeriod {
        /// Seconds.
        retry_period: f64,
        /// Seconds.
        renew_deadline: f64,
    },
}

impl LeadershipSettings {
    /// The namespace of the leader's Lease and of the shards' ones: `default` unless given.
    pub fn namespace(&self) -> String {
        (self.lease_namespace.clone()).unwrap_or_else(|| "default".into())
    }

    /// The settings' contradictions, if any (the operator refuses to start with them).
    pub fn problem(&self) -> Option<LeadershipProblem> {
        let positive =
            self.lease_duration > 0.0 && self.renew_deadline > 0.0 && self.retry_period > 0.0;
        if !positive {
            Some(LeadershipProblem::NotPositive)
        } else if self.renew_deadline >= self.lease_duration {
            Some(LeadershipProblem::RenewDeadline {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            })
        } else if self.retry_period >= self.renew_deadline {
            Some(LeadershipProblem::RetryPeriod {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contradicting_lease_timings_are_refused() {
        assert_eq!(LeadershipSettings::default().problem(), None);
        let bad = LeadershipSettings {
            renew_deadline: 20.0,
            ..Default::default()
        };
        assert_eq!(
            bad.problem().map(|p| p.to_string()).as_deref(),
            Some("the renew deadline (20) must be shorter than the lease duration (15)")
        );
        let bad = LeadershipSettings {
            retry_period: 0.0,
            ..Default::default()
        };
        assert_eq!(bad.problem(), Some(LeadershipProblem::NotPositive));
    }

    #[test]
    fn any_idle_timeout_is_a_duration() {
        let idle = |idle_timeout: f64| {
            let settings = QueueingSettings {
                idle_timeout,
                ..Default::default()
            };
            settings.idle_duration().as_secs_f64()
        };
        assert_eq!(idle(5.0), 5.0);
        assert_eq!(idle(-1.0), 0.0);
        assert_eq!(idle(f64::NAN), 0.0);
        assert!(idle(f64::INFINITY) > 3e9 && idle(1e300) == idle(f64::INFINITY));
    }

    #[test]
    fn the_reconcile_backoff_doubles_up_to_its_cap() {
        let settings = ReconcilingSettings {
            backoff_base: 0.5,
            backoff_cap: 3.0,
            ..Default::default()
        };
        let delays: Vec<f64> = (1..=5).map(|n| settings.backoff(n)).collect();
        assert_eq!(delays, [0.5, 1.0, 2.0, 3.0, 3.0]);
        assert_eq!(settings.backoff(u64::MAX), 3.0);
        let negative = ReconcilingSettings {
            backoff_base: -1.0,
            ..settings
        };
        assert_eq!(negative.backoff(3), 0.0);
    }
}
