//! Finished spans on their way to the collector: a bounded queue (the SDK's span processor,
//! `Queue`) that a task of the operator's runtime (`Queue::run`) empties in batches, each
//! encoded as OTLP's `ExportTraceServiceRequest` (the official definitions) and handed to an
//! `Export` (the operator's HTTP client). A slow or absent collector never blocks a span's
//! end nor grows the queue: what does not fit, or what the collector does not take, is
//! dropped and counted (`kopf_trace_spans_dropped_total`), and said once per failing spell.

use futures::future::BoxFuture;
use opentelemetry::Context;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use prost::Message;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::util::logging::ENGINE;

/// Posts one encoded export request (protobuf) to the collector: an error's text if it was not
/// taken (unreachable, refused, timed out).
pub trait Export: Send + Sync + 'static {
    /// Post this body; `Err` with what went wrong.
    fn export(&self, body: Vec<u8>) -> BoxFuture<'static, Result<(), String>>;
    /// Where the spans go, for the log lines (no credentials in it).
    fn target(&self) -> &str;
}

/// The span processor: finished spans wait here for `run` to export them.
#[derive(Debug, Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    spans: Mutex<VecDeque<SpanData>>,
    capacity: usize,
    batch_size: usize,
    /// A batch is full, or the queue closes: `run` exports now.
    news: tokio::sync::Notify,
    closed: AtomicBool,
    /// Spans dropped since the last report: the queue was full.
    overflowed: AtomicU64,
}

