//! Pauses between retries as Kopf's settings give them (`networking.error_backoffs`,
//! `queueing.error_delays`, `posting.*_backoffs`, `backoffs=`): a list, read once, or any
//! iterable, read one pause at a time when a retry needs one. Kopf starts a new iteration
//! (`iter()`) at each use, so an endless iterable means endless retries, and an object whose
//! `__iter__` yields for ever (a common infinite backoff) is never turned into a list.
//!
//! The iterables are the binding's (`PauseSource`): this layer holds no Python value.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

/// Pauses in seconds, as a setting gives them.
#[derive(Clone)]
pub enum Pauses {
    /// A list (a number is a list of one): the same pauses at every use.
    Listed(Arc<[f64]>),
    /// An iterable read lazily: a new run of it at every use.
    Drawn(Drawn),
}

/// An iterable of pauses that the binding keeps (its index among the operator's objects).
#[derive(Clone)]
pub struct Drawn {
    /// Its index among the Python objects the spec refers to.
    pub index: usize,
    /// Its length if it has one (Kopf's logs number the attempts "#2/9"; else "#2").
    pub count: Option<usize>,
    /// Where it is set, for the errors it raises (`settings.networking.error_backoffs`).
    pub name: String,
    /// The iterable itself, once the binding has attached it.
    source: Option<Arc<dyn PauseSource>>,
}

/// An iterable of pauses: each run is a new iteration of it.
pub trait PauseSource: Send + Sync {
    /// A new iteration (Python's `iter()`).
    fn run(&self) -> Box<dyn PauseRun>;
}

/// One iteration of a source.
pub trait PauseRun: Send {
    /// The next pause, or none when the iteration is over (or failed: the source says why).
    fn next_pause(&mut self) -> Option<f64>;
}

/// Where the binding finds the iterables that `Drawn` pauses refer to.
pub trait PauseSources {
    /// The iterable at `index` (Drawn's), named `name` for its errors.
    fn source(&self, index: usize, name: &str) -> Option<Arc<dyn PauseSource>>;
}

/// A drawn setting whose iterable the binding did not give.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{name}: no iterable at index {index} to take the pauses from")]
pub struct Unattached {
    /// The setting.
    pub name: String,
    /// The index it referred to.
    pub index: usize,
}

impl Pauses {
    /// A list of pauses.
    pub fn listed(pauses: &[f64]) -> Self {
        Self::Listed(pauses.into())
    }

    /// Give a drawn setting its iterable, as the binding finds it.
    pub fn attach(&mut self, sources: &dyn PauseSources) -> Result<(), Unattached> {
        if let Self::Drawn(drawn) = self {
            if drawn.source.is_none() {
                drawn.source = sources.source(drawn.index, &drawn.name);
            }
            if drawn.source.is_none() {
                return Err(Unattached {
                    name: drawn.name.clone(),
                    index: drawn.index,
                });
            }
        }
        Ok(())
    }

    /// How many attempts they allow in all (retries and the first), if that is known.
    pub fn attempts(&self) -> Option<usize> {
        match self {
            Self::Listed(pauses) => Some(pauses.len() + 1),
            Self::Drawn(drawn) => drawn.count.map(|count| count + 1),
        }
    }

    /// A new run of them, from the first.
    pub fn run(&self) -> Run {
        match self {
            Self::Listed(pauses) => Run::Listed {
                pauses: pauses.clone(),
                at: 0,
            },
            Self::Drawn(drawn) => match &drawn.source {
                Some(source) => Run::Drawn(source.run()),
                None => Run::Listed {
                    pauses: Arc::from([]),
                    at: 0,
                },
            },
        }
    }
}

/// One run of pauses: `next()` gives each in turn, as a number of seconds that a timer takes
/// (never negative, never beyond a century: Kopf's `asyncio.sleep` takes those as "no pause"
/// and "for ever").
pub enum Run {
    /// Of a list.
    Listed {
        /// The list.
        pauses: Arc<[f64]>,
        /// The next one's position.
        at: usize,
    },
    /// Of an iterable.
    Drawn(Box<dyn PauseRun>),
}

