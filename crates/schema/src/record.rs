//! The results file: JSON Lines, one typed [`Line`] per line — a `run` header, then `sample`
//! lines as they are measured (each flushed to disk), `point` lines when a context is done,
//! `resume` markers and an `end` line. Written and read only through this module.
//! Schema: `docs/results-schema.md`.

pub mod replay;
pub mod steps_along;
pub mod warm_plan;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::RecordError;

/// Version of the line format; bump on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One line of a results file, tagged by `type`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Line {
    /// The header: configuration, server, corpus, host.
    Run(Box<RunHeader>),
    /// One measured (or failed) request.
    Sample(Box<Sample>),
    /// A context point is done: how many repetitions and why it stopped.
    Point(Box<PointRecord>),
    /// A later session continued this file (`--resume`).
    Resume(ResumeRecord),
    /// The sweep ended (completely or not).
    End(EndRecord),
    /// A line type this version does not know (written by a newer ctxbench); skipped.
    #[serde(other)]
    Unknown,
}

/// Defines a string-valued enum that reads any string: known names become variants, the
/// rest `Other`, so files written by a newer ctxbench still read.
macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $var,)*
            /// A value this version does not know (written by another ctxbench version).
            Other(String),
        }
        impl $name {
            /// The name as written in results files.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$var => $s,)*
                    $name::Other(s) => s,
                }
            }
        }
        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($s => $name::$var,)*
                    o => $name::Other(o.to_owned()),
                }
            }
        }
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Ok($name::from(s.as_str()))
            }
        }
    };
}

pub mod impossible;
pub use impossible::{Check, Contradiction, Impossible};

string_enum! {
    /// What a sample measured.
    Phase {
        /// A fresh prefill with no cache reuse: the table, plots and fits.
        Cold = "cold",
        /// Decode at depth: the cold sample's prefix reused on purpose; summarised apart.
        Warm = "warm",
        /// A retrieval check (`--needle`): a cold prompt holding a fact at a stated depth;
        /// never in the speed summaries.
        Needle = "needle",
        /// `--mode append`: N new tokens after a cached prefix of L tokens, reuse proven
        /// by the cached count (`warm`); summarised apart.
        Append = "append",
        /// `--mode append` and `tiers`: the request that put the prefix in the cache (a
        /// cold prefill of L, never summarised).
        Prime = "prime",
        /// `--mode conversation`: one turn of a growing conversation.
        Turn = "turn",
        /// `--mode tiers`: a request served from a stated cache tier (`warm.tier`).
        Tier = "tier",
        /// `ctxbench replay`: one request of a trace, its reuse proven against what the
        /// trace lets it reuse (`replay`); summarised by the replay report only.
        Replay = "replay",
    }
}

string_enum! {
    /// What a sample's `output_fingerprint` hashes.
    FingerprintOf {
        /// The generated token ids, from the stream (llama.cpp `tokens`).
        TokenIds = "token_ids",
        /// The generated text: the protocol streams no ids.
        Text = "text",
    }
}

string_enum! {
    /// Outcome of a needle check.
    NeedleVerdict {
        /// The answer holds the value.
        Pass = "pass",
        /// The server answered, without the value.
        Fail = "fail",
        /// The request failed: nothing was seen, so neither pass nor fail.
        Error = "error",
        /// The server answered, but this protocol shows no answer text (SGLang's native
        /// stream): nothing was seen, so neither pass nor fail.
        Unseen = "unseen",
        /// The prompt missed its length or structure (question whole at the end, the fact
        /// at its depth): a test of the prompt, not of the model, so neither pass nor fail.
        Excluded = "excluded",
    }
}

/// A needle check: the fact placed in the prompt and what the server answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeedleCheck {
    /// Depth of the fact in the prompt, percent of the filler before it.
    pub depth_pct: u32,
    /// The value the fact states and the answer must hold.
    pub value: String,
    /// Index of the fact's first token in the prompt sent.
    pub fact_at: u64,
    /// Tokens of the fact.
    pub fact_tokens: u64,
    /// Tokens of the question that ends the prompt.
    pub question_tokens: u64,
    /// The generated answer, as text (`None` when the request failed).
    pub answer: Option<String>,
    /// Pass, fail, or error.
    pub verdict: NeedleVerdict,
}

// Not derived: `string_enum!` serves enums without a default too.
#[allow(clippy::derivable_impls)]
impl Default for Phase {
    fn default() -> Self {
        Phase::Cold
    }
}

string_enum! {
    /// How a sample was timed.
    Method {
        /// Streamed, timestamps as bytes arrive.
        Stream = "stream",
        /// Two non-streamed requests of different lengths (`--method two-point`).
        TwoPoint = "two-point",
    }
}

// Not derived: `string_enum!` serves enums without a default too.
#[allow(clippy::derivable_impls)]
impl Default for Method {
    fn default() -> Self {
        Method::Stream
    }
}

