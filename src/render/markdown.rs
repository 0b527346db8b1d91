//! Markdown: the report and the comparison as GitHub-flavoured tables.

use std::fmt::Write;

use super::table::{equation, fit_notes};
use super::{fmt_ctx, num, RenderError, Renderer};
use crate::compare::Comparison;
use crate::report::{Report, RunReport};
use crate::stats::Spread;

/// The Markdown format.
pub struct MarkdownRenderer;

/// Escapes the characters that would break a table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn spread(s: &Option<Spread>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{} ({}–{})", num(s.median), num(s.min), num(s.max)),
        Some(s) => num(s.median),
        None => "–".into(),
    }
}

fn run_section(out: &mut String, run: &RunReport) {
    let _ = writeln!(out, "## {}\n", cell(&run.label));
    let _ = writeln!(
        out,
        "- results: `{}` (run `{}`, started {})",
        run.path, run.run_id, run.started_at
    );
    let srv = &run.server;
    let _ = writeln!(
        out,
        "- server: {} at {}, model `{}`, max context {}",
        cell(&super::server_name(srv)),
        srv.url,
        srv.model.as_deref().unwrap_or("–"),
        srv.max_context.map_or("not reported".to_owned(), |n| {
            match &srv.max_context_source {
                Some(src) => format!("{n} ({src})"),
                None => n.to_string(),
            }
        })
    );
    let _ = writeln!(
        out,
        "- measured: {}, corpus: {}",
        cell(&super::measured_text(&run.config)),
        cell(&run.corpus.label)
    );
    let _ = writeln!(
        out,
        "- client: {} ({} {}, {} CPUs), ctxbench {}\n",
        run.host.hostname, run.host.os, run.host.arch, run.host.cpus, run.ctxbench_version
    );
    if !run.warnings.is_empty() {
        let _ = writeln!(out, "**Warnings**\n");
        for w in &run.warnings {
            let _ = writeln!(out, "- ⚠ {}", w.message);
        }
        out.push('\n');
    }
    if let Some(m) = &run.capacity {
        let _ = writeln!(
            out,
            "**Capacity map** (context × concurrency; the table below is c = {})\n",
            m.levels.first().copied().unwrap_or(1)
        );
        for t in crate::capacity::map_tables(m) {
            let _ = writeln!(out, "{}\n", cell(&t.title));
            let _ = writeln!(
                out,
                "| {} |",
                t.head
                    .iter()
                    .map(|h| cell(h))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            let _ = writeln!(out, "|---|{}", "--:|".repeat(t.head.len() - 1));
            for r in &t.rows {
                let _ = writeln!(
                    out,
                    "| {} |",
                    r.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | ")
                );
            }
            out.push('\n');
        }
        for l in crate::capacity::map_legend(m) {
            let _ = writeln!(out, "- {}", cell(&l));
        }
        out.push('\n');
    }
    let _ = writeln!(out, "| context | usable/n | TTFT ms | prefill tok/s | decode tok/s | ms/step | server prompt ms | server decode tok/s | excluded |");
    let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|---|");
    for p in &run.points {
        let ex = p.exclusions();
        let cells = super::metric_cells(p, spread).join(" | ");
        let _ = writeln!(
            out,
            "| {} | {}/{} | {cells} | {} |",
            fmt_ctx(p.context_tokens),
            p.usable,
            p.samples,
            if ex.is_empty() {
                "–".into()
            } else {
                ex.join(", ")
            }
        );
    }
    let _ = writeln!(
        out,
        "\nMedians (min–max) over usable samples, client-side unless marked server."
    );
    if let Some(l) = super::exclusion_legend(&run.points) {
        let _ = writeln!(out, "{l}");
    }
    out.push('\n');
    let stops = super::shown_stops(run);
    if !stops.is_empty() {
        let _ = writeln!(out, "| context | repetitions |\n|---|---|");
        for p in stops {
            let _ = writeln!(
                out,
                "| {} | {} |",
                fmt_ctx(p.context_tokens),
                cell(&super::stop_text(p))
            );
        }
        out.push('\n');
    }
    if run.points.iter().any(|p| p.warm > 0) {
        let _ = writeln!(out, "### Decode at depth\n\nWarm samples: after each cold prefill, decode again with the prefix reused on purpose (not in the table above or the fits).\n");
        let _ = writeln!(out, "| context | warm n | decode tok/s | ms/step | cold decode tok/s |\n|---|--:|--:|--:|--:|");
        for p in run.points.iter().filter(|p| p.warm > 0) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                fmt_ctx(p.context_tokens),
                p.warm,
                spread(&p.warm_decode_tokens_per_s),
                spread(&p.warm_ms_per_step),
                spread(&p.decode_tokens_per_s)
            );
        }
        out.push('\n');
    }
    if !run.needle.is_empty() {
        let mut depths: Vec<u32> = run.needle.iter().map(|c| c.depth_pct).collect();
        depths.sort_unstable();
        depths.dedup();
        let _ = writeln!(out, "### Needle retrieval\n\nA fact with a random value at each depth of a cold, exact-length prompt, asked for at the end (plain completions prompt, no chat template); cells are value found / answered, failed requests apart. Not in the speed numbers.\n");
        let head: Vec<String> = depths.iter().map(|d| format!("{d}%")).collect();
        let _ = writeln!(
            out,
            "| context | {} |\n|---|{}",
            head.join(" | "),
            "--:|".repeat(depths.len())
        );
        let mut contexts: Vec<u64> = run.needle.iter().map(|c| c.context_tokens).collect();
        contexts.dedup();
        for c in contexts {
            let cells: Vec<String> = depths
                .iter()
                .map(|d| {
                    run.needle
                        .iter()
                        .find(|x| x.context_tokens == c && x.depth_pct == *d)
                        .map_or("–".to_owned(), super::needle_cell)
                })
                .collect();
            let _ = writeln!(out, "| {} | {} |", fmt_ctx(c), cells.join(" | "));
        }
        out.push('\n');
    }
    if !run.acceptance.is_empty() {
        let _ = writeln!(out, "| context | acceptance length |\n|---|--:|");
        for a in &run.acceptance {
            let _ = writeln!(
                out,
                "| {} | {} |",
                fmt_ctx(a.context_tokens),
                spread(&Some(a.accept_length))
            );
        }
        out.push('\n');
    }
    let fits: Vec<_> = run.ttft_fit.iter().chain(&run.step_fit).collect();
    if !fits.is_empty() {
        let _ = writeln!(out, "### Scaling fits\n\nFitted to the per-length medians of cold usable samples by least squares on relative error, coefficients ≥ 0; L in tokens.\n");
        for f in fits {
            let _ = writeln!(
                out,
                "- **{}** — R² {:.3}, {} medians of {} samples{}",
                equation(f),
                f.fit.r2,
                f.fit.points,
                f.fit.n,
                if f.poor { " — **poor fit**" } else { "" }
            );
            for n in fit_notes(f) {
                let _ = writeln!(out, "  - {n}");
            }
        }
        out.push('\n');
    }
}

