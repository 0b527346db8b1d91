//! AIPerf's `profile_export_aiperf.json` (schema 1.x: one block per metric tag, each with
//! `unit`, `avg`, `min`, `max`, `p1`…`p99`, `std`, `count`) and, where the binary found it
//! beside it, the per-request `profile_export.jsonl` (`metadata.benchmark_phase`,
//! `metrics.{tag}: {value, unit}`). One export is one point.

use ctxbench_schema::imported::{Audit, ImportedPoint};
use serde_json::Value;

use super::common::{
    self, at, field_err, metric_from_object, ms_per, ImportError, Request, SourceFile,
};
use super::findings::{CacheHits, Findings, LengthRange};
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
    let mut parts = Parts::new("aiperf", "");
    let mut per_request = true;
    let mut warm = (0usize, false);
    let mut lengths = Vec::new();
    for (f, jsonl) in common::paired(files, |n| n.ends_with(".jsonl")) {
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
        let context = common::mean_of(&metrics, "prompt_tokens");
        parts.output_tokens = common::mean_of(&metrics, "output_tokens") as u32;
        if let Some(m) = metrics.iter().find(|m| m.name == "prompt_tokens") {
            lengths.push(LengthRange::of(m, context));
        }
        warm.1 |= v.get("warmup_metrics").is_some();
        match jsonl {
            Some(j) => {
                let (reqs, warmup) = records(j)?;
                warm.0 += warmup;
                parts.push_requests(context, &reqs);
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
    let known = parts
        .samples
        .iter()
        .filter(|s| s.cached_tokens.is_some())
        .count();
    let all_known = per_request && known == parts.samples.len() && known > 0;
    parts.audit = Audit {
        cache_per_request: all_known,
        lengths_exact: per_request,
        warmup_separated: Some(warm.1 || warm.0 > 0 || per_request),
        per_request,
        ..Audit::default()
    };
    parts.findings = Findings::Aiperf {
        per_request,
        cache_known: (known, parts.samples.len()),
        hits: CacheHits::of(&parts.samples),
        lengths,
        warmup_left: warm.0,
    };
    Ok(assemble(parts, files, ctxbench_version))
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
