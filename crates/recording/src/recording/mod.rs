//! `kopf rbac record`'s proxy: every request of an operator's process (the engine's and its
//! handlers' clients alike, pointed at it by a kubeconfig) forwarded to the API server with the
//! login's credentials, and journaled as RBAC sees it (`attributes`: verb, group, resource,
//! subresource, namespace), with the client and the answer's status.
//!
//! Uses: `util`, `client`, `webhooks`.

pub mod attributes;
pub mod journal;
pub mod proxying;
