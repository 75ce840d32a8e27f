//! The engine (`ha`, `engine`), a crate of its own so that the compiler keeps it below the
//! listeners, the operator's run and Python: the pause and who votes on it, and from a watch
//! event to the handlers and back to the object. Their places in the floor plan are in the
//! top crate's `src/lib.rs`, which re-exports them under their own names.
//!
//! Uses: `kopf_core`, `kopf_client`, `kopf_intents`.

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_client::client;
use kopf_core::{metrics, object_log, settings, state, traces, util};
use kopf_intents::{indices, intents};

pub mod engine;
pub mod ha;

/// The tests run on the process's allocator, as the top crate installs it.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: region::Allocator = region::Allocator(std::alloc::System);
