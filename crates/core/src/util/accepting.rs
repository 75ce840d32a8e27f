//! The one accept loop of every server of the core (metrics, liveness, health, webhooks, the
//! recording proxy): each connection in a task of its own; a failed `accept` (out of file
//! descriptors, say) is logged and paused on, never spun on.
//!
//! Uses: `logging`, `tasks`.

use crate::util::logging::ENGINE;
use crate::util::tasks;
use std::future::Future;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// How long to wait after a failed `accept` before the next: what failed (descriptors,
/// memory) is rarely back at once.
const PAUSE: Duration = Duration::from_millis(100);

/// Accept connections until the task is aborted, each served by `serve` in a task of its own;
/// `what` names the server in the warning about a failed `accept`.
pub fn accept<F, Fut>(
    listener: TcpListener,
    what: &'static str,
    serve: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tasks::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tasks::spawn(serve(stream));
                }
                Err(error) => {
                    tracing::warn!(target: ENGINE, "Cannot accept a {what} connection: {error}");
                    tokio::time::sleep(PAUSE).await;
                }
            }
        }
    })
}
