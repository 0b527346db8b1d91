//! `ctxbench import` on the real tools' result files (tests/fixtures/<tool>/, recorded by
//! scripts/record-tool-fixtures against the reference llama-server), its audit, its refusals
//! of bad input, and `compare` of an imported file beside a real ctxbench sweep of the same
//! server (tests/fixtures/ctxbench-sweep/). No server: the files are the fixtures.

use std::path::{Path, PathBuf};

use crate::common::ctxbench;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("import-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs `ctxbench import ARGS --out OUT`; (success, stdout, stderr).
fn import(args: &[PathBuf], out: &Path) -> (bool, String, String) {
    let o = ctxbench()
        .arg("import")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs `ctxbench compare A B`; (success, stdout), stderr in the panic if it fails to start.
fn compare(a: &Path, b: &Path) -> (bool, String) {
    let o = ctxbench().arg("compare").arg(a).arg(b).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    }
    (o.status.success(), text)
}

fn vllm_files() -> Vec<PathBuf> {
    ["vllm-bench-random-128.json", "vllm-bench-random-512.json"]
        .iter()
        .map(|f| fixtures().join("vllm-bench").join(f))
        .collect()
}

fn aiperf_files() -> Vec<PathBuf> {
    ["isl-128", "isl-512"]
        .iter()
        .map(|d| {
            fixtures()
                .join("aiperf")
                .join(d)
                .join("profile_export_aiperf.json")
        })
        .collect()
}

/// Every line of the results file parses, and its header names the source.
fn header_of(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "run");
    lines[0].clone()
}

#[test]
fn import_vllm_bench_results_with_their_audit() {
    let out = tmp("vllm.jsonl");
    let (ok, stdout, stderr) = import(&vllm_files(), &out);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("cache state per request known: NO"),
        "{stdout}"
    );
    assert!(stdout.contains("warmup separated: yes"), "{stdout}");
    // 19 completed requests per length: a p99 from them is the slowest request.
    assert!(
        stdout.contains("TTFT p99") && stdout.contains("the slowest request (n = 19"),
        "{stdout}"
    );
    let h = header_of(&out);
    assert_eq!(h["imported"]["tool"], "vllm-bench");
    assert_eq!(h["config"]["contexts"], serde_json::json!([128, 512]));
    // Each point's own failed request is a failed sample, not a 0 ms TTFT.
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.matches("\"status\":\"failed\"").count(), 2, "{text}");
    // The report reads an imported file like any other.
    let r = ctxbench().arg("report").arg(&out).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn import_aiperf_exports_with_their_per_request_records() {
    let out = tmp("aiperf.jsonl");
    let (ok, stdout, stderr) = import(&aiperf_files(), &out);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("aiperf 0.13.0"), "{stdout}");
    assert!(stdout.contains("engine python"), "{stdout}");
    assert!(stdout.contains("per-request records: read"), "{stdout}");
    // AIPerf keeps the server's cached-token count per request: its synthetic prompts
    // repeat, and 22 of its 40 requests here read from llama-server's prefix cache.
    assert!(
        stdout.contains("cache state per request known: yes"),
        "{stdout}"
    );
    assert!(
        stdout.contains("22 of 40 requests read from the prefix cache"),
        "{stdout}"
    );
    let h = header_of(&out);
    assert_eq!(h["imported"]["audit"]["lengths_exact"], true);
    // Beside the sweep: at 512 every AIPerf request was served from the cache, so its figure
    // gets no verdict.
    let sweep = fixtures().join("ctxbench-sweep/sweep-128-512.jsonl");
    let (ok, text) = compare(&sweep, &out);
    assert!(ok, "{text}");
    let row512 = text
        .lines()
        .find(|l| l.trim_start().starts_with("512"))
        .unwrap_or_default();
    assert!(
        row512.contains("no verdict: the tool's figure mixes in"),
        "{text}"
    );
}

