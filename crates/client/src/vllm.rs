//! vLLM: `/v1/completions` with token-id prompts (the OpenAI stream reader), `/tokenize`,
//! and `/reset_prefix_cache`. Speculative statistics, prefix-cache hits and preemptions
//! come from `/metrics` deltas ([`Metrics`]), since vLLM reports none per request.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use super::family::{needs_tokenize, ConnectOptions, FamilyId, Server, ServerProfile};
use super::family::{CapacityFlags, MetricsVocabulary};
use super::openai::OpenAi;
use super::tokenize::TokenizeDialect;
use crate::backend::Backend;
use crate::backend::BackendKind;
use crate::backend::GenOutcome;
use crate::backend::GenRequest;
use crate::http::Http;
use crate::metrics::{sum, Snapshot};
use ctxbench_schema::error::{ClientError, UsageError};
use ctxbench_schema::record::SpecStats;

/// vLLM: recognised by `owned_by "vllm"` in `/v1/models`.
#[derive(Debug, Clone, Copy)]
pub struct Family;

#[async_trait]
impl crate::family::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Vllm,
            "vllm",
            "vLLM (/v1/completions with token ids)",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        Ok((s.owned_by().await?.as_deref() == Some("vllm"))
            .then(|| "/v1/models says owned_by \"vllm\"".to_owned()))
    }

    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        // vLLM answers `GET /version` with {"version": "0.32.0"}.
        if p.server_version.is_none() {
            p.server_version = s
                .json("/version")
                .await?
                .and_then(|v| v.get("version")?.as_str().map(str::to_owned));
        }
        // No note about --enable-prompt-tokens-details here: whether usage carries cached
        // counts is only known after the warmup (the run-level warning names the flag then),
        // and /metrics prefix-cache deltas verify each sample without it.
        if p.metrics {
            if let Ok(text) = s.text("/metrics").await {
                if let Ok(snap) = crate::metrics::parse(&text) {
                    p.kv_pool_tokens = kv_pool_tokens(&snap);
                }
            }
        }
        Ok(())
    }

    async fn capabilities(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        if s.has_vllm_tokenize(p.model.as_deref()).await? {
            p.tokenize = Some(TokenizeDialect::Vllm);
            p.token_id_prompts = true;
        }
        p.flush = Some("POST /reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1)".into());
        p.spec_stats = Some("vllm:spec_decode_* /metrics deltas".into());
        Ok(())
    }

    /// vLLM's protocol is OpenAI's plus `/tokenize` and its flush: also for a server no
    /// detector named (a vLLM behind a proxy that renames `owned_by`).
    fn speaks_to(&self, detected: Option<BackendKind>) -> bool {
        matches!(
            detected,
            Some(BackendKind::Vllm | BackendKind::Openai) | None
        )
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
        Ok(Box::new(Vllm::new(http, p.model.clone())))
    }

    fn cached_tokens_hint(&self) -> Option<&'static str> {
        Some("start vLLM with --enable-prompt-tokens-details")
    }

    /// vLLM's prefix cache holds whole KV blocks only: a prefix of L tokens is reused as
    /// ⌊L/B⌋·B, B = `--block-size` (16 by default on GPUs; 128 on the CPU backend, where real
    /// vLLM 0.32.0 reused 896 of a 1000-token prefix). L mod 128 covers both defaults.
    fn reuse_allowance(&self, prefix: u64) -> (u64, &'static str) {
        (
            (prefix % 128).max(1),
            "vLLM caches whole KV blocks (--block-size B: 16 on GPU, 128 on CPU by default): cached = ⌊L/B⌋·B, allowance L mod 128",
        )
    }

    /// Its `/v1/completions` takes token ids, made by its `/tokenize` where there is one.
    async fn openai_capabilities(
        &self,
        s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<bool, ClientError> {
        super::family::token_ids_through_prompt_tokenize(s, p, TokenizeDialect::Vllm).await
    }

    async fn flush(&self, http: &Http) -> Result<String, ClientError> {
        reset_prefix_cache(http).await
    }

    fn metrics(&self) -> Option<&'static dyn MetricsVocabulary> {
        Some(&Metrics)
    }

    /// Its scheduler's gauges on `/metrics` (always on).
    fn busy_sources(&self) -> &'static [crate::busy::BusySource] {
        &[crate::busy::BusySource::MetricsGauges(&[
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
        ])]
    }

    fn capacity_flags(&self) -> CapacityFlags {
        CapacityFlags {
            slots: Some("--max-num-seqs".into()),
            kv_pool: Some("--gpu-memory-utilization or --num-gpu-blocks-override".into()),
        }
    }
}

