//! The engine: from a watch event to the handlers and back to the object.
//! `queueing` routes each object's events to its worker; `processing` finds the cause
//! and the handlers to call (`selecting`: which of the declared ones match; `executing`:
//! calling them through the `intents`' hooks); `reconciling` calls the level-based
//! reconcile handlers instead (`waking`: their children's changes wake them; `relating`: so
//! do the objects that related functions map to them); `indexing` fills the indices;
//! `daemons` runs daemons and timers per object (`coalescing`: when their intervals end);
//! `logs` follows the pods' logs for the log handlers; `context` is what they share per
//! resource and per object.
//!
//! Uses: every layer before it.

pub mod coalescing;
pub mod context;
pub mod daemons;
pub mod executing;
pub mod indexing;
pub mod logs;
pub mod processing;
pub mod queueing;
pub mod reconciling;
pub mod relating;
pub mod selecting;
pub mod waking;

#[cfg(test)]
mod crash_windows;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
