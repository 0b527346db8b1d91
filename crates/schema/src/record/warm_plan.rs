//! What the warm modes record in the results file (`--mode append`, `conversation`, `tiers`):
//! the run's warm plan in the header and each warm sample's reuse. The rule that judges a
//! sample by them is the `warm` module's.

use serde::{Deserialize, Serialize};

/// Which measurement a run makes (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum WarmMode {
    /// Append N new tokens to a cached prefix of L tokens (grid L × N), beside the cold
    /// prefill of L + N.
    Append,
    /// One conversation growing turn by turn up to the server's maximum.
    Conversation,
    /// The TTFT at each L from each cache tier the server offers (llama.cpp).
    Tiers,
    /// The retention map: whether a primed prefix is still cached after an idle gap
    /// (`--gaps`) or after foreign traffic (`--pressure`), at each L.
    Retention,
}

impl WarmMode {
    /// The name as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            WarmMode::Append => "append",
            WarmMode::Conversation => "conversation",
            WarmMode::Tiers => "tiers",
            WarmMode::Retention => "retention",
        }
    }
}

/// What the user chose for a warm run; recorded in the header (`config.warm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmConfig {
    /// The mode.
    pub mode: WarmMode,
    /// `append` and `tiers`: new tokens appended to each cached prefix (N).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub appends: Vec<u64>,
    /// `conversation`: tokens of each new user turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_tokens: Option<u64>,
    /// `--ttft-target`: the turn budget is the largest N under it at each L.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_target_ms: Option<f64>,
    /// `--negative-control`: the warm requests ask the server not to reuse its cache
    /// (llama.cpp `cache_prompt: false`): the savings must vanish and every sample be
    /// flagged `cache_miss`.
    #[serde(default)]
    pub negative_control: bool,
    /// `retention`: idle seconds between the prime and the append (`--gaps`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps_s: Vec<f64>,
    /// `retention`: foreign traffic between the prime and the append, as fractions of the
    /// server's KV pool (`--pressure`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pressure: Vec<f64>,
    /// `retention` with `--grid`: every gap × every pressure is a cell (the cells off both
    /// axes run alone: their gaps add up); without it, the gaps at pressure 0 and the
    /// pressures at gap 0.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grid: bool,
}

/// A cache tier a `tiers` sample was served from (proven per sample, see `evidence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The slot's live KV cache (the prefix was the last thing the slot computed).
    Live,
    /// llama.cpp's host-memory prompt cache (`--cache-ram`): the only slot held another
    /// prompt, yet the prefix was reused.
    Ram,
    /// A slot saved to disk and restored (`/slots/0?action=save|restore`).
    Disk,
    /// No reuse: recomputed from scratch (the cold reference).
    Cold,
}

impl Tier {
    /// The name as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Live => "live",
            Tier::Ram => "ram",
            Tier::Disk => "disk",
            Tier::Cold => "cold",
        }
    }
}

/// What a warm sample reused and how that was proven (`sample.warm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WarmInfo {
    /// The cached prefix, in tokens as the server counts them (L).
    pub prefix_tokens: u64,
    /// New tokens after the prefix (N).
    pub new_tokens: u64,
    /// The cached count that proves the reuse: the prefix.
    pub expected_cached: u64,
    /// Tokens of the prefix the server recomputes anyway (stated per server family):
    /// a cached count of at least `expected_cached − allowance` is a hit.
    pub allowance: u64,
    /// Why the allowance is what it is (the family's rule).
    pub allowance_rule: String,
    /// `conversation`: the turn, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// `tiers`: the tier this sample was served from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// `tiers`: the server's answers that prove the tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// `tiers` (disk): the client-timed restore request, included in `ttft_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_ms: Option<f64>,
    /// The request asked the server not to reuse its cache (`--negative-control`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bypass: bool,
    /// `retention`: what happened between the prime and this append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

/// Why a retention append missed its prefix (named with its evidence in
/// [`WarmInfo::evidence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissCause {
    /// Nothing but idle time passed since the prime: the server dropped it by time.
    TimeEviction,
    /// Foreign prompts went through the KV pool since the prime: evicted to make room.
    CapacityEviction,
    /// llama-server: another prompt took the slot that held the prefix (`GET /slots` showed
    /// no slot holding it), with more prompts than slots.
    SlotReuse,
}

impl MissCause {
    /// The name as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            MissCause::TimeEviction => "time_eviction",
            MissCause::CapacityEviction => "capacity_eviction",
            MissCause::SlotReuse => "slot_reuse",
        }
    }
}

/// A retention append's conditions (`sample.warm.retention`): the cell it belongs to (L is
/// `prefix_tokens`), what was measured between the prime and it, and why it missed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Retention {
    /// The planned idle gap, seconds (the cell's).
    pub gap_s: f64,
    /// Seconds from the prime's end to this append's send, as measured.
    pub idle_s: f64,
    /// The planned foreign traffic, a fraction of the pool (the cell's).
    pub pressure: f64,
    /// The pool the pressure is a fraction of, tokens (`None`: not known, nothing sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_tokens: Option<u64>,
    /// Where the pool comes from (SGLang `max_total_num_tokens`, vLLM `num_gpu_blocks ×
    /// block_size`, llama.cpp slots × context, or a note that it is one context in tokens).
    #[serde(default)]
    pub pool_source: String,
    /// Foreign prompts sent between the prime and the append.
    #[serde(default)]
    pub foreign_prompts: u32,
    /// Their prompt tokens as the server counted them.
    #[serde(default)]
    pub foreign_tokens: u64,
    /// Sessions whose prefixes were live at once while this one waited (their gaps overlap).
    #[serde(default)]
    pub sessions: u32,
    /// Why the append missed (`None`: a hit, or not judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<MissCause>,
}

impl WarmInfo {
    /// The least cached count that proves the reuse.
    pub fn least_cached(&self) -> u64 {
        self.expected_cached.saturating_sub(self.allowance)
    }
}
