//! llm-d Benchmark Report v0.2.1 documents (`report --format llmd-br`): one per measured
//! point (context × concurrency), since a document holds one stage, all sharing `run.eid`
//! (the run's id). Built from the results file, not the report model: the schema's
//! `Statistics` want means and percentiles the model does not keep.
//!
//! Latencies are in seconds. p90/p95/p99 are given only where ctxbench's order-statistic
//! interval exists (`stats::tail`); ctxbench's own facts (cold proof, exact length,
//! exclusions, the intervals, the fits) go under `results.profiling.ctxbench`, the one
//! place in `results` whose schema admits any content.

use ctxbench_schema::record::{Phase, Results, Sample};
use ctxbench_stats::stats::tail::{Tails, LEVELS};
use ctxbench_stats::stats::{quantile, summarize};
use serde_json::{json, Map, Value};

/// The schema version the documents claim.
pub const VERSION: &str = "0.2.1";

/// The llm-d `Statistics` object of values in `units`, scaled by `scale`: mean, stddev,
/// min, max, p25/p50/p75, and the tails whose interval exists. `None` for no values.
pub fn statistics(values: &[f64], units: &str, scale: f64) -> Option<Value> {
    let mut v: Vec<f64> = values
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| x * scale)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let mut m = Map::new();
    m.insert("units".into(), json!(units));
    m.insert("mean".into(), json!(mean));
    if v.len() > 1 {
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        m.insert("stddev".into(), json!(var.sqrt()));
    }
    m.insert("min".into(), json!(v[0]));
    for (name, q) in [("p25", 0.25), ("p50", 0.5), ("p75", 0.75)] {
        m.insert(name.into(), json!(quantile(&v, q)));
    }
    if let Some(t) = Tails::of(v.iter().copied()) {
        for l in t.levels.iter().filter(|l| l.value.is_some()) {
            m.insert(l.name.into(), json!(l.value));
        }
    }
    m.insert("max".into(), json!(v[v.len() - 1]));
    Some(Value::Object(m))
}

/// Every document of one results file, in context then concurrency order.
pub fn documents(results: &Results, path: &str) -> Vec<Value> {
    let h = &results.header;
    let run = ctxbench_stats::report::build_run(&h.run_id, path, results);
    let mut cells: Vec<(u64, u32)> = results
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Cold)
        .map(|s| (s.context_tokens, s.concurrency.unwrap_or(1)))
        .collect();
    cells.sort_unstable();
    cells.dedup();
    cells
        .iter()
        .enumerate()
        .map(|(stage, &(ctx, c))| {
            let at: Vec<Sample> = results
                .samples
                .iter()
                .filter(|s| s.phase == Phase::Cold)
                .filter(|s| s.context_tokens == ctx && s.concurrency.unwrap_or(1) == c)
                .cloned()
                .collect();
            document(results, path, &run, stage, (ctx, c), &at)
        })
        .collect()
}

