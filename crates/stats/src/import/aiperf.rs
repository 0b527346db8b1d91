//! AIPerf's `profile_export_aiperf.json` (schema 1.x: one block per metric tag, each with
//! `unit`, `avg`, `min`, `max`, `p1`…`p99`, `std`, `count`) and, where the binary found it
//! beside it, the per-request `profile_export.jsonl` (`metadata.benchmark_phase`,
//! `metrics.{tag}: {value, unit}`). One export is one point.

use ctxbench_schema::imported::{Audit, ImportedPoint};
use ctxbench_schema::record::Sample;
use serde_json::Value;

use super::common::{
    self, at, field_err, metric_from_object, ms_per, sample_of, ImportError, Request, SourceFile,
};
use super::source::{assemble, Imported, Parts};

/// The schema versions this importer was written for.
const KNOWN: &[&str] = &["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"];

/// AIPerf's metric tags and ctxbench's names for them.
const METRICS: &[(&str, &str)] = &[
    ("time_to_first_token", "ttft_ms"),
    ("inter_token_latency", "itl_ms"),
    ("request_latency", "e2e_ms"),
    ("input_sequence_length", "prompt_tokens"),
    ("output_sequence_length", "output_tokens"),
];

/// Reads each `profile_export_aiperf.json` (with its `profile_export.jsonl`, given right
/// after it) into one imported run.
pub fn import(files: &[SourceFile], ctxbench_version: &str) -> Result<Imported, ImportError> {
    let mut parts = Parts {
        tool: "aiperf".into(),
        ..Parts::default()
    };
    let mut per_request = true;
    let mut warm = (0usize, false);
    let mut lens = Vec::new();
    let mut i = 0;
    while i < files.len() {
        let f = &files[i];
        let jsonl = files.get(i + 1).filter(|n| n.name.ends_with(".jsonl"));
        i += 1 + usize::from(jsonl.is_some());
        let v = common::json(f)?;
        let version = v
            .get("schema_version")
            .and_then(Value::as_str)
            .ok_or_else(|| field_err(&f.name, &["schema_version"], "missing"))?;
        if !KNOWN.contains(&version) {
            return Err(ImportError::Version {
                file: f.name.clone(),
                field: "schema_version".into(),
                found: version.into(),
                known: KNOWN.join(", "),
            });
        }
        parts.format = format!("profile_export_aiperf.json schema {version}");
        parts.tool_version = v
            .get("aiperf_version")
            .and_then(Value::as_str)
            .map(str::to_owned);
        parts.engine = Some(engine(&v));
        parts.started_at = v
            .get("start_time")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let cfg = v.get("input_config").cloned().unwrap_or(Value::Null);
        parts.url =
            first_str(&cfg, &[&["endpoint", "urls"], &["endpoint", "url"]]).unwrap_or_default();
        parts.model = first_str(&cfg, &[&["endpoint", "model_names"]]);
        let metrics = METRICS
            .iter()
            .map(|(tag, name)| block(&f.name, &v, tag, name))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        let count = metrics
            .iter()
            .find(|m| m.name == "ttft_ms")
            .and_then(|m| m.count);
        let isl = metrics.iter().find(|m| m.name == "prompt_tokens");
        let context = isl.and_then(|m| m.mean).unwrap_or(0.0).round() as u64;
        parts.output_tokens = metrics
            .iter()
            .find(|m| m.name == "output_tokens")
            .and_then(|m| m.mean)
            .unwrap_or(0.0)
            .round() as u32;
        if let Some(m) = isl {
            lens.push(format!(
                "{}–{} tokens (mean {context})",
                m.min.unwrap_or(0.0),
                m.max.unwrap_or(0.0)
            ));
        }
        warm.1 |= v.get("warmup_metrics").is_some();
        match jsonl {
            Some(j) => {
                let (reqs, warmup) = records(j)?;
                warm.0 += warmup;
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
            concurrency: at(&cfg, &["loadgen", "concurrency"])
                .and_then(Value::as_u64)
                .map(|c| c as u32),
            requests: count.unwrap_or(0),
            name: Some(f.name.clone()),
            metrics,
        });
    }
    parts.audit = audit(&parts.samples, per_request, &lens, warm);
    Ok(assemble(parts, files, ctxbench_version))
}

