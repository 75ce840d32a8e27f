//! Whether and where traces go: `settings.tracing` (`kopf run --traces URL`,
//! `--traces-ratio`) first, then OpenTelemetry's standard environment variables, as every
//! OTLP exporter reads them. A variable's value that this exporter cannot honour (gRPC, JSON,
//! compression, another exporter or sampler) is refused at start with its name, never taken
//! and ignored.

use std::time::Duration;

/// Why the tracing settings cannot be used: the variable or option and what is wrong.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// How spans are sampled: OpenTelemetry's samplers by their `OTEL_TRACES_SAMPLER` names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Every trace (`always_on`).
    Always,
    /// None (`always_off`).
    Never,
    /// This fraction of the traces, by their ids (`traceidratio`).
    Ratio(f64),
    /// As the parent decided (a review's caller), else as the inner one for roots (`parentbased_*`).
    ParentBased(ParentlessSampling),
}

/// `Sampling::ParentBased`'s decision for spans without a parent (most of the engine's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentlessSampling {
    /// `parentbased_always_on`: every root.
    Always,
    /// `parentbased_always_off`: no root.
    Never,
    /// `parentbased_traceidratio`: this fraction of the roots.
    Ratio(f64),
}

/// The exporter's settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The URL the spans are posted to (`…/v1/traces` of a base endpoint).
    pub endpoint: String,
    /// Extra HTTP headers of every export (`OTEL_EXPORTER_OTLP_HEADERS`: e.g. an API key).
    pub headers: Vec<(String, String)>,
    /// How long one export may take (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s).
    pub timeout: Duration,
    /// The CA certificate file that verifies the collector (else the system's roots).
    pub certificate: Option<String>,
    /// The client certificate file, for a collector that asks for one.
    pub client_certificate: Option<String>,
    /// The client certificate's key file.
    pub client_key: Option<String>,
    /// Which traces are kept.
    pub sampling: Sampling,
    /// How many finished spans may wait for export; more are dropped (and counted).
    pub queue_size: usize,
    /// How many spans go in one export at most.
    pub batch_size: usize,
    /// How long finished spans wait to be exported with others.
    pub schedule_delay: Duration,
    /// Whether `service.name` is given by the environment (else the engine names it).
    pub service_named: bool,
}

