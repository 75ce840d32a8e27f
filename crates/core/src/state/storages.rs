//! Which storages keep the handlers' progress and the diff base: built from their
//! descriptions in `settings.persistence`. The built-in kinds run here; custom ones
//! (the operator's own Python classes) are supplied by the binding.

use crate::state::diffbase::{
    AnnotationsDiffBaseStorage, DiffBaseStorage, MultiDiffBaseStorage, StatusDiffBaseStorage,
};
use crate::state::progress::{
    AnnotationsProgressStorage, MultiProgressStorage, ProgressStorage, StatusProgressStorage,
};
use crate::util::dicts::FieldPath;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A progress storage as `settings.persistence.progress_storage` describes it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProgressSpec {
    /// Kopf's `AnnotationsProgressStorage`: a record per handler in an annotation.
    Annotations {
        /// The annotations' prefix (`kopf.zalando.org`).
        prefix: String,
        /// Whether the records keep every field (Kopf's `verbose=`).
        verbose: bool,
        /// The annotation that the touch-dummy uses.
        touch_key: String,
        /// Whether the keys are Kopf's first ones (`v1=`).
        v1: bool,
    },
    /// Kopf's `StatusProgressStorage`: the records in a status field.
    Status {
        /// Where the records are (`status.kopf.progress`).
        field: FieldPath,
        /// Where the touch-dummy is.
        touch_field: FieldPath,
        /// Kopf 1.45's default reads and purges the old status records but never writes them.
        writable: bool,
    },
    /// Kopf's `MultiProgressStorage`: the first that has a record is read; all are written.
    Multi {
        /// The storages, in order.
        storages: Vec<ProgressSpec>,
    },
    /// The operator's own storage, called in Python.
    Custom {
        /// Its position among the operator's custom storages.
        index: usize,
    },
}

impl Default for ProgressSpec {
    /// Kopf 1.45's `SmartProgressStorage`.
    fn default() -> Self {
        let status = |leaf: &str| vec!["status".into(), "kopf".into(), leaf.into()];
        Self::Multi {
            storages: vec![
                Self::Annotations {
                    prefix: "kopf.zalando.org".into(),
                    verbose: false,
                    touch_key: "touch-dummy".into(),
                    v1: true,
                },
                Self::Status {
                    field: status("progress"),
                    touch_field: status("dummy"),
                    writable: false,
                },
            ],
        }
    }
}

/// A diff-base storage as `settings.persistence.diffbase_storage` describes it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DiffBaseSpec {
    /// Kopf's `AnnotationsDiffBaseStorage`: the essence in an annotation.
    Annotations {
        /// The annotation's prefix (`kopf.zalando.org`).
        prefix: String,
        /// The annotation's name (`last-handled-configuration`).
        key: String,
        /// Whether the key is Kopf's first one (`v1=`).
        v1: bool,
        /// Fields left out of the essence.
        #[serde(default)]
        ignored_fields: Vec<FieldPath>,
    },
    /// Kopf's `StatusDiffBaseStorage`: the essence in a status field.
    Status {
        /// Where the essence is.
        field: FieldPath,
        /// Fields left out of the essence.
        #[serde(default)]
        ignored_fields: Vec<FieldPath>,
    },
    /// Kopf's `MultiDiffBaseStorage`: the first that has an essence is read; all are written.
    Multi {
        /// The storages, in order.
        storages: Vec<DiffBaseSpec>,
        /// Fields left out of the essence.
        #[serde(default)]
        ignored_fields: Vec<FieldPath>,
    },
    /// The operator's own storage, called in Python.
    Custom {
        /// Its position among the operator's custom storages.
        index: usize,
    },
}

impl Default for DiffBaseSpec {
    /// Kopf's `AnnotationsDiffBaseStorage()`.
    fn default() -> Self {
        Self::Annotations {
            prefix: "kopf.zalando.org".into(),
            key: "last-handled-configuration".into(),
            v1: true,
            ignored_fields: Vec::new(),
        }
    }
}

/// The settings refer to a custom storage that the operator did not supply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoragesError {
    /// A progress storage that is not among the custom ones.
    #[error("no custom progress storage #{0}")]
    NoCustomProgress(usize),
    /// A diff-base storage that is not among the custom ones.
    #[error("no custom diff-base storage #{0}")]
    NoCustomDiffBase(usize),
}

/// The operator's own storages, by their index in the description.
pub trait CustomStorages {
    /// The custom progress storage at this position.
    fn progress(&self, index: usize) -> Option<Arc<dyn ProgressStorage>>;
    /// The custom diff-base storage at this position.
    fn diffbase(&self, index: usize) -> Option<Arc<dyn DiffBaseStorage>>;
}

/// No custom storages at all (the core alone, and its tests).
pub struct NoCustomStorages;

