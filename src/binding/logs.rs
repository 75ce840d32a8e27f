//! The core's log lines (`tracing` events, see `util::logging`) to Python's `logging`.
//! Each operator has its own sink (of a `Lines` subscriber): it passes on the lines of the core's loggers
//! at the levels Python would not drop, as notes to the operator's loop, where they are
//! logged in order with the calls (no GIL is taken on the core's threads).
//!
//! Except the lines that logging would give only to `kopf run`'s own stream handler (as
//! `Bridge.log_writing()` finds when the core starts): the core writes those to that stream's
//! file itself, formatted as that handler would, and posts those about objects as Events as
//! Kopf's poster would. A note costs a wake-up of the operator's loop and the GIL: with the
//! "... is processed" line of every change as notes, the loop's thread took a fifth of the
//! CPU of 1000 lifecycles (a tenth without them, mostly the imports at the start).

use super::calls::Calls;
use crate::client::posting::K8sEvent;
use crate::settings::Pauses;
use crate::util::logging::{python_level, Line, ObjectRef, Sink, TextFormat, LOGGERS};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedSender;
use tracing::Level;

/// Longer lines go to Python: a pipe takes at most this much in one write without
/// interleaving it with other writers' (Python's handler threads write to the same file).
const ATOMIC_WRITE: usize = 4096;

pub struct PyLogs {
    calls: Calls,
    /// Python's effective level of each of the core's loggers, read once at start.
    levels: HashMap<&'static str, u8>,
    /// The lines the core writes itself, read once at start (as the levels).
    writing: Option<Writing>,
}

impl PyLogs {
    pub fn new(
        py: Python<'_>,
        bridge: &Py<PyAny>,
        calls: Calls,
        events: UnboundedSender<K8sEvent>,
        backoffs: Pauses,
    ) -> PyResult<Self> {
        let answer = bridge.call_method1(py, "log_levels", (LOGGERS.to_vec(),))?;
        let found: HashMap<String, u8> = answer.extract(py)?;
        let levels = (LOGGERS.iter())
            .filter_map(|logger| Some((*logger, *found.get(*logger)?)))
            .collect();
        let answer = bridge.call_method1(py, "log_writing", (LOGGERS.to_vec(),))?;
        let writing = match answer.extract::<Option<String>>(py)? {
            Some(text) => Some(Writing::new(LogWriting::parse(&text)?, events, backoffs)?),
            None => None,
        };
        Ok(Self {
            calls,
            levels,
            writing,
        })
    }
}

/// `kopf._bridge.protocol.LogWriting`: which lines the core writes itself, and how.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogWriting {
    fd: RawFd,
    timed: bool,
    prefixed: bool,
    levelnames: HashMap<String, String>,
    loggers: HashMap<String, LoggerWriting>,
    event_types: HashMap<String, String>,
    event_reason: String,
}

/// `kopf._bridge.protocol.LoggerWriting`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoggerWriting {
    levels: Vec<u8>,
    posted: Vec<u8>,
}

impl LogWriting {
    pub(super) fn parse(text: &str) -> PyResult<Self> {
        serde_json::from_str(text).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("invalid log writing: {e}"))
        })
    }
}

struct Writing {
    /// A duplicate of the stream's descriptor: the same open file (and offset), closed
    /// only by us, so Python closing its own never leaves us writing to another file.
    file: File,
    format: TextFormat,
    levelnames: HashMap<u8, String>,
    loggers: HashMap<&'static str, LoggerWriting>,
    event_types: HashMap<u8, String>,
    event_reason: String,
    /// `settings.posting.logging_backoffs`.
    backoffs: Pauses,
    events: UnboundedSender<K8sEvent>,
}