string_enum! {
    /// A warning attached to a sample.
    Flag {
        /// Reuse past the nonce (`cached_tokens > nonce_end`): not a cold prefill.
        Contaminated = "contaminated",
        /// `cached_tokens > 0` but no further than the nonce's end: only the start every
        /// prompt shares (BOS, a template's prefix) came from the cache; the sample is cold.
        CachedBeforeNonceEnd = "cached_before_nonce_end",
        /// The server reported no cached-token count.
        CacheUnverified = "cache_unverified",
        /// The server-reported prompt length is off the target.
        LengthMismatch = "length_mismatch",
        /// The server reported no prompt length.
        LengthUnreported = "length_unreported",
        /// Fewer output tokens than asked for.
        ShortOutput = "short_output",
        /// No generated token arrived.
        NoTokens = "no_tokens",
        /// Two-point: t_B ≤ t_A or n_B ≤ n_A, no decode rate.
        TwoPointInverted = "two_point_inverted",
        /// A warm sample whose prefix was not reused by the server.
        WarmPrefixNotReused = "warm_prefix_not_reused",
        /// Tokens arrived in a burst (client descheduled, buffering proxy): no decode rate.
        CoalescedTokens = "coalesced_tokens",
        /// The cache flush before this sample failed.
        FlushFailed = "flush_failed",
        /// `/metrics` could not be read around this sample.
        MetricsUnavailable = "metrics_unavailable",
        /// No cached-token count, and a TTFT far below the run's own cold samples: a prefix
        /// cache served it (rule in `cachehit`).
        SuspectedCacheHit = "suspected_cache_hit",
        /// The prompt count came from a non-streamed repeat (the stream carried no usage).
        PromptTokensFromRepeat = "prompt_tokens_from_repeat",
        /// The output count is the number of token-carrying events (no usage in the stream).
        OutputTokensFromEvents = "output_tokens_from_events",
        /// The client's decode rate differs from the server's own by more than
        /// `sample::DISAGREE_MARGIN` (a token read late, a stalled client): its decode is
        /// left out of decode summaries, its TTFT kept.
        ClientServerDisagree = "client_server_disagree",
        /// A warm sample whose greedy output differs from its cold sample's (same prompt):
        /// the server is not deterministic at this depth.
        Nondeterministic = "nondeterministic",
        /// Concurrent wave: this request waited for a slot (its first token came after
        /// another request of the wave had finished, or the server reported a long queue).
        Queued = "queued",
        /// Concurrent wave: the window where all requests decoded at once was too short to
        /// time, so no concurrent rate is reported.
        NoOverlap = "no_overlap",
        /// Concurrent wave: the server preempted (SGLang: retracted) a request to make room
        /// in its KV cache and recomputed it later — SGLang's `meta_info.num_retractions` of
        /// this request, or vLLM's `vllm:num_preemptions_total` rising during the wave (which
        /// cannot say which request, so every request of that wave is flagged).
        Preempted = "preempted",
        /// Another client's request ran on the server while this sample was measured (the
        /// server said it was busy right after, a slot other than this sample's took a task,
        /// or its request counters rose by more than this sample explains; see `idle`): its
        /// timings include foreign work, so it is kept out of every summary.
        ForeignLoad = "foreign_load",
        /// The server was still busy when `--idle-wait` ran out, so the sample was measured
        /// anyway (and is `foreign_load` too).
        IdleWaitExpired = "idle_wait_expired",
        /// Every token arrived in one burst at the end of the stream (the server or a proxy
        /// held the stream back; rule in `sample::held_back`): the first token's arrival
        /// times the whole generation, so the sample has no TTFT and no decode rate, only
        /// its end-to-end time.
        HeldBackStream = "held_back_stream",
        /// A warm sample (append, turn, tier) whose cached count does not reach its
        /// cached prefix (less the tokens the server always recomputes, `warm.allowance`):
        /// the prefix was recomputed, wholly or partly; kept out of the warm summaries.
        CacheMiss = "cache_miss",
        /// A retention append whose foreign traffic stopped short of its planned pressure (a
        /// foreign prompt refused, failed, or not counted whole by the server): kept, its
        /// `warm.retention.foreign_tokens` says what went through.
        ForeignShort = "foreign_short",
        /// The client's timings contradict the server's own for the same request: a first
        /// token before the server finished the prompt, a last token before it finished
        /// decoding, or more token events than tokens it generated (rule in
        /// `sample::impossible`; both numbers in `impossible`). The sample has no TTFT,
        /// prefill or decode figure and is kept out of every summary and fit.
        ImpossibleTiming = "impossible_timing",
        /// A replayed request whose cached count is below what its leading blocks, already
        /// answered in this run, prove reusable (`replay.expected_reuse`); the shortfall and
        /// the likely cause are in `replay`.
        ReuseShort = "reuse_short",
        /// A replayed request with a reusable prefix whose server reported no cached count:
        /// its reuse is not proven either way.
        ReuseUnverified = "reuse_unverified",
    }
}

string_enum! {
    /// Short machine-readable kind of a failed request.
    ErrorKind {
        /// The server could not be reached.
        Connect = "connect",
        /// The server refused the credentials.
        Unauthorized = "unauthorized",
        /// The prompt exceeded the server's context.
        ContextExceeded = "context_exceeded",
        /// Any other HTTP error status.
        Http = "http",
        /// The server reported an error inside the stream.
        InStream = "in_stream",
        /// The answer could not be parsed.
        Malformed = "malformed",
        /// The stream ended early.
        Truncated = "truncated",
        /// No byte arrived for the stall timeout.
        Stalled = "stalled",
        /// The request exceeded its timeout.
        Timeout = "timeout",
        /// The connection broke.
        Transport = "transport",
        /// The server does not support what was asked.
        Unsupported = "unsupported",
        /// The answer (or one streamed event) exceeded what ctxbench reads
        /// (`ctxbench_client::http::MAX_BODY_BYTES`).
        TooLarge = "too_large",
    }
}

string_enum! {
    /// `--flush`: when to flush the server's prefix cache (the user's choice, part of the
    /// run's identity; what a flush reported is in [`ServerInfo::flush_check`]).
    FlushChoice {
        /// Flush where the server allows it.
        Auto = "auto",
        /// Flush before every sample; stop if the server cannot.
        Always = "always",
        /// Never flush.
        Never = "never",
    }
}

/// Why a point stopped taking repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The fixed number of repetitions (no `--precision`).
    FixedReps,
    /// Both medians reached the precision target.
    PrecisionReached,
    /// `--max-reps` reached before the precision target.
    MaxReps,
    /// The point's time budget is spent.
    PointBudget,
    /// The run's time budget is spent.
    RunBudget,
    /// `--design auto` predicted this length from the fits of the measured lengths around
    /// it, within the target, instead of measuring it (no samples; see
    /// [`PointDesign::predicted`]).
    Predicted,
    /// `--design auto`: the noise model says the target cannot be reached within
    /// `--max-reps` here, so the length took the samples a `--reps 6` sweep takes and states
    /// what they reached ([`PointDesign::host_precision`]: the best `--max-reps` allows).
    OutOfReach,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::FixedReps => "fixed repetitions done",
            StopReason::PrecisionReached => "precision reached",
            StopReason::MaxReps => "--max-reps reached before the precision target",
            StopReason::PointBudget => "point time budget spent",
            StopReason::RunBudget => "run time budget spent",
            StopReason::Predicted => "predicted from the fits, not measured",
            StopReason::OutOfReach => "the target is out of reach on this host",
        })
    }
}

/// The repetition policy of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RepPolicy {
    /// Target relative CI half-width for median TTFT and decode rate; `None`: fixed reps.
    pub precision: Option<f64>,
    /// Repetitions always taken.
    pub min_reps: u32,
    /// Repetitions never exceeded.
    pub max_reps: u32,
    /// Seconds one point may take (after `min_reps`).
    pub point_budget_s: Option<f64>,
    /// Seconds the whole run may take; reached, remaining points get `min_reps` only (with
    /// `design`, one sample each).
    pub run_budget_s: Option<f64>,
    /// `--design auto`: a noise model shared across lengths decides each length's
    /// repetitions for `precision` (absent: each point on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<DesignMode>,
    /// `--precision-of pNN`: the quantile (0.9) whose distribution-free 95% interval, of TTFT
    /// and of step time, `precision` bounds (absent: the median's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<f64>,
}

/// `--design`: how the repetitions of a `--precision` sweep are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesignMode {
    /// The designed sweep: cheap lengths first, a noise model pooled over lengths, each
    /// length measured until every figure's interval is within the precision.
    Auto,
}

impl RepPolicy {
    /// A fixed number of repetitions.
    pub fn fixed(reps: u32) -> Self {
        RepPolicy {
            precision: None,
            min_reps: reps,
            max_reps: reps,
            point_budget_s: None,
            run_budget_s: None,
            design: None,
            quantile: None,
        }
    }
}

