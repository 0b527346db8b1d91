//! inference-perf's request-lifecycle reports: `summary_lifecycle_metrics.json` (or a
//! `stage_N_lifecycle_metrics.json`: `successes.latency.{time_to_first_token, …}` in seconds,
//! `successes.prompt_tokens`, percentiles `median`, `p0.1` … `p99.9`), with
//! `per_request_lifecycle_metrics.json` where `report.request_lifecycle.per_request` was on
//! (each request's `start_time`, `end_time`, and the server's usage in
//! `info.response_metrics.server_usage`). One summary is one point.

use ctxbench_schema::imported::{Audit, ImportedMetric, ImportedPoint};
use serde_json::Value;

use super::common::{
    self, at, field_err, metric_from_object, sample_of, ImportError, Request, SourceFile,
};
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
    let mut parts = Parts {
        tool: "inference-perf".into(),
        format: "request-lifecycle report (summary / stage)".into(),
        ..Parts::default()
    };
    let (mut per_request, mut cached_all, mut lens) = (true, true, Vec::new());
    let mut i = 0;
    while i < files.len() {
        let f = &files[i];
        let per = files
            .get(i + 1)
            .filter(|n| n.name.ends_with("per_request_lifecycle_metrics.json"));
        i += 1 + usize::from(per.is_some());
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
            metrics.push(metric_from_object(
                "prompt_tokens",
                "successes.prompt_tokens".into(),
                p,
                1.0,
                count,
            ));
            lens.push(format!(
                "{}–{} (mean {context})",
                p.get("min").and_then(Value::as_f64).unwrap_or(0.0),
                p.get("max").and_then(Value::as_f64).unwrap_or(0.0)
            ));
        }
        match per {
            Some(pf) => {
                let reqs = requests(pf)?;
                cached_all &= reqs.iter().all(|r| r.failed || r.cached_tokens.is_some());
                for (k, r) in reqs.iter().enumerate() {
                    parts
                        .samples
                        .push(sample_of("", context, k as u32, r, false));
                }
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
        cache: if cache_known {
            format!(
                "the server's usage.prompt_tokens_details.cached_tokens per request (per_request_lifecycle_metrics.json): {}",
                common::cache_hits(&parts.samples)
            )
        } else {
            "no per-request cached-token count (per_request_lifecycle_metrics.json absent or without the server's usage)".into()
        },
        lengths_exact: per_request,
        lengths: format!("{}; per request the server's usage.prompt_tokens", lens.join("; ")),
        warmup_separated: None,
        warmup: "inference-perf has no warmup phase: every request of the stage is measured".into(),
        per_request,
        notes: vec![
            "latencies normalised from seconds to ms; `median` read as p50, `p0.1`/`p99.9` kept".into(),
            "per-request TTFT is not in per_request_lifecycle_metrics.json: the TTFT figures are the summary's".into(),
        ],
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
