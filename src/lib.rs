//! The engine behind `kopf`: a Rust core that watches, queues and processes
//! Kubernetes objects, and a thin PyO3 layer (feature `python`) that connects
//! it to the handlers written in Python. The core holds no Python types.

pub mod applying;
pub mod connection;
pub mod context;
pub mod conventions;
pub mod credentials;
pub mod daemons;
pub mod dicts;
pub mod diffbase;
pub mod diffs;
pub mod discovery;
pub mod encoding;
pub mod errors;
pub mod handlers;
pub mod invoking;
pub mod leadership;
pub mod namespaces;
pub mod patches;
pub mod pausing;
pub mod peering;
pub mod persistence;
pub mod posting;
pub mod probing;
pub mod processing;
pub mod progress;
pub mod progression;
pub mod queueing;
pub mod resources;
pub mod running;
pub mod settings;
pub mod storages;
pub mod watching;

#[cfg(feature = "python")]
mod binding;
