//! CSV: one row per run and context point (report), or per point and metric (compare).

use std::fmt::Write;

use crate::format::RenderError;

use crate::format::Renderer;
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::Report;
use ctxbench_stats::stats::Spread;

/// The CSV format.
pub struct CsvRenderer;

/// Quotes a field when it holds a comma, quote or newline (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn opt(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite())
        .map(|v| v.to_string())
        .unwrap_or_default()
}

const SPREAD_COLS: [&str; 5] = ["median", "p25", "p75", "min", "max"];

fn spread(out: &mut Vec<String>, s: &Option<Spread>) {
    match s {
        Some(s) => out.extend([s.median, s.p25, s.p75, s.min, s.max].map(|v| opt(Some(v)))),
        None => out.extend(std::iter::repeat_n(String::new(), 5)),
    }
}

impl Renderer for CsvRenderer {
    fn report(&self, report: &Report) -> Result<String, RenderError> {
        let metrics = [
            "ttft_ms",
            "prefill_tokens_per_s",
            "decode_tokens_per_s",
            "ms_per_step",
            "server_prompt_ms",
            "server_decode_tokens_per_s",
        ];
        let mut head: Vec<String> = [
            "run",
            "context_tokens",
            "samples",
            "usable",
            "contaminated",
            "length_mismatch",
            "failed",
        ]
        .map(String::from)
        .to_vec();
        for m in metrics {
            head.extend(SPREAD_COLS.map(|c| format!("{m}_{c}")));
        }
        head.push("accept_length_median".into());
        let mut out = head.join(",") + "\n";
        for run in &report.runs {
            for p in &run.points {
                let mut row = vec![
                    field(&run.label),
                    p.context_tokens.to_string(),
                    p.samples.to_string(),
                    p.usable.to_string(),
                    p.contaminated.to_string(),
                    p.length_mismatch.to_string(),
                    p.failed.to_string(),
                ];
                for s in [
                    &p.ttft_ms,
                    &p.prefill_tokens_per_s,
                    &p.decode_tokens_per_s,
                    &p.ms_per_step,
                    &p.server_prompt_ms,
                    &p.server_decode_tokens_per_s,
                ] {
                    spread(&mut row, s);
                }
                row.push(opt(run
                    .acceptance
                    .iter()
                    .find(|a| a.context_tokens == p.context_tokens)
                    .map(|a| a.accept_length.median)));
                let _ = writeln!(out, "{}", row.join(","));
            }
        }
        Ok(out)
    }

    fn compare(&self, cmp: &Comparison) -> Result<String, RenderError> {
        let mut out = String::from(
            "a,b,context_tokens,metric,a_median,b_median,ratio,low,high,level,basis,n_a,n_b,verdict\n",
        );
        for v in &cmp.versus {
            for r in &v.rows {
                let c = r.interval;
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    field(&cmp.baseline.label),
                    field(&v.run.label),
                    r.context_tokens,
                    r.metric.key(),
                    opt(r.a),
                    opt(r.b),
                    opt(r.ratio),
                    opt(c.map(|c| c.low)),
                    opt(c.map(|c| c.high)),
                    cmp.level,
                    match v.basis {
                        ctxbench_stats::stats::significance::Basis::Runs => "runs",
                        ctxbench_stats::stats::significance::Basis::SamplesOfOneRun =>
                            "samples_of_one_run",
                    },
                    r.n_a,
                    r.n_b,
                    field(&r.verdict.to_string())
                );
            }
        }
        Ok(out)
    }
}
