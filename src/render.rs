//! Renderers: the terminal summary table here, and one module per report format behind
//! [`Renderer`] (like hyperfine's `Exporter`).

use std::fmt::Write;

use crate::cli::ReportFormat;
use crate::compare::Comparison;
use crate::report::Report;
use crate::stats::{PointSummary, Spread};

pub mod csv;
pub mod html;
pub mod json;
pub mod markdown;
pub mod svg;
pub mod table;

/// Why a report could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The plotting library failed.
    #[error("drawing a plot: {0}")]
    Plot(String),
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

/// The renderer of a format.
pub fn renderer(format: ReportFormat) -> Box<dyn Renderer> {
    match format {
        ReportFormat::Table => Box::new(table::TableRenderer),
        ReportFormat::Md => Box::new(markdown::MarkdownRenderer),
        ReportFormat::Csv => Box::new(csv::CsvRenderer),
        ReportFormat::Json => Box::new(json::JsonRenderer),
        ReportFormat::Html => Box::new(html::HtmlRenderer),
    }
}

/// Formats a token count the way `--contexts` takes it (4096 → `4k`).
pub fn fmt_ctx(c: u64) -> String {
    if c >= 1024 && c % 1024 == 0 {
        format!("{}k", c / 1024)
    } else {
        c.to_string()
    }
}

/// A number with about four significant digits.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_owned();
    }
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn med(s: &Option<Spread>) -> String {
    s.map(|s| num(s.median)).unwrap_or_else(|| "–".to_owned())
}

pub(crate) fn med_range(s: &Option<Spread>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{} ({}–{})", num(s.median), num(s.min), num(s.max)),
        Some(s) => num(s.median),
        None => "–".to_owned(),
    }
}

/// One row per context: medians (min–max) of client metrics beside the server's own.
pub fn summary_table(points: &[PointSummary]) -> String {
    let header = [
        "context",
        "n",
        "TTFT ms (min–max)",
        "server prompt ms",
        "prefill tok/s",
        "decode tok/s (min–max)",
        "server decode tok/s",
        "ms/step",
        "excluded",
    ];
    let rows: Vec<[String; 9]> = points
        .iter()
        .map(|p| {
            let excluded = p.exclusions();
            [
                fmt_ctx(p.context_tokens),
                format!("{}/{}", p.usable, p.samples),
                med_range(&p.ttft_ms),
                med(&p.server_prompt_ms),
                med(&p.prefill_tokens_per_s),
                med_range(&p.decode_tokens_per_s),
                med(&p.server_decode_tokens_per_s),
                med(&p.ms_per_step),
                if excluded.is_empty() {
                    "–".to_owned()
                } else {
                    excluded.join(", ")
                },
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = w - c.chars().count();
                if i == 0 || i == cells.len() - 1 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(&mut out, &header);
    let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
    let _ = writeln!(out, "{}", rule.join("  "));
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out
}

/// Per-point speculative medians, or `None` when no sample reported any.
pub fn spec_table(points: &[PointSummary]) -> Option<String> {
    if points.iter().all(|p| p.spec_accept_length.is_none()) {
        return None;
    }
    let mut out =
        String::from("context  accept length (min–max)  accept rate  ms/verify step  ms/token\n");
    for p in points {
        let _ = writeln!(
            out,
            "{:<7}  {:>23}  {:>11}  {:>14}  {:>8}",
            fmt_ctx(p.context_tokens),
            med_range(&p.spec_accept_length),
            med(&p.spec_accept_rate),
            med(&p.ms_per_verify_step),
            med(&p.ms_per_step),
        );
    }
    Some(out)
}

/// Per-point warm decode (decode at depth), or `None` when there are no warm samples.
pub fn warm_table(points: &[PointSummary]) -> Option<String> {
    if points.iter().all(|p| p.warm == 0) {
        return None;
    }
    let mut out =
        String::from("context  warm n  decode tok/s (min–max)  ms/step  cold decode tok/s\n");
    for p in points {
        let _ = writeln!(
            out,
            "{:<7}  {:>6}  {:>22}  {:>7}  {:>17}",
            fmt_ctx(p.context_tokens),
            p.warm,
            med_range(&p.warm_decode_tokens_per_s),
            med(&p.warm_ms_per_step),
            med(&p.decode_tokens_per_s),
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_a_row_per_point_and_aligned_columns() {
        let sp = |m| Spread::of([m, m * 1.1, m * 0.9]);
        let p = PointSummary {
            context_tokens: 4096,
            samples: 3,
            usable: 2,
            contaminated: 1,
            length_mismatch: 0,
            cache_unverified: 0,
            suspected_cache_hit: 0,
            failed: 0,
            ttft_ms: sp(120.0),
            prefill_tokens_per_s: sp(34000.0),
            decode_tokens_per_s: sp(800.0),
            ms_per_step: sp(1.25),
            server_prompt_ms: sp(118.0),
            server_prefill_tokens_per_s: None,
            server_decode_tokens_per_s: sp(805.0),
            ttft_overhead_ms: None,
            spec_accept_length: None,
            spec_accept_rate: None,
            ms_per_verify_step: None,
            two_point_inverted: 1,
            coalesced: 0,
            warm: 0,
            warm_decode_tokens_per_s: None,
            warm_ms_per_step: None,
        };
        let t = summary_table(&[p]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("4k "), "{t}");
        assert!(lines[2].contains("120.0 (108.0–132.0)"), "{t}");
        assert!(lines[2].contains("1 cached"), "{t}");
        assert!(lines[2].contains("1 t_B≤t_A"), "{t}");
        assert_eq!(fmt_ctx(1000), "1000");
    }
}

#[cfg(test)]
mod snapshot_tests;

/// The six measured cells of a summary row, in the order every table shows them: TTFT,
/// prefill, decode, ms/step, server prompt ms, server decode; `spread` formats each.
pub fn metric_cells(p: &PointSummary, spread: impl Fn(&Option<Spread>) -> String) -> [String; 6] {
    [
        spread(&p.ttft_ms),
        spread(&p.prefill_tokens_per_s),
        spread(&p.decode_tokens_per_s),
        spread(&p.ms_per_step),
        spread(&p.server_prompt_ms),
        spread(&p.server_decode_tokens_per_s),
    ]
}
