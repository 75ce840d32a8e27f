//! Utilities: the engine's time of day, wall or virtual (`clock`), when a thread pool wakes a thread (`waking`), rates of starts (`buckets`), JSON paths and merges (`dicts`),
//! Python-exact JSON and reprs (`encoding`), error texts with their causes (`errors`), the
//! servers' accept loop (`accepting`), plain HTTP endpoints (`endpoints`), objects' compact identities (`identity`), the core's log
//! lines (`logging`) and what they never show (`redaction`), and its tasks (`tasks`).
//!
//! Uses: nothing.

pub mod accepting;
pub mod buckets;
pub mod clock;
pub mod dicts;
pub mod encoding;
pub mod endpoints;
pub mod errors;
pub mod identity;
pub mod logging;
pub mod redaction;
pub mod tasks;
pub mod waking;
