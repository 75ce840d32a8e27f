//! Applying a cycle's patch to the object: merge-patches for the main resource and the
//! status subresource, in an order that loses nothing if the process dies between two of
//! them (`plan`), with the finalizer change folded into the last one under an optimistic
//! lock (the object's resourceVersion).

use crate::client::credentials::{Credentials, Slot};
use crate::client::resources::Resource;
use crate::object_log;
use crate::state::patches::{FinalizerOp, Patch};
use crate::util::logging::ObjectRef;
use futures::future::BoxFuture;
use serde_json::{Map, Value};
use std::sync::Arc;
use tracing::Level;

/// What a patch's writing has left.
#[derive(Debug, Default)]
pub struct Applied {
    /// The resourceVersion our patch produced, to recognise it in the watch stream.
    pub resource_version: Option<String>,
    /// What could not be applied now (the finalizer change after a conflict).
    pub remaining: Option<Patch>,
    /// The object is gone (404): nothing more to do for it.
    pub gone: bool,
}

/// Writes an object's patches: the API, or a fake in the engine's tests.
pub trait Patcher: Send + Sync {
    /// What the patch needs of `body` is read at once: the write does not hold the body
    /// while it waits for a request slot (in a burst, hundreds of cycles wait at once, and
    /// their bodies' trees were most of the burst's memory).
    fn apply<'a>(
        &'a self,
        body: &Value,
        patch: Patch,
    ) -> BoxFuture<'a, Result<Applied, kube::Error>>;
}

/// The objects of one resource, patched through the API.
pub struct ApiPatcher {
    /// The API's credentials.
    pub credentials: Arc<Credentials>,
    /// The objects' resource.
    pub resource: Arc<Resource>,
    /// The finalizer that `Patch::finalizer` adds or removes.
    pub finalizer: String,
}

impl Patcher for ApiPatcher {
    fn apply<'a>(
        &'a self,
        body: &Value,
        patch: Patch,
    ) -> BoxFuture<'a, Result<Applied, kube::Error>> {
        let (credentials, resource) = (&self.credentials, &self.resource);
        Box::pin(apply(credentials, resource, body, patch, &self.finalizer))
    }
}

/// Where one write of a patch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The object itself: metadata (annotations, finalizers), spec, and the status if the
    /// resource has no status subresource.
    Main,
    /// The status subresource.
    Status,
}

/// One request of a patch.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// The object itself or its status.
    pub target: Target,
    /// The merge-patch, as sent (for the status: with its `status` key).
    pub patch: Map<String, Value>,
    /// The finalizer's change, folded in under a version lock (only in the last write).
    pub finalizer: Option<FinalizerOp>,
}

/// The requests of a patch, in the order that loses nothing if the process dies between
/// two of them (a restart then re-runs a handler at most once, as Kopf promises):
/// 1. the outcome (`Patch::merge`): the status first (the handlers' results, and the progress
///    if kept there), then the object (the progress if kept in annotations, the handlers' own
///    patches), so that a handler's success is never recorded before its result;
/// 2. each later stage (`Patch::later`: the diff base, which declares the cause handled), so
///    that nothing is marked handled before its outcome (and the purge of its progress) lands;
/// 3. the finalizer's change, in the last write to the object (its removal lets the object go).
///
/// Consecutive writes to the same target are one write: with the default storages (progress
/// and diff base in annotations) a cycle is one status write and one object write, and one
/// write without a status subresource.
pub fn plan(patch: Patch, status_subresource: bool) -> Vec<Write> {
    let mut writes: Vec<Write> = Vec::new();
    for mut stage in std::iter::once(patch.merge).chain(patch.later) {
        let status = if status_subresource {
            stage.shift_remove("status")
        } else {
            None
        };
        let status = status.map(|status| Map::from_iter([("status".to_owned(), status)]));
        for (target, part) in [(Target::Status, status), (Target::Main, Some(stage))] {
            let Some(part) = part.filter(|part| !part.is_empty()) else {
                continue;
            };
            match writes.last_mut() {
                Some(last) if last.target == target => {
                    crate::util::dicts::merge_patch_maps(&mut last.patch, &part)
                }
                _ => writes.push(Write {
                    target,
                    patch: part,
                    finalizer: None,
                }),
            }
        }
    }
    if let Some(op) = patch.finalizer {
        match writes.last_mut() {
            Some(last) if last.target == Target::Main => last.finalizer = Some(op),
            _ => writes.push(Write {
                target: Target::Main,
                patch: Map::new(),
                finalizer: Some(op),
            }),
        }
    }
    writes
}

