//! vLLM: `/v1/completions` with token-id prompts (the OpenAI stream reader), `/tokenize`,
//! and `/reset_prefix_cache`. Speculative statistics come from `/metrics` deltas
//! (see `crate::metrics`), since vLLM reports none per request.

use std::time::Duration;

use async_trait::async_trait;

use super::openai::{OpenAi, TokenizeDialect};
use super::{Backend, BackendKind, GenOutcome, GenRequest, Http};
use crate::error::ClientError;

/// The vLLM protocol.
#[derive(Debug, Clone)]
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

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        self.inner.generate(req).await
    }

    async fn generate_once(&self, req: &GenRequest) -> Result<super::OnceOutcome, ClientError> {
        self.inner.generate_once(req).await
    }

    async fn flush(&self) -> Result<String, ClientError> {
        match self
            .http
            .post_empty("/reset_prefix_cache", Duration::from_secs(60))
            .await
        {
            // 200 with an empty body: vLLM does not confirm the reset.
            Ok(_) => Ok("vllm /reset_prefix_cache (unconfirmed by the server)".to_owned()),
            Err(ClientError::Http { status: 404, .. }) => Err(ClientError::Unsupported {
                what: "vllm /reset_prefix_cache".to_owned(),
                hint:
                    "start vLLM with the environment variable VLLM_SERVER_DEV_MODE=1 to enable it"
                        .to_owned(),
            }),
            Err(e) => Err(e),
        }
    }
}
