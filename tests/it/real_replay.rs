//! `ctxbench replay` on real vLLM and real SGLang (CPU, tiny model; issue 43): a Mooncake
//! trace of two sessions × three turns, each turn its session's previous blocks plus new
//! ones. With the prefix cache on, every first turn is cold and every later turn proves its
//! reuse: the server's `cached_tokens` reach `expected_reuse`, the shared prefix floored to
//! the family's granularity (vLLM's KV blocks of 128 on CPU, SGLang's radix cache per
//! token). The negative control runs the same trace with the cache off (vLLM
//! `--no-enable-prefix-caching`, SGLang `--disable-radix-cache`): every later turn is flagged.
//! Counts only: nothing here depends on speed.

use std::path::Path;

use crate::common::real::{Family, RealServer};
use crate::common::run;
use ctxbench_schema::record::{read_results, Flag, Sample};

/// Two sessions (a, b) of three turns: 1024 tokens (blocks 1-2 of 512), 1300 (a partial
/// third block), 1700 (a fourth), 100 ms apart, interleaved; b's blocks are its own.
fn two_sessions(dir: &Path) -> String {
    let turns = [(1024, 2), (1300, 3), (1700, 4)];
    let mut text = String::new();
    for (t, (n, blocks)) in turns.iter().enumerate() {
        for (k, (session, first)) in [("a", 1), ("b", 11)].iter().enumerate() {
            let ids: Vec<String> = (0..*blocks).map(|i| (first + i).to_string()).collect();
            text.push_str(&format!(
                "{{\"timestamp\": {}, \"input_length\": {n}, \"output_length\": 8, \"hash_ids\": [{}], \"session_id\": \"{session}\"}}\n",
                t * 200 + k * 100,
                ids.join(", ")
            ));
        }
    }
    let p = dir.join("trace.jsonl");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// Replays the trace per session against `url`; the samples, one line each for the
/// assertion messages, and the report ctxbench printed.
fn replay(url: &str) -> (Vec<Sample>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let trace = two_sessions(dir.path());
    let out = dir.path().join("r.jsonl");
    let out_s = out.display().to_string();
    let (code, stdout, stderr) = run(&[
        "replay", &trace, "--url", url, "-o", &out_s, "--timing", "session",
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let samples: Vec<Sample> = read_results(&out, false).unwrap().samples;
    let text = samples
        .iter()
        .map(|s| {
            let r = s.replay.as_ref().unwrap();
            format!(
                "{:?} turn {} prompt {:?} shared {} expected {} cached {:?} ttft {:?} flags {:?} cause {:?} ({:?})\n",
                r.session,
                r.turn,
                s.prompt_tokens,
                r.shared_prefix_tokens,
                r.expected_reuse,
                s.cached_tokens,
                s.ttft_ms,
                s.flags,
                r.cause,
                r.cause_evidence
            )
        })
        .collect();
    // For the record (--nocapture): the report and each request.
    eprintln!("{stdout}\n{stderr}\n{text}");
    (samples, text, stdout)
}

/// Every request measured at its exact length; first turns cold; every later turn proven,
/// its expected reuse the shared prefix less `allowance(shared)`.
fn assert_proven(samples: &[Sample], text: &str, allowance: impl Fn(u64) -> u64) {
    assert_eq!(samples.len(), 6, "{text}");
    for s in samples {
        let r = s.replay.as_ref().unwrap();
        assert_eq!(
            s.prompt_tokens,
            Some(r.input_tokens),
            "exact length: {text}"
        );
        let cached = s.cached_tokens.expect("a cached count");
        if r.turn == 0 {
            assert_eq!(r.shared_prefix_tokens, 0, "{text}");
            assert_eq!(cached, 0, "a first turn is cold: {text}");
        } else {
            let shared = if r.turn == 1 { 1024 } else { 1300 };
            assert_eq!(r.shared_prefix_tokens, shared, "{text}");
            assert_eq!(r.expected_reuse, shared - allowance(shared), "{text}");
            assert!(cached >= r.expected_reuse, "{text}");
            assert!(
                !s.has(&Flag::ReuseShort) && !s.has(&Flag::ReuseUnverified),
                "{text}"
            );
        }
    }
}

/// With the cache off, every later turn is flagged short (or unverified, if the server
/// then counts nothing); first turns, with nothing to reuse, are not.
fn assert_flagged(samples: &[Sample], text: &str) {
    assert_eq!(samples.len(), 6, "{text}");
    for s in samples {
        let r = s.replay.as_ref().unwrap();
        let flagged = s.has(&Flag::ReuseShort) || s.has(&Flag::ReuseUnverified);
        assert_eq!(flagged, r.turn > 0, "{text}");
        if s.has(&Flag::ReuseShort) {
            assert_eq!(
                r.shortfall,
                Some(r.expected_reuse - s.cached_tokens.unwrap()),
                "{text}"
            );
        }
    }
}

#[test]
fn real_vllm_replay_proves_every_later_turn_and_without_the_prefix_cache_flags_each() {
    let srv = RealServer::start(
        Family::Vllm,
        &["--enable-prefix-caching", "--enable-prompt-tokens-details"],
    );
    let (samples, text, report) = replay(&srv.url());
    drop(srv);
    // vLLM caches whole KV blocks (128 tokens on CPU): 1300 shared → 1280 reusable.
    assert_proven(&samples, &text, |l| (l % 128).max(1));
    assert!(report.contains("reuse"), "{report}");
    let off = RealServer::start(
        Family::Vllm,
        &[
            "--no-enable-prefix-caching",
            "--enable-prompt-tokens-details",
        ],
    );
    let (samples, text, _) = replay(&off.url());
    assert_flagged(&samples, &text);
}

#[test]
fn real_sglang_replay_proves_every_later_turn_and_without_the_radix_cache_flags_each() {
    let srv = RealServer::start(Family::Sglang, &[]);
    let (samples, text, report) = replay(&srv.url());
    drop(srv);
    // SGLang's radix cache matches per token (page size 1): the last token may be
    // recomputed.
    assert_proven(&samples, &text, |_| 1);
    assert!(report.contains("reuse"), "{report}");
    let off = RealServer::start(Family::Sglang, &["--disable-radix-cache"]);
    let (samples, text, _) = replay(&off.url());
    assert_flagged(&samples, &text);
}
