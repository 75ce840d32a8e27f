//! What a kind of webhook serves (admission's resources, conversion's CRDs): unknown until
//! the API is discovered, then replaced on every rescan; read by the reviews, watched by the
//! managed configurations, waited for by the server before it answers.

use tokio::sync::watch;

/// A value known once the API is discovered (and again after each rescan), awaited by those who need it.
pub struct Known<T> {
    value: watch::Sender<Option<T>>,
}

impl<T: Clone + Default> Known<T> {
    /// Not known yet.
    pub fn new() -> Self {
        Self {
            value: watch::channel(None).0,
        }
    }

    /// Known now (or anew).
    pub fn set(&self, value: T) {
        self.value.send_replace(Some(value));
    }

    /// As it is now (empty while unknown).
    pub fn get(&self) -> T {
        self.value.borrow().clone().unwrap_or_default()
    }

    /// Follow it.
    pub fn watch(&self) -> watch::Receiver<Option<T>> {
        self.value.subscribe()
    }

    /// Wait until it is known.
    pub async fn known(&self) {
        let mut value = self.value.subscribe();
        let _ = value.wait_for(Option::is_some).await;
    }
}

impl<T: Clone + Default> Default for Known<T> {
    fn default() -> Self {
        Self::new()
    }
}
