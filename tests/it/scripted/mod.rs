//! Scripted in-process servers for what no real server here can show (busy refusals, flags a
//! test must switch, TGI and Ollama). SGLang and vLLM are checked against recorded real
//! exchanges by tests/it/scripted_fidelity.rs. Each
//! follows its server's documented API field by field: endpoints, streaming shapes (SGLang cumulative
//! `text`/`output_ids` with `meta_info`; vLLM OpenAI chunks then a `choices: []` usage chunk),
//! units (SGLang seconds), error shapes, and optional fields that go missing without the
//! server flag that enables them. They keep a real prefix cache (longest common prefix with
//! any earlier prompt) so cache defences are exercised, sleep so TTFT and decode are
//! measurable, and record every request they receive.
#![allow(dead_code)]

pub mod fork;
pub mod quirks;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};

/// Which server to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Sglang,
    Vllm,
    Tgi,
    Ollama,
}

/// How the scripted server is set up (the flags a real one would be started with).
#[derive(Debug, Clone)]
pub struct Config {
    pub flavor: Flavor,
    /// Context length the server reports.
    pub advertised_context: u64,
    /// Context length it enforces (larger than advertised lets a test reach the error path).
    pub real_context: u64,
    /// Tokens per streamed chunk (speculative decoding makes chunks of several tokens).
    pub tokens_per_chunk: u64,
    /// Draft tokens per verify step; 0 = no speculative decoding.
    pub spec_draft: u64,
    /// Draft tokens accepted per verify step.
    pub spec_accepted: u64,
    /// vLLM `--enable-prompt-tokens-details`; SGLang `--enable-cache-report`.
    pub cache_report: bool,
    /// vLLM `VLLM_SERVER_DEV_MODE=1` (exposes /reset_prefix_cache).
    pub dev_mode: bool,
    /// SGLang `--enable-metrics` (extra meta_info timings).
    pub enable_metrics: bool,
    /// Pause before each chunk.
    pub chunk_delay: Duration,
    /// SGLang `--incremental-streaming-output`: deltas instead of cumulative text/ids.
    pub incremental: bool,
    /// vLLM `--enable-per-request-metrics`: a `metrics` object on the usage chunk (ms).
    pub per_request_metrics: bool,
    /// Another client's request is running from the Nth flush request on (1-based), so
    /// the server refuses that flush and every later one, as the real servers do while
    /// a request holds cache blocks (recorded: sglang-0.5.23/flush_cache_busy.json,
    /// vllm-0.32.0/reset_prefix_cache_busy.json).
    pub busy_from_flush: Option<usize>,
    /// Prefill time added to every Ollama answer. Ollama reports no cached tokens, so
    /// ctxbench's suspected-cache-hit rule judges each TTFT against the run's slowest: with
    /// the shared 5 ms prefill, a loaded host's scheduling delay of 40 ms on one sample made
    /// the others look like cache hits. At 150 ms more, a hiccup would have to exceed 450 ms.
    pub extra_prefill: Duration,
    /// SGLang's device KV pool (`max_total_num_tokens`), enforced: the least recently used
    /// prompts beyond it are evicted. `None`: 500k tokens reported, never evicted.
    pub device_pool: Option<u64>,
    /// SGLang `--enable-hierarchical-cache`: evicted prompts move to host memory, and a hit
    /// on them is reported as `cached_tokens_details.host` (no real SGLang here runs
    /// HiCache: on CPU its host pool needs CUDA's cudaHostRegister).
    pub hicache: bool,
}

impl Config {
    pub fn new(flavor: Flavor) -> Config {
        Config {
            flavor,
            advertised_context: 8192,
            real_context: 8192,
            tokens_per_chunk: 1,
            spec_draft: 0,
            spec_accepted: 0,
            cache_report: true,
            dev_mode: true,
            enable_metrics: true,
            chunk_delay: Duration::from_millis(3),
            incremental: false,
            per_request_metrics: false,
            busy_from_flush: None,
            extra_prefill: match flavor {
                Flavor::Ollama => Duration::from_millis(150),
                _ => Duration::ZERO,
            },
            device_pool: None,
            hicache: false,
        }
    }
}

/// What the server saw and counted.
#[derive(Debug, Default)]
pub struct Log {
    /// (path, JSON body) of every POST.
    pub requests: Vec<(String, Value)>,
    /// Cache flushes served (the cache really cleared).
    pub flushes: usize,
    /// Flush requests refused because a request was running.
    pub refused_flushes: usize,
    /// Requests being answered right now (a flush is refused while this is above 0).
    running: usize,
    seen: Vec<Vec<u64>>,
    /// Prompts evicted from the device pool to host memory (HiCache).
    host: Vec<Vec<u64>>,
    prompt_tokens_total: u64,
    generation_tokens_total: u64,
    cached_tokens_total: u64,
    drafts_total: u64,
    draft_tokens_total: u64,
    accepted_total: u64,
}

struct Srv {
    cfg: Config,
    log: Mutex<Log>,
}

