//! Automatic sharding (not in Kopf; opt-in: `kopf run --shards auto`). The replicas of one
//! operator find each other through Leases, one per replica, renewed as the leader's Lease
//! is; they split the space of the objects' uid hashes evenly among the live ones, and each
//! watches only its part with the API server's sharded list & watch (`shardSelector`).
//!
//! A range changes hands in a fenced way: each replica records in its Lease the range it
//! claims; it serves a range only after claiming it and then seeing no other live claim on
//! it, and it gives a range up (pausing: streams and daemons stopped, then waiting until
//! nothing it started is running) before it records a smaller claim. A replica that cannot
//! renew its Lease stops handling within the renew deadline, before the others can see it
//! as expired (the lease duration, by their own clocks) and take its range.

use super::pausing::Pause;
use crate::client::credentials::Credentials;
use crate::client::watching::urlencode;
use crate::settings::LeadershipSettings;
use crate::util::logging::SHARDING;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The label that groups the replicas' Leases.
pub(crate) const GROUP_LABEL: &str = "kopf.dev/shard-group";
/// The annotation of a replica's Lease with the range it claims (empty: none).
pub(crate) const RANGE_ANNOTATION: &str = "kopf.dev/shard-range";
/// The whole space of the API server's shard hashes (64-bit FNV-1a of the uid).
const SPACE: u128 = 1 << 64;

/// A half-open range of uid hashes, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: u128,
    pub end: u128,
}

impl Range {
    /// The `index`-th of `count` equal parts of the space.
    pub fn part(index: usize, count: usize) -> Self {
        let (index, count) = (index as u128, count.max(1) as u128);
        Self {
            start: SPACE * index / count,
            end: SPACE * (index + 1) / count,
        }
    }

    pub(crate) fn overlaps(&self, other: &Range) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The API server's shard selector of this range (its hashes are 16 hex digits).
    pub fn selector(&self) -> String {
        format!(
            "shardRange(object.metadata.uid, '0x{:016x}', '0x{:016x}')",
            self.start, self.end
        )
    }

    /// As recorded in a Lease's annotation.
    fn annotation(&self) -> String {
        format!("0x{:016x}-0x{:016x}", self.start, self.end)
    }

    fn parse(text: &str) -> Option<Self> {
        let (start, end) = text.split_once('-')?;
        let hex = |s: &str| u128::from_str_radix(s.strip_prefix("0x")?, 16).ok();
        let range = Self {
            start: hex(start)?,
            end: hex(end)?,
        };
        (range.start < range.end && range.end <= SPACE).then_some(range)
    }
}

/// One replica's Lease, as listed.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    identity: String,
    version: String,
    duration: Option<f64>,
    claim: Option<Range>,
}

impl Member {
    fn of(lease: &Value) -> Option<Self> {
        let text = |pointer: &str| lease.pointer(pointer).and_then(Value::as_str);
        let annotation = format!(
            "/metadata/annotations/{}",
            RANGE_ANNOTATION.replace('/', "~1")
        );
        Some(Self {
            name: text("/metadata/name")?.to_owned(),
            identity: text("/spec/holderIdentity").unwrap_or_default().to_owned(),
            version: text("/metadata/resourceVersion")
                .unwrap_or_default()
                .to_owned(),
            duration: lease
                .pointer("/spec/leaseDurationSeconds")
                .and_then(Value::as_f64),
            claim: text(&annotation).and_then(Range::parse),
        })
    }
}

/// Where this replica is in the hand-over of ranges.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
enum Serving {
    /// Nothing is served (the operator is paused for this voter).
    #[default]
    Nothing,
    /// This range is served.
    Range(Range),
    /// This range was served; the pause is on, and what had started is finishing.
    Stopping(Range),
}

/// The last version of a Lease we saw, when we first saw it (our clock), and for how long
/// it says it is valid.
struct Observed {
    version: String,
    since: Instant,
    duration: f64,
}

