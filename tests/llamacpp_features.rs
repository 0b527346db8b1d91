//! Speculative statistics and slot-erase flush against the real reference llama-server.

mod common;

use common::{ref_paths, run, serial, RefServer};
use ctxbench::record::{read_results, Status};

#[test]
fn speculative_decoding_with_a_draft_model_reports_acceptance_per_sample() {
    let _g = serial();
    let model = ref_paths().model.to_str().unwrap().to_owned();
    // The tiny model as its own draft.
    let srv = RefServer::start(
        8192,
        &[
            "-md",
            &model,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            "8",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spec.jsonl");
    let (code, stdout, stderr) = run(&[
        "sweep",
        "--url",
        &srv.url(),
        "--contexts",
        "1k,2k",
        "--reps",
        "2",
        "--output-tokens",
        "32",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let r = read_results(&out, false).unwrap();
    assert_eq!(r.samples.len(), 4);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        let server = s.server.as_ref().unwrap();
        let drafted = server.draft_n.expect("draft_n reported with a draft model");
        assert!(drafted > 0);
        // Per-request timings and the /metrics counters are two server sources: they agree.
        assert_eq!(s.spec_draft_tokens, Some(drafted), "{s:?}");
        assert_eq!(s.spec_accepted_tokens, server.draft_n_accepted, "{s:?}");
        let steps = s.spec_verify_steps.expect("verify steps");
        assert!(steps > 0 && steps <= 31, "{steps}");
        let rate = s.spec_accept_rate.unwrap();
        assert!(rate > 0.0 && rate <= 1.0, "{rate}");
        let len = s.spec_accept_length.unwrap();
        assert!((1.0..=9.0).contains(&len), "{len}");
        // A verify step yields ≥ 1 token, so it takes at least as long as a token.
        assert!(s.ms_per_verify_step.unwrap() >= s.ms_per_step.unwrap() - 1e-9);
        let m = s.metrics.as_ref().expect("metric deltas");
        assert_eq!(
            m["llamacpp:prompt_tokens_total"].as_f64(),
            Some(s.context_tokens as f64)
        );
    }
    assert!(stdout.contains("accept length"), "{stdout}");
}

#[test]
fn slot_erase_flush_runs_before_every_sample_with_slot_save_path() {
    let _g = serial();
    let slots = tempfile::tempdir().unwrap();
    let srv = RefServer::start(8192, &["--slot-save-path", slots.path().to_str().unwrap()]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f.jsonl");
    let (code, _stdout, stderr) = run(&[
        "sweep",
        "--url",
        &srv.url(),
        "--contexts",
        "1k",
        "--reps",
        "2",
        "--output-tokens",
        "8",
        "--flush",
        "always",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let r = read_results(&out, false).unwrap();
    assert_eq!(
        r.header.config["flush"]
            .as_str()
            .map(|f| f.contains("slot erase")),
        Some(true)
    );
    for s in &r.samples {
        let f = s.flush.as_deref().expect("flushed");
        assert!(f.starts_with("llama.cpp slot erase"), "{f}");
        // The previous request's prompt was in the slot and was erased.
        assert!(!f.contains(" 0 tokens erased"), "{f}");
        assert_eq!(s.cached_tokens, Some(0));
    }
}

#[test]
fn slot_erase_without_slot_save_path_names_the_flag() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.jsonl");
    let (code, _stdout, stderr) = run(&[
        "sweep",
        "--url",
        &srv.url(),
        "--contexts",
        "1k",
        "--reps",
        "1",
        "--output-tokens",
        "8",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "auto falls back: {stderr}");
    assert!(stderr.contains("--slot-save-path"), "{stderr}");
    let r = read_results(&out, false).unwrap();
    assert_eq!(r.samples[0].flush, None);
    assert_eq!(
        r.samples[0].cached_tokens,
        Some(0),
        "nonce and cache_prompt:false still hold"
    );
    let out2 = dir.path().join("b.jsonl");
    let (code, _stdout, stderr) = run(&[
        "sweep",
        "--url",
        &srv.url(),
        "--contexts",
        "1k",
        "--reps",
        "1",
        "--flush",
        "always",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--flush always") && stderr.contains("--slot-save-path"),
        "{stderr}"
    );
}