/// A running scripted server; it lives until the test process ends.
pub struct Scripted {
    pub port: u16,
    srv: Arc<Srv>,
}

impl Scripted {
    pub fn start(cfg: Config) -> Scripted {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let port = std_listener.local_addr().unwrap().port();
        let srv = Arc::new(Srv {
            cfg,
            log: Mutex::new(Log::default()),
        });
        let app = router(srv.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                use axum::serve::ListenerExt;
                // Like real inference servers, no Nagle delay: each event leaves at once.
                let l = tokio::net::TcpListener::from_std(std_listener)
                    .unwrap()
                    .tap_io(|tcp| {
                        let _ = tcp.set_nodelay(true);
                    });
                axum::serve(l, app).await.unwrap();
            });
        });
        Scripted { port, srv }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Bodies of POSTs to `path`.
    pub fn requests(&self, path: &str) -> Vec<Value> {
        let log = self.srv.log.lock().unwrap();
        log.requests
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }

    pub fn flushes(&self) -> usize {
        self.srv.log.lock().unwrap().flushes
    }

    pub fn refused_flushes(&self) -> usize {
        self.srv.log.lock().unwrap().refused_flushes
    }
}

/// Counts a request as running from its arrival until its response body is dropped
/// (the stream finished or the client went away).
struct Running(Arc<Srv>);

impl Running {
    fn start(s: &Arc<Srv>) -> Running {
        s.log.lock().unwrap().running += 1;
        Running(s.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut l) = self.0.log.lock() {
            l.running -= 1;
        }
    }
}

/// Sweeps 8k tokens with `--backend BACKEND` against a `flavor` server that advertises 32k of
/// context but accepts only 4k, so the request reaches the server's own refusal. Asserts the
/// run is incomplete (exit 1) and returns the failed sample's error.
pub fn over_long_prompt_error(
    flavor: Flavor,
    backend: &str,
) -> ctxbench_schema::record::SampleError {
    let mut c = Config::new(flavor);
    c.advertised_context = 32768;
    c.real_context = 4096;
    let srv = Scripted::start(c);
    let run = crate::common::sweep(
        &srv.url(),
        &[
            "--backend",
            backend,
            "--contexts",
            "8k",
            "--reps",
            "1",
            "--output-tokens",
            "8",
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = run.results();
    r.samples[0].error.clone().unwrap()
}

/// Sweeps two 1k samples (`--flush-wait 1`) against a `flavor` server where another
/// client's request runs from the second flush on. Asserts that only the probe's flush was
/// done, that each sample retried its refused flush before it was measured anyway, and that
/// every sample is flagged `flush_failed` and never recorded as flushed (`what`: the flush's
/// name in the messages).
pub fn assert_flush_refused_mid_run_flags_every_later_sample(flavor: Flavor, what: &str) {
    let mut c = Config::new(flavor);
    c.busy_from_flush = Some(2);
    let srv = Scripted::start(c);
    let run = crate::common::sweep(
        &srv.url(),
        &crate::common::argv("--contexts 1k --reps 2 --output-tokens 4 --flush-wait 1"),
    );
    let r = run.results();
    assert_eq!(srv.flushes(), 1, "only the probe flush was done");
    // Each sample retried its refused flush (backoff within --flush-wait 1) before it
    // was measured anyway.
    assert!(srv.refused_flushes() >= 4, "{}", srv.refused_flushes());
    for s in &r.samples {
        assert!(s.flags.iter().any(|f| f == "flush_failed"), "{s:?}");
        assert!(
            s.flush.as_deref().is_some_and(|f| f.starts_with("failed")),
            "a refused {what} is not recorded as done: {s:?}"
        );
    }
}

/// Sweeps one 1k sample with `--flush MODE` (`--flush-wait 1`) against a `flavor` server
/// that is busy from the probe's flush on. Busy is temporary (issue 10): asserts that
/// flushing is not switched off for the run and the sweep does not stop (exit 0); the
/// refusal is retried, said once ("stayed busy"), and never recorded as done.
pub fn assert_flush_busy_at_the_probe_keeps_flushing(flavor: Flavor, mode: &str) {
    let mut c = Config::new(flavor);
    c.busy_from_flush = Some(1);
    let srv = Scripted::start(c);
    let run = crate::common::sweep(
        &srv.url(),
        &crate::common::argv(&format!(
            "--contexts 1k --reps 1 --output-tokens 4 --flush {mode} --flush-wait 1"
        )),
    )
    .ok();
    assert!(run.stderr.contains("stayed busy"), "{}", run.stderr);
    assert!(
        srv.refused_flushes() >= 2,
        "retried: {}",
        srv.refused_flushes()
    );
    let r = run.results();
    let s = &r.samples[0];
    assert!(s.has(&ctxbench_schema::record::Flag::FlushFailed), "{s:?}");
    assert!(
        s.flush.as_deref().is_some_and(|f| f.starts_with("failed")),
        "{s:?}"
    );
}

fn router(srv: Arc<Srv>) -> Router {
    let r = Router::new()
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/metrics", get(metrics));
    let r = match srv.cfg.flavor {
        Flavor::Sglang => r
            .route("/server_info", get(server_info))
            .route("/get_server_info", get(server_info))
            .route("/generate", post(generate))
            .route("/v1/completions", post(completions))
            .route("/model_info", get(sglang_model_info))
            .route("/flush_cache", get(flush).post(flush))
            .fallback(not_found),
        Flavor::Ollama => Router::new()
            .route("/api/version", get(|| async { Json(json!({"version": "0.12.10"})) }))
            .route("/api/tags", get(|| async { Json(json!({"models": [{"name": "tiny:latest", "model": "tiny:latest", "size": 1, "details": {"family": "llama"}}]})) }))
            .route("/api/show", post(ollama_show))
            .route("/api/generate", post(ollama_generate)),
        Flavor::Tgi => Router::new()
            .route("/info", get(tgi_info))
            .route("/tokenize", post(tgi_tokenize))
            .route("/generate_stream", post(tgi_generate_stream))
            .route("/generate", post(tgi_generate)),
        Flavor::Vllm => {
            let r = r
                .route("/v1/completions", post(completions))
                .route(
                    "/version",
                    get(|| async { Json(json!({"version": "0.32.0"})) }),
                )
                .fallback(not_found);
            if srv.cfg.dev_mode {
                r.route("/reset_prefix_cache", post(flush)).route(
                    "/server_info",
                    get(|| async {
                        Json(json!({"vllm_config": "model='scripted-model', max_seq_len=8192", "vllm_env": {}, "system_env": {}}))
                    }),
                )
            } else {
                r
            }
        }
    };
    r.with_state(srv)
}

/// FastAPI's answer to an unknown path (both SGLang and vLLM).
async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))).into_response()
}

