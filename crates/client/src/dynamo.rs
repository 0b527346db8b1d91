//! NVIDIA Dynamo's frontend: a distributed frontend in front of engine workers (vLLM, SGLang,
//! TensorRT-LLM, or its mocker), spoken to with the OpenAI protocol. Not a family of its own:
//! the OpenAI family recognises it (its `/metrics` carries `dynamo_frontend_*`) and records it
//! as `dynamo`, with what Dynamo says and hides, as seen on Dynamo 1.6.1:
//! - usage comes only when `stream_options.include_usage` is asked for (every chunk says
//!   `"usage":null` otherwise); the OpenAI protocol always asks;
//! - `/v1/models` states `context_window`, and 0 when the engine stated none (the mocker
//!   without `--max-model-len`): unknown, not 0 tokens;
//! - its KV pool is on `/metrics`: `dynamo_frontend_model_total_kv_blocks` ×
//!   `dynamo_frontend_model_kv_cache_block_size`;
//! - requests in its hands are gauges (`dynamo_frontend_inflight_requests`, `…_queued_requests`),
//!   finished ones a counter (`dynamo_frontend_requests_total`);
//! - `/tokenize`, `/flush_cache`, `/props` answer 404 `Route not found`: not this server's
//!   paths, never a refusal;
//! - an engine's failure (a prompt over its context or KV pool) comes back as 500 `Internal
//!   server error` with `details.backend_status`, or in a stream as a 200 followed by an error
//!   event: the engine's reason is not passed on.

use std::collections::BTreeMap;

use serde_json::Value;

use super::busy::{BusySource, Served, ServedUnit};
use super::family::{MetricsVocabulary, Server, ServerProfile};

/// The server kind recorded for Dynamo's frontend.
pub const SERVER: &str = "dynamo";

/// The prefix of the frontend's own Prometheus names.
const FRONTEND_PREFIX: &str = "dynamo_frontend_";

/// The evidence that `s` is Dynamo's frontend, or `None`: its `/metrics` page carries the
/// frontend's names. A page that does not answer is no evidence either way.
pub async fn recognise(s: &Server<'_>) -> Option<String> {
    let page = s.text("/metrics").await.ok()?;
    page.lines()
        .any(|l| l.starts_with(FRONTEND_PREFIX))
        .then(|| "GET /metrics has dynamo_frontend_* (NVIDIA Dynamo's frontend)".to_owned())
}

/// Records a server recognised as Dynamo's frontend: its kind, its KV pool, what its
/// `context_window` of 0 means, and what a distributed frontend hides.
pub async fn describe(s: &Server<'_>, p: &mut ServerProfile) {
    p.server_kind = SERVER.to_owned();
    let page = s.text("/metrics").await.ok();
    let snap = page.as_deref().and_then(|t| crate::metrics::parse(t).ok());
    if let Some(snap) = &snap {
        let gauge = |name: &str| {
            snap.gauges
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, v)| *v)
        };
        let blocks = gauge("dynamo_frontend_model_total_kv_blocks");
        let size = gauge("dynamo_frontend_model_kv_cache_block_size");
        if let (Some(b), Some(z)) = (blocks, size) {
            if b > 0.0 && z > 0.0 {
                p.kv_pool_tokens = Some((b * z).round() as u64);
            }
        }
    }
    let window = s
        .first_model()
        .await
        .ok()
        .flatten()
        .and_then(|m| m.get("context_window").and_then(Value::as_u64));
    if window == Some(0) {
        p.notes.push("Dynamo's /v1/models says context_window 0: its engine stated no context length (the mocker without --max-model-len does not); the maximum is unknown, not 0 tokens".into());
    }
    p.notes.push("Dynamo's frontend sends usage (token counts, cached_tokens) only when asked with stream_options.include_usage: ctxbench asks for it in every streamed request".into());
    p.notes.push("Dynamo's frontend is a distributed frontend: the engine workers behind it are not reached through it (their caches and states are not read one by one); cold proof is each sample's cached_tokens as the frontend passes it on, and an engine's failure reaches ctxbench as HTTP 500 (or an error event) without the engine's reason".into());
}

