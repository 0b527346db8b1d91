//! A scripted llama.cpp-shaped server for fault injection: the probe endpoints answer like
//! llama-server (its /props, /v1/models and /tokenize; /slots where the site says so), and
//! each `/completion` call is answered by a test-supplied script, so every kind of bad
//! response can be produced on demand.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How to answer one request.
pub enum Reply {
    /// A complete response with a status and a body (JSON or not).
    Body {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// A close-delimited SSE body written piece by piece, with a pause before each piece.
    Stream(Vec<(Duration, String)>),
    /// A chunked SSE body that is cut off without its final chunk (connection reset).
    CutStream(Vec<String>),
}

type Script = dyn Fn(usize, &Value) -> Reply + Send + Sync;

/// A running scripted server; `requests` holds every request line and body received.
pub struct Scripted {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<(String, String)>>>,
    pub calls: Arc<AtomicUsize>,
    /// Each generation call's arrival and the moment its slot was released (the answer
    /// done, or the client gone): what `/slots` reports as processing.
    pub spans: Spans,
}

/// Each generation call's arrival and the moment its slot was released (`None`: busy).
pub type Spans = Arc<Mutex<Vec<(Instant, Option<Instant>)>>>;

/// What every connection's thread records.
#[derive(Clone)]
struct Logs {
    requests: Arc<Mutex<Vec<(String, String)>>>,
    calls: Arc<AtomicUsize>,
    spans: Spans,
}

/// A generation call's slot: busy from its arrival until released (once).
struct Slot<'a> {
    spans: &'a Mutex<Vec<(Instant, Option<Instant>)>>,
    i: Option<usize>,
}

impl Slot<'_> {
    fn release(&mut self) {
        if let Some(i) = self.i.take() {
            self.spans.lock().unwrap()[i].1 = Some(Instant::now());
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl Scripted {
    /// Starts a server with context `n_ctx`; `script(i, body)` answers the i-th /completion.
    pub fn start(
        n_ctx: u64,
        script: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
    ) -> Scripted {
        Scripted::start_with(n_ctx, LLAMA_SERVER, script)
    }

    /// Like [`Scripted::start`], for a server that differs from llama-server as `site` says
    /// (a fork serving its web UI's page on the paths it does not serve, say).
    pub fn start_with(
        n_ctx: u64,
        site: Site,
        script: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
    ) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let logs = Logs {
            requests: Arc::new(Mutex::new(Vec::new())),
            calls: Arc::new(AtomicUsize::new(0)),
            spans: Arc::new(Mutex::new(Vec::new())),
        };
        let script: Arc<Script> = Arc::new(script);
        let l = logs.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (l, script) = (l.clone(), script.clone());
                thread::spawn(move || {
                    let _ = serve(conn, n_ctx, site, &l, &*script);
                });
            }
        });
        Scripted {
            port,
            requests: logs.requests,
            calls: logs.calls,
            spans: logs.spans,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// What a server serves beyond the scripted generation endpoints (`/completion`, and
/// `/v1/completions` whose answers the script shapes too).
#[derive(Debug, Clone, Copy)]
pub struct Site {
    /// Content type and body of the 404 answer to a path it does not serve.
    pub not_found: (&'static str, &'static str),
    /// llama-server's own paths it does not serve either (answered like any unknown path).
    pub missing: &'static [&'static str],
    /// `/slots` is served: one slot, processing while a generation call is in flight (until
    /// its answer is done, or its client is gone and the answer's write fails).
    pub slots: bool,
}

/// llama-server: `/props`, `/v1/models` and `/tokenize`, and a short 404 elsewhere.
pub const LLAMA_SERVER: Site = Site {
    not_found: ("text/plain", "not found"),
    missing: &[],
    slots: false,
};

/// llama-server with its `/slots` (its default): ctxbench can tell when it is idle.
pub const LLAMA_SERVER_WITH_SLOTS: Site = Site {
    slots: true,
    ..LLAMA_SERVER
};

