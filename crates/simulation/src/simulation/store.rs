//! The simulated API's objects, kept as the API server keeps them:
//! - one resource version counter for all resources;
//! - `uid`, `creationTimestamp` and `generation` set by the store (a `generation` that grows
//!   when anything but the metadata and the status changes);
//! - a write that changes nothing, which is neither versioned nor watched;
//! - the status subresource (the object's endpoint ignores `status`, the status endpoint takes
//!   only it);
//! - optimistic locking by `resourceVersion`;
//! - deletion held by finalizers (a `deletionTimestamp`, no new finalizers after it), the
//!   object gone when the last finalizer goes;
//! - the children that name a gone object in their `ownerReferences`, deleted after it;
//! - each resource's latest changes kept for watches that resume from a version, and a watch
//!   from a compacted version answered with 410 Gone.

use crate::simulation::patching::{self, PatchType};
use crate::simulation::schemas;
use crate::simulation::selectors::LabelSelector;
use chrono::{DateTime, SecondsFormat, Utc};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// How many changes of each resource are kept for watches that resume from a version: a watch
/// from before them is 410 Gone, as after etcd's compaction.
pub const HISTORY: usize = 1000;

/// A resource the simulation serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// The API group (`""` for the core group).
    pub group: String,
    /// The version served (one per resource).
    pub version: String,
    /// The plural name, as in the URLs.
    pub plural: String,
    /// The kind, as in the objects.
    pub kind: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// Whether `status` is a subresource.
    pub status: bool,
    /// The names besides the plural that kubectl and operators may use (`gr`, `cm`).
    pub short_names: Vec<String>,
    /// The groups of resources that it is in (`all`).
    pub categories: Vec<String>,
    /// A CRD's structural schema of the version served (`openAPIV3Schema`), if it has one.
    pub schema: Option<Arc<Value>>,
}

impl Kind {
    /// How the store names the resource: `plural.group`, or `plural` in the core group.
    pub fn key(&self) -> String {
        key(&self.group, &self.plural)
    }

    /// How the server names it in its refusals: `Greeting.demo.kopf.dev`, `ConfigMap`.
    pub fn qualified(&self) -> String {
        match self.group.as_str() {
            "" => self.kind.clone(),
            group => format!("{}.{group}", self.kind),
        }
    }

    /// The objects' `apiVersion`.
    pub fn api_version(&self) -> String {
        match self.group.as_str() {
            "" => self.version.clone(),
            group => format!("{group}/{}", self.version),
        }
    }
}

/// How the store names a resource: `plural.group`, or `plural` in the core group.
pub fn key(group: &str, plural: &str) -> String {
    match group {
        "" => plural.to_owned(),
        group => format!("{plural}.{group}"),
    }
}

/// An error as the API server answers it: its HTTP code, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// The `Status` object's `reason`.
    pub reason: &'static str,
    /// The `Status` object's `message`, as the API server words it.
    pub message: String,
}

impl ApiError {
    /// An error of this status code, reason and message.
    pub fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
        }
    }

    fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
    }

    fn conflict(resource: &str, name: &str) -> Self {
        Self::new(409, "Conflict", format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ))
    }

    fn invalid(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{resource} \"{name}\" is invalid: {why}"),
        )
    }

    /// A request the server cannot read.
    pub fn bad_request(message: String) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// The `Status` object that the API server answers with.
    pub fn status(&self) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message, "reason": self.reason, "code": self.code})
    }
}

/// What happened to an object, as a watch tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created (or there already, at the start of a watch without a version).
    Added,
    /// Changed.
    Modified,
    /// Gone.
    Deleted,
}

