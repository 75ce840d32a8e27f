//! High availability: the operator's pause (`pausing`) and who votes on it —
//! Kopf's peering between operators (`peering`) and Lease-based leader election
//! (`leadership`), and automatic sharding among replicas (`sharding`).
//!
//! Uses: `util`, `state`, `settings`, `client`.

pub mod leadership;
pub mod pausing;
pub mod peering;
pub mod sharding;
