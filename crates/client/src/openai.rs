//! Generic OpenAI-compatible `/v1/completions` (or `/v1/chat/completions`) with
//! `stream_options.include_usage`.
//!
//! Prompts are token ids where the server takes them. Where it refuses them, prompts are
//! text of exact length, built through whichever tokenizer endpoint pair the server has
//! (`/tokenize`+`/detokenize`, `/v1/tokenize`+`/v1/detokenize`, llama-cpp-python's
//! `/extras/tokenize`+`/extras/detokenize`): ids → detokenize → re-tokenize → cut or pad →
//! re-check. The nonce stays at the start of the text, so no two prompts share a prefix.
//! Where the server has no tokenizer endpoint at all (gateways, proxies, hosted APIs), or
//! only chat is spoken and no tokenizer answered, the text length is calibrated against the
//! server's own `usage.prompt_tokens` ([`CalibratedText`]: non-streamed requests with
//! `max_tokens: 1` before t0, their nonce reversed), within [`CALIBRATED_TOLERANCE`]; on
//! chat, that count includes the template's tokens, so every length is the server's total.
//!
//! Token counts come from the final `usage` record. Where the stream carries none
//! (llama-cpp-python), the prompt count comes from a non-streamed repeat of the same request
//! with `max_tokens: 1` after the measurement (the server's own `usage.prompt_tokens`) and the
//! output count from the token events; each sample is flagged with where its counts came
//! from. Where a server sends cumulative usage in every chunk (`continuous_usage_stats`),
//! "carries a token" is read from `completion_tokens` rising; otherwise from a non-empty text
//! delta (chat: `delta.content`, so the role-only first chunk is not a token).

use ctxbench_schema::record::Flag;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::family::{ConnectOptions, FamilyId, LengthPolicy, Server, ServerProfile};
use super::stream::{event_json, in_stream_error, EventInfo, EventReader, Framing, Gathered};
use super::stream::{generate_streamed, generate_unstreamed, StreamEvent};
use super::textprompt::{CalibratedText, CALIBRATED_TOLERANCE, CALIBRATION_ROUNDS};
use super::tokenize::{parse_token_list, tokenize};
use crate::backend::Backend;
use crate::backend::BackendKind;
use crate::backend::GenOutcome;
use crate::backend::GenRequest;
use crate::backend::OnceOutcome;
use crate::http::Http;
use crate::timings::get_u64;
use crate::timings::llamacpp_timings;
use ctxbench_schema::error::{ClientError, UsageError};
use ctxbench_schema::record::Counts;
use ctxbench_schema::record::ServerTimings;
use ctxbench_schema::record::SpecStats;

// Their old path, still named by callers outside client/ (the probe's tests).
pub use super::tokenize::{TextTokenizer, TokenizeDialect};

/// Any OpenAI-compatible server: recognised by `/v1/models` answering (the fallback, last
/// in detection order).
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl crate::family::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Openai,
            "openai-compatible",
            "an OpenAI-compatible server",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        if s.get("/v1/models").await?.0 != 200 {
            return Ok(None);
        }
        Ok(Some(match super::dynamo::recognise(s).await {
            Some(frontend) => format!("GET /v1/models answered and {frontend}"),
            None => "GET /v1/models answered".to_owned(),
        }))
    }

    /// A frontend this protocol is spoken to (NVIDIA Dynamo's) is recorded as what it is.
    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        if super::dynamo::recognise(s).await.is_some() {
            super::dynamo::describe(s, p).await;
        }
        Ok(())
    }

    /// What the recognised family says the protocol can do on its servers (e.g. llama.cpp's
    /// `/tokenize`, `cache_prompt` switch and `timings`); otherwise `/v1/completions` with
    /// token ids where a one-token test request showed the server takes its tokenizer's ids,
    /// or text prompts made exact through the tokenizer endpoints found. No flush in this
    /// protocol beyond the recognised family's own.
    async fn capabilities(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        if let Some(f) = p.detected.and_then(super::family) {
            if f.openai_capabilities(s, p).await? {
                return Ok(());
            }
        }
        let tokenizer = find_tokenizer(s, p.model.as_deref()).await;
        let (completions, test) =
            completions_answer(s, p.model.as_deref(), tokenizer.as_ref()).await;
        if completions == Completions::UnknownModel {
            let listed = s
                .first_model()
                .await?
                .and_then(|m| m.get("id")?.as_str().map(str::to_owned))
                .map_or_else(String::new, |m| format!("; /v1/models lists {m}"));
            return Err(ClientError::Http {
                endpoint: COMPLETIONS.to_owned(),
                status: 404,
                message: format!(
                    "{test} (model {:?} asked for: check --model{listed})",
                    p.model.as_deref().unwrap_or_default()
                ),
            });
        }
        p.completions_missing = completions == Completions::Missing;
        p.token_id_test = Some(test);
        // Whether the server takes token ids is said once, with the test, in the
        // capabilities (`ServerProfile::token_ids_stated`), not again in a note.
        if let Some(t) = &tokenizer {
            p.tokenize = Some(t.dialect);
            p.tokenizer = Some(t.clone());
        }
        // Without a tokenizer no ids of the corpus are known, whatever the server takes:
        // lengths are then calibrated on text.
        p.token_id_prompts = completions == Completions::TakesTokenIds && tokenizer.is_some();
        p.prompt_method = match (&tokenizer, p.token_id_prompts) {
            (_, true) => format!(
                "token ids (the server accepted a token-id test prompt; ids from {})",
                tokenizer.as_ref().map_or("?", |t| t.tokenize_path.as_str())
            ),
            (Some(t), false) => format!(
                "text of exact length: ids → {} → {} → cut/pad → re-check",
                t.detokenize_path, t.tokenize_path
            ),
            (None, false) => calibrated_method(false),
        };
        // Whether the server takes token ids is the capability line's; this says only what
        // the missing tokenizer means for lengths.
        if tokenizer.is_none() {
            p.notes.push(format!("no tokenizer endpoint pair answered (tried /tokenize+/detokenize, /v1/tokenize+/v1/detokenize, /extras/tokenize+/extras/detokenize): prompt lengths are calibrated against the server's own usage.prompt_tokens (up to {CALIBRATION_ROUNDS} requests with max_tokens 1 per new length, before it is measured), within {}%, not exact; --tokenizer-url lends the tokenizer of a server of the same model", CALIBRATED_TOLERANCE * 100.0));
        }
        if p.completions_missing {
            p.notes.push(format!("{CHAT_ONLY_NOTE} to token ids and to text: this server is chat-only; --endpoint auto uses /v1/chat/completions"));
        }
        Ok(())
    }

    /// Calibrated prompts aim at the server's own count (BOS and chat template included),
    /// within a tolerance; otherwise lengths are exact.
    fn length_policy(&self, p: &ServerProfile) -> LengthPolicy {
        if calibrated(p) {
            LengthPolicy {
                text_prompts: true,
                tolerance_pct: CALIBRATED_TOLERANCE,
                server_adds_bos: false,
            }
        } else {
            LengthPolicy::default()
        }
    }

    /// The OpenAI protocol is spoken by every family that answers `/v1/models`.
    fn speaks_to(&self, _detected: Option<BackendKind>) -> bool {
        true
    }

    fn connect(
        &self,
        http: Http,
        p: &ServerProfile,
        o: &ConnectOptions,
    ) -> Result<Box<dyn Backend>, UsageError> {
        let chat = p.endpoint.as_deref() == Some(CHAT);
        let text = if p.token_id_prompts && !chat {
            None
        } else {
            p.tokenizer.clone()
        };
        let mut o2 = OpenAi::new(
            http,
            p.model.clone(),
            p.tokenize,
            p.cache_bypass
                .then(|| ("cache_prompt".to_owned(), json!(false))),
        );
        if let Some(url) = p.tokenizer.as_ref().and_then(|t| t.url.as_deref()) {
            o2.tok_http = Some(Http::new(url, None, None).map_err(UsageError::Invalid)?);
            if text.is_none() {
                o2.ids_tokenizer = p.tokenizer.clone();
            }
        }
        o2.text = text;
        o2.calibrated = calibrated(p).then(|| CalibratedText::new(o.nonce_tokens));
        o2.chat = chat;
        o2.nonce_tokens = o.nonce_tokens;
        o2.flush_with = p.detected;
        o2.failure_hint = super::dynamo::failure_hint(&p.server_kind);
        Ok(Box::new(if p.cached_missing_means_zero {
            o2.missing_cached_is_zero()
        } else {
            o2
        }))
    }
}

