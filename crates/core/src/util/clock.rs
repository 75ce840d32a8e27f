//! The time of day that the engine reads: the wall clock, or a simulation's virtual clock
//! (handler tests with `kopf.testing.Simulation`). The engine's timers are tokio's, which a
//! simulation pauses and moves; the times it stores and compares (a handler's `started`, a
//! delay's due time, an Event's timestamp) must move with them, or a delay of an hour would
//! be slept in virtual time and then found not due by the wall clock.

use chrono::{DateTime, TimeDelta, Utc};
use std::cell::Cell;

thread_local! {
    /// On a simulation's runtime thread: the virtual time of day when its clock started,
    /// and tokio's instant then.
    static VIRTUAL: Cell<Option<(DateTime<Utc>, tokio::time::Instant)>> = const { Cell::new(None) };
}

/// Now: the wall clock, or on a simulation's thread, its virtual clock.
pub fn now() -> DateTime<Utc> {
    match VIRTUAL.with(Cell::get) {
        None => Utc::now(),
        Some((start, instant)) => since(start, instant),
    }
}

/// The virtual time of day: `start` plus the time tokio's (paused) clock has moved since
/// `instant`. Read within the simulation's runtime (its clock is the one that moved).
pub fn since(start: DateTime<Utc>, instant: tokio::time::Instant) -> DateTime<Utc> {
    let moved = tokio::time::Instant::now().saturating_duration_since(instant);
    start + TimeDelta::from_std(moved).unwrap_or(TimeDelta::MAX)
}

/// Make this thread read a virtual clock (a simulation's runtime thread, once, before it runs).
pub fn make_virtual(start: DateTime<Utc>, instant: tokio::time::Instant) {
    VIRTUAL.with(|v| v.set(Some((start, instant))));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_virtual_clock_moves_with_the_paused_runtime() {
        let start = DateTime::parse_from_rfc3339("2026-12-03T00:00:00Z")
            .unwrap()
            .to_utc();
        let before = Utc::now();
        assert!(
            now() >= before,
            "the wall clock before a thread is made virtual"
        );
        make_virtual(start, tokio::time::Instant::now());
        assert_eq!(now(), start);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(now(), start + TimeDelta::hours(1));
    }
}