impl Writing {
    fn new(
        writing: LogWriting,
        events: UnboundedSender<K8sEvent>,
        backoffs: Pauses,
    ) -> PyResult<Self> {
        // SAFETY: only reads the descriptor; the new one is ours alone to own (closed on exec:
        // not inherited by the processes that handlers start).
        let fd = unsafe { libc::fcntl(writing.fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: a valid descriptor that nothing else owns (just made).
        let file = unsafe { File::from_raw_fd(fd) };
        let mut loggers = writing.loggers;
        Ok(Self {
            file,
            format: TextFormat {
                timed: writing.timed,
                prefixed: writing.prefixed,
            },
            levelnames: by_level(writing.levelnames),
            event_types: by_level(writing.event_types),
            event_reason: writing.event_reason,
            loggers: (LOGGERS.iter())
                .filter_map(|logger| Some((*logger, loggers.remove(*logger)?)))
                .collect(),
            backoffs,
            events,
        })
    }

    /// Write the line (and post it), if it is one of those the core writes itself.
    fn write(&self, line: &Line) -> bool {
        let level = python_level(&line.level);
        let Some(logger) = self.loggers.get(line.logger) else {
            return false;
        };
        let Some(levelname) = self.levelnames.get(&level) else {
            return false;
        };
        if !logger.levels.contains(&level) {
            return false;
        }
        let text = self
            .format
            .format(line, &asctime(SystemTime::now()), levelname);
        if text.len() > ATOMIC_WRITE {
            return false;
        }
        // As logging's handlers: a line that cannot be written is not the operator's failure.
        let _ = (&self.file).write_all(text.as_bytes());
        let posted =
            (line.object.as_ref()).filter(|_| !line.local && logger.posted.contains(&level));
        if let Some((object, type_)) = posted.zip(self.event_types.get(&level)) {
            let _ = self.events.send(K8sEvent {
                reference: json!({"apiVersion": object.api_version, "kind": object.kind,
                    "namespace": object.namespace, "name": object.name, "uid": object.uid}),
                type_: type_.clone(),
                reason: self.event_reason.clone(),
                message: line.message.clone(),
                backoffs: self.backoffs.clone(),
            });
        }
        true
    }
}

/// Python's maps by a level's number (JSON keys are strings).
fn by_level(map: HashMap<String, String>) -> HashMap<u8, String> {
    (map.into_iter())
        .filter_map(|(level, value)| Some((level.parse().ok()?, value)))
        .collect()
}

/// The local time as Python's logging writes it (`%Y-%m-%d %H:%M:%S,mmm`): converted by the
/// C library's `localtime_r`, as Python's `time.localtime` converts it (the same zone rules).
fn asctime(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs() as libc::time_t;
    // SAFETY: a plain struct of integers (and a pointer that localtime_r sets).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r keeps neither.
    unsafe { libc::localtime_r(&seconds, &mut tm) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02},{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        since.subsec_millis()
    )
}

/// Which object a line is about (`kopf._bridge.protocol.ObjectRef`).
pub(super) fn object_dict<'py>(
    py: Python<'py>,
    object: &ObjectRef,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("apiVersion", &object.api_version)?;
    dict.set_item("kind", &object.kind)?;
    dict.set_item("namespace", &object.namespace)?;
    dict.set_item("name", &object.name)?;
    dict.set_item("uid", &object.uid)?;
    Ok(dict)
}

impl Sink for PyLogs {
    fn enabled(&self, logger: &str, level: &Level) -> bool {
        (self.levels.get(logger)).is_some_and(|threshold| python_level(level) >= *threshold)
    }

    fn line(&self, line: Line) {
        if self
            .writing
            .as_ref()
            .is_some_and(|writing| writing.write(&line))
        {
            return;
        }
        self.calls.notify("log", move |py| {
            let object = line
                .object
                .as_ref()
                .map(|o| object_dict(py, o))
                .transpose()?;
            let level = python_level(&line.level);
            Ok((line.logger, level, object, line.message, line.local)
                .into_pyobject(py)?
                .into_any())
        });
    }
}
