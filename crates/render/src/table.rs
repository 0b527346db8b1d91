//! Plain-text report and comparison for the terminal.

use std::fmt::Write;

use super::fitwords::{equation, fit_notes};
use super::text::{self, Columns, Layout};
use crate::describe::{med, med_range};
use crate::doc::{Align, Table};
use crate::format::RenderError;
use crate::format::Renderer;
use crate::{design, sections};
use ctxbench_schema::units::fmt_ctx;
use ctxbench_stats::capacity as ctxbench_capacity;
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::design::DesignReport;
use ctxbench_stats::report::{Report, RunReport, ScalingFit};
use ctxbench_stats::stats::metric::Metric;
use ctxbench_stats::stats::PointSummary;

/// The terminal format.
pub struct TableRenderer;

/// Writes `title:` and the table under it, indented two spaces.
fn titled(out: &mut String, title: &str, table: &super::doc::Table) {
    let layout = Layout {
        indent: "  ",
        ..Default::default()
    };
    let _ = write!(out, "{title}:\n{}", text::render(table, &layout));
}

/// The fits of every run, as text; empty when no run has a fit.
pub fn fits_text(report: &Report) -> String {
    let mut out = String::new();
    for run in &report.runs {
        let fits: Vec<&ScalingFit> = run.ttft_fit.iter().chain(&run.step_fit).collect();
        if fits.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "fits for {} (per-length medians of cold usable samples; least squares on relative error, coefficients ≥ 0; L in tokens):",
            run.label
        );
        for f in fits {
            let _ = writeln!(
                out,
                "  {}   R² {:.3}   {} medians of {} samples{}",
                equation(f),
                f.fit.r2,
                f.fit.points,
                f.fit.n,
                if f.poor { "   POOR FIT" } else { "" }
            );
            for n in fit_notes(f) {
                let _ = writeln!(out, "    {n}");
            }
        }
    }
    out
}

/// What follows the summary table on the terminal: the exclusion legend, stop reasons
/// (adaptive runs), decode at depth and speculative decoding, when present.
pub fn details(run: &RunReport) -> String {
    let mut out = String::new();
    if let Some(l) = crate::describe::exclusion_legend(&run.points) {
        let _ = writeln!(out, "{l}");
    }
    for p in crate::describe::shown_stops(run) {
        let _ = writeln!(
            out,
            "{}: {}",
            fmt_ctx(p.context_tokens),
            crate::describe::stop_text(p)
        );
    }
    if let Some(t) = crate::tails::table(&run.points) {
        titled(&mut out, &crate::tails::title(), &t);
    }
    if let Some(n) = crate::tails::note(&run.points) {
        let _ = writeln!(out, "{n}");
    }
    if let Some(d) = &run.design {
        titled(&mut out, &super::design::title(d), &super::design::table(d));
        for n in super::design::notes(d) {
            let _ = writeln!(out, "  {n}");
        }
    }
    if let Some(w) = &run.warm {
        for part in super::retention::warm_parts(w) {
            let _ = writeln!(out, "{} — {}:", part.heading, part.title);
            if let Some(t) = &part.table {
                let layout = Layout {
                    indent: "  ",
                    ..Default::default()
                };
                out.push_str(&text::render(t, &layout));
            }
            for n in &part.notes {
                let _ = writeln!(out, "  {n}");
            }
        }
    }
    if let Some(t) = crate::table::warm_table(&run.points) {
        let _ = writeln!(
            out,
            "decode at depth (warm: prefix reused on purpose, not in the table above):\n{t}"
        );
    }
    if let Some(t) = crate::table::spec_table(&run.points) {
        let _ = writeln!(out, "speculative decoding (medians per point):\n{t}");
    }
    if let Some(t) = crate::table::needle_table(&run.needle) {
        let _ = writeln!(
            out,
            "needle retrieval (value found / answered, per depth; not in the speed numbers):\n{t}"
        );
    }
    if let Some(c) = &run.cost {
        titled(
            &mut out,
            &crate::describe::cost_title(c),
            &crate::describe::cost_table(c),
        );
        if let Some(t) = crate::describe::cell_cost_table(c) {
            titled(&mut out, crate::describe::CELL_COST_TITLE, &t);
        }
    }
    if let Some(m) = &run.capacity {
        let _ = writeln!(
            out,
            "\ncapacity map (context × concurrency; the table above is c = {}):",
            m.levels.first().copied().unwrap_or(1)
        );
        let layout = Layout {
            indent: "  ",
            ..Default::default()
        };
        for (i, t) in super::capacity::capacity_tables(m).iter().enumerate() {
            let gap = if i == 0 { "" } else { "\n" };
            let title = t.title.as_deref().unwrap_or_default();
            let _ = write!(out, "{gap}{title}:\n{}", text::render(t, &layout));
        }
        for l in ctxbench_capacity::map_legend(m) {
            let _ = writeln!(out, "  {l}");
        }
    }
    if let Some(r) = &run.roofline {
        out.push_str(&super::roofline::text(r));
    }
    out
}

