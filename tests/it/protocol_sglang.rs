//! SGLang cannot run here: these tests drive ctxbench against a scripted in-process server
//! that follows SGLang's documented API (native /generate, cumulative streaming, meta_info in seconds,
//! /server_info, /flush_cache, sglang:* metrics).

use crate::common;
use crate::scripted;

use common::{argv, sweep};
use ctxbench_schema::record::Status;
use ctxbench_schema::warm::Tier;
use scripted::{
    assert_flush_busy_at_the_probe_keeps_flushing,
    assert_flush_refused_mid_run_flags_every_later_sample, Config, Flavor, Scripted,
};

fn spec_config() -> Config {
    let mut c = Config::new(Flavor::Sglang);
    // EAGLE-like: 3 drafts per step, 2 accepted, chunks of 3 tokens.
    c.spec_draft = 3;
    c.spec_accepted = 2;
    c.tokens_per_chunk = 3;
    c
}

#[test]
fn protocol_sglang_auto_sweep_lands_counts_timings_cache_and_spec_in_their_fields() {
    let srv = Scripted::start(spec_config());
    let run = sweep(
        &srv.url(),
        &argv("--contexts 1k,2k --reps 2 --output-tokens 16"),
    )
    .ok();
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(stderr.contains("backend: sglang"), "{stderr}");
    assert!(
        stderr.contains("/server_info"),
        "the reason names the probe: {stderr}"
    );
    assert!(stderr.contains("KV pool 500000 tokens"), "{stderr}");
    assert!(stderr.contains("sglang /flush_cache"), "{stderr}");
    let r = run.results();
    assert_eq!(r.header.server.backend, "sglang");
    assert_eq!(r.header.server.kv_pool_tokens, Some(500_000));
    assert_eq!(r.header.server.max_context, Some(8192));
    assert_eq!(r.samples.len(), 4);
    // 16 tokens: first from prefill, then 5 verify steps of 3.
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert_eq!(s.prompt_tokens, Some(s.context_tokens));
        assert_eq!(
            s.cached_tokens,
            Some(0),
            "the nonce defeats the radix cache"
        );
        assert!(s.cache_verified && !s.contaminated);
        assert_eq!(s.output_tokens, Some(16));
        assert_eq!(
            s.token_chunks,
            Some(6),
            "multi-token chunks counted as chunks"
        );
        assert_eq!(s.spec_verify_steps, Some(5));
        assert_eq!(s.spec_accepted_tokens, Some(10));
        assert_eq!(s.spec_draft_tokens, Some(15));
        assert_eq!(s.spec_accept_length, Some(16.0 / 5.0));
        assert!((s.spec_accept_rate.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        let server = s.server.as_ref().expect("meta_info timings");
        assert_eq!(server.source, "sglang.meta_info");
        // The fake stamps what it did: a prefill of 5 ms + 2 µs per token, then 5 chunks of
        // 3 ms. Seconds → ms and the epoch-stamp difference must land on those.
        let prefill = 5.0 + s.context_tokens as f64 * 0.002;
        let (q, p, e2e) = (
            server.queue_ms.unwrap(),
            server.prompt_ms.unwrap(),
            server.e2e_ms.unwrap(),
        );
        assert!((p - prefill).abs() < 0.01, "epoch-s difference: {server:?}");
        assert!(
            (e2e - q - p - 5.0 * 3.0).abs() < 0.01,
            "e2e_latency is seconds: {server:?}"
        );
        // The client saw at least the server's prefill before the first token.
        assert!(s.ttft_ms.unwrap() >= p, "{s:?}");
        assert_eq!(s.flush.as_deref(), Some("sglang /flush_cache"));
        let m = s.metrics.as_ref().expect("metric deltas");
        let prompt_delta = m["sglang:prompt_tokens_total{model_name=\"scripted-model\"}"];
        assert_eq!(prompt_delta, s.context_tokens as f64);
    }
    // One flush to test it, then one before every sample.
    assert_eq!(srv.flushes(), 1 + 4);
    // What ctxbench sent: token ids of the exact length, greedy, EOS ignored.
    let gens = srv.requests("/generate");
    assert_eq!(gens.len(), 5, "warmup + 4 samples");
    for g in &gens[1..] {
        let ids = g["input_ids"].as_array().unwrap();
        assert!(ids.len() == 1024 || ids.len() == 2048, "{}", ids.len());
        assert_eq!(g["sampling_params"]["ignore_eos"], true);
        assert_eq!(g["sampling_params"]["max_new_tokens"], 16);
        assert_eq!(g["sampling_params"]["temperature"], 0);
        assert_eq!(g["stream"], true);
    }
    assert!(stdout.contains("speculative decoding"), "{stdout}");
}

#[test]
fn protocol_sglang_without_metrics_or_spec_leaves_optional_fields_empty() {
    let mut c = Config::new(Flavor::Sglang);
    c.enable_metrics = false;
    c.cache_report = false;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &argv("--backend sglang --contexts 1k --reps 1 --output-tokens 8 --flush never"),
    )
    .ok();
    let stderr = &run.stderr;
    assert!(
        stderr.contains("--enable-metrics"),
        "names the flag: {stderr}"
    );
    assert!(
        stderr.contains("--enable-cache-report"),
        "names the flag: {stderr}"
    );
    let r = run.results();
    let s = &r.samples[0];
    assert_eq!(s.spec_accept_length, None);
    assert_eq!(s.ms_per_verify_step, None);
    assert_eq!(s.flush, None);
    assert_eq!(srv.flushes(), 0);
    let server = s.server.as_ref().unwrap();
    assert_eq!(
        server.prompt_ms, None,
        "no epoch stamps without --enable-metrics"
    );
    // e2e_latency: the fake's prefill (5 ms + 2 µs per token) and 7 chunk gaps of 3 ms.
    let e2e = server.e2e_ms.unwrap();
    let planned = 5.0 + s.context_tokens as f64 * 0.002 + 7.0 * 3.0;
    assert!(e2e >= planned && e2e < planned + 5.0, "{server:?}");
    // Native meta_info reports cached tokens regardless of --enable-cache-report.
    assert_eq!(s.cached_tokens, Some(0));
}

