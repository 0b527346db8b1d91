//! Hugging Face TGI: `/generate_stream` with a text prompt (TGI takes no token ids), made
//! exact with its `/tokenize` (char offsets; there is no detokenize) — see `textprompt`.
//!
//! TGI has no `ignore_eos` (a short output is flagged), rejects `temperature: 0` (greedy is
//! `do_sample: false` with no temperature), sends one token per event and no `[DONE]`: the
//! event with `details` is final and carries `input_length` and `generated_tokens`. It
//! reports no cached tokens, no per-request timings when streaming, and has no flush.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::family::{ConnectOptions, FamilyId, LengthPolicy, Server, ServerProfile};
use super::stream::{event_json, generate_streamed, in_stream_error, EventInfo, EventReader};
use super::stream::{Framing, Gathered, StreamEvent};
use super::textprompt::{exact_text, Pieces, Span};
use crate::backend::Backend;
use crate::backend::BackendKind;
use crate::backend::GenOutcome;
use crate::backend::GenRequest;
use crate::backend::OnceOutcome;
use crate::http::Http;
use crate::timings::get_u64;
use ctxbench_schema::error::{ClientError, UsageError};
use ctxbench_schema::record::Counts;
use ctxbench_schema::record::ServerTimings;

/// Hugging Face TGI: recognised by `/info` with `model_id` and its token limits.
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl crate::family::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Tgi,
            "tgi",
            "Hugging Face TGI (/generate_stream, text prompts)",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        Ok(s.json("/info")
            .await?
            .filter(is_info)
            .map(|_| "GET /info answered with model_id and token limits".to_owned()))
    }

    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        let Some(info) = s.json("/info").await?.filter(is_info) else {
            return Ok(());
        };
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
        if let Some(n) = get_u64(&info, "max_total_tokens") {
            p.max_context = Some(n);
            p.max_context_source = Some("tgi /info max_total_tokens (prompt + output)".into());
        }
        if let Some(n) =
            get_u64(&info, "max_input_tokens").or_else(|| get_u64(&info, "max_input_length"))
        {
            p.notes.push(format!(
                "TGI accepts prompts of at most {n} tokens (max_input_tokens)"
            ));
        }
        Ok(())
    }

    async fn capabilities(
        &self,
        _s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<(), ClientError> {
        p.token_id_prompts = false;
        p.prompt_method = "text: tokenize → trim → re-tokenize (TGI takes no token ids)".into();
        p.notes.push("TGI reports no cached tokens and has no flush: cold prefill rests on the nonce (samples are cache_unverified)".into());
        p.notes
            .push("TGI has no ignore_eos: an early EOS gives a short_output sample".into());
        Ok(())
    }

    fn connect(
        &self,
        http: Http,
        _p: &ServerProfile,
        o: &ConnectOptions,
    ) -> Result<Box<dyn Backend>, UsageError> {
        Ok(Box::new(Tgi::new(http, o.nonce_tokens)))
    }

    fn length_policy(&self, _p: &ServerProfile) -> LengthPolicy {
        LengthPolicy {
            text_prompts: true,
            ..LengthPolicy::default()
        }
    }

    /// Its router's batch and queue gauges on `/metrics` (always on).
    fn busy_sources(&self) -> &'static [crate::busy::BusySource] {
        &[crate::busy::BusySource::MetricsGauges(&[
            "tgi_batch_current_size",
            "tgi_queue_size",
        ])]
    }
}

fn is_info(v: &Value) -> bool {
    v.get("model_id").is_some()
        && (v.get("max_total_tokens").is_some() || v.get("max_input_length").is_some())
}

/// The TGI protocol.
#[derive(Debug)]
pub struct Tgi {
    http: Http,
    pieces: Pieces,
    nonce_tokens: usize,
}

impl Tgi {
    /// A backend speaking to `http`; prompts start with `nonce_tokens` of nonce (never
    /// reused as padding).
    pub fn new(http: Http, nonce_tokens: usize) -> Self {
        Tgi {
            http,
            pieces: Pieces::default(),
            nonce_tokens,
        }
    }

    async fn spans(&self, text: String) -> Result<Vec<Span>, ClientError> {
        let body = json!({"inputs": text, "add_special_tokens": false, "parameters": {}});
        let v = self
            .http
            .post_json("/tokenize", &body, Duration::from_secs(300))
            .await?;
        parse_spans(&v)
    }

    /// The prepared text of a request, else built now (before t0 either way).
    async fn text_for(&self, req: &GenRequest) -> Result<String, ClientError> {
        if let Some(t) = &req.prepared {
            return Ok(t.clone());
        }
        exact_text(
            "/tokenize",
            &self.pieces,
            &req.prompt,
            self.nonce_tokens,
            |t| self.spans(t),
        )
        .await
    }

    fn body(text: String, req: &GenRequest) -> Value {
        json!({
            "inputs": text,
            "parameters": {"max_new_tokens": req.max_tokens, "details": true, "do_sample": false},
        })
    }
}

const ENDPOINT: &str = "/generate_stream";