/// B against A as aligned text, a blank line between contexts.
fn compare_rows(v: &ctxbench_stats::compare::Versus) -> String {
    let t = super::sections::compare_table(v);
    let cols = Columns::fit(&t, &Layout::default());
    let mut out = format!("{}\n{}\n", cols.line(&t.head), cols.rule());
    let mut last = None;
    for (r, cells) in v.rows.iter().zip(&t.rows) {
        if last.is_some_and(|c| c != r.context_tokens) && r.metric == Metric::ALL[0] {
            out.push('\n');
        }
        last = Some(r.context_tokens);
        let cells: Vec<String> = cells.iter().map(|c| c.text.to_plain()).collect();
        let _ = writeln!(out, "{}", cols.line(&cells));
    }
    out
}

fn run_header(out: &mut String, run: &RunReport) {
    let srv = &run.server;
    let _ = writeln!(out, "run {} ({})", run.label, run.path);
    let _ = writeln!(
        out,
        "server: {} · model {} · max context {}",
        crate::describe::server_name(srv),
        srv.model.as_deref().unwrap_or("–"),
        srv.max_context
            .map_or("not reported".to_owned(), |n| n.to_string())
    );
    let _ = writeln!(
        out,
        "measured: {}",
        crate::describe::measured_text(&run.config)
    );
    let _ = writeln!(out, "corpus: {}", run.corpus.label);
}

impl Renderer for TableRenderer {
    fn report(&self, report: &Report) -> Result<String, RenderError> {
        let mut out = String::new();
        for run in &report.runs {
            run_header(&mut out, run);
            let _ = writeln!(out, "\n{}", summary_table(&run.points, run.design.as_ref()));
            out.push_str(&details(run));
            for w in &run.warnings {
                let _ = writeln!(out, "WARNING: {w}");
            }
            if !run.warnings.is_empty() {
                out.push('\n');
            }
        }
        out.push_str(&fits_text(report));
        let prompts = super::prompts::text(&report.prompts);
        if !prompts.is_empty() {
            let _ = write!(out, "\n{prompts}");
        }
        Ok(out)
    }

    fn compare(&self, cmp: &Comparison) -> Result<String, RenderError> {
        let mut out = String::new();
        for v in &cmp.versus {
            let _ = writeln!(
                out,
                "B = {} vs A = {} (cold usable samples)\n{}",
                v.run.label,
                cmp.baseline.label,
                ctxbench_stats::compare::method_note(cmp, v)
            );
            if v.differences.is_empty() {
                let _ = writeln!(out, "recorded differences: none (server flags are not recorded; say what you changed)");
            } else {
                let _ = writeln!(out, "recorded differences:");
                for d in &v.differences {
                    let _ = writeln!(out, "  {d}");
                }
            }
            for m in &v.mismatches {
                let _ = writeln!(out, "WARNING (--allow-mismatch): {m}");
            }
            for n in &v.predicted {
                let _ = writeln!(out, "predicted, not measured: {n}");
            }
            if !v.coverage.is_empty() {
                let _ = writeln!(out, "designed intervals against the other run:");
                for c in &v.coverage {
                    let _ = writeln!(out, "  {}", c.text());
                }
            }
            out.push('\n');
            out.push_str(&compare_rows(v));
            out.push('\n');
            let agreement = crate::describe::agreement_section(cmp, v);
            if !agreement.is_empty() {
                let _ = writeln!(out, "{agreement}");
            }
            if let Some(s) = &v.speculation {
                let _ = writeln!(out, "{}", super::speculation::text(s));
            }
            if let Some(w) = &v.warm {
                let _ = write!(out, "{}", super::retention::compare_edges_text(&w.edges));
                let _ = writeln!(out, "{}", super::warm::compare_text(w));
            }
            if let Some(r) = &v.roofline {
                let _ = writeln!(out, "{}", super::roofline::versus_text(r));
            }
        }
        Ok(out)
    }
}

