//! Handlers' states across processing cycles: which are done, which are retrying
//! and when, for which purpose (cause) they ran. Loaded from and stored to a
//! progress storage as Kopf's progress records.

use crate::state::patches::Patch;
use crate::state::progress::ProgressStorage;
use crate::state::StorageResult;
use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};
use indexmap_like::OrderedMap;
use serde_json::{json, Value};

/// How a single handler invocation ended, as the engine records it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// No more retries: succeeded or failed for good.
    pub final_: bool,
    /// Seconds to wait before the next attempt (for non-final outcomes).
    pub delay: Option<f64>,
    /// The handler's return value (for `status.<handler id>`), if it succeeded.
    pub result: Option<Value>,
    /// The error's message, if it failed (temporarily or permanently).
    pub exception: Option<String>,
    /// The ids of the sub-handlers it declared.
    pub subrefs: Vec<String>,
}

/// One handler's state for one cause, as its progress record keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerState {
    /// Participates in this cycle's done/delays; passive ones only count and purge.
    pub active: bool,
    /// When it was first called.
    pub started: DateTime<Utc>,
    /// When it finished, if it did.
    pub stopped: Option<DateTime<Utc>>,
    /// When it is to be called again, if it waits.
    pub delayed: Option<DateTime<Utc>>,
    /// The cause it is for (`create`, `update`, ...).
    pub purpose: Option<String>,
    /// How many times it was called before.
    pub retries: u64,
    /// Whether it succeeded.
    pub success: bool,
    /// Whether it failed for good.
    pub failure: bool,
    /// Its last error's message.
    pub message: Option<String>,
    /// The ids of its sub-handlers.
    pub subrefs: Vec<String>,
    /// The record as it was loaded, to skip writing unchanged records.
    origin: Option<Value>,
}

impl HandlerState {
    /// A handler not called yet.
    pub fn from_scratch(now: DateTime<Utc>, purpose: Option<&str>) -> Self {
        Self {
            active: true,
            started: now,
            stopped: None,
            delayed: None,
            purpose: purpose.map(str::to_owned),
            retries: 0,
            success: false,
            failure: false,
            message: None,
            subrefs: Vec::new(),
            origin: None,
        }
    }

    /// A handler as its stored record says.
    pub fn from_record(record: &Value, now: DateTime<Utc>) -> Self {
        let time = |key: &str| record.get(key).and_then(Value::as_str).and_then(parse_time);
        let flag = |key: &str| record.get(key).and_then(Value::as_bool).unwrap_or(false);
        Self {
            active: false,
            started: time("started").unwrap_or(now),
            stopped: time("stopped"),
            delayed: time("delayed"),
            purpose: record
                .get("purpose")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
            retries: record.get("retries").and_then(Value::as_u64).unwrap_or(0),
            success: flag("success"),
            failure: flag("failure"),
            message: record
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
            subrefs: record
                .get("subrefs")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .filter_map(|r| r.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            origin: Some(record.clone()),
        }
    }

    /// Whether it has succeeded or failed for good.
    pub fn finished(&self) -> bool {
        self.success || self.failure
    }

    /// Whether it waits for a time still to come.
    pub fn sleeping(&self, now: DateTime<Utc>) -> bool {
        !self.finished() && self.delayed.is_some_and(|d| d > now)
    }

    /// Whether its time to be called again has come.
    pub fn awakened(&self, now: DateTime<Utc>) -> bool {
        !self.finished() && !self.sleeping(now)
    }

    /// Seconds since it was first called.
    pub fn runtime(&self, now: DateTime<Utc>) -> f64 {
        (now - self.started).num_microseconds().unwrap_or(0) as f64 / 1e6
    }

    /// The full record, in Kopf's key order; nulls are dropped by the storage.
    pub fn record(&self) -> Value {
        json!({
            "started": format_time(self.started),
            "stopped": self.stopped.map(format_time),
            "delayed": self.delayed.map(format_time),
            "purpose": self.purpose,
            "retries": self.retries,
            "success": self.success,
            "failure": self.failure,
            "message": self.message,
            "subrefs": if self.subrefs.is_empty() { Value::Null } else { json!(self.subrefs) },
        })
    }

    fn record_without_nulls(&self) -> Value {
        let mut record = self.record();
        if let Some(fields) = record.as_object_mut() {
            fields.retain(|_, v| !v.is_null());
        }
        record
    }

    /// The state after a call that ended so.
    pub fn with_outcome(&self, outcome: &Outcome, now: DateTime<Utc>) -> Self {
        let mut subrefs: Vec<String> = self
            .subrefs
            .iter()
            .chain(&outcome.subrefs)
            .cloned()
            .collect();
        subrefs.sort();
        subrefs.dedup();
        Self {
            active: self.active,
            started: self.started,
            stopped: self.stopped.or(outcome.final_.then_some(now)),
            delayed: outcome
                .delay
                .map(|d| now + chrono::Duration::microseconds((d * 1e6) as i64)),
            purpose: self.purpose.clone(),
            retries: self.retries + 1,
            success: outcome.final_ && outcome.exception.is_none(),
            failure: outcome.final_ && outcome.exception.is_some(),
            message: outcome.exception.clone(),
            subrefs,
            origin: self.origin.clone(),
        }
    }
}

/// Results go to `status.<handler id>`: dicts are merged in, other values replace.
pub fn deliver_result(id: &str, outcome: &Outcome, patch: &mut Patch) {
    if outcome.exception.is_some() {
        return;
    }
    let Some(result) = outcome.result.as_ref().filter(|r| !r.is_null()) else {
        return; // most calls return nothing: no path to make
    };
    let path = vec!["status".to_owned(), id.to_owned()];
    match result {
        Value::Object(fields) => {
            for (key, value) in fields {
                let mut field_path = path.clone();
                field_path.push(key.clone());
                patch.set(&field_path, value.clone());
            }
        }
        other => patch.set(&path, other.clone()),
    }
}

/// Python's `datetime.isoformat(timespec='microseconds')` of an aware UTC time.
pub fn format_time(t: DateTime<Utc>) -> String {
    // Written directly: a `format()` string is parsed anew on every call, and timers and
    // progress records format a time on every call.
    t.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// ISO 8601 with or without a zone (Kopf's older records have none: they are UTC).
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            return Some(t.and_utc());
        }
    }
    None
}

