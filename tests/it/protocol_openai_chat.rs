//! A chat-only OpenAI-compatible server cannot be run here for real, so this test drives
//! ctxbench against a scripted in-process one: `/v1/models`, llama-cpp-python's
//! `/extras/tokenize` (BOS included) and `/extras/detokenize`, no `/v1/completions` (404),
//! and `/v1/chat/completions` whose template wraps the user message in a fixed number of
//! tokens, whose first chunk carries only the role (sent at once), whose content chunks come
//! after a pause, and whose stream carries no usage (like llama-cpp-python).

use crate::common;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::sweep;
use ctxbench_schema::record::Status;
use ctxbench_session::sample::HELD_BACK_MIN_EVENTS;
use serde_json::{json, Value};

/// Tokens the scripted chat template adds around the user message (BOS included).
const TEMPLATE: u64 = 11;
/// The pause between the role chunk and the first content chunk.
const PAUSE: Duration = Duration::from_millis(60);

#[derive(Default)]
struct State {
    /// Word → id; id = index.
    vocab: Vec<String>,
    /// (path, body) of every POST.
    posts: Vec<(String, Value)>,
}

/// One token per whitespace-separated word, BOS (id 0) first.
fn tokenize(st: &mut State, text: &str) -> Vec<u64> {
    let mut ids = vec![0];
    for w in text.split_whitespace() {
        let id = match st.vocab.iter().position(|v| v == w) {
            Some(i) => i,
            None => {
                st.vocab.push(w.to_owned());
                st.vocab.len() - 1
            }
        };
        ids.push(id as u64 + 1);
    }
    ids
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn serve(mut conn: TcpStream, st: &Mutex<State>) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let common::Request { method, path, body } = common::read_json_request(&mut reader)?;
    let reply = |conn: &mut TcpStream, status: u16, v: Value| {
        let b = v.to_string();
        write!(
            conn,
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        )
    };
    if method == "POST" {
        st.lock().unwrap().posts.push((path.clone(), body.clone()));
    }
    match path.as_str() {
        "/v1/models" => reply(
            &mut conn,
            200,
            json!({"object": "list", "data": [{"id": "m.gguf", "object": "model", "owned_by": "me"}]}),
        ),
        "/extras/tokenize" => {
            let ids = tokenize(
                &mut st.lock().unwrap(),
                body["input"].as_str().unwrap_or(""),
            );
            reply(&mut conn, 200, json!({"tokens": ids}))
        }
        "/extras/detokenize" => {
            let s = st.lock().unwrap();
            let text: String = body["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t.as_u64().filter(|&i| i > 0))
                .map(|i| format!(" {}", s.vocab[i as usize - 1]))
                .collect();
            reply(&mut conn, 200, json!({"text": text}))
        }
        "/v1/chat/completions" => {
            let content = body["messages"][0]["content"].as_str().unwrap_or("");
            let prompt = TEMPLATE + words(content);
            let n = body["max_tokens"].as_u64().unwrap_or(1);
            if body["stream"] != json!(true) {
                return reply(
                    &mut conn,
                    200,
                    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
                           "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}}),
                );
            }
            write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )?;
            let chunk = |delta: Value, fr: Value| {
                format!(
                    "data: {}\r\n\r\n",
                    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]})
                )
            };
            // The role chunk at once: a client that times it would report ~0 ms.
            conn.write_all(chunk(json!({"role": "assistant"}), Value::Null).as_bytes())?;
            conn.flush()?;
            thread::sleep(PAUSE);
            for i in 0..n {
                let fr = if i + 1 == n {
                    json!("length")
                } else {
                    Value::Null
                };
                conn.write_all(chunk(json!({"content": " w"}), fr).as_bytes())?;
                conn.flush()?;
                thread::sleep(Duration::from_millis(2));
            }
            conn.write_all(b"data: [DONE]\r\n\r\n")
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