impl fmt::Display for RepPolicy {
    /// `3 reps (fixed)`, or `3–30 reps until ±5.0%` with any budgets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reps = |n: u32| if n == 1 { "rep" } else { "reps" };
        match (self.precision, self.design, self.quantile) {
            (Some(p), None, Some(q)) => write!(
                f,
                "{}–{} reps until the {}'s 95% interval (order statistics, TTFT and step time) is within ±{:.1}%",
                self.min_reps,
                self.max_reps,
                quantile_name(q),
                p * 100.0
            )?,
            (None, _, _) => write!(f, "{} {} (fixed)", self.max_reps, reps(self.max_reps))?,
            (Some(p), Some(DesignMode::Auto), _) => write!(
                f,
                "designed (--design auto): each length's median TTFT and decode rate to ±{:.1}% at 95% from a noise model shared across lengths, at most {} reps a length",
                p * 100.0,
                self.max_reps
            )?,
            (Some(p), None, None) => write!(
                f,
                "{}–{} reps until the median's 95% CI is within ±{:.1}%",
                self.min_reps,
                self.max_reps,
                p * 100.0
            )?,
        }
        if let Some(b) = self.point_budget_s {
            write!(f, ", point budget {b} s")?;
        }
        if let Some(b) = self.run_budget_s {
            write!(f, ", run budget {b} s")?;
        }
        Ok(())
    }
}

/// A quantile's percentile name: `p90`, `p99.9`.
pub fn quantile_name(q: f64) -> String {
    let pct = q * 100.0;
    match (pct - pct.round()).abs() < 1e-9 {
        true => format!("p{}", pct.round()),
        false => format!("p{}", (pct * 1000.0).round() / 1000.0),
    }
}

/// Reads `reps` as the policy object, or as the plain count early files wrote.
fn reps_compat<'de, D: Deserializer<'de>>(d: D) -> Result<RepPolicy, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Reps {
        Policy(RepPolicy),
        Count(u32),
    }
    Ok(match Reps::deserialize(d)? {
        Reps::Policy(p) => p,
        Reps::Count(n) => RepPolicy::fixed(n),
    })
}

impl Default for RepPolicy {
    fn default() -> Self {
        RepPolicy::fixed(1)
    }
}

/// Which text prompts are made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", content = "path", rename_all = "lowercase")]
pub enum CorpusSpec {
    /// The seed's repeated sentence.
    #[default]
    Repeat,
    /// Uniformly random token ids.
    Random,
    /// The user's own text: a file, or every file of a folder.
    Path(PathBuf),
    /// `--corpus natural`: English prose found on this machine (Python's documentation,
    /// see `corpus::natural`); the resolved file.
    Natural(PathBuf),
    /// `--corpus code`: the Python standard library's source found on this machine (every
    /// `.py` file outside its test suite, in path order, see `corpus::code`); the resolved
    /// stdlib folder. Tens of MB: no context a server offers makes it wrap.
    Code(PathBuf),
}

impl CorpusSpec {
    /// A description for reports, naming synthetic text as such.
    pub fn label(&self) -> String {
        match self {
            CorpusSpec::Repeat => "repeat (synthetic: inflates speculative acceptance)".to_owned(),
            CorpusSpec::Random => "random token ids".to_owned(),
            CorpusSpec::Path(p) => format!("text from {}", p.display()),
            CorpusSpec::Natural(p) => format!("natural text from {}", p.display()),
            CorpusSpec::Code(p) => format!("code: Python source from {}", p.display()),
        }
    }

    /// A short name for file names and tables: `repeat`, `random`, `natural`, or the
    /// file's or folder's name.
    pub fn short_name(&self) -> String {
        match self {
            CorpusSpec::Repeat => "repeat".to_owned(),
            CorpusSpec::Random => "random".to_owned(),
            CorpusSpec::Natural(_) => "natural".to_owned(),
            CorpusSpec::Code(_) => "code".to_owned(),
            CorpusSpec::Path(p) => p
                .file_stem()
                .map_or_else(|| "text".to_owned(), |s| s.to_string_lossy().into_owned()),
        }
    }
}

/// The first line of a results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunHeader {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Random id of this run, repeated on every sample.
    pub run_id: String,
    /// ctxbench's version.
    pub ctxbench_version: String,
    /// The git commit ctxbench was built from (`unknown` outside a checkout); absent in
    /// files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctxbench_commit: Option<String>,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    /// The machine ctxbench ran on.
    pub host: Host,
    /// What the user chose; `--resume` requires it unchanged, `compare` lists its changes.
    pub config: RunConfig,
    /// What the probe learned about the server.
    pub server: ServerInfo,
    /// The corpus, tokenized.
    pub corpus: CorpusInfo,
    /// What the user says this run is (`--label`, e.g. the server flag under test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The model's size in the roofline's units (weight bytes, KV bytes per token, FLOPs
    /// per token) and where they came from: the server's own words, `--model-config`, or
    /// both; absent when neither said, and in files from before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_facts: Option<crate::model::ModelFacts>,
    /// `ctxbench import`: the other tool's file this run was read from, its aggregates and
    /// the audit of what it proves; absent for a run ctxbench measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<Box<crate::imported::ImportSource>>,
}

/// Everything the user chose that shapes the measurement: the run's identity.
/// Nothing here may depend on what the server answered during the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RunConfig {
    /// `--backend` as given (`auto`, `llamacpp`, …).
    pub backend_requested: String,
    /// The protocol used.
    pub backend: String,
    /// The server's base URL (credentials removed).
    pub url: String,
    /// The model requested or detected.
    pub model: Option<String>,
    /// Context lengths measured, small first.
    pub contexts: Vec<u64>,
    /// Output tokens per request (`--output-tokens`).
    pub output_tokens: u32,
    /// Repetitions per point.
    #[serde(deserialize_with = "reps_compat")]
    pub reps: RepPolicy,
    /// `--corpus`.
    pub corpus: CorpusSpec,
    /// `--seed`.
    pub seed: u64,
    /// The per-request cache switch was used (`--cache-bypass`, where the API has one).
    pub cache_bypass: bool,
    /// `--nonce`: each prompt starts with unique tokens.
    pub nonce: bool,
    /// Tokens of that nonce.
    pub nonce_tokens: u32,
    /// `--length-tolerance`: prompt tokens the server may count off the target.
    pub length_tolerance: u64,
    /// Relative tolerance on top (Ollama's calibrated text prompts).
    pub length_tolerance_pct: f64,
    /// `--method`.
    pub method: Method,
    /// `--two-point-tokens` A and B (two-point method only).
    pub two_point_tokens: Option<(u32, u32)>,
    /// `--decode-samples`: warm decode samples after each cold one.
    pub decode_samples: u32,
    /// `--flush`. Files from before 0.2 recorded what the first flush answered here.
    pub flush: Option<FlushChoice>,
    /// Prometheus endpoint scraped around each sample (credentials removed).
    pub metrics_url: Option<String>,
    /// `sweep --server-cmd`: the command that started the server, `{port}` left open (each
    /// run of a variant gets its own port; the URL says which). Part of the run's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cmd: Option<String>,
    /// `sweep --server-cmd --spec-flags`: the draft length K this variant ran with (0: the
    /// server without speculation's flags). What a speculation schedule is keyed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_k: Option<u32>,
    /// `--prompt-seed`: prompts (nonces included) are drawn from this seed, so another run
    /// with the same seed sends the same prompts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_seed: Option<u64>,
    /// `--needle-depths` when `--needle` was given: depths (percent) of the needle checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needle_depths: Option<Vec<u32>>,
    /// `--concurrency`: requests sent together at each context (absent: 1, one at a time).
    #[serde(default, skip_serializing_if = "one_at_a_time")]
    pub concurrency: Vec<u32>,
    /// `--mode append|conversation|tiers`: the warm measurement (absent: the cold sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<warm_plan::WarmConfig>,
    /// `--prompts K`: distinct prompts (corpus windows) per context, each repeated; `reps`
    /// then counts samples per point (K × repetitions per prompt). Absent: every
    /// repetition reads its own window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<u32>,
    /// `ctxbench replay`: the trace, its timing and the salt of its prompts (absent: a
    /// sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<replay::ReplayConfig>,
}

