//! The call protocol: the dicts that cross the boundary, made and read here (the handler
//! calls' questions and answers) and in `logs.rs` (the log lines), nowhere else.
//! `kopf._bridge.protocol`'s TypedDicts describe them. `samples` makes one of each with these
//! very builders, every optional part present, and reads an answer with the very reader,
//! telling what it took; `tests/unit/test_protocol.py` checks both against the TypedDicts, so
//! neither side can add, drop or misspell a key on its own.

mod samples;

pub(super) use samples::{
    converted_as_read, invoked_as_read, log_writing_as_read, protocol_samples,
};

use super::bodies::CoreBody;
use super::indices::Converter;
use super::scopes::Scope;
use super::simulation::DaemonHold;
use super::values;
use crate::client::resources::Resource;
use crate::client::watching::EventType;
use crate::intents::handlers::Reason;
use crate::intents::hooks::{
    ConversionRequest, Failure, HandlerKind, Invocation, Invoked, PlanRequest, Rejection,
};
use crate::simulation::settling::Hold;
use crate::state::diffs::Diff;
use crate::state::progression::Outcome;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use serde_json::Value;
use std::sync::{Arc, Mutex};

fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    super::values::to_python(py, value)
}

fn diff_list<'py>(py: Python<'py>, diff: &Diff) -> PyResult<Bound<'py, PyList>> {
    let items = PyList::empty(py);
    for item in diff {
        let op = match item.op {
            crate::state::diffs::Operation::Add => "add",
            crate::state::diffs::Operation::Change => "change",
            crate::state::diffs::Operation::Remove => "remove",
        };
        let field = PyTuple::new(py, &item.field)?;
        let entry = (op, field, to_py(py, &item.old)?, to_py(py, &item.new)?);
        items.append(entry)?;
    }
    Ok(items)
}

/// The resources as Python dicts, each made once: every call names its resource, and a
/// resource's dict is a few dozen objects (its verbs, names, subresources). Found by the
/// `Arc` that the calls share (hashing and comparing a whole resource on every call was a
/// few microseconds of each `on.event` call), else by equality: one dict per distinct value.
static RESOURCES: Mutex<Vec<(Arc<Resource>, Py<PyAny>)>> = Mutex::new(Vec::new());

pub(super) fn resource_dict<'py>(
    py: Python<'py>,
    resource: &Arc<Resource>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut cache = RESOURCES.lock().expect("not poisoned");
    let found = cache
        .iter()
        .find(|(kept, _)| Arc::ptr_eq(kept, resource))
        .or_else(|| cache.iter().find(|(kept, _)| **kept == **resource));
    if let Some((_, dict)) = found {
        return Ok(dict.bind(py).clone());
    }
    let made = values::serialized(py, &**resource)?;
    cache.push((resource.clone(), made.clone().unbind()));
    Ok(made)
}

/// A custom lifecycle's question as a dict for `Bridge.plan()` (`kopf._bridge.protocol.PlanRequest`).
pub(super) fn plan_dict<'py>(
    py: Python<'py>,
    request: &PlanRequest,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("scope", request.scope)?;
    dict.set_item("call", invocation_dict(py, &request.call)?)?;
    dict.set_item("handlers", &request.handlers)?;
    let states = PyDict::new(py);
    for (id, record) in &request.states {
        states.set_item(id, to_py(py, record)?)?;
    }
    dict.set_item("states", states)?;
    Ok(dict)
}

/// A callable resource selector's question as a dict for `Bridge.select_resources()`
/// (`kopf._bridge.protocol.ResourceSelection`).
/// A conversion review's objects for `Bridge.convert()` (a `ConversionRequest`).
pub(super) fn conversion_dict<'py>(
    py: Python<'py>,
    request: &ConversionRequest,
) -> PyResult<Bound<'py, PyDict>> {
    let objects = PyList::empty(py);
    for (object, steps) in &request.objects {
        objects.append((to_py(py, object)?, PyList::new(py, steps)?))?;
    }
    let dict = PyDict::new(py);
    dict.set_item("resource", resource_dict(py, &request.resource)?)?;
    dict.set_item("objects", objects)?;
    Ok(dict)
}

/// `Bridge.convert()`'s answer (a `ConversionAnswer`): the converted objects, or why not.
pub(super) fn parse_converted(answer: &Bound<'_, PyAny>) -> PyResult<Result<Vec<Value>, String>> {
    let answer = answer.cast::<PyDict>()?;
    for key in answer.keys() {
        let key: String = key.extract()?;
        if key != "converted" && key != "error" {
            return Err(PyValueError::new_err(format!(
                "a conversion's answer has a key the core does not read: {key:?}"
            )));
        }
    }
    if let Some(error) = answer.get_item("error")?.filter(|e| !e.is_none()) {
        return Ok(Err(error.extract()?));
    }
    let converted = answer.get_item("converted")?.ok_or_else(|| {
        PyValueError::new_err("a conversion's answer has neither 'converted' nor 'error'")
    })?;
    let text = converted.cast::<PyString>()?.to_cow()?;
    let objects = serde_json::from_str(&text).map_err(|e| {
        PyValueError::new_err(format!("the converted objects are not a JSON list: {e}"))
    })?;
    Ok(Ok(objects))
}