/// Whether prompts on this server are text calibrated against `usage.prompt_tokens`: the
/// OpenAI protocol, no tokenizer endpoint pair, and no token-id prompts (refused, or taken
/// but with no ids of this model to send; or chat, which takes text only).
pub fn calibrated(p: &ServerProfile) -> bool {
    p.backend == BackendKind::Openai
        && p.tokenizer.is_none()
        && (!p.token_id_prompts || p.endpoint.as_deref() == Some(CHAT))
}

/// The `prompt_method` of calibrated prompts, with the tolerance.
fn calibrated_method(chat: bool) -> String {
    format!(
        "text calibrated against the server's usage.prompt_tokens (no tokenizer endpoint answered{}): up to {CALIBRATION_ROUNDS} non-streamed requests with max_tokens 1 per new length, before it is measured, their nonce reversed; tolerance {}% of the target{}",
        if chat { "; one user message" } else { "" },
        CALIBRATED_TOLERANCE * 100.0,
        if chat { "; the chat template's tokens are counted in every length" } else { "" }
    )
}

/// How the note of a server without `/v1/completions` begins.
const CHAT_ONLY_NOTE: &str = "POST /v1/completions answered 404";

/// `/v1/chat/completions`.
pub const CHAT: &str = "/v1/chat/completions";
/// `/v1/completions`.
pub const COMPLETIONS: &str = "/v1/completions";

/// Which OpenAI generation path to use (`--endpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum EndpointChoice {
    /// `/v1/completions`, or `/v1/chat/completions` when the server has no completions.
    #[default]
    Auto,
    /// `/v1/completions` (raw prompt).
    Completions,
    /// `/v1/chat/completions` with one user message (the chat template's tokens are counted).
    Chat,
}

/// Settles the generation path of the OpenAI protocol on the probed server and records it;
/// a usage error when `--endpoint chat` is asked of another protocol.
pub fn choose_endpoint(p: &mut ServerProfile, choice: EndpointChoice) -> Result<(), UsageError> {
    if p.backend != BackendKind::Openai {
        if choice == EndpointChoice::Chat {
            return Err(UsageError::Invalid(format!(
                "--endpoint chat is spoken by --backend openai; this server was probed as {} ({}): add --backend openai",
                p.server_kind,
                p.backend.as_str()
            )));
        }
        return Ok(());
    }
    let chat = match choice {
        EndpointChoice::Chat => true,
        EndpointChoice::Completions => false,
        EndpointChoice::Auto => p.completions_missing,
    };
    p.endpoint = Some(if chat { CHAT } else { COMPLETIONS }.to_owned());
    if !chat {
        // Each capability stated once: no chat-only note beside generations on completions.
        p.notes.retain(|n| !n.starts_with(CHAT_ONLY_NOTE));
    }
    if chat {
        p.prompt_method = match &p.tokenizer {
            Some(t) => format!(
                "text of exact length in one user message: ids → {} → {} → cut/pad → re-check; the chat template's tokens are measured by the warmup against usage.prompt_tokens and counted in every length",
                t.detokenize_path, t.tokenize_path
            ),
            None => calibrated_method(true),
        };
    }
    Ok(())
}

/// Takes the tokenizer of another server that serves the same model (`--tokenizer-url`: for
/// a gateway, the server behind it, whose tokenizer the gateway hides). Where the measured
/// server takes token ids (its token-id test), prompts become token ids of exact length from
/// that tokenizer; otherwise text of exact length through it. An error when the server
/// answers no tokenizer pair.
pub async fn adopt_tokenizer(
    p: &mut ServerProfile,
    tokenizer_http: &Http,
) -> Result<(), ClientError> {
    let ts = Server::new(tokenizer_http);
    // The tokenizer server's own model name (a gateway's differs from its upstream's).
    let model = ts
        .first_model()
        .await
        .ok()
        .flatten()
        .and_then(|m| m.get("id")?.as_str().map(str::to_owned));
    let Some(mut t) = find_tokenizer(&ts, model.as_deref()).await else {
        return Err(ClientError::Unsupported {
            what: format!("--tokenizer-url {}", tokenizer_http.base()),
            hint: "no tokenizer endpoint pair answered there (tried /tokenize+/detokenize, /v1/tokenize+/v1/detokenize, /extras/tokenize+/extras/detokenize)".to_owned(),
        });
    };
    t.url = Some(crate::http::redact_url(tokenizer_http.base()));
    t.model = model;
    let takes_ids = p
        .token_id_test
        .as_deref()
        .is_some_and(|x| x.ends_with("taken as ids"));
    let from = format!("{}{}", tokenizer_http.base(), t.tokenize_path);
    p.tokenize = Some(t.dialect);
    p.token_id_prompts = takes_ids;
    p.prompt_method = if takes_ids && p.endpoint.as_deref() != Some(CHAT) {
        format!("token ids (the server counted a token-id test prompt as ids; ids from --tokenizer-url {from})")
    } else {
        format!(
            "text of exact length: ids → {} → {} on --tokenizer-url {} → cut/pad → re-check",
            t.detokenize_path,
            t.tokenize_path,
            tokenizer_http.base()
        )
    };
    p.notes
        .retain(|n| !n.starts_with("no tokenizer endpoint pair answered"));
    p.tokenizer = Some(t);
    Ok(())
}

/// The tokenizer endpoint pairs tried, in order.
const TOKENIZERS: &[(&str, &str, TokenizeDialect)] = &[
    ("/tokenize", "/detokenize", TokenizeDialect::Vllm),
    ("/tokenize", "/detokenize", TokenizeDialect::Llamacpp),
    ("/v1/tokenize", "/v1/detokenize", TokenizeDialect::Vllm),
    ("/v1/tokenize", "/v1/detokenize", TokenizeDialect::Llamacpp),
    (
        "/extras/tokenize",
        "/extras/detokenize",
        TokenizeDialect::Extras,
    ),
];

/// The detokenized text in any of the known answer shapes.
fn detokenized(v: &Value) -> Option<String> {
    ["text", "prompt", "content"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str).map(str::to_owned))
}

