//! In-memory indices (`@kopf.index`): the operator's indices by id, their keys and
//! values kept here (converted to Python only when a handler reads them), and the gate that
//! holds the handlers back until every indexed resource's initial listing is indexed.
//! The engine fills them (`engine::indexing`); the binding reads them.
//!
//! Uses: `util`.

pub mod datum;
pub mod index;

use datum::Strings;
use index::Index;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

/// All indices of an operator, by the index's id.
#[derive(Default)]
pub struct Indices {
    by_id: Mutex<HashMap<String, Arc<RwLock<Index>>>>,
    /// Strings shared by all keys and values.
    pub strings: Strings,
    /// Whether every indexed resource has been listed once (handlers wait for it).
    pub readiness: Readiness,
}

impl Indices {
    /// The index of this id (created empty on first use: handlers see it before it fills).
    pub fn index(&self, id: &str) -> Arc<RwLock<Index>> {
        let mut by_id = self.by_id.lock().expect("not poisoned");
        by_id.entry(id.to_owned()).or_default().clone()
    }

    /// The indices' ids.
    pub fn ids(&self) -> Vec<String> {
        self.by_id
            .lock()
            .expect("not poisoned")
            .keys()
            .cloned()
            .collect()
    }
}

/// The indexed streams whose initial listing is not indexed yet: handlers wait for none.
pub struct Readiness {
    pending: watch::Sender<usize>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            pending: watch::channel(0).0,
        }
    }
}

impl Readiness {
    /// One more stream to wait for (registered before any stream starts).
    pub fn expect(&self) {
        self.pending.send_modify(|n| *n += 1);
    }

    /// One stream's initial listing is indexed.
    pub fn done(&self) {
        self.pending.send_modify(|n| *n = n.saturating_sub(1));
    }

    /// Whether every indexed resource has been listed once.
    pub fn is_ready(&self) -> bool {
        *self.pending.borrow() == 0
    }

    /// Wait until every indexed stream has indexed its initial listing.
    pub async fn wait(&self) {
        let mut pending = self.pending.subscribe();
        let _ = pending.wait_for(|n| *n == 0).await;
    }
}

/// One indexed stream's initial listing: ready when it is complete and every listed object
/// has been indexed (its events go to workers, which index them concurrently).
pub struct InitialListing {
    indices: Arc<Indices>,
    pending: AtomicUsize,
    complete: AtomicBool,
    reported: AtomicBool,
}

impl InitialListing {
    /// Registered before the stream starts: the handlers wait for it from then on.
    pub fn expect(indices: &Arc<Indices>) -> Arc<Self> {
        indices.readiness.expect();
        Arc::new(Self {
            indices: indices.clone(),
            pending: AtomicUsize::new(0),
            complete: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        })
    }

    /// Is the listing still coming (is this listed object one to wait for)?
    pub fn is_listing(&self) -> bool {
        !self.complete.load(Ordering::SeqCst)
    }

    /// A listed object is on its way to be indexed.
    pub fn listed(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// Listed objects have been indexed (or dropped while paused: they are listed again).
    pub fn indexed(&self, count: usize) {
        if count > 0 {
            self.pending.fetch_sub(count, Ordering::SeqCst);
            self.check();
        }
    }

    /// Every object of the listing has been sent.
    pub fn completed(&self) {
        self.complete.store(true, Ordering::SeqCst);
        self.check();
    }

    /// The stream has ended before its listing was complete (its resource is gone, or the
    /// operator stops): nothing to wait for anymore.
    pub fn abandon(&self) {
        if !self.reported.swap(true, Ordering::SeqCst) {
            self.indices.readiness.done();
        }
    }

    fn check(&self) {
        let done = self.complete.load(Ordering::SeqCst) && self.pending.load(Ordering::SeqCst) == 0;
        if done && !self.reported.swap(true, Ordering::SeqCst) {
            self.indices.readiness.done();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn handlers_wait_for_every_indexed_stream() {
        let readiness = Readiness::default();
        assert!(readiness.is_ready(), "no indices: nothing to wait for");
        readiness.expect();
        readiness.expect();
        let waiting = tokio::time::timeout(std::time::Duration::from_secs(1), readiness.wait());
        assert!(waiting.await.is_err());
        readiness.done();
        assert!(!readiness.is_ready());
        readiness.done();
        readiness.wait().await;
    }
}