/// The document of one point.
fn document(
    results: &Results,
    path: &str,
    run: &ctxbench_stats::report::RunReport,
    stage: usize,
    (ctx, c): (u64, u32),
    at: &[Sample],
) -> Value {
    let h = &results.header;
    let point = summarize(at).into_iter().next().unwrap_or_default();
    // The samples the report's table uses: usable, and not caught by the cache-hit rule.
    let suspects = ctxbench_stats::stats::cachehit::suspects(at);
    let ok: Vec<&Sample> = at
        .iter()
        .enumerate()
        .filter(|(i, s)| s.usable() && !suspects.contains(i))
        .map(|(_, s)| s)
        .collect();
    let verified = ok.iter().filter(|s| s.cache_verified).count();
    let vals = |f: fn(&Sample) -> Option<f64>| ok.iter().filter_map(|s| f(s)).collect::<Vec<_>>();
    let mut latency = Map::new();
    let put = |m: &mut Map<String, Value>, k: &str, s: Option<Value>| {
        if let Some(s) = s {
            m.insert(k.into(), s);
        }
    };
    put(
        &mut latency,
        "time_to_first_token",
        statistics(&vals(|s| s.ttft_ms), "s", 1e-3),
    );
    put(
        &mut latency,
        "time_per_output_token",
        statistics(&vals(|s| s.ms_per_step), "s/token", 1e-3),
    );
    put(
        &mut latency,
        "request_latency",
        statistics(&vals(|s| s.e2e_ms), "s", 1e-3),
    );
    let mut requests = Map::new();
    requests.insert("total".into(), json!(point.samples));
    requests.insert("failures".into(), json!(point.failed));
    put(
        &mut requests,
        "input_length",
        statistics(&vals(|s| s.prompt_tokens.map(|t| t as f64)), "count", 1.0),
    );
    put(
        &mut requests,
        "output_length",
        statistics(&vals(|s| s.output_tokens.map(|t| t as f64)), "count", 1.0),
    );
    let times: Vec<&str> = at.iter().map(|s| s.at.as_str()).collect();
    let synthetic = h.corpus.label.contains("synthetic");
    json!({
        "version": VERSION,
        "run": {
            "uid": format!("{}-{}-c{}", h.run_id, ctx, c),
            "eid": h.run_id,
            "description": format!("ctxbench {} context tokens × concurrency {}", ctx, c),
            "keywords": ["ctxbench", "cold-prefill"],
            "time": {
                "start": times.iter().min(),
                "end": times.iter().max(),
            },
        },
        "scenario": {
            "load": {
                "metadata": { "description": h.label },
                "standardized": {
                    "tool": "ctxbench",
                    "tool_version": run.ctxbench_version,
                    "source": if synthetic { "random" } else { "sampled" },
                    "stage": stage,
                    "input_seq_len": { "distribution": "fixed", "value": ctx },
                    "output_seq_len": { "distribution": "fixed", "value": h.config.output_tokens },
                    "concurrency": c,
                },
                "native": { "config": h.config },
            },
        },
        "results": {
            "request_performance": {
                "aggregate": { "requests": requests, "latency": latency },
            },
            "profiling": { "ctxbench": facts(path, run, &point, verified, (ctx, c)) },
        },
    })
}

/// What ctxbench knows of a point that the schema has no field for.
fn facts(
    path: &str,
    run: &ctxbench_stats::report::RunReport,
    p: &ctxbench_stats::stats::PointSummary,
    verified: usize,
    (ctx, c): (u64, u32),
) -> Value {
    json!({
        "results_file": path,
        "context_tokens": ctx,
        "concurrency": c,
        "samples": p.samples,
        "usable": p.usable,
        "cold_proof": {
            "note": "a sample is cold when the server reported 0 cached prompt tokens for it; the latency statistics use only usable samples (ok, cold, exact length)",
            "usable_with_a_cached_token_count": verified,
            "usable_without_a_cached_token_count": p.usable.saturating_sub(verified),
            "cache_hits_excluded": p.contaminated,
            "suspected_cache_hits_excluded": p.suspected_cache_hit,
        },
        "exact_length": {
            "length_mismatch_excluded": p.length_mismatch,
            "length_tolerance_tokens": run.config.length_tolerance,
        },
        "exclusions": p.exclusions(),
        "tails": { "time_to_first_token_ms": p.ttft_tails, "time_per_output_token_ms": p.step_tails },
        "tail_levels": LEVELS.iter().map(|l| l.1).collect::<Vec<_>>(),
        "fits": { "ttft_ms": run.ttft_fit, "ms_per_step": run.step_fit },
        "warnings": run.warnings.iter().map(|w| &w.message).collect::<Vec<_>>(),
        "server": run.server,
    })
}

/// The llm-d format as a [`crate::format::Renderer`]: it needs the results files, not the report
/// model, so `ctxbench report` calls [`documents`] itself and this only refuses.
pub struct LlmdRenderer;

impl crate::format::Renderer for LlmdRenderer {
    fn report(
        &self,
        _: &ctxbench_stats::report::Report,
    ) -> Result<String, crate::format::RenderError> {
        Err(crate::format::RenderError::Unsupported(
            "llmd-br is written from the results files (ctxbench report RUN.jsonl --format llmd-br)".into(),
        ))
    }
    fn compare(
        &self,
        _: &ctxbench_stats::compare::Comparison,
    ) -> Result<String, crate::format::RenderError> {
        Err(crate::format::RenderError::Unsupported(
            "--format llmd-br: a comparison has no llm-d Benchmark Report form; use it with ctxbench report".into(),
        ))
    }
}