impl EventType {
    /// The name in a watch event's `type`.
    pub fn name(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One event of a watch.
pub type Watched = (EventType, Arc<Value>);

/// The clock that timestamps the objects (the tests' own, or the wall clock).
pub type Clock = Box<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The simulated API's objects.
pub struct Store {
    inner: Mutex<Inner>,
    now: Clock,
}

#[derive(Default)]
struct Inner {
    /// The last resource version given, of all resources.
    revision: u64,
    resources: BTreeMap<String, Objects>,
}

struct Objects {
    kind: Kind,
    /// By namespace (`""` for cluster-scoped objects) and name.
    items: BTreeMap<(String, String), Value>,
    /// The latest changes, oldest first, with the version each made.
    history: VecDeque<(u64, EventType, Arc<Value>)>,
    /// Changes up to this version are no longer kept.
    compacted: u64,
    watchers: Vec<Watcher>,
}

struct Watcher {
    namespace: Option<String>,
    selector: Option<LabelSelector>,
    events: mpsc::UnboundedSender<Watched>,
}

impl Watcher {
    fn sees(&self, object: &Value) -> bool {
        (self.namespace.is_none() || self.namespace.as_deref() == namespace_of(object))
            && (self.selector.as_ref()).is_none_or(|s| s.matches(object))
    }
}

fn namespace_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
}

fn name_of(object: &Value) -> &str {
    (object.pointer("/metadata/name").and_then(Value::as_str)).unwrap_or_default()
}

fn finalizers_of(object: &Value) -> Vec<&str> {
    let finalizers = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array);
    let names = finalizers.into_iter().flatten().filter_map(Value::as_str);
    names.collect()
}

impl Default for Store {
    fn default() -> Self {
        Store::new(Box::new(Utc::now))
    }
}

