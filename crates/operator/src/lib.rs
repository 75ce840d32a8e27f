//! The operator as a whole (`conversions`, `listening`, `probing`, `running`), a crate of its own so that
//! the compiler keeps Python out of it: Skafos' listeners, the liveness endpoint, and the run
//! from discovery to the dispatchers. Their places in the floor plan are in the top crate's
//! `src/lib.rs`, which re-exports them under their own names.
//!
//! Uses: `kopf_core`, `kopf_client`, `kopf_intents`, `kopf_engine`, `kopf_webhooks`.

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_client::client;
use kopf_core::{metrics, settings, state, traces, util};
use kopf_engine::{engine, ha};
use kopf_intents::{indices, intents};
use kopf_webhooks::webhooks;

pub mod conversions;
pub mod listening;
pub mod probing;
pub mod running;