pub(super) fn selection_dict<'py>(
    py: Python<'py>,
    kind: HandlerKind,
    handler: usize,
    resources: &[Resource],
) -> PyResult<Bound<'py, PyDict>> {
    let request = PyDict::new(py);
    request.set_item("kind", kind.name())?;
    request.set_item("handler", handler)?;
    request.set_item("resources", values::serialized(py, resources)?)?;
    Ok(request)
}

/// A daemon's call in a simulation carries the daemon's hold on the clock (`DaemonHold`).
pub(super) fn hand_hold(dict: &Bound<'_, PyDict>, hold: Hold) -> PyResult<()> {
    let py = dict.py();
    if let Some(daemon) = dict.get_item(intern!(py, "daemon"))? {
        daemon.set_item(intern!(py, "hold"), DaemonHold(hold))?;
    }
    Ok(())
}

/// The invocation as a dict for `Bridge.invoke()` (`kopf._bridge.protocol.Invocation`).
pub(super) fn invocation_dict<'py>(
    py: Python<'py>,
    call: &Invocation,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item(intern!(py, "kind"), call.kind.name())?;
    dict.set_item(intern!(py, "handler"), call.handler)?;
    dict.set_item(intern!(py, "resource"), resource_dict(py, &call.resource)?)?;
    match (&call.daemon, call.kind) {
        // `on.event` handlers get the raw object as a dict, and admission handlers a body
        // that is not the core's: converted whole.
        (None, HandlerKind::Watching | HandlerKind::Admission) => {
            dict.set_item(intern!(py, "body"), to_py(py, &call.body)?)?
        }
        (None, _) => dict.set_item(intern!(py, "body"), CoreBody::tree(call.body.clone()))?,
        (Some(daemon), _) => {
            dict.set_item(intern!(py, "body"), CoreBody::text(daemon.body.clone()))?
        }
    }
    // Strings only here, at the edge: Kopf's names of event types and causes.
    dict.set_item(
        intern!(py, "event_type"),
        call.event_type.and_then(EventType::as_kopf),
    )?;
    dict.set_item(intern!(py, "reason"), call.reason.map(Reason::as_str))?;
    dict.set_item(
        intern!(py, "old"),
        call.old.as_ref().map(|v| to_py(py, v)).transpose()?,
    )?;
    dict.set_item(
        intern!(py, "new"),
        call.new.as_ref().map(|v| to_py(py, v)).transpose()?,
    )?;
    dict.set_item(
        "diff",
        call.diff.as_ref().map(|d| diff_list(py, d)).transpose()?,
    )?;
    dict.set_item(intern!(py, "retry"), call.retry)?;
    dict.set_item(intern!(py, "started"), &call.started)?;
    dict.set_item(intern!(py, "runtime"), call.runtime)?;
    dict.set_item(intern!(py, "scope"), call.scope)?;
    let children = call.children.clone().map(|inner| Scope { inner });
    dict.set_item(intern!(py, "children"), children)?;
    if let Some(daemon) = &call.daemon {
        let stopper = PyDict::new(py);
        stopper.set_item(intern!(py, "token"), daemon.token)?;
        stopper.set_item(intern!(py, "key"), &*daemon.key)?;
        stopper.set_item(intern!(py, "reason"), daemon.reason)?;
        stopper.set_item(intern!(py, "hold"), py.None())?; // see `hand_hold`
        dict.set_item(intern!(py, "daemon"), stopper)?;
    }
    if let Some(admission) = &call.admission {
        let request = PyDict::new(py);
        request.set_item(intern!(py, "webhook"), &admission.webhook)?;
        request.set_item(intern!(py, "operation"), &admission.operation)?;
        request.set_item(intern!(py, "subresource"), &admission.subresource)?;
        request.set_item(intern!(py, "dryrun"), admission.dryrun)?;
        request.set_item(intern!(py, "userinfo"), to_py(py, &admission.userinfo)?)?;
        let headers = PyDict::new(py);
        for (name, value) in &admission.headers {
            headers.set_item(name, value)?;
        }
        request.set_item(intern!(py, "headers"), headers)?;
        request.set_item(intern!(py, "sslpeer"), to_py(py, &admission.sslpeer)?)?;
        dict.set_item(intern!(py, "admission"), request)?;
    }
    if let Some(log) = &call.log {
        let line = PyDict::new(py);
        line.set_item(intern!(py, "line"), &log.line)?;
        line.set_item(intern!(py, "container"), &log.container)?;
        line.set_item(intern!(py, "timestamp"), &log.timestamp)?;
        dict.set_item(intern!(py, "log"), line)?;
    }
    if let Some(trace) = &call.trace {
        dict.set_item(intern!(py, "trace"), trace)?;
    }
    Ok(dict)
}

