//! The results file: JSON Lines, a `run` header then one `sample` line per measurement,
//! each written and flushed to disk as it is measured. Schema: `docs/results-schema.md`.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{Counts, ServerTimings};
use crate::error::RecordError;

/// Version of the line format; bump on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The first line of a results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunHeader {
    /// Always `"run"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Random id of this run, repeated on every sample.
    pub run_id: String,
    /// ctxbench's version.
    pub ctxbench_version: String,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    /// The machine ctxbench ran on.
    pub host: Host,
    /// Everything that shapes the measurement; `--resume` requires it unchanged.
    pub config: Value,
    /// What the probe learned about the server.
    pub server: Value,
    /// The corpus, tokenized.
    pub corpus: Value,
    /// What the user says this run is (`--label`, e.g. the server flag under test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The client machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// Operating system.
    pub os: String,
    /// CPU architecture.
    pub arch: String,
    /// Logical CPUs.
    pub cpus: usize,
}

impl Host {
    /// This machine.
    pub fn current() -> Self {
        Host {
            hostname: gethostname::gethostname().to_string_lossy().into_owned(),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }
}

/// Whether a sample's request completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured.
    #[default]
    Ok,
    /// The request failed; see `error`.
    Failed,
}

/// A failure recorded in place of a measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SampleError {
    /// Short machine-readable kind (`transport`, `stalled`, …).
    pub kind: String,
    /// What happened, for a person.
    pub message: String,
}

/// One measured (or failed) request. `Default` is for building samples in tests.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Sample {
    /// Always `"sample"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The run this belongs to.
    pub run_id: String,
    /// Target context length (prompt tokens as the server counts them).
    pub context_tokens: u64,
    /// Repetition index at this context, from 0.
    pub rep: u32,
    /// `cold`: a fresh prefill with no cache reuse.
    pub phase: String,
    /// Completed or failed.
    pub status: Status,
    /// Set when `status` is `failed`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<SampleError>,
    /// RFC 3339 time the request was sent.
    pub at: String,
    /// Token ids sent.
    pub prompt_tokens_sent: u64,
    /// Prompt length as the server reported it.
    pub prompt_tokens: Option<u64>,
    /// `prompt_tokens` equals `context_tokens` within the run's tolerance.
    pub length_ok: Option<bool>,
    /// Prompt tokens the server reported served from its cache (`null`: not reported).
    pub cached_tokens: Option<u64>,
    /// The server reported a cached-token count, so cold prefill is proven.
    pub cache_verified: bool,
    /// `cached_tokens > 0`: not a cold prefill; excluded from summaries.
    pub contaminated: bool,
    /// Client time to first generated token, from just before the request was written.
    pub ttft_ms: Option<f64>,
    /// `prompt_tokens / ttft`.
    pub prefill_tokens_per_s: Option<f64>,
    /// `(output_tokens − 1) / (t_last_token − t_first_token)`.
    pub decode_tokens_per_s: Option<f64>,
    /// `(t_last_token − t_first_token) / (output_tokens − 1)`: time per generated token.
    pub ms_per_step: Option<f64>,
    /// Generated tokens, as the server counted them.
    pub output_tokens: Option<u64>,
    /// Stream events that carried at least one generated token.
    pub token_chunks: Option<u64>,
    /// Whole request, send to last byte.
    pub e2e_ms: Option<f64>,
    /// Why generation stopped, as the server said.
    pub finish_reason: Option<String>,
    /// Warnings about this sample (`contaminated`, `length_mismatch`, `cache_unverified`, …).
    pub flags: Vec<String>,
    /// What the server reported about its own timing.
    pub server: Option<ServerTimings>,
    /// How it was measured: `stream` (timestamps as bytes arrive) or `two-point`.
    #[serde(default = "default_method")]
    pub method: String,
    /// Speculative decoding: mean tokens per verify step, bonus token included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_length: Option<f64>,
    /// Speculative decoding: accepted drafts ÷ proposed drafts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_rate: Option<f64>,
    /// Speculative decoding: verify steps of this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_verify_steps: Option<u64>,
    /// Speculative decoding: draft tokens proposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens: Option<u64>,
    /// Speculative decoding: draft tokens accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_tokens: Option<u64>,
    /// Where the speculative numbers came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_source: Option<String>,
    /// `(t_last_token − t_first_token) / spec_verify_steps`: time per verify step, distinct
    /// from the per-token `ms_per_step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms_per_verify_step: Option<f64>,
    /// Prometheus counter deltas across this sample (`name{labels}` → after − before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Value>,
    /// The cache flush done before this sample, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush: Option<String>,
    /// Two-point method: `{a_tokens, b_tokens, t_a_ms, t_b_ms, reason}`; `reason` is set
    /// when no decode rate could be computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub two_point: Option<Value>,
}

fn default_method() -> String {
    "stream".to_owned()
}

impl Sample {
    /// Usable for cold summaries: completed, cold (warm decode samples are summarised
    /// apart), not contaminated, of the right length, and not a suspected cache hit.
    pub fn usable(&self) -> bool {
        self.status == Status::Ok
            && self.phase == "cold"
            && !self.contaminated
            && self.length_ok != Some(false)
            && !self.flags.iter().any(|f| f == crate::cachehit::FLAG)
    }

    /// Server-reported counts, as stored.
    pub fn counts(&self) -> Counts {
        Counts {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.output_tokens,
            cached_tokens: self.cached_tokens,
        }
    }
}

/// Appends lines to a results file, each flushed and synced as written.
#[derive(Debug)]
pub struct ResultsWriter {
    file: File,
    path: PathBuf,
    lines: usize,
}

