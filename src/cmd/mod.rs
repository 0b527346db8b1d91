//! The commands: orchestration that reads, writes and talks to servers, on top of the
//! library's typed pieces; errors here carry `anyhow` context for the user.

pub mod compare;
pub mod dryrun;
pub mod overhead;
pub mod report;
pub mod sweep;
pub mod sweep_options;