async fn sglang_model_info() -> Json<Value> {
    Json(json!({
        "model_path": "scripted/model", "served_model_name": "scripted-model",
        "tokenizer_path": "scripted/model", "is_generation": true,
        "preferred_sampling_params": null, "weight_version": "default", "load_format": "auto",
        "reasoning_parser": null, "tool_call_parser": null, "disaggregation_mode": "null",
        "has_image_understanding": false, "has_audio_understanding": false,
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "embedding": {}
    }))
}

async fn models(State(s): State<Arc<Srv>>) -> Json<Value> {
    let mut m = json!({
        "id": "scripted-model", "object": "model", "created": 1, "owned_by": "sglang",
        "root": "scripted-model", "parent": null, "max_model_len": s.cfg.advertised_context
    });
    if s.cfg.flavor == Flavor::Vllm {
        m["owned_by"] = json!("vllm");
        m["permission"] = json!([{
            "id": "modelperm-1", "object": "model_permission", "created": 1,
            "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
            "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
            "organization": "*", "group": null, "is_blocking": false
        }]);
    }
    Json(json!({"object": "list", "data": [m]}))
}

async fn server_info(State(s): State<Arc<Srv>>) -> Json<Value> {
    Json(json!({
        "model_path": "scripted/model", "served_model_name": "scripted-model", "tp_size": 1,
        "context_length": s.cfg.advertised_context,
        "enable_metrics": s.cfg.enable_metrics,
        "enable_cache_report": s.cfg.cache_report,
        "speculative_algorithm": if s.cfg.spec_draft > 0 { json!("EAGLE") } else { Value::Null },
        "max_total_num_tokens": s.cfg.device_pool.unwrap_or(500_000),
        "max_req_input_len": s.cfg.advertised_context - 5,
        "internal_states": [{"last_gen_throughput": 0.0}],
        "version": "0.5.6-scripted"
    }))
}

/// A byte-level tokenizer: one token per byte, ids 300..556.
fn tok(text: &str) -> Vec<u64> {
    text.bytes().map(|b| 300 + b as u64).collect()
}