impl ResultsWriter {
    /// Creates a new file (refusing to overwrite one) and writes the header.
    pub fn create(path: &Path, header: &RunHeader) -> Result<Self, RecordError> {
        let io = |e| RecordError::Io {
            path: path.display().to_string(),
            cause: e,
        };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io)?;
        let mut w = ResultsWriter {
            file,
            path: path.to_path_buf(),
            lines: 0,
        };
        w.append(header)?;
        Ok(w)
    }

    /// Opens an existing file for appending (after [`read_results`] checked and mended it).
    pub fn append_to(path: &Path) -> Result<Self, RecordError> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| RecordError::Io {
                path: path.display().to_string(),
                cause: e,
            })?;
        Ok(ResultsWriter {
            file,
            path: path.to_path_buf(),
            lines: 0,
        })
    }

    /// Writes one JSON line and syncs it, so a crash right after loses nothing.
    pub fn append<T: Serialize>(&mut self, line: &T) -> Result<(), RecordError> {
        let io = |e| RecordError::Io {
            path: self.path.display().to_string(),
            cause: e,
        };
        let mut buf = serde_json::to_vec(line).map_err(|e| io(std::io::Error::other(e)))?;
        buf.push(b'\n');
        let before = self.file.metadata().map(|m| m.len()).ok();
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // Disk full or a file-size limit: cut the partial line off so the file stays
            // valid, and hand the line back in the error so the measurement is not lost.
            if let Some(len) = before {
                let _ = self.file.set_len(len);
            }
            return Err(RecordError::WriteFailed {
                path: self.path.display().to_string(),
                cause: e,
                line: String::from_utf8_lossy(&buf).trim_end().to_owned(),
            });
        }
        self.lines += 1;
        Ok(())
    }

    /// Lines written by this writer.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A results file read back.
#[derive(Debug, Clone)]
pub struct Results {
    /// The header.
    pub header: RunHeader,
    /// Every sample line, in file order.
    pub samples: Vec<Sample>,
    /// Bytes of a torn last line that was ignored (the writer was killed mid-line).
    pub torn_bytes: usize,
}

/// Reads a results file. A torn last line is tolerated and counted; with `mend`, it is also
/// cut off so that appending can continue cleanly.
pub fn read_results(path: &Path, mend: bool) -> Result<Results, RecordError> {
    let pstr = path.display().to_string();
    let io = |e| RecordError::Io {
        path: pstr.clone(),
        cause: e,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(mend)
        .open(path)
        .map_err(io)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None => 0,
    };
    let torn_bytes = bytes.len() - complete;
    if torn_bytes > 0 && mend {
        file.set_len(complete as u64).map_err(io)?;
        file.seek(SeekFrom::End(0)).map_err(io)?;
        file.sync_data().map_err(io)?;
    }
    let mut header = None;
    let mut samples = Vec::new();
    for (i, line) in BufReader::new(&bytes[..complete]).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let corrupt = |detail: String| RecordError::Corrupt {
            path: pstr.clone(),
            line: i + 1,
            detail,
        };
        let v: Value = serde_json::from_str(&line).map_err(|e| corrupt(e.to_string()))?;
        match v.get("type").and_then(Value::as_str) {
            Some("run") if header.is_none() => {
                header = Some(serde_json::from_value(v).map_err(|e| corrupt(e.to_string()))?)
            }
            Some("sample") => {
                samples.push(serde_json::from_value(v).map_err(|e| corrupt(e.to_string()))?)
            }
            _ => {} // later line types (resume markers, …) are informational
        }
    }
    let header = header.ok_or(RecordError::NoHeader { path: pstr.clone() })?;
    Ok(Results {
        header,
        samples,
        torn_bytes,
    })
}

/// Lists the differences between two configurations, one `key: old -> new` per line.
pub fn config_diff(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into("", old, new, &mut out);
    out
}

fn diff_into(prefix: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                diff_into(
                    &p,
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if a != b => out.push(format!("  {prefix}: {a} -> {b}")),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn header() -> RunHeader {
        RunHeader {
            kind: "run".into(),
            schema: SCHEMA_VERSION,
            run_id: "r1".into(),
            ctxbench_version: "0".into(),
            started_at: "t".into(),
            host: Host::current(),
            config: json!({"reps": 3}),
            server: json!({}),
            corpus: json!({}),
            label: None,
        }
    }

    #[test]
    fn torn_last_line_is_tolerated_and_mended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let mut w = ResultsWriter::create(&p, &header()).unwrap();
        w.append(&json!({"type":"note"})).unwrap();
        drop(w);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"type":"sample","run_"#).unwrap();
        drop(f);
        let r = read_results(&p, false).unwrap();
        assert_eq!(r.torn_bytes, 22);
        let r = read_results(&p, true).unwrap();
        assert_eq!(r.torn_bytes, 22);
        assert_eq!(read_results(&p, false).unwrap().torn_bytes, 0);
    }

    #[test]
    fn create_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        ResultsWriter::create(&p, &header()).unwrap();
        assert!(ResultsWriter::create(&p, &header()).is_err());
    }

    #[test]
    fn corrupt_middle_line_is_an_error_with_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        drop(ResultsWriter::create(&p, &header()).unwrap());
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"garbage\n{\"type\":\"x\"}\n").unwrap();
        let e = read_results(&p, false).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn config_diff_names_changed_keys() {
        let d = config_diff(
            &json!({"reps":3,"a":{"b":1}}),
            &json!({"reps":5,"a":{"b":1},"c":true}),
        );
        assert_eq!(d, vec!["  c: null -> true", "  reps: 3 -> 5"]);
    }
}