impl Queue {
    /// A queue of at most `capacity` spans, exported `batch_size` at a time at most.
    pub fn new(capacity: usize, batch_size: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                spans: Mutex::new(VecDeque::new()),
                capacity,
                batch_size,
                news: tokio::sync::Notify::new(),
                closed: AtomicBool::new(false),
                overflowed: AtomicU64::new(0),
            }),
        }
    }

    /// Export until the queue is closed (`shutdown`), then what is left, each batch within
    /// `timeout`: every `delay`, or at once when a batch is full.
    pub async fn run(
        self,
        export: Arc<dyn Export>,
        resource: Resource,
        delay: Duration,
        timeout: Duration,
    ) {
        let resource = ResourceAttributesWithSchema::from(&resource);
        let mut failing = false;
        loop {
            let closed = self.inner.closed.load(Ordering::Acquire);
            if !closed && self.len() < self.inner.batch_size {
                let _ = tokio::time::timeout(delay, self.inner.news.notified()).await;
            }
            self.report_overflow();
            loop {
                let batch = self.take();
                if batch.is_empty() {
                    break;
                }
                let count = batch.len() as u64;
                let request = ExportTraceServiceRequest {
                    resource_spans: group_spans_by_resource_and_scope(batch, &resource),
                };
                let sent =
                    tokio::time::timeout(timeout, export.export(request.encode_to_vec())).await;
                let error = match sent {
                    Ok(Ok(())) => None,
                    Ok(Err(error)) => Some(error),
                    Err(_) => Some(format!("no answer in {}s", timeout.as_secs_f64())),
                };
                match error {
                    None => {
                        if let Some(metrics) = crate::metrics::get() {
                            metrics.spans_exported(count);
                        }
                        if std::mem::take(&mut failing) {
                            tracing::info!(target: ENGINE, "Traces are exported to {} again.", export.target());
                        }
                    }
                    Some(error) => {
                        if let Some(metrics) = crate::metrics::get() {
                            metrics.spans_dropped("export_failed", count);
                        }
                        if !std::mem::replace(&mut failing, true) {
                            tracing::warn!(target: ENGINE,
                                "Traces cannot be exported to {}; their spans are dropped until it answers: {error}",
                                export.target());
                        }
                        break; // the rest waits for the next turn
                    }
                }
                if self.len() < self.inner.batch_size {
                    break;
                }
            }
            if closed {
                self.report_overflow();
                return;
            }
        }
    }

    fn len(&self) -> usize {
        self.inner.spans.lock().expect("not poisoned").len()
    }

    fn take(&self) -> Vec<SpanData> {
        let mut spans = self.inner.spans.lock().expect("not poisoned");
        let count = spans.len().min(self.inner.batch_size);
        spans.drain(..count).collect()
    }

    fn report_overflow(&self) {
        let dropped = self.inner.overflowed.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            if let Some(metrics) = crate::metrics::get() {
                metrics.spans_dropped("queue_full", dropped);
            }
            tracing::warn!(target: ENGINE,
                "{dropped} spans were dropped: the traces' queue was full (OTEL_BSP_MAX_QUEUE_SIZE={}).",
                self.inner.capacity);
        }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let mut spans = self.inner.spans.lock().expect("not poisoned");
        if spans.len() >= self.inner.capacity || self.inner.closed.load(Ordering::Relaxed) {
            drop(spans);
            self.inner.overflowed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        spans.push_back(span);
        let full = spans.len() >= self.inner.batch_size;
        drop(spans);
        if full {
            self.inner.news.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.news.notify_one();
        Ok(())
    }

    /// Closes the queue: `run` exports what is in it and returns (the operator waits for that).
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.news.notify_one();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Span as _, Tracer, TracerProvider};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// Records what it is given; fails while `failing` is set.
    #[derive(Default)]
    struct Collector {
        requests: Mutex<Vec<ExportTraceServiceRequest>>,
        failing: AtomicBool,
    }

    impl Export for Arc<Collector> {
        fn export(&self, body: Vec<u8>) -> BoxFuture<'static, Result<(), String>> {
            let this = self.clone();
            Box::pin(async move {
                if this.failing.load(Ordering::Relaxed) {
                    return Err("connection refused".into());
                }
                let request =
                    ExportTraceServiceRequest::decode(&*body).map_err(|e| e.to_string())?;
                this.requests.lock().unwrap().push(request);
                Ok(())
            })
        }
        fn target(&self) -> &str {
            "the test's collector"
        }
    }

    fn names(collector: &Collector) -> Vec<String> {
        let requests = collector.requests.lock().unwrap();
        let spans = requests
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans);
        spans
            .flat_map(|s| &s.spans)
            .map(|s| s.name.clone())
            .collect()
    }

    /// A queue of `capacity` in batches of 2, exported to `collector` every 5 s: its provider's
    /// tracer, and the exporting task.
    fn exporting(
        capacity: usize,
        collector: &Arc<Collector>,
    ) -> (Queue, SdkTracerProvider, tokio::task::JoinHandle<()>) {
        let queue = Queue::new(capacity, 2);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue.clone())
            .build();
        let export: Arc<dyn Export> = Arc::new(collector.clone());
        let running = crate::util::tasks::spawn(queue.clone().run(
            export,
            Resource::builder_empty().build(),
            Duration::from_secs(5),
            Duration::from_secs(1),
        ));
        (queue, provider, running)
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_goes_at_once_the_others_after_the_delay_or_at_shutdown() {
        let collector = Arc::new(Collector::default());
        let (_, provider, running) = exporting(10, &collector);
        let tracer = provider.tracer("test");
        for name in ["a", "b"] {
            tracer.start(name).end();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(names(&collector), ["a", "b"]); // a full batch: at once
        tracer.start("c").end();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(names(&collector), ["a", "b"]); // alone: it waits for the delay
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(names(&collector), ["a", "b", "c"]);
        tracer.start("d").end();
        provider.shutdown().unwrap(); // what is left goes at the end
        running.await.unwrap();
        assert_eq!(names(&collector), ["a", "b", "c", "d"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_and_a_failing_collector_loses_only_its_batches() {
        let collector = Arc::new(Collector {
            failing: AtomicBool::new(true),
            ..Default::default()
        });
        let (queue, provider, running) = exporting(2, &collector);
        let tracer = provider.tracer("test");
        // The queue holds two; the batch of two goes at once (and fails), so two more fit.
        for name in ["a", "b"] {
            tracer.start(name).end();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        collector.failing.store(false, Ordering::Relaxed);
        for name in ["c", "d", "e"] {
            tracer.start(name).end();
        }
        assert_eq!(queue.inner.overflowed.load(Ordering::Relaxed), 1); // "e": no room
        provider.shutdown().unwrap();
        running.await.unwrap();
        assert_eq!(names(&collector), ["c", "d"]);
    }
}
