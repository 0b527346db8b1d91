//! Ollama `/api/generate`: `raw: true` text prompts, NDJSON stream, durations in nanoseconds.
//!
//! Ollama has no tokenizer endpoint and takes no token ids, so lengths are calibrated
//! against the server's own `prompt_eval_count` ([`CalibratedText`], shared with the
//! OpenAI backend): the calibration requests send `num_predict: 1`; the measured request
//! then records the server's count, and the run accepts a small tolerance, because a unit
//! can be worth several tokens. There is no `ignore_eos`, no cached-token count, no flush
//! and no speculative statistics.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::family::{ConnectOptions, FamilyId, LengthPolicy, Server, ServerProfile};
use super::stream::{event_json, in_stream_error, EventInfo, EventReader, Framing, Gathered};
use super::stream::{generate_streamed, generate_unstreamed, StreamEvent};
use super::textprompt::{CalibratedText, CALIBRATED_TOLERANCE, CALIBRATION_ROUNDS};
use crate::backend::Backend;
use crate::backend::BackendKind;
use crate::backend::GenOutcome;
use crate::backend::GenRequest;
use crate::backend::OnceOutcome;
use crate::http::Http;
use crate::timings::get_f64;
use crate::timings::get_u64;
use ctxbench_schema::error::{ClientError, UsageError};
use ctxbench_schema::record::Counts;
use ctxbench_schema::record::ServerTimings;

/// Ollama: recognised by `/api/version`.
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl crate::family::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Ollama,
            "ollama",
            "Ollama (/api/generate, raw text, lengths calibrated on prompt_eval_count)",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        Ok(version(s)
            .await?
            .map(|v| format!("GET /api/version answered (version {v})")))
    }

    /// The model (first of `/api/tags` unless `--model`) and its trained context from
    /// `/api/show`.
    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        p.server_version = version(s).await?;
        if p.model.as_deref().is_none_or(|m| m.is_empty()) {
            p.model = s
                .json("/api/tags")
                .await?
                .as_ref()
                .and_then(|v| v.pointer("/models/0/name"))
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if let Some(m) = p.model.clone() {
            if let Ok(show) = s.post("/api/show", &json!({"model": m})).await {
                let ctx = show
                    .get("model_info")
                    .and_then(Value::as_object)
                    .and_then(|o| {
                        o.iter()
                            .find(|(k, _)| k.ends_with(".context_length"))
                            .and_then(|(_, v)| v.as_u64())
                    });
                if let Some(n) = ctx {
                    p.max_context = Some(n);
                    p.max_context_source =
                        Some("ollama /api/show model_info.<arch>.context_length (trained)".into());
                }
            }
        }
        Ok(())
    }

    async fn capabilities(
        &self,
        _s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<(), ClientError> {
        p.token_id_prompts = false;
        p.prompt_method = format!("text: calibrated against the server's prompt_eval_count (Ollama has no tokenizer); tolerance {}%", CALIBRATED_TOLERANCE * 100.0);
        p.notes.push("Ollama reports no cached tokens and has no flush: cold prefill rests on the nonce (samples are cache_unverified)".into());
        p.notes
            .push("Ollama has no ignore_eos: an early EOS gives a short_output sample".into());
        p.notes.push(format!(
            "each new length costs up to {CALIBRATION_ROUNDS} calibration requests (num_predict 1) before it is measured"
        ));
        Ok(())
    }

    fn connect(
        &self,
        http: Http,
        p: &ServerProfile,
        o: &ConnectOptions,
    ) -> Result<Box<dyn Backend>, UsageError> {
        let model = p.model.clone().ok_or_else(|| {
            UsageError::Invalid("Ollama lists no model: pull one, or give --model".into())
        })?;
        // One context for every request: Ollama reloads the model when num_ctx changes.
        let num_ctx = o.largest_context + o.output_tokens.max(17) + 64;
        Ok(Box::new(Ollama::new(http, model, num_ctx, o.nonce_tokens)))
    }

    /// Calibration aims at the server's own count, BOS included; a unit can be worth
    /// several tokens, hence the tolerance.
    fn length_policy(&self, _p: &ServerProfile) -> LengthPolicy {
        LengthPolicy {
            text_prompts: true,
            tolerance_pct: CALIBRATED_TOLERANCE,
            server_adds_bos: false,
        }
    }
}

