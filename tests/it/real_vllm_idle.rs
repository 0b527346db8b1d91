//! Shared servers (issue 24) against a real vLLM (`scripts/reference-server vllm`): a second
//! client, driven by the sweep's progress rather than the clock, sends a request while every
//! other sample is in flight (it generates more tokens than the sample has left, and vLLM
//! steps the running requests together, so it outlasts the sample): that sample overlaps
//! foreign work and must be flagged, and the next one must wait. The proof is vLLM's own
//! counters around each sample: an unflagged sample's window saw exactly its own prompt
//! prefilled and exactly one request finished.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::real::{f, has_flag, http_post_json, metric_delta, read_lines, u};
use crate::common::real::{Family, RealServer};
use crate::common::{argv, http_get, run, sweep};

/// Requests vLLM is running, from its `/metrics` gauge.
fn running(port: u16) -> f64 {
    http_get(port, "/metrics")
        .map(|(_, body)| {
            body.lines()
                .filter(|l| l.starts_with("vllm:num_requests_running"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
        .unwrap_or(0.0)
}

fn samples_recorded(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"type\":\"sample\""))
        .count()
}

fn median_ttft(samples: &[Value], context: u64, keep: impl Fn(&Value) -> bool) -> f64 {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| u(s, "context_tokens") == context && keep(s))
        .map(|s| f(s, "ttft_ms"))
        .collect();
    assert!(!v.is_empty(), "no sample at {context}");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const SWEEP: &str = "--contexts 1k,2k --reps 3 --output-tokens 64";

#[test]
fn real_vllm_idle_no_unflagged_sample_shares_the_server_with_foreign_work() {
    let srv = RealServer::start(Family::Vllm, &[]);
    let port = srv.port;
    let quiet = sweep(&srv.url(), &argv(SWEEP)).ok();

    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("busy.jsonl");
    let stop = Arc::new(AtomicBool::new(false));
    let (results, halt) = (out.clone(), Arc::clone(&stop));
    let client = std::thread::spawn(move || {
        let mut seen = 0;
        let mut sent = Vec::new();
        while seen < 5 && !halt.load(Ordering::Relaxed) {
            let n = samples_recorded(&results);
            if n <= seen {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            seen = n;
            if seen % 2 == 0 {
                continue;
            }
            // The next sample is in flight once vLLM runs a request (ctxbench waited for
            // idle before sending it).
            let start = Instant::now();
            while running(port) < 1.0
                && start.elapsed() < Duration::from_secs(60)
                && !halt.load(Ordering::Relaxed)
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            let k = sent.len() as u32;
            sent.push(std::thread::spawn(move || {
                // Ids inside the tiny model's vocabulary (as `busy_prompt`'s).
                let prompt: Vec<u32> = (0..300).map(|i| 100 + (i * 7 + k * 31) % 200).collect();
                let body = json!({"model": "tiny-llama", "prompt": prompt, "max_tokens": 96,
                                  "ignore_eos": true, "temperature": 0});
                let r = http_post_json(port, "/v1/completions", &body);
                assert!(r.as_ref().is_some_and(|(c, _)| *c == 200), "{r:?}");
            }));
        }
        let n = sent.len();
        for h in sent {
            h.join().expect("foreign request");
        }
        n
    });
    let (code, _, stderr) = run(&[
        &["sweep", "--url", &srv.url(), "--out", out.to_str().unwrap()][..],
        &argv(SWEEP),
    ]
    .concat());
    stop.store(true, Ordering::Relaxed);
    let sent = client.join().expect("foreign client");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(sent, 3, "foreign requests sent");
    let quiet_after = sweep(&srv.url(), &argv(SWEEP)).ok();

    let busy = read_lines(&out);
    let check = busy.header["server"]["idle_check"].as_str().unwrap_or("");
    assert!(
        check.contains("vllm:num_requests_running") && check.contains("vllm:request_success_total"),
        "{check}"
    );
    let mut flagged = 0;
    for s in &busy.samples {
        assert_eq!(s["status"], "ok", "{s}");
        assert!(s["idle_wait_ms"].is_number(), "{s}");
        if has_flag(s, "foreign_load") {
            flagged += 1;
            continue;
        }
        // vLLM's own counters over the sample's window: its prompt alone was prefilled and
        // one request finished.
        assert_eq!(
            metric_delta(s, "vllm:prompt_tokens_total"),
            Some(u(s, "prompt_tokens") as f64),
            "an unflagged sample's window prefilled someone else's prompt too: {s}"
        );
        assert_eq!(
            metric_delta(s, "vllm:request_success_total"),
            Some(1.0),
            "an unflagged sample's window finished someone else's request too: {s}"
        );
    }
    assert!(
        flagged >= 1,
        "no sample overlapped the second client's requests"
    );
    let waited = busy
        .samples
        .iter()
        .filter(|s| f(s, "idle_wait_ms") > 0.0)
        .count();
    assert!(waited >= 1, "no sample waited for the server");
    assert!(
        stderr.contains("waiting for the server to be idle"),
        "{stderr}"
    );
    for c in [1024, 2048] {
        let clean = busy
            .samples
            .iter()
            .filter(|s| u(s, "context_tokens") == c && !has_flag(s, "foreign_load"))
            .count();
        assert_eq!(
            clean, 3,
            "the retakes made up for the flagged samples at {c}"
        );
    }
    // The busy run's clean medians lie in the band of the quiet runs around it (×2 either
    // way for a shared host).
    let q1 = read_lines(&quiet.out).samples;
    let q2 = read_lines(&quiet_after.out).samples;
    for c in [1024, 2048] {
        let (m1, m2) = (median_ttft(&q1, c, |_| true), median_ttft(&q2, c, |_| true));
        let mb = median_ttft(&busy.samples, c, |s| !has_flag(s, "foreign_load"));
        assert!(
            (m1.min(m2) / 2.0..m1.max(m2) * 2.0).contains(&mb),
            "{c}: quiet medians {m1:.1} and {m2:.1} ms, busy clean median {mb:.1} ms"
        );
    }
}