impl Store {
    /// An empty store whose objects are timestamped by this clock.
    pub fn new(now: Clock) -> Self {
        Store {
            inner: Mutex::default(),
            now,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn timestamp(&self) -> String {
        (self.now)().to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// Serve this resource (again: its objects stay).
    pub fn define(&self, kind: Kind) {
        let mut inner = self.inner();
        let key = kind.key();
        match inner.resources.get_mut(&key) {
            Some(objects) => objects.kind = kind,
            None => {
                let objects = Objects {
                    kind,
                    items: BTreeMap::new(),
                    history: VecDeque::new(),
                    compacted: 0,
                    watchers: Vec::new(),
                };
                inner.resources.insert(key, objects);
            }
        }
    }

    /// The resources served.
    pub fn kinds(&self) -> Vec<Kind> {
        (self.inner().resources.values())
            .map(|o| o.kind.clone())
            .collect()
    }

    /// Create the object (`metadata.generateName` gets a random suffix); as created.
    pub fn create(
        &self,
        resource: &str,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Value, ApiError> {
        let now = self.timestamp();
        let mut inner = self.inner();
        let kind = inner.objects(resource)?.kind.clone();
        let Value::Object(mut fields) = body else {
            return Err(ApiError::bad_request(
                "the object is not a JSON object".into(),
            ));
        };
        let mut metadata = match fields.remove("metadata") {
            Some(Value::Object(metadata)) => metadata,
            None => serde_json::Map::new(),
            Some(_) => return Err(ApiError::bad_request("metadata is not an object".into())),
        };
        let namespace = match (kind.namespaced, namespace, metadata.get("namespace")) {
            (false, ..) => None,
            (true, Some(ns), Some(Value::String(own))) if own != ns => {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({own}) does not match the namespace sent on the request ({ns})"
                )))
            }
            (true, Some(ns), _) => Some(ns.to_owned()),
            (true, None, Some(Value::String(own))) => Some(own.clone()),
            (true, None, _) => Some("default".to_owned()),
        };
        let name = match (metadata.get("name"), metadata.get("generateName")) {
            (Some(Value::String(name)), _) if !name.is_empty() => name.clone(),
            (_, Some(Value::String(prefix))) if !prefix.is_empty() => {
                format!("{prefix}{}", random_suffix())
            }
            _ => {
                return Err(ApiError::invalid(
                    &kind.qualified(),
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ))
            }
        };
        let at = (namespace.clone().unwrap_or_default(), name.clone());
        if inner.objects(resource)?.items.contains_key(&at) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", kind.key()),
            ));
        }
        if kind.status {
            fields.remove("status"); // (not taken at creation: the status endpoint sets it)
        }
        for owned in [
            "deletionTimestamp",
            "resourceVersion",
            "uid",
            "creationTimestamp",
        ] {
            metadata.remove(owned);
        }
        metadata.insert("name".into(), json!(name));
        if let Some(namespace) = &namespace {
            metadata.insert("namespace".into(), json!(namespace));
        } else {
            metadata.remove("namespace");
        }
        metadata.insert("uid".into(), json!(random_uid()));
        metadata.insert("creationTimestamp".into(), json!(now));
        metadata.insert("generation".into(), json!(1));
        let mut object = serde_json::Map::new();
        object.insert("apiVersion".into(), json!(kind.api_version()));
        object.insert("kind".into(), json!(kind.kind));
        object.insert("metadata".into(), Value::Object(metadata));
        object.extend(
            fields
                .into_iter()
                .filter(|(k, _)| k != "apiVersion" && k != "kind"),
        );
        let mut object = Value::Object(object);
        if let Some(schema) = &kind.schema {
            schemas::admit(schema, &mut object)
                .map_err(|why| ApiError::invalid(&kind.qualified(), &name, &why))?;
        }
        Ok(inner.store(resource, at, object, EventType::Added))
    }

    /// The object as it is now.
    pub fn get(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let inner = self.inner();
        let objects = inner.objects_ref(resource)?;
        let at = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        (objects.items.get(&at).cloned()).ok_or_else(|| ApiError::not_found(resource, name))
    }

    /// The objects (in one namespace, or all), with the version the list is as of.
    pub fn list(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<&LabelSelector>,
    ) -> Result<(Vec<Value>, u64), ApiError> {
        let inner = self.inner();
        let objects = inner.objects_ref(resource)?;
        let items = (objects.items.iter())
            .filter(|((ns, _), _)| namespace.is_none_or(|wanted| wanted == ns))
            .map(|(_, object)| object)
            .filter(|object| selector.is_none_or(|s| s.matches(object)))
            .cloned()
            .collect();
        Ok((items, inner.revision))
    }

    /// Watch the objects (in one namespace, or all): from this version on, or all of them as
    /// added and then their changes (no version). 410 Gone if that version is compacted away.
    pub fn watch(
        &self,
        resource: &str,
        namespace: Option<&str>,
        selector: Option<LabelSelector>,
        since: Option<u64>,
    ) -> Result<mpsc::UnboundedReceiver<Watched>, ApiError> {
        let mut inner = self.inner();
        let objects = inner.objects(resource)?;
        let (events, receiver) = mpsc::unbounded_channel();
        let watcher = Watcher {
            namespace: namespace.map(str::to_owned),
            selector,
            events,
        };
        match since {
            Some(since) if since < objects.compacted => {
                return Err(ApiError::new(
                    410,
                    "Expired",
                    format!(
                        "too old resource version: {since} ({})",
                        objects.compacted + 1
                    ),
                ))
            }
            Some(since) => {
                let newer = objects.history.iter().filter(|(rv, ..)| *rv > since);
                for (_, event_type, object) in newer.filter(|(_, _, o)| watcher.sees(o)) {
                    let _ = watcher.events.send((*event_type, object.clone()));
                }
            }
            None => {
                for object in objects.items.values().filter(|o| watcher.sees(o)) {
                    let _ = (watcher.events).send((EventType::Added, Arc::new(object.clone())));
                }
            }
        }
        objects.watchers.push(watcher);
        Ok(receiver)
    }

    /// End every watch now, as an API server does when a watch times out or the server
    /// restarts; with `expire`, the history is compacted too: a watch from any version before
    /// now is then answered with 410 Gone (the client must list again).
    pub fn cut_watches(&self, expire: bool) {
        let mut inner = self.inner();
        let revision = inner.revision;
        for objects in inner.resources.values_mut() {
            objects.watchers.clear(); // their streams end
            if expire {
                objects.history.clear();
                objects.compacted = revision;
            }
        }
    }

    /// Patch the object, or its status (`subresource`); as it is after.
    pub fn patch(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let now = self.timestamp();
        let mut inner = self.inner();
        let old = inner.current(resource, namespace, name)?;
        let patched = patching::apply(&old, patch_type, patch)
            .map_err(|why| ApiError::invalid(resource, name, &why))?;
        if version_of(&patched) != version_of(&old) {
            return Err(ApiError::conflict(resource, name)); // (a patch that names a version)
        }
        inner.write(resource, &old, patched, subresource, &now)
    }

    /// Replace the object, or its status (`subresource`); 409 if its `resourceVersion` is
    /// given and is not the object's. As it is after.
    pub fn replace(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let now = self.timestamp();
        let mut inner = self.inner();
        let old = inner.current(resource, namespace, name)?;
        if version_of(&body).is_some_and(|v| Some(v) != version_of(&old)) {
            return Err(ApiError::conflict(resource, name));
        }
        inner.write(resource, &old, body, subresource, &now)
    }

    /// Delete the object: gone at once without finalizers, else marked with a
    /// `deletionTimestamp` until they are removed. As it is after.
    pub fn delete(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let now = self.timestamp();
        let mut inner = self.inner();
        let old = inner.current(resource, namespace, name)?;
        Ok(inner.delete(resource, old, &now))
    }
}

