//! What ctxbench knows about each server family, behind one trait: how to recognise it from
//! its answers, what it reports, what speaking its protocol can do (with the notes that say
//! what is missing), how to build its backend, its length policy, and what the OpenAI
//! protocol keeps of it when spoken to its servers (tokenizer, flush). `probe` loops over
//! [`FAMILIES`]; `sweep` asks the chosen family. A new backend adds its file, one entry in
//! [`FAMILIES`] and one [`BackendKind`] variant.
//!
//! [`FAMILIES`]: super::FAMILIES

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::tokenize::{TextTokenizer, TokenizeDialect};
use crate::backend::Backend;
use crate::backend::BackendKind;
use crate::http::Http;
use ctxbench_schema::error::{ClientError, UsageError};
use ctxbench_schema::record::SpecStats;

/// The answers a server gives to probing requests. Detection reads the server only through
/// this, so it can be tested with canned answers.
#[async_trait]
pub trait Answers: Send + Sync {
    /// GET `path`: the status and the body when it is JSON. A non-2xx status is an answer,
    /// not an error; 401/403 and transport failures are errors.
    async fn get(&self, path: &str) -> Result<(u16, Option<Value>), ClientError>;
    /// GET `path` as text (Prometheus); non-2xx is an error.
    async fn get_text(&self, path: &str) -> Result<String, ClientError>;
    /// POST a JSON body; the JSON answer of a 2xx, else an error.
    async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError>;
}

// 30 s, not 10: real vLLM 0.32 on a loaded 2-core host took over 10 s to answer `/server_info`
// (2.6 s idle), and a probe that times out ends the run before anything is measured.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

#[async_trait]
impl Answers for Http {
    async fn get(&self, path: &str) -> Result<(u16, Option<Value>), ClientError> {
        self.get_probe(path, PROBE_TIMEOUT).await
    }
    async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        Http::get_text(self, path, PROBE_TIMEOUT).await
    }
    async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.post_json(path, body, PROBE_TIMEOUT).await
    }
}

/// A server being probed: its answers, each GET asked once and remembered, because several
/// detectors read the same paths (`/v1/models`, `/server_info`).
pub struct Server<'a> {
    answers: &'a dyn Answers,
    seen: Mutex<HashMap<String, (u16, Option<Value>)>>,
}

