//! Request traces as ctxbench replays them: every format (Mooncake / `timed-trace`, Weka /
//! kv-cache-tester, TraceLab, the Azure CSV, ctxbench's own) is read into one request model,
//! validated whole before anything is sent, and streamed so a million-line trace fits in
//! bounded memory. No async, no HTTP.

#![warn(missing_docs)]

pub mod detect;
pub mod request;
pub mod synthetic;

pub use detect::detect;
pub use request::{TraceError, TraceFormat, TraceRequest};