/// What an AIPerf file proves: per-request cache counts and lengths only with its
/// profile_export.jsonl; `warm` is (warmup requests left out, warmup_metrics present).
fn audit(samples: &[Sample], per_request: bool, lens: &[String], warm: (usize, bool)) -> Audit {
    let known = samples.iter().filter(|s| s.cached_tokens.is_some()).count();
    let all_known = per_request && known == samples.len() && known > 0;
    Audit {
        cache_per_request: all_known,
        cache: if all_known {
            format!(
                "usage_prompt_cache_read_tokens per request (the server's usage): {}",
                common::cache_hits(samples)
            )
        } else if per_request {
            format!("the server's cached-token count is in {known} of {} requests only", samples.len())
        } else {
            "without profile_export.jsonl only an average of usage_prompt_cache_read_tokens: no per-request proof".into()
        },
        lengths_exact: per_request,
        lengths: format!(
            "{}; per request the server's usage_prompt_tokens where recorded, else AIPerf's tokenizer{}",
            lens.join("; "),
            if per_request { "" } else { " (no profile_export.jsonl: a distribution only)" }
        ),
        warmup_separated: Some(warm.1 || warm.0 > 0 || per_request),
        warmup: match (per_request, warm.0) {
            (true, n) => format!("{n} warmup request(s) in profile_export.jsonl (benchmark_phase warmup), left out"),
            (false, _) => "warmup requests are kept out of the profiling metrics by AIPerf (warmup_metrics)".into(),
        },
        per_request,
        notes: vec![
            "units normalised from each block's `unit` (ms, sec, ns); std is AIPerf's `std`; AIPerf's percentiles stop at p99".into(),
        ],
    }
}

/// The engine that wrote the file: the Rust engine and the Python one count tokens
/// differently, so the importer says which it was and how it knows.
fn engine(v: &Value) -> String {
    let said = ["engine", "aiperf_engine"]
        .iter()
        .find_map(|k| v.get(*k).or_else(|| at(v, &["input_config", k])))
        .and_then(Value::as_str);
    match said {
        Some(e) => format!("{e} (the file's `engine`)"),
        None => "python (the file names no engine; AIPerf's Python engine writes none)".into(),
    }
}

fn first_str(v: &Value, paths: &[&[&str]]) -> Option<String> {
    paths.iter().find_map(|p| match at(v, p)? {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => a.first().and_then(Value::as_str).map(str::to_owned),
        _ => None,
    })
}

/// One metric block, in ms for latencies; `None` when the file has no such block.
fn block(
    file: &str,
    v: &Value,
    tag: &str,
    name: &str,
) -> Result<Option<ctxbench_schema::imported::ImportedMetric>, ImportError> {
    let Some(b) = v.get(tag) else {
        return Ok(None);
    };
    let unit = b
        .get("unit")
        .and_then(Value::as_str)
        .ok_or_else(|| field_err(file, &[tag, "unit"], "missing"))?;
    let scale = if name.ends_with("_ms") {
        ms_per(unit).ok_or_else(|| ImportError::Unit {
            file: file.into(),
            field: format!("{tag}.unit"),
            unit: unit.into(),
        })?
    } else if unit == "tokens" {
        1.0
    } else {
        return Err(ImportError::Unit {
            file: file.into(),
            field: format!("{tag}.unit"),
            unit: unit.into(),
        });
    };
    let count = b.get("count").and_then(Value::as_u64);
    Ok(Some(metric_from_object(
        name,
        format!("{tag} [{unit}]"),
        b,
        scale,
        count,
    )))
}

/// The per-request records: the profiling ones as requests, and how many warmup ones.
fn records(f: &SourceFile) -> Result<(Vec<Request>, usize), ImportError> {
    let mut out = Vec::new();
    let mut warmup = 0;
    for (i, r) in common::json_lines(f)?.iter().enumerate() {
        let phase = at(r, &["metadata", "benchmark_phase"])
            .and_then(Value::as_str)
            .unwrap_or("profiling");
        if phase != "profiling" {
            warmup += 1;
            continue;
        }
        let get = |tag: &str, ms: bool| -> Result<Option<f64>, ImportError> {
            let Some(m) = at(r, &["metrics", tag]) else {
                return Ok(None);
            };
            let value = m.get("value").and_then(Value::as_f64);
            if !ms {
                return Ok(value);
            }
            let unit = m.get("unit").and_then(Value::as_str).unwrap_or("ms");
            let scale = ms_per(unit).ok_or_else(|| ImportError::Unit {
                file: format!("{} line {}", f.name, i + 1),
                field: format!("metrics.{tag}.unit"),
                unit: unit.into(),
            })?;
            Ok(value.map(|x| x * scale))
        };
        // The server's own counts where AIPerf recorded its usage (cached tokens included),
        // else AIPerf's tokenizer's.
        let prompt = get("usage_prompt_tokens", false)?.or(get("input_sequence_length", false)?);
        out.push(Request {
            prompt_tokens: prompt.map(|x| x as u64),
            output_tokens: get("output_sequence_length", false)?.map(|x| x as u64),
            ttft_ms: get("time_to_first_token", true)?,
            itl_ms: get("inter_token_latency", true)?,
            e2e_ms: get("request_latency", true)?,
            cached_tokens: get("usage_prompt_cache_read_tokens", false)?.map(|x| x as u64),
            at: None,
            failed: r.get("error").is_some_and(|e| !e.is_null()),
        });
    }
    Ok((out, warmup))
}
