//! The engine behind `kopf`: a Rust core that watches, queues and processes
//! Kubernetes objects, and a thin PyO3 layer (feature `python`) that connects
//! it to the handlers written in Python. The core holds no Python types.
//!
//! # Floor plan
//!
//! The workspace's crates, bottom-up, each using only those before it (the compiler keeps
//! that): `region` (`crates/region`), the process's allocator with a region apart for
//! long-lived values; `kopf_core` (`crates/core`), the layers below the API client;
//! `kopf_client` (`crates/client`), the API client; `kopf_intents` (`crates/intents`), the
//! indices and what the handlers declare; `kopf_engine` (`crates/engine`), the pause and
//! its votes and the engine; `kopf_webhooks` (`crates/webhooks`), which needs no engine;
//! `kopf_operator` (`crates/operator`), the operator as a whole; `kopf_recording`
//! (`crates/recording`), `kopf rbac record`'s proxy; `kopf_simulation`
//! (`crates/simulation`), the simulated API of handler tests; and this one, `src/`, the
//! Python extension that maturin builds: the only crate that depends on PyO3, so the core
//! cannot hold a Python type. It re-exports the layers of the others under their own names.
//!
//! The layers follow, bottom-up, each with its crate if not this one. A layer may use only
//! layers listed before it; each layer's own doc ends with the ones it uses (`Uses: ...`).
//! `checks/layering.py` reads this list and those lines and checks them against the code
//! (and that no modules import each other in a cycle). A new subsystem gets a crate (or a
//! folder in one) of its own, listed here after the layers it uses.
//!
//! - `util` (`crates/core`): JSON helpers, Python-exact encodings, error texts, the core's
//!   log lines and tasks;
//! - `metrics` (`crates/core`): the Prometheus figures, recorded into by the layers above
//!   when enabled;
//! - `traces` (`crates/core`): OpenTelemetry's spans, made by the layers above when enabled,
//!   and their export;
//! - `state` (`crates/core`): what is kept in the objects (progress, diff base, patches), as
//!   Kopf keeps it;
//! - `settings` (`crates/core`): the part of `kopf.OperatorSettings` the core acts on;
//! - `client` (`crates/client`): the API client, discovery, watch-streams, patching, Events;
//! - `indices` (`crates/intents`): the in-memory indices (`@kopf.index`) and the gate of
//!   their readiness;
//! - `intents` (`crates/intents`): the handlers' declarations, lifecycles and schedules, and
//!   the hooks through which the core calls them;
//! - `ha` (`crates/engine`): the pause, and Kopf's peering, Lease election and sharding
//!   that switch it;
//! - `engine` (`crates/engine`): per-object queues, causes and handler calls, daemons and
//!   timers;
//! - `webhooks` (`crates/webhooks`): admission and conversion webhooks;
//! - `listening` (`crates/operator`): Skafos' listener API (streams, ConfigMap election,
//!   health port);
//! - `probing` (`crates/operator`): the liveness endpoint;
//! - `conversions` (`crates/operator`): the CRDs that conversion handlers serve, their
//!   versions checked against the declared steps;
//! - `running` (`crates/operator`): the operator as a whole, from discovery to the
//!   dispatchers;
//! - `recording` (`crates/recording`): `kopf rbac record`'s proxy, which forwards a process's
//!   requests and journals them as RBAC sees them;
//! - `simulation` (`crates/simulation`): the simulated API of handler tests, its objects kept
//!   in memory as the API server keeps them;
//! - `binding` (feature `python`): the only code that touches Python.

pub use kopf_client::client;
pub use kopf_core::{metrics, object_log, settings, state, traces, util};
pub use kopf_engine::{engine, ha};
pub use kopf_intents::{indices, intents};
pub use kopf_operator::{conversions, listening, probing, running};
pub use kopf_recording::recording;
pub use kopf_simulation::simulation;
pub use kopf_webhooks::webhooks;

#[cfg(feature = "python")]
mod binding;

/// mimalloc (see Cargo.toml for why), with a region apart for the indices' long-lived values.
#[global_allocator]
static ALLOCATOR: region::Allocator<mimalloc::MiMalloc> = region::Allocator(mimalloc::MiMalloc);
