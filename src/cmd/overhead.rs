//! `ctxbench overhead`: how much the client itself costs. A loopback server streams tokens
//! as fast as it can; the real streaming path (HTTP, SSE parser, llama.cpp reader, arrival
//! timestamps) consumes them on one thread whose CPU time is measured.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A loopback server on its own thread that answers every request with `tokens` llama.cpp
/// stream events, one write each, as fast as the socket takes them; connections are served
/// concurrently. The thread's CPU time (µs) is published after each answer.
fn start_server(tokens: u32) -> Result<(u16, std::thread::JoinHandle<()>, Arc<AtomicU64>)> {
    let cpu = Arc::new(AtomicU64::new(0));
    let cpu_out = cpu.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    listener.set_nonblocking(true)?;
    let mut events: Vec<Vec<u8>> = (1..=tokens)
        .map(|i| {
            format!(
                "data: {{\"content\":\"x\",\"tokens\":[42],\"stop\":false,\"tokens_predicted\":{i},\"tokens_evaluated\":4}}\n\n"
            )
            .into_bytes()
        })
        .collect();
    events.push(format!(
        "data: {{\"content\":\"\",\"tokens\":[],\"stop\":true,\"tokens_predicted\":{tokens},\"tokens_evaluated\":4,\"stop_type\":\"limit\",\"timings\":{{\"cache_n\":0,\"prompt_n\":4,\"prompt_ms\":0.1,\"predicted_n\":{tokens},\"predicted_ms\":1.0}}}}\n\n"
    ).into_bytes());
    let handle = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let events = Arc::new(events);
            while let Ok((mut sock, _)) = listener.accept().await {
                let (events, cpu) = (events.clone(), cpu.clone());
                tokio::spawn(async move {
                let _ = sock.set_nodelay(true);
                // Read the request head and body (Content-Length) before answering.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                while let Ok(n) = sock.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
                if sock.write_all(head).await.is_ok() {
                    for e in events.iter() {
                        if sock.write_all(e).await.is_err() {
                            break;
                        }
                    }
                    let _ = sock.shutdown().await;
                }
                cpu.store(thread_cpu_us() as u64, Ordering::Relaxed);
                });
            }
        });
    });
    Ok((port, handle, cpu_out))
}
