//! ctxbench: benchmark the long-context performance of LLM inference servers.
//!
//! Data flows one way: `cli → probe → plan → bench → record → stats → render`.

pub mod bench;
pub mod cli;
pub mod client;
pub mod corpus;
pub mod error;
pub mod metrics;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod prompt;
pub mod record;
pub mod render;
pub mod stats;
pub mod sweep;
