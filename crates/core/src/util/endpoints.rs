//! Plain HTTP/1 endpoints of the core (metrics, liveness, Skafos' health port): a bound
//! listener served in the background, each request answered by a function.

use crate::util::accepting;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::future::Future;
use tokio::net::TcpListener;

/// An endpoint's answer.
pub type Answer = Response<Full<Bytes>>;

/// Serve `listener` until the task is aborted; a connection's failure ends only it.
pub fn serve<F, Fut>(listener: TcpListener, respond: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    accepting::accept(listener, "HTTP endpoint", move |stream| {
        let respond = respond.clone();
        async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let answer = respond(request);
                async move { Ok::<_, std::convert::Infallible>(answer.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
}

/// A plain-text answer.
pub fn text(status: hyper::StatusCode, body: impl Into<Bytes>) -> Answer {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(body.into()))
        .expect("a valid response")
}