#[test]
fn protocol_sglang_over_long_prompt_is_a_clear_context_error() {
    let mut c = Config::new(Flavor::Sglang);
    // The server advertises more than it accepts, so the request reaches its error path.
    c.advertised_context = 32768;
    c.real_context = 4096;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &["--contexts", "1k,8k", "--reps", "1", "--output-tokens", "8"],
    );
    assert_eq!(run.code, 1, "incomplete run: {}", run.stderr);
    let r = run.results();
    assert_eq!(r.samples[0].status, Status::Ok);
    let e = r.samples[1].error.as_ref().expect("8k failed");
    assert_eq!(e.kind, "context_exceeded", "{e:?}");
    assert!(
        e.message
            .contains("longer than the model's context length (4096 tokens)"),
        "{e:?}"
    );
}

#[test]
fn protocol_sglang_openai_api_with_cache_report_reads_a_missing_count_as_zero() {
    // --enable-cache-report on: usage carries cached_tokens only when it is positive.
    let srv = Scripted::start(Config::new(Flavor::Sglang));
    let openai = argv("--backend openai --contexts 1k --reps 2 --output-tokens 8");
    let r = sweep(&srv.url(), &openai).ok().results();
    for s in &r.samples {
        assert_eq!(s.cached_tokens, Some(0), "{s:?}");
        assert!(s.cache_verified);
        assert_eq!(s.prompt_tokens, Some(1024));
    }
    // After the negotiation's two "Hello" test requests and the warmup: a measured one.
    let q = &srv.requests("/v1/completions")[3];
    assert_eq!(q["prompt"].as_array().unwrap().len(), 1024, "token ids");
    // And the trap it guards against: without the nonce the cache hit is seen and flagged.
    let trap = sweep(
        &srv.url(),
        &[&openai[..], &["--nonce", "off", "--flush", "never"]].concat(),
    );
    let r = trap.results();
    assert!(r.samples[1].contaminated, "{}", trap.stderr);
    assert!(r.samples[1].cached_tokens.unwrap() >= 1000);
}

#[test]
fn protocol_sglang_incremental_streaming_output_reads_the_same_as_cumulative() {
    let mut c = spec_config();
    c.incremental = true;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &["--contexts", "1k", "--reps", "1", "--output-tokens", "16"],
    )
    .ok();
    let s = &run.results().samples[0];
    assert_eq!(s.output_tokens, Some(16));
    assert_eq!(s.token_chunks, Some(6));
    assert_eq!(s.spec_verify_steps, Some(5));
    assert!(s.decode_tokens_per_s.unwrap() > 0.0);
}

