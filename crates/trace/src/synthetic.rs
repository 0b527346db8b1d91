//! `--synthetic agent`: a generated agentic workload, deterministic from a seed, for users
//! without a trace (docs/replay.md, "Synthetic agent workload", says where each default
//! comes from and which are judgements).
//!
//! Each session is a main agent whose context grows turn by turn to `max_context`: every
//! request is the previous one's prompt plus new tokens (the answer, a tool result), so its
//! leading blocks are the previous request's. All main agents start with one system prefix
//! (the same agent software); subagents start with another, shared by all of them, and grow
//! to a quarter of `max_context`. Think times are exponential with mean `think_s`.

use crate::reader::{Source, TraceReader};
use crate::request::TraceRequest;

/// Tokens per block of the generated trace (Weka / kv-cache-tester's block size).
pub const BLOCK: u32 = 64;
/// The main agents' shared system prefix, tokens (at most a quarter of `max_context`).
pub const SYSTEM_TOKENS: u64 = 4096;
/// The subagents' shared system prefix, tokens (at most a sixteenth of `max_context`).
pub const SUBAGENT_SYSTEM_TOKENS: u64 = 1024;
/// Output tokens per request: uniform in this range.
pub const OUTPUT_TOKENS: (u64, u64) = (64, 512);
/// Decode time assumed per output token for the open-loop timestamps (ms): 50 tokens/s.
pub const ASSUMED_MS_PER_OUTPUT_TOKEN: f64 = 20.0;

/// The parameters of the generated agent workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentParams {
    /// Agent sessions.
    pub sessions: u32,
    /// The context (input + output tokens) a session's main agent grows to.
    pub max_context: u64,
    /// Requests of each session's main agent.
    pub turns: u32,
    /// Mean think time between an answer and the session's next request, seconds.
    pub think_s: f64,
    /// Subagents per session, each starting from the subagents' shared system prefix.
    pub subagents: u32,
    /// The seed: the same seed and parameters give the same trace.
    pub seed: u64,
}

impl AgentParams {
    /// The defaults (docs/replay.md, "Synthetic agent workload").
    pub const DEFAULT: AgentParams = AgentParams {
        sessions: 8,
        max_context: 32 * 1024,
        turns: 24,
        think_s: 4.0,
        subagents: 2,
        seed: 0,
    };
}

impl Default for AgentParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// splitmix64: small, fast, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi].
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// Exponential with this mean.
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// One agent (main or sub): its session, the context its first request starts from (the
/// prefix's tokens plus one block), the context it grows to, and its turns.
struct Agent {
    session: String,
    first: u64,
    to_context: u64,
    turns: u32,
}

/// The generator's state across agents: fresh ids and the random stream.
struct Gen {
    rng: Rng,
    next_id: u64,
    think_ms: f64,
    out: Vec<TraceRequest>,
}

impl Gen {
    fn fresh(&mut self, n: usize) -> Vec<u64> {
        let ids = (self.next_id..self.next_id + n as u64).collect();
        self.next_id += n as u64;
        ids
    }

    /// Emits turns `from .. from + n` of the agent from `at` (ms), extending its context in
    /// `blocks`; returns when the last answer ends under the assumed decode time. Growth is
    /// linear from `first` to the full context at the last turn, each step jittered ±25%.
    fn turns(&mut self, a: &Agent, blocks: &mut Vec<u64>, from: u32, n: u32, mut at: f64) -> f64 {
        let b = u64::from(BLOCK);
        let step = a.to_context.saturating_sub(a.first) as f64 / f64::from(a.turns.max(2) - 1);
        for turn in from..from + n {
            // The context so far stays; the answer shrinks to fit what is left.
            let least = blocks.len() as u64 * b;
            let output = self
                .rng
                .range(OUTPUT_TOKENS.0, OUTPUT_TOKENS.1)
                .min(a.to_context / 2);
            let output = output.min(a.to_context.saturating_sub(least)).max(1);
            let jitter = 0.75 + 0.5 * self.rng.unit();
            let target = a.first as f64 + step * (f64::from(turn) - 1.0 + jitter).max(0.0);
            let top = a.to_context.saturating_sub(output);
            let input = (target as u64).clamp(a.first.min(top), top).max(least);
            let more = ((input / b) as usize).saturating_sub(blocks.len());
            let fresh = self.fresh(more);
            blocks.extend(fresh);
            let think = if turn == 0 {
                0.0
            } else {
                self.rng.exp(self.think_ms)
            };
            at += think;
            self.out.push(TraceRequest {
                index: 0,
                session: Some(a.session.clone()),
                turn,
                at_ms: Some(at),
                think_ms: Some(think),
                input_tokens: input,
                output_tokens: output,
                blocks: blocks.clone(),
                block_tokens: BLOCK,
            });
            at += output as f64 * ASSUMED_MS_PER_OUTPUT_TOKEN;
        }
        at
    }
}

