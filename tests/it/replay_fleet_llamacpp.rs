//! `ctxbench replay` behind vllm-router in front of two real llama-server workers: with
//! `round_robin` each turn of a session lands on the worker that did not compute its prefix,
//! and every later turn is `reuse_short` with the other-worker cause (the worker that served
//! it, read from the workers' own counters); with `cache_aware` the session stays on one
//! worker and every turn proves its reuse. The same behind sglang-router, which refuses
//! token-id prompts: the replay lends a worker's tokenizer (`--tokenizer-url`) and sends text
//! of exact length, each request's text the detokenized ids of its blocks.

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

fn replay(url: &str, extra: &[&str]) -> (Vec<Sample>, String) {
    let dir = tempfile::tempdir().unwrap();
    let trace = one_session(dir.path());
    let out = dir.path().join("r.jsonl");
    let out_s = out.display().to_string();
    let (code, _, stderr) = run(&[
        &[
            "replay", &trace, "--url", url, "-o", &out_s, "--timing", "session",
        ][..],
        extra,
    ]
    .concat());
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
    let (samples, text) = replay(&rr.url(), &[]);
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
    let (samples, text) = replay(&ca.url(), &[]);
    assert_eq!(samples.len(), 4, "{text}");
    for s in &samples {
        let r = s.replay.as_ref().unwrap();
        assert!(!s.has(&Flag::ReuseShort), "{text}");
        assert!(s.cached_tokens.unwrap() >= r.expected_reuse, "{text}");
    }
}

/// Both runs at exact lengths; `round_robin`: every later turn short, on the other worker;
/// `cache_aware`: every turn proven.
fn assert_other_worker_then_proven(rr: &[Sample], rr_text: &str, ca: &[Sample], ca_text: &str) {
    assert_eq!(rr.len(), 4, "{rr_text}");
    for s in rr {
        let r = s.replay.as_ref().unwrap();
        assert!(
            r.worker.is_some(),
            "each request's worker is read: {rr_text}"
        );
        assert_eq!(
            s.prompt_tokens,
            Some(r.input_tokens),
            "exact length: {rr_text}"
        );
        if r.turn > 0 {
            assert!(s.has(&Flag::ReuseShort), "{rr_text}");
            assert_eq!(r.cause, Some(ReuseCause::OtherWorker), "{rr_text}");
        }
    }
    assert_eq!(ca.len(), 4, "{ca_text}");
    for s in ca {
        let r = s.replay.as_ref().unwrap();
        assert_eq!(
            s.prompt_tokens,
            Some(r.input_tokens),
            "exact length: {ca_text}"
        );
        assert!(!s.has(&Flag::ReuseShort), "{ca_text}");
        assert!(s.cached_tokens.unwrap() >= r.expected_reuse, "{ca_text}");
    }
}

#[test]
fn replay_behind_sglang_router_sends_text_of_exact_tokens_round_robin_names_the_other_worker_and_cache_aware_proves_every_turn(
) {
    let workers = Workers::start();
    let urls = workers.urls();
    let tok = ["--tokenizer-url", urls[0].as_str()];
    let rr = Router::start_with(Kind::Sglang, &urls, "round_robin");
    // Without a tokenizer the router's prompts could only be calibrated text: refused.
    let dir = tempfile::tempdir().unwrap();
    let trace = one_session(dir.path());
    let (code, _, stderr) = run(&["replay", &trace, "--url", &rr.url()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--tokenizer-url"), "{stderr}");
    let (rr_samples, rr_text) = replay(&rr.url(), &tok);
    drop(rr);
    let ca = Router::start_with(Kind::Sglang, &urls, "cache_aware");
    let (ca_samples, ca_text) = replay(&ca.url(), &tok);
    eprintln!("round_robin:\n{rr_text}cache_aware:\n{ca_text}");
    assert_other_worker_then_proven(&rr_samples, &rr_text, &ca_samples, &ca_text);
}