/// vLLM's `/metrics` names.
#[derive(Debug, Clone, Copy)]
pub struct Metrics;

impl MetricsVocabulary for Metrics {
    // The preemption counter is kept too: without it a wave's preemptions were never seen.
    fn kept(&self) -> &'static [&'static str] {
        &[
            "prefix_cache",
            "spec_decode",
            "num_preemptions",
            "request_success",
        ]
    }

    /// `prefix_cache_hits/queries`, counted with or without `--enable-prompt-tokens-details`.
    fn cache_evidence(&self, d: &BTreeMap<String, f64>) -> Option<(f64, f64)> {
        let hits = sum(d, "vllm:prefix_cache_hits_total")?;
        Some((
            hits,
            sum(d, "vllm:prefix_cache_queries_total").unwrap_or(0.0),
        ))
    }

    fn spec(&self, d: &BTreeMap<String, f64>) -> Option<Option<SpecStats>> {
        spec_decode(d, "vllm:")
    }

    /// `vllm:num_preemptions`, a Prometheus counter (vllm/v1/metrics/loggers.py of 0.32).
    fn preemptions(&self, d: &BTreeMap<String, f64>) -> Option<f64> {
        sum(d, "vllm:num_preemptions_total")
    }

    /// Finished requests, over every `finished_reason` label.
    fn served(&self, d: &BTreeMap<String, f64>) -> Option<crate::busy::Served> {
        let counter = "vllm:request_success_total";
        Some(crate::busy::Served {
            counter,
            unit: crate::busy::ServedUnit::Requests,
            count: sum(d, counter)?,
        })
    }
}

/// Speculative statistics from `spec_decode_*` counter deltas named with `prefix` (vLLM's
/// names, which recent llama.cpp exports as `llamacpp:`): drafts = verify steps, length =
/// 1 + accepted ÷ drafts. `Some(None)`: the counters are there and no draft was made.
pub(crate) fn spec_decode(d: &BTreeMap<String, f64>, prefix: &str) -> Option<Option<SpecStats>> {
    let get = |n: &str| sum(d, &format!("{prefix}spec_decode_num_{n}_total"));
    let (Some(v), Some(a)) = (get("drafts"), get("accepted_tokens")) else {
        return None;
    };
    if v <= 0.0 {
        return Some(None);
    }
    Some(Some(
        SpecStats {
            source: format!("{prefix}spec_decode_* metric deltas"),
            verify_steps: Some(v as u64),
            draft_tokens: get("draft_tokens").map(|x| x as u64),
            accepted_tokens: Some(a as u64),
            accept_length: None,
            accept_rate: None,
        }
        .derive(),
    ))
}

/// vLLM's KV pool in tokens: `vllm:cache_config_info` `num_gpu_blocks × block_size`.
pub fn kv_pool_tokens(s: &Snapshot) -> Option<u64> {
    s.gauges
        .iter()
        .find(|(n, _, _)| n == "vllm:cache_config_info")
        .and_then(|(_, l, _)| {
            let blocks: u64 = l.get("num_gpu_blocks")?.parse().ok()?;
            let size: u64 = l.get("block_size")?.parse().ok()?;
            Some(blocks * size)
        })
}

/// The vLLM protocol.
#[derive(Debug)]
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

    async fn prepare(&self, req: &mut GenRequest) -> Result<(), ClientError> {
        self.inner.prepare(req).await
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        self.inner.generate(req).await
    }

    async fn generate_once(
        &self,
        req: &GenRequest,
    ) -> Result<crate::backend::OnceOutcome, ClientError> {
        self.inner.generate_once(req).await
    }

    async fn negotiate(&self) -> Result<crate::backend::Negotiated, ClientError> {
        self.inner.negotiate().await
    }

    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }

    async fn flush(&self) -> Result<String, ClientError> {
        reset_prefix_cache(&self.http).await
    }
}

