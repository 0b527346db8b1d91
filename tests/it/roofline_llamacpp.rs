//! The roofline proven where it can be here: the wide reference model (`wide-model`: ~340 MB
//! of f32 weights, so a decode step's cost is reading them) on the reference llama-server,
//! held against this host's own memory bandwidth, measured in the test.
//!
//! What physics guarantees, and nothing more, is asserted: a step cannot read its weights
//! faster than the memory delivers them, so with a bandwidth at least the host's best every
//! utilisation is ≤ 100%; and a bandwidth below what the run itself achieved must make every
//! figure impossible, so the warning must appear and the headroom line must not.

use crate::common::{self, run, serial, sweep, RefServer};

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

/// Bytes per buffer of the copy benchmark: 256 MiB, 16 × this host's 16 MiB L3 (and far
/// beyond any CPU cache), so every byte comes from memory.
const BUFFER: usize = 256 << 20;

/// This host's memory bandwidth, GB/s: 2 threads (llama-server's count here) each copying
/// its own 256 MiB buffer, the best of `runs`. A copy moves 2 bytes (one read, one write)
/// per byte copied, and that is what is counted; with write-allocate caches it moves 3, so
/// this is if anything an underestimate of the traffic. The best run is taken because other
/// work on the host only slows a run down.
fn host_copy_bandwidth_gb_s(runs: usize) -> f64 {
    let mut bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..2u8)
        .map(|i| (vec![i + 1; BUFFER], vec![0u8; BUFFER]))
        .collect();
    // Touch the destinations first: a first write to fresh pages measures page faults.
    for (src, dst) in &mut bufs {
        dst.copy_from_slice(src);
    }
    let mut best: f64 = 0.0;
    for _ in 0..runs {
        let start = Instant::now();
        std::thread::scope(|s| {
            for (src, dst) in &mut bufs {
                s.spawn(move || dst.copy_from_slice(src));
            }
        });
        let moved = (2 * 2 * BUFFER) as f64;
        best = best.max(moved / start.elapsed().as_secs_f64() / 1e9);
    }
    assert!(bufs.iter().all(|(s, d)| s == d), "the copy copied");
    best
}

/// The wide model's Hugging Face shape: 12 layers (10 identity + 2), 128 wide, 4 heads of
/// 32, 2 KV heads, FFN 16384, the llama tokenizer's 32000 tokens. The dtype is the KV
/// cache's (llama-server keeps it in f16 by default); the weights' bytes come from the
/// server's own meta (f32), which the header takes first.
const WIDE_CONFIG: &str = r#"{"model_type": "llama", "num_hidden_layers": 12,
  "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 16384, "vocab_size": 32000, "torch_dtype": "float16",
  "tie_word_embeddings": false}"#;

/// A peak no CPU of this host's core count can exceed: 64 f32 FLOPs per cycle per core (two
/// 512-bit FMA units) at 6 GHz, in TFLOPs; so an MFU against it is ≤ 100% by design of the
/// chip, however fast this one is.
fn cpu_peak_tflops() -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores as f64 * 64.0 * 6e9 / 1e12
}