/// Whether a concurrency list means today's one-request-at-a-time sweep (not written).
fn one_at_a_time(c: &[u32]) -> bool {
    c.is_empty() || c == [1]
}

impl RunConfig {
    /// The concurrency levels measured (`[1]` for a file without the field).
    pub fn concurrency_levels(&self) -> Vec<u32> {
        match self.concurrency.is_empty() {
            true => vec![1],
            false => self.concurrency.clone(),
        }
    }
}

/// What the probe (and the warmup) learned about the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ServerInfo {
    /// The server's base URL (credentials removed).
    pub url: String,
    /// The protocol chosen.
    pub backend: String,
    /// Why that protocol was chosen.
    pub backend_reason: String,
    /// Server software, as identified (`llama.cpp`, `openai-compatible`).
    pub server_kind: String,
    /// Version/build string, if the server gives one.
    pub server_version: Option<String>,
    /// Model name or path.
    pub model: Option<String>,
    /// Largest prompt + output one request can hold.
    pub max_context: Option<u64>,
    /// Where `max_context` came from.
    pub max_context_source: Option<String>,
    /// Parallel slots (llama.cpp).
    pub total_slots: Option<u64>,
    /// Vocabulary size, when reported.
    pub n_vocab: Option<u64>,
    /// How the server's `/tokenize` is called (`llamacpp`, `vllm`); `None`: no tokenizer.
    pub tokenize: Option<String>,
    /// Prompts can be sent as token ids.
    pub token_id_prompts: bool,
    /// The API has a per-request "do not reuse the cache" switch.
    pub cache_bypass: bool,
    /// Cached-token counts are reported per request (confirmed by the warmup).
    pub reports_cached_tokens: Option<bool>,
    /// Server-side timings are reported per request (confirmed by the warmup).
    pub reports_timings: Option<bool>,
    /// Tokens the server adds to a token-id prompt (BOS), measured by the warmup.
    pub server_added_tokens: Option<u64>,
    /// Prometheus `/metrics` answered.
    pub metrics: bool,
    /// KV-cache pool size in tokens, where the server says.
    pub kv_pool_tokens: Option<u64>,
    /// How prompts of exact length are made (`token ids`, or text re-checked by tokenizing).
    pub prompt_method: String,
    /// How the prefix cache can be flushed (`None`: no endpoint for this server).
    pub flush: Option<String>,
    /// What the flush before the sweep answered (e.g. slots erased and tokens freed);
    /// `None`: no flush. Varies run to run, so not part of the run's identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flush_check: Option<String>,
    /// How ctxbench told whether the server was idle before and after each sample (what it
    /// read, and the longest wait), or why the idle state could not be checked; absent in
    /// files from before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_check: Option<String>,
    /// The server flags that raise how many requests run at once, as the server's family
    /// names them (the capacity map's advice); absent in files from before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_flags: Option<CapacityFlags>,
    /// Whether the flush tried before the sweep works here: `true` (the cache is flushed
    /// before every sample), `false` (refused or no endpoint: nothing is flushed); absent
    /// when none was tried (`--flush never`, files from before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_available: Option<bool>,
    /// The tokenizer endpoint pair used for exact text prompts (generic OpenAI servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TokenizerInfo>,
    /// The OpenAI protocol's generation path (`/v1/completions` or `/v1/chat/completions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The server flag that would make it report cached-token counts, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens_hint: Option<String>,
    /// Where per-request speculative statistics come from (`None`: not exposed).
    pub spec_stats: Option<String>,
    /// A missing `cached_tokens` means 0 (SGLang with `--enable-cache-report`).
    pub cached_missing_means_zero: bool,
    /// Capability notes, each naming the server flag that would enable what is missing.
    pub notes: Vec<String>,
    /// Optional request fields the server refused, left out of every request (see notes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_fields: Vec<String>,
    /// What the token-id test request showed (`None`: not tested): ids sent and the
    /// server's own count of them, or why they were refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id_test: Option<String>,
    /// The endpoint is a router or gateway in front of several workers (absent: one server,
    /// or files from before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterInfo>,
}

/// A router or gateway that fronts several workers, as the probe recognised it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RouterInfo {
    /// `vllm-router`, `sglang-router` or `router` (recognised only by a worker list).
    pub kind: String,
    /// What showed it is a router.
    pub evidence: String,
    /// The workers' base URLs: the router's own list, then `--worker` URLs it did not list.
    pub workers: Vec<String>,
    /// The workers' server family, as their own answers show it (`None`: not known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_family: Option<String>,
    /// What being behind a router means for each check, said once.
    pub meaning: String,
    /// The router's own fan-out `/flush_cache`, judged per worker (empty: not tried).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fanout_flush: Vec<WorkerFlush>,
    /// ctxbench's own flush of each worker before the sweep (empty: not tried).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worker_flush: Vec<WorkerFlush>,
}

/// One worker's verdict on a flush.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WorkerFlush {
    /// The worker's base URL.
    pub worker: String,
    /// The worker flushed.
    pub ok: bool,
    /// What it answered (tokens erased, or the error).
    pub detail: String,
}

/// A sample measured through a router: which worker served it and what each worker's flush
/// before it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct FleetSample {
    /// The worker that served the sample, when the workers' counters tell it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
    /// How `served_by` was told, or why it could not be.
    pub how: String,
    /// Each worker's flush before the sample (empty: none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flush: Vec<WorkerFlush>,
    /// A concurrency wave: how many of its requests each worker served (from the workers'
    /// generated-token counters; the same on every sample of the wave; empty: not a wave).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub wave_spread: BTreeMap<String, u64>,
}

/// A tokenizer endpoint pair of a generic OpenAI-compatible server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TokenizerInfo {
    /// The request body shape.
    #[serde(default)]
    pub dialect: String,
    /// The tokenize path that answered (e.g. `/extras/tokenize`).
    pub tokenize_path: String,
    /// Its detokenize counterpart.
    pub detokenize_path: String,
    /// Special tokens (BOS) the endpoint adds to every text, stripped from its answers.
    #[serde(default)]
    pub added_specials: u64,
    /// The server the pair is on when it is not the measured one (`--tokenizer-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The model named in tokenizer requests to `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The corpus prompts were cut from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct CorpusInfo {
    /// `--corpus`.
    pub spec: CorpusSpec,
    /// A description for reports, naming synthetic text as such.
    pub label: String,
    /// Tokens in the tokenized corpus.
    pub tokens: u64,
    /// The largest prompt needed more tokens than the corpus has, so it wraps around.
    pub wraps: bool,
    /// `/tokenize` requests made to tokenize it.
    pub tokenize_requests: u64,
    /// Bytes of text tokenized (text corpora: a path, natural, code); absent for the
    /// synthetic ones and in files from before it was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// FNV-1a 64 of those bytes (`fnv1a64:` and 16 hex digits): two runs measured the same
    /// text when it agrees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_hash: Option<String>,
}