async fn version(s: &Server<'_>) -> Result<Option<String>, ClientError> {
    Ok(s.json("/api/version")
        .await?
        .and_then(|v| v.get("version")?.as_str().map(str::to_owned)))
}

const ENDPOINT: &str = "/api/generate";

/// The Ollama protocol.
#[derive(Debug)]
pub struct Ollama {
    http: Http,
    model: String,
    num_ctx: u64,
    text: CalibratedText,
}

impl Ollama {
    /// A backend for `model`, loaded with a context of `num_ctx` tokens (sent with every
    /// request: Ollama reloads the model when it changes); prompts start with
    /// `nonce_tokens` of nonce.
    pub fn new(http: Http, model: String, num_ctx: u64, nonce_tokens: usize) -> Self {
        Ollama {
            http,
            model,
            num_ctx,
            text: CalibratedText::new(nonce_tokens),
        }
    }

    /// Calibration requests sent so far.
    pub fn calibration_requests(&self) -> usize {
        self.text.requests()
    }

    fn body(&self, text: &str, max_tokens: u32, stream: bool) -> Value {
        json!({
            "model": self.model,
            "prompt": text,
            "raw": true,
            "stream": stream,
            "keep_alive": "30m",
            "options": {"num_predict": max_tokens, "temperature": 0, "seed": 0, "num_ctx": self.num_ctx},
        })
    }

    /// The calibrated text of a request: the prepared one, else calibrated now (before t0
    /// either way).
    async fn text_for(&self, req: &GenRequest) -> Result<String, ClientError> {
        if let Some(t) = &req.prepared {
            return Ok(t.clone());
        }
        let timeout = req.timeouts.request;
        let p = self
            .text
            .prompt(&req.prompt, |t| self.count(t, timeout))
            .await?;
        Ok(p.text)
    }

    /// The body of a measured request: its calibrated text, then the parameters.
    async fn request_body(&self, req: &GenRequest, stream: bool) -> Result<Value, ClientError> {
        let text = self.text_for(req).await?;
        Ok(self.body(&text, req.max_tokens, stream))
    }

    /// The server's prompt count for `text`: one non-streamed request of one token.
    async fn count(&self, text: String, timeout: Duration) -> Result<usize, ClientError> {
        let (_, body, _) = self
            .http
            .post_timed(ENDPOINT, &self.body(&text, 1, false), timeout)
            .await?;
        let v: Value = serde_json::from_str(&body).map_err(|e| ClientError::Malformed {
            endpoint: ENDPOINT.to_owned(),
            detail: format!("not JSON: {e}"),
        })?;
        let n = get_u64(&v, "prompt_eval_count").ok_or(ClientError::Malformed {
            endpoint: ENDPOINT.to_owned(),
            detail: "no prompt_eval_count: the length cannot be calibrated".to_owned(),
        })?;
        Ok(n as usize)
    }
}

/// Reads `/api/generate` NDJSON lines.
#[derive(Debug, Default)]
pub struct GenerateReader {
    /// What the events said so far.
    pub got: Gathered,
}

impl EventReader for GenerateReader {
    fn gathered(self) -> Gathered {
        self.got
    }

    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError> {
        let v = event_json(ENDPOINT, ev)?;
        if let Some(e) = in_stream_error(ENDPOINT, ev, Some(&v)) {
            return Err(e);
        }
        let done = v.get("done").and_then(Value::as_bool) == Some(true);
        if done {
            self.read_final(&v);
        }
        if let Some(t) = v.get("response").and_then(Value::as_str).filter(|_| !done) {
            self.got.output.text.push_str(t);
        }
        Ok(EventInfo {
            // Ollama sends one line per generated token.
            has_token: !done && v.get("response").is_some(),
            is_final: done,
            ends_stream: done,
        })
    }
}

