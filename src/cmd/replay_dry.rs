//! `ctxbench replay --dry-run`: the trace read and validated whole in one streaming pass,
//! and the replay's plan printed; nothing is sent.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::{Context, Result};

use crate::cmd::dryrun::peak_rss_kib;
use crate::cmd::progress::fmt_secs;
use crate::cmd::replay_args::ReplayArgs;
use crate::cmd::Ending;
use ctxbench_schema::error::UsageError;
use ctxbench_trace::plan::{summarize, CostModel, PlanOptions, PlanSummary};
use ctxbench_trace::shape::Shaping;
use ctxbench_trace::TraceReader;

/// Prints the replay's plan from the trace alone.
pub fn run(args: &ReplayArgs) -> Result<Ending> {
    let cost = args
        .cost_model
        .as_deref()
        .map(CostModel::parse)
        .transpose()
        .map_err(|e| UsageError::Invalid(format!("--cost-model: {e}")))?;
    let opts = PlanOptions {
        shaping: Shaping {
            scale: args.scale,
            context_limit: args.context_limit,
        },
        max_requests: args.max_requests,
        cost,
    };
    let (what, mut reader) = open(args)?;
    let summary =
        summarize(&mut reader, &opts).context("the trace is invalid: nothing would be sent")?;
    let text = plan_text(&what, &reader, &summary, &opts);
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(Ending::Complete)
}

/// The trace named for the plan, and its reader.
pub(crate) fn open(args: &ReplayArgs) -> Result<(String, TraceReader)> {
    match (&args.synthetic, &args.trace) {
        (Some(_), _) => Ok((
            "synthetic agent workload".to_owned(),
            ctxbench_trace::synthetic::agent(&args.agent_params()),
        )),
        (None, Some(path)) => {
            let reader = ctxbench_trace::open(path)?;
            Ok((path.display().to_string(), reader))
        }
        (None, None) => Err(UsageError::Invalid(
            "give a TRACE file or folder, or --synthetic agent".into(),
        )
        .into()),
    }
}

/// The plan as printed.
fn plan_text(what: &str, reader: &TraceReader, s: &PlanSummary, opts: &PlanOptions) -> String {
    let mut o = String::new();
    let format = reader
        .format()
        .map_or("generated (--synthetic agent)", |f| f.name());
    let _ = writeln!(o, "trace: {what}");
    let _ = writeln!(o, "format: {format}");
    for note in reader.notes() {
        let _ = writeln!(o, "  - {note}");
    }
    let _ = writeln!(o, "requests: {}{}", n(s.requests), requests_detail(s, opts));
    let _ = writeln!(
        o,
        "sessions: {}",
        if s.sessions == 0 {
            "none (requests stand alone)".to_owned()
        } else {
            n(s.sessions)
        }
    );
    let _ = writeln!(
        o,
        "tokens: {} input, {} output; largest context {}",
        n(s.input_tokens),
        n(s.output_tokens),
        n(s.largest_context)
    );
    let _ = writeln!(
        o,
        "ideal reuse: {:.1}% ({} of {} input tokens are leading blocks an earlier request already sent; {} distinct blocks)",
        100.0 * s.reuse_ratio(),
        n(s.reused_tokens),
        n(s.input_tokens),
        n(s.distinct_blocks)
    );
    let _ = writeln!(o, "span: {}", span_text(s));
    let _ = writeln!(o, "scaled: {}", scale_text(s, opts));
    let _ = writeln!(o, "predicted server time: {}", predicted_text(s, opts));
    if let Some(kib) = peak_rss_kib() {
        let _ = writeln!(o, "peak memory (RSS): {:.1} MiB", kib as f64 / 1024.0);
    }
    o
}

fn requests_detail(s: &PlanSummary, opts: &PlanOptions) -> String {
    let mut d = Vec::new();
    if s.truncated_by_max {
        d.push(format!(
            "the first {} of the trace (--max-requests)",
            n(s.read)
        ));
    }
    if let Some(limit) = opts.shaping.context_limit {
        if s.skipped > 0 {
            d.push(format!(
                "{} skipped as over the context limit of {} tokens, never truncated; the largest needs {}",
                n(s.skipped),
                n(limit),
                n(s.largest_skipped)
            ));
        } else {
            d.push(format!(
                "none over the context limit of {} tokens",
                n(limit)
            ));
        }
    }
    if d.is_empty() {
        String::new()
    } else {
        format!(" ({})", d.join("; "))
    }
}

fn span_text(s: &PlanSummary) -> String {
    match (s.span_ms, s.longest_think_ms) {
        (Some(ms), _) => format!("{} from the first request to the last (the first at time 0)", fmt_secs(ms / 1000.0)),
        (None, Some(ms)) => format!(
            "no absolute times: replayed per session; the longest session thinks for {} in all, plus its server time",
            fmt_secs(ms / 1000.0)
        ),
        (None, None) => "no times in the trace".to_owned(),
    }
}

fn scale_text(s: &PlanSummary, opts: &PlanOptions) -> String {
    match opts.shaping.scale {
        None => "no (--scale F multiplies every length and the block size)".to_owned(),
        Some(f) => {
            let mut t = format!(
                "×{f} (input, output and block size; requests keep the blocks they shared)"
            );
            if s.blocks_dropped > 0 {
                let _ = write!(
                    t,
                    "; {} blocks fell beyond a rounded-down input and were dropped",
                    n(s.blocks_dropped)
                );
            }
            t
        }
    }
}

fn predicted_text(s: &PlanSummary, opts: &PlanOptions) -> String {
    match (s.predicted_server_s, opts.cost) {
        (Some(secs), Some(c)) => format!(
            "{} of prefill and decode, one request at a time at ideal reuse (prefill {} tokens/s, decode {} tokens/s)",
            fmt_secs(secs),
            c.prefill_tps,
            c.decode_tps
        ),
        _ => "needs a server's speeds: give --cost-model prefill=TOK/S,decode=TOK/S (from a sweep of it)".to_owned(),
    }
}

/// A count with thousands separators.
fn n(x: u64) -> String {
    let digits = x.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::n;

    #[test]
    fn counts_get_thousands_separators() {
        assert_eq!(
            (n(0), n(999), n(1000), n(1_234_567)),
            ("0".into(), "999".into(), "1,000".into(), "1,234,567".into())
        );
    }
}