impl<'a> Server<'a> {
    /// A server read through `answers`.
    pub fn new(answers: &'a dyn Answers) -> Self {
        Server {
            answers,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// GET `path` (remembered).
    pub async fn get(&self, path: &str) -> Result<(u16, Option<Value>), ClientError> {
        if let Some(a) = self.seen.lock().ok().and_then(|m| m.get(path).cloned()) {
            return Ok(a);
        }
        let a = self.answers.get(path).await?;
        if let Ok(mut m) = self.seen.lock() {
            m.insert(path.to_owned(), a.clone());
        }
        Ok(a)
    }

    /// GET `path`, asked again even if answered before (the readiness wait).
    pub async fn get_fresh(&self, path: &str) -> Result<(u16, Option<Value>), ClientError> {
        self.answers.get(path).await
    }

    /// Records an answer already received (the readiness wait's `/props`).
    pub fn remember(&self, path: &str, answer: (u16, Option<Value>)) {
        if let Ok(mut m) = self.seen.lock() {
            m.insert(path.to_owned(), answer);
        }
    }

    /// The JSON body of a 200 answer to GET `path`.
    pub async fn json(&self, path: &str) -> Result<Option<Value>, ClientError> {
        Ok(match self.get(path).await? {
            (200, body) => body,
            _ => None,
        })
    }

    /// GET `path` as text.
    pub async fn text(&self, path: &str) -> Result<String, ClientError> {
        self.answers.get_text(path).await
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.answers.post(path, body).await
    }

    /// The first entry of `/v1/models`.
    pub async fn first_model(&self) -> Result<Option<Value>, ClientError> {
        Ok(self
            .json("/v1/models")
            .await?
            .and_then(|m| m.get("data")?.as_array()?.first().cloned()))
    }

    /// `owned_by` of the first model in `/v1/models` (vLLM and SGLang name themselves).
    pub async fn owned_by(&self) -> Result<Option<String>, ClientError> {
        Ok(self
            .first_model()
            .await?
            .and_then(|m| m.get("owned_by")?.as_str().map(str::to_owned)))
    }

    /// Whether `/tokenize` takes vLLM/SGLang's `{"prompt"}` body and answers with token ids.
    /// A refusal naming the model (vLLM: 404 "The model `x` does not exist") is the
    /// server's own answer to a wrong `--model`, returned as it is.
    pub async fn has_vllm_tokenize(&self, model: Option<&str>) -> Result<bool, ClientError> {
        let mut body = json!({"prompt": "hello", "add_special_tokens": false});
        if let Some(m) = model {
            body["model"] = json!(m);
        }
        match self.post("/tokenize", &body).await {
            Ok(v) => Ok(v.get("tokens").is_some_and(Value::is_array)),
            Err(ClientError::Http {
                endpoint,
                status: 404,
                message,
            }) if model.is_some_and(|m| message.contains(m)) => Err(ClientError::Http {
                endpoint,
                status: 404,
                message: format!("{message} (check --model)"),
            }),
            Err(e @ ClientError::Unauthorized { .. }) => Err(e),
            Err(_) => Ok(false),
        }
    }
}

/// What the probe learned about a server and the protocol chosen for it; recorded in the
/// run header (`server`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerProfile {
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
    /// How the prefix cache can be flushed with the chosen protocol (`None`: no endpoint).
    #[serde(default)]
    pub flush: Option<String>,
    /// Where per-request speculative statistics come from (`None`: not exposed).
    #[serde(default)]
    pub spec_stats: Option<String>,
    /// The OpenAI API omits `cached_tokens` when 0, so a missing count means 0 (SGLang with
    /// `--enable-cache-report`).
    #[serde(default)]
    pub cached_missing_means_zero: bool,
    /// A tokenizer endpoint pair for exact text prompts (generic OpenAI servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TextTokenizer>,
    /// `POST /v1/completions` answered 404: a chat-only server.
    #[serde(default)]
    pub completions_missing: bool,
    /// The generation path of the OpenAI protocol (`/v1/completions` or
    /// `/v1/chat/completions`); `None` for other protocols.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Capability notes, each naming the server flag that would enable what is missing.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Optional request fields the server refused, left out of every request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_fields: Vec<String>,
    /// What the token-id test request showed (ids sent, the server's count of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id_test: Option<String>,
    /// The model's size as the server states it (llama.cpp `/v1/models` `meta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_facts: Option<ctxbench_schema::model::ModelFacts>,
    /// A router or gateway in front of several workers (`None`: one server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<ctxbench_schema::record::RouterInfo>,
    /// The family the server was recognised as (`None`: no detector matched).
    #[serde(skip)]
    pub detected: Option<BackendKind>,
}

impl ServerProfile {
    /// A profile with nothing learned yet.
    pub fn new(url: String, backend: BackendKind) -> Self {
        ServerProfile {
            url,
            backend,
            backend_reason: String::new(),
            server_kind: "openai-compatible".into(),
            server_version: None,
            model: None,
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
            metrics: false,
            kv_pool_tokens: None,
            prompt_method: "token ids".into(),
            flush: None,
            spec_stats: None,
            cached_missing_means_zero: false,
            tokenizer: None,
            completions_missing: false,
            endpoint: None,
            notes: Vec::new(),
            dropped_fields: Vec::new(),
            token_id_test: None,
            model_facts: None,
            router: None,
            detected: None,
        }
    }

