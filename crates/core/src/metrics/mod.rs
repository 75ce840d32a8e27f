//! The engine's figures for Prometheus (opt-in: `kopf run --metrics [HOST:]PORT`, or
//! `settings.metrics.address`): handler calls, API requests, watch streams, queues, daemons
//! and timers, the pause state, admission reviews. Nothing is recorded unless enabled: each
//! recording point asks `get()` first, so an operator without metrics pays one atomic load.
//!
//! Labels are bounded: resources, handler ids, kinds, verbs and codes — never object names.
//!
//! Uses: `util`.

pub mod serving;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::{Metric, Registry};
use std::sync::OnceLock;
use std::time::Duration;

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The figures, if metrics are enabled in this process.
pub fn get() -> Option<&'static Metrics> {
    METRICS.get()
}

/// Start recording (idempotent): from now on, `get()` gives the figures.
pub(crate) fn enable() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// The labels of a handler's figures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabels {
    /// The resource, as `plural.version.group`.
    pub resource: String,
    /// The handler's id.
    pub handler: String,
    /// Its kind (`changing`, `watching`, `daemon`, `timer`, ...).
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    pub resource: String,
    pub handler: String,
    pub kind: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabels {
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConversionLabels {
    pub resource: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CauseLabels {
    pub resource: String,
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub verb: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VerbLabels {
    pub verb: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Durations from 1 ms to about 65 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Lateness from 1 ms to about 16 s.
fn lateness() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// How one handler call ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// Done.
    Success,
    /// `kopf.TemporaryError`: retried after its delay.
    Temporary,
    /// `kopf.PermanentError`: not retried.
    Permanent,
    /// Any other exception (retried or not, by the handler's `errors=` mode).
    Exception,
    /// Stopped by force (a daemon's cancellation): no outcome.
    Cancelled,
}

impl CallOutcome {
    /// The `outcome` label's value (also the handler spans' `kopf.handler.outcome`).
    pub fn label(self) -> &'static str {
        match self {
            CallOutcome::Success => "success",
            CallOutcome::Temporary => "temporary",
            CallOutcome::Permanent => "permanent",
            CallOutcome::Exception => "exception",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// The Prometheus figures of the operator (`--metrics`), recorded into by every layer.
pub struct Metrics {
    registry: Registry,
    handler_calls: Family<OutcomeLabels, Counter>,
    handler_duration: Histograms<HandlerLabels>,
    handler_retries: Family<HandlerLabels, Counter>,
    objects_watched: Family<ResourceLabels, Gauge>,
    events_queued: Family<ResourceLabels, Gauge>,
    events_collapsed: Family<ResourceLabels, Counter>,
    watch_restarts: Family<CauseLabels, Counter>,
    relists: Family<CauseLabels, Counter>,
    api_requests: Family<RequestLabels, Counter>,
    api_duration: Histograms<VerbLabels>,
    daemons_running: Family<ResourceLabels, Gauge>,
    timers_running: Family<ResourceLabels, Gauge>,
    timer_lateness: Histograms<HandlerLabels>,
    paused: Gauge,
    admission_requests: Family<OutcomeLabels, Counter>,
    log_lines_read: Family<ResourceLabels, Counter>,
    log_lines_matched: Family<ResourceLabels, Counter>,
    log_streams: Family<ResourceLabels, Gauge>,
    conversions: Family<ConversionLabels, Counter>,
    conversion_duration: Histograms<ResourceLabels>,
    spans_exported: Counter,
    spans_dropped: Family<ReasonLabels, Counter>,
}

/// The counters of one followed log (made once per reader, not per line).
#[derive(Clone, Debug)]
pub struct LogCounters {
    /// Lines read from the log.
    pub read: Counter,
    /// Of those, the lines that a log handler matched (and that were queued for it).
    pub matched: Counter,
}

/// Registers a metric, and describes it as the exposition does (its family's name).
fn register<M: Metric + TypedMetric>(
    registry: &mut Registry,
    described: &mut String,
    name: &str,
    help: &str,
    metric: M,
) {
    let kind = M::TYPE.as_str();
    described.push_str(&format!(
        "# HELP kopf_{name} {help}.\n# TYPE kopf_{name} {kind}\n"
    ));
    registry.register(name, help, metric);
}

impl Metrics {
    fn new() -> Self {
        Metrics::with_descriptions().0
    }

    /// The metrics, and their names, types and help as the exposition gives them (an empty
    /// family writes nothing there, so a fresh operator's exposition does not tell them).
    fn with_descriptions() -> (Self, String) {
        let mut registry = Registry::with_prefix("kopf");
        let mut described = String::new();
        let metrics = Metrics {
            registry: Registry::default(),
            handler_calls: Family::default(),
            handler_duration: Family::new_with_constructor(seconds),
            handler_retries: Family::default(),
            objects_watched: Family::default(),
            events_queued: Family::default(),
            events_collapsed: Family::default(),
            watch_restarts: Family::default(),
            relists: Family::default(),
            api_requests: Family::default(),
            api_duration: Family::new_with_constructor(seconds),
            daemons_running: Family::default(),
            timers_running: Family::default(),
            timer_lateness: Family::new_with_constructor(lateness),
            paused: Gauge::default(),
            admission_requests: Family::default(),
            log_lines_read: Family::default(),
            log_lines_matched: Family::default(),
            log_streams: Family::default(),
            conversions: Family::default(),
            conversion_duration: Family::new_with_constructor(seconds),
            spans_exported: Counter::default(),
            spans_dropped: Family::default(),
        };
        let m = &metrics;
        register(
            &mut registry,
            &mut described,
            "handler_calls",
            "Handler calls by resource, handler, kind and outcome",
            m.handler_calls.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "handler_duration_seconds",
            "How long handler calls took",
            m.handler_duration.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "handler_retries",
            "Handler calls that were retries of a failed one",
            m.handler_retries.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "objects_watched",
            "Objects known from the watch streams, by resource",
            m.objects_watched.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "events_queued",
            "Watch events waiting in the objects' queues, by resource",
            m.events_queued.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "events_collapsed",
            "Watch events superseded by a later one of the same object before processing",
            m.events_collapsed.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "watch_restarts",
            "Watch streams re-opened, by resource and cause",
            m.watch_restarts.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "relists",
            "Resources listed again (410 Gone, resuming from a pause), by resource and cause",
            m.relists.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "api_requests",
            "Requests to the API server by verb and status code (2xx: any success; \
             timeout, error: no response)",
            m.api_requests.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "api_request_duration_seconds",
            "How long requests to the API server took (to the response's headers)",
            m.api_duration.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "daemons_running",
            "Daemons running, by resource",
            m.daemons_running.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "timers_running",
            "Timers running, by resource",
            m.timers_running.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "timer_lateness_seconds",
            "How late timer calls started after their scheduled instant",
            m.timer_lateness.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "trace_spans_exported",
            "Spans taken by the traces' collector (`--traces`)",
            m.spans_exported.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "trace_spans_dropped",
            "Spans not exported, by reason: queue_full (the queue was full), export_failed (the \
             collector did not take them)",
            m.spans_dropped.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "paused",
            "1 while the operator is paused (by peering or the leader Lease), else 0",
            m.paused.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "admission_requests",
            "Admission handler calls by resource, webhook, kind and outcome",
            m.admission_requests.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "log_lines_read",
            "Lines of containers' logs read for log handlers, by resource",
            m.log_lines_read.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "log_lines_matched",
            "Lines of containers' logs that a log handler matched, by resource",
            m.log_lines_matched.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "log_streams",
            "Containers' logs being followed for log handlers, by resource",
            m.log_streams.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "conversions",
            "Objects of conversion reviews, by resource and outcome (success, failed)",
            m.conversions.clone(),
        );
        register(
            &mut registry,
            &mut described,
            "conversion_duration_seconds",
            "How long conversion reviews took, by resource",
            m.conversion_duration.clone(),
        );
        let metrics = Metrics {
            registry,
            ..metrics
        };
        (metrics, described)
    }

    /// Every metric's `# HELP` and `# TYPE` lines, as the exposition writes them once the
    /// metric has values (the documentation's reference is made from them).
    pub fn described() -> String {
        Metrics::with_descriptions().1
    }

    /// The exposition, in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    /// A handler's call has ended: how, and how long it took.
    pub fn handler_call(
        &self,
        labels: HandlerLabels,
        outcome: CallOutcome,
        retry: bool,
        took: Duration,
    ) {
        self.handler_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if retry {
            self.handler_retries.get_or_create(&labels).inc();
        }
        let HandlerLabels {
            resource,
            handler,
            kind,
        } = labels;
        let outcome = outcome.label().to_owned();
        let labels = OutcomeLabels {
            resource,
            handler,
            kind,
            outcome,
        };
        let counter = if labels.kind == "admission" {
            &self.admission_requests
        } else {
            &self.handler_calls
        };
        counter.get_or_create(&labels).inc();
    }

    /// Objects known to a resource's dispatchers, by so many more (or fewer).
    pub fn objects_watched(&self, resource: &str, delta: i64) {
        (self
            .objects_watched
            .get_or_create(&resource_labels(resource)))
        .inc_by(delta);
    }

    /// Events waiting in a resource's queues, by so many more (or fewer).
    pub fn events_queued(&self, resource: &str, delta: i64) {
        (self.events_queued.get_or_create(&resource_labels(resource))).inc_by(delta);
    }

    /// Events of a resource collapsed into a later state of their object.
    pub fn events_collapsed(&self, resource: &str, count: u64) {
        (self
            .events_collapsed
            .get_or_create(&resource_labels(resource)))
        .inc_by(count);
    }

    /// A resource's watch stream restarted, and why.
    pub fn watch_restart(&self, resource: &str, cause: &str) {
        (self
            .watch_restarts
            .get_or_create(&cause_labels(resource, cause)))
        .inc();
    }

    /// A resource was listed again, and why.
    pub fn relist(&self, resource: &str, cause: &str) {
        (self.relists.get_or_create(&cause_labels(resource, cause))).inc();
    }

    /// An API request answered (or failed: `code` says how), and how long it took.
    pub fn api_request(&self, verb: &str, code: &str, took: Duration) {
        let labels = RequestLabels {
            verb: verb.to_owned(),
            code: code.to_owned(),
        };
        self.api_requests.get_or_create(&labels).inc();
        let labels = VerbLabels {
            verb: verb.to_owned(),
        };
        (self.api_duration.get_or_create(&labels)).observe(took.as_secs_f64());
    }

    /// A resource's daemons or timers running, by so many more (or fewer).
    pub fn spawned(&self, resource: &str, timer: bool, delta: i64) {
        let family = if timer {
            &self.timers_running
        } else {
            &self.daemons_running
        };
        family
            .get_or_create(&resource_labels(resource))
            .inc_by(delta);
    }

    /// How late a timer's call came after its time.
    pub fn timer_lateness(&self, labels: HandlerLabels, late: Duration) {
        (self.timer_lateness.get_or_create(&labels)).observe(late.as_secs_f64());
    }

    /// The counters of a followed log of this resource's objects.
    pub fn log_counters(&self, resource: &str) -> LogCounters {
        let labels = resource_labels(resource);
        LogCounters {
            read: self.log_lines_read.get_or_create(&labels).clone(),
            matched: self.log_lines_matched.get_or_create(&labels).clone(),
        }
    }

    /// A conversion review answered: its objects, converted or not, and how long it took.
    pub fn conversion(&self, resource: &str, success: bool, objects: u64, took: Duration) {
        let labels = ConversionLabels {
            resource: resource.to_owned(),
            outcome: if success { "success" } else { "failed" }.to_owned(),
        };
        self.conversions.get_or_create(&labels).inc_by(objects);
        let resource = ResourceLabels {
            resource: resource.to_owned(),
        };
        (self.conversion_duration.get_or_create(&resource)).observe(took.as_secs_f64());
    }

    /// Containers' logs being followed for a resource's log handlers, by so many more (or fewer).
    pub fn log_streams(&self, resource: &str, delta: i64) {
        (self.log_streams.get_or_create(&resource_labels(resource))).inc_by(delta);
    }

    /// Spans taken by the collector.
    pub fn spans_exported(&self, count: u64) {
        self.spans_exported.inc_by(count);
    }

    /// Spans dropped, and why: `queue_full` or `export_failed`.
    pub fn spans_dropped(&self, reason: &str, count: u64) {
        let labels = ReasonLabels {
            reason: reason.to_owned(),
        };
        self.spans_dropped.get_or_create(&labels).inc_by(count);
    }

    /// Whether the operator is paused (peering, leader election, sharding).
    pub fn set_paused(&self, paused: bool) {
        self.paused.set(i64::from(paused));
    }
}

fn resource_labels(resource: &str) -> ResourceLabels {
    ResourceLabels {
        resource: resource.to_owned(),
    }
}

fn cause_labels(resource: &str, cause: &str) -> CauseLabels {
    CauseLabels {
        resource: resource.to_owned(),
        cause: cause.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_names_follow_the_conventions() {
        let metrics = Metrics::new();
        let labels = HandlerLabels {
            resource: "kopfexamples.v1.kopf.dev".into(),
            handler: "create_fn".into(),
            kind: "changing".into(),
        };
        metrics.handler_call(
            labels.clone(),
            CallOutcome::Success,
            false,
            Duration::from_millis(3),
        );
        metrics.handler_call(labels, CallOutcome::Temporary, true, Duration::from_secs(1));
        metrics.api_request("PATCH", "2xx", Duration::from_millis(5));
        metrics.set_paused(true);
        let counters = metrics.log_counters("pods.v1");
        counters.read.inc_by(3);
        counters.matched.inc();
        metrics.log_streams("pods.v1", 1);
        let text = metrics.encode();
        assert!(
            text.contains("kopf_log_lines_read_total{resource=\"pods.v1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("kopf_log_lines_matched_total{resource=\"pods.v1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kopf_log_streams{resource=\"pods.v1\"} 1"),
            "{text}"
        );
        assert!(text.contains(
            "kopf_handler_calls_total{resource=\"kopfexamples.v1.kopf.dev\",handler=\"create_fn\",kind=\"changing\",outcome=\"success\"} 1"
        ), "{text}");
        assert!(text.contains("kopf_handler_retries_total{"), "{text}");
        assert!(
            text.contains("# TYPE kopf_handler_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("kopf_api_requests_total{verb=\"PATCH\",code=\"2xx\"} 1"),
            "{text}"
        );
        assert!(text.contains("kopf_paused 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        // The documentation's description of each family is the exposition's own.
        let described = Metrics::described();
        for line in text
            .lines()
            .filter(|line| line.starts_with("# ") && line != &"# EOF")
        {
            assert!(
                described.contains(&format!("{line}\n")),
                "{line}\n{described}"
            );
        }
        assert_eq!(described.matches("# TYPE ").count(), 22, "{described}");
    }
}
