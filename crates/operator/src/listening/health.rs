//! Skafos' health port: `GET /healthz` (and `/`) answers 200 while the event stream is
//! healthy and 503 when it is not — disconnected from the API server for longer than the
//! watch timeout. A replica that is not leading has no stream: its health is that of its
//! election's requests.

use crate::client::watching::StreamHealth;
use crate::ha::pausing::Pause;
use crate::util::endpoints::{self, Answer};
use hyper::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// What the health checks report on: the stream, the election, the pause.
#[derive(Clone)]
pub struct Health {
    /// The stream's connection.
    pub stream: Arc<StreamHealth>,
    /// The election's requests, if electing.
    pub election: Option<Arc<StreamHealth>>,
    /// The pause: a replica that waits for the lock is healthy.
    pub pause: Arc<Pause>,
    /// How long the stream may be disconnected before the check fails.
    pub grace: Duration,
}

impl Health {
    /// Healthy or not, and why, as a line of text.
    pub fn check(&self) -> (bool, &'static str) {
        match &self.election {
            Some(election) if !self.pause.is_active() => match election.is_healthy(self.grace) {
                true => (true, "ok: waiting to lead"),
                false => (
                    false,
                    "unhealthy: the API server does not answer the election",
                ),
            },
            _ => match self.stream.is_healthy(self.grace) {
                true => (true, "ok"),
                false => (false, "unhealthy: the event stream is disconnected"),
            },
        }
    }
}

/// Serve the port (bound already: a taken port fails the start) in the background.
pub fn serve(listener: TcpListener, health: Health) -> tokio::task::JoinHandle<()> {
    endpoints::serve(listener, move |request| {
        let answer = respond(request.method(), request.uri().path(), &health);
        std::future::ready(answer)
    })
}

fn respond(method: &Method, path: &str, health: &Health) -> Answer {
    if method != Method::GET || !matches!(path, "/" | "/healthz") {
        return endpoints::text(StatusCode::NOT_FOUND, "Not Found: see /healthz\n");
    }
    let (healthy, why) = health.check();
    let status = match healthy {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    endpoints::text(status, format!("{why}\n"))
}
