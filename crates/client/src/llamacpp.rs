//! llama.cpp `llama-server` native API: `/completion` streaming, `/tokenize`.
//!
//! Every event of `/completion` carries `tokens_predicted`, the cumulative count of generated
//! tokens, so "this event carries a token" is read from that counter rising, not from chunk
//! count or non-empty text (a token can decode to an empty string). The stream has no
//! `[DONE]`: the event with `stop: true` is final and carries `timings`.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};

use super::family::{CapacityFlags, MetricsVocabulary};
use super::family::{ConnectOptions, FamilyId, Server, ServerProfile};
use super::stream::{event_json, in_stream_error, EventInfo, EventReader, Framing, Gathered};
use super::stream::{generate_streamed, generate_unstreamed, StreamEvent};
use super::tokenize::{tokenize, TokenizeDialect};
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
use ctxbench_schema::record::SpecStats;

/// The llama.cpp native protocol.
#[derive(Debug, Clone)]
pub struct LlamaCpp {
    http: Http,
    slots: u64,
}

impl LlamaCpp {
    /// A backend speaking to `http`; `slots` is `/props` `total_slots` (all are erased by
    /// a flush).
    pub fn new(http: Http, slots: u64) -> Self {
        LlamaCpp {
            http,
            slots: slots.max(1),
        }
    }
}

/// The model's size from a `/v1/models` entry's `meta`: `n_params`, `size` (bytes of the
/// weights), and `n_vocab`/`n_embd` for the embedding table; `None` without either count.
pub fn model_facts(entry: &Value) -> Option<ctxbench_schema::model::ModelFacts> {
    let meta = entry.get("meta")?;
    let (params, size) = (get_u64(meta, "n_params"), get_u64(meta, "size"));
    if params.is_none() && size.is_none() {
        return None;
    }
    let table = get_u64(meta, "n_vocab").zip(get_u64(meta, "n_embd"));
    let mut f = ctxbench_schema::model::ModelFacts::from_counts(
        "llama.cpp /v1/models meta",
        params,
        size,
        table,
    );
    f.dtype = meta.get("ftype").and_then(Value::as_str).map(str::to_owned);
    Some(f)
}