impl GenerateReader {
    fn read_final(&mut self, v: &Value) {
        let ns_to_ms = |k: &str| get_f64(v, k).map(|ns| ns / 1e6);
        let prompt = get_u64(v, "prompt_eval_count");
        let eval = get_u64(v, "eval_count");
        self.got.counts = Counts {
            prompt_tokens: prompt,
            completion_tokens: eval,
            cached_tokens: None,
            cached_host_tokens: None,
        };
        let per_s = |n: Option<u64>, ms: Option<f64>| match (n, ms) {
            (Some(n), Some(ms)) if ms > 0.0 => Some(n as f64 / (ms / 1000.0)),
            _ => None,
        };
        let prompt_ms = ns_to_ms("prompt_eval_duration");
        let predicted_ms = ns_to_ms("eval_duration");
        self.got.timings = Some(ServerTimings {
            source: "ollama durations (ns)".to_owned(),
            prompt_n: prompt,
            prompt_ms,
            prompt_per_second: per_s(prompt, prompt_ms),
            predicted_n: eval,
            predicted_ms,
            predicted_per_second: per_s(eval, predicted_ms),
            e2e_ms: ns_to_ms("total_duration"),
            ..Default::default()
        });
        self.got.finish_reason = v
            .get("done_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
}

#[async_trait]
impl Backend for Ollama {
    fn http(&self) -> &Http {
        &self.http
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Ollama
    }

    fn endpoint(&self) -> &'static str {
        ENDPOINT
    }

    /// Cuts text into whitespace-led units with client-side ids (Ollama has no tokenizer).
    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        self.text.units(text)
    }

    async fn prepare(&self, req: &mut GenRequest) -> Result<(), ClientError> {
        if req.prepared.is_none() {
            req.prepared = Some(self.text_for(req).await?);
        }
        Ok(())
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        let body = self.request_body(req, true).await?;
        let reader = GenerateReader::default();
        generate_streamed(
            &self.http,
            Framing::Ndjson,
            ENDPOINT,
            &body,
            req.timeouts,
            reader,
        )
        .await
    }

    async fn generate_once(&self, req: &GenRequest) -> Result<OnceOutcome, ClientError> {
        let body = self.request_body(req, false).await?;
        let reader = GenerateReader::default();
        generate_unstreamed(&self.http, ENDPOINT, &body, req.timeouts.request, reader).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> StreamEvent {
        StreamEvent::data(data)
    }

    #[test]
    fn lines_are_tokens_and_the_final_line_converts_nanoseconds() {
        let mut r = GenerateReader::default();
        let t = r
            .on_event(&ev(
                r#"{"model":"m","created_at":"t","response":"a","done":false}"#,
            ))
            .unwrap();
        assert!(t.has_token && !t.is_final);
        let f = r
            .on_event(&ev(r#"{"model":"m","created_at":"t","response":"","done":true,"done_reason":"length","context":[1,2],"total_duration":250000000,"load_duration":1000000,"prompt_eval_count":1024,"prompt_eval_duration":50000000,"eval_count":16,"eval_duration":150000000}"#))
            .unwrap();
        assert!(f.is_final && f.ends_stream && !f.has_token);
        assert_eq!(r.got.counts.prompt_tokens, Some(1024));
        assert_eq!(r.got.counts.completion_tokens, Some(16));
        let t = r.got.timings.unwrap();
        assert_eq!(t.prompt_ms, Some(50.0));
        assert_eq!(t.predicted_ms, Some(150.0));
        assert_eq!(t.e2e_ms, Some(250.0));
        assert!((t.prompt_per_second.unwrap() - 20480.0).abs() < 1e-6);
    }

    #[test]
    fn missing_counts_stay_unknown_and_errors_are_errors() {
        let mut r = GenerateReader::default();
        r.on_event(&ev(r#"{"done":true,"eval_count":3}"#)).unwrap();
        assert_eq!(r.got.counts.prompt_tokens, None);
        assert!(r.on_event(&ev(r#"{"error":"model not found"}"#)).is_err());
    }
}
