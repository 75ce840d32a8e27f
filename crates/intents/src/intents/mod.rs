//! Intents (Kopf's word for the handlers' registrations): what the operator's code declares
//! and how the core reaches it. `handlers` describes every kind of handler and its filters,
//! `lifecycles` the order in which the picked ones run, `schedules` the cron schedules of
//! timers, `patterns` the log handlers' patterns; `hooks` is the port: the calls that the core makes into the handlers' side (the
//! binding implements it for Python; the engine's tests fake it), by role.
//!
//! Uses: `util`, `metrics`, `traces`, `state`, `settings`, `client`, `indices`.

pub mod handlers;
pub mod hooks;
pub mod lifecycles;
pub mod patterns;
pub mod schedules;
