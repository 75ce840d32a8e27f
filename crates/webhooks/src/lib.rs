//! The admission and conversion webhooks (`webhooks`), a crate of their own so that the compiler keeps them
//! below the operator's run and Python. Their place in the floor plan is in the top crate's
//! `src/lib.rs`, which re-exports them under their own name.
//!
//! Uses: `kopf_core`, `kopf_client`, `kopf_intents` (never the engine: the handlers it calls
//! are reached through the intents' hooks).

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_client::client;
use kopf_core::{metrics, state, traces, util};
use kopf_intents::intents;

pub mod webhooks;
