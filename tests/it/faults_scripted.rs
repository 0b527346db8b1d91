//! Bad responses, injected by a scripted llama.cpp-shaped server: each must become a named
//! error in a failed sample or a flagged sample — never a panic, never a silently wrong number.

use crate::common;

use std::time::Duration;

use common::scripted::{good, good_events, json_reply, Reply, Scripted};
use common::sweep;
use ctxbench_schema::record::{read_results, Sample, Status};
use serde_json::{json, Value};

/// Runs a 2-rep sweep at 64 tokens where the first measured request (call 1; call 0 is the
/// warmup) gets `fault` and the second a good answer. Returns (exit, stderr, samples).
fn sweep_with_fault(
    fault: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    extra: &[&str],
) -> (i32, String, Vec<Sample>) {
    sweep_with_fault_then(fault, good, extra)
}

/// Like [`sweep_with_fault`], with `then` answering every request after the first.
fn sweep_with_fault_then(
    fault: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    then: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    extra: &[&str],
) -> (i32, String, Vec<Sample>) {
    let srv = Scripted::start(
        4096,
        move |i, body| if i == 1 { fault(body) } else { then(body) },
    );
    let run = sweep(
        &srv.url(),
        &[&["--contexts", "64", "--reps", "2"][..], extra].concat(),
    );
    let (code, stderr) = (run.code, run.stderr);
    assert_ne!(code, 101, "ctxbench panicked: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A run may fail before writing anything: then there are no samples.
    let samples = read_results(&run.out, false)
        .map(|r| r.samples)
        .unwrap_or_default();
    (code, stderr, samples)
}

fn assert_failed_then_ok(samples: &[Sample], kind: &str, needle: &str) {
    assert_eq!(samples.len(), 2, "{samples:?}");
    let e = samples[0].error.as_ref().expect("first sample failed");
    assert_eq!(samples[0].status, Status::Failed);
    assert_eq!(e.kind, kind, "{e:?}");
    assert!(e.message.contains(needle), "{e:?}");
    assert!(samples[0].ttft_ms.is_none() && samples[0].decode_tokens_per_s.is_none());
    assert_eq!(
        samples[1].status,
        Status::Ok,
        "the sweep must go on: {:?}",
        samples[1]
    );
}

#[test]
fn scripted_http_500_with_json_body_is_a_named_failure() {
    let (code, stderr, s) = sweep_with_fault(
        |_| {
            json_reply(
                500,
                json!({"error":{"code":500,"message":"boom: CUDA out of memory","type":"server_error"}}),
            )
        },
        &[],
    );
    assert_eq!(code, 1);
    assert_failed_then_ok(&s, "http", "boom: CUDA out of memory");
    assert!(stderr.contains("resume with"), "{stderr}");
}

#[test]
fn scripted_http_503_without_body_is_a_named_failure() {
    let (code, _, s) = sweep_with_fault(
        |_| Reply::Body {
            status: 503,
            content_type: "text/html",
            body: String::new(),
        },
        &[],
    );
    assert_eq!(code, 1);
    assert_failed_then_ok(&s, "http", "503");
}

#[test]
fn scripted_error_inside_a_200_stream_is_a_named_failure() {
    let (_, _, s) = sweep_with_fault(
        |_| {
            Reply::Stream(vec![
            (Duration::ZERO, "data: {\"content\":\"x\",\"tokens\":[1],\"stop\":false,\"tokens_predicted\":1}\n\n".into()),
            (Duration::ZERO, "data: {\"error\":{\"code\":500,\"message\":\"slot crashed\",\"type\":\"server_error\"}}\n\n".into()),
        ])
        },
        &[],
    );
    assert_failed_then_ok(&s, "in_stream", "slot crashed");
}

#[test]
fn scripted_malformed_sse_is_a_named_failure() {
    let (_, _, s) = sweep_with_fault(
        |_| {
            Reply::Stream(vec![(
                Duration::ZERO,
                "data: {\"content\": \"x\", oops\n\n".into(),
            )])
        },
        &[],
    );
    assert_failed_then_ok(&s, "malformed", "not JSON");
}

#[test]
fn scripted_stream_without_final_record_is_truncated() {
    let (_, _, s) = sweep_with_fault(
        |body| {
            let mut ev = good_events(body, None, 0);
            ev.pop(); // drop the final stop:true event with timings
            Reply::Stream(ev.into_iter().map(|e| (Duration::ZERO, e)).collect())
        },
        &[],
    );
    assert_failed_then_ok(&s, "truncated", "without its final");
}

#[test]
fn scripted_connection_cut_mid_stream_is_a_transport_failure() {
    let (_, _, s) = sweep_with_fault(
        |body| {
            let mut ev = good_events(body, None, 0);
            ev.truncate(3);
            Reply::CutStream(ev)
        },
        &[],
    );
    assert_failed_then_ok(&s, "transport", "connection lost");
}

#[test]
fn scripted_context_refusal_is_named() {
    let (_, _, s) = sweep_with_fault(
        |_| {
            json_reply(
                400,
                json!({"error":{"code":400,"message":"request (64 tokens) exceeds the available context size (32 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":64,"n_ctx":32}}),
            )
        },
        &[],
    );
    assert_failed_then_ok(&s, "context_exceeded", "exceeds the available context size");
}

#[test]
fn scripted_stall_after_first_bytes_hits_the_stall_timeout() {
    let (_, stderr, s) = sweep_with_fault(
        |body| {
            let ev = good_events(body, None, 0);
            Reply::Stream(vec![
                (Duration::ZERO, ev[0].clone()),
                (Duration::from_secs(4), ev[1].clone()),
            ])
        },
        &["--stall-timeout", "1"],
    );
    assert_failed_then_ok(&s, "stalled", "stall timeout");
    assert!(stderr.contains("FAILED"), "{stderr}");
}

#[test]
fn scripted_silent_server_hits_the_request_timeout_and_stop_stops() {
    let (code, stderr, s) = sweep_with_fault(
        |body| {
            Reply::Stream(vec![(
                Duration::from_secs(4),
                good_events(body, None, 0)[0].clone(),
            )])
        },
        &[
            "--timeout",
            "1",
            "--timeout-per-1k",
            "0",
            "--on-error",
            "stop",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(s.len(), 1, "--on-error stop must not send more: {s:?}");
    assert_eq!(s[0].error.as_ref().unwrap().kind, "timeout");
    assert!(
        stderr.contains("stopped early") && stderr.contains("--resume"),
        "{stderr}"
    );
}

#[test]
fn scripted_truncated_prompt_is_flagged_not_averaged() {
    // The server says it saw half the prompt (it truncated it): a wrong-length sample.
    let (code, stderr, s) = sweep_with_fault(
        |body| {
            Reply::Stream(
                good_events(body, Some(32), 0)
                    .into_iter()
                    .map(|e| (Duration::ZERO, e))
                    .collect(),
            )
        },
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(s[0].status, Status::Ok);
    assert_eq!(s[0].length_ok, Some(false));
    assert!(s[0].flags.iter().any(|f| f == "length_mismatch"));
    assert!(!s[0].usable());
    assert!(stderr.contains("prompt length different"), "{stderr}");
}

#[test]
fn scripted_401_is_a_usage_error_that_names_the_api_key() {
    let srv = Scripted::start(4096, |_, _| {
        json_reply(
            401,
            json!({"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}),
        )
    });
    let run = sweep(&srv.url(), &["--contexts", "64"]);
    let stderr = &run.stderr;
    assert_eq!(run.code, 2, "{stderr}");
    let err: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(err.len(), 1, "one error line: {stderr}");
    assert!(
        err[0].contains("API key") && err[0].contains("Invalid API Key"),
        "{stderr}"
    );
    assert!(
        !run.out.exists(),
        "no results file for a run that measured nothing"
    );
}

#[test]
fn scripted_disk_full_names_the_error_and_keeps_every_written_line() {
    // A 4 KiB file-size limit (SIGXFSZ ignored, so writes fail with EFBIG as on a full disk).
    let srv = Scripted::start(4096, |_, body| good(body));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("full.jsonl");
    let url = srv.url();
    let o = std::process::Command::new("bash")
        .args(["-c", "trap '' XFSZ; ulimit -f 4; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_ctxbench"))
        .env("XDG_STATE_HOME", common::state_home())
        .args([
            "sweep",
            "--url",
            &url,
            "--contexts",
            "64",
            "--reps",
            "20",
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to results file") && stderr.contains("File too large"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\"type\":\"sample\""),
        "the unwritten sample must be shown: {stderr}"
    );
    let r = read_results(&out, false).unwrap();
    assert_eq!(r.torn_bytes, 0, "a partial line was left behind");
    assert!(!r.samples.is_empty() && r.samples.len() < 20);
    assert!(r.samples.iter().all(|s| s.status == Status::Ok));
}

#[test]
fn scripted_wrong_backend_is_a_usage_error_naming_the_server() {
    // A llama.cpp-shaped server driven as vLLM: its /tokenize ignores vLLM's request body.
    let srv = Scripted::start(4096, |_, body| good(body));
    let r = sweep(&srv.url(), &["--backend", "vllm", "--contexts", "64"]);
    assert_eq!(r.code, 2, "a usage error: {}", r.stderr);
    assert!(
        r.stderr.contains("it looks like llama.cpp (GET /props answered with default_generation_settings); use --backend llamacpp or auto"),
        "{}",
        r.stderr
    );
    assert!(!r.out.exists());
}

#[test]
fn scripted_tokens_arriving_in_one_burst_give_no_decode_rate() {
    // A buffering proxy (or a descheduled client): every token event arrives in one write.
    // The second answer is spaced 25 ms per event, so only a client descheduled for about
    // a quarter of a second (not the few ms parallel tests cause) could see it as a burst.
    let spaced = |body: &Value| {
        Reply::Stream(
            good_events(body, None, 0)
                .into_iter()
                .map(|e| (Duration::from_millis(25), e))
                .collect(),
        )
    };
    let (code, stderr, s) = sweep_with_fault_then(
        |body| {
            let ev = good_events(body, None, 0);
            Reply::Stream(vec![
                (Duration::ZERO, ev[0].clone()),
                (Duration::from_millis(20), ev[1..].concat()),
            ])
        },
        spaced,
        &["--output-tokens", "16"],
    );
    assert_eq!(code, 0, "{stderr}");
    let burst = &s[0];
    assert_eq!(burst.status, Status::Ok);
    // Every token event came in one write: the first token arrived with the last, so the
    // stream was held back (issue 24) and its TTFT is no TTFT either.
    assert!(
        burst.flags.iter().any(|f| f == "held_back_stream"),
        "{burst:?}"
    );
    assert!(burst.decode_tokens_per_s.is_none() && burst.ms_per_step.is_none());
    assert!(burst.ttft_ms.is_none() && burst.e2e_ms.is_some());
    // The next, well-spaced answer has its rate.
    assert!(s[1].decode_tokens_per_s.is_some(), "{:?}", s[1]);
}
