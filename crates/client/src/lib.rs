//! The servers ctxbench speaks to: one module per server family (detection, capabilities,
//! protocol, cache policy, `/metrics` vocabulary, busy-state readers) behind the `Backend`
//! and `Family` traits, the HTTP client, the streaming driver and the probe.
#![warn(missing_docs)]

pub mod metrics;
pub mod probe;

pub mod busy;
pub mod dynamo;
pub mod event;
pub mod family;
pub mod http;
pub mod llamacpp;
pub mod ndjson;
pub mod ollama;
pub mod openai;
pub mod router;
pub mod scrape;
pub mod sglang;
pub mod slots;
pub mod sse;
pub mod stream;
pub mod textprompt;
pub mod tgi;
pub mod tokenize;
pub mod vllm;

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod robustness_tests;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use ctxbench_schema::error::ClientError;
pub use ctxbench_schema::record::{Counts, ServerTimings, SpecStats};
pub use family::{CapacityFlags, Family, MetricsVocabulary, ServerProfile};
pub use http::Http;
pub use scrape::Scraper;
pub use stream::{Generated, StreamStats};

/// Every server family, in detection order: the first whose detector recognises the server
/// names it, so the generic OpenAI family comes last.
pub static FAMILIES: &[&dyn Family] = &[
    &llamacpp::Family,
    &sglang::Family,
    &vllm::Family,
    &tgi::Family,
    &ollama::Family,
    &openai::Family,
];

/// The family that speaks `kind`; `None` for `auto`.
pub fn family(kind: BackendKind) -> Option<&'static dyn Family> {
    FAMILIES.iter().copied().find(|f| f.kind() == kind)
}

/// The family a recorded server kind (`server_kind` in a results header) names, matched as
/// the capacity advice always matched it: case-insensitively, the family's server name
/// contained in it; `None` for a kind no family names.
pub fn family_of_server(server_kind: &str) -> Option<&'static dyn Family> {
    let kind = server_kind.to_ascii_lowercase();
    FAMILIES
        .iter()
        .copied()
        .find(|f| kind.contains(&f.id().server.to_ascii_lowercase()))
}

/// The families' `/metrics` vocabularies in the order a page is read: vLLM's first (its
/// cache counters before SGLang's, its `spec_decode_*` before llama.cpp's copy of them),
/// then detection order. A page carries one server's names, so the order only settles a
/// page that mixes two.
/// The counter names (substrings) kept in a sample's `/metrics` deltas: the generic token
/// counts and every family's own.
pub fn kept_metric_names() -> Vec<&'static str> {
    let mut v = crate::metrics::GENERIC_KEEP.to_vec();
    for m in metrics_vocabularies() {
        v.extend(
            m.kept()
                .iter()
                .filter(|k| !v.contains(k))
                .collect::<Vec<_>>(),
        );
    }
    v
}

/// Every family's `/metrics` vocabulary, in the order their readings are tried.
pub fn metrics_vocabularies() -> impl Iterator<Item = &'static dyn MetricsVocabulary> {
    let mut families = FAMILIES.to_vec();
    // A stable sort: vLLM first, the rest keep their order.
    families.sort_by_key(|f| f.kind() != BackendKind::Vllm);
    // Dynamo's frontend is spoken to as a generic OpenAI server, but its page has names of
    // its own (`dynamo_frontend_*`), read last.
    let dynamo: &'static dyn MetricsVocabulary = &dynamo::Metrics;
    families
        .into_iter()
        .filter_map(|f| f.metrics())
        .chain(std::iter::once(dynamo))
}

/// Which protocol to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
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

