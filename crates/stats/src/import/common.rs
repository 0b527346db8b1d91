//! What every importer shares: the source files as bytes, the typed error naming file and
//! field, units and percentile names normalised, the percentile audit, and the samples and
//! header an import becomes. Pure: the binary reads and writes the files.

use ctxbench_schema::imported::{ImportedMetric, ImportedPercentile};
use ctxbench_schema::record::{Flag, Sample};
use serde_json::Value;

use crate::stats::tail::{n_needed, CONFIDENCE};

/// One file of the source, read by the binary.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The path as given (named in errors and recorded).
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Why a file cannot be imported; each names the file, and the field where one is at fault.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not JSON (or JSON Lines) at all, or cut short.
    #[error("{file}: not valid JSON ({detail}); a truncated or partly written file?")]
    Json {
        /// The file.
        file: String,
        /// The parser's words (line and column).
        detail: String,
    },
    /// No importer recognises the file.
    #[error("{file}: not a result file ctxbench can import ({why}); known: AIPerf profile_export_aiperf.json, vllm bench --save-result JSON, vLLM's multi-turn benchmark --stats-json-output, GuideLLM benchmarks.json (v2), inference-perf reports")]
    Unknown {
        /// The file.
        file: String,
        /// What was looked for.
        why: String,
    },
    /// A known tool, in a version of its format this importer was not written for.
    #[error("{file}: field {field} is {found}; this importer reads {known}")]
    Version {
        /// The file.
        file: String,
        /// The version field.
        field: String,
        /// What the file says.
        found: String,
        /// The versions known.
        known: String,
    },
    /// A field missing or of the wrong kind.
    #[error("{file}: field {field}: {problem}")]
    Field {
        /// The file.
        file: String,
        /// The field's path.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A unit this importer does not know how to convert.
    #[error(
        "{file}: field {field} has unit {unit:?}; known units: ms, s, us, ns (latencies), tokens"
    )]
    Unit {
        /// The file.
        file: String,
        /// The field's path.
        field: String,
        /// The unit found.
        unit: String,
    },
}

/// Parses a whole file as one JSON value.
pub fn json(f: &SourceFile) -> Result<Value, ImportError> {
    serde_json::from_slice(&f.bytes).map_err(|e| ImportError::Json {
        file: f.name.clone(),
        detail: e.to_string(),
    })
}

