//! `ctxbench replay --dry-run` on the binary: every trace format named with its rules and
//! its ideal reuse, the synthetic workload, scaling and skips, and a bad trace refused with
//! file, line and field (exit 2) before anything would be sent. No server.

use std::path::PathBuf;

use crate::common::run;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/trace/tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The dry run's stdout for these arguments, asserting exit 0.
fn dry_run(args: &[&str]) -> String {
    let (code, out, err) = run(&[&["replay", "--dry-run"][..], args].concat());
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

#[test]
fn the_dry_run_names_each_format_and_its_plan() {
    for (file, format, rule, lines) in [
        (
            "mooncake.jsonl",
            "Mooncake / timed-trace JSONL",
            "ceil(input_length/512)",
            [
                "requests: 4",
                "ideal reuse: 48.3% (2,048 of 4,236",
                "span: 1.2s",
                "start at 1000 ms",
            ],
        ),
        (
            "weka",
            "Weka / kv-cache-tester JSON",
            "floor(in/block_size)",
            [
                "requests: 6",
                "ideal reuse: 37.6% (384 of 1,022",
                "sessions: 3",
                "subagent markers, each a session of its own at marker t + inner t: 1",
            ],
        ),
        (
            "tracelab.jsonl",
            "TraceLab round JSONL",
            "floor(prefix_tokens/64)",
            [
                "requests: 5",
                "ideal reuse: 32.7% (960 of 2,940",
                "sessions: 2",
                "span: no absolute times",
            ],
        ),
        (
            "azure.csv",
            "Azure LLM inference CSV",
            "no reuse",
            [
                "requests: 3",
                "ideal reuse: 0.0%",
                "sessions: none",
                "span: 1.5s",
            ],
        ),
        (
            "ctxbench.jsonl",
            "ctxbench trace JSONL",
            "ceil(input_tokens/block_tokens)",
            [
                "requests: 3",
                "ideal reuse: 32.0% (256 of 800",
                "sessions: 2",
                "span: 1.2s",
            ],
        ),
    ] {
        let out = dry_run(&[&fixture(file)]);
        assert!(
            out.contains(&format!("format: {format}\n")),
            "{file}: {out}"
        );
        assert!(
            out.contains(rule),
            "{file} must say how its rule was applied: {out}"
        );
        for l in lines {
            assert!(out.contains(l), "{file} must say `{l}`: {out}");
        }
        assert!(
            out.contains("predicted server time: needs a server"),
            "{out}"
        );
    }
}

#[test]
fn the_dry_run_says_what_was_scaled_skipped_and_predicted() {
    let out = dry_run(&[
        &fixture("mooncake.jsonl"),
        "--scale",
        "0.5",
        "--context-limit",
        "700",
        "--cost-model",
        "prefill=1000,decode=10",
    ]);
    // ×0.5: 1600+20 -> 800+10 = 810 > 700, skipped; the rest keep their shared blocks.
    for l in ["requests: 3 (1 skipped as over the context limit of 700 tokens, never truncated; the largest needs 810)", "scaled: ×0.5", "ideal reuse: 38.8% (512 of 1,318", "predicted server time: "] {
        assert!(out.contains(l), "must say `{l}`: {out}");
    }
    assert!(!out.contains("needs a server"), "{out}");
    let out = dry_run(&[&fixture("mooncake.jsonl"), "--max-requests", "2"]);
    assert!(
        out.contains("requests: 2 (the first 2 of the trace (--max-requests))"),
        "{out}"
    );
}

#[test]
fn the_synthetic_agent_workload_is_planned_without_a_trace() {
    let out = dry_run(&[
        "--synthetic",
        "agent",
        "--sessions",
        "2",
        "--turns",
        "6",
        "--subagents",
        "1",
        "--max-context",
        "8k",
    ]);
    for l in [
        "format: generated (--synthetic agent)",
        "sessions: 4",
        "requests: 16",
        "largest context 8,192",
        "seed 0",
    ] {
        assert!(out.contains(l), "must say `{l}`: {out}");
    }
    // The same seed, the same plan (the peak memory line aside: it is the process's).
    let plan = |out: &str| {
        out.lines()
            .filter(|l| !l.starts_with("peak memory"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let again = dry_run(&[
        "--synthetic",
        "agent",
        "--sessions",
        "2",
        "--turns",
        "6",
        "--subagents",
        "1",
        "--max-context",
        "8k",
    ]);
    assert_eq!(plan(&out), plan(&again));
    let (code, _, err) = run(&[
        "replay",
        &fixture("mooncake.jsonl"),
        "--dry-run",
        "--sessions",
        "3",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sessions"), "{err}");
}

#[test]
fn a_bad_trace_is_refused_naming_file_line_and_field_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let ok = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n";
    for (name, text, says) in [
        ("ids.jsonl", format!("{ok}{{\"timestamp\": 5, \"input_length\": 1100, \"output_length\": 1, \"hash_ids\": [1, 2]}}\n"), ":2: hash_ids: 2 ids for input_length 1100"),
        ("cut.jsonl", format!("{ok}{{\"timestamp\": 5, \"input_len"), ":2: (line): truncated"),
        ("neg.jsonl", format!("{ok}{{\"timestamp\": 5, \"input_length\": -3, \"output_length\": 1}}\n"), ":2: input_length: negative"),
        ("back.jsonl", format!("{ok}{{\"timestamp\": -5, \"input_length\": 3, \"output_length\": 1}}\n"), ":2: timestamp: negative"),
        ("what.jsonl", "{\"prompt\": \"hi\"}\n".to_owned(), "not a trace format ctxbench reads"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let (code, out, err) = run(&["replay", p.to_str().unwrap(), "--dry-run"]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(&p.display().to_string()) && err.contains(says), "{name} must say `{says}`: {err}");
        assert!(out.is_empty(), "{name}: no plan for a bad trace: {out}");
    }
    let (code, _, err) = run(&[
        "replay",
        dir.path().join("none.jsonl").to_str().unwrap(),
        "--dry-run",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("none.jsonl: cannot read the trace"), "{err}");
}

#[test]
fn replay_flags_are_checked_before_anything_is_read_or_sent() {
    let trace = fixture("mooncake.jsonl");
    // Each refused with exit 2, naming the flag, before the trace is read.
    for (args, names) in [
        (&[][..], "--url"),
        (&["--dry-run", "--speed", "0"][..], "--speed"),
        (&["--dry-run", "--scale=-1"][..], "--scale"),
        (&["--dry-run", "--max-gap", "0"][..], "--max-gap"),
        (
            &["--dry-run", "--context-limit", "0"][..],
            "--context-limit",
        ),
        (&["--dry-run", "--max-requests", "0"][..], "--max-requests"),
        (&["--dry-run", "--timing", "sometimes"][..], "--timing"),
        (&["--dry-run", "--resume"][..], "--output"),
        (&["--dry-run", "--prompt-seed", "x"][..], "--prompt-seed"),
        (&["--dry-run", "--synthetic", "human"][..], "--synthetic"),
        (&["--dry-run", "--cost-model", "fast"][..], "--cost-model"),
        (&["--dry-run", "--turns", "3"][..], "--turns"),
        (&["--dry-run", "--think", "3"][..], "--think"),
        (&["--dry-run", "--subagents", "2"][..], "--subagents"),
        (&["--dry-run", "--max-context", "4k"][..], "--max-context"),
        (
            &["--dry-run", "--synthetic-seed", "4"][..],
            "--synthetic-seed",
        ),
    ] {
        let (code, out, err) = run(&[&["replay", trace.as_str()][..], args].concat());
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(names), "{args:?} must name {names}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    // The replay's own flags are accepted beside --dry-run (what they do is the replay's).
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("r.jsonl");
    let out = dry_run(&[
        &trace,
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--tokenizer-url",
        "http://127.0.0.1:9",
        "--api-key-env",
        "MY_KEY",
        "-o",
        results.to_str().unwrap(),
        "--timing",
        "session",
        "--speed",
        "2",
        "--max-gap",
        "10",
        "--prompt-seed",
        "7",
        "--corpus",
        "random",
        "--slo",
        "ttft=2s,tpot=50ms",
    ]);
    assert!(out.contains("requests: 4"), "{out}");
    assert!(!results.exists(), "a dry run writes no results");
}

#[test]
fn the_trace_format_schema_names_the_fields_the_reader_allows() {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/trace-format.md"),
    )
    .unwrap();
    let schema = doc
        .split("```json\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("a json block");
    let schema: serde_json::Value = serde_json::from_str(schema).expect("the schema is JSON");
    let mut props: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut fields = ctxbench_trace::own::FIELDS.to_vec();
    props.sort_unstable();
    fields.sort_unstable();
    assert_eq!(props, fields);
    assert_eq!(
        schema["additionalProperties"],
        serde_json::Value::Bool(false)
    );
    // The doc's example is the fixture the dry run reads.
    let example = doc
        .split("```jsonl\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .unwrap();
    assert_eq!(
        format!("{example}\n"),
        std::fs::read_to_string(fixture("ctxbench.jsonl")).unwrap()
    );
}