/// The client machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
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
    /// Short machine-readable kind.
    pub kind: ErrorKind,
    /// What happened, for a person.
    pub message: String,
}

/// Token counts as the server reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Prompt length the server saw, cached tokens included.
    pub prompt_tokens: Option<u64>,
    /// Tokens generated.
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from a prefix cache; `None` when the server does not say.
    pub cached_tokens: Option<u64>,
    /// Of those, loaded back from host memory (SGLang HiCache's
    /// `cached_tokens_details.host`); `None` when the server does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_host_tokens: Option<u64>,
}

/// What the server reported about its own timing for one request (units in the names).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTimings {
    /// Where these numbers came from, e.g. `llamacpp.timings`.
    pub source: String,
    /// Prompt tokens computed (not cached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_n: Option<u64>,
    /// Prompt tokens reused from cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_n: Option<u64>,
    /// Prompt processing time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<f64>,
    /// Server-computed prefill rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_per_second: Option<f64>,
    /// Tokens generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_n: Option<u64>,
    /// Time from the first to the last generated token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_ms: Option<f64>,
    /// Server-computed decode rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_per_second: Option<f64>,
    /// Server-computed time per decode step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_per_token_ms: Option<f64>,
    /// Draft tokens proposed (speculative decoding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u64>,
    /// Draft tokens accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u64>,
    /// Time spent queued before scheduling (SGLang `queue_time`, converted from s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    /// Whole request as the server timed it (SGLang `e2e_latency`, converted from s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl ServerTimings {
    /// Prompt plus generation time: how long the server was busy with the request.
    pub fn busy_ms(&self) -> f64 {
        self.prompt_ms.unwrap_or(0.0) + self.predicted_ms.unwrap_or(0.0)
    }
}

/// Speculative-decoding counts for one request, as the server exposes them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecStats {
    /// Where the numbers came from (`sglang.meta_info`, `llamacpp.timings`, `vllm.metrics`).
    pub source: String,
    /// Verify (target-model) steps that checked drafts.
    pub verify_steps: Option<u64>,
    /// Draft tokens proposed.
    pub draft_tokens: Option<u64>,
    /// Draft tokens accepted.
    pub accepted_tokens: Option<u64>,
    /// Mean tokens produced per verify step, bonus token included.
    pub accept_length: Option<f64>,
    /// Accepted ÷ proposed drafts.
    pub accept_rate: Option<f64>,
}

impl SpecStats {
    /// Fills the derived ratios the server did not send: rate = accepted ÷ proposed,
    /// length = 1 + accepted ÷ verify steps (each step yields its accepted drafts plus one).
    pub fn derive(mut self) -> Self {
        if self.accept_rate.is_none() {
            if let (Some(a), Some(d)) = (self.accepted_tokens, self.draft_tokens) {
                if d > 0 {
                    self.accept_rate = Some(a as f64 / d as f64);
                }
            }
        }
        if self.accept_length.is_none() {
            if let (Some(a), Some(v)) = (self.accepted_tokens, self.verify_steps) {
                if v > 0 {
                    self.accept_length = Some(1.0 + a as f64 / v as f64);
                }
            }
        }
        self
    }
}

/// The two-point method's raw numbers for one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TwoPoint {
    /// Tokens request A generated (server count).
    pub a_tokens: u64,
    /// Tokens request B generated.
    pub b_tokens: u64,
    /// Request A, send to last byte.
    pub t_a_ms: f64,
    /// Request B, send to last byte.
    pub t_b_ms: f64,
    /// Why no decode rate was computed (`null`: it was).
    #[serde(default)]
    pub reason: Option<String>,
    /// Server busy time (prompt + generation) of request A, counted in the run's efficiency;
    /// `null` when the server reports no timings.
    #[serde(default)]
    pub a_server_busy_ms: Option<f64>,
}

/// One measured (or failed) request. `Default` is for building samples in tests.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Sample {
    /// The run this belongs to.
    pub run_id: String,
    /// Target context length (prompt tokens as the server counts them).
    pub context_tokens: u64,
    /// Repetition index at this context, from 0.
    pub rep: u32,
    /// `cold` (fresh prefill) or `warm` (decode at depth).
    pub phase: Phase,
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
    /// Of `cached_tokens`, loaded back from the server's host-memory tier (SGLang HiCache's
    /// `meta_info.cached_tokens_details.host`); absent when the server does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_host_tokens: Option<u64>,
    /// The server reported a cached-token count, so cold prefill is proven.
    pub cache_verified: bool,
    /// Tokens the server saw up to the end of the nonce (BOS or a chat template's prefix,
    /// then the nonce): a cached count no larger than this reused only the start every
    /// prompt shares, so the rest was prefilled. `None`: no nonce (any cached token counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce_end: Option<u64>,
    /// Reuse reached past the nonce (`cached_tokens > nonce_end`): not a cold prefill;
    /// excluded from summaries.
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
    /// Warnings about this sample.
    #[serde(default)]
    pub flags: Vec<Flag>,
    /// What the server reported about its own timing.
    pub server: Option<ServerTimings>,
    /// How it was measured.
    #[serde(default)]
    pub method: Method,
    /// Speculative decoding: mean tokens per verify step, bonus token included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_length: Option<f64>,
    /// Speculative decoding: accepted drafts ÷ proposed drafts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_rate: Option<f64>,
    /// Speculative decoding: verify steps of this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_verify_steps: Option<u64>,
    /// Speculative decoding: the server's own count of the steps that verified a draft
    /// (`spec_decode_num_drafts` delta); `spec_verify_steps` also counts the steps without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_steps: Option<u64>,
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
    pub metrics: Option<BTreeMap<String, f64>>,
    /// The cache flush done before this sample, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush: Option<String>,
    /// Two-point method: the two requests' numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub two_point: Option<TwoPoint>,
    /// FNV-1a 64-bit hash of the whole generated output, `fnv1a64:` and 16 hex digits
    /// (see `fingerprint`); equal outputs have equal fingerprints on every platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_fingerprint: Option<String>,
    /// What the fingerprint hashes: token ids, or text where the stream carries no ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint_of: Option<FingerprintOf>,
    /// The first generated token ids (at most `fingerprint::KEPT_IDS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ids: Option<Vec<u32>>,
    /// Needle samples: the fact, the answer and the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle: Option<NeedleCheck>,
    /// Requests sent together in this sample's wave (`--concurrency`; absent: 1, no wave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// The wave's number within its cell (context × concurrency); its `rep` is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<u32>,
    /// What the wave measured, seen from this request and for the whole wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_stats: Option<WaveStats>,
    /// How long ctxbench waited for the server to be idle before sending this sample, in ms
    /// (`0`: idle at the first reading; absent: the idle state was not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_wait_ms: Option<f64>,
    /// What showed that another client's work overlapped this sample (with the
    /// `foreign_load` flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_load: Option<String>,
    /// With the `impossible_timing` flag: which of the client's timings contradict the
    /// server's own, with both numbers, and the event taken for the first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impossible: Option<Impossible>,
    /// Warm modes: the cached prefix, the new tokens and how the reuse was proven.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<warm_plan::WarmInfo>,
    /// `--prompts K`: which of the point's K prompts this sample sent (`rep mod K`); the
    /// same index is the same body text (the nonce differs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_index: Option<u32>,
    /// Token offset in the corpus where the prompt's body starts (after the nonce).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus_offset: Option<u64>,
    /// Speculative decoding, where the server counts it per draft position (vLLM's
    /// `spec_decode_num_accepted_tokens_per_pos`): accepted drafts at position 0, 1, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_per_position: Option<Vec<u64>>,
    /// Speculative decoding: verify steps that carried a draft (vLLM's
    /// `spec_decode_num_drafts`), the denominator of the per-position rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_drafts: Option<u64>,
    /// Speculative steps along the position in the context, from the stream's arrival
    /// gaps (absent where the stream does not show steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_steps_along: Option<steps_along::StepsAlong>,
    /// Behind a router: the worker that served this sample and the workers' flushes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSample>,
    /// `ctxbench replay`: the request's place in the trace, its schedule and the proof of
    /// its reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<replay::ReplayInfo>,
    /// Imported multi-turn results: the request's conversation and turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<crate::imported::ImportedTurn>,
}

