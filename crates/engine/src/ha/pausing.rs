//! The operator's pause: on while any voter says so — a peering object with a peer of a
//! higher or the same priority, or a Lease election not won (or not renewed in time).
//! While paused, the watch-streams stop and the daemons are stopped; queued events are
//! dropped (the streams list everything again on resuming). What was already running when
//! the pause came is counted (`busy()`), so that a shard is handed over only when it is quiet.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The operator's pause: paused while any voter (a peering, the election, the sharding) says so.
pub struct Pause {
    votes: Mutex<Vec<bool>>,
    switch: watch::Sender<bool>,
    /// A Lease holder's handling is valid until this moment (unless renewed): checked
    /// directly where handlers are called, so that a holder that was frozen (and has not
    /// noticed yet) does not act on an expired lease.
    valid_until: Mutex<Option<Instant>>,
    /// Handling in progress (processing cycles, handler and daemon calls).
    busy: watch::Sender<usize>,
}

/// One piece of handling in progress, counted while it lives.
pub struct Busy(Arc<Pause>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.send_modify(|count| *count -= 1);
    }
}

impl Pause {
    /// `voters` of them, each voting "paused" until it has looked around.
    pub fn new(voters: usize) -> Arc<Self> {
        Arc::new(Self {
            votes: Mutex::new(vec![true; voters]),
            switch: watch::channel(voters > 0).0,
            valid_until: Mutex::new(None),
            busy: watch::channel(0).0,
        })
    }

    /// Count this piece of handling as in progress until the guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.send_modify(|count| *count += 1);
        Busy(self.clone())
    }

    /// Nothing is being handled: what started before a pause has finished.
    pub(crate) fn is_quiet(&self) -> bool {
        *self.busy.borrow() == 0
    }

    /// Resolves once nothing is being handled.
    pub async fn quiet(&self) {
        let mut busy = self.busy.subscribe();
        let _ = busy.wait_for(|count| *count == 0).await;
    }

    /// Waits until nothing is being handled, for `period` at most: whether it is quiet.
    pub(crate) async fn quiet_within(&self, period: Duration) -> bool {
        tokio::time::timeout(period, self.quiet()).await.is_ok()
    }

    /// Whether the operator is paused now (by its voters; the lease's validity aside).
    pub fn is_paused(&self) -> bool {
        *self.switch.borrow()
    }

    /// Follow the pause: `true` while paused.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.switch.subscribe()
    }

    /// A voter says whether it wants the operator paused.
    pub fn vote(&self, voter: usize, paused: bool) {
        let mut votes = self.votes.lock().expect("not poisoned");
        if let Some(vote) = votes.get_mut(voter) {
            *vote = paused;
        }
        let any = votes.iter().any(|v| *v);
        self.switch.send_if_modified(|current| {
            let changed = *current != any;
            *current = any;
            changed
        });
    }

    /// The Lease voter: leading until this moment (`None`: not leading).
    pub(crate) fn lead_until(&self, voter: usize, until: Option<Instant>) {
        *self.valid_until.lock().expect("not poisoned") = until;
        self.vote(voter, until.is_none());
    }

    /// May handlers run now?
    pub fn is_active(&self) -> bool {
        let valid = self
            .valid_until
            .lock()
            .expect("not poisoned")
            .is_none_or(|until| Instant::now() < until);
        valid && !*self.switch.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_holds_while_any_peering_says_so() {
        let pause = Pause::new(2);
        let switch = pause.subscribe();
        assert!(*switch.borrow(), "paused until the peers are known");
        pause.vote(0, false);
        assert!(*switch.borrow());
        pause.vote(1, false);
        assert!(!*switch.borrow());
        pause.vote(1, true);
        assert!(*switch.borrow());
        assert!(
            !*Pause::new(0).subscribe().borrow(),
            "no peering: never paused"
        );
    }

    #[test]
    fn handling_in_progress_is_counted_until_it_ends() {
        let pause = Pause::new(1);
        assert!(pause.is_quiet());
        let first = pause.busy();
        let second = pause.busy();
        drop(first);
        assert!(!pause.is_quiet());
        drop(second);
        assert!(pause.is_quiet());
    }

    #[tokio::test]
    async fn the_quiet_is_awaited() {
        let pause = Pause::new(1);
        let busy = pause.busy();
        let waiting = crate::util::tasks::spawn({
            let pause = pause.clone();
            async move { pause.quiet().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(busy);
        waiting.await.expect("resolved once quiet");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_holder_is_active_only_until_its_deadline() {
        let pause = Pause::new(1);
        assert!(!pause.is_active());
        pause.lead_until(0, Some(Instant::now() + std::time::Duration::from_secs(10)));
        assert!(pause.is_active());
        tokio::time::advance(std::time::Duration::from_secs(11)).await;
        assert!(
            !pause.is_active(),
            "past the deadline, even before the vote"
        );
        pause.lead_until(0, None);
        assert!(*pause.subscribe().borrow());
    }
}
