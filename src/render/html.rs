//! One self-contained HTML file: configuration, server identity and capabilities, warnings,
//! the table, the fits and the plots (inline SVG). No scripts, no external fetches, so it
//! opens anywhere, offline, and can be mailed as one file.

use std::fmt::Write;

use super::table::{equation, fit_notes};
use super::{fmt_ctx, num, svg, RenderError, Renderer};
use crate::compare::{Comparison, Verdict};
use crate::report::{Report, RunReport};
use crate::stats::Spread;

/// The HTML format.
pub struct HtmlRenderer;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1120px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:26px;margin:8px 0 4px}h2{font-size:20px;margin:32px 0 10px;border-bottom:2px solid #dde1e8;padding-bottom:4px}
h3{font-size:16px;margin:22px 0 8px}
.sub{color:#5b6475;margin:0 0 14px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:14px}
.card{background:#fff;border:1px solid #e1e5eb;border-radius:8px;padding:12px 16px}
.card h3{margin:0 0 8px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0;font-size:14px}
dt{color:#5b6475}dd{margin:0;word-break:break-all}
table{border-collapse:collapse;background:#fff;font-size:14px;border:1px solid #e1e5eb}
th,td{padding:5px 10px;border-bottom:1px solid #eceff3;text-align:right;white-space:nowrap}
th{background:#eef1f5;font-weight:600}
td:first-child,th:first-child{text-align:left}
.warn{background:#fff6e0;border:1px solid #f0c36d;border-radius:8px;padding:8px 16px;margin:10px 0}
.warn li{margin:3px 0}
.ok{color:#0a7a3f}.bad{color:#b3261e;font-weight:600}.muted{color:#7a8294}
.fits li{margin:6px 0}.fits code{font-size:14px;background:#eef1f5;padding:1px 5px;border-radius:4px}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:14px}
figure{margin:0;background:#fff;border:1px solid #e1e5eb;border-radius:8px;padding:8px}
figure svg{width:100%;height:auto;display:block}
figcaption{font-size:13px;color:#5b6475;padding:4px 6px}
.extra{font-weight:600;color:#8a4b00}
footer{margin-top:36px;color:#7a8294;font-size:13px}
";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n",
        esc(title)
    )
}

/// A definition list of (name, value) rows.
fn dl(out: &mut String, items: &[(&str, String)]) {
    out.push_str("<dl>");
    for (k, v) in items {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
    }
    out.push_str("</dl>");
}

fn spread(s: &Option<Spread>) -> String {
    match s {
        Some(s) if s.n > 1 => format!(
            "{} <span class=\"muted\">({}–{})</span>",
            num(s.median),
            num(s.min),
            num(s.max)
        ),
        Some(s) => num(s.median),
        None => "–".into(),
    }
}

fn run_section(out: &mut String, run: &RunReport) {
    let _ = writeln!(out, "<h2>{}</h2>", esc(&run.label));
    let _ = writeln!(
        out,
        "<p class=\"sub\">{} · run <code>{}</code> · started {} · ctxbench {}</p>",
        esc(&run.path),
        esc(&run.run_id),
        esc(&run.started_at),
        esc(&run.ctxbench_version)
    );
    if !run.warnings.is_empty() {
        out.push_str("<div class=\"warn\"><strong>Warnings</strong><ul>");
        for w in &run.warnings {
            let _ = write!(out, "<li>{}</li>", esc(&w.message));
        }
        out.push_str("</ul></div>\n");
    }
    out.push_str("<div class=\"cards\">\n<div class=\"card\"><h3>Server</h3>");
    dl(out, &super::server_items(&run.server));
    out.push_str("</div>\n<div class=\"card\"><h3>Configuration</h3>");
    dl(out, &super::config_items(&run.config));
    out.push_str("</div>\n<div class=\"card\"><h3>Corpus and client</h3>");
    dl(out, &super::corpus_items(&run.corpus));
    let _ = write!(
        out,
        "<dl><dt>host</dt><dd>{} ({} {}, {} CPUs)</dd></dl>",
        esc(&run.host.hostname),
        esc(&run.host.os),
        esc(&run.host.arch),
        run.host.cpus
    );
    out.push_str("</div>\n</div>\n");

    if let Some(m) = &run.capacity {
        let _ = writeln!(out, "<h3>Capacity map</h3>\n<p class=\"muted\">context × concurrency; the results table below is c = {}</p>", m.levels.first().copied().unwrap_or(1));
        for t in crate::capacity::map_tables(m) {
            let _ = write!(out, "<p>{}</p>\n<table><thead><tr>", esc(&t.title));
            for h in &t.head {
                let _ = write!(out, "<th>{}</th>", esc(h));
            }
            out.push_str("</tr></thead><tbody>\n");
            for r in &t.rows {
                out.push_str("<tr>");
                for c in r {
                    let _ = write!(out, "<td>{}</td>", esc(c));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</tbody></table>\n");
        }
        out.push_str("<ul class=\"muted\">");
        for l in crate::capacity::map_legend(m) {
            let _ = write!(out, "<li>{}</li>", esc(&l));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("<h3>Results</h3>\n<table><thead><tr><th>context</th><th>usable/n</th><th>TTFT ms</th><th>prefill tok/s</th><th>decode tok/s</th><th>ms/step</th><th>server prompt ms</th><th>server decode tok/s</th><th>excluded</th></tr></thead><tbody>\n");
    for p in &run.points {
        let ex = p.exclusions();
        let cells = super::metric_cells(p, spread).join("</td><td>");
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}/{}</td><td>{cells}</td><td{}>{}</td></tr>",
            fmt_ctx(p.context_tokens),
            p.usable,
            p.samples,
            if ex.is_empty() { "" } else { " class=\"bad\"" },
            if ex.is_empty() {
                "–".into()
            } else {
                esc(&ex.join(", "))
            }
        );
    }
    out.push_str("</tbody></table>\n<p class=\"muted\">Medians (min–max) over usable samples; client-side unless marked server.");
    if let Some(l) = super::exclusion_legend(&run.points) {
        let _ = write!(out, " {}", esc(&l));
    }
    out.push_str("</p>\n");
    let stops = super::shown_stops(run);
    if !stops.is_empty() {
        out.push_str("<table><thead><tr><th>context</th><th>repetitions</th></tr></thead><tbody>");
        for p in stops {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                fmt_ctx(p.context_tokens),
                esc(&super::stop_text(p))
            );
        }
        out.push_str("</tbody></table>\n");
    }
    if run.points.iter().any(|p| p.warm > 0) {
        out.push_str("<h3>Decode at depth</h3>\n<p class=\"muted\">Warm samples: after each cold prefill, decode again with the prefix reused on purpose (not in the table above or the fits).</p>\n<table><thead><tr><th>context</th><th>warm n</th><th>decode tok/s</th><th>ms/step</th><th>cold decode tok/s</th></tr></thead><tbody>\n");
        for p in run.points.iter().filter(|p| p.warm > 0) {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                fmt_ctx(p.context_tokens),
                p.warm,
                spread(&p.warm_decode_tokens_per_s),
                spread(&p.warm_ms_per_step),
                spread(&p.decode_tokens_per_s)
            );
        }
        out.push_str("</tbody></table>\n");
    }
    if !run.needle.is_empty() {
        let mut depths: Vec<u32> = run.needle.iter().map(|c| c.depth_pct).collect();
        depths.sort_unstable();
        depths.dedup();
        out.push_str("<h3>Needle retrieval</h3>\n<p class=\"muted\">A fact with a random value at each depth of a cold, exact-length prompt, asked for at the end (plain completions prompt, no chat template); cells are value found / answered, failed requests apart. Not in the speed numbers.</p>\n<table><thead><tr><th>context</th>");
        for d in &depths {
            let _ = write!(out, "<th>{d}%</th>");
        }
        out.push_str("</tr></thead><tbody>\n");
        let mut contexts: Vec<u64> = run.needle.iter().map(|c| c.context_tokens).collect();
        contexts.dedup();
        for c in contexts {
            let _ = write!(out, "<tr><td>{}</td>", fmt_ctx(c));
            for d in &depths {
                let cell = run
                    .needle
                    .iter()
                    .find(|x| x.context_tokens == c && x.depth_pct == *d)
                    .map_or("–".to_owned(), super::needle_cell);
                let _ = write!(out, "<td>{}</td>", esc(&cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table>\n");
    }
    if !run.acceptance.is_empty() {
        out.push_str(
            "<table><thead><tr><th>context</th><th>acceptance length</th></tr></thead><tbody>",
        );
        for a in &run.acceptance {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                fmt_ctx(a.context_tokens),
                spread(&Some(a.accept_length))
            );
        }
        out.push_str("</tbody></table>\n");
    }
    let fits: Vec<_> = run.ttft_fit.iter().chain(&run.step_fit).collect();
    if !fits.is_empty() {
        out.push_str("<h3>Scaling fits</h3>\n<p class=\"muted\">Per-length medians of cold usable samples; least squares on relative error with coefficients ≥ 0; L in tokens.</p>\n<ul class=\"fits\">");
        for f in fits {
            let _ = write!(
                out,
                "<li><code>{}</code> · R² {:.3} · {} medians of {} samples{}<ul>",
                esc(&equation(f)),
                f.fit.r2,
                f.fit.points,
                f.fit.n,
                if f.poor {
                    " · <span class=\"bad\">poor fit</span>"
                } else {
                    ""
                }
            );
            for n in fit_notes(f) {
                let class = if n.starts_with("EXTRAPOLATED") {
                    " class=\"extra\""
                } else {
                    ""
                };
                let _ = write!(out, "<li{class}>{}</li>", esc(&n));
            }
            out.push_str("</ul></li>");
        }
        out.push_str("</ul>\n");
    }
}

fn figure(out: &mut String, svg: &str, caption: &str) {
    // plotters writes a bare <svg> element; drop any XML prolog so it can sit inline.
    let svg = svg.trim_start_matches(|c: char| c != '<');
    let svg = match svg.strip_prefix("<?xml") {
        Some(rest) => rest.split_once("?>").map(|x| x.1).unwrap_or(rest),
        None => svg,
    };
    let _ = writeln!(
        out,
        "<figure>{}<figcaption>{}</figcaption></figure>",
        svg.trim(),
        esc(caption)
    );
}

impl Renderer for HtmlRenderer {
    fn report(&self, report: &Report) -> Result<String, RenderError> {
        let names: Vec<&str> = report.runs.iter().map(|r| r.label.as_str()).collect();
        let mut body = String::new();
        let _ = writeln!(
            body,
            "<h1>ctxbench report</h1>\n<p class=\"sub\">{} · {}</p>",
            esc(&names.join(" · ")),
            esc(&report.generated_by)
        );
        let plots = svg::report_plots(report)?;
        if !plots.is_empty() {
            body.push_str("<h2>Plots</h2>\n<div class=\"plots\">\n");
            for p in &plots {
                figure(&mut body, &p.svg, &p.caption);
            }
            body.push_str("</div>\n");
        }
        for run in &report.runs {
            run_section(&mut body, run);
        }
        let _ = writeln!(
            body,
            "<footer>Built by {} from the results files alone. Self-contained: no scripts, no network.</footer>",
            esc(&report.generated_by)
        );
        Ok(page(
            &format!("ctxbench report: {}", names.join(", ")),
            &body,
        ))
    }

    fn compare(&self, cmp: &Comparison) -> Result<String, RenderError> {
        let mut body = String::new();
        let _ = writeln!(
            body,
            "<h1>ctxbench compare</h1>\n<p class=\"sub\">baseline A = {} · cold usable samples</p>",
            esc(&cmp.baseline.label),
        );
        figure(
            &mut body,
            &svg::compare_plot(cmp)?,
            "B/A per context and metric; whiskers: confidence interval; dashed: no change",
        );
        for v in &cmp.versus {
            let _ = writeln!(
                body,
                "<h2>B = {}</h2>\n<p class=\"sub\">{}</p>",
                esc(&v.run.label),
                esc(&crate::compare::method_note(cmp, v))
            );
            if !v.differences.is_empty() || !v.mismatches.is_empty() {
                body.push_str("<div class=\"warn\"><ul>");
                for d in &v.differences {
                    let _ = write!(body, "<li>differs: <code>{}</code></li>", esc(d));
                }
                for m in &v.mismatches {
                    let _ = write!(body, "<li class=\"bad\">compared anyway: {}</li>", esc(m));
                }
                body.push_str("</ul></div>");
            }
            body.push_str("<table><thead><tr><th>context</th><th>metric</th><th>A</th><th>B</th><th>B/A</th><th>interval</th><th>verdict</th></tr></thead><tbody>\n");
            for r in &v.rows {
                let val = |x: Option<f64>| {
                    x.map(|x| format!("{} {}", num(x), r.metric.unit()))
                        .unwrap_or("–".into())
                };
                let class = match r.verdict {
                    Verdict::Faster => "ok",
                    Verdict::Slower => "bad",
                    _ => "muted",
                };
                let _ = writeln!(
                    body,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
                    esc(&r.label()),
                    esc(r.metric.label()),
                    esc(&val(r.a)),
                    esc(&val(r.b)),
                    r.ratio.map(|x| format!("{x:.3}")).unwrap_or("–".into()),
                    r.shown_interval().map(|c| format!("{:.3}–{:.3}", c.low, c.high)).unwrap_or("–".into()),
                    esc(&super::verdict_text(v, r))
                );
            }
            body.push_str("</tbody></table>\n");
            let agreement = super::agreement_section(cmp, v);
            if !agreement.is_empty() {
                let _ = write!(
                    body,
                    "<h3>Output agreement</h3>\n<pre>{}</pre>\n",
                    esc(&agreement)
                );
            }
        }
        Ok(page("ctxbench compare", &body))
    }
}