/// vLLM's flush, whichever protocol is spoken to the server (also `--backend openai`).
pub async fn reset_prefix_cache(http: &Http) -> Result<String, ClientError> {
    match http
        .post_empty("/reset_prefix_cache", Duration::from_secs(60))
        .await
    {
        Ok(body) => reset_answer(&body),
        Err(ClientError::Http { status: 404, .. }) => Err(ClientError::Unsupported {
            what: "vllm /reset_prefix_cache".to_owned(),
            hint: "start vLLM with the environment variable VLLM_SERVER_DEV_MODE=1 to enable it"
                .to_owned(),
        }),
        Err(e) => Err(e),
    }
}

/// Reads `/reset_prefix_cache`'s answer: vLLM 0.32 says `{"success": true|false}` and
/// refuses while another request holds cache blocks; older versions answer 200 with an
/// empty body, which confirms nothing.
pub fn reset_answer(body: &str) -> Result<String, ClientError> {
    let success = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("success").and_then(serde_json::Value::as_bool));
    match success {
        Some(true) => Ok("vllm /reset_prefix_cache".to_owned()),
        Some(false) => Err(ClientError::Busy {
            endpoint: "/reset_prefix_cache".to_owned(),
            message: format!(
                "{} (cache blocks still in use by another request)",
                body.trim()
            ),
        }),
        None => Ok("vllm /reset_prefix_cache (unconfirmed by the server)".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{deltas, parse};

    /// Speculative statistics as a sample reads them: in the first vocabulary whose names
    /// the deltas carry.
    fn spec_from_deltas(d: &BTreeMap<String, f64>) -> Option<SpecStats> {
        crate::metrics_vocabularies()
            .find_map(|v| v.spec(d))
            .flatten()
    }

    fn recorded_body(file: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(file).unwrap();
        v["response"]["body"].to_string()
    }

    #[test]
    fn a_refused_reset_is_busy_and_a_confirmed_one_is_done() {
        let busy = recorded_body(include_str!(
            "../../../tests/fixtures/recorded/vllm-0.32.0/reset_prefix_cache_busy.json"
        ));
        assert!(matches!(reset_answer(&busy), Err(ClientError::Busy { .. })));
        let idle = recorded_body(include_str!(
            "../../../tests/fixtures/recorded/vllm-0.32.0/reset_prefix_cache_idle.json"
        ));
        assert_eq!(reset_answer(&idle).unwrap(), "vllm /reset_prefix_cache");
        assert!(reset_answer("").unwrap().contains("unconfirmed"));
    }

    const VLLM_BEFORE: &str = r#"# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="0"} 1.0
"#;

    #[test]
    fn vllm_counter_deltas_give_spec_stats_and_kv_pool() {
        let before = parse(VLLM_BEFORE).unwrap();
        let after = parse(
            &VLLM_BEFORE
                .replace("} 100.0", "} 1124.0")
                .replace(
                    "drafts_total{engine=\"0\",model_name=\"m\"} 10.0",
                    "drafts_total{engine=\"0\",model_name=\"m\"} 18.0",
                )
                .replace("} 40.0", "} 72.0")
                .replace("} 20.0", "} 44.0"),
        )
        .unwrap();
        let d = deltas(&before, &after, &crate::kept_metric_names());
        assert_eq!(
            d.get("vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"}"),
            Some(&1024.0)
        );
        let s = spec_from_deltas(&d).unwrap();
        assert_eq!(s.verify_steps, Some(8));
        assert_eq!(s.draft_tokens, Some(32));
        assert_eq!(s.accepted_tokens, Some(24));
        assert_eq!(s.accept_length, Some(4.0));
        assert_eq!(s.accept_rate, Some(0.75));
        assert_eq!(kv_pool_tokens(&before), Some(16000));
    }

    #[test]
    fn no_spec_counters_or_no_drafts_means_no_spec_stats() {
        let s = parse(VLLM_BEFORE).unwrap();
        assert!(spec_from_deltas(&deltas(&s, &s, &crate::kept_metric_names())).is_none());
        let plain =
            parse("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 5\n")
                .unwrap();
        assert_eq!(
            plain.counters.get("llamacpp:prompt_tokens_total"),
            Some(&5.0)
        );
        assert!(spec_from_deltas(&deltas(&plain, &plain, &crate::kept_metric_names())).is_none());
    }
}
