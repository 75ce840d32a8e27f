//! An object's queue (`Inbox`): the dispatcher puts its events in, its worker takes them out.

use crate::client::watching::RawEvent;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// An event in an object's queue, whether it is one of the initial listing's (to count
/// when it has been indexed), and a listed event's place in the listing's backlog.
pub(super) type Queued = (RawEvent, bool, Option<OwnedSemaphorePermit>);

/// An object's queue: the dispatcher puts its events in, its worker takes them out. Not a
/// channel: thousands of queues live at once after a listing, and a channel is ≈0.8 KB
/// before it holds anything (cache-padded halves, a block of 32 places), this ≈0.1 KB.
#[derive(Default)]
pub(super) struct Inbox {
    state: std::sync::Mutex<InboxState>,
    news: tokio::sync::Notify,
}

#[derive(Default)]
struct InboxState {
    events: std::collections::VecDeque<Queued>,
    /// Its worker takes no more (idle, gone, or the operator stops): put them elsewhere.
    closed: bool,
    /// When the oldest event still queued came (kept only while traces are on: their
    /// events' spans say how long it waited).
    since: Option<tokio::time::Instant>,
}

impl Inbox {
    fn state(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.state.lock().expect("not poisoned")
    }

    /// In, unless the inbox is closed: then the event comes back.
    pub(super) fn put(&self, item: Queued) -> Result<(), Queued> {
        let mut state = self.state();
        if state.closed {
            return Err(item);
        }
        if state.events.is_empty() && crate::traces::enabled() {
            state.since = Some(tokio::time::Instant::now());
        }
        state.events.push_back(item);
        drop(state);
        self.news.notify_one();
        Ok(())
    }

    /// Since when the events taken last had waited (if traces are on): forgotten once asked.
    pub(super) fn waited_since(&self) -> Option<tokio::time::Instant> {
        self.state().since.take()
    }

    /// The next event, waiting for it; `None` once the inbox is closed and empty.
    pub(super) async fn next(&self) -> Option<Queued> {
        loop {
            // A permit stays if nobody waits: an event put in meanwhile is not missed.
            let news = self.news.notified();
            {
                let mut state = self.state();
                if let Some(item) = state.events.pop_front() {
                    return Some(item);
                }
                if state.closed {
                    return None;
                }
            }
            news.await;
        }
    }

    /// Closed if nothing is queued (its idle worker is to end): whether nothing was.
    pub(super) fn close_if_empty(&self) -> bool {
        let mut state = self.state();
        let empty = state.events.is_empty();
        state.closed |= empty;
        empty
    }

    /// Whether events wait in it.
    pub(super) fn has_news(&self) -> bool {
        !self.state().events.is_empty()
    }

    /// The next event if there is one; none left: the room for them is given back.
    pub(super) fn try_next(&self) -> Option<Queued> {
        let mut state = self.state();
        let item = state.events.pop_front();
        if item.is_none() {
            state.events = Default::default();
        }
        item
    }

    pub(super) fn close(&self) {
        self.state().closed = true;
        self.news.notify_one();
    }
}

/// A worker's end of its inbox: closed when the worker ends, however it ends (events that
/// come later go to a successor).
pub(super) struct Receiving(pub(super) Arc<Inbox>);

impl Drop for Receiving {
    fn drop(&mut self) {
        self.0.close();
    }
}
