//! `vllm bench serve --save-result` JSON (single-turn: a `mode: multi_turn` file is refused;
//! `--save-detailed` adds per-request arrays). One file is one point; several files (one per `--random-input-len`) are several.
//! Aggregates are `{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`; the detailed arrays are in
//! seconds (`ttfts`, `latencies`, `itls`).

use ctxbench_schema::imported::{Audit, ImportedMetric, ImportedPoint};
use serde_json::Value;

use super::common::{self, field_err, percentile, quantile_of, ImportError, Request, SourceFile};
use super::findings::{Findings, VllmLengths};
use super::source::{assemble, Imported, Parts};

/// Reads every file as one `vllm bench` run each, all into one imported run.
pub fn import(files: &[SourceFile], ctxbench_version: &str) -> Result<Imported, ImportError> {
    let mut parts = Parts::new("vllm-bench", "vllm bench serve --save-result JSON");
    let mut all_detailed = true;
    let mut lengths = Vec::new();
    for f in files {
        let v = common::json(f)?;
        if v.get("mode").and_then(Value::as_str) == Some("multi_turn") {
            return Err(field_err(
                &f.name,
                &["mode"],
                "multi_turn: the Rust client vllm-rs's multi-turn result is not imported (no real file to read: vllm-rs is not in vLLM 0.32's wheel, and its sdist's crate needs git dependencies); vLLM's multi-turn benchmark script's --stats-json-output is (docs/interop.md)",
            ));
        }
        for key in ["mean_ttft_ms", "completed"] {
            if v.get(key).is_none() {
                return Err(field_err(
                    &f.name,
                    &[key],
                    "missing: not a vllm bench result?",
                ));
            }
        }
        parts.tool_version = parts.tool_version.or_else(|| str_of(&v, "vllm_version"));
        parts.model = parts.model.or_else(|| str_of(&v, "model_id"));
        parts.started_at = str_of(&v, "date").unwrap_or_default();
        let completed = common::need_f64(&f.name, &v, &["completed"])? as u64;
        let requests = detailed(&f.name, &v)?;
        all_detailed &= requests.is_some();
        let context = match &requests {
            Some(rs) => {
                let lens: Vec<u64> = rs.iter().filter_map(|r| r.prompt_tokens).collect();
                lengths.push(VllmLengths::PerRequest {
                    lo: lens.iter().min().copied().unwrap_or(0),
                    hi: lens.iter().max().copied().unwrap_or(0),
                });
                median_u64(&lens)
            }
            None => {
                let total = common::need_f64(&f.name, &v, &["total_input_tokens"])?;
                let mean = total / completed.max(1) as f64;
                lengths.push(VllmLengths::Mean(mean));
                mean.round() as u64
            }
        };
        if let Some(rs) = &requests {
            parts.push_requests(context, rs);
        }
        parts.output_tokens = (v
            .get("total_output_tokens")
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            / completed.max(1) as f64)
            .round() as u32;
        parts.points.push(ImportedPoint {
            context_tokens: context,
            concurrency: v
                .get("max_concurrency")
                .and_then(Value::as_u64)
                .map(|c| c as u32),
            requests: completed,
            name: Some(f.name.clone()),
            metrics: ["ttft", "tpot", "itl", "e2el"]
                .iter()
                .map(|m| metric(&v, m, completed))
                .collect(),
        });
    }
    parts.audit = Audit {
        cache_per_request: false,
        lengths_exact: false,
        warmup_separated: Some(true),
        per_request: all_detailed,
        ..Audit::default()
    };
    parts.findings = Findings::Vllm { lengths };
    Ok(assemble(parts, files, ctxbench_version))
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn median_u64(xs: &[u64]) -> u64 {
    let mut s = xs.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

/// One metric's aggregate: `mean_ttft_ms`, `median_ttft_ms`, `std_ttft_ms`, `p99_ttft_ms`.
fn metric(v: &Value, m: &str, n: u64) -> ImportedMetric {
    let suffix = format!("_{m}_ms");
    let mut out = ImportedMetric {
        name: match m {
            "ttft" => "ttft_ms",
            "tpot" => "tpot_ms",
            "itl" => "itl_ms",
            _ => "e2e_ms",
        }
        .into(),
        source: format!("*{suffix} [ms]"),
        count: Some(n),
        ..ImportedMetric::default()
    };
    let Some(obj) = v.as_object() else {
        return out;
    };
    for (k, x) in obj {
        let (Some(stat), Some(x)) = (k.strip_suffix(&suffix), x.as_f64()) else {
            continue;
        };
        match stat {
            "mean" => out.mean = Some(x),
            "std" => out.std = Some(x),
            "median" => out.percentiles.push(percentile(0.5, x, Some(n))),
            p => {
                if let Some(q) = quantile_of(p) {
                    if (q - 0.5).abs() > 1e-12 {
                        out.percentiles.push(percentile(q, x, Some(n)));
                    }
                }
            }
        }
    }
    out.percentiles.sort_by(|a, b| a.q.total_cmp(&b.q));
    out.percentiles.dedup_by(|a, b| (a.q - b.q).abs() < 1e-12);
    out
}

/// The `--save-detailed` arrays as requests (seconds → ms); `None` without them.
fn detailed(file: &str, v: &Value) -> Result<Option<Vec<Request>>, ImportError> {
    let Some(ttfts) = v.get("ttfts").and_then(Value::as_array) else {
        return Ok(None);
    };
    let arr = |k: &str| v.get(k).and_then(Value::as_array);
    let input = arr("input_lens")
        .ok_or_else(|| field_err(file, &["input_lens"], "missing beside ttfts"))?;
    if input.len() != ttfts.len() {
        return Err(field_err(
            file,
            &["input_lens"],
            &format!("{} entries, ttfts has {}", input.len(), ttfts.len()),
        ));
    }
    let errors = arr("errors");
    let out = ttfts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let failed = errors
                .and_then(|e| e.get(i))
                .and_then(Value::as_str)
                .is_some_and(|e| !e.is_empty());
            let itls: Vec<f64> = arr("itls")
                .and_then(|a| a.get(i))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            Request {
                prompt_tokens: input.get(i).and_then(Value::as_u64),
                output_tokens: arr("output_lens")
                    .and_then(|a| a.get(i))
                    .and_then(Value::as_u64),
                ttft_ms: t.as_f64().map(|s| s * 1000.0),
                itl_ms: (!itls.is_empty())
                    .then(|| itls.iter().sum::<f64>() / itls.len() as f64 * 1000.0),
                e2e_ms: arr("latencies")
                    .and_then(|a| a.get(i))
                    .and_then(Value::as_f64)
                    .map(|s| s * 1000.0),
                cached_tokens: None,
                at: None,
                failed,
            }
        })
        .collect();
    Ok(Some(out))
}
