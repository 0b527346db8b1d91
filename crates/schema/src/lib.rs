//! The results file of ctxbench: the typed line enum every run is written and read through,
//! its units and the library's typed errors. No async runtime, no HTTP: everything above
//! reads and writes results through this crate.

#![warn(missing_docs)]

pub mod error;
pub mod fingerprint;
pub mod imported;
pub mod model;
pub mod record;
#[cfg(feature = "testdata")]
pub mod testdata;
pub mod units;
pub mod warm;
