//! First contact with OpenAI-compatible servers that differ in an optional detail (issue
//! 19). Scripted, each on the one quirk it shows, because the reference llama-server accepts
//! every field and keeps its connections sound; the same quirks on real servers (Hugging
//! Face `transformers serve`, the LiteLLM proxy) are in the real-server suite. The server
//! counts BOS plus one token per word of a text prompt, BOS plus the ids of a token-id one,
//! and streams one token per event.

use crate::common;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{argv, sweep};
use ctxbench_schema::record::{Flag, Status};
use serde_json::{json, Value};

/// What a token-id prompt gets.
#[derive(Clone, Copy, Default, PartialEq)]
enum Ids {
    /// HTTP 400 `prompt must be a string.` (transformers serve).
    #[default]
    Refused,
    /// Counted as ids, BOS added (a gateway in front of llama-server).
    PassedThrough,
    /// HTTP 500 on a kept-alive connection that the server then breaks: the next request
    /// sent on it is read and never answered (a server bug of its own).
    Error500ThenBroken,
}

/// The quirks of one scripted server.
#[derive(Clone, Default)]
struct Quirks {
    /// Optional fields answered with 422 `Unexpected fields in the request: {'…'}`.
    refuse_fields: &'static [&'static str],
    ids: Ids,
    /// Streams end after the finish/usage chunk, without `data: [DONE]`.
    no_done: bool,
    /// `usage.prompt_tokens_details.cached_tokens` on every answer.
    cached: Option<u64>,
    /// The only key accepted; another gets HTTP 400 `No connected db.` of type `auth_error`
    /// (the LiteLLM proxy's answer to a wrong key).
    key: Option<&'static str>,
    /// `context_length` in `/v1/models`.
    context_length: Option<u64>,
    /// Generation ends with EOS after this many tokens (honoured only without ignore_eos).
    eos_after: Option<u64>,
}

#[derive(Default)]
struct Log {
    /// Bodies of every generation request, in order.
    bodies: Vec<Value>,
    /// Requests that arrived on a connection the server had broken.
    on_broken: usize,
}

struct Server {
    port: u16,
    log: Arc<Mutex<Log>>,
    connections: Arc<AtomicUsize>,
}

impl Server {
    fn start(q: Quirks) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Log::default()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (l, c) = (log.clone(), connections.clone());
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                c.fetch_add(1, Ordering::SeqCst);
                let (q, l) = (q.clone(), l.clone());
                thread::spawn(move || {
                    let _ = serve(conn, &q, &l);
                });
            }
        });
        Server {
            port,
            log,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

fn count(prompt: &Value) -> Option<u64> {
    match prompt {
        Value::String(s) => Some(1 + s.split_whitespace().count() as u64),
        Value::Array(a) => Some(1 + a.len() as u64),
        _ => None,
    }
}

fn json_reply(
    conn: &mut TcpStream,
    status: u16,
    v: &Value,
    keep_alive: bool,
) -> std::io::Result<()> {
    let b = v.to_string();
    write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: {}\r\n\r\n{b}",
        b.len(),
        if keep_alive { "keep-alive" } else { "close" }
    )?;
    conn.flush()
}