/// Counters of handlers by their state, for the log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Handlers that succeeded.
    pub success: usize,
    /// Handlers that failed for good.
    pub failure: usize,
    /// Handlers not done yet.
    pub running: usize,
}

/// The states of the handlers of one object for one cause.
#[derive(Debug, Clone, Default)]
pub struct State {
    states: OrderedMap<HandlerState>,
    /// The cause they are for.
    pub purpose: Option<String>,
}

impl State {
    /// The states as stored in the object.
    pub fn from_storage(
        body: &Value,
        storage: &dyn ProgressStorage,
        handler_ids: &[String],
        now: DateTime<Utc>,
    ) -> StorageResult<Self> {
        let mut states = OrderedMap::default();
        for id in handler_ids {
            if let Some(record) = storage.fetch(id, body)? {
                states.insert(id.clone(), HandlerState::from_record(&record, now));
            }
        }
        Ok(Self {
            states,
            purpose: None,
        })
    }

    /// One handler's state.
    pub fn get(&self, id: &str) -> Option<&HandlerState> {
        self.states.get(id)
    }

    /// The ids of all handlers with a state (loaded or fresh).
    pub fn ids(&self) -> impl Iterator<Item = &String> {
        self.states.iter().map(|(id, _)| id)
    }

    /// Set the current purpose; re-purpose the given handlers' states to it.
    pub fn with_purpose(mut self, purpose: &str, handlers: &[String]) -> Self {
        for id in handlers {
            if let Some(state) = self.states.get_mut(id) {
                state.purpose = Some(purpose.to_owned());
            }
        }
        self.purpose = Some(purpose.to_owned());
        self
    }

    /// Make the handlers active, creating fresh states for those never seen.
    pub fn with_handlers(mut self, handlers: &[String], now: DateTime<Utc>) -> Self {
        for id in handlers {
            match self.states.get_mut(id) {
                Some(state) => state.active = true,
                None => self.states.insert(
                    id.clone(),
                    HandlerState::from_scratch(now, self.purpose.as_deref()),
                ),
            }
        }
        self
    }

    /// The states after one handler's call that ended so.
    pub fn with_outcome(mut self, id: &str, outcome: &Outcome, now: DateTime<Utc>) -> Self {
        if let Some(state) = self.states.get_mut(id) {
            *state = state.with_outcome(outcome, now);
        }
        self
    }

