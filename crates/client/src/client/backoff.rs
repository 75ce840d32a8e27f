//! How long to pause before trying again what failed: by the settings' pauses
//! (`settings.networking.error_backoffs`, `settings.queueing.error_delays`), or doubling with
//! jitter for what retries for ever (watch-streams); and never sooner than a throttling server
//! asked.
//!
//! Uses: `settings` (the pauses), `kube`'s errors and `rand`.

use crate::settings::pauses::{Pauses, Run};
use rand::Rng;

/// Pauses for what never gives up (Kopf's throttler): the settings' pauses in turn, then the
/// last one again and again. Started at the first failure of a row, dropped at a success.
pub struct ForEver {
    run: Option<Run>,
    last: Option<f64>,
}

impl ForEver {
    /// A new row of failures.
    pub fn new(pauses: &Pauses) -> Self {
        Self {
            run: Some(pauses.run()),
            last: None,
        }
    }

    /// The pause after the next failure; none if the pauses gave none at all.
    pub fn next_pause(&mut self) -> Option<f64> {
        // An iteration that ended is not asked again (an iterable's `next()` takes the GIL).
        match self.run.as_mut().and_then(Iterator::next) {
            Some(pause) => self.last = Some(pause),
            None => self.run = None,
        }
        self.last
    }
}

/// Doubling from 1 s to `max` with the `failures`, each a random half to whole of it (so that
/// many watchers that failed together do not come back together).
pub fn doubling(failures: u32, max: f64) -> f64 {
    let ceiling = (0.5 * 2f64.powi(failures.min(16) as i32)).min(max);
    rand::rng().random_range(ceiling / 2.0..=ceiling)
}

/// When a throttled (429) or unavailable (503) server asks to be called again: its Status's
/// `retryAfterSeconds`, or its `Retry-After` header (the transport keeps it there).
pub fn retry_after(error: &kube::Error) -> Option<f64> {
    match error {
        kube::Error::Api(status) if matches!(status.code, 429 | 503) => (status.details.as_ref())
            .map(|details| details.retry_after_seconds)
            .filter(|seconds| *seconds > 0)
            .map(f64::from),
        _ => None,
    }
}

/// The pause, or the server's own wish when it is longer (or always, if `enforced`).
pub fn honouring(pause: f64, error: &kube::Error, enforced: bool) -> f64 {
    match retry_after(error) {
        Some(asked) if enforced || asked > pause => asked,
        _ => pause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_for_ever_repeat_the_last() {
        let mut row = ForEver::new(&Pauses::listed(&[1.0, 2.0, 5.0]));
        let repeated: Vec<Option<f64>> = (1..=4).map(|_| row.next_pause()).collect();
        assert_eq!(repeated, [Some(1.0), Some(2.0), Some(5.0), Some(5.0)]);
        assert_eq!(ForEver::new(&Pauses::listed(&[])).next_pause(), None);
    }

    #[test]
    fn doubling_pauses_grow_to_the_cap_with_jitter() {
        for failures in 1u32..40 {
            let ceiling = (0.5 * 2f64.powi(failures.min(16) as i32)).min(30.0);
            let pause = doubling(failures, 30.0);
            assert!(
                (ceiling / 2.0..=ceiling).contains(&pause),
                "{failures}: {pause}"
            );
        }
    }
}