/// Erases every slot's KV cache (`POST /slots/{id}?action=erase`). llama-server answers 501
/// unless it was started with `--slot-save-path`.
pub async fn erase_slots(http: &Http, slots: u64) -> Result<String, ClientError> {
    let mut erased = 0;
    for id in 0..slots.max(1) {
        let path = format!("/slots/{id}?action=erase");
        match http
            .post_json(&path, &json!({}), Duration::from_secs(30))
            .await
        {
            Ok(v) => erased += get_u64(&v, "n_erased").unwrap_or(0),
            Err(ClientError::Http { status: 501, .. }) => {
                return Err(ClientError::Unsupported {
                    what: "llama.cpp slot erase".to_owned(),
                    hint: "restart llama-server with --slot-save-path DIR to enable it".to_owned(),
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(format!(
        "llama.cpp slot erase ({} slot(s), {erased} tokens erased)",
        slots.max(1)
    ))
}

const ENDPOINT: &str = "/completion";

#[derive(Serialize)]
struct CompletionBody<'a> {
    prompt: &'a [u32],
    n_predict: u32,
    temperature: f32,
    top_k: u32,
    ignore_eos: bool,
    stream: bool,
    cache_prompt: bool,
    // Progress events during prefill keep bytes flowing, so a stall can be told from a
    // long prefill.
    return_progress: bool,
    // Generated ids per event, for output fingerprints (the text alone can hide a
    // different token split).
    return_tokens: bool,
}

/// Reads llama.cpp `/completion` events; shared with the tests.
#[derive(Debug, Default)]
pub struct CompletionReader {
    predicted: u64,
    /// What the events said so far.
    pub got: Gathered,
}

impl EventReader for CompletionReader {
    fn gathered(self) -> Gathered {
        self.got
    }

    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError> {
        if let Some(done) = super::stream::done_sentinel(ev) {
            return Ok(done);
        }
        if ev.event.as_deref() == Some("error") {
            let v = serde_json::from_str::<Value>(&ev.data).ok();
            if let Some(e) = in_stream_error(ENDPOINT, ev, v.as_ref()) {
                return Err(e);
            }
        }
        let v = event_json(ENDPOINT, ev)?;
        if let Some(e) = in_stream_error(ENDPOINT, ev, Some(&v)) {
            return Err(e);
        }
        let predicted = get_u64(&v, "tokens_predicted");
        let content_nonempty = v
            .get("content")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        let tokens_nonempty = v
            .get("tokens")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let has_token = match predicted {
            Some(n) if n > self.predicted => {
                self.predicted = n;
                true
            }
            Some(_) => false,
            // An older build without the counter: fall back on the payload.
            None => (content_nonempty || tokens_nonempty) && v.get("prompt_progress").is_none(),
        };
        if has_token {
            if let Some(ids) = v.get("tokens").and_then(Value::as_array) {
                let ids = ids.iter().filter_map(Value::as_u64).map(|t| t as u32);
                self.got.output.push_ids(ids);
            }
            if let Some(t) = v.get("content").and_then(Value::as_str) {
                self.got.output.text.push_str(t);
            }
        }
        let is_final = v.get("stop").and_then(Value::as_bool) == Some(true);
        if is_final {
            let timings = v.get("timings").map(llamacpp_timings);
            let cached = timings
                .as_ref()
                .and_then(|t| t.cache_n)
                .or_else(|| get_u64(&v, "tokens_cached"));
            let prompt = get_u64(&v, "tokens_evaluated").or_else(|| {
                let t = timings.as_ref()?;
                t.prompt_n?.checked_add(t.cache_n.unwrap_or(0))
            });
            self.got.counts = Counts {
                prompt_tokens: prompt,
                completion_tokens: predicted
                    .or_else(|| timings.as_ref().and_then(|t| t.predicted_n)),
                cached_tokens: cached,
                cached_host_tokens: None,
            };
            self.got.spec = timings.as_ref().and_then(crate::timings::llamacpp_spec);
            self.got.timings = timings;
            self.got.finish_reason = v
                .get("stop_type")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        Ok(EventInfo {
            has_token,
            is_final,
            ends_stream: is_final,
        })
    }
}

#[async_trait]
impl Backend for LlamaCpp {
    fn kind(&self) -> BackendKind {
        BackendKind::Llamacpp
    }

    fn endpoint(&self) -> &'static str {
        ENDPOINT
    }

    fn http(&self) -> &Http {
        &self.http
    }

    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        tokenize(&self.http, TokenizeDialect::Llamacpp, None, text).await
    }

    async fn flush(&self) -> Result<String, ClientError> {
        erase_slots(&self.http, self.slots).await
    }

    async fn generate_once(&self, req: &GenRequest) -> Result<OnceOutcome, ClientError> {
        let body = body(req, false)?;
        let reader = CompletionReader::default();
        generate_unstreamed(&self.http, ENDPOINT, &body, req.timeouts.request, reader).await
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        let body = body(req, true)?;
        let reader = CompletionReader::default();
        generate_streamed(
            &self.http,
            Framing::Sse,
            ENDPOINT,
            &body,
            req.timeouts,
            reader,
        )
        .await
    }
}

/// The `/completion` body: greedy, EOS ignored, cache reuse off when the request says so.
fn body(req: &GenRequest, stream: bool) -> Result<Value, ClientError> {
    let body = CompletionBody {
        prompt: &req.prompt,
        n_predict: req.max_tokens,
        temperature: 0.0,
        top_k: 1,
        ignore_eos: true,
        stream,
        cache_prompt: !req.cache_bypass,
        return_progress: stream,
        return_tokens: true,
    };
    serde_json::to_value(&body).map_err(|e| ClientError::Malformed {
        endpoint: ENDPOINT.to_owned(),
        detail: e.to_string(),
    })
}

/// llama.cpp's llama-server: recognised by `/props`; `n_ctx` per slot, slot erase as flush.
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl crate::family::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Llamacpp,
            "llama.cpp",
            "llama.cpp's llama-server",
        )
    }

    /// llama-server keeps the whole common prefix (`timings.cache_n`) and re-evaluates at
    /// least the last prompt token: one token of allowance.
    fn reuse_allowance(&self, _prefix: u64) -> (u64, &'static str) {
        (
            1,
            "llama.cpp re-evaluates at least the last prompt token (timings.cache_n)",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        let props = s.json("/props").await?;
        Ok(props
            .filter(|p| p.get("default_generation_settings").is_some())
            .map(|_| "GET /props answered with default_generation_settings".to_owned()))
    }

    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        let Some(props) = s.json("/props").await? else {
            return Ok(());
        };
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
        p.total_slots = get_u64(&props, "total_slots");
        p.model_facts = s.first_model().await?.and_then(|m| model_facts(&m));
        if !p.metrics {
            p.notes
                .push("/metrics is off: start llama-server with --metrics".into());
        }
        Ok(())
    }

    async fn capabilities(
        &self,
        _s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<(), ClientError> {
        p.tokenize = Some(TokenizeDialect::Llamacpp);
        p.token_id_prompts = true;
        p.cache_bypass = true;
        p.flush = Some("POST /slots/{id}?action=erase, every slot (needs --slot-save-path)".into());
        p.spec_stats =
            Some("llamacpp timings draft_n/draft_n_accepted (when a draft is configured)".into());
        Ok(())
    }

    fn connect(
        &self,
        http: Http,
        p: &ServerProfile,
        _o: &ConnectOptions,
    ) -> Result<Box<dyn Backend>, UsageError> {
        Ok(Box::new(LlamaCpp::new(http, p.total_slots.unwrap_or(1))))
    }

    /// Its `/v1/completions` takes token ids, its `cache_prompt` switch and its `timings`
    /// as the native API does. The slot erase is not kept: it needs the slot count.
    async fn openai_capabilities(
        &self,
        _s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<bool, ClientError> {
        p.tokenize = Some(TokenizeDialect::Llamacpp);
        p.token_id_prompts = true;
        p.cache_bypass = true;
        p.spec_stats =
            Some("llamacpp timings in the final /v1 chunk (when a draft is configured)".into());
        Ok(true)
    }

    fn metrics(&self) -> Option<&'static dyn MetricsVocabulary> {
        Some(&Metrics)
    }

    fn capacity_flags(&self) -> CapacityFlags {
        CapacityFlags {
            slots: Some("-np (--parallel)".into()),
            kv_pool: Some("-c (total context, shared by the slots)".into()),
        }
    }

    /// `/slots` (on by default, off with `--no-slots`), else the `--metrics` gauges.
    fn busy_sources(&self) -> &'static [crate::busy::BusySource] {
        &[
            crate::busy::BusySource::Endpoint(&SLOTS),
            crate::busy::BusySource::MetricsGauges(&[
                "llamacpp:requests_processing",
                "llamacpp:requests_deferred",
            ]),
        ]
    }
}