    /// Write the changed records into the patch.
    pub fn store(
        &self,
        body: &Value,
        patch: &mut Patch,
        storage: &dyn ProgressStorage,
    ) -> StorageResult<()> {
        for (id, state) in self.states.iter() {
            if Some(state.record_without_nulls()) != state.origin {
                storage.store(id, &state.record(), body, patch)?;
            }
        }
        storage.flush()
    }

    /// Remove the records of these handlers, of all states' own, and of their sub-handlers.
    pub fn purge(
        &self,
        body: &Value,
        patch: &mut Patch,
        storage: &dyn ProgressStorage,
        handler_ids: &[String],
    ) -> StorageResult<()> {
        for id in handler_ids {
            storage.purge(id, body, patch)?;
        }
        for (id, state) in self.states.iter() {
            if !handler_ids.contains(id) {
                storage.purge(id, body, patch)?;
            }
            for subref in &state.subrefs {
                storage.purge(subref, body, patch)?;
            }
        }
        storage.flush()
    }

    /// All active handlers have finished (succeeded or failed for good).
    pub fn done(&self) -> bool {
        self.states
            .values()
            .filter(|s| s.active)
            .all(HandlerState::finished)
    }

    /// Counters of other purposes than the current one: superseded causes.
    pub fn extras(&self) -> Vec<(String, Counters)> {
        let mut purposes: Vec<&String> = self
            .states
            .values()
            .filter_map(|s| s.purpose.as_ref())
            .filter(|p| Some(*p) != self.purpose.as_ref())
            .collect();
        purposes.sort();
        purposes.dedup();
        purposes
            .into_iter()
            .map(|purpose| {
                let states = self
                    .states
                    .values()
                    .filter(|s| s.purpose.as_ref() == Some(purpose));
                (purpose.clone(), count(states))
            })
            .collect()
    }

    /// How many succeeded, failed, and are not done yet.
    pub fn counts(&self) -> Counters {
        count(
            self.states.values().filter(|s| {
                self.purpose.is_none() || s.purpose.is_none() || s.purpose == self.purpose
            }),
        )
    }

    /// Seconds until each active unfinished handler may run again (0 for "now").
    pub fn delays(&self, now: DateTime<Utc>) -> Vec<f64> {
        self.states
            .values()
            .filter(|s| s.active && !s.finished())
            .map(|s| match s.delayed {
                Some(d) => ((d - now).num_microseconds().unwrap_or(0) as f64 / 1e6).max(0.0),
                None => 0.0,
            })
            .collect()
    }
}

fn count<'a>(states: impl Iterator<Item = &'a HandlerState>) -> Counters {
    let mut counters = Counters::default();
    for state in states {
        if state.success {
            counters.success += 1;
        }
        if state.failure {
            counters.failure += 1;
        }
        if !state.finished() {
            counters.running += 1;
        }
    }
    counters
}

/// A small insertion-ordered map: handler order matters for logs and lifecycles.
mod indexmap_like {
    #[derive(Debug, Clone)]
    pub(crate) struct OrderedMap<V> {
        entries: Vec<(String, V)>,
    }

    impl<V> Default for OrderedMap<V> {
        fn default() -> Self {
            Self {
                entries: Vec::new(),
            }
        }
    }

