//! Cron schedules of timers (`@kopf.timer(cron='*/5 * * * *', timezone=...)`): standard
//! five-field patterns (and `@hourly` & co), in a named time zone or UTC.

use chrono::{DateTime, TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::Deserialize;
use std::time::Duration;

/// A timer's schedule as the Python side declares it.
#[derive(Debug, Clone, Deserialize)]
pub struct CronSpec {
    pub pattern: String,
    #[serde(default)]
    pub timezone: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid cron pattern {pattern:?}: {reason}")]
    Pattern { pattern: String, reason: String },
    #[error("unknown time zone {0:?} (an IANA name, e.g. 'Europe/Berlin')")]
    TimeZone(String),
}

/// When a timer runs: the instants its pattern names, in its time zone.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "CronSpec")]
pub struct Schedule {
    cron: Cron,
    timezone: chrono_tz::Tz,
}

impl TryFrom<CronSpec> for Schedule {
    type Error = ScheduleError;

    fn try_from(spec: CronSpec) -> Result<Self, Self::Error> {
        Schedule::parse(&spec.pattern, spec.timezone.as_deref())
    }
}

impl Schedule {
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
            None => chrono_tz::UTC,
            Some(name) => name
                .parse()
                .map_err(|_| ScheduleError::TimeZone(name.to_owned()))?,
        };
        Ok(Self { cron, timezone })
    }

    /// The first instant strictly after `now`; `None` if the pattern names no more.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = self.timezone.from_utc_datetime(&now.naive_utc());
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        Some(next.with_timezone(&Utc))
    }

    /// How long until the next instant from now.
    pub fn until_next(&self) -> Option<Duration> {
        let now = Utc::now();
        let next = self.next_after(now)?;
        Some((next - now).to_std().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
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
