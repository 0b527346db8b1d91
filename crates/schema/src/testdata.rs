//! The golden results files (`testdata/golden/` in this crate), for the tests of every crate
//! above: recorded by the real sweep against the reference llama-server. Only built with the
//! `testdata` feature, which only the workspace's dev-dependencies turn on.

use std::path::{Path, PathBuf};

use crate::record::{self, Results};

/// Where the golden results files are.
pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/golden")
}

/// A golden results file, read; panics with the path when it cannot be (a test's input).
pub fn golden(name: &str) -> Results {
    let p = golden_dir().join(name);
    record::read_results(&p, false).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