fn serve(
    mut conn: TcpStream,
    n_ctx: u64,
    site: Site,
    logs: &Logs,
    script: &Script,
) -> std::io::Result<()> {
    // Like real inference servers, no Nagle delay: each event leaves at once.
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut len = 0usize;
    let mut headers = String::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        headers.push_str(&h);
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let body = String::from_utf8_lossy(&body).into_owned();
    logs.requests
        .lock()
        .unwrap()
        .push((format!("{}{}", request_line.trim(), headers), body.clone()));
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let path = if site.missing.contains(&path) {
        ""
    } else {
        path
    };
    let mut slot = Slot {
        spans: &logs.spans,
        i: None,
    };
    let reply = match path {
        "/props" => json_reply(
            200,
            json!({
                "default_generation_settings": {"n_ctx": n_ctx},
                "total_slots": 1,
                "build_info": "scripted",
                "model_path": "scripted.gguf"
            }),
        ),
        "/v1/models" => json_reply(
            200,
            json!({"data": [{"id": "scripted", "meta": {"n_vocab": 32000}}]}),
        ),
        "/tokenize" => {
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let text = v["content"].as_str().unwrap_or("");
            let ids: Vec<u64> = text
                .split_whitespace()
                .map(|w| {
                    1000 + (w.len() as u64 * 37 + w.bytes().map(u64::from).sum::<u64>()) % 20000
                })
                .collect();
            json_reply(200, json!({"tokens": ids}))
        }
        "/slots" if site.slots => {
            let (busy, n) = {
                let spans = logs.spans.lock().unwrap();
                (spans.iter().any(|s| s.1.is_none()), spans.len())
            };
            json_reply(200, json!([{"id": 0, "id_task": n, "is_processing": busy}]))
        }
        "/completion" | "/v1/completions" => {
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let i = {
                // Counted and made busy at once, so /slots never sees a call uncounted.
                let mut spans = logs.spans.lock().unwrap();
                spans.push((Instant::now(), None));
                slot.i = Some(spans.len() - 1);
                logs.calls.fetch_add(1, Ordering::SeqCst)
            };
            script(i, &v)
        }
        _ => Reply::Body {
            status: 404,
            content_type: site.not_found.0,
            body: site.not_found.1.into(),
        },
    };
    write_reply(&mut conn, reply, &mut || slot.release())
}

pub fn json_reply(status: u16, v: Value) -> Reply {
    Reply::Body {
        status,
        content_type: "application/json",
        body: v.to_string(),
    }
}

/// Writes `reply`; `done` is called once its work is over, before its last bytes (as a
/// server frees its slot before the final event leaves).
fn write_reply(conn: &mut TcpStream, reply: Reply, done: &mut dyn FnMut()) -> std::io::Result<()> {
    match reply {
        Reply::Body {
            status,
            content_type,
            body,
        } => {
            done();
            write!(conn, "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())?;
        }
        Reply::Stream(pieces) => {
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            )?;
            conn.flush()?;
            let n = pieces.len();
            for (k, (pause, p)) in pieces.into_iter().enumerate() {
                thread::sleep(pause);
                if k + 1 == n {
                    done();
                }
                conn.write_all(p.as_bytes())?;
                conn.flush()?;
            }
        }
        Reply::CutStream(pieces) => {
            write!(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")?;
            for p in pieces {
                write!(conn, "{:x}\r\n{p}\r\n", p.len())?;
                conn.flush()?;
                thread::sleep(Duration::from_millis(5));
            }
            // No terminating 0-length chunk: the body is cut mid-transfer.
        }
    }
    conn.flush()?;
    conn.shutdown(std::net::Shutdown::Both)
}

/// The events of a normal llama.cpp `/completion` stream for `body`, with the prompt length
/// as reported (`reported_prompt`) and cached tokens (`cache_n`).
pub fn good_events(body: &Value, reported_prompt: Option<u64>, cache_n: u64) -> Vec<String> {
    let sent = body["prompt"].as_array().map_or(0, |a| a.len() as u64);
    let n = body["n_predict"].as_u64().unwrap_or(4);
    let prompt = reported_prompt.unwrap_or(sent);
    let mut ev = vec![format!(
        "data: {}\n\n",
        json!({"content":"","tokens":[0],"stop":false,"tokens_predicted":0,"tokens_evaluated":prompt,"prompt_progress":{"total":prompt,"cache":cache_n,"processed":prompt,"time_ms":1}})
    )];
    for i in 1..=n {
        ev.push(format!("data: {}\n\n", json!({"content":"x","tokens":[42],"stop":false,"tokens_predicted":i,"tokens_evaluated":prompt})));
    }
    ev.push(format!(
        "data: {}\n\n",
        json!({"content":"","tokens":[],"stop":true,"tokens_predicted":n,"tokens_evaluated":prompt,"stop_type":"limit","timings":{"cache_n":cache_n,"prompt_n":prompt - cache_n,"prompt_ms":2.0,"prompt_per_second":1000.0,"predicted_n":n,"predicted_ms":(n.saturating_sub(1)) as f64,"predicted_per_second":1000.0}})
    ));
    ev
}

/// A normal streamed answer, 1 ms between events.
pub fn good(body: &Value) -> Reply {
    Reply::Stream(
        good_events(body, None, 0)
            .into_iter()
            .map(|e| (Duration::from_millis(1), e))
            .collect(),
    )
}