/// The frontend's gauges of requests in its hands: in flight, and waiting in its queue.
pub const BUSY: &[BusySource] = &[BusySource::MetricsGauges(&[
    "dynamo_frontend_inflight_requests",
    "dynamo_frontend_queued_requests",
])];

/// The busy signals of a recorded server kind, where it is Dynamo's frontend (whose family,
/// for the protocol, is the generic OpenAI one, which has none).
pub fn busy_sources(server_kind: &str) -> Option<&'static [BusySource]> {
    (server_kind == SERVER).then_some(BUSY)
}

/// What the frontend's `/metrics` counters say.
pub struct Metrics;

impl MetricsVocabulary for Metrics {
    fn kept(&self) -> &'static [&'static str] {
        &["dynamo_frontend_requests_total"]
    }

    /// Finished requests, over every model, endpoint and status the frontend serves.
    fn served(&self, d: &BTreeMap<String, f64>) -> Option<Served> {
        let counter = "dynamo_frontend_requests_total";
        Some(Served {
            counter,
            unit: ServedUnit::Requests,
            count: crate::metrics::sum(d, counter)?,
        })
    }
}

/// What a 5xx or an error event from the frontend may mean: its engine failed (the frontend
/// answers 500 `Internal server error` with `details.backend_status`, or, in a stream, an
/// error event after the 200).
const FAILURE: &str = "Dynamo's frontend: the engine behind it failed and its reason is not passed on; a prompt longer than the engine's context or KV pool fails this way";

