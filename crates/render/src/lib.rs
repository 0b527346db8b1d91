//! ctxbench's writers: the report and the comparison as a terminal table, Markdown, HTML,
//! CSV, JSON and SVG plots. Built from the report model alone (no async, no HTTP).
#![warn(missing_docs)]

#[cfg(test)]
mod snapshot_tests;

pub mod capacity;
pub mod csv;
pub mod describe;
pub mod design;
pub mod doc;
pub mod fitwords;
pub mod format;
pub mod html;
pub mod import_audit;
pub mod json;
pub mod llmd;
pub mod markdown;
pub mod prompts;
/// The replay report, in every format.
pub mod replay;
/// Two replays compared, in every format.
pub mod replay_compare;
pub mod retention;
pub mod roofline;
pub mod sections;
pub mod spec_schedule;
pub mod speculation;
pub mod svg;
pub mod table;
pub mod tails;
pub mod text;
pub mod warm;

pub use format::{RenderError, Renderer, ReportFormat};
pub use table::summary_table;

/// The renderer of a format.
pub fn renderer(format: ReportFormat) -> Box<dyn Renderer> {
    match format {
        ReportFormat::Table => Box::new(table::TableRenderer),
        ReportFormat::Md => Box::new(markdown::MarkdownRenderer),
        ReportFormat::Csv => Box::new(csv::CsvRenderer),
        ReportFormat::Json => Box::new(json::JsonRenderer),
        ReportFormat::Html => Box::new(html::HtmlRenderer),
        ReportFormat::LlmdBr => Box::new(llmd::LlmdRenderer),
        ReportFormat::Schedule => Box::new(spec_schedule::ScheduleRenderer),
    }
}
