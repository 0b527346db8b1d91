//! Probing a server: who it is, its limits, and what it can report.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::client::openai::TokenizeDialect;
use crate::client::{get_u64, BackendKind, Http};
use crate::error::ClientError;

/// What the probe learned; recorded in the run header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Probe {
    /// The server's base URL (credentials removed).
    pub url: String,
    /// The protocol chosen.
    pub backend: BackendKind,
    /// Why that protocol was chosen.
    pub backend_reason: String,
    /// Server software, as identified (`llama.cpp`, `openai-compatible`).
    pub server_kind: String,
    /// Version/build string, if the server gives one.
    pub server_version: Option<String>,
    /// Model name or path.
    pub model: Option<String>,
    /// Largest prompt + output one request can hold.
    pub max_context: Option<u64>,
    /// Where `max_context` came from.
    pub max_context_source: Option<String>,
    /// Parallel slots (llama.cpp).
    pub total_slots: Option<u64>,
    /// Vocabulary size, when reported.
    pub n_vocab: Option<u64>,
    /// How the server's `/tokenize` is called; `None` when there is none.
    pub tokenize: Option<TokenizeDialect>,
    /// Prompts can be sent as token ids.
    pub token_id_prompts: bool,
    /// The API has a per-request "do not reuse the cache" switch (llama.cpp `cache_prompt`).
    pub cache_bypass: bool,
    /// Cached-token counts are reported per request (set after the warmup confirms it).
    pub reports_cached_tokens: Option<bool>,
    /// Server-side timings are reported per request (set after the warmup).
    pub reports_timings: Option<bool>,
    /// Tokens the server adds to a token-id prompt (BOS), measured by the warmup.
    pub server_added_tokens: Option<u64>,
    /// Prometheus `/metrics` answered.
    pub metrics: bool,
    /// KV-cache pool size in tokens, where the server says (SGLang `max_total_num_tokens`,
    /// vLLM `cache_config_info`).
    #[serde(default)]
    pub kv_pool_tokens: Option<u64>,
    /// How prompts of exact length are made (`token ids`, or text re-checked by tokenizing).
    #[serde(default)]
    pub prompt_method: String,
    /// How the prefix cache can be flushed (`None`: no endpoint for this server).
    #[serde(default)]
    pub flush: Option<String>,
    /// Where per-request speculative statistics come from (`None`: not exposed).
    #[serde(default)]
    pub spec_stats: Option<String>,
    /// The OpenAI API omits `cached_tokens` when 0, so a missing count means 0 (SGLang with
    /// `--enable-cache-report`).
    #[serde(default)]
    pub cached_missing_means_zero: bool,
    /// Capability notes, each naming the server flag that would enable what is missing.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Probes `http` and picks a backend (`requested` unless it is `auto`).
