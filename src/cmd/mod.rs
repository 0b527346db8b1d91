//! The commands: orchestration that reads, writes and talks to servers, on top of the
//! library's typed pieces; errors here carry `anyhow` context for the user.

pub mod campaign;
pub mod cli;
pub mod compare;
pub mod corpora;
pub mod dryrun;
pub mod import;
pub mod overhead;
pub mod precision_of;
pub mod progress;
pub mod replay;
pub mod replay_args;
pub mod replay_dry;
pub mod report;
pub mod schedule;
pub mod shell;
pub mod sweep;
pub mod sweep_options;
pub mod warm_options;

/// How a command ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every sample measured.
    Complete,
    /// Some samples failed, or the sweep stopped early: resume later.
    Incomplete,
    /// The user pressed Ctrl-C.
    Interrupted,
    /// `compare --fail-if-slower`: a metric got significantly worse (exit code 3).
    Regressed,
}
