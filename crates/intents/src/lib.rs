//! What an operator declares and indexes (`indices`, `intents`), a crate of its own below
//! both the engine and the webhooks, which act on it: the compiler keeps it from reaching
//! either. Their places in the floor plan are in the top crate's `src/lib.rs`, which
//! re-exports them under their own names.
//!
//! Uses: `kopf_core`, `kopf_client`.

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_client::client;
use kopf_core::{metrics, settings, state, traces, util};

pub mod indices;
pub mod intents;

/// The tests run on the process's allocator, as the top crate installs it.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: region::Allocator = region::Allocator(std::alloc::System);
