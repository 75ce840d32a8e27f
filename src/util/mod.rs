//! Layer 0, utilities: JSON paths and merges (`dicts`), Python-exact JSON and reprs
//! (`encoding`), error texts with their causes (`errors`). Uses no other layer.

pub mod dicts;
pub mod encoding;
pub mod errors;
