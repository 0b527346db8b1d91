//! A run in words, shared by the terminal table and the documents (Markdown, HTML): its
//! configuration, server and corpus as label/value items, stop reasons, verdicts, the cells of a
//! point's metrics, the cost tables.

use std::fmt::Write;

use crate::doc::{Align, Table};
use ctxbench_schema::record::{
    CorpusInfo, CorpusSpec, FlushChoice, Method, PointRecord, RunConfig, ServerInfo, StopReason,
};
use ctxbench_schema::units::{fmt_ctx, num};
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::RunReport;
use ctxbench_stats::stats::{PointSummary, Spread};

pub(crate) fn med(s: &Option<Spread>) -> String {
    s.map(|s| num(s.median)).unwrap_or_else(|| "–".to_owned())
}

pub(crate) fn med_range(s: &Option<Spread>) -> String {
    match s {
        Some(s) if s.n > 1 => format!("{} ({}–{})", num(s.median), num(s.min), num(s.max)),
        Some(s) => num(s.median),
        None => "–".to_owned(),
    }
}

/// The price of a token per context length, as a document table.
pub fn cost_table(c: &ctxbench_stats::price::CostTable) -> Table {
    let mut t = Table::new([
        ("context", Align::Left),
        ("USD / M input tokens", Align::Right),
        ("USD / M output tokens", Align::Right),
    ]);
    let usd = |x: Option<f64>| x.map_or("–".to_owned(), ctxbench_stats::price::usd);
    for p in &c.points {
        t.row([
            fmt_ctx(p.context_tokens),
            usd(p.usd_per_m_input),
            usd(p.usd_per_m_output),
        ]);
    }
    t
}

/// A capacity grid's output cost per cell (context down, concurrency across), as a document
/// table; `None` without a grid.
pub fn cell_cost_table(c: &ctxbench_stats::price::CostTable) -> Option<Table> {
    if c.cells.is_empty() {
        return None;
    }
    let mut levels: Vec<u32> = c.cells.iter().map(|x| x.concurrency).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut contexts: Vec<u64> = c.cells.iter().map(|x| x.context_tokens).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let head = std::iter::once(("context".to_owned(), Align::Left))
        .chain(levels.iter().map(|l| (format!("c={l}"), Align::Right)));
    let mut t = Table::new(head);
    for ctx in contexts {
        let cells = levels.iter().map(|&l| {
            c.cells
                .iter()
                .find(|x| x.context_tokens == ctx && x.concurrency == l)
                .and_then(|x| x.usd_per_m_output)
                .map_or("–".to_owned(), ctxbench_stats::price::usd)
        });
        t.row(std::iter::once(fmt_ctx(ctx)).chain(cells));
    }
    Some(t)
}

/// What the grid's cost table is, said above it.
pub const CELL_COST_TITLE: &str = "USD per million output tokens in each capacity cell, at its aggregate decode rate (all c requests decoding together; the whole-wave output rate where requests queued)";

/// What a cost table is, said above it.
pub fn cost_title(c: &ctxbench_stats::price::CostTable) -> String {
    format!(
        "price of a token at ${}/hour ({})",
        ctxbench_stats::price::usd(c.price_per_hour),
        ctxbench_stats::price::METHOD
    )
}

/// A compare verdict, with "OUTPUTS DIFFER" beside a change whose greedy outputs differ.
pub fn verdict_text(
    v: &ctxbench_stats::compare::Versus,
    r: &ctxbench_stats::compare::CompareRow,
) -> String {
    use ctxbench_stats::compare::Verdict;
    let changed = matches!(r.verdict, Verdict::Faster | Verdict::Slower);
    if changed && v.outputs_differ_at(r.context_tokens) {
        format!("{} — OUTPUTS DIFFER", r.verdict)
    } else {
        r.verdict.to_string()
    }
}

/// The output-agreement section of one comparison, as text; empty when neither run
/// seeded its prompts.
pub fn agreement_section(cmp: &Comparison, v: &ctxbench_stats::compare::Versus) -> String {
    match (&v.agreement, &v.agreement_note) {
        (Some(rows), _) => ctxbench_stats::integrity::agreement_text(
            &cmp.baseline.label,
            &v.run.label,
            &Ok(rows.clone()),
        ),
        (None, Some(note)) => format!("{note}\n"),
        (None, None) => String::new(),
    }
}