    /// Whether prompts are token ids, with the test that decided it: the one statement of
    /// it in the probe's lines (the prompt method says how prompts are made, not this
    /// again). A server that takes token ids is sent text where no tokenizer gives this
    /// model's ids, and that is said here, not as "no" beside "taken as ids".
    pub fn token_ids_stated(&self) -> String {
        let yn = |b: bool| if b { "yes" } else { "no" };
        match (&self.token_id_test, self.token_id_prompts) {
            (Some(t), false) if t.ends_with("taken as ids") => format!(
                "no: the server takes them ({t}), but no tokenizer endpoint gives this model's ids"
            ),
            (Some(t), used) => format!("{} ({t})", yn(used)),
            (None, used) => yn(used).to_owned(),
        }
    }
}

/// The run header's record of a profile. Every field is named, so a field added to the
/// profile does not compile until it is recorded or said not to be.
impl From<&ServerProfile> for ctxbench_schema::record::ServerInfo {
    fn from(p: &ServerProfile) -> Self {
        let ServerProfile {
            url,
            backend,
            backend_reason,
            server_kind,
            server_version,
            model,
            max_context,
            max_context_source,
            total_slots,
            n_vocab,
            tokenize,
            token_id_prompts,
            cache_bypass,
            reports_cached_tokens,
            reports_timings,
            server_added_tokens,
            metrics,
            kv_pool_tokens,
            prompt_method,
            flush,
            spec_stats,
            cached_missing_means_zero,
            tokenizer,
            // Its consequence is recorded: `endpoint` (chat) and the notes.
            completions_missing: _,
            endpoint,
            notes,
            dropped_fields,
            token_id_test,
            // Recorded beside the server, in the header's `model_facts` (merged there
            // with `--model-config`).
            model_facts: _,
            router,
            // Not serialized: the family recognised shows in `server_kind`.
            detected: _,
        } = p;
        ctxbench_schema::record::ServerInfo {
            url: url.clone(),
            backend: backend.as_str().to_owned(),
            backend_reason: backend_reason.clone(),
            server_kind: server_kind.clone(),
            server_version: server_version.clone(),
            model: model.clone(),
            max_context: *max_context,
            max_context_source: max_context_source.clone(),
            total_slots: *total_slots,
            n_vocab: *n_vocab,
            tokenize: tokenize.map(|d| d.as_str().to_owned()),
            token_id_prompts: *token_id_prompts,
            cache_bypass: *cache_bypass,
            reports_cached_tokens: *reports_cached_tokens,
            reports_timings: *reports_timings,
            server_added_tokens: *server_added_tokens,
            metrics: *metrics,
            kv_pool_tokens: *kv_pool_tokens,
            prompt_method: prompt_method.clone(),
            flush: flush.clone(),
            // Known only once the sweep has tried a flush.
            flush_check: None,
            // Known once the session has tried the server's busy signals.
            idle_check: None,
            // The family's own words, for the capacity map's advice in reports: the registry
            // knows which family the server kind names (`ctxbench_client::server_info`).
            capacity_flags: None,
            flush_available: None,
            tokenizer: tokenizer.as_ref().map(tokenizer_info),
            endpoint: endpoint.clone(),
            // The server's, not the protocol's: the sweep asks the recognised family.
            cached_tokens_hint: None,
            spec_stats: spec_stats.clone(),
            cached_missing_means_zero: *cached_missing_means_zero,
            notes: notes.clone(),
            dropped_fields: dropped_fields.clone(),
            token_id_test: token_id_test.clone(),
            router: router.clone(),
        }
    }
}

/// The header's record of a tokenizer pair.
fn tokenizer_info(t: &TextTokenizer) -> ctxbench_schema::record::TokenizerInfo {
    let TextTokenizer {
        dialect,
        tokenize_path,
        detokenize_path,
        added_specials,
        url,
        model,
    } = t;
    ctxbench_schema::record::TokenizerInfo {
        dialect: dialect.as_str().to_owned(),
        tokenize_path: tokenize_path.clone(),
        detokenize_path: detokenize_path.clone(),
        added_specials: *added_specials as u64,
        url: url.clone(),
        model: model.clone(),
    }
}

/// How a family's prompts reach their exact length and how strictly the count is checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthPolicy {
    /// Prompts are text made exact by the backend itself, so the server needs no token-id
    /// prompts (TGI, Ollama).
    pub text_prompts: bool,
    /// Allowed relative difference between the server's prompt count and the target.
    pub tolerance_pct: f64,
    /// The warmup's measured BOS is added to targets; `false` where the backend already
    /// aims at the server's own count, BOS included (Ollama's calibration).
    pub server_adds_bos: bool,
}

impl Default for LengthPolicy {
    fn default() -> Self {
        LengthPolicy {
            text_prompts: false,
            tolerance_pct: 0.0,
            server_adds_bos: true,
        }
    }
}

/// What a backend needs beyond the profile, from the run's options.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Tokens of nonce at the start of every prompt (0 with `--nonce off`).
    pub nonce_tokens: usize,
    /// The largest context point of the run.
    pub largest_context: u64,
    /// The longest generation a request asks for.
    pub output_tokens: u64,
}

/// A family's names.
#[derive(Debug, Clone, Copy)]
pub struct FamilyId {
    /// The protocol it speaks.
    pub kind: BackendKind,
    /// The server software's name, as shown and recorded (`llama.cpp`, `sglang`).
    pub server: &'static str,
    /// What `auto` chooses when it recognises the server, for the reason line.
    pub chosen: &'static str,
}

impl FamilyId {
    /// The names of a family.
    pub const fn new(kind: BackendKind, server: &'static str, chosen: &'static str) -> Self {
        FamilyId {
            kind,
            server,
            chosen,
        }
    }
}

