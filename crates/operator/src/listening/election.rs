//! Skafos' leader election: a ConfigMap whose `data` names the `leader` and its last
//! `heartbeat` (as Skafos writes them, so that Skafos' own replicas see who leads), run by
//! the core's election rules (`ha::leadership`): taken over only after it has not changed
//! for the lease's duration, renewed with a compare-and-swap, and a leader that cannot
//! renew in time stops delivering events. Beyond Skafos, the record keeps the version up
//! to which the leader's listeners handled the stream (`handledVersion`): the next leader
//! resumes from there.

use crate::client::watching::StreamHealth;
use crate::ha::leadership::Lock;
use crate::listening::progress::Progress;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const HANDLED: &str = "handledVersion";

pub(crate) struct ConfigMapLock {
    pub name: String,
    pub namespace: String,
    pub progress: Arc<Progress>,
    /// Told whether the API answers (for the health port while not leading).
    pub health: Arc<StreamHealth>,
    /// The handled version found when the lock was taken (until the stream takes it).
    handed_over: Mutex<Option<Option<String>>>,
    /// No term has begun in this process yet: a record that already names us (a restarted
    /// process of the same pod) is taken over as from another.
    fresh: AtomicBool,
}

impl ConfigMapLock {
    pub fn new(name: String, namespace: String, progress: Arc<Progress>) -> Self {
        Self {
            name,
            namespace,
            progress,
            health: Arc::new(StreamHealth::new()),
            handed_over: Mutex::new(None),
            fresh: AtomicBool::new(true),
        }
    }

    /// Where a new term of leading starts: the handed-over version if the lock was taken
    /// over (`None` inside: from scratch), else nothing new (`None`).
    pub(crate) fn take_handover(&self) -> Option<Option<String>> {
        self.handed_over.lock().expect("not poisoned").take()
    }
}

impl Lock for ConfigMapLock {
    fn describe(&self) -> String {
        format!("the ConfigMap '{}/{}'", self.namespace, self.name)
    }

    fn collection(&self) -> String {
        format!("/api/v1/namespaces/{}/configmaps", self.namespace)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn create(&self, identity: &str, _now: &str) -> Value {
        self.fresh.store(false, Ordering::SeqCst);
        *self.handed_over.lock().expect("not poisoned") = Some(None);
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "data": {"leader": identity, "heartbeat": heartbeat()},
        })
    }

    fn holder(&self, record: &Value) -> String {
        (record.pointer("/data/leader").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned()
    }

    fn duration(&self, _record: &Value) -> Option<f64> {
        None
    }

    fn renew(&self, record: &mut Value, identity: &str, _now: &str, acquired: bool) {
        if !record.get("data").is_some_and(Value::is_object) {
            record["data"] = json!({});
        }
        let data = &mut record["data"];
        let fresh = self.fresh.swap(false, Ordering::SeqCst);
        if acquired || fresh {
            let handled = data.get(HANDLED).and_then(Value::as_str).map(str::to_owned);
            *self.handed_over.lock().expect("not poisoned") = Some(handled);
        } else if let Some(handled) = self.progress.handled() {
            data[HANDLED] = json!(handled);
        }
        data["leader"] = json!(identity);
        data["heartbeat"] = json!(heartbeat());
    }

    fn release(&self, record: &mut Value) {
        record["data"]["leader"] = json!("");
        if let Some(handled) = self.progress.handled() {
            record["data"][HANDLED] = json!(handled);
        }
    }

    fn answered(&self, reachable: bool) {
        self.health.report(reachable);
    }
}

/// Skafos' heartbeat: the local time in ISO 8601, without a zone (Python's
/// `datetime.now().isoformat()`), which its replicas compare with their own clocks.
fn heartbeat() -> String {
    chrono::Local::now()
        .naive_local()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_takeover_hands_over_the_handled_version_and_renewals_record_ours() {
        let progress = Arc::new(Progress::default());
        let lock = ConfigMapLock::new("app-le".into(), "ns".into(), progress.clone());
        let mut record = json!({"data": {"leader": "other", "heartbeat": "x", HANDLED: "40"}});
        lock.renew(&mut record, "me", "", true);
        assert_eq!(lock.holder(&record), "me");
        assert_eq!(lock.take_handover(), Some(Some("40".into())));
        assert_eq!(lock.take_handover(), None);
        progress.begin_term(Some("40".into()));
        let number = progress.issue(Some("42".into()));
        progress.done(number);
        lock.renew(&mut record, "me", "", false);
        assert_eq!(record["data"][HANDLED], "42");
        lock.release(&mut record);
        assert_eq!(lock.holder(&record), "");
    }

    #[test]
    fn heartbeats_are_what_python_parses() {
        let beat = heartbeat();
        assert_eq!(beat.len(), "2026-11-24T00:18:59.123456".len(), "{beat}");
        assert!(!beat.ends_with('Z'));
    }
}
