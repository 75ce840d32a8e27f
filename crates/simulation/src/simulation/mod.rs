//! A simulated Kubernetes API for handler tests (not in Kopf): the objects are kept in memory
//! (`store`), with what the engine relies on from a real API server. That covers resource
//! versions, lists and watches from a version (410 Gone once it is compacted away),
//! merge/JSON/strategic patches (`patching`), label selectors (`selectors`), the status subresource, finalizers and deletion
//! timestamps, and the garbage collection of children by their owner references; a CRD's
//! structural schema prunes, defaults and checks its objects (`schemas`). `serving`
//! answers Kubernetes' REST API over HTTP from it, so that clients reach it by a URL.
//! `settling` keeps a simulation's virtual clock still while work it cannot see is in flight;
//! `faults` fails the requests a test asks to fail.
//!
//! Uses: `util`.

pub mod faults;
pub mod patching;
pub mod schemas;
pub mod selectors;
pub mod serving;
pub mod settling;
pub mod store;
