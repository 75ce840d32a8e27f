//! [`Hooks`] implemented by a Python object (`kopf._running.calls.Bridge`): handler calls
//! become coroutines on the operator's loop (queued, see `calls`), except synchronous
//! handlers, which run on threads of the core's own. (Log lines: see `logs`.)

use super::bodies::CoreBody;
use super::calls::{Calls, Closed, Target};
use super::indices::Converter;
use super::protocol::{
    conversion_dict, hand_hold, invocation_dict, parse_converted, parse_invoked, plan_dict,
    selection_dict, Said,
};
use super::storages::PyCustomStorages;
use super::threads::HandlerThreads;
use super::values;
use crate::client::connection::ConnectionInfo;
use crate::client::credentials::LoginError;
use crate::client::resources::Resource;
use crate::indices::Indices;
use crate::intents::hooks::{
    ConversionRequest, DaemonControl, HandlerCalls, HandlerKind, Invocation, Invoked,
    OperatorQueries, OperatorStorages, PlanRequest, Rejection,
};
use crate::settings::ServerSelectors;
use crate::simulation::settling::Hold;
use crate::state::bodies::CompactBody;
use crate::state::progression::Outcome;
use crate::state::storages::CustomStorages;
use crate::util::logging::ObjectRef;
use futures::future::BoxFuture;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tracing::Level;

pub struct PyHooks {
    bridge: Arc<Py<PyAny>>,
    calls: Calls,
    storages: PyCustomStorages,
    threads: Option<Threads>,
    /// Where indexing functions' results go (their strings interned there).
    indices: Arc<Indices>,
}

/// Synchronous handlers run on threads of the core's own (see `threads`), as many at once
/// as the operator's executor has threads: Kopf would run them in that executor from its
/// loop, and going through the loop costs four thread switches per call instead of two.
struct Threads {
    handlers: HashSet<(&'static str, usize)>,
    /// The synchronous conversion handlers (by position): reviews whose steps are all of
    /// them are converted on these threads too.
    conversions: HashSet<usize>,
    /// A call waits for a slot before it is handed to a thread: a call given up while it
    /// waits (e.g. its worker stopped) never runs.
    slots: Arc<Semaphore>,
    pool: Arc<HandlerThreads>,
}

impl Threads {
    /// What the bridge allows (`Bridge.threading()`): none if the executor is not a
    /// plain thread pool (its own threads might matter to the handlers).
    fn of(py: Python<'_>, bridge: &Py<PyAny>) -> PyResult<Option<Self>> {
        let answer = bridge.call_method0(py, "threading")?;
        let Some((workers, handlers)) =
            answer.extract::<Option<(usize, Vec<(String, usize)>)>>(py)?
        else {
            return Ok(None);
        };
        let conversions = (handlers.iter())
            .filter(|(kind, _)| kind == "conversion")
            .map(|(_, index)| *index)
            .collect();
        let handlers = handlers
            .into_iter()
            .filter_map(|(kind, index)| Some((HandlerKind::named(&kind)?.name(), index)))
            .collect();
        Ok(Some(Self {
            handlers,
            conversions,
            slots: Arc::new(Semaphore::new(workers.max(1))),
            pool: Arc::new(HandlerThreads::new(workers)),
        }))
    }
}

impl PyHooks {
    pub fn new(
        py: Python<'_>,
        bridge: Py<PyAny>,
        calls: Calls,
        storages: PyCustomStorages,
        indices: Arc<Indices>,
    ) -> PyResult<Self> {
        let threads = Threads::of(py, &bridge)?;
        Ok(Self {
            bridge: Arc::new(bridge),
            calls,
            storages,
            threads,
            indices,
        })
    }