/// Parses a JSON Lines file; a line that does not parse (a torn last line included) is an
/// error naming its line.
pub fn json_lines(f: &SourceFile) -> Result<Vec<Value>, ImportError> {
    let text = std::str::from_utf8(&f.bytes).map_err(|e| ImportError::Json {
        file: f.name.clone(),
        detail: e.to_string(),
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| ImportError::Json {
                file: f.name.clone(),
                detail: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// A field of a JSON object, by a path of keys (`["metrics", "ttft"]`).
pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// A number that must be there: an error naming file and field otherwise.
pub fn need_f64(file: &str, v: &Value, path: &[&str]) -> Result<f64, ImportError> {
    at(v, path)
        .and_then(Value::as_f64)
        .ok_or_else(|| field_err(file, path, "missing or not a number"))
}

/// The error for a field at `path`.
pub fn field_err(file: &str, path: &[&str], problem: &str) -> ImportError {
    ImportError::Field {
        file: file.to_owned(),
        field: path.join("."),
        problem: problem.to_owned(),
    }
}

/// Milliseconds per one of `unit` (latencies); `None` for a unit not known.
pub fn ms_per(unit: &str) -> Option<f64> {
    match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "msec" | "millisecond" | "milliseconds" => Some(1.0),
        "s" | "sec" | "second" | "seconds" => Some(1000.0),
        "us" | "µs" | "usec" | "microseconds" => Some(1e-3),
        "ns" | "nsec" | "nanoseconds" => Some(1e-6),
        _ => None,
    }
}

/// The quantile a percentile name stands for, whatever the tool's spelling: `p50`, `p99`,
/// `p99.9`, `p99p9` (llm-d), `p999` and `p001` (GuideLLM: 99.9th and 0.1th), `p01`
/// (GuideLLM: 1st), `p1` (AIPerf: 1st). `None`: not a percentile.
pub fn quantile_of(name: &str) -> Option<f64> {
    let d = name.strip_prefix('p')?;
    let pct = if let Some((a, b)) = d.split_once(['p', '.', '_']) {
        format!("{a}.{b}").parse::<f64>().ok()?
    } else if d.len() == 3 && d.starts_with('0') {
        // GuideLLM: p001 = 0.1th
        d.parse::<f64>().ok()? / 10.0
    } else if d == "999" {
        99.9
    } else {
        d.parse::<f64>().ok()?
    };
    (pct > 0.0 && pct < 100.0).then_some(pct / 100.0)
}

/// ctxbench's name for a quantile: `p50`, `p99`, `p99.9`, `p0.1`.
pub fn quantile_name(q: f64) -> String {
    let pct = q * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        format!("p{}", pct.round() as i64)
    } else {
        format!("p{}", (pct * 10.0).round() / 10.0)
    }
}

/// A percentile with the samples a distribution-free 95% interval for it needs (crates/render
/// says what it is when `n` falls short: the slowest request, or no interval).
pub fn percentile(q: f64, value: f64, n: Option<u64>) -> ImportedPercentile {
    let needed = if q >= 0.5 {
        n_needed(q, CONFIDENCE)
    } else {
        n_needed(1.0 - q, CONFIDENCE)
    } as u64;
    ImportedPercentile {
        name: quantile_name(q),
        q,
        value,
        n,
        needed,
        caveat: None,
    }
}

/// A metric's aggregate read from an object whose keys are the tool's statistic names
/// (`avg`/`mean`, `std`/`std_dev`/`stddev`, `min`, `max`, percentiles), scaled by `scale`.
/// Percentiles may also sit in a nested `percentiles` object (GuideLLM).
pub fn metric_from_object(
    name: &str,
    source: String,
    obj: &Value,
    scale: f64,
    count: Option<u64>,
) -> ImportedMetric {
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_f64))
            .map(|v| v * scale)
    };
    let mut percentiles: Vec<ImportedPercentile> = Vec::new();
    let nested = obj.get("percentiles").and_then(Value::as_object);
    let own = obj.as_object();
    for map in [own, nested].into_iter().flatten() {
        for (k, v) in map {
            if let (Some(q), Some(x)) = (quantile_of(k), v.as_f64()) {
                if !percentiles.iter().any(|p| (p.q - q).abs() < 1e-12) {
                    percentiles.push(percentile(q, x * scale, count));
                }
            }
        }
    }
    percentiles.sort_by(|a, b| a.q.total_cmp(&b.q));
    ImportedMetric {
        name: name.to_owned(),
        source,
        count,
        mean: get(&["avg", "mean"]),
        std: get(&["std", "std_dev", "stddev"]),
        min: get(&["min"]),
        max: get(&["max"]),
        percentiles,
    }
}

/// One request as a source records it, in ctxbench's units.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Prompt tokens as the tool counted them.
    pub prompt_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// Mean time between output tokens, ms.
    pub itl_ms: Option<f64>,
    /// Send to last byte, ms.
    pub e2e_ms: Option<f64>,
    /// Cached prompt tokens, where the tool recorded them per request.
    pub cached_tokens: Option<u64>,
    /// When it was sent (RFC 3339), where known.
    pub at: Option<String>,
    /// It failed.
    pub failed: bool,
}

