//! The generated agent workload: deterministic from its seed, sessions that grow turn by
//! turn to the chosen context, each request extending its agent's previous prompt,
//! subagents sharing their own system prefix.

use std::collections::HashMap;

use ctxbench_trace::plan::{summarize, PlanOptions};
use ctxbench_trace::synthetic::{agent, AgentParams, BLOCK};
use ctxbench_trace::TraceRequest;

fn generate(p: &AgentParams) -> Vec<TraceRequest> {
    agent(p).collect::<Result<Vec<_>, _>>().unwrap()
}

#[test]
fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
    let p = AgentParams::DEFAULT;
    assert_eq!(generate(&p), generate(&p));
    assert_ne!(generate(&p), generate(&AgentParams { seed: 1, ..p }));
}

#[test]
fn sessions_grow_to_the_chosen_context_each_request_extending_the_previous() {
    let p = AgentParams {
        sessions: 3,
        max_context: 16 * 1024,
        turns: 12,
        think_s: 2.0,
        subagents: 2,
        seed: 7,
    };
    let reqs = generate(&p);
    let mut by_session: HashMap<String, Vec<&TraceRequest>> = HashMap::new();
    for r in &reqs {
        by_session
            .entry(r.session.clone().unwrap())
            .or_default()
            .push(r);
    }
    assert_eq!(
        by_session.len(),
        3 * (1 + 2),
        "a main agent and 2 subagents per session"
    );
    for (name, rs) in &by_session {
        let main = !name.contains("/sub");
        assert_eq!(rs.len(), if main { 12 } else { 3 }, "{name}");
        for (i, w) in rs.windows(2).enumerate() {
            assert_eq!(w[1].turn, i as u32 + 1);
            assert!(
                w[1].input_tokens >= w[0].input_tokens,
                "{name}: context shrank"
            );
            assert_eq!(
                w[1].blocks[..w[0].blocks.len()],
                w[0].blocks[..],
                "{name}: not an extension"
            );
        }
        for r in rs {
            assert!(
                r.input_tokens + r.output_tokens <= p.max_context,
                "{name}: {r:?}"
            );
            assert_eq!(r.blocks.len() as u64, r.input_tokens / u64::from(BLOCK));
        }
        let last = rs.last().unwrap();
        if main {
            assert_eq!(
                last.input_tokens + last.output_tokens,
                p.max_context,
                "{name} ends at the full context"
            );
        }
    }
    // Main agents share the system prefix; subagents share theirs, disjoint from it.
    let first = |s: &str| by_session[s][0].blocks[0];
    assert_eq!(first("agent0"), first("agent2"));
    assert_eq!(first("agent0/sub0"), first("agent2/sub1"));
    assert_ne!(first("agent0"), first("agent0/sub0"));
    // In time order, and every session after the first reuses the system prefix.
    assert!(reqs.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let s = summarize(agent(&p), &PlanOptions::default()).unwrap();
    assert!(
        s.reuse_ratio() > 0.5 && s.reuse_ratio() < 1.0,
        "{}",
        s.reuse_ratio()
    );
}

#[test]
fn a_subagent_runs_between_two_turns_of_its_main_agent() {
    let p = AgentParams {
        sessions: 1,
        subagents: 1,
        turns: 8,
        ..AgentParams::DEFAULT
    };
    let reqs = generate(&p);
    let at = |s: &str, turn: u32| {
        reqs.iter()
            .find(|r| r.session.as_deref() == Some(s) && r.turn == turn)
            .unwrap()
            .at_ms
            .unwrap()
    };
    // Spawned after main turn 3 (8 / 2 - 1), the main agent's turn 4 waits for it.
    assert!(at("agent0", 3) < at("agent0/sub0", 0));
    assert!(at("agent0/sub0", 1) < at("agent0", 4));
}

#[test]
fn tiny_contexts_still_generate_valid_requests() {
    for max_context in [1, 100, 700] {
        let p = AgentParams {
            max_context,
            ..AgentParams::DEFAULT
        };
        for r in generate(&p) {
            assert!(
                r.input_tokens + r.output_tokens <= max_context.max(2),
                "{max_context}: {r:?}"
            );
            assert!(r.blocks.len() as u64 * u64::from(BLOCK) <= r.input_tokens);
        }
    }
}
