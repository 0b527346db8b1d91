//! Servers that ctxbench starts itself (`sweep --server-cmd TEMPLATE -L NAME VALUES`): the
//! command template and its grid of variants ([`template`]), and the process that runs one
//! variant on a free port until ctxbench stops it ([`server`]).

pub mod server;
pub mod template;

pub use server::{kill_all, LaunchError, LaunchOptions, ManagedServer, Stopped};
pub use template::{ParameterList, ServerTemplate, TemplateError, Variant};

use std::path::{Path, PathBuf};

/// The order of a campaign of `variants` × `runs`: run 0 of every variant, then run 1, …
/// (A B A B …), so that slow drift and warm-up fall on every variant alike. Each entry is
/// (variant index, run index); a resumed campaign skips the entries already recorded.
pub fn schedule(variants: usize, runs: usize) -> Vec<(usize, usize)> {
    (0..runs)
        .flat_map(|r| (0..variants).map(move |v| (v, r)))
        .collect()
}

/// Where the server log of `variant`'s run `run` goes: beside the results file `results`,
/// named after it (`r.jsonl` → `r.server-v1-run0.log`).
pub fn log_path(results: &Path, variant: usize, run: usize) -> PathBuf {
    let stem = results
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".to_owned());
    results.with_file_name(format!("{stem}.server-v{variant}-run{run}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaigns_interleave_variants_run_by_run() {
        assert_eq!(
            schedule(2, 3),
            [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
        );
        assert!(schedule(3, 0).is_empty());
    }

    #[test]
    fn logs_sit_beside_the_results() {
        assert_eq!(
            log_path(Path::new("/tmp/out/ab.jsonl"), 1, 4),
            Path::new("/tmp/out/ab.server-v1-run4.log")
        );
    }
}
