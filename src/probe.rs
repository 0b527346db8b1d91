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
    let mut p = Probe {
        url: redact_url(http.base()),
        backend: requested,
        backend_reason: String::new(),
        server_kind: if is_llamacpp {
            "llama.cpp".into()
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
    } else if try_vllm_tokenize(http, p.model.as_deref()).await {
        // vLLM and SGLang: `/tokenize` with `prompt`, and token-id prompts accepted.
        p.tokenize = Some(TokenizeDialect::Vllm);
        p.token_id_prompts = true;
    }

    let (backend, reason) = match requested {
        BackendKind::Auto if is_llamacpp => (
            BackendKind::Llamacpp,
            "GET /props answered with default_generation_settings: llama.cpp's llama-server".to_owned(),
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
        other => (other, format!("--backend {} given", other.as_str())),
    };
    p.backend = backend;
    p.backend_reason = reason;
    Ok(p)
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
