//! The operator's traces, if asked for (`settings.tracing`, the `OTEL_*` variables): the SDK's
//! tracer provider with the configured sampler and the bounded queue (`traces::exporting`),
//! and the task that posts the queue's batches to the collector through the API client's HTTP
//! stack (its TLS, proxies and headers), for as long as the operator runs.

use crate::client::authorization::Authorization;
use crate::client::connection_info::ConnectionInfo;
use crate::client::transport::Transport;
use crate::settings::TracingSettings;
use crate::traces::config::{self, Config, ParentlessSampling, Sampling};
use crate::traces::exporting::{Export, Queue};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

/// Traces on, while this lives; `stop` sends what is left.
pub(super) struct Traces {
    installed: crate::traces::Installed,
    exporting: tokio::task::JoinHandle<()>,
    timeout: Duration,
}

impl Traces {
    /// Start the traces if they are asked for: none if not; what is wrong if they cannot be as asked.
    pub(super) fn start(settings: &TracingSettings) -> Result<Option<Self>, String> {
        let env = |name: &str| std::env::var(name).ok();
        let resolved = config::resolve(settings.endpoint.as_deref(), settings.ratio, &env);
        let Some(config) = resolved.map_err(|error| error.0)? else {
            return Ok(None);
        };
        let collector = Collector::new(&config)?;
        let target = collector.target.clone();
        let queue = Queue::new(config.queue_size, config.batch_size);
        let mut resource = Resource::builder();
        if !config.service_named {
            resource = resource.with_service_name("kopf");
        }
        let resource = resource
            .with_attribute(KeyValue::new("telemetry.distro.name", "kopf-rs"))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler(config.sampling))
            .with_span_processor(queue.clone())
            .with_resource(resource.clone())
            .build();
        let exporting = crate::util::tasks::spawn(queue.run(
            Arc::new(collector),
            resource,
            config.schedule_delay,
            config.timeout,
        ));
        tracing::info!(target: crate::util::logging::ENGINE, "Traces are exported to {target}.");
        Ok(Some(Self {
            installed: crate::traces::install(provider),
            exporting,
            timeout: config.timeout,
        }))
    }

    /// No more spans; the finished ones are sent (within the export's timeout).
    pub(super) async fn stop(self) {
        drop(self.installed);
        let mut exporting = self.exporting;
        if tokio::time::timeout(self.timeout, &mut exporting)
            .await
            .is_err()
        {
            exporting.abort();
        }
    }
}

fn sampler(sampling: Sampling) -> Sampler {
    match sampling {
        Sampling::Always => Sampler::AlwaysOn,
        Sampling::Never => Sampler::AlwaysOff,
        Sampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        Sampling::ParentBased(roots) => Sampler::ParentBased(Box::new(match roots {
            ParentlessSampling::Always => Sampler::AlwaysOn,
            ParentlessSampling::Never => Sampler::AlwaysOff,
            ParentlessSampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        })),
    }
}

/// The collector, as the API client's transport reaches a server: its URL's origin as the
/// server, the path for every post.
struct Collector {
    transport: Transport,
    path: String,
    /// The URL without credentials or query, for the log lines.
    target: String,
}

impl Collector {
    fn new(config: &Config) -> Result<Self, String> {
        let url: http::Uri = (config.endpoint.parse()).map_err(|error| {
            format!(
                "The traces' endpoint {:?} is not a URL: {error}",
                config.endpoint
            )
        })?;
        let (Some(scheme), Some(authority)) = (url.scheme_str(), url.authority()) else {
            return Err(format!(
                "The traces' endpoint {:?} has no host.",
                config.endpoint
            ));
        };
        let host = authority.as_str().rsplit('@').next().unwrap_or_default();
        let origin: http::Uri = (format!("{scheme}://{host}").parse())
            .map_err(|error| format!("The traces' endpoint {:?}: {error}", config.endpoint))?;
        let path = url.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let mut kube_config = kube::Config::new(origin);
        for (name, value) in &config.headers {
            let header = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            );
            if let (Ok(name), Ok(value)) = header {
                kube_config.headers.push((name, value));
            }
        }
        let info = ConnectionInfo {
            ca_path: config.certificate.clone(),
            certificate_path: config.client_certificate.clone(),
            private_key_path: config.client_key.clone(),
            ..Default::default()
        };
        let tls = crate::client::tls::client_config(&info)
            .map_err(|error| format!("The traces' collector's TLS: {error}"))?;
        let transport =
            Transport::new(&kube_config, tls, Authorization::None, Some(config.timeout))
                .map_err(|error| format!("The traces' collector {host}: {error}"))?;
        Ok(Self {
            transport,
            target: format!("{scheme}://{host}{}", url.path()),
            path,
        })
    }
}

impl Export for Collector {
    fn export(&self, body: Vec<u8>) -> BoxFuture<'static, Result<(), String>> {
        let request = http::Request::post(&self.path)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body);
        let transport = self.transport.clone();
        Box::pin(async move {
            let request = request.map_err(|error| error.to_string())?;
            let response = (transport.send(request).await)
                .map_err(|error| crate::util::errors::chain(&error))?;
            // Read to its end, so the connection is kept for the next batch.
            let _ = response.into_body().collect().await;
            Ok(())
        })
    }

    fn target(&self) -> &str {
        &self.target
    }
}