/// The writes of a patch, prepared from `body` now and sent when awaited.
pub fn apply<'a>(
    credentials: &'a Credentials,
    resource: &Resource,
    body: &Value,
    patch: Patch,
    finalizer: &str,
) -> impl std::future::Future<Output = Result<Applied, kube::Error>> + Send + 'a {
    let object = ObjectRef::of(body);
    let namespace = object.namespace.as_deref();
    let name = object.name.as_deref().unwrap_or_default();
    let writes = plan(patch, resource.has_status_subresource());
    let url = resource.url(namespace, Some(name), None);
    let status_url = (writes.iter().any(|write| write.target == Target::Status))
        .then(|| resource.url(namespace, Some(name), Some("status")));
    // What a folded finalizer change needs of the body: its finalizers and its version.
    let finalizers = writes
        .iter()
        .find_map(|write| write.finalizer)
        .map(|_| Folding {
            finalizers: crate::util::dicts::meta(body, "finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            version: crate::util::dicts::meta(body, "resourceVersion").cloned(),
            finalizer: finalizer.to_owned(),
        });
    async move {
        // The writes' state (a few KiB while in flight) is made once a slot is free: in a
        // burst, hundreds of cycles wait here with only their prepared patches. One slot
        // serves all the patch's requests.
        let slot = credentials.slot().await;
        let sending = Writes {
            credentials,
            slot: &slot,
            object: &object,
            url: &url,
            status_url: status_url.as_deref(),
        };
        Box::pin(sending.send(writes, finalizers)).await
    }
}

/// What folding a finalizer change into a write needs of the object as the cycle saw it.
struct Folding {
    finalizers: Vec<Value>,
    version: Option<Value>,
    finalizer: String,
}

/// The requests of one patch, in one request slot.
struct Writes<'a> {
    credentials: &'a Credentials,
    slot: &'a Slot<'a>,
    object: &'a ObjectRef,
    url: &'a str,
    /// Made only if the patch writes the status.
    status_url: Option<&'a str>,
}

impl Writes<'_> {
    async fn send(
        self,
        writes: Vec<Write>,
        folding: Option<Folding>,
    ) -> Result<Applied, kube::Error> {
        let mut applied = Applied::default();
        for write in writes {
            let Write {
                target,
                patch,
                finalizer,
            } = write;
            let folded = match (finalizer, &folding) {
                (Some(op), Some(folding)) => {
                    // Locked to the version our own writes before it made (or the body's).
                    let version = applied.resource_version.clone().map(Value::String);
                    let version = version.or_else(|| folding.version.clone());
                    Some((op, fold_finalizer(&patch, folding, version, op)))
                }
                _ => None,
            };
            let result = match folded {
                Some((op, with_finalizer)) => match self.logged(target, with_finalizer).await {
                    Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                        object_log!(Level::DEBUG, self.object, "Could not apply the patch in full due to conflicts with newer changes. Will try on the next cycle soon.");
                        applied.remaining = Some(Patch {
                            finalizer: Some(op),
                            ..Default::default()
                        });
                        if patch.is_empty() {
                            continue;
                        }
                        self.logged(target, patch).await
                    }
                    other => other,
                },
                None => self.logged(target, patch).await,
            };
            match result {
                Ok(version) => applied.resource_version = version.or(applied.resource_version),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(gone(self.object)),
                Err(error) => return Err(error),
            }
        }
        Ok(applied)
    }

    /// Merge-patch the object or its status (logged as Kopf logs it); the new resourceVersion.
    async fn logged(
        &self,
        target: Target,
        patch: Map<String, Value>,
    ) -> Result<Option<String>, kube::Error> {
        let patch = Value::Object(patch);
        let (what, url) = match target {
            Target::Main => ("resource", self.url),
            Target::Status => ("status", self.status_url.expect("made for status writes")),
        };
        object_log!(
            Level::DEBUG,
            self.object,
            "Merge-patching the {} with: {}",
            what,
            crate::util::encoding::to_python_repr(&crate::util::redaction::redacted(
                self.object,
                &patch
            ))
        );
        Ok(self
            .credentials
            .merge_patch_in::<Versioned>(self.slot, url, &patch)
            .await?
            .version())
    }
}

fn gone(object: &ObjectRef) -> Applied {
    object_log!(
        Level::DEBUG,
        object,
        "Patching was skipped: the object does not exist anymore."
    );
    Applied {
        resource_version: None,
        remaining: None,
        gone: true,
    }
}

/// The merge-patch with the whole new finalizers list, conditional on a version: the one
/// the cycle saw, or the one that our own writes before it made.
fn fold_finalizer(
    patch: &Map<String, Value>,
    folding: &Folding,
    version: Option<Value>,
    op: FinalizerOp,
) -> Map<String, Value> {
    let mut finalizers = folding.finalizers.clone();
    let finalizer = folding.finalizer.as_str();
    match op {
        FinalizerOp::Add if !finalizers.iter().any(|f| f == finalizer) => {
            finalizers.push(finalizer.into())
        }
        FinalizerOp::Add => {}
        FinalizerOp::Remove => finalizers.retain(|f| f != finalizer),
    }
    let mut merged = patch.clone();
    let metadata = merged
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.insert("finalizers".into(), Value::Array(finalizers));
        if let Some(version) = version {
            metadata.insert("resourceVersion".into(), version);
        }
    }
    merged
}

