//! A token bucket: so many starts per second on average, a burst of them at once. Each take
//! reserves the next free slot and says how long until it (as golang's `rate.Limiter` does
//! with reservations), so a caller waits in its own timer rather than in a queue here.

use std::sync::Mutex;
use std::time::Instant;

/// `rate` tokens a second, up to `burst` saved; none (a rate of zero or less): no limit.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    /// Tokens now (below zero: reserved ahead), as of when.
    state: Mutex<(f64, Option<Instant>)>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: f64) -> Self {
        let burst = burst.max(1.0);
        Self {
            rate,
            burst,
            state: Mutex::new((burst, None)),
        }
    }

    /// Take a token at `now`: seconds until it is there (zero if it is).
    pub fn take(&self, now: Instant) -> f64 {
        if self.rate.is_nan() || self.rate <= 0.0 || self.rate.is_infinite() {
            return 0.0;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, since) = *state;
        let refilled = since.map_or(0.0, |since| {
            now.saturating_duration_since(since).as_secs_f64()
        });
        let tokens = (tokens + refilled * self.rate).min(self.burst) - 1.0;
        *state = (tokens, Some(now));
        if tokens >= 0.0 {
            0.0
        } else {
            -tokens / self.rate
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_is_free_then_the_rate_spaces_the_takes() {
        let bucket = TokenBucket::new(10.0, 3.0);
        let start = Instant::now();
        let waits: Vec<f64> = (0..5).map(|_| bucket.take(start)).collect();
        let rounded: Vec<f64> = waits
            .iter()
            .map(|w| (w * 1000.0).round() / 1000.0)
            .collect();
        assert_eq!(rounded, [0.0, 0.0, 0.0, 0.1, 0.2]);
        // A second later, the bucket is full again (the reservations paid back first).
        let later = start + Duration::from_secs(1);
        assert_eq!(bucket.take(later), 0.0);
    }

    #[test]
    fn no_rate_is_no_limit() {
        let bucket = TokenBucket::new(0.0, 1.0);
        let now = Instant::now();
        assert!((0..100).all(|_| bucket.take(now) == 0.0));
    }
}
