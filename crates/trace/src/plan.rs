//! The replay's plan from one pass over the trace (the dry run, and the whole-trace
//! validation before anything is sent): requests, sessions, tokens, the ideal reuse ratio as
//! the replay computes expected reuse, the span, what shaping did, a predicted server time.

use std::collections::{HashMap, HashSet};

use crate::request::{TraceError, TraceRequest};
use crate::shape::{Shaped, Shaping};

/// Expected reuse as the replay computes it: the leading blocks of a request already sent
/// by an earlier request (prefix match, stopping at the first block not seen). Memory: one
/// u64 per distinct block id.
#[derive(Debug, Default)]
pub struct ReuseTracker {
    seen: HashSet<u64>,
}

impl ReuseTracker {
    /// The request's reusable tokens (leading seen blocks × block size, at most its input),
    /// then its blocks are marked sent.
    pub fn observe(&mut self, r: &TraceRequest) -> u64 {
        let lead = r
            .blocks
            .iter()
            .take_while(|b| self.seen.contains(b))
            .count() as u64;
        self.seen.extend(r.blocks.iter().copied());
        (lead * u64::from(r.block_tokens)).min(r.input_tokens)
    }

    /// Distinct block ids sent so far.
    pub fn distinct_blocks(&self) -> usize {
        self.seen.len()
    }
}

/// A cost model for a predicted server time: prefill and decode rates, tokens per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Prefill tokens per second (of uncached input).
    pub prefill_tps: f64,
    /// Decode tokens per second (one request alone).
    pub decode_tps: f64,
}

impl CostModel {
    /// Reads `prefill=TOK/S,decode=TOK/S` (either order, both needed).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (mut p, mut d) = (None, None);
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not NAME=TOKENS/S"))?;
            let x: f64 = v
                .trim()
                .trim_end_matches("/s")
                .parse()
                .map_err(|_| format!("`{v}` is not a rate in tokens per second"))?;
            if !(x.is_finite() && x > 0.0) {
                return Err(format!("`{v}` is not a positive rate"));
            }
            match k.trim() {
                "prefill" => p = Some(x),
                "decode" => d = Some(x),
                other => return Err(format!("`{other}`: the cost model has prefill and decode")),
            }
        }
        match (p, d) {
            (Some(prefill_tps), Some(decode_tps)) => Ok(Self {
                prefill_tps,
                decode_tps,
            }),
            _ => Err("both prefill=TOK/S and decode=TOK/S are needed".into()),
        }
    }

    /// Seconds of server time for one request with `uncached` input tokens to prefill.
    pub fn seconds(&self, uncached: u64, output: u64) -> f64 {
        uncached as f64 / self.prefill_tps + output as f64 / self.decode_tps
    }
}

/// What the plan pass is told.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanOptions {
    /// Scale and context limit.
    pub shaping: Shaping,
    /// Read only the first N requests.
    pub max_requests: Option<u64>,
    /// For the predicted server time.
    pub cost: Option<CostModel>,
}

/// The plan: what the replay will send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanSummary {
    /// Requests read from the trace.
    pub read: u64,
    /// Requests to replay (read minus skipped).
    pub requests: u64,
    /// Requests skipped as over the context limit.
    pub skipped: u64,
    /// The largest context a skipped request needed.
    pub largest_skipped: u64,
    /// Whether --max-requests stopped the read before the trace's end.
    pub truncated_by_max: bool,
    /// Distinct sessions (0 where the format has none).
    pub sessions: u64,
    /// Input tokens of the requests to replay.
    pub input_tokens: u64,
    /// Output tokens of the requests to replay.
    pub output_tokens: u64,
    /// Input tokens already sent by earlier requests as leading blocks (ideal reuse).
    pub reused_tokens: u64,
    /// The largest context (input + output) replayed.
    pub largest_context: u64,
    /// The last request's time (the first is 0), where requests have times.
    pub span_ms: Option<f64>,
    /// The longest session's total think time, where requests have think times.
    pub longest_think_ms: Option<f64>,
    /// Blocks scaling dropped (see [`crate::shape::scale`]).
    pub blocks_dropped: u64,
    /// Distinct block ids.
    pub distinct_blocks: u64,
    /// Predicted server seconds (one request at a time, ideal reuse), with a cost model.
    pub predicted_server_s: Option<f64>,
}

impl PlanSummary {
    /// Ideal reuse ratio: reused over input tokens (0 without input).
    pub fn reuse_ratio(&self) -> f64 {
        if self.input_tokens == 0 {
            0.0
        } else {
            self.reused_tokens as f64 / self.input_tokens as f64
        }
    }
}

/// One pass over the trace: validates every request (the first error is returned) and sums
/// the plan. Memory: the distinct block ids and the session names, never the requests.
pub fn summarize(
    trace: impl Iterator<Item = Result<TraceRequest, TraceError>>,
    opts: &PlanOptions,
) -> Result<PlanSummary, TraceError> {
    let mut s = PlanSummary::default();
    let mut reuse = ReuseTracker::default();
    let mut think: HashMap<String, f64> = HashMap::new();
    let mut sessions: HashSet<String> = HashSet::new();
    let mut server_s = 0.0;
    for r in trace {
        if opts.max_requests.is_some_and(|m| s.read >= m) {
            s.truncated_by_max = true;
            break;
        }
        let r = r?;
        s.read += 1;
        let (r, dropped) = match opts.shaping.apply(r) {
            Shaped::Keep {
                request,
                blocks_dropped,
            } => (request, blocks_dropped),
            Shaped::Skip { needed, .. } => {
                s.skipped += 1;
                s.largest_skipped = s.largest_skipped.max(needed);
                continue;
            }
        };
        s.requests += 1;
        s.blocks_dropped += dropped as u64;
        s.input_tokens += r.input_tokens;
        s.output_tokens += r.output_tokens;
        s.largest_context = s.largest_context.max(r.input_tokens + r.output_tokens);
        let reused = reuse.observe(&r);
        s.reused_tokens += reused;
        if let Some(c) = opts.cost {
            server_s += c.seconds(r.input_tokens - reused, r.output_tokens);
        }
        if let Some(t) = r.at_ms {
            s.span_ms = Some(s.span_ms.map_or(t, |x: f64| x.max(t)));
        }
        if let Some(sess) = r.session {
            if let Some(t) = r.think_ms {
                *think.entry(sess.clone()).or_insert(0.0) += t;
            }
            sessions.insert(sess);
        }
    }
    s.sessions = sessions.len() as u64;
    s.longest_think_ms = think.values().copied().reduce(f64::max);
    s.distinct_blocks = reuse.distinct_blocks() as u64;
    s.predicted_server_s = opts.cost.map(|_| server_s);
    Ok(s)
}
