//! ctxbench: benchmark the long-context performance of LLM inference servers.
//!
//! Data flows one way: `probe → plan → bench → record → stats → render`. The binary parses
//! and validates the command line into a [`session::SweepPlan`] and drives a
//! [`session::Session`]; reports are built from results files alone.

#![warn(missing_docs)]

pub mod adaptive;
pub mod bench;
pub mod capacity;
pub mod client;
pub mod compare;
pub mod corpus;
pub mod costmodel;
pub mod error;
pub mod fingerprint;
pub mod idle;
pub mod integrity;
pub mod launch;
pub mod metrics;
pub mod needle;
pub mod plan;
pub mod price;
pub mod probe;
pub mod prompt;
pub mod record;
pub mod render;
pub mod report;
pub mod sample;
pub mod session;
pub mod stats;
pub mod units;
pub mod warm;

/// The git commit ctxbench was built from (`abc1234`, `abc1234-dirty`, or `unknown` outside
/// a git checkout), set by build.rs.
pub const COMMIT: &str = env!("CTXBENCH_COMMIT");

/// What `ctxbench --version` prints after the name: `0.1.0 (abc1234)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("CTXBENCH_COMMIT"),
    ")"
);
