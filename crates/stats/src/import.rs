//! `ctxbench import`: other tools' result files (AIPerf, `vllm bench`, GuideLLM,
//! inference-perf) read into a ctxbench run, with the audit of what each can prove. Pure:
//! the binary reads the files and writes the results (whole, or not at all).

pub mod aiperf;
pub mod common;
pub mod findings;
pub mod guidellm;
pub mod inference_perf;
pub mod source;
pub mod versus;
pub mod vllm;
pub mod vllm_multi_turn;

use common::{ImportError, SourceFile};
use source::Imported;

/// Reads one run from `files` (one tool; several files of it are several points, e.g. one
/// per prompt length). The tool is told from each file's content, never its name.
pub fn import(files: &[SourceFile], ctxbench_version: &str) -> Result<Imported, ImportError> {
    let first = files.first().ok_or_else(|| ImportError::Unknown {
        file: "(none)".into(),
        why: "no file given".into(),
    })?;
    match detect(first)? {
        Tool::Aiperf => aiperf::import(files, ctxbench_version),
        Tool::Vllm => vllm::import(files, ctxbench_version),
        Tool::VllmMultiTurn => vllm_multi_turn::import(files, ctxbench_version),
        Tool::Guidellm => guidellm::import(files, ctxbench_version),
        Tool::InferencePerf => inference_perf::import(files, ctxbench_version),
    }
}

/// The tools whose files are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// NVIDIA AIPerf.
    Aiperf,
    /// `vllm bench serve --save-result`.
    Vllm,
    /// vLLM's multi-turn benchmark script (`--stats-json-output`).
    VllmMultiTurn,
    /// GuideLLM.
    Guidellm,
    /// Kubernetes SIG inference-perf.
    InferencePerf,
}

/// Which tool wrote `f`, from its content.
pub fn detect(f: &SourceFile) -> Result<Tool, ImportError> {
    if f.name.ends_with(".jsonl") {
        return Err(ImportError::Unknown {
            file: f.name.clone(),
            why: "a JSON Lines file alone; give AIPerf's profile_export_aiperf.json (its profile_export.jsonl beside it is read too)".into(),
        });
    }
    let v = common::json(f)?;
    if vllm_multi_turn::is_stats_file(&v) {
        return Ok(Tool::VllmMultiTurn);
    }
    if v.get("aiperf_version").is_some()
        || v.get("schema_version").is_some() && v.get("input_config").is_some()
    {
        return Ok(Tool::Aiperf);
    }
    if v.get("benchmarks").is_some() && v.pointer("/metadata/version").is_some()
        || v.get("benchmarks").is_some() && v.get("args").is_some()
    {
        return Ok(Tool::Guidellm);
    }
    if v.get("endpoint_type").is_some() && v.get("mean_ttft_ms").is_some()
        || v.get("backend").is_some() && v.get("completed").is_some() && v.get("duration").is_some()
    {
        return Ok(Tool::Vllm);
    }
    if v.get("load_summary").is_some()
        || v.get("successes").is_some() && v.get("failures").is_some()
    {
        return Ok(Tool::InferencePerf);
    }
    Err(ImportError::Unknown {
        file: f.name.clone(),
        why: "none of aiperf_version, benchmarks + metadata.version, endpoint_type + mean_ttft_ms, load_summary / successes + failures, an array of requests with ttft_ms + conversation_id + input_num_turns + approx_cached_percent".into(),
    })
}
