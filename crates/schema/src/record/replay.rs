//! What a trace replay records (`ctxbench replay`): the replay's plan in the header
//! (`config.replay`) and, on each request's sample line, what the trace says it may reuse
//! beside what the server says it did (`sample.replay`). The rule that judges a request by
//! them is the session crate's `replay::proof`.

use serde::{Deserialize, Serialize};

/// How requests were released (`config.replay.timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReplayTiming {
    /// At the trace's timestamps (divided by `speed`), whatever the answers do.
    #[default]
    OpenLoop,
    /// Per session: each request after its session's previous answer plus its think time.
    PerSession,
}

impl ReplayTiming {
    /// The name as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayTiming::OpenLoop => "open_loop",
            ReplayTiming::PerSession => "per_session",
        }
    }
}

/// The replay's plan, in the header (`config.replay`): part of the run's identity, so
/// `--resume` continues only the same trace with the same salt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ReplayConfig {
    /// The trace as given on the command line.
    pub trace: String,
    /// Its format (`mooncake`, `weka`, `tracelab`, `azure_csv`, `ctxbench`, `synthetic`).
    pub format: String,
    /// Requests in the trace as read.
    pub requests: u64,
    /// Requests that will be sent (the rest skipped, `skipped_beyond_context`).
    pub planned: u64,
    /// Requests left out because prompt + output exceed the server's context (never
    /// truncated).
    pub skipped_beyond_context: u64,
    /// Distinct sessions.
    pub sessions: u64,
    /// Tokens per trace block (the trace's `block_size`, after `scale`).
    pub block_tokens: u32,
    /// The salt every block's tokens are drawn from (fresh per run unless
    /// `--prompt-seed`): the same salt sends the same prompts.
    pub salt: u64,
    /// How requests were released.
    pub timing: ReplayTiming,
    /// `--speed`: trace time is divided by it.
    pub speed: f64,
    /// `--max-gap`: gaps longer than this were cut to it (seconds); absent: gaps whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gap_s: Option<f64>,
    /// `--scale`: every length (blocks included) was multiplied by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// The trace's span: from its first scheduled request to its last, ms, after `speed`
    /// and `max_gap` (open loop; per session the answers decide the span).
    pub span_ms: f64,
    /// Prompt tokens of the planned requests.
    pub input_tokens: u64,
    /// The trace's ideal reuse: tokens of each planned request's leading blocks that an
    /// earlier request of the trace holds, summed (what a perfect cache reuses).
    pub ideal_reuse_tokens: u64,
    /// `--slo`: the TTFT goal, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_ttft_ms: Option<f64>,
    /// `--slo`: the time-per-output-token goal, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_tpot_ms: Option<f64>,
    /// The server family's rule for the tokens of a cached prefix it recomputes anyway.
    pub allowance_rule: String,
}

/// Why a request reused less than the trace lets it: named only with the evidence, which
/// `cause_evidence` states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReuseCause {
    /// The prefix was pushed out: tokens written to the cache since it was last used
    /// exceed the server's KV pool, or more other prompts than the server has slots ran
    /// since.
    Eviction,
    /// Behind a router: the worker that served the request never held the prefix.
    OtherWorker,
    /// The cached count stops exactly where the session's previous prompt ended (the
    /// answer in between was not reused: a template or client rewriting the turn).
    Boundary,
    /// A long gap since the prefix was last used, without pool or slot pressure.
    Idle,
}

impl ReuseCause {
    /// The name as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            ReuseCause::Eviction => "eviction",
            ReuseCause::OtherWorker => "other_worker",
            ReuseCause::Boundary => "boundary",
            ReuseCause::Idle => "idle",
        }
    }
}

/// One replayed request (`sample.replay`): its place in the trace, when it was due and
/// sent, and the proof of its reuse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ReplayInfo {
    /// Its index in the trace (stable across runs and resumes).
    pub index: u64,
    /// Its session, where the trace has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Its position in its session, from 0.
    pub turn: u32,
    /// When it was due, ms after the replay started.
    pub scheduled_ms: f64,
    /// When it was sent, ms after the replay started.
    pub sent_ms: f64,
    /// `sent_ms − scheduled_ms`: how late the client sent it (queueing in the client
    /// shows here, never as a stretched schedule).
    pub lateness_ms: f64,
    /// Prompt tokens the trace asks for (the server's own count is `prompt_tokens`).
    pub input_tokens: u64,
    /// Output tokens the trace asks for.
    pub output_tokens: u64,
    /// Tokens of this request's leading blocks that requests of this run answered before
    /// it was sent also held (the prefix a perfect cache reuses).
    pub shared_prefix_tokens: u64,
    /// The least cached count that proves that reuse: `shared_prefix_tokens` less the
    /// tokens the family recomputes anyway (`allowance`, rule in the header).
    pub expected_reuse: u64,
    /// Tokens of the shared prefix the server family recomputes anyway.
    pub allowance: u64,
    /// `expected_reuse − cached_tokens` when the server reused less (flag `reuse_short`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<u64>,
    /// The likely cause of a shortfall, where evidence names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<ReuseCause>,
    /// The evidence for `cause` (or why none could be named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause_evidence: Option<String>,
    /// The earlier request whose answer last held the shared prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<u64>,
    /// Ms between that answer and this request's send.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<f64>,
    /// Behind a router: the worker that served it, where it could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}
