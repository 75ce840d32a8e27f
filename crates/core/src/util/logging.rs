//! The core's log lines, as `tracing` events: an event's target is the name of the
//! Python logger it goes to (Kopf's logger names, which users filter and alert on), and
//! the lines about an object carry its reference as fields (`object_log!`). The binding
//! forwards them to Python's `logging`; Rust tests read them with [`Capture`]. Both are
//! sinks of the [`Lines`] subscriber.
//!
//! Events of other targets (the HTTP stack's own tracing) are not Kopf's lines: the
//! subscribers here ignore them.

use serde_json::Value;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as SpanRecord};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// Lines about one object (`[namespace/name] ...`).
pub const OBJECTS: &str = "kopf.objects";
/// Lines of the operator as a whole.
pub const ENGINE: &str = "kopf._core.engine";
/// Kopf's logger of the peering.
pub const PEERING: &str = "kopf._core.engines.peering";
/// Our logger of the Lease election (named as Kopf would).
pub const LEADERSHIP: &str = "kopf._core.engines.leadership";
/// Our logger of the sharding (named as Kopf would).
pub const SHARDING: &str = "kopf._core.engines.sharding";
/// Kopf's logger of the watch streams.
pub const WATCHING: &str = "kopf._cogs.clients.watching";
/// Kopf's logger of the admission webhooks.
pub const ADMISSION: &str = "kopf._core.engines.admission";

/// Every logger the core writes to.
pub const LOGGERS: &[&str] = &[
    OBJECTS, ENGINE, PEERING, LEADERSHIP, SHARDING, WATCHING, ADMISSION,
];

/// Which object a log line or an event is about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectRef {
    /// The object's `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace, if namespaced.
    pub namespace: Option<String>,
    /// Its name.
    pub name: Option<String>,
    /// Its uid.
    pub uid: Option<String>,
}

impl ObjectRef {
    /// The reference of this body.
    pub fn of(body: &Value) -> Self {
        let text =
            |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let meta = body.get("metadata").unwrap_or(&Value::Null);
        Self {
            api_version: text(body, "apiVersion").unwrap_or_default(),
            kind: text(body, "kind").unwrap_or_default(),
            namespace: text(meta, "namespace"),
            name: text(meta, "name"),
            uid: text(meta, "uid"),
        }
    }
}

/// A line about an object, to `kopf.objects`: `object_log!(Level::DEBUG, &object, "...")`.
/// The message is formatted only if the level is enabled. A local line (`object_log!(local =
/// true; ...)`, as Kopf's local object loggers log) is never posted as an Event.
#[macro_export]
macro_rules! object_log {
    (local = $local:expr; $level:expr, $object:expr, $($arg:tt)+) => {{
        let object: &$crate::util::logging::ObjectRef = $object;
        let local: bool = $local;
        ::tracing::event!(
            target: $crate::util::logging::OBJECTS,
            $level,
            k8s.api_version = object.api_version.as_str(),
            k8s.kind = object.kind.as_str(),
            k8s.namespace = object.namespace.as_deref(),
            k8s.name = object.name.as_deref(),
            k8s.uid = object.uid.as_deref(),
            k8s.local = local,
            "{}",
            format_args!($($arg)+)
        )
    }};
    ($level:expr, $object:expr, $($arg:tt)+) => {
        $crate::object_log!(local = false; $level, $object, $($arg)+)
    };
}

/// Python's number for a level (`logging.DEBUG` is 10, ...).
pub fn python_level(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 5,
        Level::DEBUG => 10,
        Level::INFO => 20,
        Level::WARN => 30,
        Level::ERROR => 40,
    }
}

/// One line, as Python's `logging` gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The logger's name, as Kopf names its loggers.
    pub logger: &'static str,
    /// The level.
    pub level: Level,
    /// The object it is about, if any (the `[namespace/name]` prefix, the Event).
    pub object: Option<ObjectRef>,
    /// Never posted as an Event (a local object logger's line).
    pub local: bool,
    /// The message.
    pub message: String,
}

impl Line {
    /// The line of an event of one of the core's loggers (`None` for other targets).
    pub fn of(event: &Event<'_>) -> Option<Self> {
        let logger = logger_of(event.metadata())?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let object = fields.has_object.then_some(fields.object);
        Some(Self {
            logger,
            level: *event.metadata().level(),
            object,
            local: fields.local,
            message: fields.message,
        })
    }
}

/// The core's logger that an event or a span belongs to, if any.
pub(crate) fn logger_of(metadata: &Metadata<'_>) -> Option<&'static str> {
    LOGGERS.iter().copied().find(|l| *l == metadata.target())
}

#[derive(Default)]
struct Fields {
    message: String,
    object: ObjectRef,
    has_object: bool,
    local: bool,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let value = value.to_owned();
        self.has_object |= field.name().starts_with("k8s.");
        match field.name() {
            "message" => self.message = value,
            "k8s.api_version" => self.object.api_version = value,
            "k8s.kind" => self.object.kind = value,
            "k8s.namespace" => self.object.namespace = Some(value),
            "k8s.name" => self.object.name = Some(value),
            "k8s.uid" => self.object.uid = Some(value),
            _ => {}
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "k8s.local" {
            self.local = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            // The message's `format_args!` prints as its text.
            self.message = format!("{value:?}");
        }
    }
}

/// Kopf's text formats of a line, as `kopf._logs.loggers` writes them to `kopf run`'s stream:
/// `full` (`[time] logger [LEVEL   ] message`, the logger's name and the level's padded and
/// cut as `%(name)-20.20s` and `%(levelname)-8.8s` do) or `plain` (the message alone); the
/// message after the object's `[namespace/name]` (or `[name]`) if prefixed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextFormat {
    /// `full`: with the time, logger and level.
    pub timed: bool,
    /// With the object's prefix.
    pub prefixed: bool,
}