/// Reads TGI's `[{id, text, start, stop}]`.
pub fn parse_spans(v: &Value) -> Result<Vec<Span>, ClientError> {
    let bad = |d: String| ClientError::Malformed {
        endpoint: "/tokenize".to_owned(),
        detail: d,
    };
    let arr = v
        .as_array()
        .ok_or_else(|| bad("expected an array of tokens".to_owned()))?;
    arr.iter()
        .map(|t| {
            let n = |k: &str| get_u64(t, k);
            match (n("id"), n("start"), n("stop")) {
                (Some(id), Some(start), Some(stop)) => Ok(Span {
                    id: u32::try_from(id).map_err(|_| bad(format!("token id {id}")))?,
                    start: start as usize,
                    stop: stop as usize,
                }),
                _ => Err(bad(format!("token without id/start/stop: {t}"))),
            }
        })
        .collect()
}

/// Reads `/generate_stream` events.
#[derive(Debug, Default)]
pub struct StreamReader {
    /// What the events said so far.
    pub got: Gathered,
}

impl EventReader for StreamReader {
    fn gathered(self) -> Gathered {
        self.got
    }

    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError> {
        let v = event_json(ENDPOINT, ev)?;
        if let Some(e) = in_stream_error(ENDPOINT, ev, Some(&v)) {
            return Err(e);
        }
        let has_token = v.get("token").is_some_and(|t| {
            t.is_object() && t.get("special").and_then(Value::as_bool) != Some(true)
        });
        if has_token {
            if let Some(t) = v.get("token") {
                if let Some(id) = t.get("id").and_then(Value::as_u64) {
                    self.got.output.push_ids([id as u32]);
                }
                if let Some(text) = t.get("text").and_then(Value::as_str) {
                    self.got.output.text.push_str(text);
                }
            }
        }
        let details = v.get("details").filter(|d| d.is_object());
        let is_final = details.is_some() || v.get("generated_text").is_some_and(|g| !g.is_null());
        if let Some(d) = details {
            self.got.counts = Counts {
                prompt_tokens: get_u64(d, "input_length"),
                completion_tokens: get_u64(d, "generated_tokens"),
                cached_tokens: None,
                cached_host_tokens: None,
            };
            self.got.finish_reason = d
                .get("finish_reason")
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
impl Backend for Tgi {
    fn http(&self) -> &Http {
        &self.http
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Tgi
    }

    fn endpoint(&self) -> &'static str {
        ENDPOINT
    }

    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        let spans = self.spans(text.to_owned()).await?;
        self.pieces.learn(text, &spans);
        Ok(spans.iter().map(|s| s.id).collect())
    }

    async fn prepare(&self, req: &mut GenRequest) -> Result<(), ClientError> {
        if req.prepared.is_none() {
            req.prepared = Some(self.text_for(req).await?);
        }
        Ok(())
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        // Prepared (or built now) before t0: the tokenize round-trips are not measured.
        let body = Self::body(self.text_for(req).await?, req);
        let reader = StreamReader::default();
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

    async fn generate_once(&self, req: &GenRequest) -> Result<OnceOutcome, ClientError> {
        let text = self.text_for(req).await?;
        let (elapsed, body, headers) = self
            .http
            .post_timed("/generate", &Self::body(text, req), req.timeouts.request)
            .await?;
        let v: Value = serde_json::from_str(&body).map_err(|e| ClientError::Malformed {
            endpoint: "/generate".to_owned(),
            detail: e.to_string(),
        })?;
        let d = v.get("details").cloned().unwrap_or(Value::Null);
        let h = |k: &str| {
            headers
                .get(k)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        Ok(OnceOutcome {
            elapsed,
            counts: Counts {
                // Non-streamed, the counts are in headers.
                prompt_tokens: h("x-prompt-tokens").map(|x| x as u64),
                completion_tokens: h("x-generated-tokens")
                    .map(|x| x as u64)
                    .or_else(|| get_u64(&d, "generated_tokens")),
                cached_tokens: None,
                cached_host_tokens: None,
            },
            timings: Some(ServerTimings {
                source: "tgi.headers".to_owned(),
                queue_ms: h("x-queue-time"),
                e2e_ms: h("x-total-time"),
                predicted_per_token_ms: h("x-time-per-token"),
                ..Default::default()
            }),
            spec: None,
            finish_reason: d
                .get("finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> StreamEvent {
        StreamEvent::data(data)
    }

    #[test]
    fn tokens_then_final_details() {
        let mut r = StreamReader::default();
        let t = r
            .on_event(&ev(r#"{"index":1,"token":{"id":5,"text":"a","logprob":-0.1,"special":false},"top_tokens":[],"generated_text":null,"details":null}"#))
            .unwrap();
        assert!(t.has_token && !t.is_final);
        let f = r
            .on_event(&ev(r#"{"index":2,"token":{"id":6,"text":"b","logprob":-0.1,"special":false},"top_tokens":[],"generated_text":"ab","details":{"finish_reason":"length","generated_tokens":2,"seed":null,"input_length":100}}"#))
            .unwrap();
        assert!(f.has_token && f.is_final && f.ends_stream);
        assert_eq!(r.got.counts.prompt_tokens, Some(100));
        assert_eq!(r.got.counts.completion_tokens, Some(2));
        assert_eq!(r.got.counts.cached_tokens, None);
        assert_eq!(r.got.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn in_stream_error_and_spans() {
        let mut r = StreamReader::default();
        assert!(r
            .on_event(&ev(r#"{"error":"overloaded","error_type":"overloaded"}"#))
            .is_err());
        let v: Value = serde_json::from_str(r#"[{"id":1,"text":"a","start":0,"stop":1}]"#).unwrap();
        assert_eq!(
            parse_spans(&v).unwrap(),
            vec![Span {
                id: 1,
                start: 0,
                stop: 1
            }]
        );
    }
}