impl Inner {
    fn objects(&mut self, resource: &str) -> Result<&mut Objects, ApiError> {
        (self.resources.get_mut(resource)).ok_or_else(|| unknown(resource))
    }

    fn objects_ref(&self, resource: &str) -> Result<&Objects, ApiError> {
        (self.resources.get(resource)).ok_or_else(|| unknown(resource))
    }

    fn current(
        &mut self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let objects = self.objects(resource)?;
        let at = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        (objects.items.get(&at).cloned()).ok_or_else(|| ApiError::not_found(resource, name))
    }

    /// Write a new state of an existing object: what the store keeps is its own, whatever
    /// the request says (metadata it sets, the status by the endpoint written).
    fn write(
        &mut self,
        resource: &str,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
        now: &str,
    ) -> Result<Value, ApiError> {
        let kind = self.objects(resource)?.kind.clone();
        let name = name_of(old).to_owned();
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the object is not a JSON object".into(),
            ));
        }
        match subresource {
            None if kind.status => put(&mut new, "status", old.get("status").cloned()),
            None => {}
            Some("status") if kind.status => {
                let status = new.get("status").cloned();
                new = old.clone();
                put(&mut new, "status", status);
            }
            Some(other) => return Err(ApiError::not_found(&format!("{resource}/{other}"), &name)),
        }
        for owned in [
            "uid",
            "name",
            "namespace",
            "creationTimestamp",
            "deletionTimestamp",
        ] {
            let kept = old.pointer(&format!("/metadata/{owned}")).cloned();
            put(meta_mut(&mut new), owned, kept);
        }
        put(&mut new, "apiVersion", old.get("apiVersion").cloned());
        put(&mut new, "kind", old.get("kind").cloned());
        if let Some(schema) = &kind.schema {
            // Before the comparisons: a write of pruned fields alone changes nothing.
            schemas::admit(schema, &mut new)
                .map_err(|why| ApiError::invalid(&kind.qualified(), &name, &why))?;
        }
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        let before: Vec<&str> = finalizers_of(old);
        if deleting && finalizers_of(&new).iter().any(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                resource,
                &name,
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
            ));
        }
        let generation = old.pointer("/metadata/generation").and_then(Value::as_i64);
        let specified = |body: &Value| {
            let mut body = body.clone();
            if let Some(fields) = body.as_object_mut() {
                fields.remove("metadata");
                fields.remove("status");
            }
            body
        };
        let generation = match specified(&new) == specified(old) {
            true => generation,
            false => generation.map(|g| g + 1),
        };
        put(
            meta_mut(&mut new),
            "generation",
            generation.map(Value::from),
        );
        put(
            meta_mut(&mut new),
            "resourceVersion",
            old.pointer("/metadata/resourceVersion").cloned(),
        );
        if &new == old {
            return Ok(new); // nothing changed: no new version, no event
        }
        if deleting && finalizers_of(&new).is_empty() {
            return Ok(self.remove(resource, new, now));
        }
        let at = (namespace_of(old).unwrap_or_default().to_owned(), name);
        Ok(self.store(resource, at, new, EventType::Modified))
    }

    fn delete(&mut self, resource: &str, old: Value, now: &str) -> Value {
        if finalizers_of(&old).is_empty() {
            return self.remove(resource, old, now);
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return old; // already being deleted
        }
        let mut new = old;
        put(meta_mut(&mut new), "deletionTimestamp", Some(json!(now)));
        let at = (
            namespace_of(&new).unwrap_or_default().to_owned(),
            name_of(&new).to_owned(),
        );
        self.store(resource, at, new, EventType::Modified)
    }

    /// The object is gone; so are the children whose owner references name it.
    fn remove(&mut self, resource: &str, object: Value, now: &str) -> Value {
        let at = (
            namespace_of(&object).unwrap_or_default().to_owned(),
            name_of(&object).to_owned(),
        );
        let mut gone = object;
        self.revision += 1;
        put(
            meta_mut(&mut gone),
            "resourceVersion",
            Some(json!(self.revision.to_string())),
        );
        let revision = self.revision;
        if let Ok(objects) = self.objects(resource) {
            objects.items.remove(&at);
            objects.record(revision, EventType::Deleted, &gone);
        }
        let uid = gone.pointer("/metadata/uid").and_then(Value::as_str);
        if let Some(uid) = uid {
            for (child_resource, child) in self.children(uid) {
                self.delete(&child_resource, child, now);
            }
        }
        gone
    }

    /// The objects whose owner references name this uid.
    fn children(&self, uid: &str) -> Vec<(String, Value)> {
        let names_it = |object: &&Value| {
            let references = object.pointer("/metadata/ownerReferences");
            let references = references.and_then(Value::as_array).into_iter().flatten();
            references
                .filter_map(|r| r.get("uid"))
                .any(|u| u.as_str() == Some(uid))
        };
        let mut found = Vec::new();
        for (resource, objects) in &self.resources {
            for child in objects.items.values().filter(names_it) {
                found.push((resource.clone(), child.clone()));
            }
        }
        found
    }

    /// Keep the object at a new version and tell the watchers; as kept.
    fn store(
        &mut self,
        resource: &str,
        at: (String, String),
        mut object: Value,
        event_type: EventType,
    ) -> Value {
        self.revision += 1;
        let version = Some(json!(self.revision.to_string()));
        put(meta_mut(&mut object), "resourceVersion", version);
        let revision = self.revision;
        if let Ok(objects) = self.objects(resource) {
            objects.items.insert(at, object.clone());
            objects.record(revision, event_type, &object);
        }
        object
    }
}