/// The terminal's summary table: one row per measured length, and one per length a designed
/// run predicted instead (marked, its figures the fits' values with their intervals).
pub fn summary_table(points: &[PointSummary], design: Option<&DesignReport>) -> String {
    let right = |h| (h, Align::Right);
    let mut t = Table::new([
        ("context", Align::Left),
        right("n"),
        right("TTFT ms (min–max)"),
        right("server prompt ms"),
        right("prefill tok/s"),
        right("decode tok/s (min–max)"),
        right("server decode tok/s"),
        right("ms/step"),
        ("excluded", Align::Left),
    ]);
    let mut rows: Vec<(u64, [String; 9])> = points
        .iter()
        .map(|p| {
            let excluded = p.exclusions();
            let row = [
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
            ];
            (p.context_tokens, row)
        })
        .collect();
    for p in design::predicted(design) {
        let row = [
            fmt_ctx(p.context_tokens),
            "pred.".to_owned(),
            design::predicted_cell(&p.ttft_ms),
            "–".to_owned(),
            design::predicted_cell(&p.prefill_tokens_per_s),
            design::predicted_cell(&p.decode_tokens_per_s),
            "–".to_owned(),
            design::predicted_step(p),
            design::predicted_source(p),
        ];
        rows.push((p.context_tokens, row));
    }
    rows.sort_by_key(|r| r.0);
    for (_, row) in rows {
        t.row(row);
    }
    let layout = text::Layout {
        rule: true,
        ..Default::default()
    };
    text::render(&t, &layout)
}

/// Per-point speculative medians, or `None` when no sample reported any.
pub fn spec_table(points: &[PointSummary]) -> Option<String> {
    if points.iter().all(|p| p.spec_accept_length.is_none()) {
        return None;
    }
    let right = |h| (h, Align::Right);
    let mut t = Table::new([
        ("context", Align::Left),
        right("accept length (min–max)"),
        right("accept rate"),
        right("ms/verify step"),
        right("ms/token"),
    ]);
    for p in points {
        t.row([
            fmt_ctx(p.context_tokens),
            med_range(&p.spec_accept_length),
            med(&p.spec_accept_rate),
            med(&p.ms_per_verify_step),
            med(&p.ms_per_step),
        ]);
    }
    Some(text::render(&t, &text::Layout::default()))
}

/// Per-point warm decode (decode at depth), or `None` when there are no warm samples.
pub fn warm_table(points: &[PointSummary]) -> Option<String> {
    if points.iter().all(|p| p.warm == 0) {
        return None;
    }
    let right = |h| (h, Align::Right);
    let mut t = Table::new([
        ("context", Align::Left),
        right("warm n"),
        right("decode tok/s (min–max)"),
        right("ms/step"),
        right("cold decode tok/s"),
    ]);
    for p in points.iter().filter(|p| p.warm > 0) {
        t.row([
            fmt_ctx(p.context_tokens),
            p.warm.to_string(),
            med_range(&p.warm_decode_tokens_per_s),
            med(&p.warm_ms_per_step),
            med(&p.decode_tokens_per_s),
        ]);
    }
    Some(text::render(&t, &text::Layout::default()))
}

/// Needle retrieval per context × depth as text (`pass/checked`, errors apart), or `None`
/// when the run has no needle checks.
pub fn needle_table(cells: &[ctxbench_stats::integrity::NeedleCell]) -> Option<String> {
    if cells.is_empty() {
        return None;
    }
    let t = sections::needle_table(cells);
    // Depth columns at least 9 wide (`5/5 1err`), as this table has always been.
    let min_widths: Vec<usize> = (0..t.head.len())
        .map(|i| if i == 0 { 0 } else { 9 })
        .collect();
    let layout = text::Layout {
        min_widths: &min_widths,
        ..Default::default()
    };
    Some(text::render(&t, &layout))
}

#[cfg(test)]
mod summary_tests {
    use super::*;
    use ctxbench_stats::stats::Spread;

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
            decode_client_over_server: None,
            client_server_disagree: 0,
            spec_accept_length: None,
            spec_accept_rate: None,
            ms_per_verify_step: None,
            two_point_inverted: 1,
            coalesced: 0,
            foreign_load: 0,
            held_back: 0,
            impossible: 0,
            warm: 0,
            warm_decode_tokens_per_s: None,
            warm_ms_per_step: None,
            ttft_tails: None,
            step_tails: None,
        };
        let t = summary_table(&[p], None);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("4k "), "{t}");
        assert!(lines[2].contains("120.0 (108.0–132.0)"), "{t}");
        assert!(lines[2].contains("1 cached"), "{t}");
        assert!(lines[2].contains("1 t_B≤t_A"), "{t}");
        assert_eq!(fmt_ctx(1000), "1000");
    }
}
