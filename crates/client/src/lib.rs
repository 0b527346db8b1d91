//! The servers ctxbench speaks to: one module per server family (detection, capabilities,
//! protocol, cache policy, `/metrics` vocabulary, busy-state readers) behind the `Backend`
//! and `Family` traits, the HTTP client, the streaming driver and the probe.

#![warn(missing_docs)]

pub mod client;
pub mod metrics;
pub mod probe;
