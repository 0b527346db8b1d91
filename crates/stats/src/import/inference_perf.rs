//! inference-perf's request-lifecycle reports: `summary_lifecycle_metrics.json` (or a
//! `stage_N_lifecycle_metrics.json`: `successes.latency.{time_to_first_token, …}` in seconds,
//! `successes.prompt_tokens`, percentiles `median`, `p0.1` … `p99.9`), with
//! `per_request_lifecycle_metrics.json` where `report.request_lifecycle.per_request` was on
//! (each request's `start_time`, `end_time`, and the server's usage in
//! `info.response_metrics.server_usage`). One summary is one point.

use ctxbench_schema::imported::{Audit, ImportedMetric, ImportedPoint};
use serde_json::Value;

use super::common::{self, at, field_err, metric_from_object, ImportError, Request, SourceFile};
use super::findings::{CacheHits, Findings, LengthRange};
use super::source::{assemble, Imported, Parts};

/// inference-perf's latency metrics (seconds) and ctxbench's names.
const LATENCIES: &[(&str, &str)] = &[
    ("time_to_first_token", "ttft_ms"),
    ("inter_token_latency", "itl_ms"),
    ("time_per_output_token", "tpot_ms"),
    ("request_latency", "e2e_ms"),
];

/// Reads each summary (with the per-request file given right after it).
pub fn import(files: &[SourceFile], ctxbench_version: &str) -> Result<Imported, ImportError> {
    let mut parts = Parts::new(
        "inference-perf",
        "request-lifecycle report (summary / stage)",
    );
    let (mut per_request, mut cached_all, mut lengths) = (true, true, Vec::new());
    for (f, per) in common::paired(files, |n| n.ends_with("per_request_lifecycle_metrics.json")) {
        let v = common::json(f)?;
        let s = v.get("successes").ok_or_else(|| {
            field_err(
                &f.name,
                &["successes"],
                "missing: not an inference-perf report?",
            )
        })?;
        let count = s.get("count").and_then(Value::as_u64);
        let mut metrics: Vec<ImportedMetric> = LATENCIES
            .iter()
            .filter_map(|(tag, name)| {
                let d = at(s, &["latency", tag])?;
                let mut m = metric_from_object(
                    name,
                    format!("successes.latency.{tag} [s]"),
                    d,
                    1000.0,
                    count,
                );
                // inference-perf names its median `median`, not p50.
                if let Some(x) = d.get("median").and_then(Value::as_f64) {
                    if !m.percentiles.iter().any(|p| (p.q - 0.5).abs() < 1e-12) {
                        m.percentiles
                            .push(common::percentile(0.5, x * 1000.0, count));
                        m.percentiles.sort_by(|a, b| a.q.total_cmp(&b.q));
                    }
                }
                Some(m)
            })
            .collect();
        if !metrics.iter().any(|m| m.name == "ttft_ms") {
            return Err(field_err(
                &f.name,
                &["successes", "latency", "time_to_first_token"],
                "missing (was api.streaming on?)",
            ));
        }
        let prompt = s.get("prompt_tokens").filter(|p| p.is_object());
        let context = prompt
            .and_then(|p| p.get("mean"))
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            .round() as u64;
        if let Some(p) = prompt {
            let m = metric_from_object(
                "prompt_tokens",
                "successes.prompt_tokens".into(),
                p,
                1.0,
                count,
            );
            lengths.push(LengthRange::of(&m, context));
            metrics.push(m);
        }
        match per {
            Some(pf) => {
                let reqs = requests(pf)?;
                cached_all &= reqs.iter().all(|r| r.failed || r.cached_tokens.is_some());
                parts.push_requests(context, &reqs);
            }
            None => per_request = false,
        }
        parts.points.push(ImportedPoint {
            context_tokens: context,
            concurrency: None,
            requests: count.unwrap_or(0),
            name: Some(f.name.clone()),
            metrics,
        });
    }
    let cache_known = per_request && cached_all && !parts.samples.is_empty();
    parts.audit = Audit {
        cache_per_request: cache_known,
        lengths_exact: per_request,
        warmup_separated: None,
        per_request,
        ..Audit::default()
    };
    parts.findings = Findings::InferencePerf {
        cache_known,
        hits: CacheHits::of(&parts.samples),
        lengths,
    };
    Ok(assemble(parts, files, ctxbench_version))
}

/// The per-request records: the server's usage, start to end, failures.
fn requests(f: &SourceFile) -> Result<Vec<Request>, ImportError> {
    let v = common::json(f)?;
    let list = v
        .as_array()
        .ok_or_else(|| field_err(&f.name, &["(root)"], "not a list of requests"))?;
    Ok(list
        .iter()
        .map(|r| {
            let usage = at(r, &["info", "response_metrics", "server_usage"]);
            let span = match (
                r.get("start_time").and_then(Value::as_f64),
                r.get("end_time").and_then(Value::as_f64),
            ) {
                (Some(a), Some(b)) if b >= a => Some((b - a) * 1000.0),
                _ => None,
            };
            Request {
                prompt_tokens: usage
                    .and_then(|u| u.get("prompt_tokens"))
                    .and_then(Value::as_u64)
                    .or_else(|| {
                        at(r, &["info", "request_metrics", "text", "input_tokens"])
                            .and_then(Value::as_u64)
                    }),
                output_tokens: usage
                    .and_then(|u| u.get("completion_tokens"))
                    .and_then(Value::as_u64),
                ttft_ms: None,
                itl_ms: None,
                e2e_ms: span,
                cached_tokens: usage
                    .and_then(|u| at(u, &["prompt_tokens_details", "cached_tokens"]))
                    .and_then(Value::as_u64),
                at: None,
                failed: r.get("error").is_some_and(|e| !e.is_null()),
            }
        })
        .collect())
}
