//! The core sweep against the real reference llama-server.

mod common;

use std::collections::HashSet;
use std::io::Write;

use common::{run, serial, sweep, RefServer};
use ctxbench::record::{read_results, Sample, Status};

fn samples(path: &std::path::Path) -> Vec<Sample> {
    read_results(path, false).expect("results file").samples
}

#[test]
fn every_sample_has_exact_length_and_no_cache_hit_on_a_default_caching_server() {
    let _g = serial();
    // The server is left at its defaults: cache_prompt on, prompt cache on.
    let srv = RefServer::start(16384, &[]);
    let run = sweep(&srv.url(), &["--contexts", "1k,2k,4k,8k", "--reps", "2"]).ok();
    let s = run.results().samples;
    assert_eq!(s.len(), 8);
    for x in &s {
        assert_eq!(x.status, Status::Ok, "{x:?}");
        assert_eq!(
            x.prompt_tokens,
            Some(x.context_tokens),
            "server saw another length: {x:?}"
        );
        assert_eq!(x.cached_tokens, Some(0), "cache hit: {x:?}");
        assert!(x.cache_verified && !x.contaminated && x.length_ok == Some(true));
        assert_eq!(x.output_tokens, Some(32));
        assert!(x.ttft_ms.unwrap() > 0.0 && x.decode_tokens_per_s.unwrap() > 0.0);
        let server = x.server.as_ref().expect("server timings stored");
        assert_eq!(server.prompt_n, Some(x.context_tokens));
    }
    // One row per context in the summary table.
    for c in ["1k", "2k", "4k", "8k"] {
        assert!(
            run.stdout.lines().any(|l| l.starts_with(&format!("{c} "))),
            "{}",
            run.stdout
        );
    }
}

/// With the per-request cache switch off, the nonce alone must keep every prompt cold on a
/// server that caches prompts (the test above has both defences on at once).
#[test]
fn the_nonce_alone_keeps_samples_cold_with_the_cache_switch_off() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k",
            "--reps",
            "2",
            "--output-tokens",
            "4",
            "--cache-bypass",
            "off",
        ],
    )
    .ok();
    let r = run.results();
    assert!(!r.header.config.cache_bypass && r.header.config.nonce);
    assert_eq!(r.samples.len(), 4);
    for x in &r.samples {
        assert_eq!(
            x.cached_tokens,
            Some(0),
            "cache hit despite the nonce: {x:?}"
        );
        assert!(!x.contaminated, "{x:?}");
    }
}

#[test]
fn the_seeds_repeated_prompt_trap_is_detected_and_excluded() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    // No nonce and cache reuse allowed: the seed's two identical requests.
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "2k",
            "--reps",
            "3",
            "--nonce",
            "off",
            "--cache-bypass",
            "off",
        ],
    );
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    // Every sample hit the cache (the first reuses the warmup's prefix too): the point has
    // no usable sample, so the run exits 1 and says why.
    assert_eq!(run.code, 1, "{stderr}");
    assert!(stderr.contains("no usable sample at 2k"), "{stderr}");
    let s = run.results().samples;
    assert_eq!(s.len(), 3);
    // Repetitions after the first send the same prompt: the server reuses its cache.
    for x in &s[1..] {
        assert!(x.contaminated, "repeat not detected: {x:?}");
        assert!(x.cached_tokens.unwrap() >= 2000, "{x:?}");
        assert!(x.has(&ctxbench::record::Flag::Contaminated));
        assert!(!x.usable());
    }
    assert!(
        stderr.contains("hit the prefix cache"),
        "no loud warning: {stderr}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("2k "))
        .expect("2k row");
    assert!(row.contains("cached"), "exclusion not shown: {row}");
    // Contaminated TTFTs (cache hits) must not be in the median.
    let summary = ctxbench::stats::summarize(&s);
    let usable = summary[0].usable;
    assert_eq!(usable, s.iter().filter(|x| x.usable()).count());
    assert!(usable <= 1);
}

#[test]
fn client_timing_agrees_with_the_servers_own_timings() {
    let _g = serial();
    let srv = RefServer::start(16384, &[]);
    let s = sweep(
        &srv.url(),
        &[
            "--contexts",
            "2k,8k",
            "--reps",
            "3",
            "--output-tokens",
            "64",
        ],
    )
    .ok()
    .results()
    .samples;
    for x in &s {
        let server = x.server.as_ref().unwrap();
        let prompt_ms = server.prompt_ms.unwrap();
        let ttft = x.ttft_ms.unwrap();
        // TTFT = server prompt time + overhead (HTTP, JSON of the ids, first token). Stated
        // tolerance: the client can never be earlier than the server (−1 ms for clock
        // rounding), and the overhead stays under 30 ms + 10% of prompt_ms.
        let overhead = ttft - prompt_ms;
        assert!(
            overhead > -1.0 && overhead < 30.0 + 0.10 * prompt_ms,
            "TTFT {ttft:.2} ms vs server prompt_ms {prompt_ms:.2} ms at {}",
            x.context_tokens
        );
    }
    // Decode: the server's predicted_per_second is (n−1)/(t_last−t_first) on its side, the
    // same definition as ours. Stated tolerance: per-point medians within 15%.
    for p in ctxbench::stats::summarize(&s) {
        let client = p.decode_tokens_per_s.unwrap().median;
        let server = p.server_decode_tokens_per_s.unwrap().median;
        let ratio = client / server;
        assert!(
            (0.85..=1.15).contains(&ratio),
            "decode at {}: client {client:.1} vs server {server:.1} tok/s (ratio {ratio:.3})",
            p.context_tokens
        );
    }
}

