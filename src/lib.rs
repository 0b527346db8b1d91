//! ctxbench: benchmark the long-context performance of LLM inference servers.
//!
//! Data flows one way: `probe → plan → bench → record → stats → render`, and each layer is a
//! crate of this workspace (docs/architecture.md): `ctxbench-schema` (the results file),
//! `ctxbench-stats` and `ctxbench-render` (reports from files alone, no async, no HTTP),
//! `ctxbench-client` (the servers' protocols), `ctxbench-session` (the measuring session) and
//! this crate, the binary. This library re-exports the layers' modules under one name, for the
//! binary and the integration tests.

#![warn(missing_docs)]

pub use ctxbench_client::{client, metrics, probe};
pub use ctxbench_render::render;
pub use ctxbench_schema::{error, fingerprint, model, record, units, warm};
pub use ctxbench_session::{
    adaptive, bench, corpus, costmodel, design, idle, launch, needle, plan, prompt, sample,
    session, COMMIT, VERSION,
};
pub use ctxbench_stats::{capacity, compare, integrity, price, report, roofline, stats};

#[cfg(test)]
mod snapshot_tests;
