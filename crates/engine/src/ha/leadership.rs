//! Lease-based leader election (`coordination.k8s.io/v1` Lease), opt-in: of several
//! replicas of an operator, only the one holding the Lease handles objects; the others
//! wait, and one of them takes over when the holder stops renewing. The rules are
//! client-go's (for any `Lock`: Skafos' ConfigMap too): a lock is taken over when its
//! record has not changed for its duration (by our own clock, so clock skew between
//! hosts does not matter); a holder that has not
//! renewed within the renew deadline (shorter than the duration) stops handling at once,
//! so two replicas never handle at the same time.

use crate::client::credentials::Credentials;
use crate::ha::pausing::Pause;
use crate::settings::LeadershipSettings;
use crate::util::logging::LEADERSHIP;
use chrono::{SecondsFormat, Utc};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The object that records who leads: a Lease here; Skafos' ConfigMap elsewhere. The
/// election's rules are the same for all: only the record's shape differs.
pub trait Lock: Send + Sync {
    /// For logs, e.g. `the lease 'ns/name'`.
    fn describe(&self) -> String;
    /// The URL of the object's collection (the object is `{collection}/{name}`).
    fn collection(&self) -> String;
    /// The object's name.
    fn name(&self) -> &str;
    /// A new record, held by `identity` since `now` (Kubernetes' MicroTime).
    fn create(&self, identity: &str, now: &str) -> Value;
    /// Who holds it (empty: nobody).
    fn holder(&self, record: &Value) -> String;
    /// How long a record stays valid, if it says so itself.
    fn duration(&self, record: &Value) -> Option<f64>;
    /// Renew the record for `identity`, or take it over (`acquired`) from whoever held it.
    fn renew(&self, record: &mut Value, identity: &str, now: &str, acquired: bool);
    /// Give it up: no holder.
    fn release(&self, record: &mut Value);
    /// Whether the API answered an attempt (for those who follow the API's health).
    fn answered(&self, _reachable: bool) {}
}

/// What one look at the lock found out.
#[derive(Debug, PartialEq)]
enum Attempt {
    /// We hold it (just acquired or renewed).
    Held,
    /// Somebody else holds it (and it has not expired by our observation).
    HeldBy(String),
}

/// The last version of the lock we saw, and when we first saw it (our clock).
struct Observed {
    version: String,
    since: Instant,
}

/// Takes part in a Lease election: leads (resumes the operator) or waits (pauses it).
pub struct Leadership {
    /// The API's credentials.
    pub credentials: Arc<Credentials>,
    /// The election's timings (`settings.leadership`).
    pub settings: LeadershipSettings,
    /// The object that holds the lease.
    pub lock: Arc<dyn Lock>,
    /// Who this replica is.
    pub identity: String,
    /// The operator's pause, which the election votes on.
    pub pause: Arc<Pause>,
    /// The election's place among the pause's voters.
    pub voter: usize,
}

