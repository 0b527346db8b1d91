//! The audit of an imported file in words: what it proves, what it does not, and how many
//! samples stand behind each percentile. crates/stats finds the facts (`Findings`, the
//! audit's verdicts, `n` and `needed` per percentile); the words are written here, into the
//! run's header (the results file records them) and as the lines `ctxbench import` prints.

use ctxbench_schema::imported::{Audit, ImportSource, ImportedPercentile};
use ctxbench_stats::import::findings::{CacheHits, Findings, LengthRange, TurnFacts, VllmLengths};
use ctxbench_stats::import::source::Imported;

/// Writes the words of `imported`'s audit into its header: the cache, lengths and warmup
/// sentences, the notes, and each percentile's caveat.
pub fn word(imported: &mut Imported) {
    let findings = imported.findings.clone();
    let Some(src) = imported.header.imported.as_deref_mut() else {
        return;
    };
    audit_words(&findings, &mut src.audit);
    for q in src
        .points
        .iter_mut()
        .flat_map(|p| p.metrics.iter_mut())
        .flat_map(|m| m.percentiles.iter_mut())
    {
        q.caveat = caveat(q);
    }
}

/// What a percentile is when the samples behind it fall short of a distribution-free 95%
/// interval: the slowest (or fastest) request, or a figure with no interval.
pub fn caveat(p: &ImportedPercentile) -> Option<String> {
    let (name, needed) = (&p.name, p.needed);
    match p.n {
        None => Some(format!(
            "samples behind it not stated (a {name} needs n ≥ {needed} for a 95% interval)"
        )),
        Some(n) if n < needed => {
            let upper = p.q >= 0.5;
            let tail = if upper { 1.0 - p.q } else { p.q };
            let what = match (n as f64 * tail < 1.0, upper) {
                (true, true) => "the slowest request",
                (true, false) => "the fastest request",
                (false, _) => "no interval",
            };
            Some(format!(
                "{what} (n = {n}; a {name} needs n ≥ {needed} for a 95% interval)"
            ))
        }
        Some(_) => None,
    }
}

/// `2 of 20 requests read from the prefix cache (cached/prompt tokens: 127/128 ×2); …`.
fn hits_words(h: &CacheHits) -> String {
    let detail = if h.kinds.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = h
            .kinds
            .iter()
            .map(|(c, p, n)| format!("{c}/{p} ×{n}"))
            .collect();
        format!(" (cached/prompt tokens: {})", list.join(", "))
    };
    format!(
        "{} of {} requests read from the prefix cache{detail}; they are not cold prefills of their length and are left out",
        h.hits(),
        h.known
    )
}

