//! `ctxbench compare` on two real replays of the same trace with the same `--prompt-seed`:
//! two slots (each session keeps its prefix) against one slot without the host prompt cache
//! (every later turn recomputes its prefix), one server at a time on the reference
//! llama-server. The comparison puts their proven reuse side by side and TTFT per bucket,
//! and refuses a replay of other prompts, saying what differs.

use std::path::Path;

use crate::common::{run, RefServer};
use crate::replay_llamacpp::two_sessions;

/// Replays the two-session trace on a server started with `extra`, salt `seed`, into `out`.
fn replay(extra: &[&str], trace: &str, out: &Path, seed: &str) {
    let server = RefServer::start(4096, extra);
    let url = server.url();
    let out_s = out.display().to_string();
    let (code, _, stderr) = run(&[
        "replay",
        trace,
        "--url",
        &url,
        "-o",
        &out_s,
        "--timing",
        "session",
        "--prompt-seed",
        seed,
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
}

#[test]
fn compare_puts_two_real_replays_reuse_side_by_side_and_refuses_other_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = two_sessions(dir.path(), 200);
    let (a, b, c) = (
        dir.path().join("two-slots.jsonl"),
        dir.path().join("one-slot.jsonl"),
        dir.path().join("other-seed.jsonl"),
    );
    replay(&["-np", "2"], &trace, &a, "43");
    replay(&["--cache-ram", "0"], &trace, &b, "43");
    let (a_s, b_s, c_s) = (
        a.display().to_string(),
        b.display().to_string(),
        c.display().to_string(),
    );
    let (code, json, stderr) = run(&["compare", &a_s, &b_s, "--format", "json"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["salt"], 43, "{json}");
    let all = &v["reuse"][0];
    assert_eq!(all["label"], "all", "{json}");
    // Two slots prove every shared token; one slot without host cache proves (almost)
    // none and flags each of the four later turns.
    assert_eq!(all["a"]["proven_tokens"], 2 * (1024 + 1300), "{json}");
    assert_eq!(all["a"]["short"], 0, "{json}");
    assert_eq!(all["b"]["short"], 4, "{json}");
    assert!(
        all["b"]["proven_tokens"].as_u64().unwrap() < 2 * (1024 + 1300),
        "{json}"
    );
    // Every bucket of input and uncached tokens has both sides' counts and a verdict.
    for key in ["by_input", "by_uncached"] {
        let rows = v[key].as_array().unwrap();
        assert!(!rows.is_empty(), "{key}: {json}");
        let n: u64 = rows
            .iter()
            .map(|r| r["a"]["n"].as_u64().unwrap() + r["b"]["n"].as_u64().unwrap())
            .sum();
        assert_eq!(n, 12, "{key}: six requests a side, {json}");
        assert!(rows.iter().all(|r| r["verdict"].is_string()), "{json}");
    }
    // The terminal table names the sections and marks a p90 without its samples.
    let (code, text, _) = run(&["compare", &a_s, &b_s]);
    assert_eq!(code, 0);
    for w in [
        "Proven reuse",
        "TTFT by uncached tokens",
        "needs 29",
        "prompt salt 43",
    ] {
        assert!(text.contains(w), "{w}: {text}");
    }
    // Another salt: the same trace with other tokens is refused, saying so.
    replay(&["-np", "2"], &trace, &c, "44");
    let (code, _, stderr) = run(&["compare", &a_s, &c_s]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("prompt salt differs: 43 vs 44"), "{stderr}");
}
