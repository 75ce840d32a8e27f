//! The handlers' descriptions as the core sees them (the functions stay in
//! Python), and their filters: what can be decided here without Python is
//! decided here; callbacks are left for the Python side.

use crate::client::resources::Selector;
use crate::util::dicts::{self, FieldPath};
use serde::Deserialize;
use serde_json::Value;

/// A filter on one value: labels, annotations, fields, old/new values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum ValueFilter {
    /// The label or annotation must be there (`kopf.PRESENT`).
    Present,
    /// It must not be there (`kopf.ABSENT`).
    Absent,
    /// It must have this value.
    Equals(Value),
    /// A Python callable: only Python can answer.
    Callback,
}

/// Why an object is processed: Kopf's causes, and the changes no handler is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The object is new.
    Create,
    /// Its essence has changed.
    Update,
    /// It is being deleted (its deletion timestamp is set).
    Delete,
    /// Seen for the first time by this operator's run, and not new.
    Resume,
    /// Something changed, but not its essence.
    Noop,
    /// Being deleted, but we hold no finalizer on it: nothing to do.
    Free,
    /// Deleted from the cluster.
    Gone,
}

impl Reason {
    /// Kopf's name of the cause (`create`, `update`, ...), as in progress records and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Create => "create",
            Reason::Update => "update",
            Reason::Delete => "delete",
            Reason::Resume => "resume",
            Reason::Noop => "noop",
            Reason::Free => "free",
            Reason::Gone => "gone",
        }
    }

    /// The reasons for which handlers are called (others are the reactor's own).
    pub fn is_for_handlers(self) -> bool {
        matches!(
            self,
            Reason::Create | Reason::Update | Reason::Delete | Reason::Resume
        )
    }

    /// The human title of a purpose, as in "Creation is processed".
    pub fn title(purpose: &str) -> String {
        match purpose {
            "create" => "creation".into(),
            "update" => "updating".into(),
            "delete" => "deletion".into(),
            "resume" => "resuming".into(),
            other => format!("'{other}'"),
        }
    }
}

/// What every resource handler has: its resource, metadata and field filters.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceFilters {
    /// Which resources: the operator's handlers have one; sub-handlers take their parent's.
    #[serde(default)]
    pub selector: Option<Selector>,
    /// `labels=`: each label's filter.
    #[serde(default)]
    pub labels: Vec<(String, ValueFilter)>,
    /// `annotations=`: each annotation's filter.
    #[serde(default)]
    pub annotations: Vec<(String, ValueFilter)>,
    /// `field=`: the field it is about (its changes, its value).
    #[serde(default)]
    pub field: Option<FieldPath>,
    /// `None` means "the field is present in either old or new".
    #[serde(default)]
    pub value: Option<ValueFilter>,
    /// `when=`: a callback decides too (asked in Python).
    #[serde(default)]
    pub has_when: bool,
}

/// The old and new essences of a change (either may be absent).
pub(crate) type Essences<'a> = (Option<&'a Value>, Option<&'a Value>);

/// The result of matching without Python.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Does not match.
    No,
    /// Matches.
    Yes,
    /// Matches so far, but callbacks must decide.
    AskPython,
}

impl Match {
    fn and(self, other: impl FnOnce() -> Match) -> Match {
        match self {
            Match::No => Match::No,
            Match::Yes => other(),
            Match::AskPython => match other() {
                Match::No => Match::No,
                _ => Match::AskPython,
            },
        }
    }
}

impl ResourceFilters {
    /// Labels, annotations and field values: for changes (`Some((old, new))` essences),
    /// in either the old or the new essence; otherwise in the body.
    pub fn prematch(&self, body: &Value, change: Option<Essences>) -> Match {
        let labels = dicts::meta(body, "labels");
        let annotations = dicts::meta(body, "annotations");
        match_meta(&self.labels, labels)
            .and(|| match_meta(&self.annotations, annotations))
            .and(|| self.match_field_values(body, change))
            .and(|| {
                if self.has_when {
                    Match::AskPython
                } else {
                    Match::Yes
                }
            })
    }

    fn match_field_values(&self, body: &Value, change: Option<Essences>) -> Match {
        let Some(field) = &self.field else {
            return Match::Yes;
        };
        let values: Vec<Option<&Value>> = match change {
            Some((old, new)) => vec![
                new.and_then(|n| dicts::resolve(n, field)),
                old.and_then(|o| dicts::resolve(o, field)),
            ],
            None => vec![dicts::resolve(body, field)],
        };
        let verdict = match &self.value {
            None | Some(ValueFilter::Present) => values.iter().any(Option::is_some),
            Some(ValueFilter::Absent) => values.iter().any(Option::is_none),
            Some(ValueFilter::Equals(want)) => values.contains(&Some(want)),
            Some(ValueFilter::Callback) => return Match::AskPython,
        };
        if verdict {
            Match::Yes
        } else {
            Match::No
        }
    }
}

