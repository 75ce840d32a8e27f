//! The simulated API of handler tests (`simulation`), a crate of its own so that the compiler
//! keeps it apart from the operator's run: nothing of the engine uses it, and it uses nothing
//! of the engine. Its place in the floor plan is in the top crate's `src/lib.rs`, which
//! re-exports it under its own name.
//!
//! Uses: `kopf_core`.

// The layers below, named at this crate's root: `crate::util::...` reads the same in every
// crate of the workspace.
use kopf_core::util;

pub mod simulation;
