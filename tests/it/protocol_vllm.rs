//! vLLM cannot run here: these tests drive ctxbench against a scripted in-process server that
//! follows vLLM's documented API (/v1/completions with token ids, a `choices: []` usage chunk,
//! cached tokens only with --enable-prompt-tokens-details, /reset_prefix_cache only in dev
//! mode, vllm:* counters including spec_decode_*).

use crate::common;
use crate::scripted;

use common::{argv, sweep};
use ctxbench_schema::record::Status;
use scripted::{
    assert_flush_busy_at_the_probe_keeps_flushing,
    assert_flush_refused_mid_run_flags_every_later_sample, over_long_prompt_error, Config, Flavor,
    Scripted,
};
use serde_json::json;

#[test]
fn protocol_vllm_auto_sweep_with_flush_cached_tokens_and_spec_from_metric_deltas() {
    let mut c = Config::new(Flavor::Vllm);
    c.spec_draft = 4;
    c.spec_accepted = 3;
    c.tokens_per_chunk = 4;
    c.per_request_metrics = true;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &argv("--contexts 1k,2k --reps 2 --output-tokens 17"),
    )
    .ok();
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(stderr.contains("backend: vllm"), "{stderr}");
    assert!(
        stderr.contains("owned_by"),
        "the reason names the probe: {stderr}"
    );
    assert!(
        stderr.contains("KV pool 32768 tokens"),
        "blocks × block size: {stderr}"
    );
    let r = run.results();
    assert_eq!(r.header.server.backend, "vllm");
    assert_eq!(r.samples.len(), 4);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert_eq!(s.prompt_tokens, Some(s.context_tokens));
        assert_eq!(s.cached_tokens, Some(0));
        assert!(s.cache_verified);
        assert_eq!(s.output_tokens, Some(17));
        // 16 tokens after the first, 4 per verify step: 4 steps, 3 of 4 drafts accepted.
        assert_eq!(s.spec_verify_steps, Some(4));
        assert_eq!(s.spec_draft_tokens, Some(16));
        assert_eq!(s.spec_accepted_tokens, Some(12));
        assert_eq!(s.spec_accept_length, Some(4.0));
        assert_eq!(s.spec_accept_rate, Some(0.75));
        assert!(s.spec_source.as_deref().unwrap().contains("vllm:"));
        assert!(s.flush.as_deref().unwrap().contains("/reset_prefix_cache"));
        // --enable-per-request-metrics, in ms: the fake's queueing plus its prefill of
        // 5 ms + 2 µs per token, then 16 tokens in 4 chunks 3 ms apart.
        let server = s.server.as_ref().expect("per-request metrics");
        assert_eq!(server.source, "vllm.metrics");
        let q = server.queue_ms.unwrap();
        let want = 5.0 + s.context_tokens as f64 * 0.002 + q;
        assert!(
            (server.prompt_ms.unwrap() - want).abs() < 1e-6,
            "{server:?}"
        );
        assert_eq!(server.predicted_ms, Some(12.0));
        // vLLM's tokens_per_second counts prefill (n / (ttft + generation)); it is not a
        // decode rate. A server decode rate, if recorded, is (n - 1) / generation time.
        let decode = 16.0 / 12.0 * 1000.0;
        assert!(
            server
                .predicted_per_second
                .is_none_or(|r| (r - decode).abs() < 1e-6 * decode),
            "server decode tok/s taken from tokens_per_second: {server:?}"
        );
        let m = s.metrics.as_ref().unwrap();
        let key = "vllm:prompt_tokens_total{engine=\"0\",model_name=\"scripted-model\"}";
        assert_eq!(m.get(key).copied(), Some(s.context_tokens as f64));
    }
    assert_eq!(srv.flushes(), 5);
    let reqs = srv.requests("/v1/completions");
    // The negotiation's two test requests (streamed and not, two tokens of "Hello", every
    // optional field offered), the warmup, then the four measured requests.
    assert_eq!(reqs.len(), 2 + 1 + 4);
    for q in &reqs[..2] {
        assert_eq!(
            (&q["prompt"], &q["max_tokens"]),
            (&json!("Hello"), &json!(2))
        );
        assert_eq!(q["ignore_eos"], true);
    }
    for q in &reqs[3..] {
        assert!(
            q["prompt"].as_array().unwrap().len() >= 1024,
            "token ids sent"
        );
        assert_eq!(q["ignore_eos"], true);
        assert_eq!(q["temperature"], 0);
        assert_eq!(q["max_tokens"], 17);
        assert_eq!(q["model"], "scripted-model");
        assert_eq!(q["stream_options"]["include_usage"], true);
    }
    assert!(stdout.contains("speculative decoding"), "{stdout}");
}