/// One request of a concurrent wave: times relative to the wave's start (`t0`, when all its
/// requests were released together), its share of the window where all requests decoded at
/// once, and the wave's aggregate numbers (the same on every sample of the wave).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct WaveStats {
    /// This request's index in the wave, from 0.
    pub slot: u32,
    /// When this request was written, after t0.
    pub sent_ms: f64,
    /// Its first token, after t0.
    pub first_token_ms: Option<f64>,
    /// Its last token, after t0.
    pub last_token_ms: Option<f64>,
    /// Length of the window where all requests of the wave were decoding (latest first
    /// token to earliest last token); `null`: they never all decoded at once.
    pub window_ms: Option<f64>,
    /// Token-carrying events of this request inside the window.
    pub window_tokens: Option<u64>,
    /// This request's decode rate inside the window.
    pub window_decode_tokens_per_s: Option<f64>,
    /// This request's time per step inside the window.
    pub window_ms_per_step: Option<f64>,
    /// Sum over the wave of the in-window decode rates: what the server delivered.
    pub aggregate_decode_tokens_per_s: Option<f64>,
    /// c × context / (latest first token − t0): prompt tokens the server took in per second.
    pub aggregate_prefill_tokens_per_s: Option<f64>,
    /// Latest minus earliest first token of the wave.
    pub ttft_spread_ms: Option<f64>,
    /// Output tokens of the wave over its first-to-last token span: the throughput also when
    /// requests queued (no common window).
    pub wave_output_tokens_per_s: Option<f64>,
    /// Slot of a request that finished decoding before this one's first token (it waited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_for: Option<u32>,
}

impl Sample {
    /// A cold, streamed sample with nothing measured yet: the measuring loop fills it in.
    pub fn blank(
        run_id: &str,
        context: u64,
        rep: u32,
        sent: u64,
        at: String,
        nonce_end: Option<u64>,
    ) -> Sample {
        Sample {
            run_id: run_id.to_owned(),
            context_tokens: context,
            rep,
            phase: Phase::Cold,
            status: Status::Ok,
            error: None,
            at,
            prompt_tokens_sent: sent,
            prompt_tokens: None,
            length_ok: None,
            cached_tokens: None,
            cached_host_tokens: None,
            cache_verified: false,
            nonce_end,
            contaminated: false,
            ttft_ms: None,
            prefill_tokens_per_s: None,
            decode_tokens_per_s: None,
            ms_per_step: None,
            output_tokens: None,
            token_chunks: None,
            e2e_ms: None,
            finish_reason: None,
            flags: Vec::new(),
            server: None,
            method: Method::Stream,
            spec_accept_length: None,
            spec_accept_rate: None,
            spec_verify_steps: None,
            spec_draft_steps: None,
            spec_draft_tokens: None,
            spec_accepted_tokens: None,
            spec_source: None,
            ms_per_verify_step: None,
            metrics: None,
            flush: None,
            two_point: None,
            output_fingerprint: None,
            fingerprint_of: None,
            output_ids: None,
            needle: None,
            concurrency: None,
            wave: None,
            wave_stats: None,
            idle_wait_ms: None,
            foreign_load: None,
            impossible: None,
            warm: None,
            prompt_index: None,
            corpus_offset: None,
            spec_accepted_per_position: None,
            spec_drafts: None,
            spec_steps_along: None,
            fleet: None,
            replay: None,
            turn: None,
        }
    }

    /// Stores speculative statistics; time per verify step is the decode span over the
    /// verify steps, kept apart from the per-token `ms_per_step`.
    pub fn set_spec(&mut self, spec: SpecStats) {
        self.spec_accept_length = spec.accept_length;
        self.spec_accept_rate = spec.accept_rate;
        self.spec_verify_steps = spec.verify_steps;
        self.spec_draft_tokens = spec.draft_tokens;
        self.spec_accepted_tokens = spec.accepted_tokens;
        self.spec_source = Some(spec.source);
        self.ms_per_verify_step = match (self.ms_per_step, self.output_tokens, spec.verify_steps) {
            (Some(per_token), Some(n), Some(v)) if n >= 2 && v > 0 => {
                Some(per_token * (n - 1) as f64 / v as f64)
            }
            _ => None,
        };
    }
    /// Usable for cold summaries: completed, cold (warm decode samples are summarised
    /// apart), not contaminated, of the right length, not a suspected cache hit, not
    /// overlapped by another client's work, not a held-back stream and not contradicted by
    /// the server's own timings.
    pub fn usable(&self) -> bool {
        self.status == Status::Ok
            && self.phase == Phase::Cold
            && !self.contaminated
            && self.length_ok != Some(false)
            && !self.has(&Flag::SuspectedCacheHit)
            && self.clean()
    }

    /// Neither overlapped by another client's work, nor held back, nor contradicted by the
    /// server's own timings: its timings are this request's own, and possible (cold or warm).
    pub fn clean(&self) -> bool {
        !self.has(&Flag::ForeignLoad)
            && !self.has(&Flag::HeldBackStream)
            && !self.has(&Flag::ImpossibleTiming)
    }

    /// Whether the sample carries `flag`.
    pub fn has(&self, flag: &Flag) -> bool {
        self.flags.contains(flag)
    }

    /// Server seconds this sample cost: the server's own busy time (prompt + generation, both
    /// requests of a two-point pair) where it reports one, else the request's time.
    pub fn server_s(&self) -> f64 {
        let busy = self.server.as_ref().map_or(0.0, ServerTimings::busy_ms)
            + self
                .two_point
                .as_ref()
                .and_then(|t| t.a_server_busy_ms)
                .unwrap_or(0.0);
        match busy > 0.0 {
            true => busy / 1000.0,
            false => self.e2e_ms.unwrap_or(0.0) / 1000.0,
        }
    }
}

