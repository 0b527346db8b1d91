//! The measuring session of ctxbench: the plan, the corpus and prompts, the measuring
//! protocol every request goes through (idle before, flush, metrics, request, judge,
//! metrics, idle after, record), the concurrency waves and warm modes, and managed servers.

#![warn(missing_docs)]

pub mod adaptive;
pub mod bench;
pub mod corpus;
pub mod costmodel;
pub mod design;
pub mod fleet;
pub mod idle;
pub mod launch;
pub mod needle;
pub mod plan;
pub mod prompt;
pub mod replay;
pub mod sample;
pub mod session;
pub mod steps_along;

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