#[test]
fn protocol_vllm_without_flags_names_them_and_marks_samples_unverified() {
    let mut c = Config::new(Flavor::Vllm);
    c.cache_report = false;
    c.dev_mode = false;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &["--contexts", "1k", "--reps", "1", "--output-tokens", "8"],
    )
    .ok();
    let stderr = &run.stderr;
    assert!(stderr.contains("VLLM_SERVER_DEV_MODE=1"), "{stderr}");
    assert!(
        stderr.contains("--enable-prompt-tokens-details"),
        "{stderr}"
    );
    let r = run.results();
    let s = &r.samples[0];
    assert_eq!(s.cached_tokens, None);
    assert!(!s.cache_verified && s.flags.iter().any(|f| f == "cache_unverified"));
    assert_eq!(s.flush, None);
    assert_eq!(
        s.spec_accept_length, None,
        "no spec counters, no spec stats"
    );
}

#[test]
fn protocol_vllm_flush_always_fails_clearly_without_dev_mode() {
    let mut c = Config::new(Flavor::Vllm);
    c.dev_mode = false;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &["--contexts", "1k", "--reps", "1", "--flush", "always"],
    );
    let stderr = &run.stderr;
    assert_ne!(run.code, 0);
    assert!(
        stderr.contains("--flush always") && stderr.contains("VLLM_SERVER_DEV_MODE=1"),
        "{stderr}"
    );
}

#[test]
fn protocol_vllm_over_long_prompt_is_a_clear_context_error() {
    let e = over_long_prompt_error(Flavor::Vllm, "vllm");
    assert_eq!(e.kind, "context_exceeded");
    assert!(
        e.message.contains("maximum context length is 4096"),
        "{e:?}"
    );
}

/// Real vLLM answers 200 `{"success": false}` to /reset_prefix_cache while a request holds
/// blocks, and clears nothing (tests/fixtures/recorded/vllm-0.32.0/reset_prefix_cache_busy.json);
/// here another client's request is running from the second flush on.
#[test]
fn scripted_vllm_reset_refused_mid_run_flags_every_later_sample_flush_failed() {
    assert_flush_refused_mid_run_flags_every_later_sample(Flavor::Vllm, "reset");
}

#[test]
fn scripted_vllm_reset_busy_at_the_probe_keeps_flushing_on_with_flush_auto() {
    assert_flush_busy_at_the_probe_keeps_flushing(Flavor::Vllm, "auto");
}

/// `--model` is the name sent in every request; vLLM answers 404 to a name it does not
/// serve (tests/fixtures/recorded/vllm-0.32.0/completions_wrong_model.json).
#[test]
fn scripted_vllm_model_flag_is_sent_and_an_unserved_name_fails_clearly() {
    let srv = Scripted::start(Config::new(Flavor::Vllm));
    let args = ["--contexts", "1k", "--reps", "1", "--output-tokens", "4"];
    let run = sweep(
        &srv.url(),
        &[&args[..], &["--model", "scripted-model"]].concat(),
    )
    .ok();
    assert_eq!(
        run.results().header.config.model.as_deref(),
        Some("scripted-model")
    );
    assert!(srv
        .requests("/v1/completions")
        .iter()
        .all(|q| q["model"] == "scripted-model"));
    let run = sweep(&srv.url(), &[&args[..], &["--model", "nope"]].concat());
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("nope"), "{}", run.stderr);
}
