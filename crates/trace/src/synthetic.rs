//! `--synthetic agent`: a generated agentic workload, deterministic from a seed, for users
//! without a trace (docs/replay.md names where each default comes from).

/// The parameters of the generated agent workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentParams {
    /// Agent sessions.
    pub sessions: u32,
    /// The context (input tokens) a session's main agent grows to.
    pub max_context: u64,
    /// Requests of each session's main agent.
    pub turns: u32,
    /// Mean think time between an answer and the session's next request, seconds.
    pub think_s: f64,
    /// Subagents per session, each starting from the session's system prefix.
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
