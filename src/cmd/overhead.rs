//! `ctxbench overhead`: how much the client itself costs. A loopback server streams tokens
//! as fast as it can; the real streaming path (HTTP, SSE parser, llama.cpp reader, arrival
//! timestamps) consumes them on one thread whose CPU time is measured.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use ctxbench_client::llamacpp::LlamaCpp;
use ctxbench_client::{Backend, GenRequest, Http, Timeouts};

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct RunFigures {
    tokens_per_s: f64,
    cpu_us_per_token: f64,
}

/// Runs the benchmark and prints its figures.
pub async fn run(args: crate::cmd::cli::OverheadArgs) -> Result<()> {
    if args.streams > 1 {
        return many_streams(args).await;
    }
    let (port, _server, _) = start_server(args.tokens).context("starting the loopback server")?;
    let http =
        Http::new(&format!("http://127.0.0.1:{port}"), None, None).map_err(anyhow::Error::msg)?;
    let backend = LlamaCpp::new(http, 1);
    let mut figures = Vec::new();
    for _ in 0..args.runs.max(1) {
        let cpu0 = thread_cpu_us();
        let out = backend
            .generate(&GenRequest {
                prompt: vec![1, 2, 3, 4],
                prepared: None,
                max_tokens: args.tokens,
                cache_bypass: true,
                timeouts: Timeouts {
                    request: Duration::from_secs(600),
                    stall: Duration::from_secs(30),
                },
            })
            .await
            .context("streaming from the loopback server")?;
        let cpu = thread_cpu_us() - cpu0;
        let n = out.stream.token_events as f64;
        let span = out
            .stream
            .decode_span()
            .map_or(f64::NAN, |d| d.as_secs_f64());
        figures.push(RunFigures {
            tokens_per_s: (n - 1.0) / span,
            cpu_us_per_token: cpu / n,
        });
    }
    let med = |f: fn(&RunFigures) -> f64| {
        ctxbench_stats::stats::Spread::of(figures.iter().map(f)).map_or(f64::NAN, |s| s.median)
    };
    let (res_ns, now_ns) = timestamp_resolution();
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "loopback stream, {} tokens × {} runs (medians), one client thread:",
        args.tokens, args.runs
    )?;
    writeln!(
        o,
        "  sustained client throughput: {:.0} tokens/s",
        med(|f| f.tokens_per_s)
    )?;
    writeln!(
        o,
        "  client CPU per streamed token: {:.2} µs",
        med(|f| f.cpu_us_per_token)
    )?;
    writeln!(
        o,
        "  timestamp resolution: {res_ns:.0} ns (smallest step of Instant::now), cost {now_ns:.1} ns per call"
    )?;
    writeln!(
        o,
        "Timestamps are taken with Instant::now() the moment a chunk is returned by the socket, before it is parsed."
    )?;
    Ok(())
}

/// Many-streams mode: `streams` concurrent streams from one wave (as `--concurrency` sends
/// them), aggregate tokens/s and client CPU per token (the process minus the server thread).
async fn many_streams(args: crate::cmd::cli::OverheadArgs) -> Result<()> {
    let per = (args.tokens / args.streams).max(16);
    let (port, _server, server_cpu) = start_server(per).context("starting the loopback server")?;
    let http =
        Http::new(&format!("http://127.0.0.1:{port}"), None, None).map_err(anyhow::Error::msg)?;
    let backend = LlamaCpp::new(http, 1);
    let req = GenRequest {
        prompt: vec![1, 2, 3, 4],
        prepared: None,
        max_tokens: per,
        cache_bypass: true,
        timeouts: Timeouts {
            request: Duration::from_secs(600),
            stall: Duration::from_secs(60),
        },
    };
    let mut figures = Vec::new();
    for _ in 0..args.runs.max(1) {
        let (cpu0, srv0) = (process_cpu_us(), server_cpu.load(Ordering::Relaxed));
        let t0 = Instant::now();
        let outs =
            futures_util::future::join_all((0..args.streams).map(|_| backend.generate(&req))).await;
        let wall = t0.elapsed().as_secs_f64();
        let (cpu1, srv1) = (process_cpu_us(), server_cpu.load(Ordering::Relaxed));
        let mut n = 0usize;
        for o in outs {
            n += o
                .context("streaming from the loopback server")?
                .stream
                .token_events;
        }
        let client_cpu = (cpu1 - cpu0) - (srv1 as f64 - srv0 as f64);
        figures.push(RunFigures {
            tokens_per_s: n as f64 / wall,
            cpu_us_per_token: client_cpu / n as f64,
        });
    }
    let med = |f: fn(&RunFigures) -> f64| {
        ctxbench_stats::stats::Spread::of(figures.iter().map(f)).map_or(f64::NAN, |s| s.median)
    };
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "loopback, {} concurrent streams × {per} tokens × {} runs (medians):",
        args.streams, args.runs
    )?;
    writeln!(
        o,
        "  aggregate client throughput: {:.0} tokens/s",
        med(|f| f.tokens_per_s)
    )?;
    writeln!(
        o,
        "  client CPU per streamed token: {:.2} µs (process CPU minus the loopback server's thread)",
        med(|f| f.cpu_us_per_token)
    )?;
    Ok(())
}

/// CPU time (user + system) of the whole process, in µs.
fn process_cpu_us() -> f64 {
    rusage_us(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of the calling thread, in µs.
fn thread_cpu_us() -> f64 {
    rusage_us(libc::RUSAGE_THREAD)
}

fn rusage_us(who: libc::c_int) -> f64 {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// (smallest non-zero step, mean cost) of `Instant::now()`, in ns.
fn timestamp_resolution() -> (f64, f64) {
    const N: u32 = 200_000;
    let start = Instant::now();
    let mut prev = start;
    let mut smallest = Duration::MAX;
    for _ in 0..N {
        let t = Instant::now();
        let d = t - prev;
        if !d.is_zero() && d < smallest {
            smallest = d;
        }
        prev = t;
    }
    let per_call = start.elapsed().as_nanos() as f64 / N as f64;
    (smallest.as_nanos() as f64, per_call)
}

/// The shared loopback server (`ctxbench_client::loopback`) answering every request with
/// `tokens` llama.cpp stream events; its thread's CPU time (µs) is published after each
/// answer.
fn start_server(tokens: u32) -> Result<(u16, std::thread::JoinHandle<()>, Arc<AtomicU64>)> {
    let cpu = Arc::new(AtomicU64::new(0));
    let cpu_out = cpu.clone();
    let events = ctxbench_client::loopback::llamacpp_events(tokens, 4);
    let server = ctxbench_client::loopback::serve(events, move || {
        cpu.store(thread_cpu_us() as u64, Ordering::Relaxed)
    })?;
    Ok((server.port, server.thread, cpu_out))
}
