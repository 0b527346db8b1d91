//! The proof of reuse per request. A ledger holds every prefix of blocks this run has had
//! answered (a trie of block ids), with when, by which request and on which worker it was
//! last used and how much the server wrote to its cache since. When a request is sent, the
//! ledger says how many of its leading tokens an answered request already held
//! (`shared_prefix_tokens`); when it is answered, the server's cached count is held against
//! that less the family's allowance (the warm modes' hit rule). A request short of it is
//! flagged `reuse_short` and the likely cause named only where evidence exists: another
//! worker, a boundary, eviction (pool or slot pressure), idle time. Pure: no I/O.

use std::collections::HashMap;

use ctxbench_schema::record::replay::{ReplayInfo, ReuseCause};
use ctxbench_schema::record::{Flag, Sample, Status};
use ctxbench_trace::TraceRequest;

/// A gap since a prefix was last used at least this long, with no pool or slot pressure,
/// is named idle time (the replayers' caps hide gaps of 10 s and more).
pub const IDLE_MS: f64 = 10_000.0;

/// What the ledger knows of one prefix (a node of the trie).
#[derive(Debug, Clone, Default)]
struct Node {
    /// The furthest server position any answered request covered with this block.
    max_end: u64,
    /// The last request that used it, and when it was answered (ms after the start).
    last_index: u64,
    last_at_ms: f64,
    /// The ledger's counters when it was last used.
    written_at: u64,
    answered_at: u64,
    /// Workers that computed it (behind a router).
    workers: Vec<String>,
}

/// What the ledger said when a request was sent: its reusable prefix and the evidence a
/// shortfall's cause is named from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expectation {
    /// Tokens of its leading blocks an answered request held.
    pub shared: u64,
    /// The request that last used that prefix.
    pub holder: Option<u64>,
    /// Ms since then.
    pub idle_ms: Option<f64>,
    /// Tokens the server wrote to its cache since then (uncached prompt + output).
    pub written_since: u64,
    /// Requests answered since then that did not use the prefix.
    pub others_since: u64,
    /// Workers that computed the prefix.
    pub workers: Vec<String>,
    /// The server's prompt count of the session's previous answered request.
    pub prev_prompt: Option<u64>,
    /// The trie node of the shared prefix (0: none), read again at the answer.
    node: u32,
}

/// Every prefix this run has had answered.
#[derive(Debug, Default)]
pub struct Ledger {
    children: HashMap<(u32, u64), u32>,
    nodes: Vec<Node>,
    written: u64,
    answered: u64,
    prev_prompt: HashMap<String, u64>,
}

/// Where block `i` of `r` ends, in server positions.
fn block_end(r: &TraceRequest, i: usize) -> u64 {
    ((i as u64 + 1) * u64::from(r.block_tokens.max(1))).min(r.input_tokens)
}

impl Ledger {
    /// An empty ledger: nothing answered yet (a cold start).
    pub fn new() -> Self {
        Ledger {
            nodes: vec![Node::default()],
            ..Default::default()
        }
    }

    /// What `r`, sent at `now_ms`, may reuse.
    pub fn expect(&self, r: &TraceRequest, now_ms: f64) -> Expectation {
        let mut node = 0u32;
        let mut shared = 0;
        for (i, id) in r.blocks.iter().enumerate() {
            let Some(&child) = self.children.get(&(node, *id)) else {
                break;
            };
            let end = block_end(r, i);
            let n = &self.nodes[child as usize];
            node = child;
            shared = n.max_end.min(end);
            if n.max_end < end {
                break;
            }
        }
        let mut e = Expectation {
            shared,
            prev_prompt: r
                .session
                .as_ref()
                .and_then(|s| self.prev_prompt.get(s))
                .copied(),
            ..Default::default()
        };
        if node != 0 {
            let n = &self.nodes[node as usize];
            e.holder = Some(n.last_index);
            e.idle_ms = Some((now_ms - n.last_at_ms).max(0.0));
            e.node = node;
            self.pressure(&mut e);
        }
        e
    }

    /// Reads again, when the request is answered, what happened to its prefix since it was
    /// last used: a request queued behind others is served after them, so the evidence of
    /// eviction is what ran before its answer, not before its send.
    pub fn pressure(&self, e: &mut Expectation) {
        if e.node == 0 {
            return;
        }
        let n = &self.nodes[e.node as usize];
        e.written_since = self.written - n.written_at;
        e.others_since = self.answered - n.answered_at;
        e.workers = n.workers.clone();
    }