/// One server family: its detector, what it reads from the server, its capabilities and
/// notes, its backend and its length policy.
#[async_trait]
pub trait Family: Send + Sync {
    /// Which family this is.
    fn id(&self) -> FamilyId;
    /// The protocol this family speaks.
    fn kind(&self) -> BackendKind {
        self.id().kind
    }
    /// `Some(evidence)` when the answers are this family's: what answered how, for the user.
    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError>;
    /// Reads the identity and limits of a server recognised as this family.
    async fn describe(&self, _s: &Server<'_>, _p: &mut ServerProfile) -> Result<(), ClientError> {
        Ok(())
    }
    /// What speaking this protocol to the described server can do, and notes on what not.
    async fn capabilities(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError>;
    /// Whether `--backend <this>` may be used on a server recognised as `detected`
    /// (`None`: no detector matched). By default, only on its own family's servers.
    fn speaks_to(&self, detected: Option<BackendKind>) -> bool {
        detected == Some(self.kind())
    }
    /// Builds the backend for a probed server.
    fn connect(
        &self,
        http: Http,
        p: &ServerProfile,
        o: &ConnectOptions,
    ) -> Result<Box<dyn Backend>, UsageError>;
    /// How prompts reach their exact length.
    fn length_policy(&self, _p: &ServerProfile) -> LengthPolicy {
        LengthPolicy::default()
    }
    /// The server flag that makes cached-token counts appear, when there is one.
    fn cached_tokens_hint(&self) -> Option<&'static str> {
        None
    }
    /// Tokens of a cached prefix of `prefix` tokens this server recomputes anyway, with
    /// its rule in words: the allowance of the warm modes' hit rule (`crate::warm`). The
    /// default: one, the last token, which a server may recompute for the next logits.
    fn reuse_allowance(&self, _prefix: u64) -> (u64, &'static str) {
        (
            1,
            "the last token of the prefix may be recomputed for the next logits",
        )
    }
    /// What the OpenAI protocol can do on a server recognised as this family, where the
    /// family knows better than the generic probe (its tokenizer, token-id prompts, its
    /// cache switch): `true` when `p`'s capabilities are settled. The default: the generic
    /// probe decides.
    async fn openai_capabilities(
        &self,
        _s: &Server<'_>,
        _p: &mut ServerProfile,
    ) -> Result<bool, ClientError> {
        Ok(false)
    }
    /// Drops the server's prefix cache through `http`, whichever protocol is spoken to it:
    /// the OpenAI protocol keeps the flush of the family it was recognised as (the cache is
    /// the server's, whichever API fills it). Native backends flush themselves, so only the
    /// OpenAI protocol asks, and the default says what it lacks.
    async fn flush(&self, _http: &Http) -> Result<String, ClientError> {
        Err(ClientError::Unsupported {
            what: "flush".to_owned(),
            hint: format!(
                "the {} protocol has no cache-flush endpoint",
                BackendKind::Openai.as_str()
            ),
        })
    }
    /// What this family's Prometheus `/metrics` names mean; `None`: nothing ctxbench reads.
    fn metrics(&self) -> Option<&'static dyn MetricsVocabulary> {
        None
    }
    /// The server flags that let more requests run at once, named when a capacity
    /// prediction says requests will wait. The default: none known.
    fn capacity_flags(&self) -> CapacityFlags {
        CapacityFlags::default()
    }
    /// Where this family's server says whether it is working on requests, best first: the
    /// session keeps the first that answers (see `crate::idle`). The default: none known.
    fn busy_sources(&self) -> &'static [crate::busy::BusySource] {
        &[]
    }
}

pub use ctxbench_schema::record::CapacityFlags;

/// What a family's `/metrics` counters say, read from their deltas over a sample or a wave
/// (`name{labels}` → increase, see `crate::metrics::deltas`). Each reading is `None` when
/// the deltas carry none of the family's names, so the families can be asked in turn.
pub trait MetricsVocabulary: Send + Sync {
    /// Substrings of the counter names its readings use, kept in each sample's deltas.
    fn kept(&self) -> &'static [&'static str] {
        &[]
    }
    /// The server's prefix-cache counters: (tokens served from the cache, tokens looked up).
    /// Other traffic on the server counts too, so a hit is at worst a false alarm.
    fn cache_evidence(&self, _d: &BTreeMap<String, f64>) -> Option<(f64, f64)> {
        None
    }
    /// Speculative-decoding statistics; `Some(None)`: the counters are there and no draft
    /// was made (which ends the search as well).
    fn spec(&self, _d: &BTreeMap<String, f64>) -> Option<Option<SpecStats>> {
        None
    }
    /// Requests the server preempted (evicted, to recompute later); server-wide.
    fn preemptions(&self, _d: &BTreeMap<String, f64>) -> Option<f64> {
        None
    }
    /// Work the server finished (requests, or generated tokens where it counts no
    /// requests); server-wide, so more than a sample's own share is another client's.
    fn served(&self, _d: &BTreeMap<String, f64>) -> Option<crate::busy::Served> {
        None
    }
}

