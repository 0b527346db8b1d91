//! Fitting a trace to a server: `--scale F` multiplies every length (the block size too, so
//! the reuse shape is kept), and requests beyond the server's context are counted and
//! skipped, never truncated.

use crate::fields::ceil_div;
use crate::request::TraceRequest;

/// Multiplies a token count by `f`, rounding to the nearest; a count above 0 stays above 0.
pub fn scale_count(n: u64, f: f64) -> u64 {
    let x = (n as f64 * f).round() as u64;
    if n > 0 {
        x.max(1)
    } else {
        0
    }
}

/// The block size under `--scale F`: `floor(block × F)`, at least 1. Rounded down so that
/// whole blocks still fit in the scaled input (`len × block' ≤ input'` where it held).
pub fn scale_block(block: u32, f: f64) -> u32 {
    ((f64::from(block) * f).floor() as u32).max(1)
}

/// Scales the request's lengths and block size by `f` in place, keeping its block ids (so
/// requests that shared k leading blocks still do). Returns the blocks dropped because the
/// scaled input no longer reaches them (only at scales so small that rounding empties a
/// partial last block).
pub fn scale(r: &mut TraceRequest, f: f64) -> usize {
    r.input_tokens = scale_count(r.input_tokens, f);
    r.output_tokens = scale_count(r.output_tokens, f);
    r.block_tokens = scale_block(r.block_tokens, f);
    let most = ceil_div(r.input_tokens, u64::from(r.block_tokens)) as usize;
    let dropped = r.blocks.len().saturating_sub(most);
    r.blocks.truncate(most);
    dropped
}

/// Whether the request needs more than `limit` tokens of context (its input plus output).
pub fn over_limit(r: &TraceRequest, limit: u64) -> bool {
    r.input_tokens.saturating_add(r.output_tokens) > limit
}

/// How a trace is fitted to a server, applied to each request in order.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Shaping {
    /// `--scale F`.
    pub scale: Option<f64>,
    /// The context limit (input + output tokens); requests beyond it are skipped.
    pub context_limit: Option<u64>,
}

/// What shaping did to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Shaped {
    /// Replay it (scaled if asked); `blocks_dropped` as [`scale`] returns.
    Keep {
        /// The request as it will be sent.
        request: TraceRequest,
        /// Blocks the scaled input no longer reaches.
        blocks_dropped: usize,
    },
    /// Skip it: after scaling it needs `needed` tokens, over the limit.
    Skip {
        /// The request, scaled.
        request: TraceRequest,
        /// Its input plus output tokens.
        needed: u64,
    },
}

impl Shaping {
    /// Scales the request if asked, then keeps or skips it against the context limit.
    pub fn apply(&self, mut request: TraceRequest) -> Shaped {
        let blocks_dropped = self.scale.map_or(0, |f| scale(&mut request, f));
        match self.context_limit {
            Some(limit) if over_limit(&request, limit) => Shaped::Skip {
                needed: request.input_tokens.saturating_add(request.output_tokens),
                request,
            },
            _ => Shaped::Keep {
                request,
                blocks_dropped,
            },
        }
    }
}