async fn tokenize(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Json<Value> {
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/tokenize".into(), body.clone()));
    let text = body["prompt"].as_str().unwrap_or("");
    let t = tok(text);
    // Recorded (sglang-0.5.23/tokenize.json, vllm-0.32.0/tokenize.json): both report the
    // server's context length; vLLM adds `token_strs`.
    let mut out = json!({"tokens": t, "count": t.len(), "max_model_len": s.cfg.advertised_context});
    if s.cfg.flavor == Flavor::Vllm {
        out["token_strs"] = Value::Null;
    }
    Json(out)
}

/// SGLang (`/flush_cache`) and vLLM (`/reset_prefix_cache`) flush only while idle. Busy,
/// SGLang answers 400 "Flush cache failed." and vLLM 200 `{"success": false}`; neither
/// clears anything (recorded: sglang-0.5.23/flush_cache_{busy,idle}.json,
/// vllm-0.32.0/reset_prefix_cache_{busy,idle}.json).
async fn flush(State(s): State<Arc<Srv>>) -> Response {
    let mut log = s.log.lock().unwrap();
    let calls = log.flushes + log.refused_flushes + 1;
    let busy = log.running > 0 || s.cfg.busy_from_flush.is_some_and(|n| calls >= n);
    if busy {
        log.refused_flushes += 1;
    } else {
        log.flushes += 1;
        log.seen.clear();
        log.host.clear();
    }
    match (s.cfg.flavor, busy) {
        // SGLang's answer is plain text without a content-type header.
        (Flavor::Sglang, true) => plain(StatusCode::BAD_REQUEST, "Flush cache failed.\n"),
        (Flavor::Sglang, false) => plain(
            StatusCode::OK,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        ),
        (_, busy) => Json(json!({"success": !busy})).into_response(),
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    Response::builder()
        .status(status)
        .body(Body::from(text))
        .unwrap()
}

async fn metrics(State(s): State<Arc<Srv>>) -> Response {
    let l = s.log.lock().unwrap();
    let text = match s.cfg.flavor {
        Flavor::Sglang => format!(
            "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{{model_name=\"scripted-model\"}} {}.0\n# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{{model_name=\"scripted-model\"}} {}.0\n# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{{model_name=\"scripted-model\",cache_source=\"device\"}} {}.0\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{model_name=\"scripted-model\"}} 0.0\n",
            l.prompt_tokens_total, l.generation_tokens_total, l.cached_tokens_total
        ),
        _ => {
            let mut t = format!(
                "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine=\"0\",model_name=\"scripted-model\"}} {}.0\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{engine=\"0\",model_name=\"scripted-model\"}} {}.0\n# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{{engine=\"0\",model_name=\"scripted-model\"}} {}.0\n# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"16\",cache_dtype=\"auto\",engine=\"0\",num_gpu_blocks=\"2048\"}} 1.0\n",
                l.prompt_tokens_total, l.generation_tokens_total, l.cached_tokens_total
            );
            if s.cfg.spec_draft > 0 {
                t += &format!(
                    "# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{{engine=\"0\",model_name=\"scripted-model\"}} {}.0\n# TYPE vllm:spec_decode_num_draft_tokens counter\nvllm:spec_decode_num_draft_tokens_total{{engine=\"0\",model_name=\"scripted-model\"}} {}.0\n# TYPE vllm:spec_decode_num_accepted_tokens counter\nvllm:spec_decode_num_accepted_tokens_total{{engine=\"0\",model_name=\"scripted-model\"}} {}.0\n",
                    l.drafts_total, l.draft_tokens_total, l.accepted_total
                );
            }
            t
        }
    };
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}

/// Registers a prompt with the prefix cache; returns tokens served from it and, of those,
/// loaded back from host memory. vLLM caches in blocks of 16.
fn admit(s: &Srv, ids: &[u64], gen: u64) -> (u64, u64) {
    let mut l = s.log.lock().unwrap();
    let lcp = |pool: &[Vec<u64>]| {
        pool.iter()
            .map(|p| p.iter().zip(ids).take_while(|(a, b)| a == b).count() as u64)
            .max()
            .unwrap_or(0)
    };
    let (device, host) = (lcp(&l.seen), lcp(&l.host));
    let cached = match s.cfg.flavor {
        Flavor::Vllm => device / 16 * 16,
        _ => device.max(host),
    }
    .min(ids.len() as u64 - 1);
    let from_host = cached.saturating_sub(device);
    l.seen.push(ids.to_vec());
    if let Some(pool) = s.cfg.device_pool {
        // Least recently used first out: to host memory with HiCache, else gone.
        while l.seen.iter().map(|p| p.len() as u64).sum::<u64>() > pool && l.seen.len() > 1 {
            let out = l.seen.remove(0);
            if s.cfg.hicache {
                l.host.push(out);
            }
        }
    }
    l.prompt_tokens_total += ids.len() as u64 - cached;
    l.cached_tokens_total += cached;
    l.generation_tokens_total += gen;
    (cached, from_host)
}

/// Verify steps for `n` generated tokens: the first token comes from prefill, each step
/// after yields its accepted drafts plus one.
fn spec_steps(cfg: &Config, n: u64) -> u64 {
    let per = cfg.spec_accepted + 1;
    (n.saturating_sub(1)).div_ceil(per)
}

fn sse(events: Vec<(Duration, String)>, running: Running) -> Response {
    let stream = futures_util::stream::iter(events).then(move |(d, data)| {
        // The request counts as running until its last event is sent.
        let _still_running = &running;
        async move {
            tokio::time::sleep(d).await;
            Ok::<_, Infallible>(Bytes::from(format!("data: {data}\n\n")))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Chunk boundaries: the first token alone (prefill), then `tokens_per_chunk` at a time.
fn chunks(cfg: &Config, n: u64) -> Vec<u64> {
    let mut out = vec![1];
    let mut done = 1;
    while done < n {
        done = (done + cfg.tokens_per_chunk).min(n);
        out.push(done);
    }
    out
}

fn prefill_delay(n: usize) -> Duration {
    Duration::from_millis(5) + Duration::from_micros(n as u64 * 2)
}

fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

async fn generate(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Response {
    let received = epoch_now();
    let running = Running::start(&s);
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/generate".into(), body.clone()));
    let ids: Vec<u64> = match body["input_ids"].as_array() {
        Some(a) => a.iter().filter_map(Value::as_u64).collect(),
        None => tok(body["text"].as_str().unwrap_or("")),
    };
    let max_new = body["sampling_params"]["max_new_tokens"]
        .as_u64()
        .unwrap_or(128);
    let stream = body["stream"].as_bool().unwrap_or(false);
    let ctx = s.cfg.real_context;
    if ids.len() as u64 >= ctx {
        let msg = format!(
            "The input ({} tokens) is longer than the model's context length ({ctx} tokens).",
            ids.len()
        );
        let err = json!({"error": {"message": msg}});
        return if stream {
            // SGLang's native streaming error: HTTP 200, an error event, then [DONE].
            sse(
                vec![
                    (Duration::ZERO, err.to_string()),
                    (Duration::ZERO, "[DONE]".into()),
                ],
                running,
            )
        } else {
            (StatusCode::BAD_REQUEST, Json(err)).into_response()
        };
    }
    let (cached, from_host) = admit(&s, &ids, max_new);
    let steps = spec_steps(&s.cfg, max_new);
    let mut events = Vec::new();
    let bounds = chunks(&s.cfg, max_new);
    let last = bounds.len() - 1;
    // Timings are those of the schedule this answer follows (the sleeps below), stamped on
    // the wall clock the way SGLang stamps them.
    let entry = epoch_now();
    let prefill_s = prefill_delay(ids.len()).as_secs_f64();
    let decode_s = s.cfg.chunk_delay.as_secs_f64() * last as f64;
    let mut prev = 0;
    for (i, &n) in bounds.iter().enumerate() {
        let from = if s.cfg.incremental { prev } else { 0 };
        prev = n;
        let out_ids: Vec<u64> = (from..n).map(|k| 400 + k).collect();
        let text: String = (from..n).map(|_| 'a').collect();
        let mut meta = json!({
            "id": "rid-1", "finish_reason": Value::Null,
            "prompt_tokens": ids.len(), "completion_tokens": n, "cached_tokens": cached,
            "reasoning_tokens": 0, "num_retractions": 0, "weight_version": "default",
            "storage_prefetch_wait": 0.0, "storage_staging_wait": 0.0,
            "cached_tokens_details": {"device": cached - from_host, "host": from_host}, "dp_rank": null
        });
        if i == 0 && stream {
            meta["response_sent_to_client_ts"] = json!(entry + prefill_s);
        }
        if s.cfg.enable_metrics {
            meta["queue_time"] = json!(entry - received);
            meta["forward_entry_time"] = json!(entry);
            meta["prefill_finished_time"] = json!(entry + prefill_s);
        }
        if i == last {
            meta["finish_reason"] = json!({"type": "length", "length": max_new});
            meta["weight_versions"] = json!([{"version": "default", "start": 0, "end": max_new}]);
            meta["e2e_latency"] = json!(entry - received + prefill_s + decode_s);
            meta["request_received_ts"] = json!(received);
            meta["first_token_latency"] = json!(entry - received + prefill_s);
            meta["api_server_dispatch_finish_ts"] = json!(received);
            meta["response_sent_to_client_ts"] = json!(entry + prefill_s);
            meta["request_finished_ts"] = json!(entry + prefill_s + decode_s);
            meta["decode_throughput"] = json!(last as f64 / decode_s.max(1e-9));
            if s.cfg.spec_draft > 0 {
                meta["spec_verify_ct"] = json!(steps);
                meta["spec_accept_length"] = json!(max_new as f64 / steps as f64);
                meta["spec_accept_rate"] =
                    json!(s.cfg.spec_accepted as f64 / s.cfg.spec_draft as f64);
                meta["spec_num_correct_drafts"] = json!(steps * s.cfg.spec_accepted);
                meta["spec_num_proposed_drafts"] = json!(steps * s.cfg.spec_draft);
                meta["spec_accepted_drafts"] = json!(steps * s.cfg.spec_accepted);
                meta["spec_proposed_drafts"] = json!(steps * s.cfg.spec_draft);
            }
        }
        let delay = if i == 0 {
            prefill_delay(ids.len())
        } else {
            s.cfg.chunk_delay
        };
        // Default SGLang streaming: cumulative text and output_ids.
        events.push((
            delay,
            json!({"text": text, "output_ids": out_ids, "meta_info": meta}).to_string(),
        ));
    }
    if !stream {
        tokio::time::sleep(events.iter().map(|(d, _)| *d).sum()).await;
        drop(running);
        let (_, fin) = events.pop().unwrap();
        return (
            StatusCode::OK,
            Json(serde_json::from_str::<Value>(&fin).unwrap()),
        )
            .into_response();
    }
    events.push((Duration::ZERO, "[DONE]".into()));
    sse(events, running)
}

async fn completions(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Response {
    let arrived = std::time::Instant::now();
    let running = Running::start(&s);
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/v1/completions".into(), body.clone()));
    let ids: Vec<u64> = match body["prompt"].as_array() {
        Some(a) => a.iter().filter_map(Value::as_u64).collect(),
        None => tok(body["prompt"].as_str().unwrap_or("")),
    };
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16);
    let ctx = s.cfg.real_context;
    let vllm = s.cfg.flavor == Flavor::Vllm;
    let model = body["model"].as_str().unwrap_or("scripted-model");
    if vllm && model != "scripted-model" {
        // Recorded: vllm-0.32.0/completions_wrong_model.json (SGLang serves any name).
        let msg = format!("The model `{model}` does not exist. Valid aliases: scripted-model.");
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"message": msg, "type": "NotFoundError", "param": "model", "code": 404}})),
        )
            .into_response();
    }
    if !vllm && ids.len() as u64 >= ctx {
        // Recorded: sglang-0.5.23/completions_context_exceeded.json.
        let msg = format!(
            "The input ({} tokens) is longer than the model's context length ({ctx} tokens).",
            ids.len()
        );
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"object": "error", "message": msg, "type": "BadRequestError", "param": null, "code": 400})),
        )
            .into_response();
    }
    if ids.len() as u64 + max_tokens > ctx {
        // vLLM validates before streaming starts: a reliable HTTP 400 (recorded:
        // vllm-0.32.0/completions_context_exceeded.json).
        let n = ids.len();
        let msg = if n as u64 >= ctx {
            format!("This model's maximum context length is {ctx} tokens. However, your prompt contains {n} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value={n})")
        } else {
            format!("This model's maximum context length is {ctx} tokens. However, you requested {max_tokens} output tokens and your prompt contains {n} input tokens, for a total of {} tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value={n})", n as u64 + max_tokens)
        };
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": msg, "type": "BadRequestError", "param": "input_tokens", "code": 400}})),
        )
            .into_response();
    }
    // Queue time: from arrival to scheduling (this fake schedules at once).
    let queue_ms = arrived.elapsed().as_secs_f64() * 1000.0;
    let (cached, _) = admit(&s, &ids, max_tokens);
    if s.cfg.spec_draft > 0 {
        let steps = spec_steps(&s.cfg, max_tokens);
        let mut l = s.log.lock().unwrap();
        l.drafts_total += steps;
        l.draft_tokens_total += steps * s.cfg.spec_draft;
        l.accepted_total += steps * s.cfg.spec_accepted;
    }
    let base = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": model});
    let stream = body["stream"].as_bool() == Some(true);
    let mut events = Vec::new();
    let bounds = chunks(&s.cfg, max_tokens);
    let mut prev = 0;
    for (i, &n) in bounds.iter().enumerate() {
        let mut c = base.clone();
        let fr = if i == bounds.len() - 1 {
            json!("length")
        } else {
            Value::Null
        };
        c["choices"] = choice(vllm, "a".repeat((n - prev) as usize), fr);
        if !vllm {
            c["usage"] = Value::Null;
        }
        prev = n;
        let delay = if i == 0 {
            prefill_delay(ids.len())
        } else {
            s.cfg.chunk_delay
        };
        events.push((delay, c.to_string()));
    }
    let mut usage = json!({"prompt_tokens": ids.len(), "completion_tokens": max_tokens, "total_tokens": ids.len() as u64 + max_tokens});
    if !vllm {
        usage["reasoning_tokens"] = json!(0);
    }
    // vLLM (--enable-prompt-tokens-details) always sends the field; SGLang
    // (--enable-cache-report) only when it is positive.
    let send = match s.cfg.flavor {
        Flavor::Sglang => s.cfg.cache_report && cached > 0,
        _ => s.cfg.cache_report,
    };
    if send {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    if !stream {
        // The non-streamed answer carries the full details objects (recorded:
        // sglang-0.5.23/completions.json, vllm-0.32.0/completions.json).
        usage["completion_tokens_details"] = Value::Null;
        if vllm && send {
            usage["prompt_tokens_details"] = json!({"cached_tokens": cached, "created_cache_tokens": null, "multimodal_tokens": null});
        } else if !vllm && !send {
            usage["prompt_tokens_details"] = Value::Null;
        }
    }
    let mut u = base.clone();
    u["choices"] = json!([]);
    u["usage"] = usage;
    if s.cfg.flavor == Flavor::Vllm {
        u["system_fingerprint"] = json!("vllm-0.32.0-scripted");
    }
    if s.cfg.per_request_metrics {
        // From the schedule this answer follows. vLLM's tokens_per_second counts prefill:
        // n / (ttft + generation) (recorded: vllm-0.32.0/completions_stream.json gives
        // 8 / (29.5 ms + 34.1 ms) = 125.8), and mean_itl_ms is generation / (n - 1).
        let ttft_ms = prefill_delay(ids.len()).as_secs_f64() * 1000.0 + queue_ms;
        let gen_ms = s.cfg.chunk_delay.as_secs_f64() * 1000.0 * (bounds.len() - 1) as f64;
        u["metrics"] = json!({
            "time_to_first_token_ms": ttft_ms,
            "generation_time_ms": gen_ms,
            "queue_time_ms": queue_ms,
            "mean_itl_ms": gen_ms / max_tokens.saturating_sub(1).max(1) as f64,
            "tokens_per_second": max_tokens as f64 / ((ttft_ms + gen_ms) / 1000.0)
        });
        if !stream {
            u["metrics"]["speculative_decoding"] = Value::Null;
        }
    }
    if !stream {
        // Non-streaming: one JSON body, sent when generation is done.
        tokio::time::sleep(events.iter().map(|(d, _)| *d).sum()).await;
        drop(running);
        let text: String = events
            .iter()
            .filter_map(|(_, e)| serde_json::from_str::<Value>(e).ok())
            .filter_map(|e| e["choices"][0]["text"].as_str().map(str::to_owned))
            .collect();
        let mut out = base.clone();
        out["choices"] = choice(vllm, text, json!("length"));
        out["usage"] = u["usage"].clone();
        if vllm {
            out["choices"][0]["prompt_logprobs"] = Value::Null;
            out["choices"][0]["routed_experts"] = Value::Null;
            for k in ["service_tier", "kv_transfer_params", "ec_transfer_params"] {
                out[k] = Value::Null;
            }
            out["system_fingerprint"] = u["system_fingerprint"].clone();
        } else {
            out["metadata"] = json!({"weight_version": "default", "weight_versions": [{"version": "default", "start": 0, "end": max_tokens}]});
        }
        if let Some(m) = u.get("metrics") {
            out["metrics"] = m.clone();
        }
        return Json(out).into_response();
    }
    events.push((Duration::ZERO, u.to_string()));
    events.push((Duration::ZERO, "[DONE]".into()));
    sse(events, running)
}

