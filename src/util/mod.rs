//! Layer 0, utilities: the process's allocator, with a region apart for long-lived values
//! (`apart`), when a thread pool wakes a thread (`crew`), JSON paths and merges (`dicts`),
//! Python-exact JSON and reprs (`encoding`), error texts with their causes (`errors`), plain
//! HTTP endpoints (`endpoints`), objects' compact identities (`identity`), the core's log
//! lines (`logging`), and its tasks (`tasks`). Uses no other layer.

pub mod apart;
pub mod crew;
pub mod dicts;
pub mod encoding;
pub mod endpoints;
pub mod errors;
pub mod identity;
pub mod logging;
pub mod tasks;
