//! Speculative steps along the position in the context, read off a stream's token arrivals
//! (issue 45, point 2): a server that streams every token as its own event writes a verify
//! step's accepted tokens back to back, so the arrival gaps split the output into steps.
//! Kept per sample in position buckets, compact: two counts per bucket.

use serde::{Deserialize, Serialize};

/// Verify steps and the tokens they yielded, per bucket of positions in the context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepsAlong {
    /// Position (prompt tokens + output index) where bucket 0 starts.
    pub from_tokens: u64,
    /// Positions per bucket.
    pub bucket_tokens: u32,
    /// Steps whose first token falls in each bucket.
    pub steps: Vec<u32>,
    /// Tokens those steps yielded (accepted drafts + the step's own token).
    pub tokens: Vec<u32>,
    /// The gap (ms) below which two arrivals were taken as one step's.
    pub split_ms: f64,
}

impl StepsAlong {
    /// Per bucket with at least one step: (the bucket's first position, steps, tokens).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.steps
            .iter()
            .zip(&self.tokens)
            .enumerate()
            .filter(|(_, (s, _))| **s > 0)
            .map(|(i, (s, t))| {
                (
                    self.from_tokens + i as u64 * u64::from(self.bucket_tokens),
                    *s,
                    *t,
                )
            })
    }
}