/// The `point` line: how many repetitions a context got and why it stopped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointRecord {
    /// The run.
    pub run_id: String,
    /// Context length.
    pub context_tokens: u64,
    /// Repetitions taken (all sessions, failures included).
    pub reps: u32,
    /// Usable samples.
    pub usable: usize,
    /// Why no more repetitions were taken.
    pub stop_reason: StopReason,
    /// Relative 95% CI half-width of the median TTFT (`null`: too few samples).
    pub ttft_ci_rel: Option<f64>,
    /// Relative 95% CI half-width of the median decode rate.
    pub decode_ci_rel: Option<f64>,
    /// Concurrency of this cell (`--concurrency`; absent: 1, one request at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// What the designed sweep decided here (`--design auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<PointDesign>,
    /// `--precision-of pNN`: the percentile the precision targeted and the half-widths its
    /// intervals reached (the `*_ci_rel` fields stay the median's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<QuantileCi>,
}

/// The precision a point reached on a percentile (`--precision-of`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct QuantileCi {
    /// The quantile (0.9 for p90).
    pub q: f64,
    /// Samples its 95% interval needs (29 for p90).
    pub needed: usize,
    /// Relative half-width (wider side) of the p-quantile TTFT's 95% interval from order
    /// statistics (`null`: fewer samples than `needed`).
    pub ttft_half_width: Option<f64>,
    /// The same for the step time (ms per generated token).
    pub step_half_width: Option<f64>,
}

string_enum! {
    /// Where a designed length's intervals come from.
    IntervalBasis {
        /// The noise model pooled over the lengths (this one's spread agreed with it).
        Shared = "shared",
        /// This length's own samples: its spread was not the model's.
        Own = "own",
        /// No interval: too few samples (one sample, or no model yet).
        Unknown = "none",
        /// Predicted from the fits of the measured lengths (no samples at this length).
        Fit = "fit",
    }
}

/// The designed sweep's decision at one length, recorded on its `point` line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointDesign {
    /// The precision asked for: relative half-width of each median's 95% interval.
    pub target: f64,
    /// Samples the noise model asked for before this length's own samples were in (`null`:
    /// no model yet, or the cap cannot reach the target).
    pub planned: Option<u32>,
    /// Relative 95% half-width of the median TTFT (and of the prefill rate, L ÷ TTFT) as
    /// reached (`null`: no interval).
    pub ttft_half_width: Option<f64>,
    /// The same for the median decode rate.
    pub decode_half_width: Option<f64>,
    /// Where the intervals come from.
    pub basis: IntervalBasis,
    /// The noise model's σ of ln TTFT (relative spread) when this length was judged.
    pub model_ttft_sd: Option<f64>,
    /// Its σ of ln decode rate.
    pub model_decode_sd: Option<f64>,
    /// Degrees of freedom behind the model.
    pub model_df: Option<f64>,
    /// This length's spread was not the model's: what the check found (it was then
    /// measured on its own spread, which takes more samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regime_change: Option<String>,
    /// Why the design stopped here, in words.
    pub why: String,
    /// Server seconds spent at this length (its cold samples: the server's own busy time
    /// where it reports one, else the request's time), all sessions.
    pub server_s: f64,
    /// The length was predicted from the fits instead of measured: the prediction and
    /// where it came from (absent for a measured length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Box<Prediction>>,
    /// The target was out of reach here within `--max-reps`: the best relative half-width
    /// (the wider metric's) `--max-reps` samples would reach at this host's noise, what to
    /// ask `--precision` for (absent: within reach).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_precision: Option<f64>,
    /// This line corrects an earlier `point` line of the same length at the end of the run
    /// (the file's last line for a length is its figure): what the earlier line stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revised: Option<Box<Revision>>,
}

/// What a designed length's `point` line stated during the run, before the end of the run
/// judged it again with every sample (a later look at the noise model, or its own spread,
/// changed the interval).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Revision {
    /// The relative half-width of the median TTFT stated then.
    pub ttft_half_width: Option<f64>,
    /// The same for the decode rate.
    pub decode_half_width: Option<f64>,
    /// Where those intervals came from then.
    pub basis: IntervalBasis,
}

/// A length's figures predicted from the fits of the measured lengths (TTFT ≈ a + bL + cL²,
/// ms per output token ≈ α + βL), each with a 95% relative half-width that adds the fits'
/// model error (their worst leave-one-out miss at a measured length between two others) to
/// the noise of the measured figures they rest on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Prediction {
    /// The measured lengths the fits were made from.
    pub from_contexts: Vec<u64>,
    /// Predicted median TTFT (ms).
    pub ttft_ms: f64,
    /// Its relative half-width (noise + model error); the prefill rate's too.
    pub ttft_half_width: f64,
    /// Predicted median decode rate (tok/s).
    pub decode_tokens_per_s: f64,
    /// Its relative half-width.
    pub decode_half_width: f64,
    /// The model-error part of the TTFT half-width.
    pub ttft_model_error: f64,
    /// The model-error part of the decode half-width.
    pub decode_model_error: f64,
    /// The measured lengths whose leave-one-out miss gave the model error.
    pub checked_at: Vec<u64>,
}

/// The `resume` line: a later session continued the file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResumeRecord {
    /// The run (unchanged by resuming).
    pub run_id: String,
    /// RFC 3339 time the session started.
    pub at: String,
}

/// The `end` line: how a session of the sweep ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct EndRecord {
    /// The run.
    pub run_id: String,
    /// Wall time of this session (probe to last sample).
    pub wall_s: f64,
    /// Server busy time (prompt + generation) the server reported for this session.
    pub server_busy_s: f64,
    /// `wall_s / server_busy_s` (`null`: the server reports no timings).
    pub efficiency: Option<f64>,
    /// Samples recorded by this session.
    pub recorded: usize,
    /// Of those, failed.
    pub failed: usize,
    /// The user pressed Ctrl-C.
    pub interrupted: bool,
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
        // Append mode, so a second writer of the same file (a replay's writer thread)
        // never writes over this one's lines.
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)
            .map_err(io)?;
        let mut w = ResultsWriter {
            file,
            path: path.to_path_buf(),
            lines: 0,
        };
        w.append(&Line::Run(Box::new(header.clone())))?;
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

    /// Writes a sample line.
    pub fn sample(&mut self, s: &Sample) -> Result<(), RecordError> {
        self.append(&Line::Sample(Box::new(s.clone())))
    }

    /// Writes one JSON line and syncs it, so a crash right after loses nothing.
    pub fn append(&mut self, line: &Line) -> Result<(), RecordError> {
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
    /// Every point line, in file order (a resumed point may appear twice; the last counts).
    pub points: Vec<PointRecord>,
    /// Every session's end line.
    pub ends: Vec<EndRecord>,
    /// Every resume marker.
    pub resumes: Vec<ResumeRecord>,
    /// Bytes of a torn last line that was ignored (the writer was killed mid-line).
    pub torn_bytes: usize,
}

