//! Probing a server: which family it is (a loop over the families' detectors), its limits,
//! and what the chosen protocol can do there.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::backend::BackendKind;
use crate::family;
use crate::family::Family;
use crate::family::ServerProfile;
use crate::family::{Answers, Server};
use crate::http::redact_url;
use crate::timings::get_u64;
use crate::FAMILIES;
use ctxbench_schema::error::{ClientError, UsageError};

/// Why probing failed: the server could not be read, or the options do not fit it.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Talking to the server failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// `--backend` does not fit the server (a usage error).
    #[error(transparent)]
    Usage(#[from] UsageError),
}

/// Probes the server behind `answers` (whose base URL is `url`) and picks a backend:
/// `requested`, unless it is `auto`. Waits up to `wait_ready` for a server that is not
/// listening yet or still loading its model; `on_wait` is told once when waiting starts.
pub async fn probe(
    answers: &dyn Answers,
    url: &str,
    requested: BackendKind,
    model_override: Option<&str>,
    wait_ready: Duration,
    on_wait: &mut dyn FnMut(&str),
) -> Result<ServerProfile, ProbeError> {
    let s = Server::new(answers);
    wait_until_ready(&s, wait_ready, on_wait).await?;
    let mut detected = None;
    for f in FAMILIES {
        if let Some(evidence) = f.detect(&s).await? {
            detected = Some((*f, evidence));
            break;
        }
    }
    let chosen: &dyn Family = match (requested, &detected) {
        (BackendKind::Auto, Some((f, _))) => *f,
        (BackendKind::Auto, None) => {
            // The server's own words first, ctxbench's guess after.
            let (status, body) = s.get("/v1/models").await?;
            let said = body
                .map(|b| crate::http::error_message(&b.to_string()))
                .filter(|m| !m.is_empty() && m != "(empty body)")
                .map_or_else(String::new, |m| format!("{m} — "));
            return Err(ClientError::Http {
                endpoint: "/v1/models".into(),
                status,
                message: format!("{said}the server answered neither llama.cpp's /props nor OpenAI's /v1/models with a model list; is --url the server's base URL (without /v1)? Otherwise pick --backend explicitly"),
            }
            .into());
        }
        (k, _) => family(k).ok_or_else(|| {
            UsageError::Invalid(format!("--backend {}: no such protocol", k.as_str()))
        })?,
    };
    let detected_kind = detected.as_ref().map(|(f, _)| f.kind());
    if !chosen.speaks_to(detected_kind) {
        return Err(wrong_backend(chosen, detected.as_ref()).into());
    }

    let mut p = ServerProfile::new(redact_url(url), chosen.kind());
    p.detected = detected_kind;
    p.model = model_override.map(str::to_owned);
    p.metrics = s.get("/metrics").await?.0 == 200;
    if let Some(m) = s.first_model().await? {
        if p.model.is_none() {
            p.model = m.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        p.n_vocab = m.pointer("/meta/n_vocab").and_then(Value::as_u64);
        if let Some((key, n)) = model_context(&m) {
            p.max_context = Some(n);
            p.max_context_source = Some(format!("/v1/models {key}"));
        }
    }
    if let Some((f, evidence)) = &detected {
        p.server_kind = f.id().server.to_owned();
        f.describe(&s, &mut p).await?;
        p.backend_reason = if requested == BackendKind::Auto {
            format!("{evidence}: {}", f.id().chosen)
        } else {
            format!("--backend {} given", requested.as_str())
        };
    } else {
        p.backend_reason = format!("--backend {} given", requested.as_str());
    }
    chosen.capabilities(&s, &mut p).await?;
    p.router = crate::router::detect(&s).await?;
    if let Some(r) = &mut p.router {
        // Until the session reaches the workers, none is known to be readable.
        r.meaning = crate::router::meaning(r, 0, &p.server_kind);
    }
    Ok(p)
}

/// The keys servers use for a model's context length in `/v1/models`, most specific first
/// (vLLM `max_model_len`; LM Studio, SGLang forks and gateways `context_length` and the
/// like; llama.cpp `meta.n_ctx_train` is the training length, not the served one).
const CONTEXT_KEYS: &[&str] = &[
    "max_model_len",
    "context_length",
    "max_context_length",
    "context_window",
    "max_context_len",
    "max_seq_len",
    "max_sequence_length",
    "max_position_embeddings",
    "max_input_tokens",
];

/// A model entry's context length and the key it was read from, looked for at the top
/// level, then in `meta`/`metadata`/`model_info`/`limits` objects.
fn model_context(m: &Value) -> Option<(String, u64)> {
    let nests = ["", "meta", "metadata", "model_info", "limits", "info"];
    for nest in nests {
        let obj = if nest.is_empty() {
            Some(m)
        } else {
            m.get(nest)
        };
        let Some(obj) = obj.filter(|o| o.is_object()) else {
            continue;
        };
        for key in CONTEXT_KEYS {
            if let Some(n) = get_u64(obj, key).filter(|n| *n > 0) {
                let name = if nest.is_empty() {
                    (*key).to_owned()
                } else {
                    format!("{nest}.{key}")
                };
                return Some((name, n));
            }
        }
    }
    None
}

/// The usage error of a `--backend` that does not fit the server, naming what it looks like.
fn wrong_backend(chosen: &dyn Family, detected: Option<&(&dyn Family, String)>) -> UsageError {
    let requested = chosen.kind().as_str();
    UsageError::Invalid(match detected {
        Some((f, evidence)) => format!(
            "--backend {requested} does not fit this server: it looks like {} ({evidence}); use --backend {} or auto",
            f.id().server,
            f.kind().as_str()
        ),
        None => format!(
            "--backend {requested} does not fit this server: no server family recognised its answers (not even /v1/models); check --url, or use --backend auto"
        ),
    })
}

/// Waits while the server is not listening yet (connection refused) or answers `/props`
/// with 503 (model loading), up to `wait_ready`; the last `/props` answer is remembered.
async fn wait_until_ready(
    s: &Server<'_>,
    wait_ready: Duration,
    on_wait: &mut dyn FnMut(&str),
) -> Result<(), ClientError> {
    let start = Instant::now();
    let mut told = false;
    loop {
        let (why, last) = match s.get_fresh("/props").await {
            Ok((503, _)) => ("is loading its model (HTTP 503)", None),
            Ok(answer) => {
                s.remember("/props", answer);
                return Ok(());
            }
            Err(e @ ClientError::Connect { .. }) => ("is not accepting connections yet", Some(e)),
            // /props is llama.cpp's: a refusal there is named by the endpoint every
            // OpenAI-compatible server has, so an SGLang or vLLM user is not sent to /props.
            Err(ClientError::Unauthorized { .. }) => {
                s.get("/v1/models").await?;
                s.remember("/props", (401, None));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if start.elapsed() >= wait_ready {
            // Out of patience: a loading server is probed as it is, a silent one is an error.
            if let Some(e) = last {
                return Err(e);
            }
            s.remember("/props", (503, None));
            return Ok(());
        }
        if !told {
            on_wait(&format!(
                "the server {why}; waiting up to {:.0} s (--wait-ready)",
                wait_ready.as_secs_f64()
            ));
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::openai::calibrated;
    use crate::openai::TokenizeDialect;

    /// A server made of canned answers: GET path → (status, body), POST path → JSON
    /// answer; anything else is a 404. The first `refuse` requests find no listener.
    #[derive(Default)]
    struct Canned {
        get: HashMap<&'static str, (u16, Value)>,
        post: HashMap<&'static str, Value>,
        text: HashMap<&'static str, &'static str>,
        /// POST path → an error status to answer with.
        post_status: HashMap<&'static str, u16>,
        refuse: usize,
        loading: usize,
        asked: AtomicUsize,
    }

    impl Canned {
        fn get(mut self, path: &'static str, body: Value) -> Self {
            self.get.insert(path, (200, body));
            self
        }
        fn post(mut self, path: &'static str, body: Value) -> Self {
            self.post.insert(path, body);
            self
        }
        /// A reachable server that forgets its first requests (not listening, or loading).
        fn first(&self) -> Option<ClientError> {
            let n = self.asked.fetch_add(1, Ordering::SeqCst);
            (n < self.refuse).then(|| ClientError::Connect {
                url: "http://canned".into(),
                detail: "connection refused".into(),
            })
        }
    }

    #[async_trait]
    impl Answers for Canned {
        async fn get(&self, path: &str) -> Result<(u16, Option<Value>), ClientError> {
            if let Some(e) = self.first() {
                return Err(e);
            }
            if path == "/props" && self.asked.load(Ordering::SeqCst) <= self.refuse + self.loading {
                return Ok((503, None));
            }
            Ok(match self.get.get(path) {
                // As `Http::get_probe` answers a refusal.
                Some((401, _)) => {
                    return Err(ClientError::Unauthorized {
                        endpoint: path.into(),
                        status: 401,
                        message: "Unauthorized".into(),
                        hint: String::new(),
                    })
                }
                Some((status, body)) => (*status, Some(body.clone())),
                None => (404, None),
            })
        }
        async fn get_text(&self, path: &str) -> Result<String, ClientError> {
            self.text
                .get(path)
                .map(|t| t.to_string())
                .ok_or(ClientError::Http {
                    endpoint: path.into(),
                    status: 404,
                    message: "not found".into(),
                })
        }
        async fn post(&self, path: &str, _body: &Value) -> Result<Value, ClientError> {
            self.post.get(path).cloned().ok_or(ClientError::Http {
                endpoint: path.into(),
                status: self.post_status.get(path).copied().unwrap_or(404),
                message: "not found".into(),
            })
        }
    }

    fn models(owned_by: &str) -> Value {
        json!({"object": "list", "data": [{"id": "m", "owned_by": owned_by, "max_model_len": 8192}]})
    }

    fn llamacpp() -> Canned {
        Canned::default()
            .get(
                "/props",
                json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4, "build_info": "b1", "model_path": "/m.gguf"}),
            )
            .get("/v1/models", json!({"data": [{"id": "m.gguf", "owned_by": "llamacpp", "meta": {"n_vocab": 32000}}]}))
    }

    fn sglang_info() -> Value {
        json!({"tp_size": 1, "model_path": "/m", "context_length": 32768, "max_total_num_tokens": 500000,
               "enable_metrics": false, "enable_cache_report": true, "speculative_algorithm": "EAGLE", "version": "0.5"})
    }

    fn run(c: &Canned, requested: BackendKind) -> Result<ServerProfile, ProbeError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(probe(
            c,
            "http://u:secret@canned",
            requested,
            None,
            Duration::ZERO,
            &mut |_| {},
        ))
    }

    fn usage_error(r: Result<ServerProfile, ProbeError>) -> String {
        match r {
            Err(ProbeError::Usage(e)) => e.to_string(),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn urls_lose_credentials() {
        assert_eq!(redact_url("http://u:secret@h:80/x"), "http://h:80/x");
        assert_eq!(redact_url("https://h"), "https://h");
    }

    #[test]
    fn llamacpp_is_recognised_by_props() {
        let p = run(&llamacpp(), BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Llamacpp);
        assert_eq!(p.server_kind, "llama.cpp");
        assert!(p
            .backend_reason
            .contains("GET /props answered with default_generation_settings"));
        assert_eq!(p.url, "http://canned");
        assert_eq!(
            (p.max_context, p.total_slots, p.n_vocab),
            (Some(4096), Some(4), Some(32000))
        );
        assert_eq!(p.server_version.as_deref(), Some("b1"));
        assert_eq!(p.tokenize, Some(TokenizeDialect::Llamacpp));
        assert!(p.token_id_prompts && p.cache_bypass);
        assert!(p.flush.as_deref().unwrap().contains("--slot-save-path"));
        assert!(
            p.notes.iter().any(|n| n.contains("--metrics")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn the_openai_protocol_on_llamacpp_announces_no_slot_erase() {
        let p = run(&llamacpp(), BackendKind::Openai).unwrap();
        assert_eq!(p.backend, BackendKind::Openai);
        assert_eq!(p.server_kind, "llama.cpp");
        assert_eq!(p.backend_reason, "--backend openai given");
        assert_eq!(p.flush, None, "the OpenAI protocol has no flush");
        assert!(
            p.cache_bypass,
            "cache_prompt is still sent on /v1/completions"
        );
        assert_eq!(p.tokenize, Some(TokenizeDialect::Llamacpp));
        assert_eq!(p.max_context, Some(4096));
    }

    #[test]
    fn a_backend_that_does_not_fit_is_a_usage_error_naming_the_server() {
        let e = usage_error(run(&llamacpp(), BackendKind::Sglang));
        assert!(
            e.contains("it looks like llama.cpp (GET /props answered with default_generation_settings); use --backend llamacpp or auto"),
            "{e}"
        );
        let tgi =
            Canned::default().get("/info", json!({"model_id": "m", "max_total_tokens": 4096}));
        let e = usage_error(run(&tgi, BackendKind::Llamacpp));
        assert!(
            e.contains("looks like tgi") && e.contains("--backend tgi"),
            "{e}"
        );
        let e = usage_error(run(&Canned::default(), BackendKind::Ollama));
        assert!(e.contains("no server family recognised"), "{e}");
    }

    #[test]
    fn routers_are_recognised_with_their_workers() {
        // Recorded: sglang-router 0.3.2 (its own /v1/models, /get_server_info, /workers).
        let sg = Canned::default()
            .get(
                "/v1/models",
                json!({"object":"list","data":[{"id":"unknown","object":"model","owned_by":"local"}]}),
            )
            .get(
                "/get_server_info",
                json!({"router_manager":true,"routers_count":1,"workers_count":2}),
            )
            .get(
                "/workers",
                json!({"workers":[{"url":"http://127.0.0.1:18312","model_id":"unknown","is_healthy":true,"load":0},{"url":"http://127.0.0.1:18311","model_id":"unknown","is_healthy":true,"load":0}],"total":2}),
            );
        let p = run(&sg, BackendKind::Auto).unwrap();
        let r = p.router.as_ref().expect("a router");
        assert_eq!(r.kind, "sglang-router");
        assert!(r.evidence.contains("router_manager"), "{}", r.evidence);
        assert_eq!(r.workers.len(), 2);
        assert_eq!(p.backend, BackendKind::Openai, "not SGLang itself");
        assert!(r.meaning.contains("--worker"), "{}", r.meaning);
        // Recorded: vllm-router 0.1.17 forwarding /props to a llama-server worker.
        let vr = llamacpp().get(
            "/list_workers",
            json!({"urls":["http://127.0.0.1:18311","http://127.0.0.1:18312"]}),
        );
        let p = run(&vr, BackendKind::Auto).unwrap();
        let r = p.router.as_ref().expect("a router");
        assert_eq!(r.kind, "vllm-router");
        assert_eq!(
            r.workers,
            vec!["http://127.0.0.1:18311", "http://127.0.0.1:18312"]
        );
        assert_eq!(p.server_kind, "llama.cpp", "the workers' family");
        // A worker list alone names a generic router; a single server has none.
        let generic = llamacpp().get("/workers", json!({"workers":[{"url":"http://w1"}]}));
        assert_eq!(
            run(&generic, BackendKind::Auto)
                .unwrap()
                .router
                .unwrap()
                .kind,
            "router"
        );
        assert!(run(&llamacpp(), BackendKind::Auto)
            .unwrap()
            .router
            .is_none());
    }

    #[test]
    fn sglang_is_recognised_by_server_info_old_path_or_owned_by() {
        for path in ["/server_info", "/get_server_info"] {
            let c = Canned::default()
                .get(path, sglang_info())
                .get("/v1/models", models("sglang"))
                .post("/tokenize", json!({"tokens": [1, 2]}));
            let p = run(&c, BackendKind::Auto).unwrap();
            assert_eq!(p.backend, BackendKind::Sglang, "{path}");
            assert!(p.backend_reason.contains(path), "{}", p.backend_reason);
            assert_eq!(p.max_context, Some(32768));
            assert_eq!(p.kv_pool_tokens, Some(500000));
            assert!(p.cached_missing_means_zero);
            assert_eq!(p.tokenize, Some(TokenizeDialect::Sglang));
            assert!(p.spec_stats.as_deref().unwrap().contains("EAGLE"));
            assert!(p.notes.iter().any(|n| n.contains("--enable-metrics")));
            assert!(p.flush.as_deref().unwrap().contains("/flush_cache"));
        }
        // Fallback: no server args, only owned_by; and no /tokenize.
        let c = Canned::default().get("/v1/models", models("sglang"));
        let p = run(&c, BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Sglang);
        assert!(p.backend_reason.contains("owned_by \"sglang\""));
        assert_eq!(p.max_context, Some(8192), "from /v1/models max_model_len");
        assert!(p.notes.iter().any(|n| n.contains("no /server_info")));
        assert!(p.notes.iter().any(|n| n.contains("no /tokenize")));
    }

    #[test]
    fn a_refused_key_is_named_by_v1_models_not_llama_cpps_props() {
        // Recorded SGLang 0.5.23 with --api-key: every path answers 401.
        let mut c = Canned::default();
        c.get.insert("/props", (401, json!(null)));
        c.get.insert("/v1/models", (401, json!(null)));
        let e = run(&c, BackendKind::Auto).unwrap_err().to_string();
        assert!(e.contains("/v1/models") && !e.contains("/props"), "{e}");
    }

    #[test]
    fn vllm_is_recognised_by_owned_by_and_reads_its_kv_pool() {
        let mut c = Canned::default()
            .get("/v1/models", models("vllm"))
            .get("/version", json!({"version": "0.32.0"}))
            .get("/metrics", json!(null))
            .post("/tokenize", json!({"tokens": [1], "count": 1}));
        c.text.insert(
            "/metrics",
            "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1.0\n",
        );
        let p = run(&c, BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Vllm);
        assert_eq!(p.server_kind, "vllm");
        assert!(p.metrics);
        assert_eq!(p.kv_pool_tokens, Some(16000));
        assert_eq!(p.tokenize, Some(TokenizeDialect::Vllm));
        // Whether usage carries cached counts is known only after the warmup: no note here.
        assert!(!p
            .notes
            .iter()
            .any(|n| n.contains("--enable-prompt-tokens-details")));
        assert!(p.flush.as_deref().unwrap().contains("VLLM_SERVER_DEV_MODE"));
        assert_eq!(
            p.server_version.as_deref(),
            Some("0.32.0"),
            "from GET /version"
        );
    }

    #[test]
    fn tgi_is_recognised_by_info_under_old_and_new_names() {
        let c = Canned::default().get(
            "/info",
            json!({"model_id": "org/m", "max_total_tokens": 4096, "max_input_tokens": 4000, "version": "3.0"}),
        );
        let p = run(&c, BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Tgi);
        assert_eq!(
            (p.model.as_deref(), p.max_context),
            (Some("org/m"), Some(4096))
        );
        assert!(!p.token_id_prompts && p.prompt_method.starts_with("text"));
        assert!(p.notes.iter().any(|n| n.contains("at most 4000 tokens")));
        let old =
            Canned::default().get("/info", json!({"model_id": "m", "max_input_length": 1000}));
        assert_eq!(
            run(&old, BackendKind::Auto).unwrap().backend,
            BackendKind::Tgi
        );
        // model_id alone is not TGI.
        let not = Canned::default().get("/info", json!({"model_id": "m"}));
        assert!(run(&not, BackendKind::Auto).is_err());
    }

    #[test]
    fn ollama_is_recognised_by_api_version() {
        let c = Canned::default()
            .get("/api/version", json!({"version": "0.12.10"}))
            .get("/api/tags", json!({"models": [{"name": "qwen:0.5b"}]}))
            .get("/v1/models", models("library"))
            .post(
                "/api/show",
                json!({"model_info": {"qwen2.context_length": 32768}}),
            );
        let p = run(&c, BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Ollama);
        assert!(p.backend_reason.contains("version 0.12.10"));
        assert_eq!(p.server_version.as_deref(), Some("0.12.10"));
        // /v1/models' id wins over /api/tags, as before.
        assert_eq!(p.model.as_deref(), Some("m"));
        assert_eq!(p.max_context, Some(32768));
        assert!(p.notes.iter().any(|n| n.contains("calibration requests")));
    }

    #[test]
    fn a_generic_openai_server_is_the_fallback() {
        let c = Canned::default()
            .get("/v1/models", models("someone"))
            .post("/tokenize", json!({"tokens": [3]}))
            .post("/detokenize", json!({"prompt": "hello world"}))
            .post(
                "/v1/completions",
                json!({"choices": [{"text": "x"}], "usage": {"prompt_tokens": 2}}),
            );
        let p = run(&c, BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Openai);
        assert_eq!(p.server_kind, "openai-compatible");
        assert!(p.token_id_prompts && p.flush.is_none());
        assert!(
            p.prompt_method.starts_with("token ids"),
            "{}",
            p.prompt_method
        );
        assert_eq!(p.tokenizer.as_ref().unwrap().tokenize_path, "/tokenize");
        // vLLM's protocol may be asked for on a server no detector named.
        assert_eq!(
            run(&c, BackendKind::Vllm).unwrap().backend,
            BackendKind::Vllm
        );
        // Without /tokenize: no token-id prompts (connecting refuses it later), and the
        // probe says so in one voice.
        let bare = Canned::default().get("/v1/models", models("someone"));
        let p = run(&bare, BackendKind::Auto).unwrap();
        assert!(!p.token_id_prompts);
        assert!(
            p.prompt_method
                .starts_with("text calibrated against the server's usage.prompt_tokens"),
            "{}",
            p.prompt_method
        );
        assert!(
            calibrated(&p),
            "no tokenizer, token ids refused: calibrated"
        );
        assert!(
            p.token_ids_stated().starts_with("no ("),
            "{}",
            p.token_ids_stated()
        );
        assert!(
            p.completions_missing,
            "no /v1/completions in the canned answers"
        );
        // Token ids taken but no tokenizer: no corpus ids are known, so text is calibrated.
        let takes_ids = Canned::default().get("/v1/models", models("someone")).post(
            "/v1/completions",
            json!({"choices": [{"text": "x"}], "usage": {"prompt_tokens": 5}}),
        );
        let q = run(&takes_ids, BackendKind::Auto).unwrap();
        assert!(!q.token_id_prompts && calibrated(&q), "{}", q.prompt_method);
        assert_eq!(
            q.token_id_test.as_deref(),
            Some("4 token ids sent, usage.prompt_tokens 5: taken as ids")
        );
        // Said once: the capabilities name the test and why ids are not sent; neither the
        // prompt method nor a note says it again, nor that ids were refused.
        assert_eq!(
            q.token_ids_stated(),
            "no: the server takes them (4 token ids sent, usage.prompt_tokens 5: taken as ids), but no tokenizer endpoint gives this model's ids"
        );
        assert!(
            !q.prompt_method.contains("token ids"),
            "{}",
            q.prompt_method
        );
        assert!(
            !q.notes.iter().any(|n| n.contains("token-id prompts")),
            "{:?}",
            q.notes
        );
        // Taking ids is what the server does with them: a list it counts as 9 tokens was
        // read as text, and one answered without a count proves nothing.
        for (usage, says) in [
            (json!({"prompt_tokens": 9}), "not read as ids"),
            (json!(null), "whether they were read as ids is unknown"),
        ] {
            let c = Canned::default()
                .get("/v1/models", models("someone"))
                .post("/tokenize", json!({"tokens": [3, 4, 5, 6]}))
                .post("/detokenize", json!({"prompt": "hello world"}))
                .post(
                    "/v1/completions",
                    json!({"choices": [{"text": "x"}], "usage": usage}),
                );
            let p = run(&c, BackendKind::Auto).unwrap();
            assert!(!p.token_id_prompts, "{usage}");
            assert!(p.prompt_method.starts_with("text of exact length"));
            assert!(p.token_id_test.as_deref().unwrap().contains(says));
        }
    }

    #[test]
    fn max_context_is_read_wherever_v1_models_puts_it() {
        for (entry, source) in [
            (
                json!({"id": "m", "max_model_len": 8192}),
                "/v1/models max_model_len",
            ),
            (
                json!({"id": "m", "context_length": 8192}),
                "/v1/models context_length",
            ),
            (
                json!({"id": "m", "max_context_length": 8192}),
                "/v1/models max_context_length",
            ),
            (
                json!({"id": "m", "context_window": 8192}),
                "/v1/models context_window",
            ),
            (
                json!({"id": "m", "meta": {"context_length": 8192}}),
                "/v1/models meta.context_length",
            ),
        ] {
            let c = Canned::default().get("/v1/models", json!({"data": [entry]}));
            let p = run(&c, BackendKind::Auto).unwrap();
            assert_eq!(p.max_context, Some(8192), "{source}");
            assert_eq!(p.max_context_source.as_deref(), Some(source));
        }
        let none = Canned::default().get("/v1/models", json!({"data": [{"id": "m"}]}));
        assert_eq!(run(&none, BackendKind::Auto).unwrap().max_context, None);
    }

    #[test]
    fn llama_cpp_python_gets_exact_text_prompts_through_extras() {
        // What llama-cpp-python answers: /extras/tokenize with BOS, /extras/detokenize,
        // /v1/completions refusing a token-id prompt (HTTP 500; here any non-2xx).
        let mut c = Canned::default()
            .get(
                "/v1/models",
                json!({"data": [{"id": "m.gguf", "owned_by": "me"}]}),
            )
            .post("/extras/tokenize", json!({"tokens": [1, 22172, 3186]}))
            .post("/extras/detokenize", json!({"text": " hello world"}));
        c.post_status.insert("/v1/completions", 500);
        let p = run(&c, BackendKind::Auto).unwrap();
        assert_eq!(p.backend, BackendKind::Openai);
        let t = p.tokenizer.as_ref().expect("a tokenizer pair");
        assert_eq!(
            (t.tokenize_path.as_str(), t.detokenize_path.as_str()),
            ("/extras/tokenize", "/extras/detokenize")
        );
        assert_eq!(t.dialect, TokenizeDialect::Extras);
        // The canned answer is the same for "" as for "hello world": 3 specials here; the
        // real server answers [BOS] (the real-server test checks the lengths).
        assert_eq!(t.added_specials, 3);
        assert!(
            p.prompt_method.starts_with("text of exact length"),
            "{}",
            p.prompt_method
        );
        assert_eq!(
            p.max_context, None,
            "llama-cpp-python reports no context length"
        );
        assert!(!p.token_id_prompts && !p.completions_missing);
    }

    #[test]
    fn a_server_that_answers_nothing_known_is_named() {
        let e = run(&Canned::default(), BackendKind::Auto).unwrap_err();
        assert!(
            e.to_string()
                .contains("neither llama.cpp's /props nor OpenAI's /v1/models"),
            "{e}"
        );
    }

    #[test]
    fn waits_for_a_server_not_listening_yet_then_loading() {
        let mut c = llamacpp();
        c.refuse = 2;
        c.loading = 1;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let mut told = Vec::new();
        let p = rt
            .block_on(probe(
                &c,
                "http://canned",
                BackendKind::Auto,
                None,
                Duration::from_secs(30),
                &mut |m| told.push(m.to_owned()),
            ))
            .unwrap();
        assert_eq!(p.backend, BackendKind::Llamacpp);
        assert_eq!(told.len(), 1, "told once: {told:?}");
        assert!(told[0].contains("not accepting connections") && told[0].contains("--wait-ready"));
        // Without patience, a silent server is a connect error.
        let mut c = llamacpp();
        c.refuse = 1;
        let e = run(&c, BackendKind::Auto).unwrap_err();
        assert!(
            matches!(e, ProbeError::Client(ClientError::Connect { .. })),
            "{e:?}"
        );
    }
}
