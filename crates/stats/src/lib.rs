//! What ctxbench's results mean: summaries, fits, significance, the comparison of runs, the
//! capacity map, integrity checks and the report model. Built from results files alone: this
//! crate depends on no async runtime and no HTTP client, so it cannot reach a server.

#![warn(missing_docs)]

pub mod capacity;
pub mod compare;
pub mod import;
pub mod integrity;
pub mod price;
pub mod replay_report;
pub mod report;
pub mod roofline;
pub mod stats;