fn match_meta(pattern: &[(String, ValueFilter)], content: Option<&Value>) -> Match {
    let mut result = Match::Yes;
    for (key, filter) in pattern {
        let value = content.and_then(|c| c.get(key));
        let verdict = match filter {
            ValueFilter::Absent => value.is_none(),
            ValueFilter::Present => value.is_some(),
            ValueFilter::Equals(want) => value == Some(want),
            ValueFilter::Callback => {
                result = Match::AskPython;
                true
            }
        };
        if !verdict {
            return Match::No;
        }
    }
    result
}

/// `@kopf.on.create/update/delete/resume/field` handlers.
#[derive(Debug, Clone, Deserialize)]
pub struct ChangingHandler {
    /// The position in the Python-side registry, to call the function back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`): in logs, progress records and kwargs.
    pub id: String,
    /// The cause it handles; `None` for `@kopf.on.field` (any but deletion).
    pub reason: Option<Reason>,
    /// `@kopf.on.resume`: also for objects seen at the operator's start.
    #[serde(default)]
    pub initial: bool,
    /// `@kopf.on.resume(deleted=True)`: also for objects already being deleted.
    #[serde(default)]
    pub deleted: bool,
    /// Whether objects get our finalizer for it (deletion handlers unless `optional=True`).
    #[serde(default)]
    pub requires_finalizer: bool,
    /// With `field=` and no value filter: only when the field has changed.
    #[serde(default)]
    pub field_needs_change: bool,
    /// `old=`: the field's value before the change.
    #[serde(default)]
    pub old: Option<ValueFilter>,
    /// `new=`: the field's value after the change.
    #[serde(default)]
    pub new: Option<ValueFilter>,
    /// Which objects and changes it is for.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

impl ChangingHandler {
    /// Field changes: was there a change of the field, do old and new values fit.
    pub fn match_field_changes(&self, old: Option<&Value>, new: Option<&Value>) -> Match {
        let Some(field) = &self.filters.field else {
            return Match::Yes;
        };
        let old = old.and_then(|o| dicts::resolve(o, field));
        let new = new.and_then(|n| dicts::resolve(n, field));
        if self.field_needs_change && old == new {
            return Match::No;
        }
        let fits = |filter: &Option<ValueFilter>, value: Option<&Value>| match filter {
            None => Match::Yes,
            Some(ValueFilter::Absent) if value.is_none() => Match::Yes,
            Some(ValueFilter::Present) if value.is_some() => Match::Yes,
            Some(ValueFilter::Equals(want)) if value == Some(want) => Match::Yes,
            Some(ValueFilter::Callback) => Match::AskPython,
            _ => Match::No,
        };
        fits(&self.old, old).and(|| fits(&self.new, new))
    }
}

/// `@kopf.on.event` handlers: every raw event, silently.
#[derive(Debug, Clone, Deserialize)]
pub struct WatchingHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`).
    pub id: String,
    /// Which objects it is for.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

/// `@kopf.index` handlers: every state of the objects, into an in-memory index of this id.
#[derive(Debug, Clone, Deserialize)]
pub struct IndexingHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`): the index's name in the handlers' kwargs.
    pub id: String,
    /// Which objects it indexes.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

/// `@kopf.on.reconcile` handlers (not in Kopf): the object's state whenever anything about
/// it may have changed, coalesced per object; retried with the object's own backoff.
#[derive(Debug, Clone, Deserialize)]
pub struct ReconcilingHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`): its result goes to `status.<id>`.
    pub id: String,
    /// Keep the object until the handler has seen it deleted (Kopf's finalizer).
    #[serde(default)]
    pub finalizer: bool,
    /// The resources of its children (`owns=`): a change of one wakes the owner its
    /// `ownerReferences` name.
    #[serde(default)]
    pub owns: Vec<Selector>,
    /// Which objects it is for.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

impl Filtered for ReconcilingHandler {
    fn index(&self) -> usize {
        self.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.filters
    }
}

/// `@kopf.related` functions (not in Kopf): for each state of an object of their resource,
/// the owners it concerns; those owners' reconcile handlers are woken (as by `owns=`).
#[derive(Debug, Clone, Deserialize)]
pub struct RelatingHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`).
    pub id: String,
    /// The owners' resource (`owners=`): the objects named by the function are of it.
    pub owners: Selector,
    /// Which objects it maps.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

impl Filtered for RelatingHandler {
    fn index(&self) -> usize {
        self.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.filters
    }
}

/// Which kind of admission webhook a handler serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookType {
    /// `@kopf.on.validate`.
    Validating,
    /// `@kopf.on.mutate`.
    Mutating,
}

