//! The API client and the credentials behind it. When the server answers 401
//! (an expired token, a rotated certificate), the login handlers are asked
//! again — once, however many requests failed at the same time — and a new
//! client replaces the old one for every request from then on.

use crate::client::connection::{self, ConnectionError, ConnectionInfo};
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::sync::{Arc, RwLock};

/// One-shot requests in flight at once (watches are not counted). Each needs a TLS
/// connection of its own (HTTP/1.1), kept in the client's pool afterwards: unbounded,
/// a burst of a thousand objects left a thousand connections and 60 MiB behind, while a
/// few dozen already saturate an API server.
const MAX_CONCURRENT_REQUESTS: usize = 32;

/// Runs the login handlers again; their best connection, or why there is none.
pub type Login =
    Arc<dyn Fn() -> BoxFuture<'static, Result<ConnectionInfo, LoginError>> + Send + Sync>;

/// The login handlers gave no usable connection (their own account of why).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoginError(pub String);

/// Why the credentials could not be renewed after a 401.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("the credentials cannot be renewed: there are no login handlers")]
    NotRenewable,
    #[error("re-login failed: {0}")]
    Login(#[from] LoginError),
    #[error(transparent)]
    Connection(#[from] ConnectionError),
}

pub struct Credentials {
    /// The client with its generation (how many times it was renewed).
    current: RwLock<(u64, kube::Client)>,
    renewing: tokio::sync::Mutex<()>,
    requests: tokio::sync::Semaphore,
    login: Option<Login>,
    request_timeout: Option<f64>,
    connect_timeout: Option<f64>,
}

pub fn is_unauthorized(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 401)
}

impl Credentials {
    pub fn new(
        client: kube::Client,
        login: Option<Login>,
        request_timeout: Option<f64>,
        connect_timeout: Option<f64>,
    ) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new((0, client)),
            renewing: tokio::sync::Mutex::new(()),
            requests: tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS),
            login,
            request_timeout,
            connect_timeout,
        })
    }

    /// A fixed client that is never renewed (for tests and tools).
    pub fn fixed(client: kube::Client) -> Arc<Self> {
        Self::new(client, None, None, None)
    }

    pub fn client(&self) -> (u64, kube::Client) {
        self.current.read().expect("not poisoned").clone()
    }

    /// Log in again, unless another request has already done so since `generation` failed.
    pub async fn renew(&self, generation: u64) -> Result<(), RenewError> {
        let _one_at_a_time = self.renewing.lock().await;
        if self.client().0 != generation {
            return Ok(());
        }
        let login = self.login.as_ref().ok_or(RenewError::NotRenewable)?;
        let info = login().await?;
        let client = connection::client(&info, self.request_timeout, self.connect_timeout).await?;
        let mut current = self.current.write().expect("not poisoned");
        *current = (current.0 + 1, client);
        Ok(())
    }

    /// Make a request; if it is refused as unauthorized, renew the credentials and retry once.
    pub async fn call<T, F, Fut>(&self, request: F) -> Result<T, kube::Error>
    where
        F: Fn(kube::Client) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let (generation, client) = self.client();
        match request(client).await {
            Err(error) if is_unauthorized(&error) && self.login.is_some() => {
                if self.renew(generation).await.is_err() {
                    return Err(error);
                }
                request(self.client().1).await
            }
            other => other,
        }
    }
}

fn request(
    method: http::Method,
    url: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    let mut builder = http::Request::builder().method(method).uri(url);
    if let Some(content_type) = content_type {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    builder.body(body).map_err(kube::Error::HttpError)
}

fn json_bytes(value: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("JSON values serialise")
}

/// The requests the engine makes, each renewing the credentials on a 401.
impl Credentials {
    pub async fn get(&self, url: &str) -> Result<serde_json::Value, kube::Error> {
        let _slot = self.requests.acquire().await.expect("never closed");
        self.call(|client| async move {
            client
                .request(request(http::Method::GET, url, None, Vec::new())?)
                .await
        })
        .await
    }

    /// A watch request: the stream of its events (opening it is what can be refused).
    pub async fn watch(
        &self,
        url: &str,
    ) -> Result<
        impl futures::Stream<Item = Result<kube::core::WatchEvent<serde_json::Value>, kube::Error>>,
        kube::Error,
    > {
        self.call(|client| async move {
            client
                .request_events::<serde_json::Value>(request(
                    http::Method::GET,
                    url,
                    None,
                    Vec::new(),
                )?)
                .await
        })
        .await
    }

    /// Merge-patch an object; the response is read as `T` (a whole `Value`, or only the
    /// fields the caller needs: parsing whole objects for every patch is costly).
    pub async fn merge_patch<T: DeserializeOwned>(
        &self,
        url: &str,
        patch: &serde_json::Value,
    ) -> Result<T, kube::Error> {
        self.send(
            http::Method::PATCH,
            url,
            "application/merge-patch+json",
            patch,
        )
        .await
    }

    /// Replace an object; its `metadata.resourceVersion` makes it a compare-and-swap.
    pub async fn put(
        &self,
        url: &str,
        object: &serde_json::Value,
    ) -> Result<serde_json::Value, kube::Error> {
        self.send(http::Method::PUT, url, "application/json", object)
            .await
    }

    pub async fn post(
        &self,
        url: &str,
        object: &serde_json::Value,
    ) -> Result<serde_json::Value, kube::Error> {
        self.send(http::Method::POST, url, "application/json", object)
            .await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: http::Method,
        url: &str,
        content_type: &str,
        payload: &serde_json::Value,
    ) -> Result<T, kube::Error> {
        let _slot = self.requests.acquire().await.expect("never closed");
        self.call(|client| {
            let method = method.clone();
            async move {
                let body = json_bytes(payload);
                client
                    .request(request(method, url, Some(content_type), body)?)
                    .await
            }
        })
        .await
    }
}