/// llama.cpp's `/metrics` names (needs `--metrics`).
#[derive(Debug, Clone, Copy)]
pub struct Metrics;

impl MetricsVocabulary for Metrics {
    fn kept(&self) -> &'static [&'static str] {
        &[
            "tokens_predicted",
            "n_decode",
            "prompt_seconds",
            "spec_decode",
        ]
    }

    /// Recent builds count verify steps under vLLM's `spec_decode_*` names, which beat the
    /// steps derived from `timings`.
    fn spec(&self, d: &std::collections::BTreeMap<String, f64>) -> Option<Option<SpecStats>> {
        super::vllm::spec_decode(d, "llamacpp:")
    }

    /// llama.cpp counts no requests; its generated tokens are counted as each slot is
    /// released, before the final answer is sent.
    fn served(&self, d: &std::collections::BTreeMap<String, f64>) -> Option<crate::busy::Served> {
        let counter = "llamacpp:tokens_predicted_total";
        Some(crate::busy::Served {
            counter,
            unit: crate::busy::ServedUnit::GeneratedTokens,
            count: crate::metrics::sum(d, counter)?,
        })
    }
}

/// llama.cpp `GET /slots`: `is_processing` per slot, and the task each slot last took
/// (`id_task`). Off with `--no-slots` (501).
pub const SLOTS: crate::busy::BusyEndpoint = crate::busy::BusyEndpoint {
    path: "/slots",
    describe: "GET /slots (is_processing, and the task each slot took)",
    parse: parse_slots,
    malformed: "not an array of slots",
    refused: |s| match s {
        501 => "slots endpoint disabled (--no-slots)",
        _ => "no slots answer",
    },
};