/// The first tokenizer pair whose tokenize answers with ids and whose detokenize turns them
/// back into the text.
async fn find_tokenizer(s: &Server<'_>, model: Option<&str>) -> Option<TextTokenizer> {
    let probe = "hello world";
    for &(tok, detok, dialect) in TOKENIZERS {
        let Ok(v) = s.post(tok, &dialect.tokenize_body(probe, model)).await else {
            continue;
        };
        let Ok(ids) = parse_token_list(tok, &v) else {
            continue;
        };
        let Ok(back) = s.post(detok, &json!({"tokens": ids, "model": model})).await else {
            continue;
        };
        if !detokenized(&back).is_some_and(|t| t.contains("hello world")) {
            continue;
        }
        let added = match s.post(tok, &dialect.tokenize_body("", model)).await {
            Ok(v) => parse_token_list(tok, &v).map_or(0, |t| t.len()),
            Err(_) => 0,
        };
        return Some(TextTokenizer {
            dialect,
            tokenize_path: tok.to_owned(),
            detokenize_path: detok.to_owned(),
            added_specials: added,
            url: None,
            model: None,
        });
    }
    None
}

#[derive(Debug, PartialEq, Eq)]
enum Completions {
    TakesTokenIds,
    RefusesTokenIds,
    Missing,
    /// A 404 whose own words are about the model (Dynamo: `Model not found`): the path is
    /// there, the model asked for is not.
    UnknownModel,
}

/// Whether `/v1/completions` exists and takes a token-id prompt, with what the test showed:
/// one request of one generated token (ids of "hello world" when a tokenizer was found, else
/// a small id list). Taking ids is decided by what the server does with them: its
/// `usage.prompt_tokens` must count the ids sent (plus at most two tokens of its own, BOS),
/// so a gateway that passes ids through is recognised and a server that reads the list as
/// text is not. Any failure of the test (a refusal, a 5xx, a reset, a timeout) means "not
/// taken" and the run goes on with text prompts.
async fn completions_answer(
    s: &Server<'_>,
    model: Option<&str>,
    tok: Option<&TextTokenizer>,
) -> (Completions, String) {
    let mut ids: Vec<u32> = vec![100, 200, 300, 400];
    if let Some(t) = tok {
        if let Ok(v) = s
            .post(
                &t.tokenize_path,
                &t.dialect.tokenize_body("hello world", model),
            )
            .await
        {
            if let Ok(x) = parse_token_list(&t.tokenize_path, &v) {
                if !x.is_empty() {
                    ids = x;
                }
            }
        }
    }
    let n = ids.len() as u64;
    let mut body = json!({"prompt": ids, "max_tokens": 1});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    match s.post(COMPLETIONS, &body).await {
        Ok(v) if v.get("choices").is_some() => {
            match v.get("usage").and_then(|u| get_u64(u, "prompt_tokens")) {
                Some(c) if (n..=n + 2).contains(&c) => (
                    Completions::TakesTokenIds,
                    format!("{n} token ids sent, usage.prompt_tokens {c}: taken as ids"),
                ),
                Some(c) => (
                    Completions::RefusesTokenIds,
                    format!("{n} token ids sent, usage.prompt_tokens {c}: not read as ids"),
                ),
                None => (
                    Completions::RefusesTokenIds,
                    format!("{n} token ids sent, answered without usage.prompt_tokens: whether they were read as ids is unknown"),
                ),
            }
        }
        Ok(_) => (
            Completions::RefusesTokenIds,
            "a token-id prompt was answered without choices".to_owned(),
        ),
        Err(ClientError::Http {
            status: 404,
            message,
            ..
        }) if model.is_some() && message.to_lowercase().contains("model") => {
            (Completions::UnknownModel, message)
        }
        // A 404 may refuse the ids rather than lack the path (a JSON error body saying
        // `text input must be of type str`): a text prompt tells the two apart.
        Err(ClientError::Http {
            status: status @ (404 | 405),
            message,
            ..
        }) => {
            let mut text = json!({"prompt": "hello world", "max_tokens": 1});
            if let Some(m) = model {
                text["model"] = json!(m);
            }
            match s.post(COMPLETIONS, &text).await {
                Ok(v) if v.get("choices").is_some() => (
                    Completions::RefusesTokenIds,
                    format!(
                        "a token-id prompt was refused with HTTP {status} ({}) and a text prompt taken: ids refused, not the endpoint missing",
                        super::http::snippet(&message)
                    ),
                ),
                _ => (
                    Completions::Missing,
                    format!("POST /v1/completions answered {status} to token ids and to text"),
                ),
            }
        }
        Err(e) => (
            Completions::RefusesTokenIds,
            format!(
                "a token-id prompt was refused: {}",
                super::http::snippet(&e.to_string())
            ),
        ),
    }
}

/// Fields of a streamed generation request.
impl OpenAi {
    fn body(&self, req: &GenRequest, text: Option<&str>) -> Map<String, Value> {
        let prompt = text.map_or_else(|| json!(req.prompt), |t| json!(t));
        self.body_of(prompt, req.max_tokens, req.cache_bypass)
    }

    /// A streamed request for `prompt` with every optional field the server has not
    /// refused.
    fn body_of(&self, prompt: Value, max_tokens: u32, cache_bypass: bool) -> Map<String, Value> {
        let dialect = self.dialect();
        let mut body = Map::new();
        if let Some(m) = &self.model {
            body.insert("model".into(), json!(m));
        }
        if self.chat {
            body.insert(
                "messages".into(),
                json!([{"role": "user", "content": prompt}]),
            );
        } else {
            body.insert("prompt".into(), prompt);
        }
        body.insert(dialect.max_tokens_field().into(), json!(max_tokens));
        body.insert("temperature".into(), json!(0));
        body.insert("ignore_eos".into(), json!(true));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        if cache_bypass {
            if let Some((k, v)) = &self.cache_bypass_field {
                body.insert(k.clone(), v.clone());
            }
        }
        for f in &dialect.dropped {
            body.remove(f);
        }
        body
    }

    fn dialect(&self) -> Dialect {
        self.dialect.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// The non-streamed form of a body (vLLM answers 400 to stream_options without stream).
    fn unstreamed(mut body: Map<String, Value>, max_tokens: Option<u32>) -> Value {
        body.insert("stream".into(), json!(false));
        body.remove("stream_options");
        if let Some(n) = max_tokens {
            body.insert("max_tokens".into(), json!(n));
        }
        Value::Object(body)
    }
}

/// The OpenAI-compatible protocol.
#[derive(Debug)]
pub struct OpenAi {
    http: Http,
    model: Option<String>,
    tokenize: Option<TokenizeDialect>,
    /// Extra body fields the probe found the server accepts (e.g. llama.cpp `cache_prompt`).
    cache_bypass_field: Option<(String, Value)>,
    /// The server omits `cached_tokens` when it is 0 (SGLang with `--enable-cache-report`).
    missing_cached_is_zero: bool,
    /// Text prompts of exact length through this tokenizer pair (`None`: token ids).
    text: Option<TextTokenizer>,
    /// The pair that makes token ids when prompts go as ids but the server's own
    /// tokenizer is elsewhere (`--tokenizer-url`).
    ids_tokenizer: Option<TextTokenizer>,
    /// The server the tokenizer pair is on, when it is not the measured one.
    tok_http: Option<Http>,
    /// Text prompts calibrated against `usage.prompt_tokens` (no tokenizer pair).
    calibrated: Option<CalibratedText>,
    /// `/v1/chat/completions` with one user message.
    chat: bool,
    /// Tokens of nonce at the start of every prompt (never used as padding).
    nonce_tokens: usize,
    /// What this backend had to do that the run header should say (counts' sources).
    notes: Mutex<Vec<String>>,
    /// The server answered a complete stream and its non-streamed repeat with no count (usage
    /// of all zeros or none): repeats are not sent again.
    counts_nothing: AtomicBool,
    /// The family the probe recognised behind this protocol, whose flush is kept (see
    /// [`crate::family::Family::flush`]).
    pub flush_with: Option<BackendKind>,
    /// What a 5xx or an error event in a stream may mean on this server, added to its
    /// message (a frontend that does not pass its engine's reason on: Dynamo).
    pub failure_hint: Option<&'static str>,
    /// The optional fields settled by [`Backend::negotiate`].
    dialect: Mutex<Dialect>,
}

/// The optional request fields a server refused, settled before anything is measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Dialect {
    /// Fields left out of every request.
    dropped: Vec<String>,
    /// `max_completion_tokens` instead of `max_tokens` (newer OpenAI servers).
    max_completion_tokens: bool,
}

