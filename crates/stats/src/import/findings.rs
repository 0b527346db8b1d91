//! What an import found about its source, as facts: the cache state per request, the prompt
//! lengths, the warmup. crates/render words them into the audit (`ctxbench import` prints it
//! and the results file records it); nothing here is prose.

use ctxbench_schema::imported::ImportedMetric;
use ctxbench_schema::record::Sample;

/// One point's prompt lengths as the tool summarised them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthRange {
    /// Shortest prompt (tokens, as the tool wrote it).
    pub min: f64,
    /// Longest prompt.
    pub max: f64,
    /// The point's length: the mean, rounded.
    pub mean: u64,
}

impl LengthRange {
    /// The range a `prompt_tokens` metric states (0 where it gives no min or max).
    pub fn of(m: &ImportedMetric, mean: u64) -> Self {
        LengthRange {
            min: m.min.unwrap_or(0.0),
            max: m.max.unwrap_or(0.0),
            mean,
        }
    }
}

/// The requests that read from the prefix cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheHits {
    /// Requests whose cached-token count is known.
    pub known: usize,
    /// Each (cached tokens, prompt tokens) seen on a hit, with how many requests had it, in
    /// the order first seen.
    pub kinds: Vec<(u64, u64, usize)>,
}

impl CacheHits {
    /// The hits among `samples`.
    pub fn of(samples: &[Sample]) -> Self {
        let mut out = CacheHits::default();
        for s in samples {
            let Some(c) = s.cached_tokens else { continue };
            out.known += 1;
            if c == 0 {
                continue;
            }
            let p = s.prompt_tokens.unwrap_or(0);
            match out.kinds.iter_mut().find(|(x, y, _)| (*x, *y) == (c, p)) {
                Some((_, _, n)) => *n += 1,
                None => out.kinds.push((c, p, 1)),
            }
        }
        out
    }

    /// How many requests read from the cache.
    pub fn hits(&self) -> usize {
        self.kinds.iter().map(|(_, _, n)| n).sum()
    }
}

/// One `vllm bench` file's prompt lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum VllmLengths {
    /// From `--save-detailed`'s `input_lens`: the shortest and longest.
    PerRequest {
        /// Shortest.
        lo: u64,
        /// Longest.
        hi: u64,
    },
    /// Without it: `total_input_tokens / completed`.
    Mean(f64),
}

/// One turn of vLLM's multi-turn benchmark: every conversation's request at that turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnFacts {
    /// The turn, from 0.
    pub turn: u32,
    /// Requests at it (one per conversation that reached it).
    pub requests: usize,
    /// Their prompt lengths (the client's count of the messages' text).
    pub lengths: LengthRange,
    /// The client's `approx_cached_percent`: the share of the prompt that earlier turns
    /// already sent (lowest, highest).
    pub approx_cached_percent: (f64, f64),
}

/// What an import found, per tool (each tool's file proves different things).
#[derive(Debug, Clone, PartialEq)]
pub enum Findings {
    /// `vllm bench serve --save-result`: no cache count; lengths by the client's tokenizer.
    Vllm {
        /// Per file.
        lengths: Vec<VllmLengths>,
    },
    /// AIPerf's export, with or without its per-request records.
    Aiperf {
        /// Every export had its `profile_export.jsonl`.
        per_request: bool,
        /// Samples whose cached-token count is known, of how many.
        cache_known: (usize, usize),
        /// The hits among them.
        hits: CacheHits,
        /// Per export.
        lengths: Vec<LengthRange>,
        /// Warmup records left out of the samples.
        warmup_left: usize,
    },
    /// GuideLLM's `benchmarks.json`.
    Guidellm {
        /// A cached-token count was seen on some request.
        cached_seen: bool,
        /// The hits.
        hits: CacheHits,
        /// Per benchmark.
        lengths: Vec<LengthRange>,
        /// Whether the first benchmark states where its measured window starts (`None`: no
        /// benchmark).
        first_measured: Option<bool>,
        /// Requests sent before the measured window, left out.
        warmup_left: usize,
    },
    /// vLLM's multi-turn benchmark (`--stats-json-output`): no cache count from the server.
    VllmMultiTurn {
        /// Conversations (requests at turn 0).
        conversations: usize,
        /// Per turn.
        turns: Vec<TurnFacts>,
    },
    /// inference-perf's lifecycle reports.
    InferencePerf {
        /// Every request carries the server's cached-token count.
        cache_known: bool,
        /// The hits.
        hits: CacheHits,
        /// Per summary.
        lengths: Vec<LengthRange>,
    },
}

impl Default for Findings {
    fn default() -> Self {
        Findings::Vllm {
            lengths: Vec::new(),
        }
    }
}