#[test]
fn protocol_openai_chat_only_lengths_include_the_template_and_ttft_skips_the_role_chunk() {
    let (url, st) = start();
    // Fewer tokens than a held-back stream needs: a stream of that many or more whose tokens
    // all come in the first read is judged held back (its TTFT dropped), and a client
    // descheduled through the whole stream on a loaded host reads them so (a sample without a
    // TTFT in a full suite's run). A shorter stream is never judged: its TTFT always stands.
    let n_out = HELD_BACK_MIN_EVENTS as u64 - 1;
    let run = sweep(
        &url,
        &[
            "--contexts",
            "256,512",
            "--reps",
            "2",
            "--output-tokens",
            &n_out.to_string(),
        ],
    )
    .ok();
    let err = &run.stderr;
    assert!(
        err.contains("generations: POST /v1/chat/completions"),
        "{err}"
    );
    assert!(
        err.contains("/extras/tokenize + /extras/detokenize"),
        "{err}"
    );
    assert!(err.contains("chat-only"), "{err}");
    let r = run.results();
    assert_eq!(
        r.header.server.server_added_tokens,
        Some(TEMPLATE),
        "the template's tokens measured by the warmup"
    );
    assert_eq!(r.samples.len(), 4);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        // The server's own count, template included, is the context length.
        assert_eq!(s.prompt_tokens, Some(s.context_tokens), "{s:?}");
        assert!(
            s.flags.iter().any(|f| f == "prompt_tokens_from_repeat"),
            "{s:?}"
        );
        assert!(
            s.flags.iter().any(|f| f == "output_tokens_from_events"),
            "{s:?}"
        );
        assert!(s.flags.iter().any(|f| f == "cache_unverified"), "{s:?}");
        assert_eq!(s.output_tokens, Some(n_out));
        let ttft = s.ttft_ms.unwrap_or_else(|| panic!("no TTFT: {s:?}"));
        assert!(
            ttft >= PAUSE.as_secs_f64() * 1000.0,
            "TTFT {ttft} ms must be taken on the first content chunk, not the role chunk"
        );
    }
    let st = st.lock().unwrap();
    let chats: Vec<&Value> = st
        .posts
        .iter()
        .filter(|(p, _)| p == "/v1/chat/completions")
        .map(|(_, b)| b)
        .collect();
    let streamed: Vec<&&Value> = chats
        .iter()
        .filter(|b| b["stream"] == json!(true))
        .collect();
    // The negotiation's streamed test request, the warmup and 4 measured requests; each
    // measured one followed by its non-streamed count.
    assert_eq!(streamed.len(), 1 + 5);
    assert_eq!(streamed[0]["messages"][0]["content"], "Hello");
    for b in &streamed[1..] {
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 1, "one user message");
        assert_eq!(m[0]["role"], "user");
        let n = words(m[0]["content"].as_str().unwrap());
        assert!(
            [64, 256 - TEMPLATE, 512 - TEMPLATE].contains(&n),
            "content of {n} tokens"
        );
    }
}

#[test]
fn protocol_openai_a_v1_url_is_a_usage_error_before_any_request() {
    let (code, _, err) = common::run(&[
        "sweep",
        "--url",
        "http://127.0.0.1:9/v1",
        "--contexts",
        "1k",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("without /v1") && err.contains("--url http://127.0.0.1:9"),
        "{err}"
    );
}

#[test]
fn protocol_openai_endpoint_flag_picks_the_path_and_completions_on_a_chat_only_server_fails() {
    let (url, _st) = start();
    let args = ["--contexts", "256", "--reps", "1", "--output-tokens", "4"];
    let run = sweep(&url, &[&args[..], &["--endpoint", "chat"]].concat()).ok();
    assert!(
        run.stderr
            .contains("generations: POST /v1/chat/completions"),
        "{}",
        run.stderr
    );
    assert_eq!(run.results().samples[0].status, Status::Ok);
    let run = sweep(&url, &[&args[..], &["--endpoint", "completions"]].concat());
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("/v1/completions"), "{}", run.stderr);
}

/// A usage error found after the probe comes before any request it would make pointless:
/// this server reports no maximum context, so without `--contexts` the run exits 2 naming
/// the option, and nothing beyond the probe is sent (no warmup, no calibration, no corpus
/// tokenization). Scripted: this is about the order of requests.
#[test]
fn protocol_openai_missing_contexts_without_a_reported_maximum_exits_2_before_any_request_beyond_the_probe(
) {
    let (url, st) = start();
    let run = sweep(&url, &["--reps", "1"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("give --contexts"),
        "the message names the option: {}",
        run.stderr
    );
    let st = st.lock().unwrap();
    assert!(
        !st.posts.is_empty(),
        "the probe ran (tokenizer pairs tried)"
    );
    for (path, body) in &st.posts {
        assert_ne!(
            path, "/v1/chat/completions",
            "a generation was sent: {body}"
        );
        if path == "/extras/tokenize" {
            let input = body["input"].as_str().unwrap_or("");
            assert!(
                input.len() <= "hello world".len(),
                "the corpus was tokenized before the usage error: {} chars",
                input.len()
            );
        }
    }
}