/// Takes part in the automatic sharding: a Lease per replica, and the range of objects this one serves.
pub struct Sharding {
    /// The API's credentials.
    pub credentials: Arc<Credentials>,
    /// The timings (as the leader's Lease) and the namespace of the Leases.
    pub settings: LeadershipSettings,
    /// The replicas that share the objects (`settings.sharding.group`).
    pub group: String,
    /// Who this replica is.
    pub identity: String,
    /// The operator's pause, paused while the hand-over of a range is fenced.
    pub pause: Arc<Pause>,
    /// The sharding's place among the pause's voters.
    pub voter: usize,
    /// The shard selector of the range served now, read by the watchers when they (re)start.
    pub range: watch::Sender<Option<String>>,
}

impl Sharding {
    fn namespace(&self) -> String {
        self.settings.namespace()
    }

    fn collection(&self) -> String {
        leases(&self.namespace())
    }

    /// This replica's Lease: the group's name and a hash of the identity (which may hold
    /// characters that names may not).
    pub fn lease_name(&self) -> String {
        format!("{}-shard-{:016x}", self.group, fnv1a(&self.identity))
    }

    /// Take part in the group until `stop`; leave it then (the Lease deleted), so that the
    /// others re-split at once.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let deadline = Duration::from_secs_f64(self.settings.renew_deadline);
        let retry = Duration::from_secs_f64(self.settings.retry_period);
        let mut state = State {
            own: self.lease_name(),
            ..State::default()
        };
        tracing::info!(target: SHARDING,
            "Sharding: this replica is {} in the group '{}' (the lease '{}/{}').",
            self.identity, self.group, self.namespace(), self.lease_name()
        );
        loop {
            let started = Instant::now();
            let until = state.valid_until;
            let expiry = async move {
                match until {
                    Some(until) => tokio::time::sleep_until(until).await,
                    None => std::future::pending().await,
                }
            };
            let step = tokio::time::timeout(deadline, self.step(&mut state, started));
            tokio::select! {
                outcome = step => match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::warn!(target: SHARDING,
                        "The shards' leases could not be read or renewed: {}",
                        crate::util::errors::chain(&error)
                    ),
                    Err(_) => tracing::warn!(target: SHARDING,
                        "The shards' leases: the API did not answer in {} seconds.",
                        self.settings.renew_deadline
                    ),
                },
                () = expiry => {
                    if let Serving::Range(range) = state.serving {
                        self.stop_serving(&mut state, range,
                            format!("the lease was not renewed within {} seconds", self.settings.renew_deadline));
                    }
                }
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
            // Handing a range over: look again as soon as what ran has finished, not a
            // retry period later, so that the range changes hands without a gap.
            // (Only while busy: a look that failed before moving on waits a retry period.)
            let stopping = matches!(state.serving, Serving::Stopping(_)) && !self.pause.is_quiet();
            let quiet = async {
                match stopping {
                    true => self.pause.quiet().await,
                    false => std::future::pending().await,
                }
            };
            // In a hand-over (not serving yet, or waiting for a neighbour to give its old
            // range up), look four times as often: the gap is what the objects wait.
            let period = match state.serving {
                Serving::Range(_) => retry,
                _ => retry / 4,
            };
            let pause = tokio::time::sleep_until(started + period);
            tokio::select! {
                () = pause => {}
                () = quiet => {}
                _ = stop.wait_for(|stopped| *stopped) => break,
            }
        }
        self.leave(&mut state).await;
    }

    /// One look at the group and one renewal of our Lease, moving the hand-over on.
    async fn step(&self, state: &mut State, started: Instant) -> Result<(), kube::Error> {
        let members = self.members(state).await?;
        let (index, count) = self.place(state, &members);
        let target = Range::part(index, count);
        if let Serving::Range(range) = state.serving {
            if range != target {
                let why = format!("the group has {count} live replicas now");
                self.stop_serving(state, range, why);
            }
        }
        // Handling counts itself before it checks the pause: once quiet, it stays quiet.
        if matches!(state.serving, Serving::Stopping(_)) && self.pause.is_quiet() {
            state.serving = Serving::Nothing;
        }
        // What we claim: what we serve (or still finish), or what we are to serve if free.
        let claim = match state.serving {
            Serving::Range(range) | Serving::Stopping(range) => Some(range),
            Serving::Nothing => {
                (!self.claimed_by_others(state, &members, &target)).then_some(target)
            }
        };
        self.renew(state, claim).await?;
        if state.serving == Serving::Range(target) {
            state.valid_until =
                Some(started + Duration::from_secs_f64(self.settings.renew_deadline));
            self.pause.lead_until(self.voter, state.valid_until);
            return Ok(());
        }
        if state.serving == Serving::Nothing && claim == Some(target) {
            // Claimed: serve it only if nobody else claimed it meanwhile (whoever of two
            // rivals writes last sees the other's claim here, and gives way).
            let members = self.members(state).await?;
            if self.claimed_by_others(state, &members, &target) {
                if !std::mem::replace(&mut state.waiting, true) {
                    tracing::info!(target: SHARDING,
                        "Another replica claims a part of {}; waiting.", target.selector());
                }
                return Ok(());
            }
            state.waiting = false;
            self.range.send_replace(Some(target.selector()));
            state.serving = Serving::Range(target);
            state.valid_until =
                Some(started + Duration::from_secs_f64(self.settings.renew_deadline));
            self.pause.lead_until(self.voter, state.valid_until);
            let live = members.iter().filter(|m| state.is_live(m)).count();
            tracing::info!(target: SHARDING,
                "Serving shard {} of {}: {}; handling starts.", index + 1, live.max(1), target.selector());
        }
        Ok(())
    }

    /// Whether a live replica other than us claims a part of `range`.
    fn claimed_by_others(&self, state: &State, members: &[Member], range: &Range) -> bool {
        (members.iter())
            .filter(|m| m.name != state.own && state.is_live(m))
            .any(|m| m.claim.is_some_and(|claim| claim.overlaps(range)))
    }

    /// Stop handling (pause: streams and daemons stop); the range stays claimed until
    /// whatever runs has finished.
    fn stop_serving(&self, state: &mut State, range: Range, why: String) {
        self.pause.lead_until(self.voter, None);
        state.valid_until = None;
        state.serving = Serving::Stopping(range);
        tracing::info!(target: SHARDING,
            "Handing over {}: {why}; handling stops.", range.selector());
    }

    /// The group's Leases; expired ones noticed (by our clock), long-expired ones removed.
    async fn members(&self, state: &mut State) -> Result<Vec<Member>, kube::Error> {
        let url = format!(
            "{}?labelSelector={}",
            self.collection(),
            urlencode(&format!("{GROUP_LABEL}={}", self.group))
        );
        let list = self.credentials.get(&url).await?;
        let members: Vec<Member> = (list.get("items").and_then(Value::as_array))
            .map(|items| items.iter().filter_map(Member::of).collect())
            .unwrap_or_default();
        let now = Instant::now();
        state
            .observed
            .retain(|name, _| members.iter().any(|m| &m.name == name));
        for member in &members {
            let duration = member.duration.unwrap_or(self.settings.lease_duration);
            let seen = (state.observed.entry(member.name.clone())).or_insert(Observed {
                version: member.version.clone(),
                since: now,
                duration,
            });
            if seen.version != member.version {
                seen.version.clone_from(&member.version);
                seen.since = now;
            }
            seen.duration = duration;
        }
        self.collect_garbage(state, &members).await;
        Ok(members)
    }

    /// Our place among the live replicas (ordered by identity), and how many they are.
    fn place(&self, state: &State, members: &[Member]) -> (usize, usize) {
        let mut identities: Vec<&str> = (members.iter())
            .filter(|m| m.name != state.own && state.is_live(m))
            .map(|m| m.identity.as_str())
            .chain([self.identity.as_str()])
            .collect();
        identities.sort_unstable();
        identities.dedup();
        let index = (identities.iter())
            .position(|i| *i == self.identity)
            .unwrap_or(0);
        (index, identities.len())
    }

    /// Leases expired long ago (a replica killed): deleted by the first live replica, so
    /// that the group does not accumulate them. Only if unchanged (a precondition).
    async fn collect_garbage(&self, state: &State, members: &[Member]) {
        let (index, _) = self.place(state, members);
        if index != 0 {
            return;
        }
        for member in members.iter().filter(|m| state.is_long_gone(m)) {
            let url = format!("{}/{}", self.collection(), member.name);
            let options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
                                 "preconditions": {"resourceVersion": member.version}});
            match self.credentials.delete(&url, &options).await {
                Ok(_) => tracing::info!(target: SHARDING,
                    "Removed the expired lease of {} ('{}').", member.identity, member.name),
                Err(error) => tracing::debug!(target: SHARDING,
                    "The expired lease '{}' was not removed: {}", member.name,
                    crate::util::errors::chain(&error)),
            }
        }
    }

    /// Renew (or create) our Lease with the range we claim.
    async fn renew(&self, state: &mut State, claim: Option<Range>) -> Result<(), kube::Error> {
        let now = super::leadership::micro_time();
        let seconds = self.settings.lease_duration.ceil() as i64;
        let annotation = claim.map(|r| r.annotation()).unwrap_or_default();
        let url = format!("{}/{}", self.collection(), self.lease_name());
        let mut lease = match state.lease.take() {
            Some(lease) => lease,
            None => match self.credentials.get(&url).await {
                Ok(lease) => {
                    state.joined = true;
                    lease
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    let lease = json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.lease_name(), "namespace": self.namespace(),
                                     "labels": {GROUP_LABEL: self.group},
                                     "annotations": {RANGE_ANNOTATION: annotation}},
                        "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": seconds,
                                 "acquireTime": now, "renewTime": now},
                    });
                    state.lease = Some(self.credentials.post(&self.collection(), &lease).await?);
                    state.joined = true;
                    return Ok(());
                }
                Err(error) => return Err(error),
            },
        };
        lease["metadata"]["labels"][GROUP_LABEL] = json!(self.group);
        lease["metadata"]["annotations"][RANGE_ANNOTATION] = json!(annotation);
        lease["spec"]["holderIdentity"] = json!(self.identity);
        lease["spec"]["leaseDurationSeconds"] = json!(seconds);
        lease["spec"]["renewTime"] = json!(now);
        // The version makes it a compare-and-swap; on a conflict, it is read anew next time.
        state.lease = Some(self.credentials.put(&url, &lease).await?);
        Ok(())
    }

    /// Leaving: stop handling, let what runs finish under our claim (renewed meanwhile, so
    /// that nobody takes the range before it has finished; the engine's exit bounds the
    /// wait), then delete the Lease so that the others take our range at once.
    async fn leave(&self, state: &mut State) {
        self.pause.lead_until(self.voter, None);
        let claim = match state.serving {
            Serving::Range(range) | Serving::Stopping(range) => Some(range),
            Serving::Nothing => None,
        };
        if !self.pause.is_quiet() {
            tracing::info!(target: SHARDING,
                "Leaving the group '{}' once the handling in progress has finished.", self.group);
        }
        let deadline = Duration::from_secs_f64(self.settings.renew_deadline);
        let retry = Duration::from_secs_f64(self.settings.retry_period);
        while !self.pause.quiet_within(retry).await {
            match tokio::time::timeout(deadline, self.renew(state, claim)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(target: SHARDING,
                    "The lease '{}' could not be renewed while leaving: {}", self.lease_name(),
                    crate::util::errors::chain(&error)),
                Err(_) => tracing::warn!(target: SHARDING,
                    "The lease '{}': the API did not answer in {} seconds while leaving.",
                    self.lease_name(), self.settings.renew_deadline),
            }
        }
        if !state.joined {
            return; // never created
        }
        let url = format!("{}/{}", self.collection(), self.lease_name());
        match self.credentials.delete(&url, &json!({})).await {
            Ok(_) => tracing::info!(target: SHARDING,
                "Left the group '{}': the lease '{}/{}' is deleted.", self.group, self.namespace(), self.lease_name()),
            Err(error) => tracing::warn!(target: SHARDING,
                "The lease '{}' could not be deleted (it will expire): {}", self.lease_name(),
                crate::util::errors::chain(&error)),
        }
    }
}