/// `128–131 tokens (mean 129)` per point, `; `-joined (`unit` after the range, or none).
fn ranges(lengths: &[LengthRange], unit: &str) -> String {
    lengths
        .iter()
        .map(|r| format!("{}–{}{unit} (mean {})", r.min, r.max, r.mean))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The audit's sentences for what `f` found.
fn audit_words(f: &Findings, a: &mut Audit) {
    match f {
        Findings::Vllm { lengths } => vllm(lengths, a),
        Findings::VllmMultiTurn {
            conversations,
            turns,
        } => vllm_multi_turn(*conversations, turns, a),
        Findings::Aiperf {
            per_request,
            cache_known: (known, total),
            hits,
            lengths,
            warmup_left,
        } => {
            a.cache = if a.cache_per_request {
                format!(
                    "usage_prompt_cache_read_tokens per request (the server's usage): {}",
                    hits_words(hits)
                )
            } else if *per_request {
                format!("the server's cached-token count is in {known} of {total} requests only")
            } else {
                "without profile_export.jsonl only an average of usage_prompt_cache_read_tokens: no per-request proof".into()
            };
            a.lengths = format!(
                "{}; per request the server's usage_prompt_tokens where recorded, else AIPerf's tokenizer{}",
                ranges(lengths, " tokens"),
                if *per_request { "" } else { " (no profile_export.jsonl: a distribution only)" }
            );
            a.warmup = if *per_request {
                format!("{warmup_left} warmup request(s) in profile_export.jsonl (benchmark_phase warmup), left out")
            } else {
                "warmup requests are kept out of the profiling metrics by AIPerf (warmup_metrics)"
                    .into()
            };
            a.notes = vec![
                "units normalised from each block's `unit` (ms, sec, ns); std is AIPerf's `std`; AIPerf's percentiles stop at p99".into(),
            ];
        }
        Findings::Guidellm {
            cached_seen,
            hits,
            lengths,
            first_measured,
            warmup_left,
        } => {
            a.cache = if *cached_seen {
                format!(
                    "cached_tokens per request (the server's usage): {}",
                    hits_words(hits)
                )
            } else {
                "no cached-token count per request in this file: a prefix-cache hit cannot be told from a cold prefill".into()
            };
            a.lengths = format!("{}; per request the server's usage (prompt_tokens: a chat request counts the chat template's tokens too)", ranges(lengths, ""));
            let first = match first_measured {
                Some(true) => "measured from measure_start_time (GuideLLM's warmup ends there)",
                Some(false) => "not stated",
                None => "",
            };
            a.warmup = format!("{first}; {warmup_left} request(s) sent before it left out");
            a.notes = vec![
                "percentile names normalised: p001 → p0.1, p01 → p1, p999 → p99.9; std_dev → std; request_latency s → ms".into(),
                "GuideLLM may keep only a sample of the requests (--sample-requests): then the samples are fewer than the aggregates' count".into(),
            ];
        }
        Findings::InferencePerf { hits, lengths, .. } => {
            a.cache = if a.cache_per_request {
                format!(
                    "the server's usage.prompt_tokens_details.cached_tokens per request (per_request_lifecycle_metrics.json): {}",
                    hits_words(hits)
                )
            } else {
                "no per-request cached-token count (per_request_lifecycle_metrics.json absent or without the server's usage)".into()
            };
            a.lengths = format!(
                "{}; per request the server's usage.prompt_tokens",
                ranges(lengths, "")
            );
            a.warmup =
                "inference-perf has no warmup phase: every request of the stage is measured".into();
            a.notes = vec![
                "latencies normalised from seconds to ms; `median` read as p50, `p0.1`/`p99.9` kept".into(),
                "per-request TTFT is not in per_request_lifecycle_metrics.json: the TTFT figures are the summary's".into(),
            ];
        }
    }
}

/// `vllm bench`'s sentences.
fn vllm(lengths: &[VllmLengths], a: &mut Audit) {
    a.cache = "vllm bench records no cached-token count per request (nor warns of a warm cache): a request served from the prefix cache cannot be told from a cold one".into();
    let words: Vec<String> = lengths
        .iter()
        .map(|l| match l {
            VllmLengths::PerRequest { lo, hi } => format!("{lo}–{hi} tokens per request"),
            VllmLengths::Mean(m) => format!("mean {m:.0} tokens (total_input_tokens / completed; no per-request lengths without --save-detailed)"),
        })
        .collect();
    let all_detailed = lengths
        .iter()
        .all(|l| matches!(l, VllmLengths::PerRequest { .. }));
    a.lengths = format!(
        "{}; counted by the client's tokenizer, not the server ({})",
        words.join("; "),
        if all_detailed {
            "input_lens"
        } else {
            "total_input_tokens"
        }
    );
    a.warmup = "--num-warmups requests are sent before the run and left out of the file (how many is not recorded)".into();
    a.notes = vec![
        "latencies normalised to ms: the aggregates are *_ms, the detailed arrays (ttfts, itls, latencies) are seconds".into(),
        "percentile names normalised: p99 (vLLM p99_ttft_ms), p99.9 (p99.9_ttft_ms)".into(),
        "std is vLLM's population std (numpy)".into(),
    ];
}

/// The sentences for vLLM's multi-turn benchmark: a later turn re-sends the earlier ones.
fn vllm_multi_turn(conversations: usize, turns: &[TurnFacts], a: &mut Audit) {
    let later: Vec<String> = turns
        .iter()
        .filter(|t| t.turn > 0)
        .map(|t| {
            let (lo, hi) = t.approx_cached_percent;
            if (hi - lo).abs() < 0.5 {
                format!("turn {} {lo:.0}%", t.turn)
            } else {
                format!("turn {} {lo:.0}–{hi:.0}%", t.turn)
            }
        })
        .collect();
    a.cache = format!(
        "no cached-token count from the server: approx_cached_percent is the client's share of the prompt the earlier turns already sent ({}), not a cache reading; turn 0 is cache-unverified, every later turn re-sends the earlier ones and is a suspected prefix-cache hit (its TTFT a warm figure, left out of cold summaries)",
        if later.is_empty() { "no later turn".to_owned() } else { later.join(", ") }
    );
    let per_turn: Vec<String> = turns
        .iter()
        .map(|t| {
            let (lo, hi) = (t.lengths.min, t.lengths.max);
            let range = if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo}–{hi}")
            };
            format!("turn {}: {range} tokens (n = {})", t.turn, t.requests)
        })
        .collect();
    a.lengths = format!(
        "{}; input_num_tokens is the client's tokenizer over the messages' text (no chat template), not the server's count",
        per_turn.join("; ")
    );
    a.warmup = "the file does not say whether --warmup-step ran (its warmup requests are not written to it)".into();
    a.notes = vec![
        format!("{conversations} conversation(s); each request is a sample with its conversation and turn (sample.turn); the points are the turns"),
        "the file has no aggregates: each turn's TTFT mean, range and median are computed by ctxbench import from the requests".into(),
        "ttft_ms is the tool's: time to the first chunk, less (tokens in it − 1) × tpot_ms when a chunk carried several tokens".into(),
        "no tool version, model or URL in the file; failed requests are not written to it, and a request retried (--max-retries) appears once, with no mark".into(),
    ];
}