impl CustomStorages for NoCustomStorages {
    fn progress(&self, _: usize) -> Option<Arc<dyn ProgressStorage>> {
        None
    }
    fn diffbase(&self, _: usize) -> Option<Arc<dyn DiffBaseStorage>> {
        None
    }
}

/// The two storages an operator uses for all its resources.
#[derive(Clone)]
pub struct Storages {
    /// Where handlers' progress is kept.
    pub progress: Arc<dyn ProgressStorage>,
    /// Where the last handled essence is kept.
    pub diffbase: Arc<dyn DiffBaseStorage>,
}

impl std::fmt::Debug for Storages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Storages { .. }")
    }
}

impl Default for Storages {
    fn default() -> Self {
        Self::build(
            &ProgressSpec::default(),
            &DiffBaseSpec::default(),
            &NoCustomStorages,
        )
        .expect("the defaults have no custom storages")
    }
}

impl Storages {
    /// The storages as the settings describe them; custom ones from the operator.
    pub fn build(
        progress: &ProgressSpec,
        diffbase: &DiffBaseSpec,
        custom: &dyn CustomStorages,
    ) -> Result<Self, StoragesError> {
        Ok(Self {
            progress: build_progress(progress, custom)?,
            diffbase: build_diffbase(diffbase, custom)?,
        })
    }
}

fn build_progress(
    spec: &ProgressSpec,
    custom: &dyn CustomStorages,
) -> Result<Arc<dyn ProgressStorage>, StoragesError> {
    Ok(match spec {
        ProgressSpec::Annotations {
            prefix,
            verbose,
            touch_key,
            v1,
        } => Arc::new(AnnotationsProgressStorage::new(
            prefix, *verbose, touch_key, *v1,
        )),
        ProgressSpec::Status {
            field,
            touch_field,
            writable,
        } => Arc::new(StatusProgressStorage {
            field: field.clone(),
            touch_field: touch_field.clone(),
            writable: *writable,
        }),
        ProgressSpec::Multi { storages } => Arc::new(MultiProgressStorage {
            storages: (storages.iter())
                .map(|s| build_progress(s, custom))
                .collect::<Result<_, _>>()?,
        }),
        ProgressSpec::Custom { index } => custom
            .progress(*index)
            .ok_or(StoragesError::NoCustomProgress(*index))?,
    })
}

fn build_diffbase(
    spec: &DiffBaseSpec,
    custom: &dyn CustomStorages,
) -> Result<Arc<dyn DiffBaseStorage>, StoragesError> {
    Ok(match spec {
        DiffBaseSpec::Annotations {
            prefix,
            key,
            v1,
            ignored_fields,
        } => Arc::new(AnnotationsDiffBaseStorage::new(
            prefix,
            key,
            *v1,
            ignored_fields.clone(),
        )),
        DiffBaseSpec::Status {
            field,
            ignored_fields,
        } => Arc::new(StatusDiffBaseStorage {
            field: field.clone(),
            ignored_fields: ignored_fields.clone(),
        }),
        DiffBaseSpec::Multi {
            storages,
            ignored_fields,
        } => Arc::new(MultiDiffBaseStorage {
            storages: (storages.iter())
                .map(|s| build_diffbase(s, custom))
                .collect::<Result<_, _>>()?,
            ignored_fields: ignored_fields.clone(),
        }),
        DiffBaseSpec::Custom { index } => custom
            .diffbase(*index)
            .ok_or(StoragesError::NoCustomDiffBase(*index))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn descriptions_from_python() {
        let spec: ProgressSpec = serde_json::from_value(json!({
            "kind": "multi", "storages": [
                {"kind": "annotations", "prefix": "my.op", "verbose": true, "touch_key": "t", "v1": false},
                {"kind": "status", "field": ["status", "x"], "touch_field": ["status", "y"], "writable": true},
            ]}))
        .unwrap();
        assert!(matches!(spec, ProgressSpec::Multi { ref storages } if storages.len() == 2));
        let spec: DiffBaseSpec = serde_json::from_value(json!({
            "kind": "status", "field": ["status", "x"], "ignored_fields": [["spec", "a"]]}))
        .unwrap();
        assert_eq!(
            spec,
            DiffBaseSpec::Status {
                field: vec!["status".into(), "x".into()],
                ignored_fields: vec![vec!["spec".into(), "a".into()]]
            }
        );
    }

    #[test]
    fn missing_custom_storages_are_errors() {
        let error = Storages::build(
            &ProgressSpec::Custom { index: 0 },
            &DiffBaseSpec::default(),
            &NoCustomStorages,
        )
        .unwrap_err();
        assert_eq!(error, StoragesError::NoCustomProgress(0));
        assert_eq!(error.to_string(), "no custom progress storage #0");
    }
}
