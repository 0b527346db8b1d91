//! Plain-text report and comparison for the terminal.

use std::fmt::Write;

use super::fitwords::{equation, fit_notes};
use super::text::{self, Columns, Layout};
use super::{fmt_ctx, summary_table, RenderError, Renderer};
use ctxbench_stats::capacity as ctxbench_capacity;
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::{Report, RunReport, ScalingFit};
use ctxbench_stats::stats::metric::Metric;

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
    if let Some(l) = super::exclusion_legend(&run.points) {
        let _ = writeln!(out, "{l}");
    }
    for p in super::shown_stops(run) {
        let _ = writeln!(
            out,
            "{}: {}",
            fmt_ctx(p.context_tokens),
            super::stop_text(p)
        );
    }
    if let Some(d) = &run.design {
        titled(&mut out, &super::design::title(d), &super::design::table(d));
        for n in super::design::notes(d) {
            let _ = writeln!(out, "  {n}");
        }
    }
    if let Some(w) = &run.warm {
        for part in super::warm::parts(w) {
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
    if let Some(t) = super::warm_table(&run.points) {
        let _ = writeln!(
            out,
            "decode at depth (warm: prefix reused on purpose, not in the table above):\n{t}"
        );
    }
    if let Some(t) = super::spec_table(&run.points) {
        let _ = writeln!(out, "speculative decoding (medians per point):\n{t}");
    }
    if let Some(t) = super::needle_table(&run.needle) {
        let _ = writeln!(
            out,
            "needle retrieval (value found / answered, per depth; not in the speed numbers):\n{t}"
        );
    }
    if let Some(c) = &run.cost {
        titled(&mut out, &super::cost_title(c), &super::cost_table(c));
        if let Some(t) = super::cell_cost_table(c) {
            titled(&mut out, super::CELL_COST_TITLE, &t);
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
        super::server_name(srv),
        srv.model.as_deref().unwrap_or("–"),
        srv.max_context
            .map_or("not reported".to_owned(), |n| n.to_string())
    );
    let _ = writeln!(out, "measured: {}", super::measured_text(&run.config));
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
            out.push('\n');
            out.push_str(&compare_rows(v));
            out.push('\n');
            let agreement = super::agreement_section(cmp, v);
            if !agreement.is_empty() {
                let _ = writeln!(out, "{agreement}");
            }
            if let Some(s) = &v.speculation {
                let _ = writeln!(out, "{}", super::speculation::text(s));
            }
            if let Some(w) = &v.warm {
                let _ = writeln!(out, "{}", super::warm::compare_text(w));
            }
            if let Some(r) = &v.roofline {
                let _ = writeln!(out, "{}", super::roofline::versus_text(r));
            }
        }
        Ok(out)
    }
}
