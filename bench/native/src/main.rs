//! The bench's native engine: the bench's workloads (`bench/workloads/*.py`) written as a
//! kube-rs controller, to measure kopf-rs against what a Rust developer would write for the
//! same work. It takes `kopf run`'s arguments as the driver gives them (`run --standalone
//! [--quiet] -n NAMESPACE SCRIPT`) and runs the workload named by the script's file:
//!
//! - `lifecycles`: kube-runtime's `Controller` with its `finalizer()` helper, 32 reconciles
//!   at once; the object's handled generation kept in its status (the writes Kopf's protocol
//!   needs: the finalizer, a status write per change, the finalizer's removal); the same lines
//!   as the Python handlers print (`bench created NAME at T`, `bench updated`, `bench deleted`);
//! - `events`: a watcher, one line (`bench event`) per event of every object;
//! - `timers`: the `Controller` requeueing every object each second, each call's lateness
//!   (the gap since its previous call minus the interval) written at exit to `$BENCH_SAMPLES`.
//!
//! It stops on SIGTERM or SIGINT, as the driver stops every engine.

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::finalizer::{self, finalizer, Event};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const FINALIZER: &str = "bench.kopf.dev/native";
const CONCURRENCY: u16 = 32;
const INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("the API request failed: {0}")]
    Api(#[from] kube::Error),
}

/// What every reconcile shares: the API of the workload's objects, and the timers' samples.
struct Context {
    api: Api<DynamicObject>,
    /// Timers: each object's previous call, and the (when, lateness) pairs so far.
    timers: Mutex<(HashMap<String, f64>, Vec<f64>)>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A line for the driver, written at once (it counts them while the workload runs).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A creation or an update, once per generation: its line, then the generation handled.
async fn apply(object: Arc<DynamicObject>, context: &Context) -> Result<Action, Error> {
    let generation = object.metadata.generation.unwrap_or(0);
    let handled = object
        .data
        .pointer("/status/handled")
        .and_then(|v| v.as_i64());
    match handled {
        Some(handled) if handled >= generation => return Ok(Action::await_change()),
        Some(_) => say("bench updated"),
        None => say(&format!(
            "bench created {} at {:.6}",
            object.name_any(),
            now()
        )),
    }
    let patch = json!({"status": {"handled": generation}});
    let params = PatchParams::default();
    context
        .api
        .patch_status(&object.name_any(), &params, &Patch::Merge(&patch))
        .await?;
    Ok(Action::await_change())
}

async fn lifecycle(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, finalizer::Error<Error>> {
    let api = context.api.clone();
    finalizer(&api, FINALIZER, object, |event| async {
        match event {
            Event::Apply(object) => apply(object, &context).await,
            Event::Cleanup(_) => {
                say("bench deleted");
                Ok(Action::await_change())
            }
        }
    })
    .await
}

async fn tick(object: Arc<DynamicObject>, context: Arc<Context>) -> Result<Action, Error> {
    let at = now();
    let mut timers = context.timers.lock().expect("not poisoned");
    let (last, samples) = &mut *timers;
    if let Some(previous) = last.insert(object.name_any(), at) {
        samples.extend([at, at - previous - INTERVAL.as_secs_f64()]);
    }
    Ok(Action::requeue(INTERVAL))
}

fn retry<E>(_: Arc<DynamicObject>, _: &E, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// Runs a controller until the process is asked to stop.
async fn control<F, Fut, E>(
    api: Api<DynamicObject>,
    resource: ApiResource,
    context: Arc<Context>,
    reconcile: F,
) where
    F: FnMut(Arc<DynamicObject>, Arc<Context>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Action, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    Controller::new_with(api, watcher::Config::default(), resource)
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .graceful_shutdown_on(stopped())
        .run(reconcile, retry, context)
        .for_each(|_| async {})
        .await;
}

/// SIGTERM or SIGINT.
async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("a signal handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// `run --standalone [--quiet] -n NAMESPACE SCRIPT`: the namespace and the workload's name.
fn arguments() -> Result<(String, String), String> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("run") {
        return Err("usage: native-engine run [--standalone] [--quiet] -n NAMESPACE SCRIPT".into());
    }
    let (mut namespace, mut script) = (None, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--standalone" | "--quiet" => {}
            "-n" | "--namespace" => namespace = args.next(),
            other if other.starts_with('-') => return Err(format!("unknown option: {other}")),
            other => script = Some(PathBuf::from(other)),
        }
    }
    let namespace = namespace.ok_or("no namespace (-n)")?;
    let script = script.ok_or("no workload script")?;
    let workload = script
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or("no workload script")?;
    Ok((namespace, workload.to_owned()))
}

#[tokio::main]
async fn main() {
    let (namespace, workload) = arguments().unwrap_or_else(|problem| {
        eprintln!("native-engine: {problem}");
        std::process::exit(2);
    });
    let mut config = kube::Config::infer()
        .await
        .expect("a kubeconfig or the in-cluster config");
    // kube-rs sends no user agent of its own: the audit log tells the engines apart by it.
    let agent = http::HeaderValue::from_static("kube-rs/native-engine");
    config.headers.push((http::header::USER_AGENT, agent));
    let client = Client::try_from(config).expect("a client for the kubeconfig");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("demo.kopf.dev", "v1", "Greeting"));
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
    let context = Arc::new(Context {
        api: api.clone(),
        timers: Mutex::default(),
    });
    match workload.as_str() {
        "lifecycles" => control(api, resource, context, lifecycle).await,
        "timers" => {
            control(api, resource, context.clone(), tick).await;
            let samples = context.timers.lock().expect("not poisoned").1.clone();
            let path = std::env::var("BENCH_SAMPLES").expect("BENCH_SAMPLES: where the samples go");
            std::fs::write(path, json!(samples).to_string()).expect("the samples written");
        }
        "events" => {
            let events = watcher(api, watcher::Config::default()).take_until(stopped());
            events
                .for_each(|event| async move {
                    match event {
                        Ok(
                            watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                            | watcher::Event::InitApply(_),
                        ) => say("bench event"),
                        Ok(_) => {}
                        Err(error) => eprintln!("native-engine: the watch failed: {error}"),
                    }
                })
                .await
        }
        other => {
            eprintln!("native-engine: no native version of the workload {other:?}");
            std::process::exit(2);
        }
    }
}
