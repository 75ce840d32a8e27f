//! The core's tasks: each runs with the log subscriber of the operator that spawned it,
//! so that its lines reach that operator's Python loggers (several operators may run in
//! one process, each with its own), and with its redacted fields (`util::redaction`).
//! `tokio::spawn` is not used directly (clippy.toml).

use crate::util::redaction;
use std::future::Future;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tracing::instrument::WithSubscriber;

/// Spawn a task that keeps the current log subscriber (the operator's): `tokio::spawn` would lose it.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let future = redaction::carrying(redaction::current(), future);
    #[allow(clippy::disallowed_methods)] // the one place that may
    tokio::spawn(future.with_current_subscriber())
}

/// `set.spawn(future)`, with the current subscriber.
pub fn spawn_in<T, F>(set: &mut JoinSet<T>, future: F) -> AbortHandle
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let future = redaction::carrying(redaction::current(), future);
    #[allow(clippy::disallowed_methods)] // the one place that may
    set.spawn(future.with_current_subscriber())
}