#[test]
fn an_over_limit_context_is_refused_before_any_request() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(&srv.url(), &["--contexts", "1k,8k"]);
    let stderr = &run.stderr;
    assert_eq!(run.code, 2, "usage error expected; stderr: {stderr}");
    assert!(
        stderr.contains("8192") && stderr.contains("4096"),
        "{stderr}"
    );
    assert!(stderr.contains("maximum context"), "{stderr}");
    assert_eq!(
        srv.metric("llamacpp:prompt_tokens_total"),
        0.0,
        "a prompt was sent"
    );
    assert!(!run.out.exists(), "an empty results file was left behind");
}

#[test]
fn a_resumed_run_with_the_cache_flush_on_does_not_repeat_samples_and_tolerates_a_torn_line() {
    let _g = serial();
    // With --slot-save-path the default --flush auto erases the slots before every sample,
    // and each erase frees a different number of tokens: that must not change the run's
    // identity, or resume would always be refused.
    let slots = tempfile::tempdir().unwrap();
    let srv = RefServer::start(
        8192,
        &[
            "--slot-save-path",
            slots.path().to_str().unwrap(),
            "-np",
            "2",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "sweep",
            "--url",
            "URL",
            "--contexts",
            "1k,2k",
            "--reps",
            "2",
            "--out",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let url = srv.url();
    let with_url = |v: Vec<String>| {
        v.into_iter()
            .map(|s| if s == "URL" { url.clone() } else { s })
            .collect::<Vec<_>>()
    };
    let a = with_url(args(&[]));
    let (code, _, stderr) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    let full = samples(&out);
    assert_eq!(full.len(), 4);
    // The sweep's summary warns as `ctxbench report` does (one report model, one wording).
    assert!(
        stderr.contains(
            "WARNING: TTFT: 2 context length(s) with cold usable samples; a quadratic fit needs 3"
        ),
        "{stderr}"
    );
    let header = ctxbench::record::read_results(&out, false).unwrap().header;
    assert!(
        header
            .server
            .flush_check
            .as_deref()
            .is_some_and(|f| f.contains("slot erase")),
        "{:?}",
        header.server
    );
    assert!(
        full.iter().all(|s| s.flush.is_some()),
        "flushed before each sample"
    );

    // Keep the header and two samples, then a torn half line: the writer died mid-write.
    let text = std::fs::read_to_string(&out).unwrap();
    let keep: Vec<&str> = text.lines().take(3).collect();
    let mut f = std::fs::File::create(&out).unwrap();
    writeln!(f, "{}", keep.join("\n")).unwrap();
    write!(f, "{{\"type\":\"sample\",\"run_id\":\"x\",\"conte").unwrap();
    drop(f);

    let a = with_url(args(&["--resume"]));
    let (code, _, stderr) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("torn line"),
        "torn line not reported: {stderr}"
    );
    assert!(stderr.contains("2 sample(s) already recorded"), "{stderr}");
    let after = samples(&out);
    assert_eq!(after.len(), 4, "resume repeated or lost samples");
    let keys: HashSet<_> = after.iter().map(|s| (s.context_tokens, s.rep)).collect();
    assert_eq!(keys.len(), 4);
    assert_eq!(after[..2], full[..2], "earlier samples were changed");
    assert!(after.iter().all(|s| s.run_id == full[0].run_id));

    // Resuming with another configuration is refused, with what changed.
    let mut a = with_url(args(&["--resume"]));
    let i = a.iter().position(|s| s == "2").unwrap();
    a[i] = "5".into();
    let (code, _, stderr) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(code, 0);
    let changed: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(" -> "))
        .collect();
    assert_eq!(
        changed,
        ["reps.max_reps: 2 -> 5", "reps.min_reps: 2 -> 5"],
        "{stderr}"
    );
    assert_eq!(samples(&out).len(), 4);
}

#[test]
fn the_openai_backend_measures_the_same_server_exactly() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let r = sweep(
        &srv.url(),
        &["--backend", "openai", "--contexts", "1k,2k", "--reps", "2"],
    )
    .ok()
    .results();
    assert_eq!(r.header.config.backend, "openai");
    assert_eq!(r.samples.len(), 4);
    for x in &r.samples {
        assert_eq!(x.prompt_tokens, Some(x.context_tokens), "{x:?}");
        assert_eq!(x.cached_tokens, Some(0), "{x:?}");
        assert_eq!(x.output_tokens, Some(32));
        assert!(x.server.as_ref().and_then(|t| t.prompt_ms).is_some());
    }
}