/// Reads an optional unsigned count from a JSON object.
pub(crate) fn get_u64(v: &serde_json::Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| {
        x.as_u64()
            .or_else(|| x.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

/// Reads an optional float from a JSON object.
pub(crate) fn get_f64(v: &serde_json::Value, key: &str) -> Option<f64> {
    v.get(key).and_then(|x| x.as_f64())
}

/// Parses llama.cpp's `timings` object (also sent by its `/v1/completions`).
pub(crate) fn llamacpp_timings(t: &serde_json::Value) -> ServerTimings {
    ServerTimings {
        source: "llamacpp.timings".to_owned(),
        prompt_n: get_u64(t, "prompt_n"),
        cache_n: get_u64(t, "cache_n"),
        prompt_ms: get_f64(t, "prompt_ms"),
        prompt_per_second: get_f64(t, "prompt_per_second"),
        predicted_n: get_u64(t, "predicted_n"),
        predicted_ms: get_f64(t, "predicted_ms"),
        predicted_per_second: get_f64(t, "predicted_per_second"),
        predicted_per_token_ms: get_f64(t, "predicted_per_token_ms"),
        draft_n: get_u64(t, "draft_n"),
        draft_n_accepted: get_u64(t, "draft_n_accepted"),
        queue_ms: None,
        e2e_ms: None,
    }
}

/// Speculative counts from llama.cpp `timings` (present only when `draft_n > 0`). llama.cpp
/// does not count verify steps; every step after the first token yields its accepted drafts
/// plus one, so steps = (predicted − 1) − accepted.
pub(crate) fn llamacpp_spec(t: &ServerTimings) -> Option<SpecStats> {
    let draft = t.draft_n.filter(|d| *d > 0)?;
    let accepted = t.draft_n_accepted.unwrap_or(0);
    let steps = t
        .predicted_n
        .map(|n| n.saturating_sub(1).saturating_sub(accepted))
        .filter(|s| *s > 0);
    Some(
        SpecStats {
            source: "llamacpp.timings (verify steps derived)".to_owned(),
            verify_steps: steps,
            draft_tokens: Some(draft),
            accepted_tokens: Some(accepted),
            accept_length: None,
            accept_rate: None,
        }
        .derive(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_advice_is_the_recognised_familys_and_none_for_a_family_without_advice() {
        let flags = |kind: &str| family_of_server(kind).map(|f| f.capacity_flags());
        let llama = flags("llama.cpp").unwrap_or_default();
        assert!(llama.slots.as_deref().is_some_and(|f| f.contains("-np")));
        let vllm = flags("vllm").unwrap_or_default();
        assert_eq!(
            vllm.kv_pool.as_deref(),
            Some("--gpu-memory-utilization or --num-gpu-blocks-override")
        );
        let sglang = flags("sglang").unwrap_or_default();
        assert!(sglang
            .kv_pool
            .as_deref()
            .is_some_and(|f| f.contains("--max-total-tokens")));
        for kind in [
            "tgi",
            "openai-compatible",
            "a server ctxbench does not know",
        ] {
            assert_eq!(
                flags(kind).unwrap_or_default(),
                CapacityFlags::default(),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_page_mixing_two_families_names_is_read_vllm_first() {
        let d = std::collections::BTreeMap::from([
            ("sglang:prompt_tokens_total".to_owned(), 100.0),
            ("sglang:cached_tokens_total".to_owned(), 7.0),
            ("vllm:prefix_cache_hits_total".to_owned(), 0.0),
            ("vllm:prefix_cache_queries_total".to_owned(), 100.0),
            ("llamacpp:spec_decode_num_drafts_total".to_owned(), 4.0),
            (
                "llamacpp:spec_decode_num_accepted_tokens_total".to_owned(),
                2.0,
            ),
            ("vllm:spec_decode_num_drafts_total".to_owned(), 0.0),
            ("vllm:spec_decode_num_accepted_tokens_total".to_owned(), 0.0),
        ]);
        let evidence = metrics_vocabularies().find_map(|v| v.cache_evidence(&d));
        assert_eq!(evidence, Some((0.0, 100.0)), "vLLM's counters first");
        let spec = metrics_vocabularies().find_map(|v| v.spec(&d));
        assert_eq!(spec, Some(None), "vLLM's zero drafts end the search");
    }

    #[test]
    fn a_recorded_server_kind_names_its_family() {
        let kind = |k: &str| family_of_server(k).map(|f| f.kind());
        assert_eq!(kind("llama.cpp"), Some(BackendKind::Llamacpp));
        assert_eq!(kind("SGLang"), Some(BackendKind::Sglang));
        assert_eq!(kind("vllm"), Some(BackendKind::Vllm));
        assert_eq!(kind("openai-compatible"), Some(BackendKind::Openai));
        assert_eq!(kind(""), None);
    }
}