/// The hint for a server failure, where the recorded server kind is Dynamo's.
pub fn failure_hint(server_kind: &str) -> Option<&'static str> {
    (server_kind == SERVER).then_some(FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use crate::family::Answers;
    use crate::family::ServerProfile;
    use async_trait::async_trait;
    use ctxbench_schema::error::ClientError;

    macro_rules! recorded {
        ($name:literal) => {
            include_str!(concat!(
                "../../../tests/fixtures/recorded/dynamo-1.6.1/",
                $name,
                ".json"
            ))
        };
    }

    /// Dynamo 1.6.1's recorded answers: `/v1/models`, `/metrics`, and its 404 `Route not
    /// found` for the other paths asked.
    struct Recorded;

    fn response(file: &str) -> (u16, Value) {
        let fx: Value = serde_json::from_str(file).unwrap();
        let r = &fx["response"];
        (r["status"].as_u64().unwrap() as u16, r["body"].clone())
    }

    #[async_trait]
    impl Answers for Recorded {
        async fn get(&self, path: &str) -> Result<(u16, Option<Value>), ClientError> {
            let (status, body) = match path {
                "/v1/models" => response(recorded!("models")),
                _ => response(recorded!("absent_props")),
            };
            Ok((status, Some(body)))
        }
        async fn get_text(&self, path: &str) -> Result<String, ClientError> {
            assert_eq!(path, "/metrics");
            let fx: Value = serde_json::from_str(recorded!("metrics")).unwrap();
            Ok(fx["response"]["body_text"].as_str().unwrap().to_owned())
        }
        async fn post(&self, path: &str, _body: &Value) -> Result<Value, ClientError> {
            // The one model-bearing request asked of it here: a model it does not serve.
            let (status, body) = match path {
                "/v1/completions" => response(recorded!("completions_wrong_model")),
                _ => response(recorded!("absent_tokenize")),
            };
            Err(crate::http::status_error(path, status, &body.to_string()))
        }
    }

    #[tokio::test]
    async fn the_recorded_frontend_is_recognised_with_its_kv_pool_and_said_once() {
        let s = Server::new(&Recorded);
        assert!(recognise(&s).await.unwrap().contains("dynamo_frontend_"));
        let mut p = ServerProfile::new("http://h:1".into(), BackendKind::Openai);
        describe(&s, &mut p).await;
        assert_eq!(p.server_kind, SERVER);
        // 16384 blocks of 64 tokens: the mocker's default pool.
        assert_eq!(p.kv_pool_tokens, Some(16384 * 64));
        // context_window 8192 is a real limit (the probe reads it): no "unknown" note.
        assert!(!p.notes.iter().any(|n| n.contains("context_window 0")));
        let usage: Vec<_> = p
            .notes
            .iter()
            .filter(|n| n.contains("include_usage"))
            .collect();
        assert_eq!(usage.len(), 1, "{:?}", p.notes);
    }

    #[tokio::test]
    async fn a_model_it_does_not_serve_is_named_not_taken_for_a_chat_only_server() {
        use crate::family::Family as _;
        let s = Server::new(&Recorded);
        let mut p = ServerProfile::new("http://h:1".into(), BackendKind::Openai);
        p.model = Some("no-such-model".into());
        let e = crate::openai::Family
            .capabilities(&s, &mut p)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Model not found") && e.contains("check --model") && e.contains("smollm2"),
            "{e}"
        );
        assert!(!p.completions_missing);
    }

    #[test]
    fn its_route_not_found_answers_are_misses_not_refused_keys() {
        for file in [
            recorded!("absent_props"),
            recorded!("absent_tokenize"),
            recorded!("absent_flush_cache"),
            recorded!("absent_server_info"),
        ] {
            let (status, body) = response(file);
            let body = body.to_string();
            assert_eq!(status, 404);
            assert!(body.contains("Route not found"), "{body}");
            assert!(!crate::http::is_key_refusal(status, &body), "{body}");
            assert!(matches!(
                crate::http::status_error("/tokenize", status, &body),
                ClientError::Http { status: 404, .. }
            ));
        }
    }

    #[test]
    fn its_recorded_engine_failures_are_named_and_a_miss_is_not() {
        let http = crate::http::Http::new("http://127.0.0.1:1", None, None).unwrap();
        let mut o = crate::openai::OpenAi::new(http, None, None, None);
        o.failure_hint = failure_hint(SERVER);
        // 500 to a 9001-token prompt on a mocker of context 8192.
        let (status, body) = response(recorded!("completions_context_exceeded"));
        assert_eq!(status, 500);
        let e = crate::http::status_error("/v1/completions", status, &body.to_string());
        let said = o.hinted(e).to_string();
        assert!(
            said.contains("HTTP 500: Internal server error (Dynamo's frontend")
                && said.contains("KV pool"),
            "{said}"
        );
        // Streamed: the 200's error event.
        let fx: Value =
            serde_json::from_str(recorded!("completions_stream_context_exceeded")).unwrap();
        let text = fx["response"]["body_text"].as_str().unwrap();
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        let ev: Value = serde_json::from_str(data).unwrap();
        let e = crate::stream::in_stream_error(
            "/v1/completions",
            &crate::stream::StreamEvent::data(data),
            Some(&ev),
        )
        .unwrap();
        assert!(o.hinted(e).to_string().contains("Dynamo's frontend"));
        // A 404 is the client's miss, not the engine's failure.
        let (status, body) = response(recorded!("completions_wrong_model"));
        let e = crate::http::status_error("/v1/completions", status, &body.to_string());
        assert!(!o.hinted(e).to_string().contains("Dynamo"));
    }

    #[test]
    fn busy_signals_and_the_stream_hint_are_dynamos_only() {
        assert_eq!(busy_sources("dynamo"), Some(BUSY));
        assert_eq!(busy_sources("openai-compatible"), None);
        assert!(failure_hint("dynamo").is_some_and(|h| h.contains("KV pool")));
        assert_eq!(failure_hint("vllm"), None);
    }

    #[test]
    fn finished_requests_are_summed_over_labels() {
        let d = BTreeMap::from([
            (
                "dynamo_frontend_requests_total{endpoint=\"completions\",status=\"success\"}"
                    .to_owned(),
                2.0,
            ),
            (
                "dynamo_frontend_requests_total{endpoint=\"completions\",status=\"error\"}"
                    .to_owned(),
                1.0,
            ),
        ]);
        assert_eq!(Metrics.served(&d).unwrap().count, 3.0);
        assert!(Metrics.served(&BTreeMap::new()).is_none());
    }
}
