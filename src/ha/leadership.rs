//! Lease-based leader election (`coordination.k8s.io/v1` Lease), opt-in: of several
//! replicas of an operator, only the one holding the Lease handles objects; the others
//! wait, and one of them takes over when the holder stops renewing. The rules are
//! client-go's: a Lease is taken over when its record has not changed for its duration
//! (by our own clock, so clock skew between hosts does not matter); a holder that has not
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

/// What one look at the Lease found out.
#[derive(Debug, PartialEq)]
enum Attempt {
    /// We hold it (just acquired or renewed).
    Held,
    /// Somebody else holds it (and it has not expired by our observation).
    HeldBy(String),
}

/// The last version of the Lease we saw, and when we first saw it (our clock).
struct Observed {
    version: String,
    since: Instant,
}

pub struct Leadership {
    pub credentials: Arc<Credentials>,
    pub settings: LeadershipSettings,
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub pause: Arc<Pause>,
    pub voter: usize,
}

impl Leadership {
    /// Compete for the Lease until `stop`; release it then if we hold it.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let deadline = Duration::from_secs_f64(self.settings.renew_deadline);
        let retry = Duration::from_secs_f64(self.settings.retry_period);
        let mut observed: Option<Observed> = None;
        let mut leading_until: Option<Instant> = None;
        let mut last_holder: Option<String> = None;
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
            match outcome {
                Some(Ok(Ok(Attempt::Held))) => {
                    if leading_until.is_none() {
                        tracing::info!(target: LEADERSHIP,
                            "Leading: the lease {} is held by {}; handling starts.",
                            self.lease(),
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
                            "Not leading: the lease {} is held by {holder}; waiting.",
                            self.lease()
                        );
                        last_holder = Some(holder);
                    }
                }
                Some(Ok(Err(error))) => tracing::warn!(target: LEADERSHIP,
                    "The lease {} could not be read or renewed: {}",
                    self.lease(),
                    crate::util::errors::chain(&error)
                ),
                Some(Err(_)) => tracing::warn!(target: LEADERSHIP,
                    "The lease {}: the API did not answer in {} seconds.",
                    self.lease(),
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
            self.release().await;
        }
    }

    fn lease(&self) -> String {
        format!("'{}/{}'", self.namespace, self.name)
    }

    fn url(&self, name: Option<&str>) -> String {
        let base = format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        );
        match name {
            Some(name) => format!("{base}/{name}"),
            None => base,
        }
    }

    fn step_down(&self, why: String) {
        self.pause.lead_until(self.voter, None);
        tracing::warn!(target: LEADERSHIP, "Lost the lease {}: {why}; handling stops.", self.lease());
    }

    /// Take the Lease (if free, expired or ours) or renew it.
    async fn attempt(&self, observed: &mut Option<Observed>) -> Result<Attempt, kube::Error> {
        let now = micro_time();
        let seconds = self.settings.lease_duration.ceil() as i64;
        let lease = match self.credentials.get(&self.url(Some(&self.name))).await {
            Ok(lease) => lease,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": seconds,
                             "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
                });
                return match self.credentials.post(&self.url(None), &lease).await {
                    Ok(_) => Ok(Attempt::Held),
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        Ok(Attempt::HeldBy("another replica".into()))
                    }
                    Err(error) => Err(error),
                };
            }
            Err(error) => return Err(error),
        };
        let version = (lease.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if observed.as_ref().is_none_or(|o| o.version != version) {
            *observed = Some(Observed {
                version,
                since: Instant::now(),
            });
        }
        let spec = lease.get("spec").cloned().unwrap_or_else(|| json!({}));
        let holder = (spec.get("holderIdentity").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        let duration = (spec.get("leaseDurationSeconds").and_then(Value::as_f64))
            .unwrap_or(self.settings.lease_duration);
        let since = observed.as_ref().map_or_else(Instant::now, |o| o.since);
        let expired = since + Duration::from_secs_f64(duration.max(0.0)) <= Instant::now();
        if !holder.is_empty() && holder != self.identity && !expired {
            return Ok(Attempt::HeldBy(holder));
        }
        let mut renewed = lease.clone();
        renewed["spec"]["holderIdentity"] = json!(self.identity);
        renewed["spec"]["leaseDurationSeconds"] = json!(seconds);
        renewed["spec"]["renewTime"] = json!(now);
        if holder != self.identity {
            let transitions = spec
                .get("leaseTransitions")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            renewed["spec"]["acquireTime"] = json!(now);
            renewed["spec"]["leaseTransitions"] = json!(transitions + 1);
        }
        // The version in `metadata` makes it a compare-and-swap: 409 if it changed meanwhile.
        match self
            .credentials
            .put(&self.url(Some(&self.name)), &renewed)
            .await
        {
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::HeldBy("another replica".into()))
            }
            Err(error) => Err(error),
        }
    }

    /// Give the Lease up (no holder), so that another replica takes it at once.
    async fn release(&self) {
        let url = self.url(Some(&self.name));
        let result = async {
            let mut lease = self.credentials.get(&url).await?;
            let holder = lease
                .pointer("/spec/holderIdentity")
                .and_then(Value::as_str);
            if holder == Some(self.identity.as_str()) {
                lease["spec"]["holderIdentity"] = Value::Null;
                self.credentials.put(&url, &lease).await?;
            }
            Ok::<(), kube::Error>(())
        }
        .await;
        match result {
            Ok(()) => tracing::info!(target: LEADERSHIP, "Released the lease {}.", self.lease()),
            Err(error) => tracing::warn!(target: LEADERSHIP,
                "The lease {} could not be released (it will expire): {}",
                self.lease(),
                crate::util::errors::chain(&error)
            ),
        }
    }
}

/// Kubernetes' MicroTime: RFC 3339 in UTC with microseconds.
fn micro_time() -> String {
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