/// One `choices` entry: vLLM adds `stop_reason` and the token-id fields, SGLang `matched_stop`.
fn choice(vllm: bool, text: String, finish_reason: Value) -> Value {
    let mut c = json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason});
    if vllm {
        c["stop_reason"] = Value::Null;
        c["prompt_token_ids"] = Value::Null;
        c["token_ids"] = Value::Null;
    } else {
        c["matched_stop"] = Value::Null;
    }
    json!([c])
}

// ---- TGI ----

/// TGI's tokenizer here is word-level (a run of letters is one token, anything else one
/// token per character), so text joined from pieces can merge into fewer tokens — the case
/// ctxbench's re-check must handle. Spans are character offsets, as TGI returns them.
pub fn tgi_words(text: &str) -> Vec<(u64, String, usize, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        if chars[i].is_alphabetic() {
            while i < chars.len() && chars[i].is_alphabetic() {
                i += 1;
            }
        } else {
            i += 1;
        }
        let w: String = chars[start..i].iter().collect();
        let id = 300
            + w.bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
                % 29_000;
        out.push((id, w, start, i));
    }
    out
}

async fn tgi_info(State(s): State<Arc<Srv>>) -> Json<Value> {
    Json(json!({
        "model_id": "scripted/tgi-model", "model_sha": null, "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": 128, "max_best_of": 2, "max_stop_sequences": 4,
        "max_input_tokens": s.cfg.advertised_context - 1, "max_total_tokens": s.cfg.advertised_context,
        "validation_workers": 2, "max_client_batch_size": 4, "router": "text-generation-router",
        "version": "3.3.6-scripted"
    }))
}