fn report_json(results: &Path, bandwidth_gb_s: f64) -> Value {
    let (code, out, err) = run(&[
        "report",
        results.to_str().unwrap(),
        "--memory-bandwidth",
        &format!("{bandwidth_gb_s:.6}"),
        "--peak-tflops",
        &format!("{:.6}", cpu_peak_tflops()),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The sweep of the wide model with `--model-config` (and the end report held against
/// `bandwidth`), and the server's own `meta.size`.
fn sweep_wide(bandwidth: f64) -> (common::SweepRun, u64) {
    let p = common::ref_paths();
    let srv = RefServer::start(2048, &["-m", p.wide_model.to_str().unwrap()]);
    let (_, models) = common::http_get(srv.port, "/v1/models").expect("GET /v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    let size = models["data"][0]["meta"]["size"]
        .as_u64()
        .expect("meta.size");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wide.json");
    std::fs::write(&config, WIDE_CONFIG).unwrap();
    // Its prefill is slow (~5 ms per prompt token on one thread): short contexts, 2 reps.
    let s = sweep(
        &srv.url(),
        &[
            "--contexts",
            "256,512,1k",
            "--reps",
            "2",
            "--output-tokens",
            "24",
            "--model-config",
            config.to_str().unwrap(),
            "--memory-bandwidth",
            &format!("{bandwidth:.3}"),
        ],
    )
    .ok();
    (s, size)
}

/// Held against the host's bandwidth and a CPU peak: every figure possible, and a headroom
/// line. Returns the decode rows.
fn within_the_bounds(results: &Path, bandwidth: f64) -> Vec<Value> {
    let rep = report_json(results, bandwidth);
    let roof = &rep["runs"][0]["roofline"];
    let decode = roof["decode"].as_array().unwrap().clone();
    assert_eq!(decode.len(), 3, "{roof}");
    for d in &decode {
        // Physics: no step reads its weights faster than the host's best copy.
        assert!(
            f(&d["utilisation"]) <= 1.0 && d["impossible"] == false,
            "{d}"
        );
        assert!(f(&d["bound_ms"]) < f(&d["measured_ms"]), "{d}");
    }
    assert!(roof["decode_headroom"].is_object(), "{roof}");
    // Prefill: 2 × 76 M matrix parameters per token + the attention, well within any CPU's peak.
    let prefill = roof["prefill"].as_array().unwrap();
    assert_eq!(prefill.len(), 3, "{roof}");
    assert!(
        prefill
            .iter()
            .all(|p| f(&p["mfu"]) <= 1.0 && p["impossible"] == false),
        "{roof}"
    );
    assert!(!rep["runs"][0]["warnings"]
        .to_string()
        .contains("above 100%"));
    let (code, table, err) = run(&[
        "report",
        results.to_str().unwrap(),
        "--memory-bandwidth",
        &format!("{bandwidth:.3}"),
        "--peak-tflops",
        &format!("{:.3}", cpu_peak_tflops()),
    ]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{table}");
    decode
}

/// Held against a bandwidth below what the slowest point itself achieved (and 10× below
/// the host's): every step would then beat its bound, which no server can. Derived from the
/// run, so it holds on any host, however loaded.
fn a_bandwidth_too_low_is_impossible(results: &Path, bandwidth: f64, decode: &[Value]) {
    let achieved = decode
        .iter()
        .map(|d| f(&d["bound_ms"]) / f(&d["measured_ms"]) * bandwidth)
        .fold(f64::INFINITY, f64::min);
    let wrong = (bandwidth / 10.0).min(achieved / 10.0);
    let (code, text, err) = run(&[
        "report",
        results.to_str().unwrap(),
        "--memory-bandwidth",
        &format!("{wrong:.6}"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("above 100% of the bound: check --memory-bandwidth"),
        "{text}"
    );
    assert!(!text.contains("of the bandwidth bound: up to"), "{text}");
    assert!(text.contains("impossible"), "{text}");
    let bad = report_json(results, wrong);
    let roof = &bad["runs"][0]["roofline"];
    assert!(roof.get("decode_headroom").is_none(), "{roof}");
    assert!(roof["decode"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["impossible"] == true));
    let warnings = bad["runs"][0]["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w["kind"] == "roofline_impossible"),
        "{warnings:?}"
    );
}

#[test]
fn the_wide_model_is_within_the_hosts_bandwidth_and_a_bandwidth_too_low_is_called_impossible() {
    let _g = serial();
    // Measured before the server starts (nothing of ours competes for the memory), and
    // again after it stops.
    let before = host_copy_bandwidth_gb_s(7);
    let (s, size) = sweep_wide(before);
    let bandwidth = before.max(host_copy_bandwidth_gb_s(7));
    eprintln!("host memory bandwidth (2-thread copy, best of 14): {bandwidth:.2} GB/s");
    // The sweep's own end report held the run against the bandwidth measured before it.
    assert!(
        s.stdout
            .contains("roofline (how far from the hardware's limit)"),
        "{}",
        s.stdout
    );
    // The header records the server's weight bytes and the config's cache.
    let facts = s
        .results()
        .header
        .model_facts
        .expect("model facts recorded");
    assert_eq!(facts.weight_bytes, Some(size));
    assert_eq!(facts.kv_bytes_per_token, Some(2 * 12 * 2 * 32 * 2));
    assert!(
        facts
            .source
            .starts_with("llama.cpp /v1/models meta + --model-config"),
        "{}",
        facts.source
    );
    let decode = within_the_bounds(&s.out, bandwidth);
    a_bandwidth_too_low_is_impossible(&s.out, bandwidth, &decode);
}
