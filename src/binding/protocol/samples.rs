//! One dict of each shape, made and read by the very builders and readers, for the tests.

use super::super::indices::Converter;
use super::super::logs::{object_dict, LogWriting};
use super::{
    conversion_dict, invocation_dict, parse_converted, parse_invoked, plan_dict, resource_dict,
    selection_dict,
};
use crate::client::resources::Resource;
use crate::client::watching::EventType;
use crate::indices::datum::Strings;
use crate::intents::handlers::Reason;
use crate::intents::hooks::{
    AdmissionCall, ConversionRequest, DaemonCall, HandlerKind, Invocation, LogCall, PlanRequest,
};
use crate::intents::hooks::{Failure, Rejection};
use crate::state::bodies::CompactBody;
use crate::state::diffs::{DiffItem, Operation};
use crate::util::logging::ObjectRef;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{json, Value};
use std::sync::Arc;

/// One dict of each shape the core sends, by the name of its TypedDict.
#[pyfunction]
pub(crate) fn protocol_samples(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let resource = Arc::new(Resource {
        group: "kopf.dev".into(),
        version: "v1".into(),
        plural: "kopfexamples".into(),
        kind: "KopfExample".into(),
        singular: "kopfexample".into(),
        shortcuts: vec!["kex".into()],
        categories: vec![],
        subresources: vec!["status".into()],
        namespaced: true,
        preferred: true,
        verbs: vec!["list".into(), "watch".into(), "patch".into()],
    });
    let body = json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"namespace": "ns", "name": "kex", "uid": "u"}, "spec": {"field": 1}});
    let call = Invocation {
        kind: HandlerKind::Spawning,
        handler: 0,
        scope: Some(1),
        children: None,
        resource: resource.clone(),
        body: Arc::new(body.clone()),
        event_type: Some(EventType::Modified),
        reason: Some(Reason::Update),
        old: Some(json!({"field": 0})),
        new: Some(json!({"field": 1})),
        diff: Some(vec![DiffItem {
            op: Operation::Change,
            field: vec!["field".into()],
            old: json!(0),
            new: json!(1),
        }]),
        retry: 0,
        started: Some("2026-01-01T00:00:00.000000+00:00".into()),
        runtime: 0.0,
        daemon: Some(DaemonCall {
            token: 1,
            key: "ns/kex".into(),
            reason: 0,
            endless: true,
            body: Arc::new(CompactBody::of(&body)),
        }),
        admission: Some(Arc::new(AdmissionCall::default())),
        log: Some(Arc::new(LogCall {
            line: "model accuracy is 97.5%".into(),
            container: "main".into(),
            timestamp: "2026-01-01T00:00:00.000000Z".into(),
        })),
        trace: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
    };
    let samples = PyDict::new(py);
    samples.set_item("Invocation", invocation_dict(py, &call)?)?;
    samples.set_item("ResourceInfo", resource_dict(py, &resource)?)?;
    let plan = PlanRequest {
        scope: None,
        call,
        handlers: vec![(0, "handler".into())],
        states: vec![("handler".into(), json!({"retries": 0}))],
    };
    samples.set_item("PlanRequest", plan_dict(py, &plan)?)?;
    let selection = selection_dict(py, HandlerKind::Changing, 0, &[(*resource).clone()])?;
    samples.set_item("ResourceSelection", selection)?;
    samples.set_item("ObjectRef", object_dict(py, &ObjectRef::of(&body))?)?;
    let conversion = ConversionRequest {
        resource: resource.clone(),
        objects: vec![(body.clone(), vec![0, 1])],
    };
    samples.set_item("ConversionRequest", conversion_dict(py, &conversion)?)?;
    samples.set_item(
        "HandlerKind",
        HandlerKind::ALL.map(HandlerKind::name).to_vec(),
    )?;
    Ok(samples)
}

/// An answer to a call, read as the core reads it, as JSON by key: what reached the core (an
/// indexing function's result converted as for an index). A `ValueError` for a key the core
/// does not read.
#[pyfunction]
pub(crate) fn invoked_as_read(answer: &Bound<'_, PyAny>) -> PyResult<String> {
    let strings = Strings::default();
    let converter = Converter {
        strings: &strings,
        calls: None,
    };
    let (read, said) = parse_invoked(answer, Some(&converter))?;
    let failure = read.failure.map(|failure| match failure {
        Failure::Temporary => "temporary",
        Failure::Permanent => "permanent",
        Failure::Exception => "exception",
    });
    let rejection = read.rejection.map(|rejection| match rejection {
        Rejection::Admission { message, code } => json!(["admission", message, code]),
        Rejection::Permanent(message) => json!(["permanent", message, null]),
        Rejection::Temporary(message) => json!(["temporary", message, null]),
        Rejection::Other(message) => json!(["other", message, null]),
    });
    let outcome = read.outcome;
    let taken = [
        ("final", json!(outcome.final_)),
        ("delay", json!(outcome.delay)),
        ("result", json!(outcome.result)),
        ("exception", json!(outcome.exception)),
        ("failure", json!(failure)),
        ("error_type", json!(read.error_type)),
        ("subrefs", json!(outcome.subrefs)),
        ("patch", json!(read.patch)),
        ("cancelled", json!(read.cancelled)),
        ("indexed", json!(read.indexed.map(|pairs| pairs.len()))),
        ("warnings", json!(read.warnings)),
        ("rejection", json!(rejection)),
        ("said", json!(said)),
        ("requeue", json!(read.requeue)),
        ("related", json!(read.related)),
    ];
    let taken: serde_json::Map<String, Value> = taken
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    Ok(Value::Object(taken).to_string())
}

/// `Bridge.convert()`'s answer as the core reads it, as JSON: `{"converted": [...]}` or
/// `{"error": "..."}`; a `ValueError` for a key the core does not read.
#[pyfunction]
pub(crate) fn converted_as_read(answer: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(match parse_converted(answer)? {
        Ok(converted) => json!({"converted": converted}),
        Err(error) => json!({"error": error}),
    }
    .to_string())
}

/// `Bridge.log_writing()`'s answer (JSON) as the core reads it, written back as JSON: a
/// `ValueError` for a key the core does not read or one it needs and misses.
#[pyfunction]
pub(crate) fn log_writing_as_read(answer: &str) -> PyResult<String> {
    let read = LogWriting::parse(answer)?;
    serde_json::to_string(&read).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}