/// The settings from the operator's options (`endpoint`, `ratio`) and the environment (`env`
/// reads one variable); none if traces are off (the default: no endpoint anywhere).
pub fn resolve(
    endpoint: Option<&str>,
    ratio: Option<f64>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Config>, ConfigError> {
    let var = |name: &str| {
        env(name)
            .map(|value| value.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    // The signal's own variable wins over the general one, as every OTLP exporter reads them.
    let otlp = |name: &str| {
        (var(&format!("OTEL_EXPORTER_OTLP_TRACES_{name}")))
            .map(|value| (format!("OTEL_EXPORTER_OTLP_TRACES_{name}"), value))
            .or_else(|| {
                var(&format!("OTEL_EXPORTER_OTLP_{name}"))
                    .map(|v| (format!("OTEL_EXPORTER_OTLP_{name}"), v))
            })
    };
    let given = endpoint.map(str::trim).filter(|e| !e.is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let exporter = var("OTEL_TRACES_EXPORTER").map(|v| v.to_ascii_lowercase());
    let refused_by = match (disabled, exporter.as_deref()) {
        (true, _) => Some("OTEL_SDK_DISABLED=true"),
        (_, Some("none")) => Some("OTEL_TRACES_EXPORTER=none"),
        (_, None | Some("otlp")) => None,
        (_, Some(other)) => {
            return Err(ConfigError(format!(
            "OTEL_TRACES_EXPORTER={other} is not supported: the engine exports traces with OTLP \
                 only (otlp, or none for no traces)."
        )))
        }
    };
    let url = match given {
        Some(base) => Some(signal_url(base)),
        None => match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => Some(url),
            None => var("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| signal_url(&base)),
        },
    };
    let (Some(url), None) = (&url, refused_by) else {
        return match (given, refused_by) {
            (Some(_), Some(why)) => Err(ConfigError(format!(
                "Traces are asked for (--traces / settings.tracing.endpoint), but {why} turns them off: \
                 remove one of the two."
            ))),
            _ => Ok(None),
        };
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ConfigError(format!(
            "The traces' endpoint {url:?} is not an http:// or https:// URL."
        )));
    }
    if let Some((name, protocol)) = otlp("PROTOCOL") {
        if protocol != "http/protobuf" {
            return Err(ConfigError(format!(
                "{name}={protocol} is not supported: the engine exports traces as http/protobuf \
                 (the collector's OTLP/HTTP port, usually 4318)."
            )));
        }
    }
    if let Some((name, compression)) = otlp("COMPRESSION") {
        if compression != "none" {
            return Err(ConfigError(format!(
                "{name}={compression} is not supported: the engine sends traces uncompressed (none)."
            )));
        }
    }
    let mut headers = var("OTEL_EXPORTER_OTLP_HEADERS")
        .map(|text| parse_headers("OTEL_EXPORTER_OTLP_HEADERS", &text))
        .transpose()?
        .unwrap_or_default();
    if let Some(text) = var("OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
        for (key, value) in parse_headers("OTEL_EXPORTER_OTLP_TRACES_HEADERS", &text)? {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
            headers.push((key, value));
        }
    }
    let timeout = match otlp("TIMEOUT") {
        Some((name, text)) => Duration::from_millis(number(&name, &text)?),
        None => Duration::from_secs(10),
    };
    let queue_size = count(
        "OTEL_BSP_MAX_QUEUE_SIZE",
        var("OTEL_BSP_MAX_QUEUE_SIZE"),
        2048,
    )?;
    let batch_size = count(
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        var("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
        512,
    )?;
    if batch_size > queue_size {
        return Err(ConfigError(format!(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE ({batch_size}) is larger than OTEL_BSP_MAX_QUEUE_SIZE ({queue_size})."
        )));
    }
    let schedule_delay = match var("OTEL_BSP_SCHEDULE_DELAY") {
        Some(text) => Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", &text)?),
        None => Duration::from_secs(5),
    };
    let service_named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
            a.split(',')
                .any(|kv| kv.trim_start().starts_with("service.name="))
        });
    Ok(Some(Config {
        endpoint: url.clone(),
        headers,
        timeout,
        certificate: otlp("CERTIFICATE").map(|(_, path)| path),
        client_certificate: otlp("CLIENT_CERTIFICATE").map(|(_, path)| path),
        client_key: otlp("CLIENT_KEY").map(|(_, path)| path),
        sampling: sampling(
            ratio,
            var("OTEL_TRACES_SAMPLER"),
            var("OTEL_TRACES_SAMPLER_ARG"),
        )?,
        queue_size,
        batch_size,
        schedule_delay,
        service_named,
    }))
}

/// A base endpoint's URL for traces, as OTLP/HTTP exporters make it.
fn signal_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// The sampler: `--traces-ratio` (parent-based) if given, else `OTEL_TRACES_SAMPLER`'s, else
/// the specification's default (`parentbased_always_on`).
fn sampling(
    ratio: Option<f64>,
    name: Option<String>,
    arg: Option<String>,
) -> Result<Sampling, ConfigError> {
    if let Some(ratio) = ratio {
        return Ok(Sampling::ParentBased(ParentlessSampling::Ratio(fraction(
            "--traces-ratio",
            ratio,
        )?)));
    }
    let ratio = || match &arg {
        None => Ok(1.0),
        Some(text) => {
            let value = text.parse::<f64>().map_err(|_| {
                ConfigError(format!(
                    "OTEL_TRACES_SAMPLER_ARG={text} is not a number between 0 and 1."
                ))
            })?;
            fraction("OTEL_TRACES_SAMPLER_ARG", value)
        }
    };
    Ok(match name.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("parentbased_always_on") => Sampling::ParentBased(ParentlessSampling::Always),
        Some("parentbased_always_off") => Sampling::ParentBased(ParentlessSampling::Never),
        Some("parentbased_traceidratio") => Sampling::ParentBased(ParentlessSampling::Ratio(ratio()?)),
        Some("always_on") => Sampling::Always,
        Some("always_off") => Sampling::Never,
        Some("traceidratio") => Sampling::Ratio(ratio()?),
        Some(other) => {
            return Err(ConfigError(format!(
                "OTEL_TRACES_SAMPLER={other} is not supported: use always_on, always_off, traceidratio, \
                 parentbased_always_on, parentbased_always_off or parentbased_traceidratio."
            )))
        }
    })
}

fn fraction(name: &str, value: f64) -> Result<f64, ConfigError> {
    match (0.0..=1.0).contains(&value) {
        true => Ok(value),
        false => Err(ConfigError(format!(
            "{name} is {value}: a ratio is between 0 and 1."
        ))),
    }
}

fn number(name: &str, text: &str) -> Result<u64, ConfigError> {
    text.parse::<u64>().map_err(|_| {
        ConfigError(format!(
            "{name}={text} is not a whole number of milliseconds."
        ))
    })
}

fn count(name: &str, text: Option<String>, default: usize) -> Result<usize, ConfigError> {
    match text {
        None => Ok(default),
        Some(text) => match text.parse::<usize>() {
            Ok(value) if value > 0 => Ok(value),
            _ => Err(ConfigError(format!(
                "{name}={text} is not a positive whole number."
            ))),
        },
    }
}

/// `key1=value1,key2=value2`, the values percent-encoded (W3C Baggage's format, as the
/// specification says for `OTEL_EXPORTER_OTLP_HEADERS`).
fn parse_headers(name: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            ConfigError(format!(
                "{name}: {:?} is not key=value.",
                pair.split('=').next().unwrap_or_default()
            ))
        })?;
        let value = percent_encoding::percent_decode_str(value.trim())
            .decode_utf8()
            .map_err(|_| {
                ConfigError(format!(
                    "{name}: the value of {key:?} is not UTF-8 once decoded."
                ))
            })?;
        let header = (key.trim().to_owned(), value.into_owned());
        let valid = http::HeaderName::from_bytes(header.0.as_bytes()).is_ok()
            && http::HeaderValue::from_str(&header.1).is_ok();
        if !valid {
            // (The value is not shown: headers carry API keys.)
            return Err(ConfigError(format!(
                "{name}: {:?} is not a valid HTTP header.",
                header.0
            )));
        }
        headers.push(header);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(
        vars: &[(&str, &str)],
        endpoint: Option<&str>,
        ratio: Option<f64>,
    ) -> Result<Option<Config>, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(endpoint, ratio, &|name| vars.get(name).cloned())
    }

    #[test]
    fn off_without_an_endpoint() {
        assert_eq!(
            with(&[("OTEL_TRACES_SAMPLER", "always_on")], None, None),
            Ok(None)
        );
    }

    #[test]
    fn the_option_wins_and_gets_the_signals_path() {
        let config = with(
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b/x")],
            Some("http://a:4318/"),
            None,
        );
        assert_eq!(config.unwrap().unwrap().endpoint, "http://a:4318/v1/traces");
    }

    #[test]
    fn the_signals_variable_is_taken_as_it_is_and_the_general_one_gets_the_path() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b/x"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
        ];
        assert_eq!(
            with(&vars, None, None).unwrap().unwrap().endpoint,
            "http://b/x"
        );
        let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")];
        assert_eq!(
            with(&vars, None, None).unwrap().unwrap().endpoint,
            "https://c:4318/v1/traces"
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c");
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
            ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5s"),
        ] {
            let error = with(&[base, (name, value)], None, None).unwrap_err();
            assert!(error.0.contains(name), "{error}");
        }
        let error = with(&[], Some("collector:4318"), None).unwrap_err();
        assert!(
            error.0.contains("not an http:// or https:// URL"),
            "{error}"
        );
        let error = with(&[], Some("http://c"), Some(1.5)).unwrap_err();
        assert!(error.0.contains("--traces-ratio"), "{error}");
    }

    #[test]
    fn turned_off_by_the_environment_unless_asked_for_explicitly() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(with(&vars, None, None), Ok(None));
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ];
        assert_eq!(with(&vars, None, None), Ok(None));
        let error = with(&[("OTEL_SDK_DISABLED", "true")], Some("http://c"), None).unwrap_err();
        assert!(error.0.contains("OTEL_SDK_DISABLED=true"), "{error}");
    }

    #[test]
    fn samplers_by_name_and_the_ratio_option_is_parent_based() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c");
        let config = with(&[base], None, None).unwrap().unwrap();
        assert_eq!(
            config.sampling,
            Sampling::ParentBased(ParentlessSampling::Always)
        );
        let vars = [
            base,
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ];
        assert_eq!(
            with(&vars, None, None).unwrap().unwrap().sampling,
            Sampling::Ratio(0.25)
        );
        let config = with(&vars, None, Some(0.5)).unwrap().unwrap();
        assert_eq!(
            config.sampling,
            Sampling::ParentBased(ParentlessSampling::Ratio(0.5))
        );
    }

    #[test]
    fn headers_are_decoded_and_the_signals_own_win() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x-team=core"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "API-KEY=secret"),
        ];
        let config = with(&vars, None, None).unwrap().unwrap();
        assert_eq!(
            config.headers,
            vec![
                ("x-team".into(), "core".into()),
                ("API-KEY".into(), "secret".into())
            ]
        );
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue"),
        ];
        assert!(with(&vars, None, None)
            .unwrap_err()
            .0
            .contains("not key=value"));
    }
}
