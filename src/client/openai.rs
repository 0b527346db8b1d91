//! Generic OpenAI-compatible `/v1/completions` with `stream_options.include_usage`.
//!
//! Token counts come from the final `usage` record, never from chunk counts. Where a server
//! sends cumulative usage in every chunk (`continuous_usage_stats`), "carries a token" is read
//! from `completion_tokens` rising; otherwise from a non-empty text delta.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::family::{needs_tokenize, ConnectOptions, FamilyId, Server, ServerProfile};
use super::stream::{event_json, in_stream_error, EventInfo, EventReader, Framing, Gathered};
use super::stream::{generate_streamed, generate_unstreamed, StreamEvent};
use super::{get_u64, llamacpp_timings, Backend, BackendKind, Counts, GenOutcome, GenRequest};
use super::{Http, OnceOutcome, ServerTimings, SpecStats};
use crate::error::{ClientError, UsageError};

/// Any OpenAI-compatible server: recognised by `/v1/models` answering (the fallback, last
/// in detection order).
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl super::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Openai,
            "openai-compatible",
            "an OpenAI-compatible server",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        Ok((s.get("/v1/models").await?.0 == 200).then(|| "GET /v1/models answered".to_owned()))
    }

    /// `/v1/completions` with token ids where the server's `/tokenize` is known; on
    /// llama.cpp also its `cache_prompt` switch and `timings`. No flush in this protocol.
    async fn capabilities(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        if p.detected == Some(BackendKind::Llamacpp) {
            p.tokenize = Some(TokenizeDialect::Llamacpp);
            p.token_id_prompts = true;
            p.cache_bypass = true;
            p.spec_stats =
                Some("llamacpp timings in the final /v1 chunk (when a draft is configured)".into());
        } else if s.has_vllm_tokenize(p.model.as_deref()).await {
            p.tokenize = Some(TokenizeDialect::Vllm);
            p.token_id_prompts = true;
        }
        Ok(())
    }

    /// The OpenAI protocol is spoken by every family that answers `/v1/models`.
    fn speaks_to(&self, _detected: Option<BackendKind>) -> bool {
        true
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
        let o = OpenAi::new(
            http,
            p.model.clone(),
            p.tokenize,
            p.cache_bypass
                .then(|| ("cache_prompt".to_owned(), json!(false))),
        );
        Ok(Box::new(if p.cached_missing_means_zero {
            o.missing_cached_is_zero()
        } else {
            o
        }))
    }
}

/// How a server's `/tokenize` wants its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizeDialect {
    /// `{"content": ...}` (llama.cpp).
    Llamacpp,
    /// `{"prompt": ..., "add_special_tokens": false}` (vLLM, SGLang).
    Vllm,
}

/// Fields of a streamed `/v1/completions` request.
impl OpenAi {
    fn body(&self, req: &GenRequest) -> Map<String, Value> {
        let mut body = Map::new();
        if let Some(m) = &self.model {
            body.insert("model".into(), json!(m));
        }
        body.insert("prompt".into(), json!(req.prompt));
        body.insert("max_tokens".into(), json!(req.max_tokens));
        body.insert("temperature".into(), json!(0));
        body.insert("ignore_eos".into(), json!(true));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        if req.cache_bypass {
            if let Some((k, v)) = &self.cache_bypass_field {
                body.insert(k.clone(), v.clone());
            }
        }
        body
    }
}

/// The OpenAI-compatible protocol.
#[derive(Debug, Clone)]
pub struct OpenAi {
    http: Http,
    model: Option<String>,
    tokenize: Option<TokenizeDialect>,
    /// Extra body fields the probe found the server accepts (e.g. llama.cpp `cache_prompt`).
    cache_bypass_field: Option<(String, Value)>,
    /// The server omits `cached_tokens` when it is 0 (SGLang with `--enable-cache-report`).
    missing_cached_is_zero: bool,
}

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
        }
    }

    fn reader(&self) -> CompletionsReader {
        CompletionsReader {
            missing_cached_is_zero: self.missing_cached_is_zero,
            ..Default::default()
        }
    }

    /// Reads a missing `cached_tokens` as 0: SGLang with `--enable-cache-report` sends the
    /// field only when it is positive.
    pub fn missing_cached_is_zero(mut self) -> Self {
        self.missing_cached_is_zero = true;
        self
    }
}

const ENDPOINT: &str = "/v1/completions";

/// Reads `/v1/completions` stream events.
#[derive(Debug, Default)]
pub struct CompletionsReader {
    completion_seen: u64,
    /// Read a missing `cached_tokens` as 0 (see [`OpenAi::missing_cached_is_zero`]).
    pub missing_cached_is_zero: bool,
    /// What the events said so far.
    pub got: Gathered,
}

