//! Request traces as ctxbench replays them: every format (Mooncake / `timed-trace`, Weka /
//! kv-cache-tester, TraceLab, the Azure CSV, ctxbench's own) is read into one request model,
//! validated whole before anything is sent, and streamed so a million-line trace fits in
//! bounded memory. No async, no HTTP.

#![warn(missing_docs)]

pub mod azure;
pub mod clock;
pub mod detect;
pub mod mooncake;
pub mod own;
pub mod plan;
pub mod reader;
pub mod request;
pub mod shape;
pub mod synthetic;
pub mod tracelab;
pub mod weka;

mod fields;

pub use detect::{detect, open, open_as};
pub use reader::TraceReader;
pub use request::{TraceError, TraceFormat, TraceRequest, DEFAULT_BLOCK};
