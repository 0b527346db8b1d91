//! vLLM: `/v1/completions` with token-id prompts (the OpenAI stream reader), `/tokenize`,
//! and `/reset_prefix_cache`. Speculative statistics come from `/metrics` deltas
//! (see `crate::metrics`), since vLLM reports none per request.

use std::time::Duration;

use async_trait::async_trait;

use super::family::{needs_tokenize, ConnectOptions, FamilyId, Server, ServerProfile};
use super::openai::OpenAi;
use super::tokenize::TokenizeDialect;
use super::{Backend, BackendKind, GenOutcome, GenRequest, Http};
use crate::error::{ClientError, UsageError};

/// vLLM: recognised by `owned_by "vllm"` in `/v1/models`.
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl super::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Vllm,
            "vllm",
            "vLLM (/v1/completions with token ids)",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        Ok((s.owned_by().await?.as_deref() == Some("vllm"))
            .then(|| "/v1/models says owned_by \"vllm\"".to_owned()))
    }

    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        // vLLM answers `GET /version` with {"version": "0.32.0"}.
        if p.server_version.is_none() {
            p.server_version = s
                .json("/version")
                .await?
                .and_then(|v| v.get("version")?.as_str().map(str::to_owned));
        }
        // No note about --enable-prompt-tokens-details here: whether usage carries cached
        // counts is only known after the warmup (the run-level warning names the flag then),
        // and /metrics prefix-cache deltas verify each sample without it.
        if p.metrics {
            if let Ok(text) = s.text("/metrics").await {
                if let Ok(snap) = crate::metrics::parse(&text) {
                    p.kv_pool_tokens = crate::metrics::vllm_kv_pool_tokens(&snap);
                }
            }
        }
        Ok(())
    }

    async fn capabilities(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        if s.has_vllm_tokenize(p.model.as_deref()).await? {
            p.tokenize = Some(TokenizeDialect::Vllm);
            p.token_id_prompts = true;
        }
        p.flush = Some("POST /reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1)".into());
        p.spec_stats = Some("vllm:spec_decode_* /metrics deltas".into());
        Ok(())
    }

    /// vLLM's protocol is OpenAI's plus `/tokenize` and its flush: also for a server no
    /// detector named (a vLLM behind a proxy that renames `owned_by`).
    fn speaks_to(&self, detected: Option<BackendKind>) -> bool {
        matches!(
            detected,
            Some(BackendKind::Vllm | BackendKind::Openai) | None
        )
    }

    fn connect(
        &self,
        http: Http,
        p: &ServerProfile,
        _o: &ConnectOptions,
    ) -> Result<Box<dyn Backend>, UsageError> {
        if !p.token_id_prompts {
            return Err(needs_tokenize(p));
        }
        Ok(Box::new(Vllm::new(http, p.model.clone())))
    }

    fn cached_tokens_hint(&self) -> Option<&'static str> {
        Some("start vLLM with --enable-prompt-tokens-details")
    }

    /// Its `/v1/completions` takes token ids, made by its `/tokenize` where there is one.
    async fn openai_capabilities(
        &self,
        s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<bool, ClientError> {
        if !s.has_vllm_tokenize(p.model.as_deref()).await? {
            return Ok(false);
        }
        p.tokenize = Some(TokenizeDialect::Vllm);
        p.token_id_prompts = true;
        Ok(true)
    }

    async fn flush(&self, http: &Http) -> Result<String, ClientError> {
        reset_prefix_cache(http).await
    }
}

/// The vLLM protocol.
#[derive(Debug)]
pub struct Vllm {
    http: Http,
    inner: OpenAi,
}

impl Vllm {
    /// A backend speaking to `http`, sending `model` in requests.
    pub fn new(http: Http, model: Option<String>) -> Self {
        Vllm {
            inner: OpenAi::new(http.clone(), model, Some(TokenizeDialect::Vllm), None),
            http,
        }
    }
}

#[async_trait]
impl Backend for Vllm {
    fn http(&self) -> &Http {
        &self.http
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Vllm
    }

    fn endpoint(&self) -> &'static str {
        self.inner.endpoint()
    }

    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        self.inner.tokenize(text).await
    }

    async fn prepare(&self, req: &mut GenRequest) -> Result<(), ClientError> {
        self.inner.prepare(req).await
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        self.inner.generate(req).await
    }

    async fn generate_once(&self, req: &GenRequest) -> Result<super::OnceOutcome, ClientError> {
        self.inner.generate_once(req).await
    }

    async fn negotiate(&self) -> Result<super::Negotiated, ClientError> {
        self.inner.negotiate().await
    }

    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }

    async fn flush(&self) -> Result<String, ClientError> {
        reset_prefix_cache(&self.http).await
    }
}

/// vLLM's flush, whichever protocol is spoken to the server (also `--backend openai`).
pub async fn reset_prefix_cache(http: &Http) -> Result<String, ClientError> {
    match http
        .post_empty("/reset_prefix_cache", Duration::from_secs(60))
        .await
    {
        Ok(body) => reset_answer(&body),
        Err(ClientError::Http { status: 404, .. }) => Err(ClientError::Unsupported {
            what: "vllm /reset_prefix_cache".to_owned(),
            hint: "start vLLM with the environment variable VLLM_SERVER_DEV_MODE=1 to enable it"
                .to_owned(),
        }),
        Err(e) => Err(e),
    }
}

/// Reads `/reset_prefix_cache`'s answer: vLLM 0.32 says `{"success": true|false}` and
/// refuses while another request holds cache blocks; older versions answer 200 with an
/// empty body, which confirms nothing.
pub fn reset_answer(body: &str) -> Result<String, ClientError> {
    let success = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("success").and_then(serde_json::Value::as_bool));
    match success {
        Some(true) => Ok("vllm /reset_prefix_cache".to_owned()),
        Some(false) => Err(ClientError::Busy {
            endpoint: "/reset_prefix_cache".to_owned(),
            message: format!(
                "{} (cache blocks still in use by another request)",
                body.trim()
            ),
        }),
        None => Ok("vllm /reset_prefix_cache (unconfirmed by the server)".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded_body(file: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(file).unwrap();
        v["response"]["body"].to_string()
    }

    #[test]
    fn a_refused_reset_is_busy_and_a_confirmed_one_is_done() {
        let busy = recorded_body(include_str!(
            "../../tests/fixtures/recorded/vllm-0.32.0/reset_prefix_cache_busy.json"
        ));
        assert!(matches!(reset_answer(&busy), Err(ClientError::Busy { .. })));
        let idle = recorded_body(include_str!(
            "../../tests/fixtures/recorded/vllm-0.32.0/reset_prefix_cache_idle.json"
        ));
        assert_eq!(reset_answer(&idle).unwrap(), "vllm /reset_prefix_cache");
        assert!(reset_answer("").unwrap().contains("unconfirmed"));
    }
}
