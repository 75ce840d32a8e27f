//! The engine (`ha`, `indices`, `engine`), a crate of its own so that the compiler keeps it
//! below the webhooks, the listeners and Python: the pause and who votes on it, the
//! in-memory indices, and from a watch event to the handlers and back to the object. Their
//! places in the floor plan are in the top crate's `src/lib.rs`, which re-exports them
//! under their own names.
//!
//! Uses: `kopf_core`, `kopf_client`.

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_client::client;
use kopf_core::{metrics, object_log, settings, state, util};

pub mod engine;
pub mod ha;
pub mod indices;

/// The tests run on the process's allocator, as the top crate installs it.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: region::Allocator = region::Allocator;