#[derive(Default)]
struct State {
    serving: Serving,
    /// Handling is valid until then (renewed in time), while serving.
    valid_until: Option<Instant>,
    /// Our Lease as last written (its version for the next compare-and-swap); none after a
    /// failed or cut-off renewal (it is read anew).
    lease: Option<Value>,
    /// Our Lease was created or found: it is deleted on leaving, even if the last renewal
    /// was cut off by the stop.
    joined: bool,
    /// Our Lease's name.
    own: String,
    observed: HashMap<String, Observed>,
    /// Said that another replica's claim is in the way (said once per wait).
    waiting: bool,
}

impl State {
    /// Held by a replica that renewed it within its duration (by our clock); ours always.
    fn is_live(&self, member: &Member) -> bool {
        if member.identity.is_empty() {
            return false;
        }
        member.name == self.own || self.expired_for(member).is_none()
    }

    /// Expired for three of its durations more: its replica is gone for good.
    fn is_long_gone(&self, member: &Member) -> bool {
        let Some(seen) = self.observed.get(&member.name) else {
            return false;
        };
        member.name != self.own
            && (self.expired_for(member))
                .is_some_and(|d| d >= Duration::from_secs_f64(3.0 * seen.duration.max(0.0)))
    }

    /// For how long the member's Lease has been expired (none: not expired), by our clock.
    fn expired_for(&self, member: &Member) -> Option<Duration> {
        let seen = self.observed.get(&member.name)?;
        let expiry = seen.since + Duration::from_secs_f64(seen.duration.max(0.0));
        Instant::now().checked_duration_since(expiry)
    }
}