/// A request as a ctxbench sample at `context` (the point's target length): cold, its
/// cache state unverified unless the source counted cached tokens, its length checked
/// against the target only where the target was exact.
pub fn sample_of(run_id: &str, context: u64, rep: u32, r: &Request, exact: bool) -> Sample {
    let mut s = Sample::blank(
        run_id,
        context,
        rep,
        r.prompt_tokens.unwrap_or(0),
        r.at.clone().unwrap_or_default(),
        None,
    );
    s.prompt_tokens = r.prompt_tokens;
    s.length_ok = match (exact, r.prompt_tokens) {
        (true, Some(p)) => Some(p == context),
        _ => None,
    };
    s.cached_tokens = r.cached_tokens;
    s.cache_verified = r.cached_tokens.is_some();
    s.contaminated = r.cached_tokens.is_some_and(|c| c > 0);
    s.ttft_ms = r.ttft_ms;
    s.e2e_ms = r.e2e_ms;
    s.output_tokens = r.output_tokens;
    s.ms_per_step = r.itl_ms.filter(|x| *x > 0.0);
    s.decode_tokens_per_s = s.ms_per_step.map(|m| 1000.0 / m);
    s.prefill_tokens_per_s = match (r.prompt_tokens, r.ttft_ms) {
        (Some(p), Some(t)) if t > 0.0 => Some(p as f64 / (t / 1000.0)),
        _ => None,
    };
    if r.failed {
        s.status = ctxbench_schema::record::Status::Failed;
        s.error = Some(ctxbench_schema::record::SampleError {
            kind: ctxbench_schema::record::ErrorKind::Transport,
            message: "failed in the imported tool's run (its own error is in its file)".into(),
        });
    }
    if !s.cache_verified {
        s.flags.push(Flag::CacheUnverified);
    }
    if s.contaminated {
        s.flags.push(Flag::Contaminated);
    }
    if s.length_ok == Some(false) {
        s.flags.push(Flag::LengthMismatch);
    }
    if r.prompt_tokens.is_none() {
        s.flags.push(Flag::LengthUnreported);
    }
    s
}

/// Each file with the companion that follows it where `companion` accepts that one's name
/// (AIPerf's export and its `profile_export.jsonl`; inference-perf's summary and its
/// per-request file).
pub fn paired(
    files: &[SourceFile],
    companion: impl Fn(&str) -> bool,
) -> Vec<(&SourceFile, Option<&SourceFile>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(f) = files.get(i) {
        let next = files.get(i + 1).filter(|n| companion(&n.name));
        i += 1 + usize::from(next.is_some());
        out.push((f, next));
    }
    out
}

/// The rounded mean of the metric named `name` (0 where it is absent).
pub fn mean_of(metrics: &[ImportedMetric], name: &str) -> u64 {
    metrics
        .iter()
        .find(|m| m.name == name)
        .and_then(|m| m.mean)
        .unwrap_or(0.0)
        .round() as u64
}

/// A run id that depends only on the source's bytes: importing the same file twice gives the
/// same id (FNV-1a 64).
pub fn run_id_of(files: &[SourceFile]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        for b in &f.bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("import-{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_names_of_every_tool_read_alike() {
        assert_eq!(quantile_of("p99"), Some(0.99));
        assert_eq!(quantile_of("p1"), Some(0.01));
        assert_eq!(quantile_of("p01"), Some(0.01));
        assert_eq!(quantile_of("p05"), Some(0.05));
        assert!((quantile_of("p999").unwrap() - 0.999).abs() < 1e-12);
        assert!((quantile_of("p99p9").unwrap() - 0.999).abs() < 1e-12);
        assert!((quantile_of("p99.9").unwrap() - 0.999).abs() < 1e-12);
        assert!((quantile_of("p001").unwrap() - 0.001).abs() < 1e-12);
        assert_eq!(quantile_of("std"), None);
        assert_eq!(quantile_name(0.999), "p99.9");
        assert_eq!(quantile_name(0.9), "p90");
    }

    #[test]
    fn a_p99_needs_299_samples() {
        assert_eq!(percentile(0.99, 12.0, Some(20)).needed, 299);
        assert_eq!(percentile(0.01, 12.0, Some(20)).needed, 299);
    }

    #[test]
    fn units_convert_to_ms_or_are_refused() {
        assert_eq!(ms_per("s"), Some(1000.0));
        assert_eq!(ms_per("ms"), Some(1.0));
        assert_eq!(ms_per("ns"), Some(1e-6));
        assert_eq!(ms_per("furlongs"), None);
    }
}