impl Dialect {
    fn max_tokens_field(&self) -> &'static str {
        if self.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }
}

/// The optional fields ctxbench sends on the OpenAI protocol, in the order they are given
/// up when a server refuses a body without naming a field, and what each one's absence
/// costs (said in the run header).
const OPTIONAL_FIELDS: &[(&str, &str)] = &[
    ("ignore_eos", "no EOS control: an output that ends early is flagged short_output and its decode rate is not counted"),
    ("stream_options", "streams may carry no usage: counts then come from a non-streamed repeat of each prompt (flag prompt_tokens_from_repeat)"),
    ("cache_prompt", "no per-request cache bypass: cold prefill rests on the nonce at token 0 and the server's cached-token counts"),
    ("temperature", "the server's default sampling: outputs may differ between repetitions (greedy decoding not asked for)"),
];

/// The test requests negotiation may send before it gives up.
const NEGOTIATION_ROUNDS: usize = 8;

impl OpenAi {
    /// A backend for `http`; `cache_bypass_field` is sent when a request asks for no reuse.
    pub fn new(
        http: Http,
        model: Option<String>,
        tokenize: Option<TokenizeDialect>,
        cache_bypass_field: Option<(String, Value)>,
    ) -> Self {
        OpenAi {
            http,
            model,
            tokenize,
            cache_bypass_field,
            missing_cached_is_zero: false,
            text: None,
            ids_tokenizer: None,
            tok_http: None,
            calibrated: None,
            chat: false,
            nonce_tokens: 0,
            notes: Mutex::new(Vec::new()),
            counts_nothing: Default::default(),
            flush_with: None,
            failure_hint: None,
            dialect: Mutex::new(Dialect::default()),
        }
    }

    /// One unmeasured test request (streamed when `streamed`, as measured ones are) of two
    /// tokens for a short text prompt, with the current dialect.
    async fn try_dialect(&self, streamed: bool) -> Result<(), ClientError> {
        let body = self.body_of(json!("Hello"), 2, true);
        let timeout = Duration::from_secs(120);
        if streamed {
            let timeouts = crate::backend::Timeouts {
                request: timeout,
                stall: timeout,
            };
            let body = Value::Object(body);
            let send = || {
                generate_streamed(
                    &self.http,
                    Framing::Sse,
                    self.path(),
                    &body,
                    timeouts,
                    self.reader(),
                )
            };
            // Not measured: a broken connection is retried once on a fresh one.
            match send().await {
                Err(ClientError::Transport { .. }) => send().await.map(|_| ()),
                other => other.map(|_| ()),
            }
        } else {
            self.http
                .post_json(self.path(), &Self::unstreamed(body, Some(2)), timeout)
                .await
                .map(|_| ())
        }
    }

    /// How to change the dialect after `message` refused a body: drop the optional fields
    /// it names, switch to `max_completion_tokens` if it names `max_tokens`, or else drop
    /// every optional field still sent. `None`: nothing left to change.
    fn next_dialect(&self, message: &str) -> Option<(Dialect, Vec<&'static str>)> {
        let mut d = self.dialect();
        let sent = |f: &str| !d.dropped.iter().any(|x| x == f);
        let named: Vec<&'static str> = OPTIONAL_FIELDS
            .iter()
            .map(|(f, _)| *f)
            .filter(|f| sent(f) && message.contains(f))
            .collect();
        if !named.is_empty() {
            d.dropped.extend(named.iter().map(|f| f.to_string()));
            return Some((d, named));
        }
        if !d.max_completion_tokens && message.contains("max_tokens") {
            d.max_completion_tokens = true;
            return Some((d, vec!["max_tokens"]));
        }
        let rest: Vec<&'static str> = OPTIONAL_FIELDS
            .iter()
            .map(|(f, _)| *f)
            .filter(|f| sent(f))
            .collect();
        if rest.is_empty() {
            return None;
        }
        d.dropped.extend(rest.iter().map(|f| f.to_string()));
        Some((d, rest))
    }

    fn set_dialect(&self, d: Dialect) {
        if let Ok(mut cur) = self.dialect.lock() {
            *cur = d;
        }
    }

