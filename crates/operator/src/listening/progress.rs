//! How far the listeners got: each delivered event has a number; the handled version is
//! that of the last event before which every event was handled (listeners run in parallel
//! threads, so events finish out of order). A leader records it in its lock, and the next
//! leader resumes the stream from it: nothing is delivered twice, nothing skipped.

use std::collections::VecDeque;
use std::sync::Mutex;

/// The listeners' progress: the numbers of the events delivered and those handled.
#[derive(Debug, Default)]
pub struct Progress {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// The first number of the current term: older events are not to be handled.
    term: u64,
    pending: VecDeque<Pending>,
    handled: Option<String>,
}

#[derive(Debug)]
struct Pending {
    number: u64,
    version: Option<String>,
    done: bool,
}

impl Progress {
    /// A new term of leading (or the only one), resumed from this handled version.
    pub(crate) fn begin_term(&self, handled: Option<String>) {
        let mut state = self.state.lock().expect("not poisoned");
        state.term = state.next;
        state.pending.clear();
        state.handled = handled;
    }

    /// Number an event being delivered (of this object version, if it has one).
    pub(crate) fn issue(&self, version: Option<String>) -> u64 {
        let mut state = self.state.lock().expect("not poisoned");
        let number = state.next;
        state.next += 1;
        state.pending.push_back(Pending {
            number,
            version,
            done: false,
        });
        number
    }

    /// Whether an event belongs to the current term.
    pub(crate) fn is_current(&self, number: u64) -> bool {
        number >= self.state.lock().expect("not poisoned").term
    }

    /// The listeners are done with an event (an unknown or old number changes nothing).
    pub fn done(&self, number: u64) {
        let mut state = self.state.lock().expect("not poisoned");
        let found = (state.pending).binary_search_by_key(&number, |pending| pending.number);
        if let Ok(index) = found {
            state.pending[index].done = true;
        }
        while state.pending.front().is_some_and(|pending| pending.done) {
            let finished = state.pending.pop_front().expect("checked");
            if finished.version.is_some() {
                state.handled = finished.version;
            }
        }
    }

    /// The handled version: that of the last event before which every event was handled.
    pub fn handled(&self) -> Option<String> {
        self.state.lock().expect("not poisoned").handled.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(progress: &Progress, versions: &[&str]) -> Vec<u64> {
        (versions.iter())
            .map(|v| progress.issue(Some((*v).to_owned())))
            .collect()
    }

    #[test]
    fn the_handled_version_waits_for_every_earlier_event() {
        let progress = Progress::default();
        progress.begin_term(Some("5".into()));
        let numbers = issued(&progress, &["7", "8", "9"]);
        progress.done(numbers[1]);
        assert_eq!(progress.handled().as_deref(), Some("5"));
        progress.done(numbers[0]);
        assert_eq!(progress.handled().as_deref(), Some("8"));
        let error = progress.issue(None);
        progress.done(numbers[2]);
        assert_eq!(progress.handled().as_deref(), Some("9"));
        progress.done(error);
        assert_eq!(progress.handled().as_deref(), Some("9"));
    }

    #[test]
    fn a_new_term_forgets_the_old_events() {
        let progress = Progress::default();
        progress.begin_term(None);
        let old = issued(&progress, &["7", "8"]);
        progress.begin_term(Some("10".into()));
        assert!(!progress.is_current(old[0]));
        progress.done(old[0]);
        progress.done(old[1]);
        assert_eq!(progress.handled().as_deref(), Some("10"));
        let new = issued(&progress, &["11"]);
        assert!(progress.is_current(new[0]));
        progress.done(new[0]);
        assert_eq!(progress.handled().as_deref(), Some("11"));
    }
}
