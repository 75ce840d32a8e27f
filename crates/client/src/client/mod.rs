//! The API client: the connection from the login handlers' credentials
//! (renewed on 401), discovery of resources and the names handlers use, namespace
//! patterns, watch-streams (over our own HTTP stack, `transport`), patching objects, posting Kubernetes Events,
//! following containers' logs (`logs`), and the pauses between attempts (`backoff`).
//!
//! Uses: `util`, `metrics`, `traces`, `state`, `settings`.

pub mod applying;
pub mod authorization;
pub mod backoff;
pub mod connection;
pub mod connection_info;
pub mod credentials;
pub mod discovery;
pub mod kubeconfigs;
pub mod listing;
pub mod logs;
pub mod namespaces;
pub mod posting;
pub mod resources;
pub mod tls;
pub mod transport;
pub mod watching;