    /// Call a coroutine method of the bridge on the operator's loop; `parse` its result there.
    /// If it raises or cannot be parsed (the error is printed), or the loop has stopped
    /// serving, the result is `fallback(the error's text)`.
    fn call<T: Send + 'static>(
        &self,
        method: &'static str,
        target: Target,
        arg: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
        parse: impl for<'py> FnOnce(Python<'py>, Bound<'py, PyAny>) -> PyResult<T> + Send + 'static,
        fallback: impl Fn(String) -> T + Send + Sync + 'static,
    ) -> BoxFuture<'static, T> {
        self.call_settling(method, target, true, arg, parse, fallback)
    }

    /// `call`, with or without keeping a simulation's clock still meanwhile (`Calls::call`).
    fn call_settling<T: Send + 'static>(
        &self,
        method: &'static str,
        target: Target,
        settling: bool,
        arg: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
        parse: impl for<'py> FnOnce(Python<'py>, Bound<'py, PyAny>) -> PyResult<T> + Send + 'static,
        fallback: impl Fn(String) -> T + Send + Sync + 'static,
    ) -> BoxFuture<'static, T> {
        let fallback = Arc::new(fallback);
        let on_error = fallback.clone();
        let answer = self.calls.call(
            method,
            target,
            settling,
            arg,
            move |py, result| match result.and_then(|r| parse(py, r)) {
                Ok(value) => value,
                Err(error) => {
                    let message = error.to_string();
                    error.print(py);
                    on_error(message)
                }
            },
        );
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|Closed| fallback("the operator's loop has stopped".into()))
        })
    }

    /// Run the login handlers again (`Bridge.relogin()`): the connection for a renewed client.
    pub fn relogin(&self) -> BoxFuture<'static, Result<ConnectionInfo, LoginError>> {
        self.call(
            "relogin",
            None,
            |py| Ok(py.None().into_bound(py)),
            |_, answer| {
                let text: String = answer.extract()?;
                Ok(serde_json::from_str(&text)
                    .map_err(|e| LoginError(format!("invalid connection info: {e}"))))
            },
            |message| Err(LoginError(message)),
        )
    }

    /// A list of booleans from Python; on an error, `false` for all `count` of them.
    fn verdicts(
        &self,
        method: &'static str,
        count: usize,
        arg: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
    ) -> BoxFuture<'static, Vec<bool>> {
        self.call(
            method,
            None,
            arg,
            |_, answer| answer.extract(),
            move |_| vec![false; count],
        )
    }
}

impl HandlerCalls for PyHooks {
    fn check_callbacks(&self, invocations: Vec<Invocation>) -> BoxFuture<'static, Vec<bool>> {
        self.verdicts("check_callbacks", invocations.len(), move |py| {
            let list = PyList::empty(py);
            for call in &invocations {
                list.append(invocation_dict(py, call)?)?;
            }
            Ok(list.into_any())
        })
    }

    fn invoke(&self, invocation: Invocation) -> BoxFuture<'static, Invoked> {
        // Sub-handlers are numbered in their scopes, not in the registry: never a target.
        let target =
            (invocation.scope.is_none()).then_some((invocation.kind.name(), invocation.handler));
        let indexing = (invocation.kind == HandlerKind::Indexing)
            .then(|| (self.indices.clone(), self.calls.clone()));
        if let (Some(threads), Some(target)) = (&self.threads, &target) {
            if threads.handlers.contains(target) {
                let calls = self.calls.clone();
                return Self::invoke_in_thread(
                    invocation,
                    threads,
                    self.bridge.clone(),
                    calls,
                    indexing,
                );
            }
        }
        let object = CallObject::of(&invocation);
        let endless = (invocation.daemon.as_ref()).is_some_and(|daemon| daemon.endless);
        let hold = endless.then(|| self.calls.hold()).flatten();
        let ending = hold.as_ref().map(Hold::ending);
        let answer = self.call_settling(
            "invoke",
            target,
            !endless,
            move |py| Ok(daemon_dict(py, &invocation, hold)?.into_any()),
            move |_, answer| parse_answer(&answer, indexing.as_ref()),
            |message| (bridge_failure(message), None),
        );
        Box::pin(async move {
            let _ending = ending; // the daemon's hold ends with its call, or as it is given up
            let (invoked, said) = answer.await;
            object.say(said);
            invoked
        })
    }

    fn plan(&self, request: PlanRequest) -> BoxFuture<'static, Vec<usize>> {
        self.call(
            "plan",
            None,
            move |py| Ok(plan_dict(py, &request)?.into_any()),
            |_, answer| answer.extract(),
            |_| Vec::new(),
        )
    }

    fn initial_delay(&self, invocation: Invocation) -> BoxFuture<'static, f64> {
        self.call(
            "initial_delay",
            None,
            move |py| Ok(invocation_dict(py, &invocation)?.into_any()),
            |_, answer| answer.extract(),
            |_| 0.0,
        )
    }

    fn forget(&self, key: &str) {
        let key = key.to_owned();
        self.calls
            .notify("forget", move |py| Ok((key,).into_pyobject(py)?.into_any()));
    }

    fn convert(
        &self,
        request: ConversionRequest,
    ) -> BoxFuture<'static, Result<Vec<Value>, String>> {
        if let Some(threads) = &self.threads {
            let mut steps = request.objects.iter().flat_map(|(_, steps)| steps);
            if steps.all(|step| threads.conversions.contains(step)) {
                return Self::convert_in_thread(request, threads, self.bridge.clone());
            }
        }
        self.call(
            "convert",
            None,
            move |py| Ok(conversion_dict(py, &request)?.into_any()),
            |_, answer| parse_converted(&answer),
            |message| Err(format!("The conversion handlers failed: {message}")),
        )
    }
}

