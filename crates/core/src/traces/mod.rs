//! OpenTelemetry's traces of the engine (opt-in: `kopf run --traces URL`,
//! `settings.tracing.endpoint`, or `$OTEL_EXPORTER_OTLP_ENDPOINT`): a span per processed
//! event of an object, per handler call (daemons' and timers' calls are traces of their own),
//! per API request made within them, per admission and conversion review. Nothing is made
//! unless enabled: each point asks `get()` first, one atomic load when off.
//!
//! Spans nest through OpenTelemetry's `Context`: the event's span is current while its cycle
//! runs (`within`), so the spans of the handlers and of the requests made meanwhile are its
//! children. A handler's span goes to Python with its call (a W3C `traceparent`), where the
//! handler's own spans nest under it.
//!
//! Uses: `util`, `metrics`.

pub mod config;
pub mod exporting;

use futures::future::Either;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    FutureExt, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _, WithContext,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

static ENABLED: AtomicBool = AtomicBool::new(false);
static CURRENT: RwLock<Option<Arc<Tracing>>> = RwLock::new(None);

/// The operator's tracer, while traces are on.
#[derive(Debug)]
pub struct Tracing {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
}

/// The tracer, if traces are on in this process.
pub fn get() -> Option<Arc<Tracing>> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    CURRENT.read().expect("not poisoned").clone()
}

/// Whether traces are on (cheaper than `get()`: for what only records a time for them).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Traces on, with this provider, until the returned guard is dropped (the operator's run).
pub fn install(provider: SdkTracerProvider) -> Installed {
    let tracing = Arc::new(Tracing {
        tracer: provider.tracer("kopf"),
        provider,
    });
    *CURRENT.write().expect("not poisoned") = Some(tracing.clone());
    ENABLED.store(true, Ordering::Relaxed);
    Installed(tracing)
}

/// Traces stay on while this lives; dropped, no more spans are made, and the provider is shut
/// down (its queue closes: the exporting task sends what is left and ends).
#[derive(Debug)]
pub struct Installed(Arc<Tracing>);

impl Drop for Installed {
    fn drop(&mut self) {
        let mut current = CURRENT.write().expect("not poisoned");
        if current.as_ref().is_some_and(|t| Arc::ptr_eq(t, &self.0)) {
            ENABLED.store(false, Ordering::Relaxed);
            *current = None;
        }
        drop(current);
        let _ = self.0.provider.shutdown();
    }
}

impl Tracing {
    /// A span started under `parent` (the current context if none): the context that has it.
    pub fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
        parent: Option<&Context>,
    ) -> Context {
        let current;
        let parent = match parent {
            Some(parent) => parent,
            None => {
                current = Context::current();
                &current
            }
        };
        let span = (self.tracer.span_builder(name))
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        parent.with_span(span)
    }
}

/// Whether a span is current (requests get spans only within an event, a call or a review).
pub fn in_span() -> bool {
    Context::map_current(|cx| cx.has_active_span())
}

/// The future, with this context current whenever it runs (as is, if none).
pub fn within<F: Future>(cx: Option<&Context>, future: F) -> Either<WithContext<F>, F> {
    match cx {
        Some(cx) => Either::Left(future.with_context(cx.clone())),
        None => Either::Right(future),
    }
}

/// Add attributes to the current span (if any is recording).
pub fn note(attributes: impl FnOnce() -> Vec<KeyValue>) {
    if ENABLED.load(Ordering::Relaxed) {
        Context::map_current(|cx| {
            let span = cx.span();
            if span.is_recording() {
                span.set_attributes(attributes());
            }
        });
    }
}

/// End the context's span: failed with this message, if given (the status, and an
/// `exception` event with its type, as OpenTelemetry's conventions say).
pub fn end(cx: &Context, error: Option<(&str, &str)>) {
    let span = cx.span();
    if let Some((kind, message)) = error {
        span.add_event(
            "exception",
            vec![
                KeyValue::new("exception.type", kind.to_owned()),
                KeyValue::new("exception.message", message.to_owned()),
            ],
        );
        span.set_status(Status::error(message.to_owned()));
    }
    span.end();
}

/// The context's span as a W3C `traceparent` (for the handler's side), if it is valid.
pub fn traceparent(cx: &Context) -> Option<String> {
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The caller's context from its request's headers (`traceparent`, `tracestate`), if any: the
/// parent of a review's span.
pub fn remote_parent<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Context {
    let carrier: HashMap<String, String> = (headers.into_iter())
        .filter(|(name, _)| {
            name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate")
        })
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    TraceContextPropagator::new().extract(&carrier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trip() {
        let parent = remote_parent([(
            "TraceParent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )]);
        assert!(parent.span().span_context().is_remote());
        assert_eq!(
            traceparent(&parent).as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(
            traceparent(&remote_parent([("traceparent", "garbage")])),
            None
        );
    }
}
