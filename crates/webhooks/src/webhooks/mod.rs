//! Admission webhooks (`@kopf.on.validate`, `@kopf.on.mutate`): the reviews as the
//! apiserver sends them and the responses, the server's certificate and TLS, the HTTPS
//! server, and the managed webhook configurations.
//!
//! Uses: `util`, `state`, `client`, `intents`.

pub mod admitting;
pub mod certificates;
pub mod configs;
pub mod managing;
pub mod reviews;
pub mod serving;
pub mod tls;
