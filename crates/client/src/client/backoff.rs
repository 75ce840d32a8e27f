//! How long to pause before trying again what failed: by the settings' list of pauses
//! (`settings.networking.error_backoffs`), or doubling with jitter for what retries for ever
//! (watch-streams); and never sooner than a throttling server asked.
//!
//! Uses: nothing but `kube`'s errors and `rand`.

use rand::Rng;

/// The pause after the `failures`-th failure (1 for the first) by a list of pauses; none when
/// the list is used up (the caller gives up).
pub fn listed(backoffs: &[f64], failures: usize) -> Option<f64> {
    backoffs.get(failures.checked_sub(1)?).copied()
}

/// The same for what never gives up: the list's last pause, again and again (1 s if empty).
pub fn listed_for_ever(backoffs: &[f64], failures: usize) -> f64 {
    let at = failures
        .saturating_sub(1)
        .min(backoffs.len().saturating_sub(1));
    backoffs.get(at).copied().unwrap_or(1.0)
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
    fn pauses_by_the_list_end_or_repeat() {
        let list = [1.0, 2.0, 5.0];
        let taken: Vec<Option<f64>> = (1..=4).map(|n| listed(&list, n)).collect();
        assert_eq!(taken, [Some(1.0), Some(2.0), Some(5.0), None]);
        let repeated: Vec<f64> = (1..=4).map(|n| listed_for_ever(&list, n)).collect();
        assert_eq!(repeated, [1.0, 2.0, 5.0, 5.0]);
        assert_eq!(listed_for_ever(&[], 3), 1.0);
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