/// The generated workload as a trace, in time order. Held in memory: its size is set by
/// the parameters, not by a file.
pub fn agent(p: &AgentParams) -> TraceReader {
    let mut g = Gen {
        rng: Rng(p.seed ^ 0x6167_656E_7473), // "agents"
        next_id: 0,
        think_ms: p.think_s * 1000.0,
        out: Vec::new(),
    };
    let b = u64::from(BLOCK);
    let system = g.fresh((SYSTEM_TOKENS.min(p.max_context / 4) / b) as usize);
    let sub_system = g.fresh((SUBAGENT_SYSTEM_TOKENS.min(p.max_context / 16) / b) as usize);
    let mut start = 0.0;
    for s in 0..p.sessions {
        // Sessions arrive one per think time on average (a judgement: users start apart).
        if s > 0 {
            start += g.rng.exp(g.think_ms);
        }
        session(&mut g, p, s, &system, &sub_system, start);
    }
    let mut out = g.out;
    out.sort_by(|a, b| a.at_ms.unwrap_or(0.0).total_cmp(&b.at_ms.unwrap_or(0.0)));
    TraceReader::new(
        None,
        Box::new(Generated {
            requests: out.into_iter(),
            params: *p,
        }),
    )
}

/// One session: the main agent in pieces, a subagent between two of them; the main
/// agent's next turn waits for the subagent's last answer.
fn session(g: &mut Gen, p: &AgentParams, s: u32, system: &[u64], sub_system: &[u64], start: f64) {
    let b = u64::from(BLOCK);
    let name = format!("agent{s}");
    let main = Agent {
        session: name.clone(),
        first: (system.len() as u64 * b + b).min(p.max_context),
        to_context: p.max_context,
        turns: p.turns,
    };
    let spawn: Vec<u32> = (1..=p.subagents)
        .map(|j| j * p.turns / (p.subagents + 1))
        .collect();
    let (mut at, mut done) = (start, 0u32);
    let mut blocks = system.to_vec();
    for (j, &k) in spawn.iter().chain(std::iter::once(&p.turns)).enumerate() {
        if k > done {
            at = g.turns(&main, &mut blocks, done, k - done, at);
            done = k;
        }
        if j < spawn.len() {
            let sub = Agent {
                session: format!("{name}/sub{j}"),
                first: sub_system.len() as u64 * b + b,
                to_context: (p.max_context / 4)
                    .max(sub_system.len() as u64 * b + 2 * b)
                    .min(p.max_context),
                turns: (p.turns / 4).max(2),
            };
            let t0 = at + g.rng.exp(g.think_ms);
            at = g.turns(&sub, &mut sub_system.to_vec(), 0, sub.turns, t0);
        }
    }
}

/// The generated requests, as a source of the streaming reader.
struct Generated {
    requests: std::vec::IntoIter<TraceRequest>,
    params: AgentParams,
}

impl Source for Generated {
    fn next_request(&mut self) -> Option<Result<TraceRequest, crate::request::TraceError>> {
        self.requests.next().map(Ok)
    }

    fn notes(&self) -> Vec<String> {
        let p = &self.params;
        vec![
            format!(
                "generated (seed {}): {} sessions, each a main agent of {} turns growing to {} tokens of context and {} subagents growing to {}",
                p.seed, p.sessions, p.turns, p.max_context, p.subagents, p.max_context / 4
            ),
            format!(
                "blocks of {BLOCK} tokens; main agents share a {}-token system prefix, subagents another of {}; each request extends its agent's previous prompt",
                SYSTEM_TOKENS.min(p.max_context / 4) / u64::from(BLOCK) * u64::from(BLOCK),
                SUBAGENT_SYSTEM_TOKENS.min(p.max_context / 16) / u64::from(BLOCK) * u64::from(BLOCK)
            ),
            format!(
                "think time exponential, mean {} s; output {}-{} tokens; at_ms assumes each answer takes {} ms per output token",
                p.think_s, OUTPUT_TOKENS.0, OUTPUT_TOKENS.1, ASSUMED_MS_PER_OUTPUT_TOKEN
            ),
        ]
    }
}