impl DaemonControl for PyHooks {
    // The stop flags and cancellations go in order with the core's log lines (notes too):
    // what a daemon logs on seeing them comes after the line that announced them.
    fn daemon_stopping(&self, token: u64, reason: u32) {
        self.calls.notify("daemon_stopping", move |py| {
            Ok((token, reason).into_pyobject(py)?.into_any())
        });
    }

    fn daemon_cancel(&self, token: u64) {
        self.calls.notify("daemon_cancel", move |py| {
            Ok((token,).into_pyobject(py)?.into_any())
        });
    }

    fn daemon_forget(&self, token: u64) {
        self.calls.notify("daemon_forget", move |py| {
            Ok((token,).into_pyobject(py)?.into_any())
        });
    }

    // A note too, not a call with the GIL from the core's thread: the core's one worker
    // would wait for the loop (up to Python's switch interval) on every event of an object
    // with a running daemon.
    fn refresh_body(&self, key: &Arc<str>, body: &Arc<CompactBody>) {
        let (key, body) = (key.clone(), body.clone());
        self.calls.notify("refresh_body", move |py| {
            Ok((&*key, CoreBody::text(body)).into_pyobject(py)?.into_any())
        });
    }
}

impl OperatorQueries for PyHooks {
    fn select_resources(
        &self,
        kind: HandlerKind,
        handler: usize,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Vec<bool>> {
        self.verdicts("select_resources", resources.len(), move |py| {
            Ok(selection_dict(py, kind, handler, &resources)?.into_any())
        })
    }

    fn server_selectors(
        &self,
        resources: Vec<Resource>,
    ) -> BoxFuture<'static, Result<Vec<ServerSelectors>, String>> {
        self.call(
            "server_selectors",
            None,
            move |py| values::serialized(py, &resources),
            |_, answer| {
                let triples: Vec<(Option<String>, Option<String>, Option<String>)> =
                    answer.extract()?;
                Ok(Ok((triples.into_iter())
                    .map(|(label, field, shard)| ServerSelectors {
                        label,
                        field,
                        shard,
                    })
                    .collect()))
            },
            Err,
        )
    }

    fn probe(&self) -> BoxFuture<'static, Value> {
        self.call(
            "probe",
            None,
            |py| Ok(py.None().into_bound(py)),
            |_, answer| values::from_python::<Value>(&answer),
            |_| Value::Object(Default::default()),
        )
    }
}

impl OperatorStorages for PyHooks {
    fn custom_storages(&self) -> &dyn CustomStorages {
        &self.storages
    }
}

/// A failure of the bridge itself (not of the handler): retry later.
fn bridge_failure(message: String) -> Invoked {
    Invoked {
        outcome: Outcome {
            final_: false,
            delay: Some(60.0),
            exception: Some(message.clone()),
            ..Default::default()
        },
        // An admission review must not pass because the bridge failed.
        rejection: Some(Rejection::Other(message)),
        ..Default::default()
    }
}

/// What an indexing function's result is converted with: the operator's indices (for
/// their strings) and the calls (for releasing the opaque objects kept for it).
type Indexing = (Arc<Indices>, Calls);

fn parse_answer(
    answer: &Bound<'_, PyAny>,
    indexing: Option<&Indexing>,
) -> PyResult<(Invoked, Said)> {
    let converter = indexing.map(|(indices, calls)| Converter {
        strings: &indices.strings,
        calls: Some(calls),
    });
    parse_invoked(answer, converter.as_ref())
}