/// Whether the API server filters by shards: its lists then say which shard they are
/// (asked of the Leases in `namespace`, which the replicas need to read anyway).
pub async fn supported(credentials: &Credentials, namespace: &str) -> Result<bool, kube::Error> {
    let selector = Range::part(0, 1).selector();
    let url = format!(
        "{}?limit=1&shardSelector={}",
        leases(namespace),
        urlencode(&selector)
    );
    let list = credentials.get(&url).await?;
    Ok(list.pointer("/metadata/shardInfo").is_some())
}

fn leases(namespace: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
}

/// The 64-bit FNV-1a hash (stable across versions and hosts, unlike std's hasher).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_is_split_evenly_without_gaps() {
        assert_eq!(
            Range::part(0, 2).selector(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            Range::part(1, 2).selector(),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        for count in 1..=7 {
            let parts: Vec<Range> = (0..count).map(|i| Range::part(i, count)).collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[count - 1].end, SPACE);
            for pair in parts.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
                assert!(!pair[0].overlaps(&pair[1]));
            }
        }
        assert!(Range::part(0, 2).overlaps(&Range::part(0, 3)));
        assert!(Range::part(0, 1).overlaps(&Range::part(2, 3)));
    }

    #[test]
    fn claims_are_read_back_as_written() {
        let range = Range::part(1, 3);
        assert_eq!(Range::parse(&range.annotation()), Some(range));
        assert_eq!(Range::parse(""), None);
        assert_eq!(Range::parse("0x8-0x2"), None);
        assert_eq!(Range::parse("nonsense"), None);
    }

    #[test]
    fn expired_members_are_not_live_and_ours_always_is() {
        let member = |name: &str, identity: &str| Member {
            name: name.into(),
            identity: identity.into(),
            version: "1".into(),
            duration: Some(15.0),
            claim: None,
        };
        let mut state = State {
            own: "ours".into(),
            ..State::default()
        };
        let long_ago = Instant::now() - Duration::from_secs(100);
        for name in ["ours", "gone", "fresh"] {
            let since = if name == "fresh" {
                Instant::now()
            } else {
                long_ago
            };
            state.observed.insert(
                name.into(),
                Observed {
                    version: "1".into(),
                    since,
                    duration: 15.0,
                },
            );
        }
        assert!(state.is_live(&member("ours", "a")));
        assert!(state.is_live(&member("fresh", "b")));
        assert!(!state.is_live(&member("gone", "c")));
        assert!(state.is_long_gone(&member("gone", "c")));
        assert!(
            !state.is_live(&member("fresh", "")),
            "released: nobody holds it"
        );
    }

    #[test]
    fn lease_names_are_stable_hashes() {
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