#[test]
fn import_guidellm_benchmarks() {
    let files: Vec<PathBuf> = ["prompt-128", "prompt-512"]
        .iter()
        .map(|d| fixtures().join("guidellm").join(d).join("benchmarks.json"))
        .collect();
    let out = tmp("guidellm.jsonl");
    let (ok, stdout, stderr) = import(&files, &out);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("guidellm 0.8.1"), "{stdout}");
    let h = header_of(&out);
    assert_eq!(h["imported"]["format"], "benchmarks.json v2");
    // GuideLLM sends chat requests: the server counts 158 tokens for a "128-token" prompt,
    // and reports the chat template's first 26–27 tokens cached on every measured request.
    assert!(stdout.contains("158–158 (mean 158)"), "{stdout}");
    assert!(
        stdout.contains("34 of 34 requests read from the prefix cache (cached/prompt tokens: 26/158 ×8, 27/158 ×9"),
        "{stdout}"
    );
    let sweep = fixtures().join("ctxbench-sweep/sweep-158-542.jsonl");
    let (ok, text) = compare(&out, &sweep);
    assert!(ok, "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("no verdict: the tool's figure mixes in 17"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
}

#[test]
fn import_refuses_truncated_unknown_and_bad_unit_files_and_writes_nothing() {
    let src = std::fs::read_to_string(&vllm_files()[0]).unwrap();
    let truncated = tmp("truncated.json");
    std::fs::write(&truncated, &src[..src.len() / 2]).unwrap();
    let out = tmp("never.jsonl");
    let (ok, _, stderr) = import(&[truncated], &out);
    assert!(!ok);
    assert!(
        stderr.contains("truncated.json") && stderr.contains("not valid JSON"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing half-written");

    let unknown = tmp("unknown.json");
    std::fs::write(&unknown, r#"{"hello": 1}"#).unwrap();
    let (ok, _, stderr) = import(&[unknown], &out);
    assert!(
        !ok && stderr.contains("not a result file ctxbench can import"),
        "{stderr}"
    );

    let aiperf = std::fs::read_to_string(&aiperf_files()[0]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&aiperf).unwrap();
    let mut bad_unit = v.clone();
    bad_unit["time_to_first_token"]["unit"] = "furlongs".into();
    let f = tmp("bad_unit_aiperf.json");
    std::fs::write(&f, bad_unit.to_string()).unwrap();
    let (ok, _, stderr) = import(&[f], &out);
    assert!(
        !ok && stderr.contains("time_to_first_token.unit") && stderr.contains("furlongs"),
        "{stderr}"
    );

    let mut bad_version = v;
    bad_version["schema_version"] = "9.0".into();
    let f = tmp("future_aiperf.json");
    std::fs::write(&f, bad_version.to_string()).unwrap();
    let (ok, _, stderr) = import(&[f], &out);
    assert!(
        !ok && stderr.contains("schema_version") && stderr.contains("9.0"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing half-written");
}

#[test]
fn compare_an_imported_file_beside_a_ctxbench_sweep_withholds_unproven_verdicts() {
    let out = tmp("vllm-cmp.jsonl");
    let (ok, _, stderr) = import(&vllm_files(), &out);
    assert!(ok, "{stderr}");
    let sweep = fixtures().join("ctxbench-sweep/sweep-128-512.jsonl");
    let (ok, text) = compare(&out, &sweep);
    assert!(ok, "{text}");
    // TTFT per length, both lengths, side by side; no verdict where vllm bench cannot prove
    // its requests were cold.
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" | ")).skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.contains("no verdict")), "{text}");
    assert!(
        text.contains("caveat: vllm-bench cannot show its requests were cold"),
        "{text}"
    );
    // A gate on figures that prove nothing is refused.
    let o = ctxbench()
        .args(["compare", "--fail-if-slower", "5%"])
        .arg(&out)
        .arg(&sweep)
        .output()
        .unwrap();
    assert!(!o.status.success());
}

#[test]
fn import_inference_perf_reports_with_the_servers_usage_per_request() {
    let dir = fixtures().join("inference-perf/input-128");
    let out = tmp("inference-perf.jsonl");
    let (ok, stdout, stderr) = import(&[dir], &out);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("cache state per request known: yes"),
        "{stdout}"
    );
    assert!(stdout.contains("warmup separated: not stated"), "{stdout}");
    let h = header_of(&out);
    assert_eq!(h["imported"]["tool"], "inference-perf");
    assert_eq!(h["config"]["contexts"], serde_json::json!([128]));
}