impl Renderer for MarkdownRenderer {
    fn report(&self, report: &Report) -> Result<String, RenderError> {
        let mut out = String::from("# ctxbench report\n\n");
        for run in &report.runs {
            run_section(&mut out, run);
        }
        let _ = writeln!(
            out,
            "_{}; built from the results files alone._",
            report.generated_by
        );
        Ok(out)
    }

    fn compare(&self, cmp: &Comparison) -> Result<String, RenderError> {
        let mut out = String::from("# ctxbench compare\n\n");
        for v in &cmp.versus {
            let _ = writeln!(
                out,
                "## B = {} vs A = {}\n\nCold usable samples. {}.\n",
                cell(&v.run.label),
                cell(&cmp.baseline.label),
                crate::compare::method_note(cmp, v)
            );
            if !v.differences.is_empty() {
                let _ = writeln!(out, "Recorded differences:\n");
                for d in &v.differences {
                    let _ = writeln!(out, "- `{}`", d.replace('`', "'"));
                }
                out.push('\n');
            }
            for m in &v.mismatches {
                let _ = writeln!(out, "- ⚠ compared anyway (--allow-mismatch): {m}");
            }
            let _ = writeln!(
                out,
                "| context | metric | A | B | B/A | interval | verdict |"
            );
            let _ = writeln!(out, "|---|---|--:|--:|--:|--:|---|");
            for r in &v.rows {
                let val = |x: Option<f64>| {
                    x.map(|x| format!("{} {}", num(x), r.metric.unit()))
                        .unwrap_or("–".into())
                };
                let verdict = match r.verdict {
                    crate::compare::Verdict::Faster | crate::compare::Verdict::Slower => {
                        format!("**{}**", super::verdict_text(v, r))
                    }
                    _ => r.verdict.to_string(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    r.label(),
                    r.metric.label(),
                    val(r.a),
                    val(r.b),
                    r.ratio.map(|x| format!("{x:.3}")).unwrap_or("–".into()),
                    r.shown_interval()
                        .map(|c| format!("{:.3}–{:.3}", c.low, c.high))
                        .unwrap_or("–".into()),
                    verdict
                );
            }
            out.push('\n');
            let agreement = super::agreement_section(cmp, v);
            if !agreement.is_empty() {
                let _ = writeln!(out, "```text\n{agreement}```\n");
            }
        }
        Ok(out)
    }
}