pub async fn probe(
    http: &Http,
    requested: BackendKind,
    model_override: Option<&str>,
    wait_ready: Duration,
) -> Result<Probe, ClientError> {
    let t = Duration::from_secs(10);
    let props = wait_props(http, t, wait_ready).await?;
    let (models_status, models) = http.get_probe("/v1/models", t).await?;
    let (metrics_status, _) = http.get_probe("/metrics", t).await?;
    let first_model = models
        .as_ref()
        .and_then(|m| m.get("data"))
        .and_then(Value::as_array)
        .and_then(|d| d.first())
        .cloned();

    let is_llamacpp = props
        .as_ref()
        .is_some_and(|p| p.get("default_generation_settings").is_some());
    let owned_by = first_model
        .as_ref()
        .and_then(|m| m.get("owned_by"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let server_info = if is_llamacpp {
        None
    } else {
        sglang_server_info(http, t).await?
    };
    let is_sglang = server_info.is_some() || owned_by.as_deref() == Some("sglang");
    let is_vllm = !is_llamacpp && !is_sglang && owned_by.as_deref() == Some("vllm");
    let tgi_info = if is_llamacpp || is_sglang || is_vllm {
        None
    } else {
        match http.get_probe("/info", t).await? {
            (200, Some(v))
                if v.get("model_id").is_some()
                    && (v.get("max_total_tokens").is_some()
                        || v.get("max_input_length").is_some()) =>
            {
                Some(v)
            }
            _ => None,
        }
    };
    let is_tgi = tgi_info.is_some();
    let ollama_version = if is_llamacpp || is_sglang || is_vllm || is_tgi {
        None
    } else {
        match http.get_probe("/api/version", t).await? {
            (200, Some(v)) => v.get("version").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        }
    };
    let is_ollama = ollama_version.is_some();
    let mut p = Probe {
        url: redact_url(http.base()),
        backend: requested,
        backend_reason: String::new(),
        server_kind: if is_llamacpp {
            "llama.cpp".into()
        } else if is_sglang {
            "sglang".into()
        } else if is_vllm {
            "vllm".into()
        } else if is_tgi {
            "tgi".into()
        } else if is_ollama {
            "ollama".into()
        } else {
            "openai-compatible".into()
        },
        server_version: None,
        model: model_override.map(str::to_owned),
        max_context: None,
        max_context_source: None,
        total_slots: None,
        n_vocab: None,
        tokenize: None,
        token_id_prompts: false,
        cache_bypass: false,
        reports_cached_tokens: None,
        reports_timings: None,
        server_added_tokens: None,
        metrics: metrics_status == 200,
        kv_pool_tokens: None,
        prompt_method: "token ids".into(),
        cached_missing_means_zero: false,
        flush: None,
        spec_stats: None,
        notes: Vec::new(),
    };
    if let Some(m) = &first_model {
        if p.model.is_none() {
            p.model = m.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        p.n_vocab = m.pointer("/meta/n_vocab").and_then(Value::as_u64);
        if let Some(n) = get_u64(m, "max_model_len") {
            p.max_context = Some(n);
            p.max_context_source = Some("/v1/models max_model_len".into());
        }
    }
    if let Some(props) = props.as_ref().filter(|_| is_llamacpp) {
        p.server_version = props
            .get("build_info")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if p.model.is_none() {
            p.model = props
                .get("model_path")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        // n_ctx here is per slot: what one request can use.
        if let Some(n) = props
            .pointer("/default_generation_settings/n_ctx")
            .and_then(Value::as_u64)
        {
            p.max_context = Some(n);
            p.max_context_source =
                Some("llama.cpp /props default_generation_settings.n_ctx (per slot)".into());
        }
        p.total_slots = get_u64(props, "total_slots");
        p.tokenize = Some(TokenizeDialect::Llamacpp);
        p.token_id_prompts = true;
        p.cache_bypass = true;
        p.flush = Some("POST /slots/{id}?action=erase, every slot (needs --slot-save-path)".into());
        p.spec_stats =
            Some("llamacpp timings draft_n/draft_n_accepted (when a draft is configured)".into());
        if !p.metrics {
            p.notes
                .push("/metrics is off: start llama-server with --metrics".into());
        }
    } else if is_sglang {
        apply_sglang_info(&mut p, server_info.as_ref());
        if try_vllm_tokenize(http, p.model.as_deref()).await {
            p.tokenize = Some(TokenizeDialect::Vllm);
        } else {
            p.notes.push(
                "no /tokenize (SGLang before mid-2025): use --corpus random, or upgrade SGLang"
                    .into(),
            );
        }
        p.token_id_prompts = true;
    } else if try_vllm_tokenize(http, p.model.as_deref()).await {
        // vLLM and SGLang: `/tokenize` with `prompt`, and token-id prompts accepted.
        p.tokenize = Some(TokenizeDialect::Vllm);
        p.token_id_prompts = true;
    }
    if let Some(info) = &tgi_info {
        p.server_version = info
            .get("version")
            .and_then(Value::as_str)
            .map(str::to_owned);
        p.model = p.model.take().or_else(|| {
            info.get("model_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        // Newer names first, then 1.x/2.0's.
        if let Some(n) = get_u64(info, "max_total_tokens") {
            p.max_context = Some(n);
            p.max_context_source = Some("tgi /info max_total_tokens (prompt + output)".into());
        }
        if let Some(n) =
            get_u64(info, "max_input_tokens").or_else(|| get_u64(info, "max_input_length"))
        {
            p.notes.push(format!(
                "TGI accepts prompts of at most {n} tokens (max_input_tokens)"
            ));
        }
        p.token_id_prompts = false;
        p.prompt_method = "text: tokenize → trim → re-tokenize (TGI takes no token ids)".into();
        p.notes.push("TGI reports no cached tokens and has no flush: cold prefill rests on the nonce (samples are cache_unverified)".into());
        p.notes
            .push("TGI has no ignore_eos: an early EOS gives a short_output sample".into());
    }
    if is_ollama {
        p.server_version = ollama_version.clone();
        apply_ollama(http, &mut p, t).await?;
    }
    if is_vllm {
        p.flush = Some("POST /reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1)".into());
        p.spec_stats = Some("vllm:spec_decode_* /metrics deltas".into());
        p.notes
            .push("cached-token counts need vLLM's --enable-prompt-tokens-details".into());
        if p.metrics {
            if let Ok(text) = http.get_text("/metrics", t).await {
                if let Ok(snap) = crate::metrics::parse(&text) {
                    p.kv_pool_tokens = crate::metrics::vllm_kv_pool_tokens(&snap);
                }
            }
        }
    }

    let (backend, reason) = match requested {
        BackendKind::Auto if is_llamacpp => (
            BackendKind::Llamacpp,
            "GET /props answered with default_generation_settings: llama.cpp's llama-server".to_owned(),
        ),
        BackendKind::Auto if is_sglang => (
            BackendKind::Sglang,
            if server_info.is_some() {
                "GET /server_info answered with SGLang's server args: SGLang (native /generate with input_ids)".to_owned()
            } else {
                "/v1/models says owned_by \"sglang\": SGLang (native /generate with input_ids)".to_owned()
            },
        ),
        BackendKind::Auto if is_vllm => (
            BackendKind::Vllm,
            "/v1/models says owned_by \"vllm\": vLLM (/v1/completions with token ids)".to_owned(),
        ),
        BackendKind::Auto if is_tgi => (
            BackendKind::Tgi,
            "GET /info answered with model_id and token limits: Hugging Face TGI (/generate_stream, text prompts)".to_owned(),
        ),
        BackendKind::Auto if is_ollama => (
            BackendKind::Ollama,
            "GET /api/version answered: Ollama (/api/generate, raw text, lengths calibrated on prompt_eval_count)".to_owned(),
        ),
        BackendKind::Auto if models_status == 200 => (
            BackendKind::Openai,
            "GET /v1/models answered: an OpenAI-compatible server".to_owned(),
        ),
        BackendKind::Auto => {
            return Err(ClientError::Http {
                endpoint: "/props, /v1/models".into(),
                status: models_status,
                message: "the server answered neither llama.cpp's /props nor OpenAI's /v1/models; is --url the server's base URL (without /v1)? Otherwise pick --backend explicitly".into(),
            })
        }
        BackendKind::Llamacpp if !is_llamacpp => {
            return Err(ClientError::Http {
                endpoint: "/props".into(),
                status: 404,
                message: "--backend llamacpp, but this server does not answer llama.cpp's /props; try --backend openai or auto".into(),
            })
        }
        BackendKind::Sglang if !is_sglang => {
            return Err(ClientError::Http {
                endpoint: "/server_info".into(),
                status: 404,
                message: "--backend sglang, but this server answers neither /server_info nor /get_server_info and /v1/models is not owned by sglang; try --backend auto".into(),
            })
        }
        BackendKind::Ollama if !is_ollama => {
            return Err(ClientError::Http {
                endpoint: "/api/version".into(),
                status: 404,
                message: "--backend ollama, but GET /api/version does not answer like Ollama; try --backend auto".into(),
            })
        }
        BackendKind::Tgi if !is_tgi => {
            return Err(ClientError::Http {
                endpoint: "/info".into(),
                status: 404,
                message: "--backend tgi, but GET /info does not answer like TGI; try --backend auto".into(),
            })
        }
        BackendKind::Sglang | BackendKind::Vllm if !p.token_id_prompts => {
            return Err(ClientError::Http {
                endpoint: "/tokenize".into(),
                status: 404,
                message: format!("--backend {}, but this server has no /tokenize", requested.as_str()),
            })
        }
        other => (other, format!("--backend {} given", other.as_str())),
    };
    p.backend = backend;
    p.backend_reason = reason;
    Ok(p)
}

/// Ollama: the model (first of `/api/tags` unless `--model`), its trained context from
/// `/api/show`, and the honest list of what it cannot report.
async fn apply_ollama(http: &Http, p: &mut Probe, t: Duration) -> Result<(), ClientError> {
    if p.model.as_deref().is_none_or(|m| m.is_empty()) {
        let (_, tags) = http.get_probe("/api/tags", t).await?;
        p.model = tags
            .as_ref()
            .and_then(|v| v.pointer("/models/0/name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    if let Some(m) = p.model.clone() {
        if let Ok(show) = http.post_json("/api/show", &json!({"model": m}), t).await {
            let ctx = show
                .get("model_info")
                .and_then(Value::as_object)
                .and_then(|o| {
                    o.iter()
                        .find(|(k, _)| k.ends_with(".context_length"))
                        .and_then(|(_, v)| v.as_u64())
                });
            if let Some(n) = ctx {
                p.max_context = Some(n);
                p.max_context_source =
                    Some("ollama /api/show model_info.<arch>.context_length (trained)".into());
            }
        }
    }
    p.token_id_prompts = false;
    p.prompt_method = "text: calibrated against the server's prompt_eval_count (Ollama has no tokenizer); tolerance 1%".into();
    p.notes.push("Ollama reports no cached tokens and has no flush: cold prefill rests on the nonce (samples are cache_unverified)".into());
    p.notes
        .push("Ollama has no ignore_eos: an early EOS gives a short_output sample".into());
    p.notes.push(
        "each new length costs up to 5 calibration requests (num_predict 1) before it is measured"
            .into(),
    );
    Ok(())
}

/// SGLang's flat server-args object: `/server_info`, or the older `/get_server_info`.
async fn sglang_server_info(http: &Http, t: Duration) -> Result<Option<Value>, ClientError> {
    for path in ["/server_info", "/get_server_info"] {
        let (status, body) = http.get_probe(path, t).await?;
        if let Some(v) = body.filter(|v| status == 200 && is_sglang_info(v)) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

fn is_sglang_info(v: &Value) -> bool {
    v.get("max_total_num_tokens").is_some()
        || v.get("internal_states").is_some()
        || (v.get("tp_size").is_some() && v.get("model_path").is_some())
}

/// Reads limits and capabilities from SGLang's server args.
fn apply_sglang_info(p: &mut Probe, info: Option<&Value>) {
    p.flush = Some("GET/POST /flush_cache (only while idle)".into());
    p.spec_stats = Some("sglang meta_info spec_* (when a speculative algorithm is set)".into());
    let Some(info) = info else {
        p.notes
            .push("no /server_info: KV pool size and server flags unknown".into());
        return;
    };
    p.server_version = info
        .get("version")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if p.model.is_none() {
        p.model = info
            .get("served_model_name")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    p.kv_pool_tokens = get_u64(info, "max_total_num_tokens").or_else(|| {
        info.pointer("/internal_states/0/max_total_num_tokens")
            .and_then(Value::as_u64)
    });
    if let Some(n) = get_u64(info, "context_length") {
        p.max_context = Some(n);
        p.max_context_source = Some("sglang /server_info context_length".into());
    } else if let (None, Some(n)) = (p.max_context, get_u64(info, "max_req_input_len")) {
        p.max_context = Some(n);
        p.max_context_source = Some("sglang /server_info max_req_input_len".into());
    }
    if info.get("enable_metrics").and_then(Value::as_bool) == Some(false) {
        p.notes.push(
            "/metrics and meta_info timings are off: start SGLang with --enable-metrics".into(),
        );
    }
    p.cached_missing_means_zero =
        info.get("enable_cache_report").and_then(Value::as_bool) == Some(true);
    if info.get("enable_cache_report").and_then(Value::as_bool) == Some(false) {
        p.notes.push("cached tokens in OpenAI usage need SGLang's --enable-cache-report (native /generate reports meta_info.cached_tokens anyway)".into());
    }
    if info
        .get("speculative_algorithm")
        .is_some_and(|a| !a.is_null())
    {
        p.spec_stats = Some(format!(
            "sglang meta_info spec_* ({} on)",
            info["speculative_algorithm"]
                .as_str()
                .unwrap_or("speculative")
        ));
    }
}

/// GET /props, waiting while the server answers 503 (model loading).
async fn wait_props(
    http: &Http,
    t: Duration,
    wait_ready: Duration,
) -> Result<Option<Value>, ClientError> {
    let start = Instant::now();
    loop {
        let (status, body) = http.get_probe("/props", t).await?;
        if status != 503 || start.elapsed() >= wait_ready {
            return Ok(if status == 200 { body } else { None });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn try_vllm_tokenize(http: &Http, model: Option<&str>) -> bool {
    let mut body = json!({"prompt": "hello", "add_special_tokens": false});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    match http
        .post_json("/tokenize", &body, Duration::from_secs(10))
        .await
    {
        Ok(v) => v.get("tokens").is_some_and(Value::is_array),
        Err(_) => false,
    }
}

/// Removes `user:password@` from a URL before it is recorded anywhere.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials() {
        assert_eq!(redact_url("http://u:secret@h:80/x"), "http://h:80/x");
        assert_eq!(redact_url("https://h"), "https://h");
    }
}
