//! Applying a cycle's patch to the object: merge-patches for the main resource
//! and the status subresource, with the finalizer change folded in under an
//! optimistic lock (the object's resourceVersion), so most cycles cost one write.

use crate::client::credentials::{Credentials, Slot};
use crate::client::resources::Resource;
use crate::object_log;
use crate::state::patches::{FinalizerOp, Patch};
use crate::util::logging::ObjectRef;
use futures::future::BoxFuture;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tracing::Level;

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
    pub credentials: Arc<Credentials>,
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
    let mut main = patch.merge;
    let status = if resource.has_status_subresource() {
        main.shift_remove("status")
    } else {
        None
    };
    let url = resource.url(namespace, Some(name), None);
    let status = status.map(|status| (resource.url(namespace, Some(name), Some("status")), status));
    let finalizing = patch
        .finalizer
        .map(|op| (op, fold_finalizer(&main, body, finalizer, op)));
    async move {
        // The writes' state (a few KiB while in flight) is made once a slot is free: in a
        // burst, hundreds of cycles wait here with only their prepared patches (528 bytes
        // each, not 1 072). One slot serves the patch's requests (main, then status).
        let slot = credentials.slot().await;
        let writes = Writes {
            credentials,
            slot: &slot,
            object: &object,
            url: &url,
        };
        Box::pin(writes.send(main, status, finalizing)).await
    }
}

/// The requests of one patch, in one request slot.
struct Writes<'a> {
    credentials: &'a Credentials,
    slot: &'a Slot<'a>,
    object: &'a ObjectRef,
    url: &'a str,
}

impl Writes<'_> {
    async fn send(
        self,
        main: Map<String, Value>,
        status: Option<(String, Value)>,
        finalizing: Option<(FinalizerOp, Map<String, Value>)>,
    ) -> Result<Applied, kube::Error> {
        let (credentials, slot, object, url) = (self.credentials, self.slot, self.object, self.url);
        let mut remaining = None;
        let mut resource_version = None;
        if let Some((op, with_finalizer)) = finalizing {
            match self.logged(with_finalizer).await {
                Ok(patched) => resource_version = patched,
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                    object_log!(Level::DEBUG, object, "Could not apply the patch in full due to conflicts with newer changes. Will try on the next cycle soon.");
                    remaining = Some(Patch {
                        merge: Map::new(),
                        finalizer: Some(op),
                    });
                    if !main.is_empty() {
                        resource_version = credentials
                            .merge_patch_in::<Versioned>(slot, url, &Value::Object(main))
                            .await?
                            .version();
                    }
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(gone(object)),
                Err(error) => return Err(error),
            }
        } else if !main.is_empty() {
            match self.logged(main).await {
                Ok(patched) => resource_version = patched,
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(gone(object)),
                Err(error) => return Err(error),
            }
        }

        if let Some((url, status)) = status {
            let status_patch = json!({ "status": status });
            object_log!(
                Level::DEBUG,
                object,
                "Merge-patching the status with: {}",
                crate::util::encoding::to_python_repr(&status_patch)
            );
            match credentials
                .merge_patch_in::<Versioned>(slot, &url, &status_patch)
                .await
            {
                Ok(patched) => resource_version = Versioned::version(patched),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(gone(object)),
                Err(error) => return Err(error),
            }
        }
        Ok(Applied {
            resource_version,
            remaining,
            gone: false,
        })
    }

    /// Merge-patch the main resource (logged as Kopf logs it); the new resourceVersion.
    async fn logged(&self, patch: Map<String, Value>) -> Result<Option<String>, kube::Error> {
        let patch = Value::Object(patch);
        object_log!(
            Level::DEBUG,
            self.object,
            "Merge-patching the resource with: {}",
            crate::util::encoding::to_python_repr(&patch)
        );
        Ok(self
            .credentials
            .merge_patch_in::<Versioned>(self.slot, self.url, &patch)
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

/// The merge-patch with the whole new finalizers list, conditional on the version we saw.
fn fold_finalizer(
    main: &Map<String, Value>,
    body: &Value,
    finalizer: &str,
    op: FinalizerOp,
) -> Map<String, Value> {
    let mut finalizers: Vec<Value> = crate::util::dicts::meta(body, "finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match op {
        FinalizerOp::Add if !finalizers.iter().any(|f| f == finalizer) => {
            finalizers.push(finalizer.into())
        }
        FinalizerOp::Add => {}
        FinalizerOp::Remove => finalizers.retain(|f| f != finalizer),
    }
    let mut merged = main.clone();
    let metadata = merged
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.insert("finalizers".into(), Value::Array(finalizers));
        if let Some(rv) = crate::util::dicts::meta(body, "resourceVersion") {
            metadata.insert("resourceVersion".into(), rv.clone());
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

    #[test]
    fn finalizers_are_folded_with_a_version_lock() {
        let body = json!({"metadata": {"resourceVersion": "7", "finalizers": ["other"]}});
        let main = json!({"metadata": {"annotations": {"a": "b"}}});
        let folded = fold_finalizer(main.as_object().unwrap(), &body, "mine", FinalizerOp::Add);
        assert_eq!(
            Value::Object(folded),
            json!({"metadata": {"annotations": {"a": "b"}, "finalizers": ["other", "mine"], "resourceVersion": "7"}})
        );
        let body = json!({"metadata": {"resourceVersion": "8", "finalizers": ["mine", "other"]}});
        let folded = fold_finalizer(&Map::new(), &body, "mine", FinalizerOp::Remove);
        assert_eq!(
            Value::Object(folded),
            json!({"metadata": {"finalizers": ["other"], "resourceVersion": "8"}})
        );
    }
}