/// One needle cell: `pass/answered`, plus failed requests (`err`), never counted as fails.
pub fn needle_cell(c: &ctxbench_stats::integrity::NeedleCell) -> String {
    let mut s = format!("{}/{}", c.pass, c.pass + c.fail);
    if c.error > 0 {
        let _ = write!(s, " {}err", c.error);
    }
    s
}

/// Context lengths as `--contexts` takes them: `1k, 2k, 4k`.
pub fn contexts_text(c: &[u64]) -> String {
    if c.is_empty() {
        return "–".to_owned();
    }
    c.iter().map(|&x| fmt_ctx(x)).collect::<Vec<_>>().join(", ")
}

/// What each request generates: `32 output tokens`, or the two-point pair.
pub fn output_text(c: &RunConfig) -> String {
    match (&c.method, c.two_point_tokens) {
        (Method::TwoPoint, Some((a, b))) => format!("two-point A {a} / B {b} output tokens"),
        _ => format!("{} output tokens", c.output_tokens),
    }
}

/// The corpus in a few words: `repeat (synthetic)`.
pub fn corpus_text(c: &CorpusSpec) -> String {
    match c {
        CorpusSpec::Repeat => "repeat (synthetic)".to_owned(),
        CorpusSpec::Random => "random token ids".to_owned(),
        CorpusSpec::Path(p) => format!("text from {}", p.display()),
        CorpusSpec::Natural(p) => format!("natural text from {}", p.display()),
        CorpusSpec::Code(p) => format!("code (Python source) from {}", p.display()),
    }
}

fn on_off(b: bool) -> String {
    (if b { "on" } else { "off" }).to_owned()
}

fn yes_no(b: Option<bool>) -> String {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
    .to_owned()
}

fn or_dash(s: Option<&str>) -> String {
    s.map_or_else(|| "–".to_owned(), str::to_owned)
}

/// One line of what was measured: `contexts 1k, 2k, 3 reps (fixed), 32 output tokens,
/// method stream, cache bypass on`.
pub fn measured_text(c: &RunConfig) -> String {
    let warm = c.warm.as_ref().map_or(String::new(), |w| {
        let mut m = format!(", mode {}", w.mode.as_str());
        if !w.appends.is_empty() {
            let n: Vec<String> = w.appends.iter().map(|&n| fmt_ctx(n)).collect();
            m.push_str(&format!(" (N {})", n.join(", ")));
        }
        if let Some(t) = w.turn_tokens {
            m.push_str(&format!(" ({t} tokens per turn)"));
        }
        if w.negative_control {
            m.push_str(", negative control (cache switch off on warm requests)");
        }
        m
    });
    format!(
        "contexts {}, {}, {}, method {}, cache bypass {}{warm}",
        contexts_text(&c.contexts),
        c.reps,
        output_text(c),
        c.method,
        on_off(c.cache_bypass)
    )
}

/// The configuration as (name, value) rows, in words.
pub fn config_items(c: &RunConfig) -> Vec<(&'static str, String)> {
    let backend = if c.backend_requested.is_empty() || c.backend_requested == c.backend {
        c.backend.clone()
    } else {
        format!("{} (asked for {})", c.backend, c.backend_requested)
    };
    let mut tolerance = format!("±{} tokens", c.length_tolerance);
    if c.length_tolerance_pct > 0.0 {
        tolerance.push_str(&format!(" or ±{}%", num(c.length_tolerance_pct * 100.0)));
    }
    vec![
        ("backend", backend),
        ("url", c.url.clone()),
        ("model", or_dash(c.model.as_deref())),
        ("contexts", contexts_text(&c.contexts)),
        ("repetitions", c.reps.to_string()),
        ("output", output_text(c)),
        ("method", c.method.to_string()),
        ("corpus", corpus_text(&c.corpus)),
        ("seed", c.seed.to_string()),
        ("cache bypass", on_off(c.cache_bypass)),
        (
            "nonce",
            if c.nonce {
                format!("on ({} tokens)", c.nonce_tokens)
            } else {
                "off".to_owned()
            },
        ),
        ("length tolerance", tolerance),
        (
            "decode at depth",
            if c.decode_samples == 0 {
                "off".to_owned()
            } else {
                format!("{} warm sample(s) after each cold one", c.decode_samples)
            },
        ),
        (
            "flush",
            match &c.flush {
                None => "–".to_owned(),
                Some(FlushChoice::Other(recorded)) => recorded.clone(),
                Some(f) => f.to_string(),
            },
        ),
        ("metrics", or_dash(c.metrics_url.as_deref())),
    ]
}