async fn tgi_tokenize(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Json<Value> {
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/tokenize".into(), body.clone()));
    let text = body["inputs"].as_str().unwrap_or("");
    let mut toks: Vec<Value> = tgi_words(text)
        .into_iter()
        .map(|(id, w, a, b)| json!({"id": id, "text": w, "start": a, "stop": b}))
        .collect();
    if body["add_special_tokens"].as_bool() != Some(false) {
        toks.insert(0, json!({"id": 1, "text": "<s>", "start": 0, "stop": 0}));
    }
    Json(Value::Array(toks))
}

/// Validates like TGI: 422 for temperature 0 and for too many tokens; returns the input
/// length (BOS included) and max_new_tokens.
fn tgi_validate(s: &Srv, body: &Value) -> Result<(u64, u64), Box<Response>> {
    let p = &body["parameters"];
    let v422 = |msg: String| {
        Box::new(
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"error": msg, "error_type": "validation"})),
            )
                .into_response(),
        )
    };
    if p.get("temperature")
        .and_then(Value::as_f64)
        .is_some_and(|t| t <= 0.0)
    {
        return Err(v422("`temperature` must be strictly positive".into()));
    }
    let n = tgi_words(body["inputs"].as_str().unwrap_or("")).len() as u64 + 1;
    let max_new = p["max_new_tokens"].as_u64().unwrap_or(100);
    if n + max_new > s.cfg.real_context {
        return Err(v422(format!(
            "`inputs` tokens + `max_new_tokens` must be <= {}. Given: {n} `inputs` tokens and {max_new} `max_new_tokens`",
            s.cfg.real_context
        )));
    }
    Ok((n, max_new))
}

