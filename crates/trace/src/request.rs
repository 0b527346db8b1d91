//! The request model every trace format is read into, the formats, and what can go wrong.

use std::path::PathBuf;

/// The trace formats ctxbench reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Mooncake / vLLM `timed-trace` JSONL: `timestamp` (ms), `input_length`, `output_length`,
    /// `hash_ids` (512-token blocks).
    Mooncake,
    /// Weka / kv-cache-tester JSON, one session per file (`block_size`, `requests[]`).
    Weka,
    /// TraceLab round JSONL (`prefix_tokens`, `newly_append_tokens`, no hash ids).
    TraceLab,
    /// The Azure LLM inference CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`): no reuse.
    AzureCsv,
    /// ctxbench's own documented format (docs/trace-format.md).
    Ctxbench,
}

/// One request of a trace, in the form every format is read into.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    /// Position in the trace as read (0-based): the replay's request id, stable across runs.
    pub index: u64,
    /// The session (conversation, agent) it belongs to; `None` where the format has none.
    pub session: Option<String>,
    /// 0-based position of this request within its session.
    pub turn: u32,
    /// When to send it, in ms after the trace's first request (open-loop timing); `None`
    /// where the format has no absolute time.
    pub at_ms: Option<f64>,
    /// The client's delay after the previous answer of its session before this request, ms
    /// (per-session timing); `None` where the format has none.
    pub think_ms: Option<f64>,
    /// Prompt length in tokens.
    pub input_tokens: u64,
    /// Tokens to generate.
    pub output_tokens: u64,
    /// Prefix block ids in order: block i covers prompt tokens `[i·block_tokens,
    /// (i+1)·block_tokens)` (the last may be partial, as in Mooncake). Equal ids mean equal
    /// tokens; ids are unique across the whole trace (scoped ids are namespaced when read).
    /// Tokens past the last block are the request's own.
    pub blocks: Vec<u64>,
    /// Tokens per block.
    pub block_tokens: u32,
}

/// What went wrong reading a trace: always names the file, and the line and field where one
/// is at fault.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("{path}: cannot read the trace")]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line or field is not what its format requires.
    #[error("{path}:{line}: {field}: {message}")]
    Invalid {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The field at fault.
        field: String,
        /// What is wrong and what would be right.
        message: String,
    },
    /// No known format matches.
    #[error("{path}: not a trace format ctxbench reads ({reason})")]
    UnknownFormat {
        /// The trace file.
        path: PathBuf,
        /// What was seen.
        reason: String,
    },
}

impl TraceFormat {
    /// The format's name, as the header and the dry run print it.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "Mooncake / timed-trace JSONL",
            TraceFormat::Weka => "Weka / kv-cache-tester JSON",
            TraceFormat::TraceLab => "TraceLab round JSONL",
            TraceFormat::AzureCsv => "Azure LLM inference CSV",
            TraceFormat::Ctxbench => "ctxbench trace JSONL",
        }
    }
}

impl std::fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Block size given to requests without blocks (Azure rows, own-format requests that name
/// none): a placeholder, since no block of theirs is shared.
pub const DEFAULT_BLOCK: u32 = 64;