impl WebhookType {
    /// The kind's name in webhook configurations and reviews' paths.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookType::Validating => "validating",
            WebhookType::Mutating => "mutating",
        }
    }
}

/// `@kopf.on.validate` and `@kopf.on.mutate` handlers: called for admission reviews.
#[derive(Debug, Clone, Deserialize)]
pub struct WebhookHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`): its webhook's name and path.
    pub id: String,
    /// Validating or mutating.
    pub reason: WebhookType,
    /// `None`: all operations.
    #[serde(default)]
    pub operations: Option<Vec<String>>,
    /// `None`: the resource itself; `"*"`: it and all its subresources.
    #[serde(default)]
    pub subresource: Option<String>,
    /// `persistent=`: kept in the managed configurations when the operator exits.
    #[serde(default)]
    pub persistent: Option<bool>,
    /// `side_effects=`: whether it has side effects (the webhook's `sideEffects`).
    #[serde(default)]
    pub side_effects: Option<bool>,
    /// `ignore_failures=`: the webhook's failure policy is `Ignore`.
    #[serde(default)]
    pub ignore_failures: Option<bool>,
    /// Which objects and operations it is for.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

impl WebhookHandler {
    /// Whether a review (of this webhook's kind and id, if the request says) is this
    /// handler's, before its filters: Kopf leaves mutations out of deletions unless a
    /// handler is for deletions only, and does not look at `operations` (the webhook
    /// configuration does).
    pub fn serves(
        &self,
        reason: Option<WebhookType>,
        webhook: Option<&str>,
        operation: Option<&str>,
        subresource: Option<&str>,
    ) -> bool {
        let reason_ok = reason.is_none_or(|r| r == self.reason);
        let webhook_ok = webhook.is_none_or(|id| id == self.id);
        let for_deletion_only = self
            .operations
            .as_ref()
            .is_some_and(|ops| !ops.is_empty() && ops.iter().all(|op| op == "DELETE"));
        let deletion_ok = self.reason != WebhookType::Mutating
            || operation != Some("DELETE")
            || for_deletion_only;
        let subresource_ok =
            self.subresource.as_deref() == Some("*") || self.subresource.as_deref() == subresource;
        reason_ok && webhook_ok && deletion_ok && subresource_ok
    }
}

impl Filtered for WebhookHandler {
    fn index(&self) -> usize {
        self.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.filters
    }
}

/// Handlers called for an object's events or states as they are (no change to compare):
/// their position in the registry and their filters.
pub trait Filtered {
    /// Its position in the Python side's registry.
    fn index(&self) -> usize;
    /// Which objects and changes it is for.
    fn filters(&self) -> &ResourceFilters;
}

impl Filtered for WatchingHandler {
    fn index(&self) -> usize {
        self.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.filters
    }
}

impl Filtered for IndexingHandler {
    fn index(&self) -> usize {
        self.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.filters
    }
}

/// `@kopf.on.log` handlers: the lines of pods' containers' logs, matched here (a line that
/// matches no handler never reaches Python).
#[derive(Debug, Clone, Deserialize)]
pub struct LogHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`).
    pub id: String,
    /// `regex=`: none matches every line.
    #[serde(default)]
    pub regex: Option<crate::intents::patterns::LogPattern>,
    /// `container=`: the containers whose lines it takes; none: all of them.
    #[serde(default)]
    pub containers: Option<Vec<String>>,
    /// Which pods it is for.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

impl LogHandler {
    /// Whether it takes this container's lines.
    pub fn follows(&self, container: &str) -> bool {
        (self.containers.as_ref()).is_none_or(|names| names.iter().any(|n| n == container))
    }

    /// Whether it takes this line (of a container it follows).
    pub fn matches(&self, line: &[u8]) -> bool {
        self.regex.as_ref().is_none_or(|r| r.is_match(line))
    }
}

impl Filtered for LogHandler {
    fn index(&self) -> usize {
        self.index
    }
    fn filters(&self) -> &ResourceFilters {
        &self.filters
    }
}

