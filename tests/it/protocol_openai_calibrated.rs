//! An OpenAI-compatible server with no tokenizer endpoint that refuses token-id prompts (a
//! gateway in front of llama-cpp-python, say) gets prompts whose length is calibrated
//! against its `usage.prompt_tokens`: non-streamed requests with `max_tokens: 1` before the
//! measured one. Scripted, because the order of a wave's requests as the server sees them
//! (calibration against measurement) is what is checked, and the real llama-cpp-python
//! server here cannot be run by the default test suite. The server counts one token per
//! short word and two per long one, BOS first; it answers after a prefill time proportional
//! to the prompt plus a jitter drawn from the prompt's text, so concurrent calibrations of
//! different requests do not finish together. It logs, for every text-prompt request, when
//! it arrived and when its answer ended.

use crate::common;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::sweep;
use ctxbench_schema::record::Status;
use serde_json::{json, Value};

/// One text-prompt request to `/v1/completions`, as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    streamed: bool,
    max_tokens: u64,
    /// The server's count of the prompt.
    tokens: u64,
    arrived: Instant,
    /// When its answer was complete (`None`: still running).
    ended: Option<Instant>,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
}

/// BOS, then one token per word of up to 4 characters and two per longer word.
fn count(text: &str) -> u64 {
    1 + text
        .split_whitespace()
        .map(|w| if w.chars().count() <= 4 { 1 } else { 2 })
        .sum::<u64>()
}

/// 0–24 ms, fixed by the text (a FNV hash), so two different prompts rarely take as long.
fn jitter(text: &str) -> Duration {
    let h = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    Duration::from_millis(h % 25)
}

fn serve(mut conn: TcpStream, st: &Mutex<State>) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let common::Request {
        method: _,
        path,
        body,
    } = common::read_json_request(&mut reader)?;
    let reply = |conn: &mut TcpStream, status: u16, v: Value| {
        let b = v.to_string();
        write!(
            conn,
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        )
    };
    match path.as_str() {
        "/v1/models" => reply(
            &mut conn,
            200,
            json!({"object": "list", "data": [{"id": "m.gguf", "object": "model", "owned_by": "me"}]}),
        ),
        "/v1/completions" => {
            let Some(text) = body["prompt"].as_str() else {
                // llama-cpp-python's answer to a token-id prompt.
                return reply(
                    &mut conn,
                    500,
                    json!({"error": {"message": "Input should be a valid string", "type": "internal_server_error"}}),
                );
            };
            let tokens = count(text);
            let n = body["max_tokens"].as_u64().unwrap_or(16);
            let streamed = body["stream"] == json!(true);
            let me = {
                let mut s = st.lock().unwrap();
                s.seen.push(Seen {
                    streamed,
                    max_tokens: n,
                    tokens,
                    arrived: Instant::now(),
                    ended: None,
                });
                s.seen.len() - 1
            };
            let end = |st: &Mutex<State>| st.lock().unwrap().seen[me].ended = Some(Instant::now());
            // Prefill: 20 µs per token, plus the jitter.
            thread::sleep(Duration::from_micros(20 * tokens) + jitter(text));
            // `ended` is logged before the answer's last bytes leave, so a request the
            // client sends after reading them is logged as arriving later, however the
            // threads are scheduled.
            if !streamed {
                end(st);
                return reply(
                    &mut conn,
                    200,
                    json!({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                           "usage": {"prompt_tokens": tokens, "completion_tokens": n, "total_tokens": tokens + n}}),
                );
            }
            write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )?;
            for i in 0..n {
                let fr = if i + 1 == n {
                    json!("length")
                } else {
                    Value::Null
                };
                let c = json!({"object": "text_completion", "choices": [{"index": 0, "text": " w", "finish_reason": fr}]});
                conn.write_all(format!("data: {c}\r\n\r\n").as_bytes())?;
                conn.flush()?;
                thread::sleep(Duration::from_millis(3));
            }
            let u = json!({"object": "text_completion", "choices": [], "usage": {"prompt_tokens": tokens, "completion_tokens": n, "total_tokens": tokens + n}});
            end(st);
            conn.write_all(format!("data: {u}\r\n\r\ndata: [DONE]\r\n\r\n").as_bytes())?;
            conn.flush()
        }
        _ => reply(&mut conn, 404, json!({"detail": "Not Found"})),
    }
}

