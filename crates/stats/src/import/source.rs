//! An imported run: the header that records its source and audit, and its samples.

use ctxbench_schema::imported::{Audit, ImportSource, ImportedPoint};
use ctxbench_schema::record::{
    CorpusInfo, Host, Line, RepPolicy, RunConfig, RunHeader, Sample, ServerInfo, SCHEMA_VERSION,
};

use super::common::{run_id_of, sample_of, Request, SourceFile};
use super::findings::Findings;

/// A run read from another tool's files.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The header (its `imported` field says where from, and the audit).
    pub header: RunHeader,
    /// One sample per request the source recorded (none where it kept only aggregates).
    pub samples: Vec<Sample>,
    /// What the import found, as facts; crates/render words them into the header's audit.
    pub findings: Findings,
}

impl Imported {
    /// The results file's lines, header first.
    pub fn lines(&self) -> Vec<Line> {
        std::iter::once(Line::Run(Box::new(self.header.clone())))
            .chain(
                self.samples
                    .iter()
                    .map(|s| Line::Sample(Box::new(s.clone()))),
            )
            .collect()
    }

    /// The source record in the header.
    pub fn source(&self) -> Option<&ImportSource> {
        self.header.imported.as_deref()
    }
}

/// What a tool's importer learned, to be made into a run.
#[derive(Debug, Clone, Default)]
pub struct Parts {
    /// The tool (`aiperf`, `vllm-bench`, `guidellm`, `inference-perf`).
    pub tool: String,
    /// Its version, as the file says.
    pub tool_version: Option<String>,
    /// Format and version recognised.
    pub format: String,
    /// AIPerf's engine.
    pub engine: Option<String>,
    /// The server's URL, as the tool recorded it.
    pub url: String,
    /// The model name sent.
    pub model: Option<String>,
    /// Output tokens asked per request.
    pub output_tokens: u32,
    /// When the tool started (RFC 3339), where recorded.
    pub started_at: String,
    /// The audit's verdicts (its words are left to crates/render, from `findings`).
    pub audit: Audit,
    /// What the import found.
    pub findings: Findings,
    /// Aggregates per point.
    pub points: Vec<ImportedPoint>,
    /// Samples (their `run_id` is set here).
    pub samples: Vec<Sample>,
}

impl Parts {
    /// An empty import by `tool` of files in `format`.
    pub fn new(tool: &str, format: &str) -> Self {
        Parts {
            tool: tool.into(),
            format: format.into(),
            ..Parts::default()
        }
    }

    /// The requests of one point at `context` as its samples, numbered from 0 (cold, their
    /// lengths not checked against `context`: no tool here asks for an exact length).
    pub fn push_requests<'a>(
        &mut self,
        context: u64,
        requests: impl IntoIterator<Item = &'a Request>,
    ) {
        for (k, r) in requests.into_iter().enumerate() {
            self.samples
                .push(sample_of("", context, k as u32, r, false));
        }
    }
}

/// The run `parts` of `files` make: a header whose config names the source and whose
/// server is unknown (the tool did not probe it), and the samples.
pub fn assemble(parts: Parts, files: &[SourceFile], ctxbench_version: &str) -> Imported {
    let run_id = run_id_of(files);
    let mut contexts: Vec<u64> = parts.points.iter().map(|p| p.context_tokens).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let most = parts
        .points
        .iter()
        .map(|p| p.requests as u32)
        .max()
        .unwrap_or(0);
    let label = format!(
        "{} {}",
        parts.tool,
        parts
            .tool_version
            .as_deref()
            .unwrap_or("(version not stated)")
    );
    let header = RunHeader {
        schema: SCHEMA_VERSION,
        run_id: run_id.clone(),
        ctxbench_version: ctxbench_version.to_owned(),
        ctxbench_commit: None,
        started_at: parts.started_at,
        host: Host::default(),
        config: RunConfig {
            backend_requested: format!("imported:{}", parts.tool),
            backend: format!("imported:{}", parts.tool),
            url: parts.url.clone(),
            model: parts.model.clone(),
            contexts,
            output_tokens: parts.output_tokens,
            reps: RepPolicy::fixed(most),
            ..RunConfig::default()
        },
        server: ServerInfo {
            url: parts.url,
            backend: format!("imported:{}", parts.tool),
            backend_reason: format!("read from {}'s result file by ctxbench import", parts.tool),
            server_kind: "unknown (not probed: imported)".into(),
            model: parts.model,
            prompt_method: "the tool's own prompts".into(),
            ..ServerInfo::default()
        },
        corpus: CorpusInfo::default(),
        label: Some(label),
        model_facts: None,
        imported: Some(Box::new(ImportSource {
            tool: parts.tool,
            tool_version: parts.tool_version,
            format: parts.format,
            files: files.iter().map(|f| f.name.clone()).collect(),
            engine: parts.engine,
            audit: parts.audit,
            points: parts.points,
        })),
    };
    let samples = parts
        .samples
        .into_iter()
        .map(|mut s| {
            s.run_id = run_id.clone();
            s
        })
        .collect();
    Imported {
        header,
        samples,
        findings: parts.findings,
    }
}