    fn path(&self) -> &'static str {
        if self.chat {
            CHAT
        } else {
            COMPLETIONS
        }
    }

    fn reader(&self) -> CompletionsReader {
        CompletionsReader {
            missing_cached_is_zero: self.missing_cached_is_zero,
            chat: self.chat,
            ..Default::default()
        }
    }

    /// Reads a missing `cached_tokens` as 0: SGLang with `--enable-cache-report` sends the
    /// field only when it is positive.
    pub fn missing_cached_is_zero(mut self) -> Self {
        self.missing_cached_is_zero = true;
        self
    }

    fn note(&self, n: &str) {
        if let Ok(mut v) = self.notes.lock() {
            if !v.iter().any(|x| x == n) {
                v.push(n.to_owned());
            }
        }
    }

    /// The model named in requests to a tokenizer pair: its own server's name when it is
    /// on another server.
    fn tokenizer_model<'a>(&'a self, t: &'a TextTokenizer) -> Option<&'a str> {
        match &t.url {
            Some(_) => t.model.as_deref(),
            None => self.model.as_deref(),
        }
    }

    /// Ids of `text` through the found tokenize endpoint, its added specials (BOS) removed.
    async fn text_ids(&self, t: &TextTokenizer, text: &str) -> Result<Vec<u32>, ClientError> {
        let v = self
            .tok_http
            .as_ref()
            .unwrap_or(&self.http)
            .post_json(
                &t.tokenize_path,
                &t.dialect.tokenize_body(text, self.tokenizer_model(t)),
                Duration::from_secs(300),
            )
            .await?;
        let mut ids = parse_token_list(&t.tokenize_path, &v)?;
        ids.drain(..t.added_specials.min(ids.len()));
        Ok(ids)
    }

    async fn detokenize(&self, t: &TextTokenizer, ids: &[u32]) -> Result<String, ClientError> {
        let mut body = json!({"tokens": ids});
        if let Some(m) = self.tokenizer_model(t) {
            body["model"] = json!(m);
        }
        let v = self
            .tok_http
            .as_ref()
            .unwrap_or(&self.http)
            .post_json(&t.detokenize_path, &body, Duration::from_secs(300))
            .await?;
        detokenized(&v).ok_or_else(|| ClientError::Malformed {
            endpoint: t.detokenize_path.clone(),
            detail: "no text/prompt/content string in the answer".to_owned(),
        })
    }

    /// Text that the server's tokenizer counts as exactly `ids.len()` tokens: detokenize,
    /// re-tokenize, cut at the wanted count or pad with the prompt's body (never its nonce),
    /// and check again.
    async fn exact_text(&self, t: &TextTokenizer, ids: &[u32]) -> Result<String, ClientError> {
        let n = ids.len();
        let body = &ids[self.nonce_tokens.min(n.saturating_sub(1))..];
        let mut cur = ids.to_vec();
        for _ in 0..ROUNDS {
            // A leading space would become a token every prompt shares (SentencePiece "▁"),
            // a prefix the nonce must not leave to the cache.
            let text = self.detokenize(t, &cur).await?.trim_start().to_owned();
            let got = self.text_ids(t, &text).await?;
            if got.len() == n {
                return Ok(text);
            }
            cur = got;
            if cur.len() > n {
                cur.truncate(n);
            } else {
                let need = n - cur.len();
                cur.extend(body.iter().cycle().take(need));
            }
        }
        Err(ClientError::Malformed {
            endpoint: t.tokenize_path.clone(),
            detail: format!(
                "could not build a text prompt of exactly {n} tokens in {ROUNDS} rounds (the tokenizer merges across the cut); try another --corpus"
            ),
        })
    }

    /// The prompt text of a request in text mode: the prepared one, else built now (before
    /// t0 either way).
    /// `e` with what a server failure may mean here ([`OpenAi::failure_hint`]), on a 5xx
    /// answer or an error event in a stream.
    pub(crate) fn hinted(&self, e: ClientError) -> ClientError {
        match (e, self.failure_hint) {
            (ClientError::InStream { endpoint, message }, Some(h)) => ClientError::InStream {
                endpoint,
                message: format!("{message} ({h})"),
            },
            (
                ClientError::Http {
                    endpoint,
                    status,
                    message,
                },
                Some(h),
            ) if status >= 500 => ClientError::Http {
                endpoint,
                status,
                message: format!("{message} ({h})"),
            },
            (e, _) => e,
        }
    }

    async fn prompt_text(&self, req: &GenRequest) -> Result<Option<String>, ClientError> {
        if let Some(t) = &req.prepared {
            return Ok(Some(t.clone()));
        }
        if let Some(c) = &self.calibrated {
            let p = c
                .prompt(&req.prompt, |t| self.count(req, t))
                .await
                .map_err(|e| self.hinted(e))?;
            return Ok(Some(p.text));
        }
        match &self.text {
            Some(t) => Ok(Some(self.exact_text(t, &req.prompt).await?)),
            None => Ok(None),
        }
    }

    /// The server's `usage.prompt_tokens` for `text` in a request shaped like `req`: one
    /// non-streamed request generating one token (a calibration request, not measured).
    async fn count(&self, req: &GenRequest, text: String) -> Result<usize, ClientError> {
        let path = self.path();
        let body = Self::unstreamed(self.body(req, Some(&text)), Some(1));
        let v = self
            .http
            .post_json(path, &body, req.timeouts.request)
            .await?;
        if v.get("usage").is_some_and(zero_usage) {
            return Err(counts_nothing(path, "a non-streamed calibration request"));
        }
        let n = v
            .get("usage")
            .and_then(|u| get_u64(u, "prompt_tokens"))
            .ok_or_else(|| ClientError::Malformed {
                endpoint: path.to_owned(),
                detail: "no usage.prompt_tokens in a non-streamed answer: without a tokenizer endpoint or a prompt count, no prompt length can be known on this server".to_owned(),
            })?;
        Ok(n as usize)
    }
}

/// Rounds of detokenize → re-tokenize before giving up.
const ROUNDS: usize = 5;

/// Reads `/v1/completions` (or chat) stream events.
#[derive(Debug, Default)]
pub struct CompletionsReader {
    completion_seen: u64,
    /// Chat answers: text in `delta.content` (streamed) or `message.content`.
    pub chat: bool,
    /// Read a missing `cached_tokens` as 0 (see [`OpenAi::missing_cached_is_zero`]).
    pub missing_cached_is_zero: bool,
    /// What the events said so far.
    pub got: Gathered,
}

impl EventReader for CompletionsReader {
    fn gathered(self) -> Gathered {
        self.got
    }

    /// A stream that ends right after its finish reason, with no `[DONE]` (Hugging Face
    /// `transformers serve`), is complete; its counts are fetched as for a stream without
    /// usage.
    fn complete_at_eof(&self) -> bool {
        self.got.finish_reason.is_some()
    }

    // One event's reading in order (sentinel, errors, choice, token, finish, final record):
    // each step depends on the ones before, so it reads as one piece.
    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError> {
        if let Some(mut done) = super::stream::done_sentinel(ev) {
            // A stream without usage (llama-cpp-python) is complete when `[DONE]` follows
            // the finish reason; its counts are then fetched another way (see `generate`).
            done.is_final = self.got.finish_reason.is_some();
            return Ok(done);
        }
        let endpoint = if self.chat { CHAT } else { COMPLETIONS };
        let v = match event_json(endpoint, ev) {
            Ok(v) => v,
            Err(e) => {
                return Err(in_stream_error(endpoint, ev, None).unwrap_or(e));
            }
        };
        if let Some(e) = in_stream_error(endpoint, ev, Some(&v)) {
            return Err(e);
        }
        if v.get("object").and_then(Value::as_str) == Some("error") {
            return Err(ClientError::InStream {
                endpoint: endpoint.to_owned(),
                message: super::http::error_message(&ev.data),
            });
        }
        // A choice with no text, delta or message carries nothing (LiteLLM's usage chunk is
        // `"choices":[{"index":0}]`): read as no choice, so its usage is not a token.
        let choice = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .filter(|c| {
                ["text", "delta", "message", "finish_reason"]
                    .iter()
                    .any(|k| c.get(*k).is_some())
            });
        let text_nonempty = choice.is_some_and(|c| {
            let field =
                |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            if self.chat {
                // The first chunk carries only the role: not a token.
                field(c.pointer("/delta/content"))
                    || field(c.pointer("/delta/reasoning_content"))
                    || field(c.pointer("/message/content"))
            } else {
                field(c.get("text"))
            }
        });
        if let Some(c) = choice {
            let text = if self.chat {
                c.pointer("/delta/content")
                    .or_else(|| c.pointer("/message/content"))
            } else {
                c.get("text")
            };
            if let Some(t) = text.and_then(Value::as_str) {
                self.got.output.text.push_str(t);
            }
        }
        // Usage of all zeros is no usage (the LiteLLM proxy sends it on streams without
        // stream_options): counts are then found another way, never read as 0 tokens.
        let usage = v.get("usage").filter(|u| u.is_object() && !zero_usage(u));
        let running = usage.and_then(|u| get_u64(u, "completion_tokens"));
        let closing = choice
            .and_then(|c| c.get("finish_reason"))
            .is_some_and(|f| !f.is_null());
        let has_token = match (choice, running) {
            // A running count (usage on every chunk) that rises is a token even when it
            // decodes to no text. The stream's first usage on a chunk without text reports
            // the tokens already streamed (llama-server's /v1 closing chunk: `"text":""` and
            // the finish reason; LiteLLM's usage chunk with an empty delta): no new token.
            (Some(_), Some(n)) if n > self.completion_seen => {
                let running_before = self.completion_seen > 0;
                self.completion_seen = n;
                text_nonempty || (running_before && !closing)
            }
            (Some(_), Some(_)) => false,
            (Some(_), None) => text_nonempty,
            (None, _) => false,
        };
        if let Some(fr) = choice
            .and_then(|c| c.get("finish_reason"))
            .and_then(Value::as_str)
        {
            self.got.finish_reason = Some(fr.to_owned());
        }
        // The final record: usage with prompt tokens on a chunk with no choices (OpenAI,
        // vLLM, SGLang) or with the finish reason (llama.cpp).
        let is_final = match usage {
            Some(u) if u.get("prompt_tokens").is_some() => {
                choice.is_none() || self.got.finish_reason.is_some()
            }
            _ => false,
        };
        if is_final {
            let u = usage.unwrap_or(&Value::Null);
            let timings = v.get("timings").map(llamacpp_timings).or_else(|| {
                v.get("metrics")
                    .and_then(|m| vllm_request_metrics(m, get_u64(u, "completion_tokens")))
            });
            self.got.counts = Counts {
                prompt_tokens: get_u64(u, "prompt_tokens"),
                completion_tokens: get_u64(u, "completion_tokens"),
                cached_tokens: u
                    .get("prompt_tokens_details")
                    .and_then(|d| get_u64(d, "cached_tokens"))
                    .or_else(|| timings.as_ref().and_then(|t| t.cache_n))
                    .or(self.missing_cached_is_zero.then_some(0)),
                cached_host_tokens: None,
            };
            self.got.spec =
                usage_spec(u).or_else(|| timings.as_ref().and_then(crate::timings::llamacpp_spec));
            self.got.timings = timings;
        }
        Ok(EventInfo {
            has_token,
            is_final,
            ends_stream: false,
        })
    }
}