/// The server software and version: `llama.cpp b1234`.
pub fn server_name(s: &ServerInfo) -> String {
    let name = format!(
        "{} {}",
        s.server_kind,
        s.server_version.as_deref().unwrap_or("")
    )
    .trim_end()
    .to_owned();
    // Behind a router the forwarded answers are one worker's: the router is the server.
    match &s.router {
        Some(r) => format!(
            "{} fronting {} worker(s) that answer like {name}",
            r.kind,
            r.workers.len()
        ),
        None => name,
    }
}

/// The server's identity and capabilities as (name, value) rows, in words.
pub fn server_items(s: &ServerInfo) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("server", server_name(s)),
        ("url", s.url.clone()),
        ("backend", format!("{} ({})", s.backend, s.backend_reason)),
        ("model", or_dash(s.model.as_deref())),
        (
            "max context",
            match (s.max_context, &s.max_context_source) {
                (Some(n), Some(src)) => format!("{n} tokens ({src})"),
                (Some(n), None) => format!("{n} tokens"),
                _ => "not reported".to_owned(),
            },
        ),
        (
            "slots",
            s.total_slots.map_or("–".to_owned(), |n| n.to_string()),
        ),
        (
            "vocabulary",
            s.n_vocab.map_or("–".to_owned(), |n| format!("{n} tokens")),
        ),
        ("prompts", s.prompt_method.clone()),
        ("tokenize", or_dash(s.tokenize.as_deref())),
        ("token-id prompts", yes_no(Some(s.token_id_prompts))),
        ("per-request cache bypass", yes_no(Some(s.cache_bypass))),
        ("cached-token counts", yes_no(s.reports_cached_tokens)),
        ("server timings", yes_no(s.reports_timings)),
        (
            "tokens added to a prompt",
            s.server_added_tokens
                .map_or("–".to_owned(), |n| n.to_string()),
        ),
        ("/metrics", yes_no(Some(s.metrics))),
        (
            "KV pool",
            s.kv_pool_tokens
                .map_or("not reported".to_owned(), |n| format!("{n} tokens")),
        ),
        (
            "flush",
            s.flush
                .clone()
                .unwrap_or_else(|| "not available".to_owned()),
        ),
    ];
    if let Some(r) = &s.router {
        v.push(("router", format!("{} ({})", r.kind, r.evidence)));
        v.push(("workers", r.workers.join(", ")));
        v.push(("behind the router", r.meaning.clone()));
        for (what, list) in [
            ("router's fan-out flush", &r.fanout_flush),
            ("ctxbench's flush of each worker", &r.worker_flush),
        ] {
            if !list.is_empty() {
                let verdicts: Vec<String> = list
                    .iter()
                    .map(|w| format!("{}: {}", w.worker, w.detail))
                    .collect();
                v.push((what, verdicts.join("; ")));
            }
        }
    }
    if let Some(c) = &s.flush_check {
        v.push(("flush before the sweep", c.clone()));
    }
    v.push((
        "speculative stats",
        s.spec_stats
            .clone()
            .unwrap_or_else(|| "not exposed".to_owned()),
    ));
    if s.cached_missing_means_zero {
        v.push(("missing cached_tokens", "means 0".to_owned()));
    }
    if !s.notes.is_empty() {
        v.push(("notes", s.notes.join("; ")));
    }
    v
}

/// The corpus as (name, value) rows.
pub fn corpus_items(c: &CorpusInfo) -> Vec<(&'static str, String)> {
    vec![
        ("corpus", c.label.clone()),
        (
            "tokens",
            format!(
                "{}{}",
                c.tokens,
                if c.wraps {
                    " (the largest prompts wrap around)"
                } else {
                    ""
                }
            ),
        ),
        ("tokenize requests", c.tokenize_requests.to_string()),
    ]
}

