//! The engine: from a watch event to the handlers and back to the object.
//! `queueing` routes each object's events to its worker; `processing` finds the cause
//! and the handlers to call (`handlers` describes them and their filters); `hooks` is
//! how the core calls Python; `daemons` runs daemons and timers per object (`coalescing`:
//! when their intervals end); `context` is what they share per resource and per object.
//!
//! Uses: every layer before it.

pub mod coalescing;
pub mod context;
pub mod daemons;
pub mod executing;
pub mod handlers;
pub mod hooks;
pub mod indexing;
pub mod lifecycles;
pub mod processing;
pub mod queueing;
pub mod schedules;
pub mod selecting;

#[cfg(test)]
mod crash_windows;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