/// Parses llama.cpp's `/slots` answer.
pub fn parse_slots(v: &Value) -> Option<crate::busy::Reading> {
    let slots = v.as_array()?;
    let mut r = crate::busy::Reading::default();
    for s in slots {
        if s.get("is_processing").and_then(Value::as_bool) == Some(true) {
            r.active += 1;
        }
        if let (Some(id), Some(task)) = (
            s.get("id").and_then(Value::as_u64),
            s.get("id_task").and_then(Value::as_u64),
        ) {
            r.tasks.insert(id, task);
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> StreamEvent {
        StreamEvent::data(data)
    }

    #[test]
    fn the_model_facts_come_from_the_v1_models_meta() {
        // The wide reference model's entry, as llama-server 11434 answers it.
        let entry = json!({"id": "wide.gguf", "meta": {"vocab_type": 1, "n_vocab": 32000,
            "n_ctx_train": 1048576, "n_embd": 128, "n_params": 84282496, "size": 337129984,
            "ftype": "all F32"}});
        let f = model_facts(&entry).unwrap();
        assert_eq!(f.source, "llama.cpp /v1/models meta");
        assert_eq!(
            (f.params, f.weight_bytes),
            (Some(84_282_496), Some(337_129_984))
        );
        assert_eq!(f.embedding_bytes, Some(32_000 * 128 * 4));
        assert_eq!(f.dtype.as_deref(), Some("all F32"));
        assert_eq!(
            f.kv_bytes_per_token, None,
            "the meta does not say the layers"
        );
        assert!(model_facts(&json!({"id": "m"})).is_none());
        assert!(model_facts(&json!({"meta": {"n_vocab": 5}})).is_none());
    }

    #[test]
    fn progress_events_are_not_tokens_and_counter_drives_token_detection() {
        let mut r = CompletionReader::default();
        let p = r
            .on_event(&ev(r#"{"content":"","tokens":[],"stop":false,"tokens_predicted":0,"prompt_progress":{"total":10,"cache":0,"processed":5,"time_ms":1}}"#))
            .unwrap();
        assert!(!p.has_token);
        // A token that decodes to an empty string still counts.
        let t = r
            .on_event(&ev(
                r#"{"content":"","tokens":[29871],"stop":false,"tokens_predicted":1}"#,
            ))
            .unwrap();
        assert!(t.has_token && !t.is_final);
        let f = r
            .on_event(&ev(r#"{"content":"","tokens":[],"stop":true,"tokens_predicted":1,"tokens_evaluated":1024,"tokens_cached":1024,"stop_type":"limit","timings":{"cache_n":0,"prompt_n":1024,"prompt_ms":50.5,"prompt_per_second":20277.2,"predicted_n":1,"predicted_ms":0.001,"predicted_per_second":0.0}}"#))
            .unwrap();
        assert!(!f.has_token && f.is_final && f.ends_stream);
        assert_eq!(r.got.counts.prompt_tokens, Some(1024));
        assert_eq!(r.got.counts.cached_tokens, Some(0));
        assert_eq!(r.got.counts.completion_tokens, Some(1));
        assert_eq!(r.got.timings.as_ref().unwrap().prompt_ms, Some(50.5));
        assert_eq!(r.got.finish_reason.as_deref(), Some("limit"));
    }

    #[test]
    fn error_in_stream_is_an_error() {
        let mut r = CompletionReader::default();
        let e = r
            .on_event(&ev(
                r#"{"error":{"code":500,"message":"boom","type":"server_error"}}"#,
            ))
            .unwrap_err();
        assert!(matches!(e, ClientError::InStream { ref message, .. } if message == "boom"));
    }

    #[test]
    fn malformed_event_is_named() {
        let mut r = CompletionReader::default();
        let e = r.on_event(&ev("{not json")).unwrap_err();
        assert!(matches!(e, ClientError::Malformed { .. }));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_events_never_panic(data in ".{0,200}", json_like in "\\{[a-z_\":0-9,\\[\\]{} ]{0,120}\\}") {
            let mut r = CompletionReader::default();
            let _ = r.on_event(&ev(&data));
            let _ = r.on_event(&ev(&json_like));
        }
    }
}