impl Leadership {
    /// Compete for the lock until `stop`; release it then if we hold it.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let deadline = Duration::from_secs_f64(self.settings.renew_deadline);
        let retry = Duration::from_secs_f64(self.settings.retry_period);
        let mut observed: Option<Observed> = None;
        let mut leading_until: Option<Instant> = None;
        let mut last_holder: Option<String> = None;
        let what = self.lock.describe();
        loop {
            let started = Instant::now();
            let expiry = async {
                match leading_until {
                    Some(until) => tokio::time::sleep_until(until).await,
                    None => std::future::pending().await,
                }
            };
            let attempt = tokio::time::timeout(deadline, self.attempt(&mut observed));
            let outcome = tokio::select! {
                outcome = attempt => Some(outcome),
                () = expiry => None,
                _ = stop.wait_for(|stopped| *stopped) => break,
            };
            if let Some(outcome) = &outcome {
                self.lock.answered(matches!(outcome, Ok(Ok(_))));
            }
            match outcome {
                Some(Ok(Ok(Attempt::Held))) => {
                    if leading_until.is_none() {
                        tracing::info!(target: LEADERSHIP,
                            "Leading: {what} is held by {}; handling starts.",
                            self.identity
                        );
                    }
                    // Counted from before the request: the renewal is at least that fresh.
                    let until = started + deadline;
                    leading_until = Some(until);
                    last_holder = Some(self.identity.clone());
                    self.pause.lead_until(self.voter, Some(until));
                }
                Some(Ok(Ok(Attempt::HeldBy(holder)))) => {
                    if leading_until.take().is_some() {
                        self.step_down(format!("it is taken by {holder}"));
                    }
                    if last_holder.as_deref() != Some(&holder) {
                        tracing::info!(target: LEADERSHIP,
                            "Not leading: {what} is held by {holder}; waiting."
                        );
                        last_holder = Some(holder);
                    }
                }
                Some(Ok(Err(error))) => tracing::warn!(target: LEADERSHIP,
                    "{} could not be read or renewed: {}",
                    capitalized(&what),
                    crate::util::errors::chain(&error)
                ),
                Some(Err(_)) => tracing::warn!(target: LEADERSHIP,
                    "{}: the API did not answer in {} seconds.",
                    capitalized(&what),
                    self.settings.renew_deadline
                ),
                None => {}
            }
            if leading_until.is_some_and(|until| until <= Instant::now()) {
                leading_until = None;
                last_holder = None;
                self.step_down(format!(
                    "it was not renewed within {} seconds",
                    self.settings.renew_deadline
                ));
            }
            let next = started + retry;
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
        }
        if leading_until.is_some() {
            self.hold_until_quiet(&mut observed).await;
            self.release().await;
        }
    }

    /// Stop handling, and keep the lock renewed while what runs finishes (the engine's exit
    /// bounds the wait), so that the next leader does not start on the same objects.
    async fn hold_until_quiet(&self, observed: &mut Option<Observed>) {
        self.pause.lead_until(self.voter, None);
        let what = self.lock.describe();
        if !self.pause.is_quiet() {
            tracing::info!(target: LEADERSHIP,
                "Releasing {what} once the handling in progress has finished.");
        }
        let deadline = Duration::from_secs_f64(self.settings.renew_deadline);
        let retry = Duration::from_secs_f64(self.settings.retry_period);
        while !self.pause.quiet_within(retry).await {
            match tokio::time::timeout(deadline, self.attempt(observed)).await {
                Ok(Ok(Attempt::Held)) => {}
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    tracing::warn!(target: LEADERSHIP,
                        "{} is taken by {holder} while the handling in progress finishes.",
                        capitalized(&what));
                    return;
                }
                Ok(Err(error)) => tracing::warn!(target: LEADERSHIP,
                    "{} could not be renewed while the handling in progress finishes: {}",
                    capitalized(&what), crate::util::errors::chain(&error)),
                Err(_) => tracing::warn!(target: LEADERSHIP,
                    "{}: the API did not answer in {} seconds.",
                    capitalized(&what), self.settings.renew_deadline),
            }
        }
    }

    fn url(&self) -> String {
        format!("{}/{}", self.lock.collection(), self.lock.name())
    }

    fn step_down(&self, why: String) {
        self.pause.lead_until(self.voter, None);
        tracing::warn!(target: LEADERSHIP, "Lost {}: {why}; handling stops.", self.lock.describe());
    }

    /// Take the lock (if free, expired or ours) or renew it.
    async fn attempt(&self, observed: &mut Option<Observed>) -> Result<Attempt, kube::Error> {
        let now = micro_time();
        let mut record = match self.credentials.get(&self.url()).await {
            Ok(record) => record,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let record = self.lock.create(&self.identity, &now);
                return match self
                    .credentials
                    .post(&self.lock.collection(), &record)
                    .await
                {
                    Ok(_) => Ok(Attempt::Held),
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        Ok(Attempt::HeldBy("another replica".into()))
                    }
                    Err(error) => Err(error),
                };
            }
            Err(error) => return Err(error),
        };
        let version = (record.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if observed.as_ref().is_none_or(|o| o.version != version) {
            *observed = Some(Observed {
                version,
                since: Instant::now(),
            });
        }
        let holder = self.lock.holder(&record);
        let duration = (self.lock.duration(&record)).unwrap_or(self.settings.lease_duration);
        let since = observed.as_ref().map_or_else(Instant::now, |o| o.since);
        let expired = since + Duration::from_secs_f64(duration.max(0.0)) <= Instant::now();
        if !holder.is_empty() && holder != self.identity && !expired {
            return Ok(Attempt::HeldBy(holder));
        }
        let acquired = holder != self.identity;
        self.lock.renew(&mut record, &self.identity, &now, acquired);
        // The version in `metadata` makes it a compare-and-swap: 409 if it changed meanwhile.
        match self.credentials.put(&self.url(), &record).await {
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::HeldBy("another replica".into()))
            }
            Err(error) => Err(error),
        }
    }

    /// Give the lock up (no holder), so that another replica takes it at once.
    async fn release(&self) {
        let url = self.url();
        let result = async {
            let mut record = self.credentials.get(&url).await?;
            if self.lock.holder(&record) == self.identity {
                self.lock.release(&mut record);
                self.credentials.put(&url, &record).await?;
            }
            Ok::<(), kube::Error>(())
        }
        .await;
        let what = self.lock.describe();
        match result {
            Ok(()) => tracing::info!(target: LEADERSHIP, "Released {what}."),
            Err(error) => tracing::warn!(target: LEADERSHIP,
                "{} could not be released (it will expire): {}",
                capitalized(&what),
                crate::util::errors::chain(&error)
            ),
        }
    }
}

