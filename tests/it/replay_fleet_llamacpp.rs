//! `ctxbench replay` behind vllm-router in front of two real llama-server workers: with
//! `round_robin` each turn of a session lands on the worker that did not compute its prefix,
//! and every later turn is `reuse_short` with the other-worker cause (the worker that served
//! it, read from the workers' own counters); with `cache_aware` the session stays on one
//! worker and every turn proves its reuse.

use std::path::Path;

use crate::common::run;
use crate::fleet_llamacpp::{Kind, Router, Workers};
use ctxbench_schema::record::replay::ReuseCause;
use ctxbench_schema::record::{read_results, Flag, Sample};

/// One session of four turns, each the previous prompt plus new 512-token blocks.
fn one_session(dir: &Path) -> String {
    let turns = [
        (1024, "[1, 2]"),
        (1300, "[1, 2, 3]"),
        (1600, "[1, 2, 3, 4]"),
        (2100, "[1, 2, 3, 4, 5]"),
    ];
    let text: String = turns
        .iter()
        .enumerate()
        .map(|(i, (n, ids))| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {n}, \"output_length\": 16, \"hash_ids\": {ids}, \"session_id\": \"a\"}}\n",
                i * 100
            )
        })
        .collect();
    let p = dir.join("trace.jsonl");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn replay(url: &str) -> (Vec<Sample>, String) {
    let dir = tempfile::tempdir().unwrap();
    let trace = one_session(dir.path());
    let out = dir.path().join("r.jsonl");
    let out_s = out.display().to_string();
    let (code, _, stderr) = run(&[
        "replay", &trace, "--url", url, "-o", &out_s, "--timing", "session",
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let samples: Vec<Sample> = read_results(&out, false).unwrap().samples;
    let text = samples
        .iter()
        .map(|s| {
            let r = s.replay.as_ref().unwrap();
            format!(
                "turn {} shared {} cached {:?} worker {:?} flags {:?} cause {:?}\n",
                r.turn, r.shared_prefix_tokens, s.cached_tokens, r.worker, s.flags, r.cause
            )
        })
        .collect();
    (samples, text)
}

#[test]
fn replay_behind_round_robin_names_the_other_worker_and_cache_aware_proves_every_turn() {
    let workers = Workers::start();
    let urls = workers.urls();
    let rr = Router::start_with(Kind::Vllm, &urls, "round_robin");
    let (samples, text) = replay(&rr.url());
    drop(rr);
    assert_eq!(samples.len(), 4, "{text}");
    for s in &samples {
        let r = s.replay.as_ref().unwrap();
        assert!(r.worker.is_some(), "each request's worker is read: {text}");
        if r.turn > 0 {
            assert!(s.has(&Flag::ReuseShort), "{text}");
            assert_eq!(r.cause, Some(ReuseCause::OtherWorker), "{text}");
        }
    }
    let ca = Router::start_with(Kind::Vllm, &urls, "cache_aware");
    let (samples, text) = replay(&ca.url());
    assert_eq!(samples.len(), 4, "{text}");
    for s in &samples {
        let r = s.replay.as_ref().unwrap();
        assert!(!s.has(&Flag::ReuseShort), "{text}");
        assert!(s.cached_tokens.unwrap() >= r.expected_reuse, "{text}");
    }
}