/// A multi-turn result of vLLM's Rust client vllm-rs (`mode: "multi_turn"`, per-turn arrays)
/// is refused with the reason, not read as a single-turn run: there is no real file to import
/// one against (vllm-rs is not in vLLM 0.32's wheel; the sdist's `vllm-bench` crate needs git
/// dependencies this host cannot reach). Hand-written: the fields of vllm-rs's
/// `build_multi_turn_result_json`, values made up.
#[test]
fn import_refuses_a_vllm_multi_turn_result_naming_the_field() {
    let f = tmp("vllm-multi-turn.json");
    let file = serde_json::json!({
        "date": "20261207-150000", "mode": "multi_turn", "backend": "openai-chat",
        "model_id": "smollm2", "num_conversations": 4, "turns_per_conversation": 3,
        "duration": 2.5, "completed": 12, "failed": 0, "total_input_tokens": 900,
        "total_output_tokens": 192, "mean_ttft_ms": 40.0, "median_ttft_ms": 38.0,
        "per_turn": [{"turn_index": 0, "num_samples": 4, "completed": 4, "failed": 0}]
    });
    std::fs::write(&f, file.to_string()).unwrap();
    let out = tmp("never-multi-turn.jsonl");
    let (ok, _, stderr) = import(&[f], &out);
    assert!(!ok);
    assert!(
        stderr.contains("vllm-multi-turn.json: field mode: multi_turn")
            && stderr.contains("not imported"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing half-written");
}

fn multi_turn_stats() -> PathBuf {
    fixtures().join("vllm-bench/multi-turn/stats.json")
}

fn lines_of(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// vLLM's multi-turn benchmark (benchmarks/multi_turn of the 0.32.0 sdist) run against the
/// reference llama-server: 3 conversations of 4 user turns. Each request is a sample with
/// its conversation and turn; turn 0 is cache-unverified, the later turns (which re-send the
/// earlier ones) suspected cache hits, out of the cold summaries; the audit says so.
#[test]
fn import_vllm_multi_turn_stats_with_each_turn_of_each_conversation() {
    let out = tmp("vllm-multi-turn-stats.jsonl");
    let (ok, stdout, stderr) = import(&[multi_turn_stats()], &out);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("cache state per request known: NO")
            && stdout.contains("suspected prefix-cache hit"),
        "{stdout}"
    );
    assert!(stdout.contains("warmup separated: not stated"), "{stdout}");
    let lines = lines_of(&out);
    let h = &lines[0];
    assert_eq!(h["imported"]["tool"], "vllm-multi-turn");
    let names: Vec<&str> = h["imported"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["turn 0", "turn 1", "turn 2", "turn 3"]);
    let samples = &lines[1..];
    assert_eq!(samples.len(), 12);
    let mut seen = std::collections::BTreeSet::new();
    for s in samples {
        let t = &s["turn"];
        let turn = t["turn"].as_u64().unwrap();
        // A request at user turn k sends the k earlier questions and answers and its own.
        assert_eq!(t["messages"].as_u64().unwrap(), 2 * turn + 1, "{s}");
        let flags: Vec<&str> = s["flags"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f.as_str())
            .collect();
        assert!(flags.contains(&"cache_unverified"), "{s}");
        assert_eq!(flags.contains(&"suspected_cache_hit"), turn > 0, "{s}");
        assert!(s["cached_tokens"].is_null(), "{s}");
        seen.insert((t["conversation"].as_str().unwrap().to_owned(), turn));
    }
    assert_eq!(seen.len(), 12, "each (conversation, turn) once");
    // Each later turn carries the earlier ones: its prompt is longer than the turn before.
    let contexts = h["config"]["contexts"].as_array().unwrap();
    assert_eq!(contexts.len(), 4);
    assert!(contexts.windows(2).all(|w| w[0].as_u64() < w[1].as_u64()));
}

/// A multi-turn stats file with a request missing a field is refused naming the request and
/// the field; nothing is written.
#[test]
fn import_refuses_a_vllm_multi_turn_stats_file_missing_a_field() {
    let text = std::fs::read_to_string(multi_turn_stats()).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[1].as_object_mut().unwrap().remove("latency_ms");
    let f = tmp("stats-missing.json");
    std::fs::write(&f, v.to_string()).unwrap();
    let out = tmp("never-stats.jsonl");
    let (ok, _, stderr) = import(&[f], &out);
    assert!(!ok);
    assert!(
        stderr.contains("stats-missing.json: field [1].latency_ms: missing or not a number"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing half-written");
}