impl Results {
    /// The last `point` line recorded for `context`, if any.
    pub fn point(&self, context: u64) -> Option<&PointRecord> {
        self.points
            .iter()
            .rev()
            .find(|p| p.context_tokens == context)
    }
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
    let mut points = Vec::new();
    let mut ends = Vec::new();
    let mut resumes = Vec::new();
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
        match serde_json::from_str::<Line>(&line).map_err(|e| corrupt(e.to_string()))? {
            Line::Run(h) if header.is_none() => header = Some(*h),
            Line::Sample(s) => samples.push(*s),
            Line::Point(p) => points.push(*p),
            Line::End(e) => ends.push(e),
            Line::Resume(r) => resumes.push(r),
            // A second header (files concatenated by hand) and newer line types: skipped.
            Line::Run(_) | Line::Unknown => {}
        }
    }
    let header = header.ok_or(RecordError::NoHeader { path: pstr.clone() })?;
    Ok(Results {
        header,
        samples,
        points,
        ends,
        resumes,
        torn_bytes,
    })
}

/// Lists the differences between two configurations, one `key: old -> new` per line.
pub fn config_diff(old: &RunConfig, new: &RunConfig) -> Vec<String> {
    value_diff(&to_value(old), &to_value(new))
}

/// What identifies a run for `--resume`: the configuration, except that a server ctxbench
/// starts itself (`server_cmd`) gets a new port on every start, so its URLs do not count.
pub fn identity(c: &RunConfig) -> RunConfig {
    let mut c = c.clone();
    if c.server_cmd.is_some() {
        c.url = String::new();
        c.metrics_url = c.metrics_url.map(|_| String::new());
    }
    c
}

/// The server flags that raise the limits deciding how many requests run at once, in the
/// words of the server's family (`-np` for llama.cpp, `--max-num-seqs` for vLLM, …).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityFlags {
    /// Raises the number of requests run at once (parallel slots, running requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<String>,
    /// Makes the KV pool larger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_pool: Option<String>,
}

/// The client's decode rate ÷ the server's, where the server reports its own.
pub fn decode_ratio(s: &Sample) -> Option<f64> {
    let server = s.server.as_ref()?.predicted_per_second?;
    let client = s.decode_tokens_per_s?;
    (server > 0.0 && server.is_finite()).then(|| client / server)
}

/// Lists the differences between two server descriptions, leaving out what varies run to
/// run without changing the server (the URL, the probe's wording, what a flush freed).
pub fn server_diff(old: &ServerInfo, new: &ServerInfo) -> Vec<String> {
    let strip = |s: &ServerInfo| {
        let mut v = to_value(s);
        if let Some(o) = v.as_object_mut() {
            for k in [
                "url",
                "backend_reason",
                "flush_check",
                "idle_check",
                "capacity_flags",
            ] {
                o.remove(k);
            }
        }
        v
    };
    value_diff(&strip(old), &strip(new))
}

fn to_value<T: Serialize>(t: &T) -> Value {
    // Serializing plain data structs to a Value cannot fail (string keys, no maps of
    // non-string keys).
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn value_diff(old: &Value, new: &Value) -> Vec<String> {
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

    fn header() -> RunHeader {
        RunHeader {
            schema: SCHEMA_VERSION,
            run_id: "r1".into(),
            ctxbench_version: "0".into(),
            ctxbench_commit: None,
            started_at: "t".into(),
            host: Host::current(),
            config: RunConfig {
                reps: RepPolicy::fixed(3),
                ..RunConfig::default()
            },
            server: ServerInfo::default(),
            corpus: CorpusInfo::default(),
            label: None,
            model_facts: None,
            imported: None,
        }
    }

    #[test]
    fn torn_last_line_is_tolerated_and_mended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let mut w = ResultsWriter::create(&p, &header()).unwrap();
        w.append(&Line::Resume(ResumeRecord {
            run_id: "r1".into(),
            at: "t".into(),
        }))
        .unwrap();
        drop(w);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"type":"sample","run_"#).unwrap();
        drop(f);
        let r = read_results(&p, false).unwrap();
        assert_eq!(r.torn_bytes, 22);
        assert_eq!(r.resumes.len(), 1);
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
    fn newer_files_still_read_unknown_lines_fields_and_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        drop(ResultsWriter::create(&p, &header()).unwrap());
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(
            br#"{"type":"campaign","x":1}
{"type":"sample","run_id":"r1","context_tokens":1024,"rep":0,"phase":"hot","status":"ok","at":"t","prompt_tokens_sent":1024,"prompt_tokens":1024,"length_ok":true,"cached_tokens":0,"cache_verified":true,"contaminated":false,"ttft_ms":1.0,"prefill_tokens_per_s":null,"decode_tokens_per_s":null,"ms_per_step":null,"output_tokens":1,"token_chunks":1,"e2e_ms":1.0,"finish_reason":null,"flags":["future_flag","contaminated"],"server":null,"method":"batch","new_field":[1,2]}
"#,
        )
        .unwrap();
        let r = read_results(&p, false).unwrap();
        let s = &r.samples[0];
        assert_eq!(s.phase, Phase::Other("hot".into()));
        assert_eq!(s.method, Method::Other("batch".into()));
        assert_eq!(
            s.flags,
            vec![Flag::Other("future_flag".into()), Flag::Contaminated]
        );
        assert!(!s.usable(), "an unknown phase is not cold");
    }

    #[test]
    fn a_designed_policy_says_so_and_a_file_without_the_field_reads_as_before() {
        let mut p = RepPolicy::fixed(2);
        p.precision = Some(0.05);
        p.max_reps = 30;
        p.design = Some(DesignMode::Auto);
        assert!(p.to_string().starts_with("designed (--design auto)"), "{p}");
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(v["design"], "auto");
        let old: RepPolicy = serde_json::from_str(
            r#"{"precision":0.05,"min_reps":3,"max_reps":30,"point_budget_s":null,"run_budget_s":null}"#,
        )
        .unwrap();
        assert_eq!(old.design, None);
        assert!(!serde_json::to_string(&old).unwrap().contains("design"));
    }

    #[test]
    fn a_plain_rep_count_reads_as_a_fixed_policy() {
        let c: RunConfig = serde_json::from_str(r#"{"reps":3}"#).unwrap();
        assert_eq!(c.reps, RepPolicy::fixed(3));
        assert_eq!(c.reps.to_string(), "3 reps (fixed)");
    }

    #[test]
    fn config_diff_names_changed_keys_exactly() {
        let old = header().config;
        let mut new = old.clone();
        new.reps = RepPolicy::fixed(5);
        new.nonce = true;
        assert_eq!(
            config_diff(&old, &new),
            vec![
                "  nonce: false -> true",
                "  reps.max_reps: 3 -> 5",
                "  reps.min_reps: 3 -> 5"
            ]
        );
    }

    #[test]
    fn what_a_flush_freed_is_not_a_server_difference() {
        let a = ServerInfo {
            flush_check: Some("llama.cpp slot erase (2 slot(s), 4103 tokens erased)".into()),
            ..ServerInfo::default()
        };
        let b = ServerInfo {
            flush_check: Some("llama.cpp slot erase (2 slot(s), 8223 tokens erased)".into()),
            ..ServerInfo::default()
        };
        assert!(server_diff(&a, &b).is_empty());
    }
}