/// A `coordination.k8s.io/v1` Lease, as client-go keeps it.
pub struct LeaseLock {
    /// The Lease's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Seconds that a holder keeps it without renewing.
    pub duration: f64,
}

impl Lock for LeaseLock {
    fn describe(&self) -> String {
        format!("the lease '{}/{}'", self.namespace, self.name)
    }

    fn collection(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        )
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn create(&self, identity: &str, now: &str) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": identity, "leaseDurationSeconds": self.seconds(),
                     "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
        })
    }

    fn holder(&self, record: &Value) -> String {
        (record
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
    }

    fn duration(&self, record: &Value) -> Option<f64> {
        record
            .pointer("/spec/leaseDurationSeconds")
            .and_then(Value::as_f64)
    }

    fn renew(&self, record: &mut Value, identity: &str, now: &str, acquired: bool) {
        if !record.get("spec").is_some_and(Value::is_object) {
            record["spec"] = json!({});
        }
        let spec = &mut record["spec"];
        spec["holderIdentity"] = json!(identity);
        spec["leaseDurationSeconds"] = json!(self.seconds());
        spec["renewTime"] = json!(now);
        if acquired {
            let transitions = (spec.get("leaseTransitions").and_then(Value::as_i64)).unwrap_or(0);
            spec["acquireTime"] = json!(now);
            spec["leaseTransitions"] = json!(transitions + 1);
        }
    }

    fn release(&self, record: &mut Value) {
        record["spec"]["holderIdentity"] = Value::Null;
    }
}

impl LeaseLock {
    fn seconds(&self) -> i64 {
        self.duration.ceil() as i64
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Kubernetes' MicroTime: RFC 3339 in UTC with microseconds.
pub(crate) fn micro_time() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_times_are_what_the_api_expects() {
        let t = micro_time();
        assert!(
            t.ends_with('Z') && t.len() == "2026-11-22T00:10:46.672926Z".len(),
            "{t}"
        );
    }
}