    /// Notes `r` answered at `at_ms`: the server counted `prompt` tokens, `cached` of them
    /// from its cache, and generated `output`, on `worker` when known.
    pub fn answered(
        &mut self,
        r: &TraceRequest,
        at_ms: f64,
        (prompt, cached, output): (u64, u64, u64),
        worker: Option<&str>,
    ) {
        self.written += prompt.saturating_sub(cached) + output;
        self.answered += 1;
        let mut node = 0u32;
        for (i, id) in r.blocks.iter().enumerate() {
            let end = block_end(r, i);
            if end == 0 {
                break;
            }
            let next = self.nodes.len() as u32;
            let child = *self.children.entry((node, *id)).or_insert(next);
            if child == next {
                self.nodes.push(Node::default());
            }
            let n = &mut self.nodes[child as usize];
            n.max_end = n.max_end.max(end);
            n.last_index = r.index;
            n.last_at_ms = at_ms;
            n.written_at = self.written;
            n.answered_at = self.answered;
            if let Some(w) = worker {
                if !n.workers.iter().any(|x| x == w) {
                    n.workers.push(w.to_owned());
                }
            }
            node = child;
        }
        if let Some(s) = &r.session {
            self.prev_prompt.insert(s.clone(), prompt);
        }
    }
}

/// What the server offers that a cause is named from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capacity {
    /// The KV pool, tokens.
    pub kv_pool_tokens: Option<u64>,
    /// Parallel slots (llama.cpp: a slot holds one prompt).
    pub slots: Option<u64>,
}

/// The ideal reuse of each request of a trace in order: the leading tokens an earlier
/// request holds, as a perfect, unbounded cache would reuse them.
pub fn ideal_reuse<'a>(requests: impl IntoIterator<Item = &'a TraceRequest>) -> Vec<u64> {
    let mut l = Ledger::new();
    requests
        .into_iter()
        .map(|r| {
            let shared = l.expect(r, 0.0).shared;
            l.answered(r, 0.0, (r.input_tokens, shared, 0), None);
            shared
        })
        .collect()
}

/// Judges a replayed request's reuse: fills `info`'s proof from `exp` and the family's
/// `allowance` for the shared prefix, and flags the sample `reuse_short` (with the
/// shortfall and the cause where evidence names one) or `reuse_unverified`.
pub fn judge(
    s: &mut Sample,
    info: &mut ReplayInfo,
    exp: &Expectation,
    allowance: u64,
    cap: Capacity,
) {
    // The cold rule's verdicts mean nothing for a request that reuses on purpose.
    s.contaminated = false;
    s.flags
        .retain(|f| *f != Flag::Contaminated && *f != Flag::CachedBeforeNonceEnd);
    info.shared_prefix_tokens = exp.shared;
    info.allowance = allowance.min(exp.shared);
    info.expected_reuse = exp.shared - info.allowance;
    info.holder = exp.holder;
    info.idle_ms = exp.idle_ms;
    if s.status != Status::Ok || exp.shared == 0 {
        return;
    }
    let Some(cached) = s.cached_tokens else {
        s.flags.push(Flag::ReuseUnverified);
        return;
    };
    if cached >= info.expected_reuse {
        return;
    }
    s.flags.push(Flag::ReuseShort);
    info.shortfall = Some(info.expected_reuse - cached);
    let (cause, evidence) = cause(cached, info, exp, cap);
    info.cause = cause;
    info.cause_evidence = Some(evidence);
}

