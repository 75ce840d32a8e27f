//! The engine behind `kopf`: a Rust core that watches, queues and processes
//! Kubernetes objects, and a thin PyO3 layer (feature `python`) that connects
//! it to the handlers written in Python. The core holds no Python types.
//!
//! The core is grouped by layer; a layer uses only the layers above it in this list
//! (`tests/layering.py` checks it, and that no modules import each other in a cycle):
//!
//! - the crate `region` (`crates/region`, below them all): the process's allocator, with a
//!   region apart for long-lived values;
//! - `util`: JSON helpers, Python-exact encodings, error texts;
//! - `state`: what is kept in the objects (progress, diff base, patches), as Kopf keeps it;
//! - `settings`: the part of `kopf.OperatorSettings` the core acts on;
//! - `client`: the API client, discovery, watch-streams, patching, Events;
//! - `ha`: the pause, and Kopf's peering and Lease election that switch it;
//! - `indices`: the in-memory indices (`@kopf.index`) and the gate of their readiness;
//! - `engine`: per-object queues, causes and handlers, daemons and timers;
//! - `webhooks`, `listening`: admission webhooks; Skafos' listener API (streams, ConfigMap
//!   election, health port);
//! - `probing`: the liveness endpoint;
//! - `running`: the operator as a whole, from discovery to the dispatchers;
//! - `binding` (feature `python`): the only code that touches Python.
//!
//! A new subsystem (admission webhooks, indices, metrics) gets a folder of its own,
//! between `engine` and `running`.

pub mod client;
pub mod engine;
pub mod ha;
pub mod indices;
pub mod listening;
pub mod metrics;
pub mod probing;
pub mod running;
pub mod settings;
pub mod state;
pub mod util;
pub mod webhooks;

#[cfg(feature = "python")]
mod binding;

/// The system's allocator, with a region apart for the indices' long-lived values.
#[global_allocator]
static ALLOCATOR: region::Allocator = region::Allocator;