/// Why a point stopped, with its precision: `precision reached: 7 reps, 7 usable; median's
/// 95% CI TTFT ±3.1%, decode ±1.2%`.
pub fn stop_text(p: &PointRecord) -> String {
    let pct = |x: Option<f64>| x.map_or("–".to_owned(), |x| format!("±{:.1}%", x * 100.0));
    format!(
        "{}: {} {}, {} usable; median's 95% CI TTFT {}, decode {}{}",
        p.stop_reason,
        p.reps,
        if p.reps == 1 { "rep" } else { "reps" },
        p.usable,
        pct(p.ttft_ci_rel),
        pct(p.decode_ci_rel),
        quantile_text(p).map_or(String::new(), |t| format!("; the target: {t}"))
    )
}

/// What a percentile target reached at a point: `p90 95% interval (order statistics) TTFT
/// ±4.1%, step time ±2.0%`, or, below the samples it needs, `n/a (p90 needs n ≥ 29; 12
/// usable)`. `None` for a median target.
pub fn quantile_text(p: &PointRecord) -> Option<String> {
    let q = p.quantile?;
    let name = ctxbench_schema::record::quantile_name(q.q);
    let pct = |x: Option<f64>| match x {
        Some(x) => format!("±{:.1}%", x * 100.0),
        None if p.usable < q.needed => {
            format!("n/a ({name} needs n ≥ {}; {} usable)", q.needed, p.usable)
        }
        None => "n/a".to_owned(),
    };
    Some(format!(
        "{name} 95% interval (order statistics) TTFT {}, step time {}",
        pct(q.ttft_half_width),
        pct(q.step_half_width)
    ))
}

/// The per-point stop reasons worth showing: with `--precision`, or when any point did
/// not simply take its fixed repetitions.
pub fn shown_stops(run: &RunReport) -> &[PointRecord] {
    let adaptive = run.config.reps.precision.is_some()
        || run
            .stops
            .iter()
            .any(|p| p.stop_reason != StopReason::FixedReps);
    if adaptive {
        &run.stops
    } else {
        &[]
    }
}

/// What each kind in the "excluded" column means, for the kinds present.
pub fn exclusion_legend(points: &[PointSummary]) -> Option<String> {
    let mut v = Vec::new();
    let any = |f: fn(&PointSummary) -> usize| points.iter().any(|p| f(p) > 0);
    if any(|p| p.contaminated) {
        v.push("cached: the server reused a cached prefix, so not a cold prefill");
    }
    if any(|p| p.length_mismatch) {
        v.push("wrong length: the server counted a different prompt length than the target");
    }
    if any(|p| p.failed) {
        v.push("failed: the request failed (resume the sweep to retry)");
    }
    if any(|p| p.two_point_inverted) {
        v.push("t_B≤t_A: the two-point requests gave no time difference to divide by");
    }
    if any(|p| p.coalesced) {
        v.push("bursty: the tokens arrived in one burst (client descheduled, or a buffering proxy), so the TTFT is kept but no decode rate is computed");
    }
    if any(|p| p.foreign_load) {
        v.push("foreign load: another client's request ran on the server during the sample (taken again)");
    }
    if any(|p| p.held_back) {
        v.push("held back: the server released the whole stream at its end, so only the end-to-end time is known");
    }
    if any(|p| p.impossible) {
        v.push("impossible: the client saw a token before the server says it had made it (its own prompt or decode time, or token count, contradicts the client's), so the sample gives no figure");
    }
    (!v.is_empty()).then(|| format!("Excluded: {}.", v.join("; ")))
}

/// The six measured cells of a summary row, in the order every table shows them: TTFT,
/// prefill, decode, ms/step, server prompt ms, server decode; `spread` formats each.
pub fn metric_cells<T>(p: &PointSummary, spread: impl Fn(&Option<Spread>) -> T) -> [T; 6] {
    [
        spread(&p.ttft_ms),
        spread(&p.prefill_tokens_per_s),
        spread(&p.decode_tokens_per_s),
        spread(&p.ms_per_step),
        spread(&p.server_prompt_ms),
        spread(&p.server_decode_tokens_per_s),
    ]
}