impl Iterator for Run {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let pause = match self {
            Self::Listed { pauses, at } => {
                let pause = pauses.get(*at).copied();
                *at += 1;
                pause
            }
            Self::Drawn(run) => run.next_pause(),
        }?;
        const CENTURY: f64 = 100.0 * 365.0 * 24.0 * 3600.0;
        Some(if pause.is_nan() || pause < 0.0 {
            0.0
        } else {
            pause.min(CENTURY)
        })
    }
}

impl Default for Pauses {
    fn default() -> Self {
        Self::listed(&[])
    }
}

impl fmt::Debug for Pauses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Listed(pauses) => f.debug_list().entries(pauses.iter()).finish(),
            Self::Drawn(drawn) => write!(f, "<drawn from {}>", drawn.name),
        }
    }
}

/// The JSON forms: a list of numbers, or `{"drawn": index, "count": n, "name": "..."}`.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum Form {
    Listed(Vec<f64>),
    Drawn {
        drawn: usize,
        #[serde(default)]
        count: Option<usize>,
        name: String,
    },
}

impl<'de> Deserialize<'de> for Pauses {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Form::deserialize(deserializer)? {
            Form::Listed(pauses) => Self::Listed(pauses.into()),
            Form::Drawn { drawn, count, name } => Self::Drawn(Drawn {
                index: drawn,
                count,
                name,
                source: None,
            }),
        })
    }
}

impl Serialize for Pauses {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Listed(pauses) => Form::Listed(pauses.to_vec()),
            Self::Drawn(drawn) => Form::Drawn {
                drawn: drawn.index,
                count: drawn.count,
                name: drawn.name.clone(),
            },
        }
        .serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// 1, 2, 4, ... for ever, counting its runs.
    struct Doubling(AtomicUsize);

    struct DoublingRun(f64);

    impl PauseSource for Doubling {
        fn run(&self) -> Box<dyn PauseRun> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::new(DoublingRun(1.0))
        }
    }

    impl PauseRun for DoublingRun {
        fn next_pause(&mut self) -> Option<f64> {
            let pause = self.0;
            self.0 *= 2.0;
            Some(pause)
        }
    }

    struct Sources(Arc<Doubling>);

    impl PauseSources for Sources {
        fn source(&self, index: usize, _: &str) -> Option<Arc<dyn PauseSource>> {
            (index == 0).then(|| self.0.clone() as Arc<dyn PauseSource>)
        }
    }

    #[test]
    fn a_list_is_the_same_at_every_run_and_ends() {
        let pauses: Pauses = serde_json::from_str("[1, 2.5, -3]").expect("a list");
        assert_eq!(pauses.attempts(), Some(4));
        assert_eq!(pauses.run().collect::<Vec<_>>(), [1.0, 2.5, 0.0]);
        assert_eq!(pauses.run().collect::<Vec<_>>(), [1.0, 2.5, 0.0]);
    }

    #[test]
    fn an_endless_iterable_is_read_only_as_far_as_needed_and_anew_at_each_run() {
        let json = r#"{"drawn": 0, "count": null, "name": "settings.networking.error_backoffs"}"#;
        let mut pauses: Pauses = serde_json::from_str(json).expect("drawn");
        assert_eq!(pauses.attempts(), None);
        let doubling = Arc::new(Doubling(AtomicUsize::new(0)));
        pauses.attach(&Sources(doubling.clone())).expect("attached");
        let taken: Vec<f64> = pauses.run().take(5).collect();
        assert_eq!(taken, [1.0, 2.0, 4.0, 8.0, 16.0]);
        assert_eq!(pauses.run().next(), Some(1.0));
        assert_eq!(doubling.0.load(Ordering::SeqCst), 2);
        assert!(pauses
            .run()
            .nth(1000)
            .is_some_and(|p| p > 1e9 && p.is_finite()));
    }

    #[test]
    fn a_drawn_setting_without_its_iterable_is_refused() {
        let json = r#"{"drawn": 3, "name": "settings.queueing.error_delays"}"#;
        let mut pauses: Pauses = serde_json::from_str(json).expect("drawn");
        let error = pauses
            .attach(&Sources(Arc::new(Doubling(AtomicUsize::new(0)))))
            .expect_err("no source 3");
        assert_eq!(
            error.to_string(),
            "settings.queueing.error_delays: no iterable at index 3 to take the pauses from"
        );
    }
}
