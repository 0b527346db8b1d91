//! A scripted OpenAI-compatible server with the quirks of issue 42's first contacts, each
//! switched on by itself: usage of all zeros, a chat template whose system prefix is
//! cached and honestly reported, a 404 with a JSON error body for token-id prompts on
//! `/v1/completions` (text prompts taken there), and a llama.cpp tokenizer pair (to lend
//! with `--tokenizer-url`). It counts one token per whitespace-led word (BOS first on
//! completions; the template's tokens around a chat message), keeps a real prefix cache
//! (longest common prefix with any earlier prompt, in tokens), and logs every request.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;

/// What the server does differently.
#[derive(Debug, Clone, Default)]
pub struct Quirks {
    /// Every usage record is `prompt_tokens: 0, completion_tokens: 0, total_tokens: 0`.
    pub zero_usage: bool,
    /// `/v1/completions` answers 404 with a JSON error body to a token-id prompt.
    pub refuse_ids_404: bool,
    /// `/v1/completions` is served (text prompts; ids too unless refused).
    pub completions: bool,
    /// `/v1/chat/completions` is served: the template's tokens before and after the message.
    pub chat_template: Option<(u64, u64)>,
    /// `/tokenize` and `/detokenize` (llama.cpp's shapes) are served.
    pub tokenizer: bool,
    /// Prefill time per uncached token.
    pub prefill_per_token: Duration,
    /// The first streamed request of at least so many tokens waits this long before
    /// answering, as a server busy with something else would.
    pub stall: Option<(u64, Duration)>,
    /// Every generation answer is a body without end (chunked, no length): a JSON object
    /// whose text never closes, or on a stream one `data:` line that never ends.
    pub endless_body: bool,
    /// A needle prompt whose text ends with the question and holds the fact is answered
    /// with its value (a model that reads well); anything else with words.
    pub answer_needles: bool,
}

/// One generation request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub streamed: bool,
    pub max_tokens: u64,
    /// The server's count of the prompt.
    pub tokens: u64,
    /// Of which found in its cache.
    pub cached: u64,
    /// The text of the prompt (the user message on chat), `None` for token ids.
    pub text: Option<String>,
    pub arrived: Instant,
    pub ended: Option<Instant>,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Every prompt counted so far, as token strings (the cache).
    cache: Vec<Vec<String>>,
    vocab: HashMap<String, u32>,
    words: Vec<String>,
}

/// A running quirky server; it lives until the test process ends.
pub struct QuirkServer {
    pub url: String,
    st: Arc<Mutex<State>>,
}

impl QuirkServer {
    pub fn start(q: Quirks) -> QuirkServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let st = Arc::new(Mutex::new(State::default()));
        let st2 = st.clone();
        thread::spawn(move || {
            for c in listener.incoming().flatten() {
                let (st, q) = (st2.clone(), q.clone());
                thread::spawn(move || {
                    let _ = serve(c, &st, &q);
                });
            }
        });
        QuirkServer {
            url: format!("http://127.0.0.1:{port}"),
            st,
        }
    }

    /// The generation requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.st.lock().unwrap().seen.clone()
    }
}

/// Whitespace-led words: the server's tokens.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    for c in text.chars() {
        if c.is_whitespace() && in_word {
            out.push(std::mem::take(&mut cur));
            in_word = false;
        }
        in_word |= !c.is_whitespace();
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn reply(conn: &mut TcpStream, status: u16, v: Value) -> std::io::Result<()> {
    let b = v.to_string();
    write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
        b.len()
    )
}

fn serve(mut conn: TcpStream, st: &Mutex<State>, q: &Quirks) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let common::Request { path, body, .. } = common::read_json_request(&mut reader)?;
    match path.as_str() {
        "/v1/models" => reply(
            &mut conn,
            200,
            json!({"object": "list", "data": [{"id": "quirk", "object": "model", "owned_by": "me"}]}),
        ),
        "/tokenize" if q.tokenizer => {
            let text = body["content"].as_str().unwrap_or_default();
            let mut s = st.lock().unwrap();
            // Each word's piece is led by one space, so pieces joined back never merge.
            let ids: Vec<u32> = words(text)
                .into_iter()
                .map(|w| format!(" {}", w.trim_start()))
                .map(|w| {
                    let n = s.words.len() as u32;
                    let id = *s.vocab.entry(w.clone()).or_insert(n);
                    if id == n {
                        s.words.push(w);
                    }
                    id
                })
                .collect();
            reply(&mut conn, 200, json!({"tokens": ids}))
        }
        "/detokenize" if q.tokenizer => {
            let s = st.lock().unwrap();
            let text: String = body["tokens"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| s.words.get(v.as_u64()? as usize).cloned())
                .collect();
            reply(&mut conn, 200, json!({"content": text}))
        }
        "/v1/completions" if q.completions => {
            let Some(text) = body["prompt"].as_str() else {
                if q.refuse_ids_404 {
                    return reply(
                        &mut conn,
                        404,
                        json!({"error": {"message": "text input must be of type str", "type": "invalid_request_error"}}),
                    );
                }
                let n = body["prompt"].as_array().map_or(0, Vec::len);
                let toks: Vec<String> = body["prompt"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| format!("<{v}>"))
                    .collect();
                let toks = [vec!["<bos>".to_owned()], toks].concat();
                debug_assert_eq!(toks.len(), n + 1);
                return answer(conn, st, q, &path, &body, toks, None);
            };
            let toks = [vec!["<bos>".to_owned()], words(text)].concat();
            answer(conn, st, q, &path, &body, toks, Some(text.to_owned()))
        }
        "/v1/chat/completions" if q.chat_template.is_some() => {
            let (pre, post) = q.chat_template.unwrap_or_default();
            let text = body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let toks: Vec<String> = (0..pre)
                .map(|i| format!("<sys{i}>"))
                .chain(words(&text))
                .chain((0..post).map(|i| format!("<end{i}>")))
                .collect();
            answer(conn, st, q, &path, &body, toks, Some(text))
        }
        _ => reply(&mut conn, 404, json!({"detail": "Not Found"})),
    }
}

