//! Every format read from a small fixture written from its documented fields
//! (tests/fixtures, never copied from a trace), every rounding rule, every error naming
//! file, line and field, subagent time offsets, scaling and the context limit.

use std::path::{Path, PathBuf};

use ctxbench_trace::plan::{summarize, CostModel, PlanOptions};
use ctxbench_trace::shape::{scale, scale_block, scale_count, Shaping};
use ctxbench_trace::{detect, open, TraceError, TraceFormat, TraceRequest};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read_all(path: &Path) -> Vec<TraceRequest> {
    open(path).unwrap().collect::<Result<Vec<_>, _>>().unwrap()
}

fn plan(path: &Path) -> ctxbench_trace::plan::PlanSummary {
    summarize(open(path).unwrap(), &PlanOptions::default()).unwrap()
}

/// Writes `text` to a file named `name` in a fresh folder (kept alive by the guard).
fn write(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

/// The error of reading `path` to the end.
fn error_of(path: &Path) -> TraceError {
    match open(path) {
        Err(e) => e,
        Ok(r) => r
            .collect::<Result<Vec<_>, _>>()
            .expect_err("the trace must be refused"),
    }
}

/// Asserts the error is `Invalid` at `line` and `field`, its message containing `says`, and
/// that its text names the file, line and field.
fn assert_invalid(e: &TraceError, path: &Path, line: u64, field: &str, says: &str) {
    match e {
        TraceError::Invalid {
            path: p,
            line: l,
            field: f,
            message,
        } => {
            assert_eq!((p.as_path(), *l, f.as_str()), (path, line, field), "{e}");
            assert!(message.contains(says), "`{message}` must say `{says}`");
        }
        other => panic!("expected Invalid at {field}, got {other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&path.display().to_string()) && text.contains(&format!(":{line}: {field}:")),
        "{text}"
    );
}

#[test]
fn mooncake_blocks_are_512_tokens_the_last_partial_and_time_starts_at_the_first_request() {
    let p = fixture("mooncake.jsonl");
    assert_eq!(detect(&p).unwrap(), TraceFormat::Mooncake);
    let r = read_all(&p);
    assert_eq!(r.len(), 4);
    let at: Vec<_> = r.iter().map(|r| r.at_ms.unwrap()).collect();
    assert_eq!(
        at,
        [0.0, 500.0, 500.0, 1250.0],
        "the first timestamp (1000) is time 0"
    );
    assert!(r.iter().all(|r| r.block_tokens == 512));
    assert_eq!(r.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(
        (r[3].session.as_deref(), r[3].turn, r[3].think_ms),
        (Some("a"), 0, Some(250.0))
    );
    assert_eq!(r[0].session, None);
    let s = plan(&p);
    // Request 2 reuses blocks 0 and 1 (1024 tokens), request 4 both of its blocks.
    assert_eq!(
        (s.requests, s.input_tokens, s.reused_tokens),
        (4, 4236, 2048)
    );
    assert_eq!(
        (s.span_ms, s.sessions, s.distinct_blocks),
        (Some(1250.0), 1, 6)
    );
}

#[test]
fn bailian_traces_in_mooncake_form_are_told_by_16_token_blocks() {
    let (_d, p) = write(
        "bailian.jsonl",
        "{\"timestamp\":0,\"input_length\":100,\"output_length\":1,\"hash_ids\":[1,2,3,4,5,6,7]}\n",
    );
    let r = read_all(&p);
    assert_eq!(r[0].block_tokens, 16);
    let notes = open(&p).unwrap().notes().join(" ");
    assert!(notes.contains("Bailian"), "{notes}");
}

#[test]
fn weka_subagents_run_at_marker_t_plus_inner_t_and_local_ids_are_per_file() {
    let p = fixture("weka");
    assert_eq!(detect(&p).unwrap(), TraceFormat::Weka);
    assert_eq!(
        detect(&p.join("session-a.json")).unwrap(),
        TraceFormat::Weka
    );
    let r = read_all(&p);
    let got: Vec<(&str, u32, f64)> = r
        .iter()
        .map(|r| (r.session.as_deref().unwrap(), r.turn, r.at_ms.unwrap()))
        .collect();
    assert_eq!(
        got,
        [("a", 0, 0.0), ("b", 0, 0.0), ("b", 1, 1000.0), ("a/x1", 0, 2000.0), ("a/x1", 1, 3500.0), ("a", 1, 5000.0)],
        "session b's t starts at 10 s: its own time 0; the subagent's inner t adds to its marker's 2 s"
    );
    assert!(r.iter().all(|r| r.block_tokens == 64));
    assert_eq!(r[4].think_ms, Some(500.0));
    // Both files use local id 1: namespaced, they are different blocks.
    assert_ne!(r[0].blocks[0], r[1].blocks[0]);
    assert_eq!(r[0].blocks[..3], r[5].blocks[..3]);
    let s = plan(&p);
    assert_eq!((s.requests, s.sessions, s.input_tokens), (6, 3, 1022));
    // b1 reuses b0's block (64), the subagent's 2nd request 2 blocks (128), a's 2nd 3 (192).
    assert_eq!(s.reused_tokens, 384);
}

#[test]
fn tracelab_blocks_are_synthesised_from_the_previous_round_and_think_time_from_events() {
    let p = fixture("tracelab.jsonl");
    assert_eq!(detect(&p).unwrap(), TraceFormat::TraceLab);
    let r = read_all(&p);
    assert!(r.iter().all(|r| r.at_ms.is_none() && r.block_tokens == 64));
    let lens: Vec<usize> = r.iter().map(|r| r.blocks.len()).collect();
    assert_eq!(lens, [3, 6, 10, 15, 10], "floor(input_tokens_total / 64)");
    assert_eq!(
        r[1].blocks[..3],
        r[0].blocks[..],
        "prefix 192 = 3 blocks of the previous round"
    );
    assert!(!r[0].blocks.contains(&r[1].blocks[3]), "the rest is fresh");
    assert_eq!(r[3].blocks[..10], r[2].blocks[..]);
    assert_eq!(
        r[4].blocks[..2],
        r[3].blocks[..2],
        "the non-monotone prefix (128 after 640) reuses 2 blocks"
    );
    assert_ne!(r[4].blocks[2], r[3].blocks[2]);
    let think: Vec<Option<f64>> = r.iter().map(|r| r.think_ms).collect();
    assert_eq!(
        think,
        [Some(0.0), Some(3000.0), Some(0.0), Some(1500.0), None]
    );
    assert_eq!(
        r.iter().map(|r| r.turn).collect::<Vec<_>>(),
        [0, 1, 0, 1, 2]
    );
    let s = plan(&p);
    assert_eq!(
        (s.sessions, s.input_tokens, s.reused_tokens),
        (2, 2940, 960)
    );
    assert_eq!(s.longest_think_ms, Some(3000.0));
}

#[test]
fn azure_rows_have_wall_clock_times_from_the_first_row_and_no_reuse() {
    let p = fixture("azure.csv");
    assert_eq!(detect(&p).unwrap(), TraceFormat::AzureCsv);
    let r = read_all(&p);
    let at: Vec<f64> = r.iter().map(|r| r.at_ms.unwrap()).collect();
    assert!(
        (at[1] - 300.0).abs() < 1e-3 && (at[2] - 1500.0).abs() < 1e-3 && at[0] == 0.0,
        "{at:?}"
    );
    assert!(r.iter().all(|r| r.blocks.is_empty() && r.session.is_none()));
    let s = plan(&p);
    assert_eq!(
        (s.input_tokens, s.output_tokens, s.reused_tokens),
        (8098, 45, 0)
    );
}

#[test]
fn ctxbench_format_reads_times_think_times_and_blocks() {
    let p = fixture("ctxbench.jsonl");
    assert_eq!(detect(&p).unwrap(), TraceFormat::Ctxbench);
    let r = read_all(&p);
    assert_eq!(r.iter().map(|r| r.turn).collect::<Vec<_>>(), [0, 1, 0]);
    assert_eq!((r[1].at_ms, r[1].think_ms), (Some(900.0), Some(500.0)));
    assert_eq!((r[2].blocks.len(), r[2].block_tokens), (0, 64));
    assert_eq!(
        plan(&p).reused_tokens,
        256,
        "4 leading blocks of 64 already sent"
    );
}

#[test]
fn mooncake_errors_name_file_line_and_field() {
    let ok = "{\"timestamp\":100,\"input_length\":1100,\"output_length\":1,\"hash_ids\":[1,2,3]}\n";
    let cases: [(&str, u64, &str, &str); 7] = [
        (
            "{\"timestamp\":200,\"input_length\":5",
            2,
            "(line)",
            "truncated",
        ),
        (
            "{\"timestamp\":200,\"input_length\":-5,\"output_length\":1}\n",
            2,
            "input_length",
            "negative",
        ),
        (
            "{\"timestamp\":200,\"input_length\":5,\"output_length\":1.5}\n",
            2,
            "output_length",
            "whole number",
        ),
        (
            "{\"timestamp\":200,\"input_length\":1100,\"output_length\":1,\"hash_ids\":[1,2]}\n",
            2,
            "hash_ids",
            "ceil(1100/512) = 3",
        ),
        (
            "{\"timestamp\":200,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[1,2,3]}\n",
            2,
            "hash_ids",
            "ceil(1024/512) = 2",
        ),
        (
            "{\"timestamp\":50,\"input_length\":5,\"output_length\":1}\n",
            2,
            "timestamp",
            "before the previous",
        ),
        (
            "{\"input_length\":5,\"output_length\":1}\n",
            2,
            "timestamp",
            "missing",
        ),
    ];
    for (second, line, field, says) in cases {
        let (_d, p) = write("m.jsonl", &format!("{ok}{second}"));
        assert_invalid(&error_of(&p), &p, line, field, says);
    }
    // A blank line still counts: the error is on the file's own line 3.
    let (_d, p) = write(
        "m.jsonl",
        &format!("{ok}\n{{\"timestamp\":200,\"input_length\":\"x\",\"output_length\":1}}\n"),
    );
    assert_invalid(&error_of(&p), &p, 3, "input_length", "not a number");
}

#[test]
fn weka_errors_name_the_field_path() {
    let one = |reqs: &str| {
        format!(
            "{{\"id\":\"s\",\"block_size\":64,\"hash_id_scope\":\"local\",\"requests\":[{reqs}]}}"
        )
    };
    let cases = [
        (one("{\"t\":0,\"in\":200,\"out\":1,\"hash_ids\":[1,2,3,4]}"), "requests[0].hash_ids", "floor(200/64) = 3"),
        (one("{\"t\":0,\"in\":200,\"out\":1,\"hash_ids\":[1,2,3]},{\"t\":1,\"type\":\"subagent\",\"requests\":[{\"t\":0,\"in\":-1,\"out\":1,\"hash_ids\":[]}]}"), "requests[1].requests[0].in", "negative"),
        (one("{\"in\":64,\"out\":1,\"hash_ids\":[1]}"), "requests[0].t", "missing"),
        ("{\"block_size\":0,\"requests\":[]}".to_owned(), "block_size", "1 or more"),
        ("{\"block_size\":64,\"hash_id_scope\":\"galaxy\",\"requests\":[]}".to_owned(), "hash_id_scope", "local or global"),
    ];
    for (text, field, says) in cases {
        let (_d, p) = write("w.json", &text);
        assert_invalid(&error_of(&p), &p, 1, field, says);
    }
    let (_d, p) = write("w.json", "{\"block_size\":64,\"requests\":[{\"t\":0,");
    assert_invalid(&error_of(&p), &p, 1, "(file)", "truncated");
}

#[test]
fn tracelab_azure_and_ctxbench_errors_name_file_line_and_field() {
    let tl = |idx: u64, total: u64, prefix: u64, append: u64| {
        format!(
        "{{\"session_id\":\"c:1\",\"round_index\":{idx},\"input_tokens_total\":{total},\"prefix_tokens\":{prefix},\"newly_append_tokens\":{append},\"output_tokens\":1}}\n"
    )
    };
    let (_d, p) = write(
        "t.jsonl",
        &format!("{}{}", tl(0, 100, 0, 100), tl(1, 100, 10, 20)),
    );
    assert_invalid(
        &error_of(&p),
        &p,
        2,
        "input_tokens_total",
        "prefix_tokens 10 + newly_append_tokens 20 = 30",
    );
    let (_d, p) = write(
        "t.jsonl",
        &format!("{}{}", tl(3, 100, 0, 100), tl(3, 200, 64, 136)),
    );
    assert_invalid(&error_of(&p), &p, 2, "round_index", "not after");

    let head = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    let (_d, p) = write(
        "a.csv",
        &format!("{head}2023-11-16 18:15:46.6805900,-4,10\n"),
    );
    assert_invalid(&error_of(&p), &p, 2, "ContextTokens", "negative");
    let (_d, p) = write(
        "a.csv",
        &format!("{head}2023-11-16 18:15:46.6805900,4,10\n2023-11-16 18:15:45.0000000,4,10\n"),
    );
    assert_invalid(&error_of(&p), &p, 3, "TIMESTAMP", "time order");
    let (_d, p) = write("a.csv", &format!("{head}2023-11-16 18:15:46.6805900,4"));
    assert_invalid(&error_of(&p), &p, 2, "(line)", "truncated");
    let (_d, p) = write("a.csv", "TIMESTAMP,Context,Generated\n");
    assert_invalid(&error_of(&p), &p, 1, "(header)", "expected");

    let own = "{\"at_ms\":0,\"input_tokens\":100,\"output_tokens\":1";
    for (line, field, says) in [
        (
            format!("{own},\"block_tokens\":64,\"blocks\":[1,2,3]}}"),
            "blocks",
            "at most ceil(100/64) = 2",
        ),
        (
            format!("{own},\"blocks\":[1]}}"),
            "block_tokens",
            "needed with blocks",
        ),
        (
            format!("{own},\"session\":\"s\",\"turn\":1}}"),
            "turn",
            "request 0",
        ),
        (
            format!("{own},\"prompt\":\"hi\"}}"),
            "prompt",
            "not a field",
        ),
    ] {
        let (_d, p) = write("c.jsonl", &format!("{line}\n"));
        assert_invalid(&error_of(&p), &p, 1, field, says);
    }
}

#[test]
fn an_unknown_format_is_refused_with_what_was_seen() {
    for (text, says) in [
        ("{\"prompt\":\"hi\",\"max_tokens\":5}\n", "match none"),
        ("hello,world\n", "neither JSON nor"),
        ("", "empty"),
    ] {
        let (_d, p) = write("x.jsonl", text);
        match detect(&p) {
            Err(e @ TraceError::UnknownFormat { .. }) => {
                let t = e.to_string();
                assert!(t.contains(says) && t.contains("x.jsonl"), "{t}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}

#[test]
fn scaling_rounds_lengths_floors_the_block_and_keeps_the_reuse_shape() {
    assert_eq!(
        (
            scale_count(1100, 0.1),
            scale_count(3, 0.1),
            scale_count(0, 0.1)
        ),
        (110, 1, 0)
    );
    assert_eq!(
        (
            scale_block(512, 0.1),
            scale_block(64, 0.01),
            scale_block(64, 0.5)
        ),
        (51, 1, 32)
    );
    // Mooncake's ceil rule: 1100 tokens in 3 blocks of 512 -> 110 tokens in 3 blocks of 51.
    let mut r = read_all(&fixture("mooncake.jsonl")).remove(0);
    assert_eq!(scale(&mut r, 0.1), 0);
    assert_eq!(
        (r.input_tokens, r.block_tokens, r.blocks.len()),
        (110, 51, 3)
    );
    // Weka's floor rule survives any scale: whole blocks still fit.
    for f in [0.013, 0.1, 0.37, 0.5, 2.0, 3.3] {
        for mut r in read_all(&fixture("weka")) {
            let n = r.blocks.len();
            assert_eq!(scale(&mut r, f), 0, "scale {f}");
            assert_eq!(r.blocks.len(), n);
            assert!(
                r.blocks.len() as u64 * u64::from(r.block_tokens) <= r.input_tokens,
                "scale {f}: {r:?}"
            );
        }
    }
    // The reuse shape: the same requests reuse the same number of blocks.
    let opts = |f| PlanOptions {
        shaping: Shaping {
            scale: Some(f),
            context_limit: None,
        },
        ..Default::default()
    };
    let half = summarize(open(&fixture("weka")).unwrap(), &opts(0.5)).unwrap();
    assert_eq!(half.reused_tokens, 384 / 2);
    let double = summarize(open(&fixture("mooncake.jsonl")).unwrap(), &opts(2.0)).unwrap();
    assert_eq!((double.input_tokens, double.reused_tokens), (8472, 4096));
}

#[test]
fn requests_beyond_the_context_limit_are_counted_and_skipped_and_never_sent_as_reuse() {
    let opts = PlanOptions {
        shaping: Shaping {
            scale: None,
            context_limit: Some(1200),
        },
        cost: Some(CostModel::parse("prefill=1000,decode=10").unwrap()),
        ..Default::default()
    };
    let s = summarize(open(&fixture("mooncake.jsonl")).unwrap(), &opts).unwrap();
    // 1100+10 and 512+5 and 1024+8 fit; 1600+20 does not.
    assert_eq!(
        (s.read, s.requests, s.skipped, s.largest_skipped),
        (4, 3, 1, 1620)
    );
    // The skipped request's blocks were never sent: the last reuses blocks 0 and 1 of the first.
    assert_eq!(s.reused_tokens, 1024);
    let predicted = (1100.0 + 512.0 + 0.0) / 1000.0 + (10.0 + 5.0 + 8.0) / 10.0;
    assert!((s.predicted_server_s.unwrap() - predicted).abs() < 1e-9);
    let first_two = summarize(
        open(&fixture("mooncake.jsonl")).unwrap(),
        &PlanOptions {
            max_requests: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((first_two.read, first_two.truncated_by_max), (2, true));
    assert!(
        CostModel::parse("prefill=1000").is_err()
            && CostModel::parse("prefill=0,decode=1").is_err()
    );
}
