//! ctxbench through NVIDIA Dynamo 1.6.1's frontend (PyPI `ai-dynamo`, installed without its
//! `aisimulate` placeholder) with one mocker engine behind it (`scripts/reference-server
//! dynamo`: file discovery, TCP request plane, ZMQ event plane; model `smollm2` with the real
//! SmolLM2 tokenizer; random tokens, simulated timing, a prefix cache of 64-token blocks).
//! A distributed frontend: usage only when `stream_options.include_usage` is asked for,
//! `context_window` in `/v1/models` (0: unknown), `dynamo_frontend_*` on `/metrics`, 404
//! `Route not found` for every tokenizer and flush path, and an engine's failure as a 500
//! without its reason. What it answers on the wire is recorded in
//! `tests/fixtures/recorded/dynamo-1.6.1/`.
//! Run with `cargo test --features real-servers --test it real_dynamo -- --test-threads=1`
//! (the first start sets Dynamo up: `scripts/reference-server dynamo setup`, ~90 s, 704 MB);
//! `scripts/test-real-servers` runs it with the other real servers.

use crate::common;

use common::real::{has_flag, read_lines, u, Family, RealServer};
use common::{argv, ref_paths, sweep, RefServer};
use serde_json::Value;

/// The notes of a header's server record.
fn notes(server: &Value) -> Vec<String> {
    server["notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn real_dynamo_frontend_is_recorded_as_dynamo_and_a_1k_to_4k_sweep_measures_every_sample_with_usage_proven_cold(
) {
    let srv = RealServer::start(Family::Dynamo, &[]);
    let run = sweep(
        &srv.url(),
        &argv("--contexts 1k,2k,4k --reps 2 --output-tokens 16"),
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, srv.log_text());
    let l = read_lines(&run.out);
    let server = &l.header["server"];
    // Recognised as what it is, spoken to with the OpenAI protocol.
    assert_eq!(server["server_kind"], "dynamo", "{server}");
    assert_eq!(server["backend"], "openai", "{server}");
    assert!(
        server["backend_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("dynamo_frontend_"),
        "{server}"
    );
    // The mocker's --max-model-len, as /v1/models context_window; its KV pool from /metrics
    // (the mocker's default 16384 blocks of 64 tokens).
    assert_eq!(server["max_context"], 8192, "{server}");
    assert_eq!(
        server["max_context_source"], "/v1/models context_window",
        "{server}"
    );
    assert_eq!(server["kv_pool_tokens"], 16384 * 64, "{server}");
    // Token ids: decided once by the test request, stated once. The frontend takes them,
    // but has no tokenizer endpoint, so prompts are text calibrated on its own counts.
    assert!(
        server["token_id_test"]
            .as_str()
            .unwrap_or_default()
            .ends_with("taken as ids"),
        "{server}"
    );
    assert_eq!(server["token_id_prompts"], false, "{server}");
    let n = notes(server);
    assert!(
        !n.iter().any(|x| x.to_lowercase().contains("token id")),
        "token ids said again in a note: {n:?}"
    );
    assert_eq!(
        run.stderr.matches("taken as ids").count(),
        1,
        "{}",
        run.stderr
    );
    // Usage comes only when asked for: asked, and said once.
    assert_eq!(
        n.iter().filter(|x| x.contains("include_usage")).count(),
        1,
        "{n:?}"
    );
    assert_eq!(server["reports_cached_tokens"], true, "{server}");
    // The idle check reads the frontend's own gauges.
    assert!(
        server["idle_check"]
            .as_str()
            .unwrap_or_default()
            .contains("dynamo_frontend_inflight_requests"),
        "{server}"
    );
    let tolerance = l.header["config"]["length_tolerance_pct"]
        .as_f64()
        .unwrap_or(0.0);
    assert_eq!(l.samples.len(), 6, "{}", run.stderr);
    for s in &l.samples {
        let target = u(s, "context_tokens");
        assert_eq!(s["status"], "ok", "{s}\n{}", run.stderr);
        // Measured with the server's usage: its counts, not the client's.
        let got = u(s, "prompt_tokens");
        assert!(
            got.abs_diff(target) as f64 <= (tolerance * target as f64).ceil(),
            "{s}"
        );
        assert_eq!(u(s, "output_tokens"), 16, "{s}");
        // Cold, proven by the cached-token count the frontend passes on.
        assert_eq!(s["cache_verified"], true, "{s}");
        assert_eq!(u(s, "cached_tokens"), 0, "{s}");
        assert!(!has_flag(s, "contaminated"), "{s}");
    }

    // A model it does not serve is named as such (not taken for a chat-only server).
    let wrong = sweep(
        &srv.url(),
        &argv("--contexts 1k --reps 1 --output-tokens 16 --model nope"),
    );
    assert_ne!(wrong.code, 0, "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains("Model not found") && wrong.stderr.contains("check --model"),
        "{}",
        wrong.stderr
    );

    // A point over its context is refused before anything is sent, naming the limit.
    let over = sweep(
        &srv.url(),
        &argv("--contexts 9k --reps 1 --output-tokens 16"),
    );
    assert_eq!(over.code, 2, "{}", over.stderr);
    assert!(
        over.stderr.contains("8192") && over.stderr.contains("context_window"),
        "{}",
        over.stderr
    );
    if over.out.exists() {
        assert!(read_lines(&over.out).samples.is_empty(), "{}", over.stderr);
    }
}

#[test]
fn real_dynamo_chat_is_measured_and_a_repeated_prompt_is_caught_by_its_whole_block_cached_tokens() {
    let srv = RealServer::start(Family::Dynamo, &[]);
    let chat = sweep(
        &srv.url(),
        &argv("--contexts 1k --reps 2 --output-tokens 16 --endpoint chat"),
    );
    assert_eq!(chat.code, 0, "{}\n{}", chat.stderr, srv.log_text());
    let l = read_lines(&chat.out);
    assert_eq!(l.header["server"]["endpoint"], "/v1/chat/completions");
    assert_eq!(l.samples.len(), 2, "{}", chat.stderr);
    for s in &l.samples {
        assert_eq!(s["status"], "ok", "{s}");
        assert_eq!(s["cache_verified"], true, "{s}");
        assert_eq!(u(s, "cached_tokens"), 0, "{s}");
    }

    // The same prompt twice, no nonce: the mocker serves whole 64-token blocks of it from
    // its cache, and says so; ctxbench keeps both samples out of the figures.
    let repeat = sweep(
        &srv.url(),
        &argv("--contexts 1k --reps 2 --prompts 1 --nonce off --output-tokens 16"),
    );
    let l = read_lines(&repeat.out);
    assert_eq!(l.samples.len(), 2, "{}", repeat.stderr);
    let second = &l.samples[1];
    let cached = u(second, "cached_tokens");
    assert!(cached >= 14 * 64 && cached % 64 == 0, "{second}");
    assert!(has_flag(second, "contaminated"), "{second}");
    assert!(
        repeat.stderr.contains("hit the prefix cache"),
        "{}",
        repeat.stderr
    );
}

#[test]
fn real_dynamo_point_over_its_engines_kv_pool_fails_named_as_an_engine_failure_and_earlier_points_are_kept(
) {
    // No --max-model-len (context_window 0: unknown) and a KV pool of 40 blocks of 64 tokens:
    // the frontend forwards a 4k prompt and the engine refuses it.
    let srv = RealServer::start_with_env(
        Family::Dynamo,
        &["--num-gpu-blocks-override", "40"],
        &[("CTXBENCH_REF_CTX", "0")],
    );
    let run = sweep(
        &srv.url(),
        &argv("--contexts 1k,2k,4k --reps 1 --output-tokens 16"),
    );
    assert_eq!(run.code, 1, "{}\n{}", run.stderr, srv.log_text());
    let l = read_lines(&run.out);
    let server = &l.header["server"];
    assert_eq!(server["max_context"], Value::Null, "{server}");
    assert!(
        notes(server)
            .iter()
            .any(|n| n.contains("context_window 0") && n.contains("unknown, not 0 tokens")),
        "{server}"
    );
    assert_eq!(server["kv_pool_tokens"], 40 * 64, "{server}");
    let by_len = |len: u64| -> Vec<&Value> {
        l.samples
            .iter()
            .filter(|s| u(s, "context_tokens") == len)
            .collect()
    };
    for len in [1024, 2048] {
        let s = by_len(len);
        assert_eq!(s.len(), 1, "{}", run.stderr);
        assert_eq!(s[0]["status"], "ok", "{}", s[0]);
    }
    let failed = by_len(4096);
    assert_eq!(failed.len(), 1, "{}", run.stderr);
    assert_eq!(failed[0]["status"], "failed", "{}", failed[0]);
    let message = failed[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("HTTP 500")
            && message.contains("Dynamo's frontend")
            && message.contains("KV pool"),
        "{message}"
    );
    assert!(run.stderr.contains("Dynamo's frontend"), "{}", run.stderr);

    // Token ids of exact length from a llama-server of the same model (--tokenizer-url): no
    // calibration request goes first, so the 4k prompt is streamed, answered 200, and the
    // engine's refusal comes as an error event.
    let model = ref_paths().real_model.to_str().unwrap().to_owned();
    let tok = RefServer::start(8192, &["-m", &model]);
    let ids = sweep(
        &srv.url(),
        &[
            &argv("--contexts 1k,4k --reps 1 --output-tokens 16")[..],
            &["--tokenizer-url", &tok.url()],
        ]
        .concat(),
    );
    assert_eq!(ids.code, 1, "{}", ids.stderr);
    let l = read_lines(&ids.out);
    assert!(
        l.header["server"]["prompt_method"]
            .as_str()
            .unwrap_or_default()
            .starts_with("token ids"),
        "{}",
        l.header
    );
    assert_eq!(l.samples.len(), 2, "{}", ids.stderr);
    let (ok, failed) = (&l.samples[0], &l.samples[1]);
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(
        u(ok, "prompt_tokens"),
        1024,
        "exact, from the lent tokenizer: {ok}"
    );
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("mid-stream") && message.contains("Dynamo's frontend"),
        "{message}"
    );
}
