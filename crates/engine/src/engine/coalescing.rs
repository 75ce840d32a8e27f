//! When a timer's interval ends: on the next tick of a coarse clock that all timers share,
//! as the kernel lets timers end a little late (its timer slack) so that they wake up
//! together. A thousand timers of one second each, started at random moments, otherwise
//! wake the engine a thousand times a second, one call at a time; each wake-up costs more
//! than the call (threads switching, cold caches). Ticks of a fiftieth of the interval make
//! calls due within one tick share a wake-up: the timer is at most 2% late (and at most
//! 64 ms), a small share of Kopf's own lateness (its p99 at that load: 190–230 ms, `bench/`).
//!
//! Only plain intervals are coalesced: sharp timers keep to their own grid, cron timers to
//! their instants, and idle delays and retries to their exact length.

use std::sync::OnceLock;
use std::time::Duration;
// (tokio's: a simulation's virtual clock keeps its timers on the same grid)
use tokio::time::Instant;

/// The longest tick: a long interval's timers would gain nothing from waiting longer.
const MAX_TICK_MS: u64 = 64;

/// How long a timer sleeps for `interval` seconds: until the first tick at or after the
/// interval's end.
pub(crate) fn coalesced(interval: f64) -> f64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    let now = epoch.elapsed();
    let Ok(wanted) = Duration::try_from_secs_f64(interval) else {
        return interval; // negative, or beyond the clock: as it was asked
    };
    match tick_after(now, wanted) {
        Some(at) => (at - now).as_secs_f64(),
        None => interval,
    }
}

/// The first tick (since the common epoch) at or after `now + interval`; none if the
/// interval is too short to coalesce (ticks under a millisecond).
fn tick_after(now: Duration, interval: Duration) -> Option<Duration> {
    let fiftieth = interval.as_millis() / 50;
    if fiftieth == 0 {
        return None;
    }
    // A power of two, so that timers with other intervals share the coarser ticks.
    let tick = (1u64 << fiftieth.ilog2()).min(MAX_TICK_MS);
    let end = (now + interval).as_nanos();
    let tick = u128::from(tick) * 1_000_000;
    let at = end.div_ceil(tick) * tick;
    Some(Duration::from_nanos(u64::try_from(at).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn an_interval_ends_on_the_next_tick_and_never_early() {
        // One second: ticks of 16 ms (the power of two under a fiftieth).
        assert_eq!(tick_after(ms(0), ms(1000)), Some(ms(1008)));
        assert_eq!(
            tick_after(ms(8), ms(1000)),
            Some(ms(1008)),
            "on a tick: no later"
        );
        assert_eq!(tick_after(ms(9), ms(1000)), Some(ms(1024)));
        for start in (0..2000).step_by(7) {
            let at = tick_after(ms(start), ms(1000)).unwrap();
            assert!(
                at >= ms(start + 1000) && at < ms(start + 1016),
                "{start}: {at:?}"
            );
        }
    }

    #[test]
    fn timers_due_within_one_tick_wake_up_together() {
        let ends: Vec<_> = (9..=24).map(|s| tick_after(ms(s), ms(1000))).collect();
        assert!(ends.iter().all(|at| *at == Some(ms(1024))));
        // Another interval's ticks are multiples of this one's, or divide it: shared too.
        assert_eq!(tick_after(ms(1020), ms(4000)), Some(ms(5056)));
        assert_eq!(tick_after(ms(4050), ms(1000)), Some(ms(5056)));
    }

    #[test]
    fn long_intervals_wait_one_long_tick_at_most_and_short_ones_are_exact() {
        assert_eq!(
            tick_after(ms(1), ms(60_000)),
            Some(ms(60_032)),
            "64 ms ticks"
        );
        assert_eq!(
            tick_after(ms(1), ms(49)),
            None,
            "under a millisecond's tick"
        );
        assert_eq!(tick_after(ms(1), ms(100)), Some(ms(102)), "2 ms ticks");
    }
}
