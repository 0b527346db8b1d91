//! GuideLLM's `benchmarks.json` (report `metadata.version` 2): one point per benchmark, each
//! metric split `{successful, errored, incomplete, total}` into a `DistributionSummary`
//! (`mean`, `median`, `std_dev`, `min`, `max`, `count`, `percentiles{p001 … p999}`), and the
//! benchmark's requests (`requests.successful[]`, which GuideLLM may sample).

use ctxbench_schema::imported::{Audit, ImportedMetric, ImportedPoint};
use serde_json::Value;

use super::common::{self, at, field_err, metric_from_object, ImportError, Request, SourceFile};
use super::findings::{CacheHits, Findings, LengthRange};
use super::source::{assemble, Imported, Parts};

/// GuideLLM's metrics and ctxbench's names for them (all in ms, or tokens).
const METRICS: &[(&str, &str)] = &[
    ("time_to_first_token_ms", "ttft_ms"),
    ("inter_token_latency_ms", "itl_ms"),
    ("time_per_output_token_ms", "tpot_ms"),
    ("request_latency", "e2e_ms"),
    ("prompt_token_count", "prompt_tokens"),
    ("output_token_count", "output_tokens"),
];

/// Reads each `benchmarks.json` into one imported run.
pub fn import(files: &[SourceFile], ctxbench_version: &str) -> Result<Imported, ImportError> {
    let mut parts = Parts::new("guidellm", "benchmarks.json v2");
    let (mut cached_seen, mut all_requests) = (false, true);
    let (mut lengths, mut measured) = (Vec::new(), Vec::new());
    let mut warm_left = 0usize;
    for f in files {
        let v = common::json(f)?;
        version_2(f, &v)?;
        parts.tool_version = at(&v, &["metadata", "guidellm_version"])
            .and_then(Value::as_str)
            .map(str::to_owned);
        let benches = v
            .get("benchmarks")
            .and_then(Value::as_array)
            .ok_or_else(|| field_err(&f.name, &["benchmarks"], "missing or not a list"))?;
        for (bi, b) in benches.iter().enumerate() {
            let path = format!("benchmarks[{bi}]");
            let metrics = benchmark_metrics(f, b, &path)?;
            let context = common::mean_of(&metrics, "prompt_tokens");
            if let Some(m) = metrics.iter().find(|m| m.name == "prompt_tokens") {
                lengths.push(LengthRange::of(m, context));
            }
            parts.output_tokens = common::mean_of(&metrics, "output_tokens") as u32;
            match measured_requests(b) {
                Some((kept, warm)) => {
                    warm_left += warm;
                    let reqs: Vec<Request> = kept.into_iter().map(request).collect();
                    cached_seen |= reqs.iter().any(|r| r.cached_tokens.is_some());
                    parts.push_requests(context, &reqs);
                }
                None => all_requests = false,
            }
            let sm = b.get("scheduler_metrics");
            measured.push(sm.and_then(|s| s.get("measure_start_time")).is_some());
            let requests = metrics
                .iter()
                .find(|m| m.name == "ttft_ms")
                .and_then(|m| m.count)
                .unwrap_or(0);
            parts.started_at = sm
                .and_then(|s| s.get("start_time"))
                .and_then(Value::as_f64)
                .map(|t| format!("{t} (unix seconds)"))
                .unwrap_or_default();
            parts.url = at(b, &["config", "backend", "target"])
                .or_else(|| at(&v, &["config", "target"]))
                .or_else(|| at(&v, &["args", "target"]))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            parts.points.push(ImportedPoint {
                context_tokens: context,
                concurrency: at(b, &["config", "strategy", "streams"])
                    .and_then(Value::as_u64)
                    .map(|c| c as u32),
                requests,
                name: at(b, &["config", "strategy", "type_"])
                    .and_then(Value::as_str)
                    .map(|s| format!("{} {s}", f.name)),
                metrics,
            });
        }
    }
    parts.audit = Audit {
        cache_per_request: cached_seen,
        lengths_exact: all_requests,
        warmup_separated: Some(measured.iter().any(|m| *m)),
        per_request: all_requests,
        ..Audit::default()
    };
    parts.findings = Findings::Guidellm {
        cached_seen,
        hits: CacheHits::of(&parts.samples),
        lengths,
        first_measured: measured.first().copied(),
        warmup_left: warm_left,
    };
    Ok(assemble(parts, files, ctxbench_version))
}

