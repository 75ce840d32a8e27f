//! The layers of the engine below its API client (`util`, `metrics`, `traces`, `state`,
//! `settings`), a crate of their own so that the compiler keeps them there: nothing here can
//! reach the client, the engine or Python. Their order among themselves is in the floor plan (the top
//! crate's `src/lib.rs`, which re-exports them under the same names), checked by
//! `checks/layering.py`.
//!
//! Uses: `region` (the allocator's region, for the bodies kept between events).

pub mod metrics;
pub mod settings;
pub mod state;
pub mod traces;
pub mod util;

/// The tests run on the process's allocator, as the top crate installs it.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: region::Allocator = region::Allocator(std::alloc::System);
