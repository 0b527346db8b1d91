//! What a writer is: the formats ([`ReportFormat`]), the [`Renderer`] trait every format
//! implements, and why rendering can fail ([`RenderError`]).

use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::Report;

/// Output format of `report` and `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum ReportFormat {
    /// Aligned text for the terminal.
    Table,
    /// Markdown.
    Md,
    /// CSV, one row per point and metric.
    Csv,
    /// JSON: the whole model.
    Json,
    /// One self-contained HTML file with inline plots.
    Html,
    /// llm-d Benchmark Report v0.2.1 documents, one per measured point (`report` only).
    LlmdBr,
    /// The speculation schedule from a campaign over the draft length K: K* per length and
    /// batch, the schedule to deploy and its dialects (`report` only; Markdown, or one file
    /// per form in the folder given as out).
    Schedule,
}

/// Why a report could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The plotting library failed.
    #[error("drawing a plot: {0}")]
    Plot(String),
    /// The format is not one this command writes.
    #[error("{0}")]
    Unsupported(String),
    /// Serialization failed.
    #[error("serializing the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// One output format: renders a report and a comparison to text.
pub trait Renderer {
    /// A report of one or more runs.
    fn report(&self, report: &Report) -> Result<String, RenderError>;
    /// A comparison of runs against a baseline.
    fn compare(&self, cmp: &Comparison) -> Result<String, RenderError>;
}
