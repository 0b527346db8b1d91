//! The per-sample metrics that reports, fits and comparisons talk about. No I/O.

use serde::Serialize;

use super::{PointSummary, Spread};
use ctxbench_schema::record::Sample;

/// A measured quantity of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Time to first token (ms).
    TtftMs,
    /// Prefill rate (tok/s).
    PrefillTokensPerS,
    /// Decode rate (tok/s).
    DecodeTokensPerS,
    /// Time per decode step (ms).
    MsPerStep,
}

impl Metric {
    /// All metrics, in display order.
    pub const ALL: [Metric; 4] = [
        Metric::TtftMs,
        Metric::PrefillTokensPerS,
        Metric::DecodeTokensPerS,
        Metric::MsPerStep,
    ];

    /// Short name for tables.
    pub fn label(self) -> &'static str {
        match self {
            Metric::TtftMs => "TTFT",
            Metric::PrefillTokensPerS => "prefill",
            Metric::DecodeTokensPerS => "decode",
            Metric::MsPerStep => "ms/step",
        }
    }

    /// Unit.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::TtftMs | Metric::MsPerStep => "ms",
            _ => "tok/s",
        }
    }

    /// File-name-safe key (`ttft_ms`, …).
    pub fn key(self) -> &'static str {
        match self {
            Metric::TtftMs => "ttft_ms",
            Metric::PrefillTokensPerS => "prefill_tokens_per_s",
            Metric::DecodeTokensPerS => "decode_tokens_per_s",
            Metric::MsPerStep => "ms_per_step",
        }
    }

    /// Rates are better high, times better low.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::PrefillTokensPerS | Metric::DecodeTokensPerS)
    }

    /// This metric of one sample.
    pub fn of(self, s: &Sample) -> Option<f64> {
        match self {
            Metric::TtftMs => s.ttft_ms,
            Metric::PrefillTokensPerS => s.prefill_tokens_per_s,
            Metric::DecodeTokensPerS => s.decode_tokens_per_s,
            Metric::MsPerStep => s.ms_per_step,
        }
    }

    /// This metric's spread in a point summary.
    pub fn spread(self, p: &PointSummary) -> Option<Spread> {
        match self {
            Metric::TtftMs => p.ttft_ms,
            Metric::PrefillTokensPerS => p.prefill_tokens_per_s,
            Metric::DecodeTokensPerS => p.decode_tokens_per_s,
            Metric::MsPerStep => p.ms_per_step,
        }
    }
}

/// (context tokens, value) of `metric` over usable samples (cold only: warm decode-at-depth
/// samples reuse a prefix on purpose and are summarised apart).
pub fn observations(samples: &[Sample], metric: Metric) -> Vec<(u64, f64)> {
    samples
        .iter()
        .filter(|s| s.usable())
        .filter_map(|s| Some((s.context_tokens, metric.of(s)?)))
        .filter(|(_, v)| v.is_finite())
        .collect()
}
