//! The vocabulary every server family speaks in: which protocol ([`BackendKind`]), one
//! request ([`GenRequest`], [`Timeouts`]), its outcome ([`GenOutcome`], [`OnceOutcome`]), the
//! [`Backend`] trait and what negotiation settled ([`Negotiated`]).

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::http::Http;
use ctxbench_schema::error::ClientError;
use ctxbench_schema::fingerprint::Generated;
use ctxbench_schema::record::{Counts, ServerTimings, SpecStats};

/// Which protocol to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Probe the server and pick the best protocol.
    Auto,
    /// llama.cpp's llama-server native `/completion`.
    Llamacpp,
    /// Any OpenAI-compatible `/v1/completions`.
    Openai,
    /// SGLang's native `/generate` with `input_ids`.
    Sglang,
    /// vLLM's `/v1/completions` with token-id prompts, plus its flush and metrics.
    Vllm,
    /// Hugging Face TGI `/generate_stream` with exact-length text prompts.
    Tgi,
    /// Ollama `/api/generate` (NDJSON, nanoseconds), lengths calibrated on `prompt_eval_count`.
    Ollama,
}

impl BackendKind {
    /// The name used on the command line and in results.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Llamacpp => "llamacpp",
            BackendKind::Openai => "openai",
            BackendKind::Sglang => "sglang",
            BackendKind::Vllm => "vllm",
            BackendKind::Tgi => "tgi",
            BackendKind::Ollama => "ollama",
        }
    }
}

/// One generation request, prompt given as token ids.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// The exact prompt, nonce first.
    pub prompt: Vec<u32>,
    /// The prompt as text, built from `prompt` by [`Backend::prepare`] before t0 on
    /// protocols that send text (`None`: not prepared, or the protocol sends token ids).
    pub prepared: Option<String>,
    /// Tokens to generate (EOS is ignored where the API allows).
    pub max_tokens: u32,
    /// Ask the server not to reuse cached prompt state, where the API allows it.
    pub cache_bypass: bool,
    /// Limits for this request.
    pub timeouts: Timeouts,
}

/// Time limits of one request.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// The whole request, from send to the last byte.
    pub request: Duration,
    /// Longest silence once the server has started answering.
    pub stall: Duration,
}

/// The result of one streamed generation.
#[derive(Debug, Clone)]
pub struct GenOutcome {
    /// Client-side timing and chunk accounting.
    pub stream: StreamStats,
    /// Server-reported counts.
    pub counts: Counts,
    /// Server-reported timings, when the API has them.
    pub timings: Option<ServerTimings>,
    /// Why generation stopped, as the server said.
    pub finish_reason: Option<String>,
    /// Speculative-decoding counts, when the response carries them.
    pub spec: Option<SpecStats>,
    /// Sample flags the backend adds: where a count came from when the stream had none.
    pub flags: Vec<ctxbench_schema::record::Flag>,
    /// What was generated (ids where the stream carries them, text otherwise).
    pub output: Generated,
}

/// The result of one non-streamed generation (the two-point method).
#[derive(Debug, Clone)]
pub struct OnceOutcome {
    /// From just before the request was written to the last byte of the answer.
    pub elapsed: Duration,
    /// Server-reported counts.
    pub counts: Counts,
    /// Server-reported timings.
    pub timings: Option<ServerTimings>,
    /// Speculative-decoding counts.
    pub spec: Option<SpecStats>,
    /// Why generation stopped, as the server said (`length`, …).
    pub finish_reason: Option<String>,
}