impl EventReader for CompletionsReader {
    fn gathered(self) -> Gathered {
        self.got
    }

    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError> {
        if let Some(done) = super::stream::done_sentinel(ev) {
            return Ok(done);
        }
        let v = match event_json(ENDPOINT, ev) {
            Ok(v) => v,
            Err(e) => {
                return Err(in_stream_error(ENDPOINT, ev, None).unwrap_or(e));
            }
        };
        if let Some(e) = in_stream_error(ENDPOINT, ev, Some(&v)) {
            return Err(e);
        }
        if v.get("object").and_then(Value::as_str) == Some("error") {
            return Err(ClientError::InStream {
                endpoint: ENDPOINT.to_owned(),
                message: super::http::error_message(&ev.data),
            });
        }
        let choice = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        let text_nonempty = choice
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        let usage = v.get("usage").filter(|u| u.is_object());
        let running = usage.and_then(|u| get_u64(u, "completion_tokens"));
        let has_token = match (choice, running) {
            (Some(_), Some(n)) if n > self.completion_seen => {
                self.completion_seen = n;
                true
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
            let timings = v
                .get("timings")
                .map(llamacpp_timings)
                .or_else(|| v.get("metrics").and_then(vllm_request_metrics));
            self.got.counts = Counts {
                prompt_tokens: get_u64(u, "prompt_tokens"),
                completion_tokens: get_u64(u, "completion_tokens"),
                cached_tokens: u
                    .get("prompt_tokens_details")
                    .and_then(|d| get_u64(d, "cached_tokens"))
                    .or_else(|| timings.as_ref().and_then(|t| t.cache_n))
                    .or(self.missing_cached_is_zero.then_some(0)),
            };
            self.got.spec =
                usage_spec(u).or_else(|| timings.as_ref().and_then(super::llamacpp_spec));
            self.got.timings = timings;
        }
        Ok(EventInfo {
            has_token,
            is_final,
            ends_stream: false,
        })
    }
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
fn vllm_request_metrics(m: &Value) -> Option<ServerTimings> {
    let f = |k: &str| m.get(k).and_then(Value::as_f64);
    let t = ServerTimings {
        source: "vllm.metrics".to_owned(),
        prompt_ms: f("time_to_first_token_ms"),
        queue_ms: f("queue_time_ms"),
        predicted_ms: f("generation_time_ms"),
        predicted_per_token_ms: f("mean_itl_ms"),
        predicted_per_second: f("tokens_per_second"),
        ..Default::default()
    };
    (t.prompt_ms.is_some() || t.predicted_ms.is_some()).then_some(t)
}

/// vLLM/SGLang `/tokenize` (`{"prompt"}`), without special tokens so ids can be spliced.
pub async fn tokenize_vllm(
    http: &Http,
    model: Option<&str>,
    text: &str,
) -> Result<Vec<u32>, ClientError> {
    let mut body = json!({"prompt": text, "add_special_tokens": false});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    let v = http
        .post_json("/tokenize", &body, Duration::from_secs(300))
        .await?;
    super::llamacpp::parse_token_list("/tokenize", &v)
}

#[async_trait]
impl Backend for OpenAi {
    fn kind(&self) -> BackendKind {
        BackendKind::Openai
    }

    fn endpoint(&self) -> &'static str {
        ENDPOINT
    }

    fn http(&self) -> &Http {
        &self.http
    }

    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        match self.tokenize {
            Some(TokenizeDialect::Llamacpp) => super::llamacpp::tokenize(&self.http, text).await,
            Some(TokenizeDialect::Vllm) => {
                tokenize_vllm(&self.http, self.model.as_deref(), text).await
            }
            None => Err(ClientError::Http {
                endpoint: "/tokenize".to_owned(),
                status: 404,
                message: "this server has no /tokenize endpoint; ctxbench needs the server's own tokenizer to build prompts of exact length".to_owned(),
            }),
        }
    }

    async fn generate_once(&self, req: &GenRequest) -> Result<OnceOutcome, ClientError> {
        let mut body = self.body(req);
        body.insert("stream".into(), json!(false));
        // vLLM answers 400 to stream_options on a non-streamed request.
        body.remove("stream_options");
        let body = Value::Object(body);
        generate_unstreamed(
            &self.http,
            ENDPOINT,
            &body,
            req.timeouts.request,
            self.reader(),
        )
        .await
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        let body = Value::Object(self.body(req));
        generate_streamed(
            &self.http,
            Framing::Sse,
            ENDPOINT,
            &body,
            req.timeouts,
            self.reader(),
        )
        .await
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
                cached_tokens: Some(64)
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
        assert_eq!(t.predicted_per_second, Some(100.0));
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