/// The audit's lines, as `ctxbench import` prints them.
pub fn lines(src: &ImportSource) -> Vec<String> {
    let a = &src.audit;
    let mut out = vec![format!(
        "{} {} ({}){}: {}",
        src.tool,
        src.tool_version
            .as_deref()
            .unwrap_or("(version not stated)"),
        src.format,
        src.engine
            .as_deref()
            .map(|e| format!(", engine {e}"))
            .unwrap_or_default(),
        src.files.join(", ")
    )];
    let yes_no = |b: bool| if b { "yes" } else { "NO" };
    out.push(format!(
        "  cache state per request known: {} — {}",
        yes_no(a.cache_per_request),
        a.cache
    ));
    out.push(format!(
        "  prompt lengths exact: {} — {}",
        yes_no(a.lengths_exact),
        a.lengths
    ));
    out.push(format!(
        "  warmup separated: {} — {}",
        match a.warmup_separated {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "not stated",
        },
        a.warmup
    ));
    out.push(format!(
        "  per-request records: {}",
        if a.per_request {
            "read (one sample each)"
        } else {
            "none: only the tool's aggregates"
        }
    ));
    for p in &src.points {
        out.push(format!(
            "  point {} tokens{}{}: {} requests",
            p.context_tokens,
            p.concurrency
                .map(|c| format!(", concurrency {c}"))
                .unwrap_or_default(),
            p.name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            p.requests
        ));
        for m in p.metrics.iter().filter(|m| m.name == "ttft_ms") {
            for q in &m.percentiles {
                let n = q.n.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
                let what = q.caveat.as_deref().unwrap_or("enough for a 95% interval");
                out.push(format!(
                    "    TTFT {} {:.2} ms from n = {n}: {what}",
                    q.name, q.value
                ));
            }
        }
    }
    out.extend(a.notes.iter().map(|n| format!("  note: {n}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_stats::import::common::percentile;

    #[test]
    fn a_p99_from_twenty_requests_is_the_slowest() {
        let said = |q: f64, n: Option<u64>| caveat(&percentile(q, 12.0, n));
        assert!(said(0.99, Some(20))
            .unwrap()
            .starts_with("the slowest request (n = 20; a p99 needs n ≥ 299"));
        assert!(said(0.01, Some(20))
            .unwrap()
            .starts_with("the fastest request (n = 20"));
        assert!(said(0.90, Some(20))
            .unwrap()
            .starts_with("no interval (n = 20"));
        assert_eq!(said(0.90, Some(40)), None);
        assert!(said(0.5, None)
            .unwrap()
            .starts_with("samples behind it not stated"));
    }

    #[test]
    fn cache_hits_are_counted_by_their_cached_and_prompt_tokens() {
        let h = CacheHits {
            known: 20,
            kinds: vec![(127, 128, 2)],
        };
        assert_eq!(
            hits_words(&h),
            "2 of 20 requests read from the prefix cache (cached/prompt tokens: 127/128 ×2); they are not cold prefills of their length and are left out"
        );
    }
}