/// A server protocol.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Protocol name recorded in results.
    fn kind(&self) -> BackendKind;
    /// The endpoint generations go to.
    fn endpoint(&self) -> &'static str;
    /// Tokenizes text with the server's own tokenizer (no special tokens added).
    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError>;
    /// Does the work a request needs before t0 (text of exact or calibrated length through
    /// tokenizer round-trips or calibration requests) and stores it in the request, so that
    /// [`Backend::generate`] sends at once: a wave is prepared whole, then released
    /// together. The default: nothing to prepare (token-id prompts).
    async fn prepare(&self, _req: &mut GenRequest) -> Result<(), ClientError> {
        Ok(())
    }
    /// Where prompt lengths are calibrated against the server's count (no tokenizer): the
    /// server's count of a prompt of only the first `units` of `req`'s prompt, its BOS and
    /// chat template included: where those units end in what the server sees (a cached
    /// template prefix lies before). The default: not learned this way.
    async fn counted_prefix(
        &self,
        _req: &GenRequest,
        _units: usize,
    ) -> Result<Option<u64>, ClientError> {
        Ok(None)
    }
    /// Streams one generation and times it. An unprepared request is prepared first
    /// (still before t0, but a wave's requests would no longer leave together).
    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError>;
    /// The HTTP client, for checks that are the same on every protocol.
    fn http(&self) -> &Http;
    /// Whether the server still answers at all (after a lost connection: is it gone?).
    async fn reachable(&self) -> bool {
        self.http().reachable().await
    }
    /// Whether anything still listens at the server's address: a TCP connect, no request.
    /// A server that shut down refuses at once; a busy or hung one still accepts.
    async fn listening(&self) -> bool {
        let Ok(url) = reqwest::Url::parse(self.http().base()) else {
            return true;
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return true;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let connect = tokio::net::TcpStream::connect((host, port));
        // Only a definite refusal counts: a slow answer is a busy server, not a gone one.
        !matches!(
            tokio::time::timeout(Duration::from_secs(2), connect).await,
            Ok(Err(_))
        )
    }
    /// One non-streamed generation, timed end to end. The default: not available.
    async fn generate_once(&self, _req: &GenRequest) -> Result<OnceOutcome, ClientError> {
        Err(ClientError::Unsupported {
            what: "non-streamed generation".to_owned(),
            hint: format!("not implemented for the {} protocol", self.kind().as_str()),
        })
    }
    /// Settles the request's optional fields with the server before anything is measured:
    /// fields it refuses are left out of every later request (see [`Negotiated`]). The
    /// default: nothing to negotiate (the protocol's fields are all known to its server).
    async fn negotiate(&self) -> Result<Negotiated, ClientError> {
        Ok(Negotiated::default())
    }
    /// What the backend learned while running that the run header should say (e.g. where
    /// counts came from). The default: nothing.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Drops the server's prefix cache; returns what was done. The default: not available.
    async fn flush(&self) -> Result<String, ClientError> {
        Err(ClientError::Unsupported {
            what: "flush".to_owned(),
            hint: format!(
                "the {} protocol has no cache-flush endpoint",
                self.kind().as_str()
            ),
        })
    }
}

/// What negotiating the optional request fields settled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// Fields left out of every request because the server refused them (`ignore_eos`, …).
    pub dropped: Vec<String>,
    /// One note per change, with the server's own words and what it costs.
    pub notes: Vec<String>,
}

/// Client-side timing of one streamed request.
#[derive(Debug, Clone)]
pub struct StreamStats {
    /// Just before the request was written.
    pub t_sent: Instant,
    /// Arrival of the first byte of the response body... or of headers if the body was empty.
    pub t_first_byte: Option<Instant>,
    /// Arrival of the chunk that completed the first token-carrying event.
    pub t_first_token: Option<Instant>,
    /// Arrival of the chunk that completed the last token-carrying event.
    pub t_last_token: Option<Instant>,
    /// When the stream ended.
    pub t_end: Instant,
    /// SSE events received.
    pub events: usize,
    /// Events that carried at least one generated token.
    pub token_events: usize,
    /// Token-carrying events that arrived in the same read as the first one: when most of
    /// the stream arrives at once (client descheduled, proxy buffering), arrival times no
    /// longer time the decode.
    pub first_read_token_events: usize,
    /// Body bytes received.
    pub bytes: usize,
    /// Whether the final record arrived.
    pub saw_final: bool,
    /// Arrival of each token-carrying event, in order (at most [`MAX_TOKEN_TIMES`]): a
    /// concurrent wave counts each request's tokens inside the window where all decoded.
    pub token_times: Vec<Instant>,
    /// The first token-carrying event's data as the server sent it (its first 300
    /// characters): the evidence when that "first token" arrived before the server could
    /// have made it.
    pub first_token_event: Option<String>,
}

/// Token arrival times kept per stream: bounds memory on very long outputs.
pub const MAX_TOKEN_TIMES: usize = 1 << 16;

impl StreamStats {
    /// Time to first token.
    pub fn ttft(&self) -> Option<Duration> {
        self.t_first_token.map(|t| t - self.t_sent)
    }
    /// First-to-last token interval.
    pub fn decode_span(&self) -> Option<Duration> {
        match (self.t_first_token, self.t_last_token) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        }
    }
    /// Whole request.
    pub fn e2e(&self) -> Duration {
        self.t_end - self.t_sent
    }
}