impl TextFormat {
    /// The line with its newline; `asctime` as Python's (`2026-01-02 03:04:05,678`).
    pub fn format(&self, line: &Line, asctime: &str, levelname: &str) -> String {
        use std::fmt::Write;
        let mut text = String::with_capacity(64 + line.message.len());
        if self.timed {
            let _ = write!(
                text,
                "[{asctime}] {:<20.20} [{levelname:<8.8}] ",
                line.logger
            );
        }
        if let Some(object) = line.object.as_ref().filter(|_| self.prefixed) {
            let name = object.name.as_deref().unwrap_or_default();
            match object.namespace.as_deref().filter(|ns| !ns.is_empty()) {
                Some(namespace) => {
                    let _ = write!(text, "[{namespace}/{name}] ");
                }
                None => {
                    let _ = write!(text, "[{name}] ");
                }
            }
        }
        text.push_str(&line.message);
        text.push('\n');
        text
    }
}

/// Where the core's lines go: what a [`Lines`] subscriber asks of it.
pub trait Sink: Send + Sync + 'static {
    /// Would this logger keep a line at this level?
    fn enabled(&self, logger: &str, level: &Level) -> bool;
    /// Take one line.
    fn line(&self, line: Line);
}

/// A subscriber of the core's lines only (the HTTP stack's own events are not Kopf's lines),
/// passing them to its sink.
pub struct Lines<S>(pub S);

impl<S: Sink> Subscriber for Lines<S> {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if logger_of(metadata).is_some() {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        logger_of(metadata).is_some_and(|logger| self.0.enabled(logger, metadata.level()))
    }

    fn event(&self, event: &Event<'_>) {
        if let Some(line) = Line::of(event) {
            self.0.line(line);
        }
    }

    // The core logs no spans: these are never enabled.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &SpanRecord<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Keeps the core's lines in memory, for tests: `Lines(capture.clone())` is the subscriber.
#[derive(Clone, Default)]
pub struct Capture {
    lines: Arc<Mutex<Vec<Line>>>,
}

impl Capture {
    /// The lines captured so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().expect("not poisoned").clone()
    }

    /// The messages of the lines at this level or above.
    pub fn messages(&self, at_least: Level) -> Vec<String> {
        (self.lines().into_iter())
            .filter(|line| line.level <= at_least) // tracing orders ERROR < ... < TRACE
            .map(|line| line.message)
            .collect()
    }

    /// The subscriber that fills this capture.
    pub fn subscriber(&self) -> Lines<Capture> {
        Lines(self.clone())
    }
}

impl Sink for Capture {
    fn enabled(&self, _: &str, _: &Level) -> bool {
        true
    }

    fn line(&self, line: Line) {
        self.lines.lock().expect("not poisoned").push(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_formats_are_kopfs() {
        let object = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ns", "name": "p"}}));
        let line = |logger, object: Option<ObjectRef>| Line {
            logger,
            level: Level::INFO,
            object,
            local: false,
            message: "Handler 'h' succeeded.".into(),
        };
        let full = TextFormat {
            timed: true,
            prefixed: true,
        };
        let at = "2026-01-02 03:04:05,006";
        assert_eq!(
            full.format(&line(OBJECTS, Some(object.clone())), at, "INFO"),
            "[2026-01-02 03:04:05,006] kopf.objects         [INFO    ] [ns/p] Handler 'h' succeeded.\n"
        );
        // Names longer than the field are cut, as `%-20.20s` cuts them.
        assert_eq!(
            full.format(&line(PEERING, None), at, "WARNING"),
            "[2026-01-02 03:04:05,006] kopf._core.engines.p [WARNING ] Handler 'h' succeeded.\n"
        );
        let cluster_wide = ObjectRef {
            namespace: None,
            ..object.clone()
        };
        let plain = TextFormat {
            timed: false,
            prefixed: true,
        };
        assert_eq!(
            plain.format(&line(OBJECTS, Some(cluster_wide)), at, "INFO"),
            "[p] Handler 'h' succeeded.\n"
        );
        let bare = TextFormat {
            timed: false,
            prefixed: false,
        };
        assert_eq!(
            bare.format(&line(OBJECTS, Some(object)), at, "INFO"),
            "Handler 'h' succeeded.\n"
        );
    }

    #[test]
    fn lines_carry_their_logger_object_and_message() {
        let capture = Capture::default();
        tracing::subscriber::with_default(capture.subscriber(), || {
            let object = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"namespace": "ns", "name": "p", "uid": "u"}}));
            crate::object_log!(Level::INFO, &object, "Handler {:?} succeeded.", "h");
            tracing::warn!(target: PEERING, "Pausing.");
            tracing::warn!(target: "hyper::proto", "not ours");
        });
        let lines = capture.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].logger, OBJECTS);
        assert_eq!(lines[0].message, "Handler \"h\" succeeded.");
        let object = lines[0].object.as_ref().expect("an object line");
        assert_eq!(
            (object.namespace.as_deref(), object.name.as_deref()),
            (Some("ns"), Some("p"))
        );
        assert_eq!((lines[1].logger, lines[1].level), (PEERING, Level::WARN));
        assert_eq!(lines[1].object, None);
        assert_eq!(capture.messages(Level::WARN), ["Pausing."]);
    }
}
