//! The servers ctxbench speaks to: one module per server family (detection, capabilities,
//! protocol, cache policy, `/metrics` vocabulary, busy-state readers) behind the `Backend`
//! and `Family` traits, the HTTP client, the streaming driver and the probe.

#![warn(missing_docs)]

// The layer below, under the names the code has always used.
pub(crate) use ctxbench_schema::{error, fingerprint, model, record};

pub mod client;
pub mod metrics;
pub mod probe;