/// `@kopf.on.convert` handlers: one step between two versions of a custom resource, called
/// for the objects of the API server's conversion reviews (a chain of them where no single
/// step leads from one version to the other).
#[derive(Debug, Clone, Deserialize)]
pub struct ConversionHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`).
    pub id: String,
    /// The custom resource (no version: the step names both).
    pub selector: Selector,
    /// The version it converts from, and the one it converts to (`v1`, `v2beta1`, ...).
    pub source: String,
    /// The version it converts to.
    pub target: String,
}

/// `@kopf.daemon` and `@kopf.timer` handlers: spawned per object, scheduled by the core.
#[derive(Debug, Clone, Deserialize)]
pub struct SpawningHandler {
    /// Its position in the Python side's registry: how the core calls it back.
    pub index: usize,
    /// Its id (`kopf.HandlerId`).
    pub id: String,
    /// A daemon or a timer.
    pub kind: SpawningKind,
    /// Seconds before the first call; `None` with `initial_delay_callable` asks Python.
    #[serde(default)]
    pub initial_delay: Option<f64>,
    /// `initial_delay=` is a callable: Python says the delay per object.
    #[serde(default)]
    pub initial_delay_callable: bool,
    /// `cancellation_backoff=`: seconds between the stop flag and the cancellation.
    #[serde(default)]
    pub cancellation_backoff: Option<f64>,
    /// `cancellation_timeout=`: seconds to wait for a cancelled daemon to exit.
    #[serde(default)]
    pub cancellation_timeout: Option<f64>,
    /// `cancellation_polling=`: how often a synchronous daemon's exit is checked.
    #[serde(default)]
    pub cancellation_polling: Option<f64>,
    /// `interval=`: seconds between a timer's calls.
    #[serde(default)]
    pub interval: Option<f64>,
    /// `idle=`: seconds without changes of the object before a timer's calls.
    #[serde(default)]
    pub idle: Option<f64>,
    /// `sharp=`: a timer's calls keep to the interval's grid, not its calls' ends.
    #[serde(default)]
    pub sharp: bool,
    /// A cron schedule instead of an interval (timers only).
    #[serde(default)]
    pub cron: Option<crate::intents::schedules::Schedule>,
    /// Which objects it is spawned for.
    #[serde(flatten)]
    pub filters: ResourceFilters,
}

/// Which kind of spawned handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpawningKind {
    /// `@kopf.daemon`: one long call per object.
    Daemon,
    /// `@kopf.timer`: a call per interval (or cron time) per object.
    Timer,
}

impl SpawningHandler {
    /// How Kopf names it in log lines: `Daemon 'id'` or `Timer 'id'`.
    pub fn title(&self) -> String {
        let kind = match self.kind {
            SpawningKind::Daemon => "Daemon",
            SpawningKind::Timer => "Timer",
        };
        format!(
            "{kind} {}",
            crate::util::encoding::to_python_repr(&Value::String(self.id.clone()))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filters(spec: Value) -> ResourceFilters {
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn metadata_filters() {
        let f = filters(json!({
            "selector": {"any_name": "pods"},
            "labels": [["app", {"kind": "equals", "value": "x"}], ["gone", {"kind": "absent"}]],
            "annotations": [["a", {"kind": "present"}]],
        }));
        let body = json!({"metadata": {"labels": {"app": "x"}, "annotations": {"a": ""}}});
        assert_eq!(f.prematch(&body, None), Match::Yes);
        let body = json!({"metadata": {"labels": {"app": "y"}, "annotations": {"a": ""}}});
        assert_eq!(f.prematch(&body, None), Match::No);
        let body =
            json!({"metadata": {"labels": {"app": "x", "gone": "1"}, "annotations": {"a": ""}}});
        assert_eq!(f.prematch(&body, None), Match::No);
    }

    #[test]
    fn callbacks_defer_to_python_unless_static_filters_fail() {
        let f = filters(json!({
            "selector": {"any_name": "pods"},
            "labels": [["app", {"kind": "callback"}], ["must", {"kind": "present"}]],
        }));
        assert_eq!(
            f.prematch(&json!({"metadata": {"labels": {"must": "1"}}}), None),
            Match::AskPython
        );
        assert_eq!(f.prematch(&json!({}), None), Match::No);
        let when = filters(json!({"selector": {"any_name": "pods"}, "has_when": true}));
        assert_eq!(when.prematch(&json!({}), None), Match::AskPython);
    }

    #[test]
    fn field_values_and_changes() {
        let handler: ChangingHandler = serde_json::from_value(json!({
            "index": 0, "id": "h/spec.x", "reason": "update", "field_needs_change": true,
            "selector": {"any_name": "pods"}, "field": ["spec", "x"],
            "new": {"kind": "equals", "value": 2},
        }))
        .unwrap();
        let old = json!({"spec": {"x": 1}});
        let new = json!({"spec": {"x": 2}});
        assert_eq!(
            handler
                .filters
                .prematch(&new, Some((Some(&old), Some(&new)))),
            Match::Yes
        );
        assert_eq!(
            handler.match_field_changes(Some(&old), Some(&new)),
            Match::Yes
        );
        assert_eq!(
            handler.match_field_changes(Some(&new), Some(&new)),
            Match::No
        );
        assert_eq!(
            handler.match_field_changes(Some(&new), Some(&old)),
            Match::No
        );
        let absent = json!({"spec": {}});
        assert_eq!(
            handler
                .filters
                .prematch(&absent, Some((Some(&absent), Some(&absent)))),
            Match::No
        );
    }
}
