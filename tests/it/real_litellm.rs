//! ctxbench through the LiteLLM proxy (PyPI `litellm[proxy]` 1.108.7 + prisma), model `tiny`
//! mapped to `openai/<model>` of the reference llama-server behind it, started together by
//! `scripts/reference-server litellm` (one process group; the script stops both). A gateway:
//! it needs its master key as a Bearer token, answers a wrong key with HTTP 400 `No connected
//! db.` (never 401, there is no database), hides every tokenizer path and `/metrics`, passes
//! token-id prompts and `cached_tokens` through to and from the upstream, and ends a
//! `/v1/completions` stream with usage of all zeros unless `stream_options.include_usage` is
//! asked for. What it answers on the wire is recorded in
//! `tests/fixtures/recorded/litellm-1.108.7/`.
//! Run with `cargo test --features real-servers --test real_litellm` (scripts/test-real-servers
//! sets the servers up first).
//!
//! Issue 19: these fail until the client decides token-id pass-through by usage.prompt_tokens,
//! accepts as cold a cached count no larger than BOS + nonce, and shows the server's own error
//! message.

use crate::common;

use std::time::{Duration, Instant};

use common::real::{has_flag, processes_in_group, read_lines, u, Family, RealServer, LITELLM_KEY};
use common::{argv, http_get, sweep_env};
use serde_json::Value;

#[test]
fn real_litellm_proxy_passes_token_id_prompts_through_so_a_1k_to_4k_sweep_has_exact_lengths_and_every_sample_usable(
) {
    let srv = RealServer::start(Family::Litellm, &[]);
    // The proxy hides the tokenizer; the server behind it lends its own (--tokenizer-url).
    let upstream = format!(
        "http://127.0.0.1:{}",
        srv.upstream_port()
            .expect("the log names the upstream's port")
    );
    // The key from a variable the user names (--api-key-env).
    let run = sweep_env(
        &srv.url(),
        &[
            &argv("--contexts 1k,2k,4k --reps 2 --output-tokens 8 --api-key-env CTXBENCH_TEST_LITELLM_KEY")[..],
            &["--tokenizer-url", &upstream],
        ]
        .concat(),
        &[("CTXBENCH_TEST_LITELLM_KEY", LITELLM_KEY)],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, srv.log_text());
    let l = read_lines(&run.out);
    let server = &l.header["server"];
    // The proxy hides every tokenizer path, but passes token ids to llama-server, whose
    // usage.prompt_tokens counts them: the header says the prompts are token ids, exact.
    assert_eq!(server["token_id_prompts"], true, "{server}");
    let method = server["prompt_method"].as_str().unwrap_or_default();
    assert!(
        method.starts_with("token ids") && method.contains("--tokenizer-url"),
        "{server}"
    );
    assert!(
        server["token_id_test"]
            .as_str()
            .unwrap_or_default()
            .ends_with("taken as ids"),
        "{server}"
    );
    assert_eq!(server["tokenizer"]["url"], upstream.as_str(), "{server}");
    let config = &l.header["config"];
    assert_eq!(
        config["length_tolerance_pct"].as_f64().unwrap_or(0.0),
        0.0,
        "token ids need no calibration tolerance: {config}"
    );
    // What a cold prompt may share with another: the BOS the server adds and the nonce's
    // tokens (llama-server counts the BOS, and sometimes a first token, as cached).
    let bos = server["server_added_tokens"].as_u64().unwrap_or(0).max(1);
    let shared = u(config, "nonce_tokens") + bos;
    assert_eq!(l.samples.len(), 6, "{}", run.stderr);
    eprintln!("target  prompt_tokens  cached_tokens  flags");
    for s in &l.samples {
        let target = u(s, "context_tokens");
        eprintln!(
            "{target:>6}  {:>13}  {:>13}  {}",
            s["prompt_tokens"], s["cached_tokens"], s["flags"]
        );
        assert_eq!(s["status"], "ok", "{s}\n{}", run.stderr);
        assert_eq!(u(s, "prompt_tokens"), target, "exact length: {s}");
        assert_eq!(s["length_ok"], true, "{s}");
        assert_ne!(s["contaminated"], Value::Bool(true), "{s}");
        assert!(!has_flag(s, "contaminated"), "{s}");
        assert!(!has_flag(s, "suspected_cache_hit"), "{s}");
        // The upstream's cached_tokens come through the proxy: the cold prefill is proven.
        assert_eq!(s["cache_verified"], true, "{s}");
        assert!(u(s, "cached_tokens") <= shared, "{s}");
        assert_eq!(u(s, "output_tokens"), 8, "{s}");
    }
}

#[test]
fn real_litellm_wrong_key_fails_with_the_proxys_own_message_and_exit_2_naming_the_key_variable() {
    let srv = RealServer::start(Family::Litellm, &[]);
    let args = argv("--contexts 1k --reps 1 --output-tokens 4");
    // The default variable.
    let run = sweep_env(
        &srv.url(),
        &args,
        &[("CTXBENCH_API_KEY", "sk-not-the-master-key")],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("No connected db."), "{}", run.stderr);
    assert!(run.stderr.contains("CTXBENCH_API_KEY"), "{}", run.stderr);
    // A variable the user named is the one the message names.
    let named = [&args[..], &["--api-key-env", "MY_GATEWAY_KEY"]].concat();
    let run = sweep_env(
        &srv.url(),
        &named,
        &[("MY_GATEWAY_KEY", "sk-not-the-master-key")],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("No connected db."), "{}", run.stderr);
    assert!(run.stderr.contains("MY_GATEWAY_KEY"), "{}", run.stderr);
    // Nothing was measured with a key the proxy refused.
    if run.out.exists() {
        assert!(read_lines(&run.out).samples.is_empty(), "{}", run.stderr);
    }
}

/// Waits up to `limit` until `pgid` has no live process; returns those left.
fn wait_group_gone(pgid: u32, limit: Duration) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let left = processes_in_group(pgid);
        if left.is_empty() || start.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn real_litellm_script_stops_the_proxy_and_its_upstream_llama_server_when_it_is_terminated_or_killed(
) {
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGKILL, "SIGKILL")] {
        let srv = RealServer::start(Family::Litellm, &[]);
        let upstream = srv
            .upstream_port()
            .expect("the log names the upstream's port");
        assert!(
            http_get(upstream, "/health").is_some_and(|(c, _)| c == 200),
            "the upstream llama-server answers"
        );
        let pgid = srv.pid();
        assert!(
            processes_in_group(pgid).len() >= 3,
            "script, proxy and llama-server"
        );
        // The script alone, not its group: what a user's `kill PID` does. SIGTERM runs its
        // trap; after SIGKILL its children get the parent-death signal.
        unsafe { libc::kill(pgid as i32, signal) };
        let left = wait_group_gone(pgid, Duration::from_secs(20));
        assert!(left.is_empty(), "{name}: processes left: {left:?}");
        assert!(
            http_get(upstream, "/health").is_none(),
            "{name}: the upstream still answers"
        );
        assert!(
            http_get(srv.port, "/health/liveliness").is_none(),
            "{name}: the proxy still answers"
        );
    }
}
