//! What an imported results file records about its source: another tool's file (AIPerf,
//! `vllm bench`, GuideLLM, inference-perf) read by `ctxbench import`, the tool's own
//! aggregates with their units and percentile names normalised, and the audit of what that
//! file can and cannot prove. Carried in the run header (`RunHeader::imported`); the
//! per-request records the source holds become ordinary `sample` lines.

use serde::{Deserialize, Serialize};

/// The source of an imported run and what it proves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ImportSource {
    /// The tool that wrote the file: `aiperf`, `vllm-bench`, `guidellm` or `inference-perf`.
    pub tool: String,
    /// The tool's own version, as the file states it (`None`: the file does not say).
    pub tool_version: Option<String>,
    /// The file format and its version as recognised (`profile_export_aiperf.json schema 1.5`).
    pub format: String,
    /// The files read, as given on the command line.
    pub files: Vec<String>,
    /// AIPerf only: the engine that wrote the file (`python` or `rust`; they count tokens
    /// differently), or how it was told.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// What the file can and cannot prove.
    pub audit: Audit,
    /// The tool's own aggregates, one per measured point of the source.
    pub points: Vec<ImportedPoint>,
}

/// What an imported file proves about its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Audit {
    /// Whether each request's cache state is known (a per-request cached-token count).
    pub cache_per_request: bool,
    /// How the cache state was (or was not) known, in words.
    pub cache: String,
    /// Whether every request's prompt length is known exactly (per request), not only as
    /// a distribution.
    pub lengths_exact: bool,
    /// The prompt lengths in words (`exact per request: 128–131 tokens` or a distribution).
    pub lengths: String,
    /// Whether the warmup requests were kept apart from the measured ones (`None`: the file
    /// does not say).
    pub warmup_separated: Option<bool>,
    /// The warmup in words.
    pub warmup: String,
    /// Per-request records were read (they are the run's `sample` lines).
    pub per_request: bool,
    /// Anything else the importer noticed (names and units normalised, fields missing).
    pub notes: Vec<String>,
}

/// An imported request's place in a multi-turn conversation (`sample.turn`; vLLM's
/// multi-turn benchmark): a later turn re-sends the earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ImportedTurn {
    /// The conversation's id, as the source wrote it.
    pub conversation: String,
    /// The user turn within it, from 0 (in the order the source sent them).
    pub turn: u32,
    /// Messages sent with this request (the earlier turns, both roles, and this question).
    pub messages: u32,
}

/// One measured point of the source (one benchmark, stage or rate) with its aggregates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ImportedPoint {
    /// The prompt length this point was asked for, or its mean (tokens).
    pub context_tokens: u64,
    /// Requests in flight at once, where the source fixed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Requests that completed.
    pub requests: u64,
    /// The source's own name for this point (a GuideLLM strategy, an inference-perf stage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its metrics, normalised to ms and ctxbench's names.
    pub metrics: Vec<ImportedMetric>,
}

/// One metric's aggregate as the source gave it, in milliseconds (latencies) or tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ImportedMetric {
    /// ctxbench's name: `ttft_ms`, `itl_ms`, `tpot_ms`, `e2e_ms`, `prompt_tokens`,
    /// `output_tokens`.
    pub name: String,
    /// The source's own name and unit (`time_to_first_token [ms]`).
    pub source: String,
    /// Samples behind the figures (`None`: the source does not say).
    pub count: Option<u64>,
    /// Mean.
    pub mean: Option<f64>,
    /// Standard deviation (`std`, `std_dev`, `stddev` in the sources).
    pub std: Option<f64>,
    /// Smallest.
    pub min: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
    /// Percentiles, named `p50`, `p90`, `p99`, `p99.9` whatever the source called them.
    pub percentiles: Vec<ImportedPercentile>,
}

/// One percentile of an imported metric, and what stands behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ImportedPercentile {
    /// `p50`, `p90`, `p95`, `p99`, `p99.9`.
    pub name: String,
    /// The quantile (0.99).
    pub q: f64,
    /// The value, in the metric's unit.
    pub value: f64,
    /// Samples the source computed it from (`None`: it does not say).
    pub n: Option<u64>,
    /// Samples a distribution-free 95% interval for this percentile needs.
    pub needed: u64,
    /// What the figure is, in words, when it is less than it claims: `the slowest request
    /// (n = 20; a p99 needs n ≥ 299)`. Absent when n suffices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
}