fn start() -> (String, Arc<Mutex<State>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let st = Arc::new(Mutex::new(State::default()));
    let st2 = st.clone();
    thread::spawn(move || {
        for c in listener.incoming().flatten() {
            let st = st2.clone();
            thread::spawn(move || {
                let _ = serve(c, &st);
            });
        }
    });
    (format!("http://127.0.0.1:{port}"), st)
}

/// Whether `a` and `b` were being answered at the same moment.
fn overlap(a: &Seen, b: &Seen) -> bool {
    let (ae, be) = (a.ended.unwrap(), b.ended.unwrap());
    a.arrived < be && b.arrived < ae
}

#[test]
fn protocol_openai_calibrated_waves_calibrate_every_request_before_the_first_is_sent() {
    let (url, st) = start();
    let contexts = [512u64, 1024];
    let run = sweep(
        &url,
        &[
            "--backend",
            "openai",
            "--contexts",
            "512,1024",
            "--concurrency",
            "2",
            "--reps",
            "2",
            "--output-tokens",
            "8",
        ],
    )
    .ok();
    let r = run.results();
    assert!(
        r.header
            .server
            .prompt_method
            .starts_with("text calibrated against the server's usage.prompt_tokens"),
        "{}",
        r.header.server.prompt_method
    );
    assert_eq!(r.samples.len(), 8, "{}", run.stderr);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert_eq!(s.concurrency, Some(2));
        assert_eq!(s.length_ok, Some(true), "{s:?}");
    }
    // The client's view: how far apart a wave's requests were written after its t0.
    let mut spreads = Vec::new();
    for &ctx in &contexts {
        for w in 0..2 {
            let sent: Vec<f64> = r
                .samples
                .iter()
                .filter(|s| s.context_tokens == ctx && s.wave == Some(w))
                .map(|s| s.wave_stats.as_ref().unwrap().sent_ms)
                .collect();
            assert_eq!(sent.len(), 2);
            let spread = sent.iter().cloned().fold(f64::MIN, f64::max)
                - sent.iter().cloned().fold(f64::MAX, f64::min);
            spreads.push((ctx, w, spread));
        }
    }
    eprintln!("context wave sent_ms spread (client, ms)");
    for (ctx, w, sp) in &spreads {
        eprintln!("{ctx:>7} {w:>4} {sp:>8.2}");
    }

    let st = st.lock().unwrap();
    // The negotiation's two test requests of two tokens ("Hello": BOS and a long word),
    // streamed and not, come before everything else.
    let negotiation = st
        .seen
        .iter()
        .take_while(|s| s.max_tokens == 2 && s.tokens == 3)
        .count();
    assert_eq!(negotiation, 2, "{:?}", st.seen);
    let seen = &st.seen[negotiation..];
    let calib: Vec<&Seen> = seen
        .iter()
        .filter(|s| !s.streamed && s.max_tokens == 1)
        .collect();
    let streamed: Vec<&Seen> = seen.iter().filter(|s| s.streamed).collect();
    // Warmup + 2 contexts × 2 waves × 2 requests; only calibrations besides.
    assert_eq!(streamed.len(), 1 + 8);
    assert_eq!(calib.len() + streamed.len(), seen.len(), "{seen:?}");
    // The server's view: a wave's measured requests arrived in a row, after every
    // calibration of that wave had been answered (none ran beside a measured request).
    for c in &calib {
        for s in &streamed {
            assert!(
                !overlap(c, s),
                "a calibration request ({} tokens) ran while a measured request ({} tokens) was being answered",
                c.tokens,
                s.tokens
            );
        }
    }
    for (i, pair) in streamed[1..].chunks(2).enumerate() {
        let (a, b) = (pair[0], pair[1]);
        let first = a.arrived.min(b.arrived);
        let last = a.arrived.max(b.arrived);
        assert!(
            !calib.iter().any(|c| c.arrived > first && c.arrived < last),
            "wave {i}: a calibration request arrived between its measured requests"
        );
        let server_spread = last.duration_since(first).as_secs_f64() * 1000.0;
        eprintln!("wave {i}: measured requests arrived {server_spread:.2} ms apart (server)");
    }
    // Each new length was calibrated (so the order checks above had something to check),
    // the first wave of each length before its measured requests.
    for (k, &ctx) in contexts.iter().enumerate() {
        let wave0 = streamed[1 + 4 * k].arrived;
        let before = calib
            .iter()
            .filter(|c| c.arrived < wave0 && c.tokens.abs_diff(ctx) <= ctx / 4)
            .count();
        assert!(
            before >= 1,
            "no calibration for {ctx} before its first wave"
        );
    }
}