    impl<V> OrderedMap<V> {
        pub fn get(&self, key: &str) -> Option<&V> {
            self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
        }
        pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
            self.entries
                .iter_mut()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
        }
        pub fn insert(&mut self, key: String, value: V) {
            match self.get_mut(&key) {
                Some(existing) => *existing = value,
                None => self.entries.push((key, value)),
            }
        }
        pub fn values(&self) -> impl Iterator<Item = &V> {
            self.entries.iter().map(|(_, v)| v)
        }
        pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
            self.entries.iter().map(|(k, v)| (k, v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        parse_time(s).unwrap()
    }

    #[test]
    fn times_in_kopf_format() {
        let now = t("2026-01-02T03:04:05.000006+00:00");
        assert_eq!(format_time(now), "2026-01-02T03:04:05.000006+00:00");
        assert_eq!(t("2026-01-02T03:04:05.000006"), now);
        assert_eq!(
            format_time(t("2026-01-02T03:04:05")),
            "2026-01-02T03:04:05.000000+00:00"
        );
        // Python's microseconds: the nanoseconds of the clock are cut, not rounded.
        assert_eq!(
            format_time(t("2026-01-02T03:04:05.123456789Z")),
            "2026-01-02T03:04:05.123456+00:00"
        );
    }

    #[test]
    fn a_handler_succeeds_then_records_are_purged() {
        let now = t("2026-01-01T00:00:00+00:00");
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let body = json!({});
        let ids = vec!["a".to_owned(), "b".to_owned()];
        let state = State::from_storage(&body, storage, &ids, now)
            .unwrap()
            .with_purpose("create", &[])
            .with_handlers(&ids, now);
        assert!(!state.done());
        assert_eq!(state.delays(now), vec![0.0, 0.0]);

        let outcome = Outcome {
            final_: true,
            result: Some(json!(1)),
            ..Default::default()
        };
        let state = state.with_outcome("a", &outcome, now);
        let mut patch = Patch::default();
        state.store(&body, &mut patch, storage).unwrap();
        assert_eq!(
            patch.annotation("kopf.zalando.org/a"),
            Some(&json!(
                r#"{"started":"2026-01-01T00:00:00.000000+00:00","stopped":"2026-01-01T00:00:00.000000+00:00","purpose":"create","retries":1,"success":true,"failure":false}"#
            ))
        );
        assert_eq!(
            patch.annotation("kopf.zalando.org/b"),
            Some(&json!(
                r#"{"started":"2026-01-01T00:00:00.000000+00:00","purpose":"create","retries":0,"success":false,"failure":false}"#
            ))
        );
        assert_eq!(
            state.counts(),
            Counters {
                success: 1,
                failure: 0,
                running: 1
            }
        );
    }

    #[test]
    fn retries_are_delayed_and_unchanged_records_not_rewritten() {
        let now = t("2026-01-01T00:00:00+00:00");
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let record = r#"{"started":"2026-01-01T00:00:00.000000+00:00","delayed":"2026-01-01T00:01:00.000000+00:00","purpose":"update","retries":1,"success":false,"failure":false,"message":"boo"}"#;
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/h": record}}});
        let ids = vec!["h".to_owned()];
        let state = State::from_storage(&body, storage, &ids, now)
            .unwrap()
            .with_purpose("update", &[])
            .with_handlers(&ids, now);
        assert!(state.get("h").unwrap().sleeping(now));
        assert_eq!(state.delays(now), vec![60.0]);
        let mut patch = Patch::default();
        state.store(&body, &mut patch, storage).unwrap();
        assert!(patch.is_empty(), "{patch:?}");

        let later = t("2026-01-01T00:02:00+00:00");
        let failed = Outcome {
            final_: true,
            exception: Some("bad".into()),
            ..Default::default()
        };
        let state = state.with_outcome("h", &failed, later);
        assert!(state.done());
        assert_eq!(state.get("h").unwrap().retries, 2);
        assert_eq!(state.counts().failure, 1);
    }

    #[test]
    fn other_purposes_are_extras() {
        let now = t("2026-01-01T00:00:00+00:00");
        let storage = crate::state::storages::Storages::default().progress;
        let storage = storage.as_ref();
        let record =
            r#"{"started":"2026-01-01T00:00:00.000000+00:00","purpose":"create","retries":0}"#;
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/c": record}}});
        let state = State::from_storage(&body, storage, &["c".to_owned()], now)
            .unwrap()
            .with_purpose("update", &[]);
        assert_eq!(
            state.extras(),
            vec![(
                "create".to_owned(),
                Counters {
                    success: 0,
                    failure: 0,
                    running: 1
                }
            )]
        );
    }

    #[test]
    fn results_land_in_status() {
        let mut patch = Patch::default();
        let ok = |result| Outcome {
            final_: true,
            result: Some(result),
            ..Default::default()
        };
        deliver_result("a", &ok(json!({"x": 1})), &mut patch);
        deliver_result("b", &ok(json!("text")), &mut patch);
        deliver_result("c", &ok(Value::Null), &mut patch);
        assert_eq!(
            Value::Object(patch.merge),
            json!({"status": {"a": {"x": 1}, "b": "text"}})
        );
    }
}