/// Serves requests on one kept-alive connection until the client closes it.
fn serve(mut conn: TcpStream, q: &Quirks, log: &Mutex<Log>) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut broken = false;
    loop {
        let (req, auth) = read_request(&mut reader)?;
        if broken {
            // Read, never answered: the client sees its connection end mid-request.
            log.lock().unwrap().on_broken += 1;
            return Ok(());
        }
        if let Some(k) = q.key {
            if auth.as_deref() != Some(&format!("Bearer {k}")) {
                let e = json!({"error": {"message": "No connected db.", "type": "auth_error", "param": "None", "code": "400"}});
                json_reply(&mut conn, 400, &e, true)?;
                continue;
            }
        }
        match req.path.as_str() {
            "/v1/models" => {
                let mut m = json!({"id": "strict", "object": "model", "owned_by": "local"});
                if let Some(n) = q.context_length {
                    m["context_length"] = json!(n);
                }
                json_reply(
                    &mut conn,
                    200,
                    &json!({"object": "list", "data": [m]}),
                    true,
                )?;
            }
            "/v1/completions" => {
                let body = req.body;
                log.lock().unwrap().bodies.push(body.clone());
                if let Some(f) = q.refuse_fields.iter().find(|f| body.get(**f).is_some()) {
                    let e =
                        json!({"detail": format!("Unexpected fields in the request: {{'{f}'}}")});
                    json_reply(&mut conn, 422, &e, true)?;
                    continue;
                }
                if body["prompt"].is_array() {
                    match q.ids {
                        Ids::Refused => {
                            json_reply(
                                &mut conn,
                                400,
                                &json!({"detail": "prompt must be a string."}),
                                true,
                            )?;
                            continue;
                        }
                        Ids::Error500ThenBroken => {
                            json_reply(
                                &mut conn,
                                500,
                                &json!({"detail": "Internal Server Error"}),
                                true,
                            )?;
                            broken = true;
                            continue;
                        }
                        Ids::PassedThrough => {}
                    }
                }
                let Some(prompt) = count(&body["prompt"]) else {
                    json_reply(&mut conn, 400, &json!({"detail": "no prompt"}), true)?;
                    continue;
                };
                let asked = body["max_tokens"].as_u64().unwrap_or(16);
                let n = match (q.eos_after, body.get("ignore_eos")) {
                    (Some(k), None) => asked.min(k),
                    _ => asked,
                };
                let finish = if n < asked { "stop" } else { "length" };
                let mut usage = json!({"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n});
                if let Some(c) = q.cached {
                    usage["prompt_tokens_details"] = json!({"cached_tokens": c});
                }
                // Prefill: 10 µs per token, so TTFT grows with the prompt.
                thread::sleep(Duration::from_micros(10 * prompt));
                if body["stream"] != json!(true) {
                    let v = json!({"choices": [{"index": 0, "text": "w", "finish_reason": finish}], "usage": usage});
                    json_reply(&mut conn, 200, &v, true)?;
                    continue;
                }
                write!(conn, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")?;
                for i in 0..n {
                    let mut c = json!({"object": "text_completion", "choices": [{"index": 0, "text": " w", "finish_reason": Value::Null}]});
                    if i + 1 == n {
                        // transformers serve: the last token's chunk carries the finish
                        // reason and the usage.
                        c["choices"][0]["finish_reason"] = json!(finish);
                        c["usage"] = usage.clone();
                    }
                    conn.write_all(format!("data: {c}\n\n").as_bytes())?;
                    conn.flush()?;
                    thread::sleep(Duration::from_millis(2));
                }
                if !q.no_done {
                    conn.write_all(b"data: [DONE]\n\n")?;
                }
                conn.flush()?;
                return Ok(());
            }
            _ => json_reply(&mut conn, 404, &json!({"detail": "Not Found"}), true)?,
        }
    }
}

/// One request and its Authorization header.
fn read_request(
    reader: &mut impl std::io::BufRead,
) -> std::io::Result<(common::Request, Option<String>)> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let mut len = 0usize;
    let mut auth = None;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            auth = Some(h["authorization:".len()..].trim().to_owned());
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let mut words = line.split_whitespace();
    Ok((
        common::Request {
            method: words.next().unwrap_or("").to_owned(),
            path: words.next().unwrap_or("").to_owned(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        },
        auth,
    ))
}

/// A 1k–2k sweep, two repetitions, eight output tokens.
const ARGS: &str = "--contexts 1k,2k --reps 2 --output-tokens 8";

#[test]
fn scripted_server_refusing_ignore_eos_is_measured_without_it_and_the_header_says_so() {
    let srv = Server::start(Quirks {
        refuse_fields: &["ignore_eos"],
        no_done: true,
        ..Default::default()
    });
    let r = sweep(&srv.url(), &argv(ARGS)).ok();
    let res = r.results();
    assert_eq!(res.samples.len(), 4);
    for s in &res.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert!(s.usable(), "{s:?}");
        assert_eq!(s.output_tokens, Some(8));
    }
    assert_eq!(
        res.header.server.dropped_fields,
        vec!["ignore_eos".to_owned()]
    );
    assert!(
        res.header
            .server
            .notes
            .iter()
            .any(|n| n.contains("ignore_eos")
                && n.contains("HTTP 422")
                && n.contains("Unexpected fields in the request")
                && n.contains("short_output")),
        "{:?}",
        res.header.server.notes
    );
    // Only the negotiation's requests carried the field: nothing measured did.
    let log = srv.log.lock().unwrap();
    let carrying = log
        .bodies
        .iter()
        .filter(|b| b.get("ignore_eos").is_some())
        .count();
    assert!(carrying >= 1, "the field was offered first");
    let after_refusal = log
        .bodies
        .iter()
        .skip_while(|b| b.get("ignore_eos").is_none())
        .skip(1)
        .filter(|b| b.get("ignore_eos").is_some())
        .count();
    assert_eq!(after_refusal, 0, "offered again after it was refused");
}

#[test]
fn scripted_server_without_eos_control_flags_early_outputs_and_leaves_their_decode_out() {
    let srv = Server::start(Quirks {
        refuse_fields: &["ignore_eos"],
        eos_after: Some(3),
        ..Default::default()
    });
    let r = sweep(&srv.url(), &argv(ARGS));
    let res = r.results();
    assert!(res.samples.iter().all(|s| s.status == Status::Ok));
    for s in &res.samples {
        assert_eq!(s.output_tokens, Some(3));
        assert!(s.has(&Flag::ShortOutput), "{s:?}");
    }
    let points = ctxbench_stats::stats::summarize(&res.samples);
    assert_eq!(points.len(), 2);
    for p in &points {
        assert!(p.ttft_ms.is_some(), "TTFT still counts");
        assert!(
            p.decode_tokens_per_s.is_none(),
            "a decode of 3 of 8 tokens is not counted"
        );
    }
}

#[test]
fn scripted_server_that_breaks_its_connection_after_a_500_is_measured_on_fresh_connections() {
    let srv = Server::start(Quirks {
        ids: Ids::Error500ThenBroken,
        ..Default::default()
    });
    let r = sweep(&srv.url(), &argv(ARGS)).ok();
    assert!(
        r.stderr
            .contains("token-id prompts no (a token-id prompt was refused"),
        "{}",
        r.stderr
    );
    let res = r.results();
    assert_eq!(res.samples.len(), 4);
    assert!(res.samples.iter().all(|s| s.usable()), "{:?}", res.samples);
    assert_eq!(
        srv.log.lock().unwrap().on_broken,
        0,
        "a connection that carried a 500 was used again"
    );
    assert!(srv.connections.load(Ordering::SeqCst) >= 2);
}

#[test]
fn scripted_gateway_reporting_bos_as_cached_is_cold_and_passes_token_ids_through() {
    // LiteLLM in front of llama-server: cached_tokens 2 (BOS and one more shared token)
    // on every cold prompt; token ids pass through to the upstream.
    let srv = Server::start(Quirks {
        ids: Ids::PassedThrough,
        cached: Some(2),
        context_length: Some(8192),
        ..Default::default()
    });
    let r = sweep(&srv.url(), &argv(ARGS)).ok();
    assert!(
        r.stderr
            .contains("max context: 8192 tokens (/v1/models context_length)"),
        "{}",
        r.stderr
    );
    let res = r.results();
    let test = res.header.server.token_id_test.clone().unwrap_or_default();
    assert!(test.contains("taken as ids"), "{test}");
    assert_eq!(res.samples.len(), 4);
    for s in &res.samples {
        assert!(s.usable() && !s.contaminated, "{s:?}");
        assert!(s.cache_verified);
        assert_eq!(s.cached_tokens, Some(2));
        assert!(s.nonce_end.is_some_and(|e| e >= 2), "{s:?}");
        assert!(s.has(&Flag::CachedBeforeNonceEnd), "{s:?}");
    }
}

#[test]
fn scripted_gateway_with_a_tokenizer_url_gets_token_id_prompts_of_exact_length() {
    // The gateway hides every tokenizer path; the real llama-server stands for the server
    // behind it, whose tokenizer makes the ids the gateway passes through.
    let _g = common::serial();
    let upstream = common::RefServer::start(8192, &[]);
    let srv = Server::start(Quirks {
        ids: Ids::PassedThrough,
        ..Default::default()
    });
    let r = sweep(
        &srv.url(),
        &[&argv(ARGS)[..], &["--tokenizer-url", &upstream.url()]].concat(),
    )
    .ok();
    let res = r.results();
    assert!(res.header.server.token_id_prompts);
    assert!(
        res.header.server.prompt_method.starts_with("token ids")
            && res.header.server.prompt_method.contains("--tokenizer-url"),
        "{}",
        res.header.server.prompt_method
    );
    let t = res
        .header
        .server
        .tokenizer
        .clone()
        .expect("the tokenizer used");
    assert_eq!(t.url.as_deref(), Some(upstream.url().as_str()));
    for s in &res.samples {
        assert_eq!(s.prompt_tokens, Some(s.context_tokens), "exact: {s:?}");
        assert!(s.usable());
    }
    // Every measured prompt went as ids; the gateway saw no text prompt but the
    // negotiation's test request.
    let log = srv.log.lock().unwrap();
    let text = log
        .bodies
        .iter()
        .filter(|b| b["prompt"].is_string())
        .count();
    assert!(text <= 2, "{text} text prompts");
    // A server with no tokenizer there is named.
    let bad = sweep(
        &srv.url(),
        &[&argv(ARGS)[..], &["--tokenizer-url", &srv.url()]].concat(),
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--tokenizer-url") && bad.stderr.contains("no tokenizer endpoint pair"),
        "{}",
        bad.stderr
    );
}

#[test]
fn scripted_gateway_reusing_past_the_nonce_is_contaminated() {
    // A cached count beyond BOS and the nonce is reuse of the prompt itself.
    let srv = Server::start(Quirks {
        cached: Some(600),
        ..Default::default()
    });
    let r = sweep(
        &srv.url(),
        &argv("--contexts 1k --reps 2 --output-tokens 8"),
    );
    let res = r.results();
    assert_eq!(res.samples.len(), 2);
    assert!(res.samples.iter().all(|s| s.contaminated && !s.usable()));
    assert_ne!(r.code, 0, "no usable sample is not a success");
}

#[test]
fn scripted_gateway_refusing_a_wrong_key_with_400_shows_its_words_and_exits_2() {
    let srv = Server::start(Quirks {
        key: Some("right"),
        ..Default::default()
    });
    let out = common::ctxbench()
        .args([
            "sweep",
            "--url",
            &srv.url(),
            "--contexts",
            "1k",
            "--dry-run",
        ])
        .env("CTXBENCH_API_KEY", "sk-wrong-7f3a")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HTTP 400: No connected db."), "{stderr}");
    assert!(stderr.contains("CTXBENCH_API_KEY"), "{stderr}");
    assert!(
        !stderr.contains("sk-wrong-7f3a"),
        "the key is never shown: {stderr}"
    );
    // The right key measures.
    let ok = common::ctxbench()
        .args([
            "sweep",
            "--url",
            &srv.url(),
            "--contexts",
            "1k",
            "--dry-run",
        ])
        .env("CTXBENCH_API_KEY", "right")
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