/// The likely cause of a shortfall and its evidence, or no cause and what was seen.
fn cause(
    cached: u64,
    info: &ReplayInfo,
    exp: &Expectation,
    cap: Capacity,
) -> (Option<ReuseCause>, String) {
    let holder = exp
        .holder
        .map_or("an earlier request".to_owned(), |h| format!("request {h}"));
    if let Some(w) = &info.worker {
        if !exp.workers.is_empty() && !exp.workers.contains(w) {
            return (
                Some(ReuseCause::OtherWorker),
                format!(
                    "served by {w}; the prefix was computed only on {}",
                    exp.workers.join(", ")
                ),
            );
        }
    }
    if let Some(p) = exp.prev_prompt {
        if p < exp.shared && cached <= p && cached + info.allowance >= p {
            return (
                Some(ReuseCause::Boundary),
                format!(
                    "the cached count {cached} stops where the session's previous prompt ended ({p} tokens)"
                ),
            );
        }
    }
    if let Some(pool) = cap.kv_pool_tokens.filter(|&p| exp.written_since > p) {
        return (
            Some(ReuseCause::Eviction),
            format!(
                "{} tokens were written to the cache since {holder} last used this prefix, more than the KV pool of {pool} tokens",
                exp.written_since
            ),
        );
    }
    if let Some(slots) = cap.slots.filter(|&n| exp.others_since >= n) {
        return (
            Some(ReuseCause::Eviction),
            format!(
                "{} other prompt(s) were answered since {holder} last used this prefix, and the server has {slots} slot(s)",
                exp.others_since
            ),
        );
    }
    let idle = exp.idle_ms.unwrap_or(0.0);
    if idle >= IDLE_MS {
        return (
            Some(ReuseCause::Idle),
            format!(
                "{:.1} s idle since {holder} last used this prefix, without pool or slot pressure ({} tokens written, {} other prompt(s) since)",
                idle / 1000.0,
                exp.written_since,
                exp.others_since
            ),
        );
    }
    (
        None,
        format!(
            "no evidence names a cause: {} tokens written and {} other prompt(s) answered since {holder} last used this prefix, {:.1} s before",
            exp.written_since,
            exp.others_since,
            idle / 1000.0
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u64, session: &str, input: u64, blocks: &[u64]) -> TraceRequest {
        TraceRequest {
            index,
            session: Some(session.into()),
            turn: 0,
            at_ms: None,
            think_ms: None,
            input_tokens: input,
            output_tokens: 8,
            blocks: blocks.to_vec(),
            block_tokens: 64,
        }
    }

    fn sample(cached: Option<u64>) -> Sample {
        Sample {
            cached_tokens: cached,
            ..Default::default()
        }
    }

    #[test]
    fn a_request_may_reuse_only_blocks_already_answered_and_only_as_far_as_they_were_sent() {
        let mut l = Ledger::new();
        let a = req(0, "a", 150, &[1, 2, 3]); // block 3 partial: 22 tokens
        assert_eq!(l.expect(&a, 0.0).shared, 0, "a cold start");
        l.answered(&a, 10.0, (150, 0, 8), None);
        let b = req(1, "a", 300, &[1, 2, 3, 4]);
        let e = l.expect(&b, 20.0);
        assert_eq!((e.shared, e.holder, e.idle_ms), (150, Some(0), Some(10.0)));
        assert_eq!(e.prev_prompt, Some(150));
        let c = req(2, "b", 300, &[1, 9, 3]);
        assert_eq!(l.expect(&c, 20.0).shared, 64, "diverges at block 2");
        assert_eq!(ideal_reuse([&a, &b, &c]), vec![0, 150, 64]);
    }

    #[test]
    fn a_short_reuse_is_flagged_with_its_shortfall_and_a_cause_only_with_evidence() {
        let exp = Expectation {
            shared: 256,
            holder: Some(3),
            idle_ms: Some(100.0),
            others_since: 1,
            written_since: 400,
            ..Default::default()
        };
        let cap = Capacity {
            kv_pool_tokens: Some(4096),
            slots: Some(2),
        };
        let mut info = ReplayInfo::default();
        let mut s = sample(Some(255));
        judge(&mut s, &mut info, &exp, 1, cap);
        assert!(!s.has(&Flag::ReuseShort), "within the allowance");
        let mut info = ReplayInfo::default();
        let mut s = sample(Some(0));
        judge(&mut s, &mut info, &exp, 1, cap);
        assert!(s.has(&Flag::ReuseShort));
        assert_eq!(info.shortfall, Some(255));
        assert_eq!(info.cause, None, "{:?}", info.cause_evidence);
        // One slot, one other prompt since: eviction.
        let mut info = ReplayInfo::default();
        let one = Capacity {
            slots: Some(1),
            ..cap
        };
        judge(&mut sample(Some(0)), &mut info, &exp, 1, one);
        assert_eq!(info.cause, Some(ReuseCause::Eviction));
        // A long gap without pressure: idle.
        let idle = Expectation {
            idle_ms: Some(60_000.0),
            ..exp.clone()
        };
        let mut info = ReplayInfo::default();
        judge(&mut sample(Some(0)), &mut info, &idle, 1, cap);
        assert_eq!(info.cause, Some(ReuseCause::Idle));
        // Behind a router, served where the prefix never was.
        let routed = Expectation {
            workers: vec!["w1".into()],
            ..exp.clone()
        };
        let mut info = ReplayInfo {
            worker: Some("w2".into()),
            ..Default::default()
        };
        judge(&mut sample(Some(0)), &mut info, &routed, 1, cap);
        assert_eq!(info.cause, Some(ReuseCause::OtherWorker));
        // Stopped where the session's previous prompt ended.
        let bound = Expectation {
            prev_prompt: Some(128),
            ..exp.clone()
        };
        let mut info = ReplayInfo::default();
        judge(&mut sample(Some(128)), &mut info, &bound, 1, cap);
        assert_eq!(info.cause, Some(ReuseCause::Boundary));
        // No count: unverified, never short.
        let mut s = sample(None);
        judge(&mut s, &mut ReplayInfo::default(), &exp, 1, cap);
        assert!(s.has(&Flag::ReuseUnverified) && !s.has(&Flag::ReuseShort));
    }
}