async fn tgi_generate_stream(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Response {
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/generate_stream".into(), body.clone()));
    let (n, max_new) = match tgi_validate(&s, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let details = body["parameters"]["details"].as_bool() == Some(true);
    let mut events = Vec::new();
    for i in 0..max_new {
        let last = i + 1 == max_new;
        let ev = json!({
            "index": i + 1,
            "token": {"id": 400 + i, "text": "a", "logprob": -0.5, "special": false},
            "top_tokens": [],
            "generated_text": if last { json!("a".repeat(max_new as usize)) } else { Value::Null },
            "details": if last && details {
                json!({"finish_reason": "length", "generated_tokens": max_new, "seed": null, "input_length": n})
            } else { Value::Null },
        });
        let delay = if i == 0 {
            prefill_delay(n as usize)
        } else {
            s.cfg.chunk_delay
        };
        events.push((delay, format!("{ev}")));
    }
    // TGI sends no [DONE].
    let stream = futures_util::stream::iter(events).then(|(d, data)| async move {
        tokio::time::sleep(d).await;
        Ok::<_, Infallible>(Bytes::from(format!("data:{data}\n\n")))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn tgi_generate(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Response {
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/generate".into(), body.clone()));
    let (n, max_new) = match tgi_validate(&s, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let t = prefill_delay(n as usize) + s.cfg.chunk_delay * max_new as u32;
    tokio::time::sleep(t).await;
    let ms = t.as_millis() as u64;
    (
        StatusCode::OK,
        [
            ("x-prompt-tokens", n.to_string()),
            ("x-generated-tokens", max_new.to_string()),
            ("x-total-time", ms.to_string()),
            ("x-queue-time", "0".to_string()),
            ("x-inference-time", ms.to_string()),
            ("x-time-per-token", (ms / max_new.max(1)).to_string()),
            ("x-compute-time", format!("{}", t.as_secs_f64())),
        ],
        Json(json!({"generated_text": "a".repeat(max_new as usize), "details": {"finish_reason": "length", "generated_tokens": max_new, "seed": null, "prefill": [], "tokens": []}})),
    )
        .into_response()
}

// ---- Ollama ----

async fn ollama_show(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Json<Value> {
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/api/show".into(), body));
    Json(json!({
        "modelfile": "", "parameters": "", "template": "{{ .Prompt }}",
        "details": {"family": "llama", "parameter_size": "1M", "quantization_level": "F16"},
        "model_info": {"general.architecture": "llama", "general.parameter_count": 1_000_000,
                       "llama.context_length": s.cfg.advertised_context, "llama.embedding_length": 128},
        "capabilities": ["completion"]
    }))
}

/// Ollama (v0.3x, llama-server runner): word-level tokenizer plus BOS for `prompt_eval_count`,
/// NDJSON lines, durations in integer nanoseconds. An over-long prompt is not refused: the
/// runner logs "truncating input prompt", keeps the first and the last tokens up to
/// `num_ctx`, and reports the cut length in `prompt_eval_count` (no real Ollama runs here;
/// the source is ollama/ollama issue threads #10368 and #17427).
async fn ollama_generate(State(s): State<Arc<Srv>>, Json(body): Json<Value>) -> Response {
    s.log
        .lock()
        .unwrap()
        .requests
        .push(("/api/generate".into(), body.clone()));
    let text = body["prompt"].as_str().unwrap_or("");
    let num_ctx = body["options"]["num_ctx"]
        .as_u64()
        .unwrap_or(2048)
        .min(s.cfg.real_context);
    let n = (tgi_words(text).len() as u64 + 1).min(num_ctx);
    let max_new = body["options"]["num_predict"].as_u64().unwrap_or(128);
    let stream = body["stream"].as_bool().unwrap_or(true);
    let prefill = prefill_delay(n as usize) + s.cfg.extra_prefill;
    let eval_ns = s.cfg.chunk_delay.as_nanos() as u64 * max_new.saturating_sub(1);
    let fin = json!({
        "model": "tiny:latest", "created_at": "2026-01-01T00:00:00Z", "response": "", "done": true,
        "done_reason": "length", "context": [1, 2, 3],
        "total_duration": prefill.as_nanos() as u64 + eval_ns + 1_000_000, "load_duration": 1_000_000,
        "prompt_eval_count": n, "prompt_eval_duration": prefill.as_nanos() as u64,
        "eval_count": max_new, "eval_duration": eval_ns
    });
    if !stream {
        tokio::time::sleep(prefill + s.cfg.chunk_delay * max_new.saturating_sub(1) as u32).await;
        return Json(fin).into_response();
    }
    let mut lines = Vec::new();
    for i in 0..max_new {
        let delay = if i == 0 { prefill } else { s.cfg.chunk_delay };
        let l = json!({"model": "tiny:latest", "created_at": "2026-01-01T00:00:00Z", "response": "a", "done": false});
        lines.push((delay, l.to_string()));
    }
    lines.push((Duration::ZERO, fin.to_string()));
    let stream = futures_util::stream::iter(lines).then(|(d, l)| async move {
        tokio::time::sleep(d).await;
        Ok::<_, Infallible>(Bytes::from(format!("{l}\n")))
    });
    Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(Body::from_stream(stream))
        .unwrap()
}