/// The invocation's dict, with a daemon's hold on a simulation's clock if it has one.
fn daemon_dict<'py>(
    py: Python<'py>,
    invocation: &Invocation,
    hold: Option<Hold>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = invocation_dict(py, invocation)?;
    if let Some(hold) = hold {
        hand_hold(&dict, hold)?;
    }
    Ok(dict)
}

/// The object of a call, for its "succeeded" line: a daemon's or timer's is in its own body.
enum CallObject {
    Body(Arc<Value>),
    Daemon(Arc<CompactBody>),
}

impl CallObject {
    fn of(invocation: &Invocation) -> Self {
        match &invocation.daemon {
            Some(daemon) => Self::Daemon(daemon.body.clone()),
            None => Self::Body(invocation.body.clone()),
        }
    }

    /// The "succeeded" line that a handler's thread left to the core, about the call's
    /// object: written in the operator's task (where its lines go), after the handler's own.
    fn say(&self, said: Said) {
        if let Some((message, posted)) = said {
            let object = match self {
                Self::Body(body) => ObjectRef::of(body),
                Self::Daemon(body) => body.object(),
            };
            crate::object_log!(local = !posted; Level::INFO, &object, "{message}");
        }
    }
}

impl PyHooks {
    /// A synchronous handler on a handler thread (`Bridge.invoke_in_thread()`), once one
    /// of the executor's slots is free.
    /// A review whose steps are all synchronous, converted on one of the core's threads (as
    /// synchronous handlers are called): no trip through the loop and its executor.
    fn convert_in_thread(
        request: ConversionRequest,
        threads: &Threads,
        bridge: Arc<Py<PyAny>>,
    ) -> BoxFuture<'static, Result<Vec<Value>, String>> {
        let (slots, pool) = (threads.slots.clone(), threads.pool.clone());
        Box::pin(async move {
            let Ok(_slot) = slots.acquire_owned().await else {
                return Err("the operator's threads are closed".into());
            };
            let answer = pool
                .run(move |py| {
                    let answer = conversion_dict(py, &request)
                        .and_then(|dict| bridge.call_method1(py, "convert_in_thread", (dict,)))
                        .and_then(|answer| parse_converted(answer.bind(py)));
                    answer.inspect_err(|error| error.print(py))
                })
                .await;
            match answer {
                Ok(Ok(converted)) => converted,
                Ok(Err(error)) => Err(format!("The conversion handlers failed: {error}")),
                Err(_) => Err("the conversion handlers' thread has failed".into()),
            }
        })
    }

    fn invoke_in_thread(
        invocation: Invocation,
        threads: &Threads,
        bridge: Arc<Py<PyAny>>,
        calls: Calls,
        indexing: Option<Indexing>,
    ) -> BoxFuture<'static, Invoked> {
        let (slots, pool) = (threads.slots.clone(), threads.pool.clone());
        let object = CallObject::of(&invocation);
        // The core's lines so far (e.g. "Throttling is over") are written before the call.
        let notes = calls.notes_queued();
        let endless = (invocation.daemon.as_ref()).is_some_and(|daemon| daemon.endless);
        let guard = calls.guard().filter(|_| !endless);
        let hold = endless.then(|| calls.hold()).flatten();
        let ending = hold.as_ref().map(Hold::ending);
        Box::pin(async move {
            let (_guard, _ending) = (guard, ending);
            calls.written(notes).await;
            let Ok(_slot) = slots.acquire_owned().await else {
                return bridge_failure("the operator's threads are closed".into());
            };
            let answer = pool
                .run(move |py| {
                    let answer = daemon_dict(py, &invocation, hold)
                        .and_then(|call| bridge.call_method1(py, "invoke_in_thread", (call,)))
                        .and_then(|answer| parse_answer(answer.bind(py), indexing.as_ref()));
                    answer.inspect_err(|error| error.print(py))
                })
                .await;
            match answer {
                Ok(Ok((invoked, said))) => {
                    object.say(said);
                    invoked
                }
                Ok(Err(error)) => bridge_failure(error.to_string()),
                Err(_) => bridge_failure("the handler's thread has failed".into()),
            }
        })
    }
}