impl Objects {
    /// A change: kept for watches that resume, and sent to the watches open.
    fn record(&mut self, revision: u64, event_type: EventType, object: &Value) {
        let object = Arc::new(object.clone());
        self.history
            .push_back((revision, event_type, object.clone()));
        while self.history.len() > HISTORY {
            if let Some((compacted, ..)) = self.history.pop_front() {
                self.compacted = compacted;
            }
        }
        self.watchers.retain(|watcher| {
            !watcher.sees(&object) || watcher.events.send((event_type, object.clone())).is_ok()
        });
    }
}

fn unknown(resource: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("the server could not find the requested resource ({resource})"),
    )
}

fn version_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

/// The object's `metadata`, made an object if it was not one.
fn meta_mut(object: &mut Value) -> &mut Value {
    let fields = object.as_object_mut().expect("an object (checked before)");
    let metadata = fields.entry("metadata").or_insert_with(|| json!({}));
    if !metadata.is_object() {
        *metadata = json!({});
    }
    metadata
}

/// Set a field of an object, or remove it (`None`).
fn put(object: &mut Value, field: &str, value: Option<Value>) {
    if let Some(fields) = object.as_object_mut() {
        match value {
            Some(value) => _ = fields.insert(field.to_owned(), value),
            None => _ = fields.shift_remove(field),
        }
    }
}

fn random_uid() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// What the API server appends to a `generateName`: five of its consonants and digits.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests;
