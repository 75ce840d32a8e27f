//! The API client (`client`), a crate of its own so that the compiler keeps it below the
//! engine: nothing here can reach the engine, the webhooks or Python. Its place in the floor
//! plan is in the top crate's `src/lib.rs`, which re-exports it under its own name.
//!
//! Uses: `kopf_core`.

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_core::{metrics, object_log, settings, state, traces, util};

pub mod client;
