//! JSON: the whole report or comparison model, for scripts and dashboards.

use crate::format::RenderError;

use crate::format::Renderer;
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::Report;

/// The JSON format (pretty-printed; non-finite numbers become `null`).
pub struct JsonRenderer;

impl Renderer for JsonRenderer {
    fn report(&self, report: &Report) -> Result<String, RenderError> {
        Ok(serde_json::to_string_pretty(report)? + "\n")
    }

    fn compare(&self, cmp: &Comparison) -> Result<String, RenderError> {
        Ok(serde_json::to_string_pretty(cmp)? + "\n")
    }
}