/// The error of a server whose answers carry no token count (usage absent or all zeros)
/// where one is needed: no prompt length can be known or checked on it.
fn counts_nothing(path: &str, what: &str) -> ClientError {
    ClientError::Unsupported {
        what: "a prompt length on this server".to_owned(),
        hint: format!(
            "{what} to POST {path} answered usage of all zeros or none (prompt_tokens 0, completion_tokens 0): this server counts nothing, so no prompt length can be known or checked on it; --tokenizer-url URL lends the tokenizer of a server of the same model (its lengths are then exact), or measure a server that counts its tokens"
        ),
    }
}

/// Whether a usage record counts nothing at all (every count zero or absent).
fn zero_usage(u: &Value) -> bool {
    ["prompt_tokens", "completion_tokens", "total_tokens"]
        .iter()
        .all(|k| get_u64(u, k).unwrap_or(0) == 0)
}

/// Speculative counts from `usage.completion_tokens_details` (accepted and rejected
/// prediction tokens; no verify-step count, so no accept length).
fn usage_spec(usage: &Value) -> Option<SpecStats> {
    let d = usage.get("completion_tokens_details")?;
    let accepted = get_u64(d, "accepted_prediction_tokens")?;
    let rejected = get_u64(d, "rejected_prediction_tokens").unwrap_or(0);
    Some(
        SpecStats {
            source: "usage.completion_tokens_details".to_owned(),
            verify_steps: None,
            draft_tokens: Some(accepted.saturating_add(rejected)),
            accepted_tokens: Some(accepted),
            accept_length: None,
            accept_rate: None,
        }
        .derive(),
    )
}

/// vLLM's opt-in per-request `metrics` (`--enable-per-request-metrics`, on the final usage
/// chunk); its TTFT is measured from scheduling, so it excludes queueing.
///
/// The decode rate is NOT vLLM's `tokens_per_second`: that is n ÷ (TTFT + generation time),
/// prefill included (recorded 0.32.0: 8 tokens, 29.5 + 34.1 ms → 125.8 "tok/s"). vLLM's
/// `generation_time_ms` is first→last token (= `mean_itl_ms` × (n − 1) in the recorded
/// exchange), so the decode rate is (n − 1) ÷ generation time — the same span the client
/// times — or 1000 ÷ `mean_itl_ms` when the count is unknown.
fn vllm_request_metrics(m: &Value, completion_tokens: Option<u64>) -> Option<ServerTimings> {
    let f = |k: &str| m.get(k).and_then(Value::as_f64);
    let gen_ms = f("generation_time_ms");
    let itl = f("mean_itl_ms");
    let decode_per_s = match (completion_tokens, gen_ms, itl) {
        (Some(n), Some(ms), _) if n >= 2 && ms > 0.0 => Some((n - 1) as f64 / (ms / 1000.0)),
        (_, _, Some(itl)) if itl > 0.0 => Some(1000.0 / itl),
        _ => None,
    };
    let t = ServerTimings {
        source: "vllm.metrics".to_owned(),
        prompt_ms: f("time_to_first_token_ms"),
        queue_ms: f("queue_time_ms"),
        predicted_n: completion_tokens,
        predicted_ms: gen_ms,
        predicted_per_token_ms: itl,
        predicted_per_second: decode_per_s,
        ..Default::default()
    };
    (t.prompt_ms.is_some() || t.predicted_ms.is_some()).then_some(t)
}

#[async_trait]
impl Backend for OpenAi {
    fn kind(&self) -> BackendKind {
        BackendKind::Openai
    }