/// The file's `metadata.version` is 2, the only one read.
fn version_2(f: &SourceFile, v: &Value) -> Result<(), ImportError> {
    let version = at(v, &["metadata", "version"]).and_then(Value::as_u64);
    if version == Some(2) {
        return Ok(());
    }
    Err(ImportError::Version {
        file: f.name.clone(),
        field: "metadata.version".into(),
        found: version
            .map(|x| x.to_string())
            .unwrap_or_else(|| "missing".into()),
        known: "2".into(),
    })
}

/// One benchmark's metrics (its successful requests), normalised; TTFT must be there.
fn benchmark_metrics(
    f: &SourceFile,
    b: &Value,
    path: &str,
) -> Result<Vec<ImportedMetric>, ImportError> {
    let metrics = METRICS
        .iter()
        .filter_map(|(tag, name)| {
            let d = at(b, &["metrics", tag, "successful"])?;
            // request_latency is in seconds (its name has no _ms).
            let scale = if *tag == "request_latency" {
                1000.0
            } else {
                1.0
            };
            let count = d.get("count").and_then(Value::as_u64);
            Some(metric_from_object(
                name,
                format!("{tag}.successful"),
                d,
                scale,
                count,
            ))
        })
        .collect::<Vec<ImportedMetric>>();
    if !metrics.iter().any(|m| m.name == "ttft_ms") {
        return Err(field_err(
            &f.name,
            &[path, "metrics", "time_to_first_token_ms", "successful"],
            "missing",
        ));
    }
    Ok(metrics)
}

/// The successful requests sent inside the measured window, and how many were sent before it
/// (GuideLLM's warmup: kept in its list, left out of its metrics and of the samples here);
/// `None` when the file lists no request.
fn measured_requests(b: &Value) -> Option<(Vec<&Value>, usize)> {
    let rs = at(b, &["requests", "successful"]).and_then(Value::as_array)?;
    if rs.is_empty() {
        return None;
    }
    let start = at(b, &["scheduler_metrics", "measure_start_time"]).and_then(Value::as_f64);
    let end = at(b, &["scheduler_metrics", "measure_end_time"]).and_then(Value::as_f64);
    let kept: Vec<&Value> = rs
        .iter()
        .filter(|r| {
            let t = r.get("request_start_time").and_then(Value::as_f64);
            match (t, start, end) {
                (Some(t), Some(s), Some(e)) => t >= s && t <= e,
                (Some(t), Some(s), None) => t >= s,
                _ => true,
            }
        })
        .collect();
    let warm = rs.len() - kept.len();
    Some((kept, warm))
}

/// One of `requests.successful[]`.
fn request(r: &Value) -> Request {
    let f = |k: &str| r.get(k).and_then(Value::as_f64);
    let u = |k: &str| r.get(k).and_then(Value::as_u64);
    Request {
        prompt_tokens: u("prompt_tokens")
            .or_else(|| at(r, &["input_metrics", "text_tokens"]).and_then(Value::as_u64)),
        output_tokens: u("output_tokens")
            .or_else(|| at(r, &["output_metrics", "text_tokens"]).and_then(Value::as_u64)),
        ttft_ms: f("time_to_first_token_ms"),
        itl_ms: f("inter_token_latency_ms"),
        e2e_ms: f("request_latency").map(|s| s * 1000.0),
        cached_tokens: u("cached_tokens")
            .or_else(|| at(r, &["input_metrics", "cached_tokens"]).and_then(Value::as_u64)),
        at: None,
        failed: false,
    }
}
