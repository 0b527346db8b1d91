//! `ctxbench replay` against the real llama-server: a two-session multi-turn trace proves its
//! reuse request by request, a negative control (one slot, no host prompt cache, sessions
//! interleaved) flags every request that should have reused with `reuse_short` and names
//! eviction, and an interrupted replay resumes without losing or repeating a request.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::{ctxbench, run, signal, wait_for_samples, RefServer};
use ctxbench_schema::record::replay::ReuseCause;
use ctxbench_schema::record::{read_results, Flag, Sample};

/// Two sessions of three turns, 512-token blocks (Mooncake), each turn's prompt the previous
/// one plus new blocks: turn 1 may reuse 1024 tokens, turn 2 1300. `late_ms` is when the last
/// turn of each session is due (open loop).
pub(crate) fn two_sessions(dir: &Path, late_ms: u64) -> String {
    let lines = [
        (0, 1024, "[1, 2]", "a"),
        (0, 1024, "[10, 11]", "b"),
        (100, 1300, "[1, 2, 3]", "a"),
        (100, 1300, "[10, 11, 12]", "b"),
        (late_ms, 1600, "[1, 2, 3, 4]", "a"),
        (late_ms, 1600, "[10, 11, 12, 13]", "b"),
    ];
    let text: String = lines
        .iter()
        .map(|(t, n, ids, s)| {
            format!(
                "{{\"timestamp\": {t}, \"input_length\": {n}, \"output_length\": 16, \"hash_ids\": {ids}, \"session_id\": \"{s}\"}}\n"
            )
        })
        .collect();
    let p = dir.join("trace.jsonl");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn replay_samples(path: &Path) -> Vec<Sample> {
    read_results(path, false)
        .unwrap()
        .samples
        .into_iter()
        .filter(|s| s.replay.is_some())
        .collect()
}

/// Each sample's index, turn, proof and flags, for an assertion's message.
fn proofs(samples: &[Sample]) -> String {
    samples
        .iter()
        .map(|s| {
            let r = s.replay.as_ref().unwrap();
            format!(
                "#{} turn {} shared {} expected {} cached {:?} flags {:?} cause {:?} ({:?})\n",
                r.index,
                r.turn,
                r.shared_prefix_tokens,
                r.expected_reuse,
                s.cached_tokens,
                s.flags,
                r.cause,
                r.cause_evidence
            )
        })
        .collect()
}

#[test]
fn a_two_session_replay_proves_reuse_for_every_request() {
    let server = RefServer::start(8192, &["-np", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = two_sessions(dir.path(), 200);
    let out = dir.path().join("r.jsonl");
    let out_s = out.display().to_string();
    let url = server.url();
    let (code, stdout, stderr) = run(&[
        "replay", &trace, "--url", &url, "-o", &out_s, "--timing", "session",
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stdout.contains("ctxbench replay report"), "{stdout}");
    let samples = replay_samples(&out);
    assert_eq!(samples.len(), 6, "{}", proofs(&samples));
    for s in &samples {
        let r = s.replay.as_ref().unwrap();
        let cached = s.cached_tokens.expect("llama-server reports cached tokens");
        if r.turn == 0 {
            // Flushed at the start, fresh salt: the first turns prove a cold start.
            assert_eq!(r.shared_prefix_tokens, 0, "{}", proofs(&samples));
            assert!(cached <= 1, "a cold start: {}", proofs(&samples));
        } else {
            // Per session: the previous turn was answered before this one was sent.
            let shared = if r.turn == 1 { 1024 } else { 1300 };
            assert_eq!(r.shared_prefix_tokens, shared, "{}", proofs(&samples));
            assert!(cached >= r.expected_reuse, "{}", proofs(&samples));
        }
        assert!(
            !s.has(&Flag::ReuseShort) && !s.has(&Flag::ReuseUnverified),
            "{}",
            proofs(&samples)
        );
        assert!(r.sent_ms >= r.scheduled_ms, "lateness is never negative");
    }
    // The report reads the results alone: proven reuse equals the run's ideal.
    let (code, json, stderr) = run(&["report", &out_s, "--format", "json"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let overall = &v["overall"];
    assert_eq!(overall["shared_tokens"], overall["proven_tokens"], "{json}");
    assert_eq!(overall["shared_tokens"], 2 * (1024 + 1300), "{json}");
    assert_eq!(overall["short"], 0, "{json}");
}

#[test]
fn a_negative_control_one_slot_without_host_cache_flags_every_reusing_request_with_eviction() {
    // One slot and no host-memory prompt cache: each session's next turn finds the other
    // session's prompt in the only slot.
    let server = RefServer::start(4096, &["--cache-ram", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = two_sessions(dir.path(), 200);
    let out = dir.path().join("r.jsonl");
    let out_s = out.display().to_string();
    let url = server.url();
    let (code, _, stderr) = run(&[
        "replay", &trace, "--url", &url, "-o", &out_s, "--timing", "session",
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let samples = replay_samples(&out);
    assert_eq!(samples.len(), 6, "{}", proofs(&samples));
    for s in samples
        .iter()
        .filter(|s| s.replay.as_ref().unwrap().turn > 0)
    {
        let r = s.replay.as_ref().unwrap();
        assert!(s.has(&Flag::ReuseShort), "{}", proofs(&samples));
        let cached = s.cached_tokens.unwrap();
        assert_eq!(r.shortfall, Some(r.expected_reuse - cached));
        assert_eq!(r.cause, Some(ReuseCause::Eviction), "{}", proofs(&samples));
    }
    let (code, text, _) = run(&["report", &out_s]);
    assert_eq!(code, 0);
    assert!(text.contains("eviction"), "{text}");
}

#[test]
fn an_interrupted_replay_resumes_without_losing_or_repeating_a_request() {
    let server = RefServer::start(8192, &["-np", "2"]);
    let dir = tempfile::tempdir().unwrap();
    // The last two requests are due 30 s in: the interrupt comes before them.
    let trace = two_sessions(dir.path(), 30_000);
    let out = dir.path().join("r.jsonl");
    let out_s = out.display().to_string();
    let url = server.url();
    let mut child = ctxbench()
        .args(["replay", &trace, "--url", &url, "-o", &out_s])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_samples(&out, 4, Duration::from_secs(120));
    signal(child.id(), "-INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let first = read_results(&out, false).unwrap();
    let salt = first.header.config.replay.as_ref().unwrap().salt;
    let before = replay_samples(&out).len();
    assert!(
        (4..6).contains(&before),
        "{before} request(s) before the interrupt"
    );
    let (code, _, stderr) = run(&["replay", &trace, "--url", &url, "-o", &out_s, "--resume"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let results = read_results(&out, false).unwrap();
    assert_eq!(results.header.config.replay.as_ref().unwrap().salt, salt);
    assert_eq!(results.resumes.len(), 1);
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for s in replay_samples(&out) {
        *seen.entry(s.replay.unwrap().index).or_default() += 1;
    }
    assert_eq!(
        seen,
        (0..6).map(|i| (i, 1)).collect::<BTreeMap<u64, usize>>(),
        "every request once"
    );
}