    fn endpoint(&self) -> &'static str {
        self.path()
    }

    fn http(&self) -> &Http {
        &self.http
    }

    async fn flush(&self) -> Result<String, ClientError> {
        // Unrecognised: the generic family's flush, which is none.
        let f = self.flush_with.and_then(super::family).unwrap_or(&Family);
        crate::family::Family::flush(f, &self.http).await
    }

    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        if let Some(c) = &self.calibrated {
            // Client-side units, not model tokens: lengths are calibrated per request.
            return c.units(text);
        }
        if let Some(t) = self.text.as_ref().or(self.ids_tokenizer.as_ref()) {
            return self.text_ids(t, text).await;
        }
        match self.tokenize {
            Some(TokenizeDialect::Extras) | None => Err(ClientError::Http {
                endpoint: "/tokenize".to_owned(),
                status: 404,
                message: "this server has no /tokenize endpoint; ctxbench needs the server's own tokenizer to build prompts of exact length".to_owned(),
            }),
            Some(d) => tokenize(&self.http, d, self.model.as_deref(), text).await,
        }
    }

    async fn prepare(&self, req: &mut GenRequest) -> Result<(), ClientError> {
        if req.prepared.is_none() {
            req.prepared = self.prompt_text(req).await?;
        }
        Ok(())
    }

    /// Sends one short streamed and one non-streamed test request with every optional field;
    /// a 400/422 (or a 5xx naming a field) leads to a new try without the fields the answer
    /// names (or, if it names none, without every optional field). A refusal that no
    /// change cures is returned as it is. Fields that were given up are named, with the
    /// server's words and their cost, in the notes.
    async fn negotiate(&self) -> Result<crate::backend::Negotiated, ClientError> {
        let mut out = crate::backend::Negotiated::default();
        for streamed in [true, false] {
            for _ in 0..NEGOTIATION_ROUNDS {
                let err = match self.try_dialect(streamed).await {
                    Ok(()) => break,
                    Err(e) => e,
                };
                let (status, message) = match &err {
                    ClientError::Http {
                        status, message, ..
                    } => (*status, message.clone()),
                    _ => return Err(err),
                };
                let refusal = matches!(status, 400 | 422)
                    || OPTIONAL_FIELDS.iter().any(|(f, _)| message.contains(f));
                let Some((d, changed)) = refusal.then(|| self.next_dialect(&message)).flatten()
                else {
                    return Err(err);
                };
                self.set_dialect(d);
                for f in changed {
                    let cost = OPTIONAL_FIELDS
                        .iter()
                        .find(|(x, _)| *x == f)
                        .map_or("none: max_completion_tokens is sent instead", |(_, c)| *c);
                    if f != "max_tokens" {
                        out.dropped.push(f.to_owned());
                    }
                    out.notes.push(format!(
                        "the server refused a request carrying {f} (HTTP {status}: {}); requests go without it. Cost: {cost}",
                        super::http::snippet(&message)
                    ));
                }
            }
        }
        let d = self.dialect();
        if d.max_completion_tokens {
            out.dropped
                .push("max_tokens (max_completion_tokens sent)".to_owned());
        }
        Ok(out)
    }

    async fn generate_once(&self, req: &GenRequest) -> Result<OnceOutcome, ClientError> {
        let text = self.prompt_text(req).await?;
        let body = Self::unstreamed(self.body(req, text.as_deref()), None);
        generate_unstreamed(
            &self.http,
            self.path(),
            &body,
            req.timeouts.request,
            self.reader(),
        )
        .await
        .map_err(|e| self.hinted(e))
    }

    /// The server's count of a message of only the prompt's first `units` (calibrated
    /// prompts only): the template's tokens and BOS are in it, wherever they sit.
    async fn counted_prefix(
        &self,
        req: &GenRequest,
        units: usize,
    ) -> Result<Option<u64>, ClientError> {
        let Some(c) = &self.calibrated else {
            return Ok(None);
        };
        let text = c.text_of(&req.prompt[..units.min(req.prompt.len())]);
        Ok(Some(self.count(req, text).await? as u64))
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        // Prepared (or built now) before t0: tokenizer round-trips and calibration requests
        // are not part of the measurement.
        let text = self.prompt_text(req).await?;
        let body = self.body(req, text.as_deref());
        let mut out = generate_streamed(
            &self.http,
            Framing::Sse,
            self.path(),
            &Value::Object(body.clone()),
            req.timeouts,
            self.reader(),
        )
        .await
        .map_err(|e| self.hinted(e))?;
        if out.counts.prompt_tokens.is_none() && !self.counts_nothing.load(Ordering::Relaxed) {
            // The stream carried no usage (llama-cpp-python): ask for the server's own count
            // of the same prompt, after the measurement so it cannot warm it.
            let again = match generate_unstreamed(
                &self.http,
                self.path(),
                &Self::unstreamed(body, Some(1)),
                req.timeouts.request,
                self.reader(),
            )
            .await
            {
                // Not a stream cut short: a complete answer (choices, finish reason) whose
                // usage counts nothing, after a complete stream that counted nothing either.
                // Lengths made exact by construction (token ids, text through a tokenizer)
                // stand without the server's word; calibrated ones cannot.
                Err(ClientError::Truncated { .. }) if out.finish_reason.is_some() => {
                    if self.calibrated.is_some() {
                        return Err(counts_nothing(
                            self.path(),
                            &format!(
                                "a complete stream ({} token chunk(s), finish reason {:?}) and its non-streamed repeat",
                                out.stream.token_events,
                                out.finish_reason.as_deref().unwrap_or_default()
                            ),
                        ));
                    }
                    self.counts_nothing.store(true, Ordering::Relaxed);
                    self.note("the server counts nothing (usage of all zeros or none, streamed and not): prompt lengths are exact by construction but not confirmed by the server (flag length_unreported)");
                    None
                }
                other => Some(other?),
            };
            let again = again.map(|a| a.counts.prompt_tokens);
            if let Some(n) = again.flatten() {
                out.counts.prompt_tokens = Some(n);
                out.flags.push(Flag::PromptTokensFromRepeat);
                self.note("the stream carries no usage: each prompt count is usage.prompt_tokens of a non-streamed repeat of the same request (max_tokens 1) sent after the measurement (flag prompt_tokens_from_repeat)");
            }
        }
        if out.counts.completion_tokens.is_none() && out.stream.token_events > 0 {
            out.counts.completion_tokens = Some(out.stream.token_events as u64);
            out.flags.push(Flag::OutputTokensFromEvents);
            self.note("the stream carries no usage: output counts are the token-carrying events (flag output_tokens_from_events; exact when the server sends one token per event)");
        }
        Ok(out)
    }

    fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> StreamEvent {
        StreamEvent::data(data)
    }

    #[test]
    fn openai_baseline_stream_with_usage_chunk() {
        let mut r = CompletionsReader::default();
        // An empty first chunk is not a token (the TTFT trap).
        let e = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"text":"","finish_reason":null}],"usage":null}"#,
            ))
            .unwrap();
        assert!(!e.has_token);
        let t = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"text":"Hi","finish_reason":null}]}"#,
            ))
            .unwrap();
        assert!(t.has_token && !t.is_final);
        let l = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"text":"!","finish_reason":"length"}],"usage":null}"#,
            ))
            .unwrap();
        assert!(l.has_token && !l.is_final);
        let u = r
            .on_event(&ev(r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":2,"total_tokens":102,"prompt_tokens_details":{"cached_tokens":64}}}"#))
            .unwrap();
        assert!(u.is_final && !u.has_token);
        assert_eq!(
            r.got.counts,
            Counts {
                prompt_tokens: Some(100),
                completion_tokens: Some(2),
                cached_tokens: Some(64),
                cached_host_tokens: None,
            }
        );
        assert!(r.on_event(&ev("[DONE]")).unwrap().ends_stream);
    }

    #[test]
    fn llamacpp_final_chunk_with_timings_and_no_details() {
        let mut r = CompletionsReader::default();
        let f = r
            .on_event(&ev(r#"{"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":8,"prompt_tokens":2048,"total_tokens":2056},"timings":{"cache_n":0,"prompt_n":2048,"prompt_ms":150.0,"predicted_n":8,"predicted_ms":9.0}}"#))
            .unwrap();
        assert!(f.is_final);
        assert!(
            !f.has_token,
            "the closing chunk's count is of tokens already streamed"
        );
        assert_eq!(r.got.counts.cached_tokens, Some(0));
        assert_eq!(r.got.timings.unwrap().prompt_ms, Some(150.0));
    }

    #[test]
    fn accepted_prediction_tokens_give_speculative_counts() {
        let mut r = CompletionsReader::default();
        r.on_event(&ev(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":20,"completion_tokens_details":{"accepted_prediction_tokens":12,"rejected_prediction_tokens":4}}}"#))
            .unwrap();
        let spec = r.got.spec.expect("spec stats");
        assert_eq!(spec.accepted_tokens, Some(12));
        assert_eq!(spec.draft_tokens, Some(16));
        assert_eq!(spec.accept_rate, Some(0.75));
        assert_eq!(
            spec.verify_steps, None,
            "not reported: no accept length is made up"
        );
        assert_eq!(spec.accept_length, None);
    }

    #[test]
    fn chat_role_chunk_is_not_a_token_and_done_after_finish_is_final_without_usage() {
        let mut r = CompletionsReader {
            chat: true,
            ..Default::default()
        };
        let role = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#,
            ))
            .unwrap();
        assert!(!role.has_token, "the role chunk is not generated content");
        let empty = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}"#,
            ))
            .unwrap();
        assert!(!empty.has_token);
        let t = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"length"}]}"#,
            ))
            .unwrap();
        assert!(t.has_token && !t.is_final);
        let done = r.on_event(&ev("[DONE]")).unwrap();
        assert!(
            done.ends_stream && done.is_final,
            "complete, counts fetched elsewhere"
        );
        assert_eq!(r.got.counts.prompt_tokens, None, "never guessed");
        // Without a finish reason, [DONE] does not make a stream complete.
        let mut cut = CompletionsReader::default();
        cut.on_event(&ev(r#"{"choices":[{"text":"a"}]}"#)).unwrap();
        assert!(!cut.on_event(&ev("[DONE]")).unwrap().is_final);
    }

    #[test]
    fn usage_of_all_zeros_is_no_usage_and_eof_after_the_finish_reason_completes_a_stream() {
        // LiteLLM without stream_options: a final chunk whose usage counts nothing.
        let mut r = CompletionsReader::default();
        r.on_event(&ev(
            r#"{"choices":[{"index":0,"text":"a","finish_reason":"length"}]}"#,
        ))
        .unwrap();
        let z = r
            .on_event(&ev(r#"{"choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}"#))
            .unwrap();
        assert!(!z.is_final, "zeros are not counts");
        assert_eq!(r.got.counts.prompt_tokens, None);
        // transformers serve: no [DONE]; the finish reason makes what arrived complete.
        assert!(r.complete_at_eof());
        let cut = CompletionsReader::default();
        assert!(!cut.complete_at_eof(), "no finish reason: truncated");
    }

    #[test]
    fn negotiation_drops_named_fields_then_everything_optional() {
        let o = OpenAi::new(
            Http::new("http://127.0.0.1:9", None, None).unwrap(),
            None,
            None,
            None,
        );
        let (d, changed) = o
            .next_dialect("Unexpected fields in the request: {'ignore_eos'}")
            .unwrap();
        assert_eq!(changed, vec!["ignore_eos"]);
        o.set_dialect(d);
        let b = o.body_of(json!("x"), 2, true);
        assert!(b.get("ignore_eos").is_none() && b.get("stream_options").is_some());
        let (d, changed) = o
            .next_dialect("Unsupported parameter: 'max_tokens'")
            .unwrap();
        assert_eq!(changed, vec!["max_tokens"]);
        o.set_dialect(d);
        let b = o.body_of(json!("x"), 2, true);
        assert_eq!(b.get("max_completion_tokens"), Some(&json!(2)));
        assert!(b.get("max_tokens").is_none());
        // A refusal that names nothing: every optional field still sent goes.
        let (d, changed) = o.next_dialect("Bad Request").unwrap();
        assert_eq!(
            changed,
            vec!["stream_options", "cache_prompt", "temperature"]
        );
        o.set_dialect(d);
        let b = o.body_of(json!("x"), 2, true);
        for f in ["ignore_eos", "stream_options", "temperature"] {
            assert!(b.get(f).is_none(), "{f}");
        }
        assert_eq!(b.get("stream"), Some(&json!(true)), "not optional");
        assert!(
            o.next_dialect("Bad Request").is_none(),
            "nothing left to drop"
        );
    }

    #[test]
    fn a_usage_chunk_with_an_empty_choice_is_final_and_no_token() {
        // The LiteLLM proxy with stream_options: the finish chunk, then usage with an empty
        // choice (recorded: tests/fixtures/recorded/litellm-1.108.7).
        let mut r = CompletionsReader::default();
        let t = r
            .on_event(&ev(
                r#"{"choices":[{"index":0,"text":"a","finish_reason":null}]}"#,
            ))
            .unwrap();
        assert!(t.has_token);
        r.on_event(&ev(
            r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#,
        ))
        .unwrap();
        let u = r
            .on_event(&ev(r#"{"choices":[{"index":0}],"usage":{"prompt_tokens":1024,"completion_tokens":8,"total_tokens":1032,"prompt_tokens_details":{"cached_tokens":1}}}"#))
            .unwrap();
        assert!(u.is_final && !u.has_token, "{u:?}");
        assert_eq!(r.got.counts.completion_tokens, Some(8));
        assert_eq!(r.got.counts.cached_tokens, Some(1));
    }

    #[test]
    fn missing_cached_count_stays_unknown() {
        let mut r = CompletionsReader::default();
        r.on_event(&ev(
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ))
        .unwrap();
        assert_eq!(r.got.counts.cached_tokens, None);
    }

    #[test]
    fn vllm_per_request_metrics_become_server_timings() {
        let mut r = CompletionsReader::default();
        r.on_event(&ev(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3},"metrics":{"time_to_first_token_ms":12.5,"queue_time_ms":1.0,"generation_time_ms":20.0,"mean_itl_ms":10.0,"tokens_per_second":100.0}}"#))
            .unwrap();
        let t = r.got.timings.unwrap();
        assert_eq!(t.source, "vllm.metrics");
        assert_eq!(
            (t.prompt_ms, t.queue_ms, t.predicted_ms),
            (Some(12.5), Some(1.0), Some(20.0))
        );
        // (3 − 1) tokens over 20 ms of generation: 100 tok/s, not vLLM's tokens_per_second.
        assert_eq!(t.predicted_per_second, Some(100.0));
        assert_eq!(t.predicted_n, Some(3));
    }

    /// The recorded vLLM 0.32.0 stream: `tokens_per_second` 125.8 includes the prefill; the
    /// decode rate is 7 tokens over `generation_time_ms` 34.07 = 205.5 tok/s.
    #[test]
    fn recorded_vllm_server_decode_rate_excludes_prefill() {
        let fx: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/recorded/vllm-0.32.0/completions_stream.json"
        ))
        .unwrap();
        let body = fx["response"]["body_text"].as_str().unwrap();
        let mut r = CompletionsReader::default();
        for line in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
            r.on_event(&ev(line)).unwrap();
        }
        let t = r.got.timings.unwrap();
        let decode = t.predicted_per_second.unwrap();
        assert!((decode - 7.0 / 0.034067).abs() < 0.5, "{decode}");
        assert!((decode - 1000.0 / t.predicted_per_token_ms.unwrap()).abs() < 0.5);
    }

    #[test]
    fn sglang_cache_report_omits_zero_cached_tokens() {
        let mut r = CompletionsReader {
            missing_cached_is_zero: true,
            ..Default::default()
        };
        r.on_event(&ev(
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ))
        .unwrap();
        assert_eq!(r.got.counts.cached_tokens, Some(0));
    }

    #[test]
    fn error_shapes_in_stream() {
        let mut r = CompletionsReader::default();
        assert!(r
            .on_event(&ev(
                r#"{"error":{"message":"overloaded","type":"server_error"}}"#
            ))
            .is_err());
        assert!(r
            .on_event(&ev(r#"{"object":"error","message":"bad","type":"x"}"#))
            .is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_events_never_panic(data in ".{0,200}", json_like in "\\{[a-z_\":0-9,\\[\\]{} ]{0,120}\\}") {
            let mut r = CompletionsReader::default();
            let _ = r.on_event(&ev(&data));
            let _ = r.on_event(&ev(&json_like));
        }
    }
}