#[test]
fn protocol_sglang_dry_run_does_not_flush_the_servers_cache() {
    // A dry run measures nothing, so it must leave the server's cache alone (a real
    // sweep flushes once up front and before every sample).
    let srv = Scripted::start(Config::new(Flavor::Sglang));
    let run = sweep(&srv.url(), &["--contexts", "1k", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("dry run"), "{}", run.stdout);
    assert_eq!(srv.flushes(), 0, "{}", run.stderr);
    let run = sweep(&srv.url(), &["--contexts", "1k", "--reps", "1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(srv.flushes(), 2, "the probe flush and one per sample");
}

/// Real SGLang answers 400 "Flush cache failed." while any request runs
/// (tests/fixtures/recorded/sglang-0.5.23/flush_cache_busy.json); here another client's
/// request is running from the second flush on.
#[test]
fn scripted_sglang_flush_refused_mid_run_flags_every_later_sample_flush_failed() {
    assert_flush_refused_mid_run_flags_every_later_sample(Flavor::Sglang, "flush");
}

#[test]
fn scripted_sglang_flush_busy_at_the_probe_keeps_flushing_on_with_flush_auto() {
    assert_flush_busy_at_the_probe_keeps_flushing(Flavor::Sglang, "auto");
}

#[test]
fn scripted_sglang_flush_busy_at_the_probe_does_not_stop_flush_always() {
    assert_flush_busy_at_the_probe_keeps_flushing(Flavor::Sglang, "always");
}

/// `--mode tiers` on a scripted SGLang with a device pool of 4096 tokens; its tier samples.
fn tiers_on(hicache: bool) -> (common::SweepRun, Vec<ctxbench_schema::record::Sample>) {
    let mut cfg = Config::new(Flavor::Sglang);
    cfg.device_pool = Some(4096);
    cfg.hicache = hicache;
    let srv = Scripted::start(cfg);
    let run = sweep(
        &srv.url(),
        &argv("--mode tiers --contexts 1000,2000 --append 100 --reps 1 --output-tokens 4"),
    )
    .ok();
    let tiers = run
        .results()
        .samples
        .into_iter()
        .filter(|s| s.phase == ctxbench_schema::record::Phase::Tier)
        .collect();
    (run, tiers)
}

#[test]
fn scripted_sglang_hicache_host_tier_is_proven_by_each_appends_host_split() {
    // HiCache cannot run on this CPU (SGLang's host pool needs CUDA's cudaHostRegister): the
    // scripted server moves the least recently used prompts beyond its device pool to host
    // memory and reports hits on them as `cached_tokens_details.host`.
    let (run, tiers) = tiers_on(true);
    let of = |t: Tier| -> Vec<&ctxbench_schema::record::Sample> {
        tiers
            .iter()
            .filter(|s| s.warm.as_ref().and_then(|w| w.tier) == Some(t))
            .collect()
    };
    let (live, ram) = (of(Tier::Live), of(Tier::Ram));
    assert_eq!((live.len(), ram.len()), (2, 2), "{tiers:?}");
    for s in &live {
        let w = s.warm.as_ref().unwrap();
        assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{s:?}");
        assert_eq!(s.cached_host_tokens, Some(0), "{s:?}");
    }
    for s in &ram {
        let w = s.warm.as_ref().unwrap();
        // The filler pushed the prefix out of the device pool; HiCache loaded it all back.
        assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{s:?}");
        assert_eq!(s.cached_host_tokens, Some(w.prefix_tokens), "{s:?}");
        let ev = w.evidence.as_deref().unwrap();
        assert!(
            ev.contains("through a device KV pool of 4096 tokens"),
            "{ev}"
        );
        assert!(ev.contains("loaded back from host memory"), "{ev}");
        assert!(ctxbench_schema::warm::usable(s), "{s:?}");
    }
    let md = std::fs::read_to_string(run.out.with_extension("md")).unwrap();
    assert!(md.contains("ram"), "{md}");
}

#[test]
fn scripted_sglang_tiers_without_hicache_recompute_an_evicted_prefix_and_flag_it() {
    let (_run, tiers) = tiers_on(false);
    let ram: Vec<_> = tiers
        .iter()
        .filter(|s| s.warm.as_ref().and_then(|w| w.tier) == Some(Tier::Ram))
        .collect();
    assert_eq!(ram.len(), 2, "{tiers:?}");
    for s in ram {
        assert!(s.has(&ctxbench_schema::record::Flag::CacheMiss), "{s:?}");
        assert!(!ctxbench_schema::warm::usable(s));
        let ev = s.warm.as_ref().and_then(|w| w.evidence.as_deref()).unwrap();
        assert!(ev.contains("--enable-hierarchical-cache"), "{ev}");
    }
}
