//! ctxbench: benchmark the long-context performance of LLM inference servers.
//!
//! Data flows one way: `cli → probe → plan → bench → record → stats → render`. The binary's
//! `cmd` modules drive it.

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
pub mod integrity;
pub mod launch;
pub mod metrics;
pub mod needle;
pub mod plan;
pub mod probe;
pub mod prompt;
pub mod record;
pub mod render;
pub mod report;
pub mod sample;
pub mod stats;
pub mod units;