/// Of a patched object, only its new version is needed: the rest of the response is
/// skipped while parsing, not turned into values.
#[derive(serde::Deserialize)]
struct Versioned {
    #[serde(default)]
    metadata: VersionedMeta,
}

#[derive(serde::Deserialize, Default)]
struct VersionedMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl Versioned {
    fn version(self) -> Option<String> {
        self.metadata.resource_version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn folding(version: &str, finalizers: Value) -> Folding {
        Folding {
            finalizers: finalizers.as_array().unwrap().clone(),
            version: Some(json!(version)),
            finalizer: "mine".into(),
        }
    }

    #[test]
    fn finalizers_are_folded_with_a_version_lock() {
        let main = json!({"metadata": {"annotations": {"a": "b"}}});
        let with = folding("7", json!(["other"]));
        let folded = fold_finalizer(
            main.as_object().unwrap(),
            &with,
            with.version.clone(),
            FinalizerOp::Add,
        );
        assert_eq!(
            Value::Object(folded),
            json!({"metadata": {"annotations": {"a": "b"}, "finalizers": ["other", "mine"], "resourceVersion": "7"}})
        );
        let with = folding("8", json!(["mine", "other"]));
        let folded = fold_finalizer(&Map::new(), &with, Some(json!("9")), FinalizerOp::Remove);
        assert_eq!(
            Value::Object(folded),
            json!({"metadata": {"finalizers": ["other"], "resourceVersion": "9"}}),
            "locked to the version of our own write before it"
        );
    }

    fn patch(merge: Value, later: &[Value], finalizer: Option<FinalizerOp>) -> Patch {
        Patch {
            merge: merge.as_object().unwrap().clone(),
            later: later
                .iter()
                .map(|l| l.as_object().unwrap().clone())
                .collect(),
            finalizer,
        }
    }

    fn shown(writes: &[Write]) -> Vec<(Target, Value, Option<FinalizerOp>)> {
        (writes.iter())
            .map(|w| (w.target, Value::Object(w.patch.clone()), w.finalizer))
            .collect()
    }

    const RESULT: &str = "create_fn";

    #[test]
    fn results_first_then_the_progress_then_the_diff_base_then_the_finalizer() {
        // The default storages: progress and diff base in annotations.
        let cycle = patch(
            json!({"status": {RESULT: {"r": 1}}, "metadata": {"annotations": {"kopf/create_fn": null}}}),
            &[json!({"metadata": {"annotations": {"kopf/last": "{}"}}})],
            Some(FinalizerOp::Remove),
        );
        assert_eq!(
            shown(&plan(cycle, true)),
            [
                (Target::Status, json!({"status": {RESULT: {"r": 1}}}), None),
                (
                    Target::Main,
                    json!({"metadata": {"annotations": {"kopf/create_fn": null, "kopf/last": "{}"}}}),
                    Some(FinalizerOp::Remove)
                ),
            ]
        );
    }

    #[test]
    fn without_a_status_subresource_one_write() {
        let cycle = patch(
            json!({"status": {RESULT: {"r": 1}}, "metadata": {"annotations": {"kopf/create_fn": "{}"}}}),
            &[json!({"metadata": {"annotations": {"kopf/last": "{}"}}})],
            None,
        );
        let writes = plan(cycle, false);
        assert_eq!(writes.len(), 1);
        assert_eq!(
            Value::Object(writes[0].patch.clone()),
            json!({"status": {RESULT: {"r": 1}}, "metadata": {"annotations": {"kopf/create_fn": "{}", "kopf/last": "{}"}}})
        );
    }

    #[test]
    fn a_diff_base_in_the_status_comes_after_the_progress_in_annotations() {
        let cycle = patch(
            json!({"status": {RESULT: {"r": 1}}, "metadata": {"annotations": {"kopf/create_fn": null}}}),
            &[json!({"status": {"kopf": {"last": "{}"}}})],
            None,
        );
        let targets: Vec<Target> = plan(cycle, true).iter().map(|w| w.target).collect();
        assert_eq!(targets, [Target::Status, Target::Main, Target::Status]);
    }

    #[test]
    fn everything_in_the_status_is_one_write_and_the_finalizer_one_more() {
        let cycle = patch(
            json!({"status": {RESULT: {"r": 1}, "kopf": {"progress": null}}}),
            &[json!({"status": {"kopf": {"last": "{}"}}})],
            Some(FinalizerOp::Remove),
        );
        assert_eq!(
            shown(&plan(cycle, true)),
            [
                (
                    Target::Status,
                    json!({"status": {RESULT: {"r": 1}, "kopf": {"progress": null, "last": "{}"}}}),
                    None
                ),
                (Target::Main, json!({}), Some(FinalizerOp::Remove)),
            ]
        );
    }

    #[test]
    fn nothing_to_write_is_no_write() {
        assert!(plan(Patch::default(), true).is_empty());
        let only_finalizer = patch(json!({}), &[json!({})], Some(FinalizerOp::Add));
        assert_eq!(
            shown(&plan(only_finalizer, true)),
            [(Target::Main, json!({}), Some(FinalizerOp::Add))]
        );
    }
}
