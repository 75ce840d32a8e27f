//! The recording proxy of `kopf rbac record` (`recording`), a crate of its own so that the
//! compiler keeps it below Python and out of the operator's run. Its place in the floor plan
//! is in the top crate's `src/lib.rs`, which re-exports it under its own name.
//!
//! Uses: `kopf_core`, `kopf_client`, `kopf_webhooks` (the certificate and its TLS).

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_client::client;
use kopf_core::util;
use kopf_webhooks::webhooks;

pub mod recording;
