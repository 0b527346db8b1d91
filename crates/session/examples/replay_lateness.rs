//! The replay scheduler's lateness at a fixed request rate against a loopback server (never a
//! timed test): `cargo run --release -p ctxbench-session --example replay_lateness -- [RATE]
//! [REQUESTS]` (default 200 requests/s, 2000 requests). The loopback server answers each
//! request with four llama.cpp stream events (`ctxbench_client::loopback`, shared with `ctxbench
//! overhead`); the replay driver sends an open-loop
//! trace of requests `1000/RATE` ms apart, each recorded and synced as in a real replay, and
//! the lateness (sent − due) of every request is read back from the results file.

use std::sync::Arc;
use std::time::Duration;

use ctxbench_client::llamacpp::LlamaCpp;
use ctxbench_client::Http;
use ctxbench_schema::record::replay::ReplayTiming;
use ctxbench_schema::record::{read_results, Host, ResultsWriter, RunConfig, RunHeader};
use ctxbench_session::adaptive::RepPolicy;
use ctxbench_session::bench::{BenchSettings, Observer, OnError};
use ctxbench_session::corpus::Corpus;
use ctxbench_session::replay::{self, BlockPrompts, Capacity, Driver, Timing};
use ctxbench_trace::TraceRequest;

struct Quiet;
impl Observer for Quiet {}

fn settings() -> BenchSettings {
    BenchSettings {
        run_id: "lateness".into(),
        output_tokens: 4,
        policy: RepPolicy {
            precision: None,
            min_reps: 1,
            max_reps: 1,
            point_budget_s: None,
            run_budget_s: None,
            design: None,
            quantile: None,
        },
        cache_bypass: false,
        length_tolerance: 0,
        length_tolerance_pct: 0.0,
        timeout_base: Duration::from_secs(60),
        timeout_per_1k: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(30),
        on_error: OnError::Continue,
        flush: false,
        flush_wait: Duration::from_secs(1),
        metrics: None,
        two_point: None,
        decode_samples: 0,
        needle: None,
        nonce_end: None,
        idle: None,
        prompts: None,
        fleet: None,
        fleet_flush: false,
        extrapolate_to: None,
        warmup_s_per_token: None,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rate: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200.0);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    // The shared loopback server: four tokens per answer, the prompt's 64 counted.
    let server =
        ctxbench_client::loopback::serve(ctxbench_client::loopback::llamacpp_events(4, 64), || {})
            .expect("loopback server");
    let port = server.port;
    let http = Http::new(&format!("http://127.0.0.1:{port}"), None, None).expect("http");
    let backend = LlamaCpp::new(http, 1);
    let corpus = Arc::new(Corpus {
        tokens: (1000..3000).collect(),
        nonce_pool: (300..800).collect(),
        tokenize_requests: 0,
        wraps: true,
        text: None,
    });
    let requests: Vec<TraceRequest> = (0..n)
        .map(|i| TraceRequest {
            index: i,
            session: None,
            turn: 0,
            at_ms: Some(i as f64 * 1000.0 / rate),
            think_ms: None,
            input_tokens: 64,
            output_tokens: 4,
            blocks: vec![i % 16],
            block_tokens: 32,
        })
        .collect();
    let settings = settings();
    let allowance = |_: u64| 1;
    let driver = Driver {
        backend: &backend,
        prompts: BlockPrompts::new(corpus, 1, 0),
        settings: &settings,
        allowance: &allowance,
        capacity: Capacity::default(),
        timing: Timing {
            mode: ReplayTiming::OpenLoop,
            speed: 1.0,
            max_gap_ms: None,
        },
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.jsonl");
    let header = RunHeader {
        schema: ctxbench_schema::record::SCHEMA_VERSION,
        run_id: "lateness".into(),
        ctxbench_version: env!("CARGO_PKG_VERSION").into(),
        ctxbench_commit: None,
        started_at: "now".into(),
        host: Host::current(),
        config: RunConfig::default(),
        server: Default::default(),
        corpus: Default::default(),
        label: None,
        model_facts: None,
        imported: None,
    };
    let writer = ResultsWriter::create(&path, &header).expect("results");
    let (_tx, mut rx) = tokio::sync::watch::channel(false);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let started = std::time::Instant::now();
    let done = Default::default();
    let tally = rt
        .block_on(replay::run(
            &driver, &requests, &done, &writer, &mut Quiet, &mut rx,
        ))
        .expect("replay");
    let wall = started.elapsed().as_secs_f64();
    let mut late: Vec<f64> = read_results(&path, false)
        .expect("read back")
        .samples
        .iter()
        .filter_map(|s| s.replay.as_ref().map(|r| r.lateness_ms))
        .collect();
    late.sort_by(f64::total_cmp);
    let q = |p: f64| late[((p * late.len() as f64).ceil() as usize).clamp(1, late.len()) - 1];
    let span = (n - 1) as f64 / rate;
    println!(
        "{} requests at {rate} requests/s on loopback ({} failed): lateness p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; wall {wall:.2} s over a {span:.2} s span",
        late.len(),
        tally.failed,
        q(0.5),
        q(0.99),
        late.last().copied().unwrap_or(0.0)
    );
}
