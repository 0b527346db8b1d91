//! `ctxbench compare`: reads the runs, builds the comparison, writes the chosen format and plot.

use crate::cmd::cli::CompareArgs;
use anyhow::Result;
use ctxbench::compare::build;
use ctxbench::error::UsageError;

use super::report;
use ctxbench::render::{self, svg};

/// `ctxbench compare`.
pub fn run(args: &CompareArgs) -> Result<()> {
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        return Err(UsageError::Invalid(format!(
            "--confidence {}: must be between 0 and 1, e.g. 0.95",
            args.confidence
        ))
        .into());
    }
    if !(args.noise >= 0.0 && args.noise < 1.0) {
        return Err(UsageError::Invalid(format!(
            "--noise {}: must be a fraction between 0 and 1, e.g. 0.05 for ±5%",
            args.noise
        ))
        .into());
    }
    let loaded = report::load(&args.files)?;
    let cmp = build(
        &loaded,
        args.allow_mismatch,
        args.resamples as usize,
        args.confidence,
        args.noise,
    )?;
    let text = render::renderer(args.format).compare(&cmp)?;
    match &args.out {
        Some(p) => super::report::write_creating_folders(p, text.as_bytes())?,
        None => {
            use std::io::Write;
            std::io::stdout().lock().write_all(text.as_bytes())?;
        }
    }
    if let Some(p) = &args.plot {
        super::report::write_creating_folders(p, svg::compare_plot(&cmp)?.as_bytes())?;
        eprintln!("plot: {}", p.display());
    }
    Ok(())
}
