//! The webhooks that the API server calls: admission (`@kopf.on.validate`,
//! `@kopf.on.mutate`) and CRD version conversion (`@kopf.on.convert`). The reviews as the
//! API server sends them and the responses, the server's certificate and TLS, the HTTPS
//! server (one for both: `routing`), the managed webhook configurations and CRDs.
//!
//! Uses: `util`, `metrics`, `traces`, `state`, `client`, `intents`.

pub mod admitting;
pub mod certificates;
pub mod configs;
pub mod converting;
pub mod crd_managing;
pub mod known;
pub mod managing;
pub mod reviews;
pub mod routing;
pub mod serving;
pub mod tls;
pub mod versions;
