//! Issue 6 features against the real reference llama-server: adaptive repetitions, the
//! dry-run plan, sweep efficiency; and the loopback overhead benchmark.

use crate::common;

use common::{run, serial, sweep, RefServer};

#[test]
fn adaptive_repetitions_record_why_each_point_stopped() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k",
            "--precision",
            "0.5",
            "--min-reps",
            "2",
            "--max-reps",
            "8",
        ],
    )
    .ok();
    let text = std::fs::read_to_string(&run.out).unwrap();
    let points: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "point")
        .collect();
    assert_eq!(points.len(), 2, "{text}");
    let samples = run.results().samples;
    for p in &points {
        let c = p["context_tokens"].as_u64().unwrap();
        let reps = p["reps"].as_u64().unwrap();
        let n = samples.iter().filter(|s| s.context_tokens == c).count() as u64;
        assert_eq!(reps, n, "point line disagrees with the samples: {p}");
        // ±50% needs 6 samples for a 95% CI of the median; at most 8 are allowed.
        assert!((6..=8).contains(&reps), "{p}");
        let reason = p["stop_reason"].as_str().unwrap();
        assert!(matches!(reason, "precision_reached" | "max_reps"), "{p}");
        if reason == "precision_reached" {
            assert!(p["ttft_ci_rel"].as_f64().unwrap() <= 0.5);
        }
    }
    let end = text
        .lines()
        .find(|l| l.contains("\"type\":\"end\""))
        .expect("end line");
    let end: serde_json::Value = serde_json::from_str(end).unwrap();
    let eff = end["efficiency"].as_f64().unwrap();
    let (wall, busy) = (
        end["wall_s"].as_f64().unwrap(),
        end["server_busy_s"].as_f64().unwrap(),
    );
    assert!((eff - wall / busy).abs() < 1e-9 * eff, "{end}");
    assert!(
        eff >= 1.0,
        "wall time cannot be below server busy time: {end}"
    );
    // Busy time is the samples' server prompt + generation time (plus the warmup's, one
    // small request): a busy time that dropped decode or mixed units fails here.
    let from_samples: f64 = samples
        .iter()
        .filter_map(|s| s.server.as_ref())
        .map(|t| t.prompt_ms.unwrap_or(0.0) + t.predicted_ms.unwrap_or(0.0))
        .sum::<f64>()
        / 1000.0;
    assert!(
        busy >= from_samples * 0.999 && busy <= from_samples * 1.5,
        "server_busy_s {busy} vs samples' {from_samples}: {end}"
    );
}

#[test]
fn dry_run_prints_the_plan_and_measures_nothing() {
    let _g = serial();
    let srv = RefServer::start(20000, &[]);
    let before = srv.metric("llamacpp:prompt_tokens_total");
    let run = sweep(&srv.url(), &["--contexts", "1k,4k,16k", "--dry-run"]).ok();
    let stdout = &run.stdout;
    assert!(!run.out.exists(), "a dry run must not write results");
    for row in ["1k", "4k", "16k"] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(row)),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("predicted duration") && stdout.contains("peak memory"),
        "{stdout}"
    );
    // Only the warmup (64) and the two calibration requests (2048 + 4096) were sent.
    let sent = srv.metric("llamacpp:prompt_tokens_total") - before;
    assert_eq!(
        sent,
        64.0 + 2048.0 + 4096.0,
        "dry run sent more than calibration"
    );
}

/// The number after `key:` on the line of `stdout` that names it.
fn figure(stdout: &str, key: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.contains(key))
        .unwrap_or_else(|| panic!("{key}: {stdout}"));
    line.split(':')
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key}: no number in {line}"))
}

#[test]
fn the_overhead_benchmark_reports_its_figures() {
    // Its figures are timings: not beside a RefServer test of this binary.
    let _g = serial();
    let (code, stdout, stderr) = run(&["overhead", "--tokens", "20000", "--runs", "1"]);
    assert_eq!(code, 0, "{stderr}");
    let grab = |key: &str| figure(&stdout, key);
    // Ranges a unit or counting error leaves: loopback streaming of tiny events runs at
    // thousands to millions of tokens/s, costs µs of CPU each, on a ns-scale clock.
    let tps = grab("sustained client throughput");
    assert!((1_000.0..100_000_000.0).contains(&tps), "tokens/s {tps}");
    let cpu_us = grab("client CPU per streamed token");
    assert!(cpu_us > 0.0 && cpu_us < 1_000.0, "µs per token {cpu_us}");
    // Sustained throughput cannot beat the CPU one token costs (one thread streams).
    assert!(
        tps <= 1e6 / cpu_us * 4.0,
        "{tps} tokens/s vs {cpu_us} µs per token"
    );
    let res_ns = grab("timestamp resolution");
    assert!(res_ns > 0.0 && res_ns < 1_000_000.0, "ns {res_ns}");
}

#[test]
fn the_many_streams_overhead_mode_reports_aggregate_throughput_and_cpu_per_token() {
    // Its figures are timings: not beside a RefServer test of this binary.
    let _g = serial();
    let (code, stdout, stderr) = run(&[
        "overhead",
        "--streams",
        "16",
        "--tokens",
        "16000",
        "--runs",
        "1",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("16 concurrent streams × 1000 tokens"),
        "{stdout}"
    );
    let grab = |key: &str| figure(&stdout, key);
    // Ranges a unit or counting error leaves (see the single-stream test above).
    let tps = grab("aggregate client throughput");
    assert!((1_000.0..100_000_000.0).contains(&tps), "tokens/s {tps}");
    let cpu_us = grab("client CPU per streamed token");
    assert!(cpu_us > 0.0 && cpu_us < 1_000.0, "µs per token {cpu_us}");
    // 16 streams on 2 cores: the sum cannot beat what the CPU per token allows on every core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(
        tps <= 1e6 / cpu_us * cores * 4.0,
        "{tps} tokens/s vs {cpu_us} µs per token"
    );
}
