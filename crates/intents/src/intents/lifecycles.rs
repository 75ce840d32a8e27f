//! Lifecycles: which of the awakened handlers of a cause run in this cycle, and in which
//! order (Kopf's `kopf.lifecycles`). The built-in ones are decided here; an operator's own
//! function is asked in Python.

use rand::seq::{IndexedRandom, SliceRandom};
use serde::Deserialize;

/// Which of the handlers of a cause run in one cycle (`kopf.lifecycles`), by Kopf's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// All of them, in the order of registration.
    AllAtOnce,
    /// The first of them.
    OneByOne,
    /// One of them, at random.
    Randomized,
    /// All of them, in a random order.
    Shuffled,
    /// One of them, the least retried first (Kopf's default).
    #[default]
    Asap,
    /// The operator's own function, called in Python.
    Custom,
}

impl Lifecycle {
    /// The handlers (of the awakened ones, in the order of registration) to run now; `None`
    /// for a custom lifecycle, which only Python can answer.
    pub fn plan<T: Copy>(&self, awakened: Vec<T>, retries: impl Fn(T) -> u64) -> Option<Vec<T>> {
        let mut handlers = awakened;
        Some(match self {
            Lifecycle::AllAtOnce => handlers,
            Lifecycle::OneByOne => handlers.into_iter().take(1).collect(),
            Lifecycle::Randomized => {
                let chosen = handlers.choose(&mut rand::rng()).copied();
                chosen.into_iter().collect()
            }
            Lifecycle::Shuffled => {
                handlers.shuffle(&mut rand::rng());
                handlers
            }
            Lifecycle::Asap => {
                // A stable sort: of equally retried ones, the first registered.
                handlers.sort_by_key(|h| retries(*h));
                handlers.into_iter().take(1).collect()
            }
            Lifecycle::Custom => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::progression::{Outcome, State};
    use chrono::Utc;

    fn ids(plan: Option<Vec<&String>>) -> Vec<String> {
        plan.unwrap().into_iter().cloned().collect()
    }

    #[test]
    fn the_built_in_lifecycles_pick_as_kopf_does() {
        let now = Utc::now();
        let all: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let failed = Outcome {
            final_: false,
            delay: Some(0.0),
            exception: Some("boo".into()),
            ..Default::default()
        };
        let state = State::default()
            .with_purpose("create", &[])
            .with_handlers(&all, now)
            .with_outcome("a", &failed, now);
        let handlers: Vec<&String> = all.iter().collect();
        let retries = |h: &String| state.get(h).map_or(0, |s| s.retries);
        let plan = |l: Lifecycle| ids(l.plan(handlers.clone(), retries));
        assert_eq!(plan(Lifecycle::AllAtOnce), ["a", "b", "c"]);
        assert_eq!(plan(Lifecycle::OneByOne), ["a"]);
        assert_eq!(
            plan(Lifecycle::Asap),
            ["b"],
            "the least retried, then the first"
        );
        assert_eq!(plan(Lifecycle::Randomized).len(), 1);
        let mut shuffled = plan(Lifecycle::Shuffled);
        shuffled.sort();
        assert_eq!(shuffled, ["a", "b", "c"]);
        assert!(Lifecycle::Custom.plan(handlers, retries).is_none());
    }
}