/// The keys that an answer may have (`kopf._bridge.protocol.Invoked`): another one is the bridge's
/// mistake, refused rather than ignored (a misspelt key would drop what it carries).
const INVOKED_KEYS: [&str; 15] = [
    "final",
    "delay",
    "result",
    "exception",
    "failure",
    "error_type",
    "subrefs",
    "patch",
    "cancelled",
    "indexed",
    "warnings",
    "rejection",
    "said",
    "requeue",
    "related",
];

/// A handler's "succeeded" line that its thread left for the core to write (as the core writes
/// its own lines, see `logs`), and whether it is posted as an Event.
pub(super) type Said = Option<(String, bool)>;

/// The bridge's answer (`kopf._bridge.protocol.Invoked`), and for an indexing function, `"indexed"`
/// (its result as it returned it), converted here; `None` for a call that succeeded with
/// nothing to keep or apply.
pub(super) fn parse_invoked<'py>(
    answer: &Bound<'py, PyAny>,
    indexing: Option<&Converter>,
) -> PyResult<(Invoked, Said)> {
    if answer.is_none() {
        let invoked = Invoked {
            outcome: Outcome {
                final_: true,
                ..Default::default()
            },
            ..Default::default()
        };
        return Ok((invoked, None));
    }
    let answer = answer.cast::<PyDict>()?;
    // Absent and `None` are the same: a cancelled call has only `final` and `cancelled`.
    // Each key is read once below; the ones found are counted, so that a key the core does
    // not read shows without another pass over every answer.
    let py = answer.py();
    let found = std::cell::Cell::new(0usize);
    let get = |key: &Bound<'py, PyString>| -> PyResult<Option<Bound<'py, PyAny>>> {
        let item = answer.get_item(key)?;
        found.set(found.get() + usize::from(item.is_some()));
        Ok(item.filter(|item| !item.is_none()))
    };
    let json = |item: Option<Bound<'_, PyAny>>| -> PyResult<Option<Value>> {
        item.map(|i| values::from_python::<Value>(&i)).transpose()
    };
    let invoked = Invoked {
        outcome: Outcome {
            final_: get(intern!(py, "final"))?.is_some_and(|f| f.is_truthy().unwrap_or(false)),
            delay: get(intern!(py, "delay"))?
                .map(|d| d.extract())
                .transpose()?,
            result: json(get(intern!(py, "result"))?)?,
            exception: get(intern!(py, "exception"))?
                .map(|e| e.extract())
                .transpose()?,
            subrefs: get(intern!(py, "subrefs"))?
                .map(|s| s.extract())
                .transpose()?
                .unwrap_or_default(),
        },
        failure: match get(intern!(py, "failure"))?
            .map(|f| f.extract::<String>())
            .transpose()?
        {
            Some(class) if class == "temporary" => Some(Failure::Temporary),
            Some(class) if class == "permanent" => Some(Failure::Permanent),
            Some(_) => Some(Failure::Exception),
            None => None,
        },
        error_type: get(intern!(py, "error_type"))?
            .map(|t| t.extract())
            .transpose()?,
        indexed: match (indexing, get(intern!(py, "indexed"))?) {
            (Some(converter), Some(result)) => converter.result(&result)?,
            _ => None,
        },
        patch: json(get(intern!(py, "patch"))?)?,
        cancelled: get(intern!(py, "cancelled"))?.is_some_and(|c| c.is_truthy().unwrap_or(false)),
        warnings: get(intern!(py, "warnings"))?
            .map(|w| w.extract())
            .transpose()?
            .unwrap_or_default(),
        rejection: get(intern!(py, "rejection"))?
            .map(|r| rejection(&r))
            .transpose()?,
        requeue: get(intern!(py, "requeue"))?
            .map(|r| r.extract())
            .transpose()?,
        related: get(intern!(py, "related"))?
            .map(|r| r.extract())
            .transpose()?,
    };
    let said = get(intern!(py, "said"))?.map(|s| s.extract()).transpose()?;
    if found.get() != answer.len() {
        for key in answer.keys() {
            let key = key.cast::<PyString>()?.to_cow()?;
            if !INVOKED_KEYS.contains(&&*key) {
                return Err(PyValueError::new_err(format!(
                    "the bridge answered a call with '{key}', which the core does not read"
                )));
            }
        }
    }
    Ok((invoked, said))
}

/// An admission handler's error as the bridge describes it: `(kind, message, code)`.
fn rejection(answer: &Bound<'_, PyAny>) -> PyResult<Rejection> {
    let (kind, message, code): (String, String, Option<i64>) = answer.extract()?;
    Ok(match kind.as_str() {
        "admission" => Rejection::Admission { message, code },
        "permanent" => Rejection::Permanent(message),
        "temporary" => Rejection::Temporary(message),
        _ => Rejection::Other(message),
    })
}