/// The OpenAI-protocol capabilities of a server whose `/tokenize` takes `{"prompt"}` (vLLM,
/// SGLang): token-id prompts made by it, where it answers.
pub(crate) async fn token_ids_through_prompt_tokenize(
    s: &Server<'_>,
    p: &mut ServerProfile,
    dialect: super::tokenize::TokenizeDialect,
) -> Result<bool, ClientError> {
    if !s.has_vllm_tokenize(p.model.as_deref()).await? {
        return Ok(false);
    }
    p.tokenize = Some(dialect);
    p.token_id_prompts = true;
    Ok(true)
}

/// The error of a token-id protocol on a server where no `/tokenize` was found.
pub(crate) fn needs_tokenize(p: &ServerProfile) -> UsageError {
    UsageError::Invalid(format!(
        "{} does not accept token-id prompts or has no /tokenize, so ctxbench cannot build prompts of exact length with --backend {}; try --backend auto",
        p.url,
        p.backend.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::ServerInfo;

    /// The header as it was built before the conversion: the profile through its JSON,
    /// plus what the conversion adds that the profile does not hold (the family's capacity
    /// advice, checked on its own below).
    fn round_trip(p: &ServerProfile) -> ServerInfo {
        serde_json::from_value(serde_json::to_value(p).unwrap()).unwrap()
    }

    fn every_field_set() -> ServerProfile {
        ServerProfile {
            url: "http://127.0.0.1:8080".into(),
            backend: BackendKind::Openai,
            backend_reason: "--backend openai given".into(),
            server_kind: "vllm".into(),
            server_version: Some("0.32.0".into()),
            model: Some("m".into()),
            max_context: Some(8192),
            max_context_source: Some("/v1/models max_model_len".into()),
            total_slots: Some(4),
            n_vocab: Some(32000),
            tokenize: Some(TokenizeDialect::Extras),
            token_id_prompts: true,
            cache_bypass: true,
            reports_cached_tokens: Some(true),
            reports_timings: Some(false),
            server_added_tokens: Some(1),
            metrics: true,
            kv_pool_tokens: Some(16000),
            prompt_method: "token ids".into(),
            flush: Some("POST /reset_prefix_cache".into()),
            spec_stats: Some("vllm:spec_decode_* /metrics deltas".into()),
            cached_missing_means_zero: true,
            tokenizer: Some(TextTokenizer {
                dialect: TokenizeDialect::Extras,
                tokenize_path: "/extras/tokenize".into(),
                detokenize_path: "/extras/detokenize".into(),
                added_specials: 1,
                url: Some("http://127.0.0.1:9000".into()),
                model: Some("upstream".into()),
            }),
            completions_missing: true,
            endpoint: Some("/v1/chat/completions".into()),
            notes: vec!["a note".into()],
            dropped_fields: vec!["ignore_eos".into()],
            token_id_test: Some("4 token ids sent, usage.prompt_tokens 5: taken as ids".into()),
            model_facts: Some(ctxbench_schema::model::ModelFacts::from_counts(
                "meta",
                Some(10),
                Some(40),
                None,
            )),
            router: None,
            detected: Some(BackendKind::Vllm),
        }
    }

    #[test]
    fn the_header_of_a_profile_is_the_json_round_trip_of_it() {
        let full = every_field_set();
        let json = |s: ServerInfo| serde_json::to_value(s).unwrap();
        assert_eq!(json(ServerInfo::from(&full)), json(round_trip(&full)));
        let empty = ServerProfile::new("http://h:1".into(), BackendKind::Llamacpp);
        assert_eq!(json(ServerInfo::from(&empty)), json(round_trip(&empty)));
        for kind in crate::FAMILIES
            .iter()
            .map(|f| f.kind())
            .chain([BackendKind::Auto])
        {
            let p = ServerProfile {
                backend: kind,
                ..every_field_set()
            };
            assert_eq!(ServerInfo::from(&p), round_trip(&p), "{kind:?}");
        }
        use TokenizeDialect::*;
        for d in [Llamacpp, Vllm, Sglang, Extras] {
            let mut p = every_field_set();
            p.tokenize = Some(d);
            if let Some(t) = p.tokenizer.as_mut() {
                t.dialect = d;
            }
            assert_eq!(ServerInfo::from(&p), round_trip(&p), "{d:?}");
        }
    }
}