/// Counts, caches and answers one generation request (streamed or not).
fn answer(
    mut conn: TcpStream,
    st: &Mutex<State>,
    q: &Quirks,
    path: &str,
    body: &Value,
    toks: Vec<String>,
    text: Option<String>,
) -> std::io::Result<()> {
    let chat = path.ends_with("chat/completions");
    let n = body["max_tokens"]
        .as_u64()
        .or_else(|| body["max_completion_tokens"].as_u64())
        .unwrap_or(16);
    let streamed = body["stream"] == json!(true);
    let tokens = toks.len() as u64;
    let (me, cached) = {
        let mut s = st.lock().unwrap();
        let hit = s
            .cache
            .iter()
            .map(|c| c.iter().zip(&toks).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0) as u64;
        let cached = hit.min(tokens.saturating_sub(1));
        s.cache.push(toks);
        s.seen.push(Seen {
            path: path.to_owned(),
            streamed,
            max_tokens: n,
            tokens,
            cached,
            text,
            arrived: Instant::now(),
            ended: None,
        });
        (s.seen.len() - 1, cached)
    };
    thread::sleep(q.prefill_per_token * (tokens - cached) as u32);
    if let Some((min, pause)) = q.stall {
        let first = !st.lock().unwrap().seen[..me]
            .iter()
            .any(|s| s.streamed && s.tokens >= min);
        if streamed && tokens >= min && first {
            thread::sleep(pause);
        }
    }
    let usage = if q.zero_usage {
        json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
    } else {
        json!({"prompt_tokens": tokens, "completion_tokens": n, "total_tokens": tokens + n,
               "prompt_tokens_details": {"cached_tokens": cached}})
    };
    let end = || st.lock().unwrap().seen[me].ended = Some(Instant::now());
    if q.endless_body {
        end();
        return endless(conn, streamed);
    }
    let needle = q
        .answer_needles
        .then(|| needle_answer(&st.lock().unwrap().seen[me]));
    let piece = |i: u64, fr: Value| {
        let t = match (&needle, i) {
            (Some(a), 0) => a.clone(),
            _ => format!(" w{i}"),
        };
        if chat {
            json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": fr}]})
        } else {
            json!({"object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": fr}]})
        }
    };
    if !streamed {
        end();
        let choice = if chat {
            json!({"index": 0, "message": {"role": "assistant", "content": " w"}, "finish_reason": "length"})
        } else {
            json!({"index": 0, "text": " w", "finish_reason": "length"})
        };
        return reply(&mut conn, 200, json!({"choices": [choice], "usage": usage}));
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
        conn.write_all(format!("data: {}\r\n\r\n", piece(i, fr)).as_bytes())?;
        conn.flush()?;
        thread::sleep(Duration::from_millis(2));
    }
    let u = json!({"object": "chunk", "choices": [], "usage": usage});
    end();
    conn.write_all(format!("data: {u}\r\n\r\ndata: [DONE]\r\n\r\n").as_bytes())?;
    conn.flush()
}

/// An answer that never ends: chunks of 1 MiB of `x` inside an unclosed string, until the
/// client hangs up (the write then fails and the thread ends).
fn endless(mut conn: TcpStream, streamed: bool) -> std::io::Result<()> {
    let (ctype, head) = match streamed {
        true => ("text/event-stream", "data: {\"choices\":[{\"text\":\""),
        false => ("application/json", "{\"choices\":[{\"text\":\""),
    };
    write!(
        conn,
        "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{head}\r\n",
        head.len()
    )?;
    let chunk = format!("{:x}\r\n{}\r\n", 1 << 20, "x".repeat(1 << 20));
    loop {
        conn.write_all(chunk.as_bytes())?;
    }
}

/// The answer of a model that finds the fact where the prompt ends with the question.
fn needle_answer(seen: &Seen) -> String {
    let text = seen.text.as_deref().unwrap_or_default();
    let value = text
        .split("The secret number is ")
        .nth(1)
        .and_then(|r| r.split('.').next())
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()));
    match value {
        Some(v) if text.ends_with("The secret number is") => format!(" {v}."),
        _ => " I do not know.".to_owned(),
    }
}

/// Where the needle's fact sits in a prompt's text, in the server's tokens (`None`: none).
pub fn fact_token(text: &str) -> Option<usize> {
    let at = text.find("The secret number is ")?;
    // The question ends with the same words: the fact is the one followed by a digit.
    let rest = &text[at + "The secret number is ".len()..];
    rest.starts_with(|c: char| c.is_ascii_digit())
        .then(|| words(&text[..at]).len())
}
