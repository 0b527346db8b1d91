//! ctxbench against llama-cpp-python's OpenAI-compatible server (PyPI
//! `llama-cpp-python[server]`, the reference GGUF model), started by
//! `scripts/reference-server llama-cpp-python`: an endpoint that refuses token-id prompts, has
//! no `/tokenize` (only `/extras/tokenize`), no usage in streams, no cached-token count, no
//! timings and no `/metrics`, and reuses the previous prompt's prefix silently.
//! Run with `cargo test --features real-servers --test real_llama_cpp_python`.
//!
//! Issue 14: text prompts of known length on it — exact through `/extras/tokenize`, and,
//! behind an in-test gateway that hides every tokenizer path (a proxy or hosted API),
//! calibrated against its `usage.prompt_tokens` within the stated tolerance.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use common::real::{f, has_flag, read_lines, u, Family, RealServer};
use common::{argv, sweep};
use serde_json::{json, Value};

/// (prefix-match hit, prompt tokens to eval) per request, from the server's --verbose log:
/// `Llama.generate: H prefix-match hit, remaining R prompt tokens to eval`.
fn prefix_hits(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .filter_map(|l| {
            let rest = l.split("Llama.generate: ").nth(1)?;
            let mut w = rest.split_whitespace();
            let hit = w.next()?.parse().ok()?;
            let remaining = rest
                .split("remaining ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((hit, remaining))
        })
        .collect()
}

/// Prompt lengths the server logged: reused prefix + tokens left to evaluate, and the
/// `prompt eval time = X ms / N tokens` counts (the first request has no prefix line).
fn logged_prompt_lengths(log: &str) -> Vec<u64> {
    let mut v: Vec<u64> = prefix_hits(log).iter().map(|(h, r)| h + r).collect();
    v.extend(log.lines().filter_map(|l| {
        let rest = l.split("prompt eval time =").nth(1)?;
        rest.split('/')
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    }));
    v
}

#[test]
fn real_llama_cpp_python_sweep_measures_text_prompts_of_known_length() {
    let srv = RealServer::start(Family::LlamaCppPython, &[]);
    let run = sweep(
        &srv.url(),
        &argv("--contexts 1k,2k,4k --reps 2 --output-tokens 8"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let l = read_lines(&run.out);
    let tol = l.header["config"]["length_tolerance"].as_u64().unwrap_or(0);
    assert_eq!(l.samples.len(), 6);
    let logged = logged_prompt_lengths(&srv.log_text());
    for s in &l.samples {
        assert_eq!(s["status"], "ok", "{s}");
        let target = u(s, "context_tokens");
        let got = u(s, "prompt_tokens");
        assert!(
            got.abs_diff(target) <= tol.max(target / 100),
            "length {got} for target {target}, tolerance {tol}: {s}"
        );
        // The server's own count of this prompt is in its log.
        assert!(
            logged.contains(&got),
            "prompt of {got} tokens not in the server's log: {logged:?}"
        );
        assert!(f(s, "ttft_ms") > 0.0);
        assert_eq!(u(s, "output_tokens"), 8);
    }
    // The nonce keeps the server's silent prefix reuse away from measured requests: no
    // request reused more than the BOS and a few shared tokens.
    for (hit, remaining) in prefix_hits(&srv.log_text()) {
        if remaining >= 1000 {
            assert!(
                hit <= 8,
                "prefix reuse of {hit} tokens on a measured request"
            );
        }
    }
}

#[test]
fn real_llama_cpp_python_nonce_off_reuse_is_caught_by_the_ttft_rule() {
    // The server reuses the previous prompt's prefix with no sign in the response; without
    // the nonce, repetitions of the same prompt are served from it, and must be flagged.
    let srv = RealServer::start(Family::LlamaCppPython, &[]);
    let run = sweep(
        &srv.url(),
        &argv("--contexts 4k --reps 3 --output-tokens 8 --nonce off"),
    );
    assert!(run.out.exists(), "no results file: {}", run.stderr);
    let l = read_lines(&run.out);
    let reused: Vec<u64> = prefix_hits(&srv.log_text())
        .iter()
        .filter(|(h, _)| *h >= 4000)
        .map(|(h, _)| *h)
        .collect();
    assert!(
        reused.len() >= 2,
        "the server reused the prompt: {reused:?}"
    );
    assert_eq!(l.samples.len(), 3, "{}", run.stderr);
    // The server reports no cached-token count, so the reuse is caught by the TTFT rule
    // (issue 14): flagged suspected_cache_hit and excluded, never kept as cold.
    for s in &l.samples[1..] {
        let flags = s["flags"].as_array().expect("flags");
        assert!(
            flags.iter().any(|f| f == "suspected_cache_hit"),
            "a reused 4k prompt kept as cold: {s}\n{}",
            run.stderr
        );
    }
    assert!(
        run.stderr.contains("suspected cache hits"),
        "no warning: {}",
        run.stderr
    );
}

/// The tokenizer paths a gateway that hides the tokenizer answers 404 to.
const HIDDEN: &[&str] = &[
    "/tokenize",
    "/detokenize",
    "/v1/tokenize",
    "/v1/detokenize",
    "/extras/tokenize",
    "/extras/detokenize",
];

/// A gateway in front of the real server that hides its tokenizer (the user's case: a
/// proxy or hosted API with no tokenizer endpoint): every request is forwarded and its
/// answer streamed back as it arrives, except the tokenizer paths, which answer 404. It
/// records (path, JSON body) of every POST it forwards, in order.
struct Gateway {
    port: u16,
    posts: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Gateway {
    fn start(upstream: u16) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts = Arc::new(Mutex::new(Vec::new()));
        let p2 = posts.clone();
        thread::spawn(move || {
            for c in listener.incoming().flatten() {
                let p = p2.clone();
                thread::spawn(move || {
                    let _ = relay(c, upstream, &p);
                });
            }
        });
        Gateway { port, posts }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn posts(&self) -> Vec<(String, Value)> {
        self.posts.lock().unwrap().clone()
    }
}

/// One request per connection (the answer says `connection: close`).
fn relay(
    mut client: TcpStream,
    upstream: u16,
    posts: &Mutex<Vec<(String, Value)>>,
) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut r = BufReader::new(client.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if !lower.starts_with("connection:") {
            headers.push(h);
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    if HIDDEN.contains(&path.split('?').next().unwrap_or("")) {
        let b = r#"{"detail":"Not Found"}"#;
        return write!(
            client,
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        );
    }
    if line.starts_with("POST") {
        let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
        posts.lock().unwrap().push((path, v));
    }
    let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
    up.set_nodelay(true)?;
    up.write_all(line.as_bytes())?;
    for h in &headers {
        up.write_all(h.as_bytes())?;
    }
    up.write_all(b"connection: close\r\n\r\n")?;
    up.write_all(&body)?;
    let mut ur = BufReader::new(up);
    let mut status = String::new();
    ur.read_line(&mut status)?;
    client.write_all(status.as_bytes())?;
    loop {
        let mut h = String::new();
        ur.read_line(&mut h)?;
        if h == "\r\n" || h.is_empty() {
            client.write_all(b"connection: close\r\n\r\n")?;
            break;
        }
        if !h.to_ascii_lowercase().starts_with("connection:") {
            client.write_all(h.as_bytes())?;
        }
    }
    // The body as it arrives: TTFT through the gateway stays the server's.
    let mut buf = [0u8; 8192];
    loop {
        let n = ur.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        client.write_all(&buf[..n])?;
        client.flush()?;
    }
}

#[test]
fn real_llama_cpp_python_behind_a_gateway_that_hides_the_tokenizer_gets_calibrated_prompts_within_tolerance(
) {
    let srv = RealServer::start(Family::LlamaCppPython, &[]);
    let gw = Gateway::start(srv.port);

    // First, a usage error: the server reports no maximum context, so --contexts is
    // needed, and the run exits 2 before any request beyond the probe (no calibration,
    // no corpus tokenization).
    let bad = sweep(&gw.url(), &["--reps", "1"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--contexts"), "{}", bad.stderr);
    let probe_posts = gw.posts();
    for (path, b) in &probe_posts {
        // The probe's one-token test of a token-id prompt is the only generation.
        assert!(
            path == "/v1/completions" && b["prompt"].is_array() && b["max_tokens"] == 1,
            "a request beyond the probe before the usage error: {path} {b}"
        );
    }
    let skip = probe_posts.len();

    let run = sweep(
        &gw.url(),
        &argv("--contexts 1k,2k,4k --reps 2 --output-tokens 8"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let l = read_lines(&run.out);
    let method = l.header["server"]["prompt_method"].as_str().unwrap_or("");
    assert!(
        method.starts_with("text calibrated against the server's usage.prompt_tokens")
            && method.contains("tolerance 1%"),
        "{method}"
    );
    assert!(
        l.header["server"]["tokenizer"].is_null(),
        "the gateway hides every tokenizer: {}",
        l.header["server"]
    );
    let pct = l.header["config"]["length_tolerance_pct"].as_f64().unwrap();
    assert_eq!(pct, 0.01, "the stated tolerance is recorded");
    assert!(run.stderr.contains("calibrated"), "{}", run.stderr);

    // Every generation request through the gateway, in order: the streamed ones are the
    // warmup and the measured samples; a non-streamed one with the same prompt as the
    // streamed one before it is that request's count (the stream carries no usage); any
    // other is a calibration request of the streamed request that follows it.
    let posts = gw.posts();
    let gens: Vec<&Value> = posts[skip..]
        .iter()
        .filter(|(p, _)| p == "/v1/completions")
        .map(|(_, b)| b)
        .collect();
    let mut calib_before: Vec<usize> = Vec::new();
    let mut pending = 0;
    let mut last_streamed: Option<&Value> = None;
    let mut negotiation = 0;
    for b in &gens {
        if b["prompt"] == json!("Hello") && b["max_tokens"] == 2 {
            // The negotiation's test requests (streamed and not), before anything measured.
            negotiation += 1;
            continue;
        }
        if b["prompt"].is_array() {
            // The probe's one-token test of a token-id prompt (refused by this server).
            assert!(b["stream"].is_null() && b["max_tokens"] == 1, "{b}");
            continue;
        }
        assert!(b["prompt"].is_string(), "text prompts only: {b}");
        if b["stream"] == json!(true) {
            calib_before.push(pending);
            pending = 0;
            last_streamed = Some(b);
        } else {
            assert_eq!(b["max_tokens"], 1, "{b}");
            if last_streamed.is_some_and(|s| s["prompt"] == b["prompt"]) {
                continue;
            }
            pending += 1;
            // Never a measured prompt's prefix: the nonce is reversed. The warmup is left
            // out: the count of its nonce alone (which learns the template's prefix for
            // calibrated prompts) starts like it by design, and no sample carries that nonce.
            let head = |v: &Value| {
                v["prompt"]
                    .as_str()
                    .unwrap()
                    .split_whitespace()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            // The streamed requests after the negotiation's "Hello": the warmup, then the samples.
            let measured = || {
                gens.iter()
                    .filter(|g| g["stream"] == json!(true) && g["prompt"] != json!("Hello"))
                    .skip(1)
            };
            assert!(
                measured().all(|g| head(g) != head(b)),
                "a calibration prompt starts like a measured one: {} ({} chars)",
                head(b),
                b["prompt"].as_str().map_or(0, str::len)
            );
        }
    }
    assert_eq!(
        negotiation, 2,
        "one streamed and one non-streamed test request"
    );
    assert_eq!(calib_before.len(), 1 + 6, "warmup + 6 samples");
    assert_eq!(l.samples.len(), 6);
    let logged = logged_prompt_lengths(&srv.log_text());
    eprintln!("target  prompt_tokens  error  tolerance  calibration_requests  ttft_ms");
    for (s, calib) in l.samples.iter().zip(&calib_before[1..]) {
        assert_eq!(s["status"], "ok", "{s}");
        let target = u(s, "context_tokens");
        let got = u(s, "prompt_tokens");
        let tol = (pct * target as f64).ceil() as u64;
        eprintln!(
            "{target:>6}  {got:>13}  {:>5}  {tol:>9}  {calib:>20}  {:>7.1}",
            got as i64 - target as i64,
            f(s, "ttft_ms")
        );
        assert!(
            got.abs_diff(target) <= tol,
            "length {got} for target {target}, tolerance {tol}: {s}"
        );
        assert_eq!(s["length_ok"], true, "{s}");
        // The count is the server's own: its log has a prompt of that length.
        assert!(
            logged.contains(&got),
            "prompt of {got} tokens not in the server's log: {logged:?}"
        );
        // No usage in the stream: the count's source is said on the sample.
        assert!(has_flag(s, "prompt_tokens_from_repeat"), "{s}");
        assert!(
            *calib <= 5,
            "{calib} calibration requests before a {target} sample"
        );
        assert_eq!(u(s, "output_tokens"), 8);
    }
    // The first sample of each length was calibrated, the second reused it.
    for pair in calib_before[1..].chunks(2) {
        assert!(pair[0] >= 1 && pair[1] == 0, "{calib_before:?}");
    }
    // Calibration requests never warm a measured prompt: no long prompt reused more than
    // the BOS and a few shared tokens (only the count repeats reuse theirs).
    let hits = prefix_hits(&srv.log_text());
    let measured_lengths: Vec<u64> = l.samples.iter().map(|s| u(s, "prompt_tokens")).collect();
    let long_cold: Vec<&(u64, u64)> = hits
        .iter()
        .filter(|(h, r)| *r >= 1000 && measured_lengths.contains(&(h + r)))
        .collect();
    assert!(!long_cold.is_empty(), "{hits:?}");
    for (hit, _) in long_cold {
        assert!(*hit <= 8, "prefix reuse of {hit} tokens: {hits:?}");
    }
}

#[test]
fn real_llama_cpp_python_chat_behind_a_gateway_that_hides_the_tokenizer_counts_the_template_in_calibrated_lengths(
) {
    let srv = RealServer::start(Family::LlamaCppPython, &[]);
    let gw = Gateway::start(srv.port);
    let run = sweep(
        &gw.url(),
        &argv("--contexts 1k,2k --reps 2 --output-tokens 8 --endpoint chat"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let l = read_lines(&run.out);
    assert_eq!(l.header["server"]["endpoint"], "/v1/chat/completions");
    let method = l.header["server"]["prompt_method"].as_str().unwrap_or("");
    assert!(
        method.starts_with("text calibrated against the server's usage.prompt_tokens")
            && method.contains("chat template's tokens are counted"),
        "{method}"
    );
    let pct = l.header["config"]["length_tolerance_pct"].as_f64().unwrap();
    assert_eq!(pct, 0.01);
    let logged = logged_prompt_lengths(&srv.log_text());
    assert_eq!(l.samples.len(), 4);
    for s in &l.samples {
        assert_eq!(s["status"], "ok", "{s}");
        let target = u(s, "context_tokens");
        let got = u(s, "prompt_tokens");
        let tol = (pct * target as f64).ceil() as u64;
        eprintln!(
            "chat: target {target}, server count {got}, error {}",
            got as i64 - target as i64
        );
        assert!(got.abs_diff(target) <= tol, "{got} for {target}: {s}");
        assert!(logged.contains(&got), "{got} not in the log: {logged:?}");
        assert!(has_flag(s, "prompt_tokens_from_repeat"), "{s}");
    }
    // The template's tokens are part of each length: the same user message sent as a raw
    // completion prompt counts fewer tokens.
    let posts = gw.posts();
    let first = posts
        .iter()
        .filter(|(p, b)| p == "/v1/chat/completions" && b["stream"] == json!(true))
        .nth(1)
        .expect("a measured chat request");
    let msgs = first.1["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "one user message");
    assert_eq!(msgs[0]["role"], "user");
    let content = msgs[0]["content"].as_str().unwrap();
    let (code, body) = common::real::http_post_json(
        srv.port,
        "/v1/completions",
        &json!({"prompt": content, "max_tokens": 1}),
    )
    .expect("the server answers");
    assert_eq!(code, 200, "{body}");
    let raw: Value = serde_json::from_str(&body).unwrap();
    let raw_n = raw["usage"]["prompt_tokens"].as_u64().unwrap();
    let chat_n = u(&l.samples[0], "prompt_tokens");
    eprintln!("chat template: {chat_n} (chat) vs {raw_n} (same text, raw completion)");
    assert!(
        raw_n < chat_n && chat_n.abs_diff(u(&l.samples[0], "context_tokens")) <= 11,
        "template tokens not counted: raw {raw_n}, chat {chat_n}"
    );
}

#[test]
fn real_llama_cpp_python_ends_a_running_stream_when_another_arrives_and_the_error_names_the_flag() {
    // llama-cpp-python serves one request at a time, and by default (`interrupt_requests`
    // True, llama_cpp/server/settings.py) ends the running stream when another arrives:
    // in a wave of 2, one request is cut short. The failure names the cause and the flag.
    let grid = argv("--contexts 1k --concurrency 2 --reps 2 --wave-output-tokens 32");
    let srv = RealServer::start(Family::LlamaCppPython, &[]);
    let run = sweep(&srv.url(), &grid);
    let l = read_lines(&run.out);
    let failed: Vec<&Value> = l.samples.iter().filter(|s| s["status"] != "ok").collect();
    assert!(
        !failed.is_empty(),
        "no request was cut short: {:?}",
        l.samples
    );
    for s in &failed {
        let msg = s["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("--interrupt_requests false"), "{s}");
    }
    drop(srv);

    // With the flag, the second request of each wave waits for the first: kept, and
    // flagged as having waited, not reported as a concurrent rate.
    let srv = RealServer::start(Family::LlamaCppPython, &["--interrupt_requests", "false"]);
    let run = sweep(&srv.url(), &grid);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let l = read_lines(&run.out);
    assert_eq!(l.samples.len(), 2 * 2, "{:?}", l.samples);
    assert!(l.samples.iter().all(|s| s["status"] == "ok"));
    for wave in 0..2 {
        let queued = l
            .samples
            .iter()
            .filter(|s| s["concurrency"] == 2 && s["wave"] == wave && has_flag(s, "queued"))
            .count();
        assert_eq!(queued, 1, "wave {wave}: {:?}", l.samples);
    }
}
