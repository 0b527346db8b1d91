//! SGLang's native `/generate`: prompts as `input_ids`, counts and speculative statistics from
//! `meta_info`.
//!
//! By default SGLang streams *cumulative* `text`/`output_ids` (unless started with
//! `--incremental-streaming-output`), and one chunk can carry several tokens, so "this event
//! carries a token" is read from the cumulative `meta_info.completion_tokens` rising; both
//! streaming modes read the same way. The final event has a non-null `finish_reason`; the
//! stream then ends with `[DONE]`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::family::{needs_tokenize, ConnectOptions, FamilyId, Server, ServerProfile};
use super::family::{CapacityFlags, MetricsVocabulary};
use super::stream::{event_json, in_stream_error, EventInfo, EventReader, Framing, Gathered};
use super::stream::{generate_streamed, generate_unstreamed, StreamEvent};
use super::tokenize::{tokenize, TokenizeDialect};
use crate::backend::Backend;
use crate::backend::BackendKind;
use crate::backend::GenOutcome;
use crate::backend::GenRequest;
use crate::http::Http;
use crate::metrics::sum;
use crate::timings::get_f64;
use crate::timings::get_u64;
use ctxbench_schema::error::{ClientError, UsageError};
use ctxbench_schema::record::Counts;
use ctxbench_schema::record::ServerTimings;
use ctxbench_schema::record::SpecStats;

/// SGLang: recognised by its server args at `/server_info` (or the older
/// `/get_server_info`), or by `owned_by "sglang"` in `/v1/models`.
#[derive(Debug, Clone, Copy)]
pub struct Family;

/// SGLang's flat server-args object, from whichever path answers with it.
async fn server_info(s: &Server<'_>) -> Result<Option<(&'static str, Value)>, ClientError> {
    for path in ["/server_info", "/get_server_info"] {
        if let Some(v) = s.json(path).await?.filter(is_server_info) {
            return Ok(Some((path, v)));
        }
    }
    Ok(None)
}

fn is_server_info(v: &Value) -> bool {
    v.get("max_total_num_tokens").is_some()
        || v.get("internal_states").is_some()
        || (v.get("tp_size").is_some() && v.get("model_path").is_some())
}

#[async_trait]
impl crate::family::Family for Family {
    fn id(&self) -> FamilyId {
        FamilyId::new(
            BackendKind::Sglang,
            "sglang",
            "SGLang (native /generate with input_ids)",
        )
    }

    /// The radix cache matches token by token (page size 1 by default).
    fn reuse_allowance(&self, _prefix: u64) -> (u64, &'static str) {
        (
            1,
            "SGLang's radix cache matches per token (default --page-size 1); the last token may be recomputed",
        )
    }

    async fn detect(&self, s: &Server<'_>) -> Result<Option<String>, ClientError> {
        if let Some((path, _)) = server_info(s).await? {
            return Ok(Some(format!(
                "GET {path} answered with SGLang's server args"
            )));
        }
        Ok((s.owned_by().await?.as_deref() == Some("sglang"))
            .then(|| "/v1/models says owned_by \"sglang\"".to_owned()))
    }

    async fn describe(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        let Some((_, info)) = server_info(s).await? else {
            p.notes
                .push("no /server_info: KV pool size and server flags unknown".into());
            return Ok(());
        };
        p.server_version = info
            .get("version")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if p.model.is_none() {
            p.model = info
                .get("served_model_name")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        p.kv_pool_tokens = get_u64(&info, "max_total_num_tokens").or_else(|| {
            info.pointer("/internal_states/0/max_total_num_tokens")
                .and_then(Value::as_u64)
        });
        if let Some(n) = get_u64(&info, "context_length") {
            p.max_context = Some(n);
            p.max_context_source = Some("sglang /server_info context_length".into());
        } else if let (None, Some(n)) = (p.max_context, get_u64(&info, "max_req_input_len")) {
            p.max_context = Some(n);
            p.max_context_source = Some("sglang /server_info max_req_input_len".into());
        }
        // A small KV pool (--max-total-tokens) caps the prompt below the model's context:
        // real SGLang 0.5.23 with a pool of 4096 refused a 4096-token prompt (limit 4090)
        // while /model_info said 65536. A few tokens under the context is its usual margin.
        if let (Some(c), Some(n)) = (p.max_context, get_u64(&info, "max_req_input_len")) {
            if n + 16 < c {
                p.max_context = Some(n);
                p.max_context_source = Some(format!(
                    "sglang /server_info max_req_input_len (the longest prompt it takes: its KV pool of {} tokens, below the context of {c})",
                    p.kv_pool_tokens.map_or("?".to_owned(), |k| k.to_string())
                ));
            }
        }
        if info.get("enable_metrics").and_then(Value::as_bool) == Some(false) {
            p.notes.push(
                "/metrics and meta_info timings are off: start SGLang with --enable-metrics".into(),
            );
        }
        let cache_report = info.get("enable_cache_report").and_then(Value::as_bool);
        p.cached_missing_means_zero = cache_report == Some(true);
        if cache_report == Some(false) {
            p.notes.push("cached tokens in OpenAI usage need SGLang's --enable-cache-report (native /generate reports meta_info.cached_tokens anyway)".into());
        }
        Ok(())
    }

    async fn capabilities(&self, s: &Server<'_>, p: &mut ServerProfile) -> Result<(), ClientError> {
        p.flush = Some("GET/POST /flush_cache (only while idle)".into());
        let algorithm = server_info(s).await?.and_then(|(_, info)| {
            let a = info.get("speculative_algorithm").filter(|a| !a.is_null())?;
            Some(a.as_str().unwrap_or("speculative").to_owned())
        });
        p.spec_stats = Some(match algorithm {
            Some(a) => format!("sglang meta_info spec_* ({a} on)"),
            None => "sglang meta_info spec_* (when a speculative algorithm is set)".into(),
        });
        if s.has_vllm_tokenize(p.model.as_deref()).await? {
            p.tokenize = Some(TokenizeDialect::Sglang);
        } else {
            p.notes.push(
                "no /tokenize (SGLang before mid-2025): use --corpus random, or upgrade SGLang"
                    .into(),
            );
        }
        // input_ids are always accepted; only the corpus needs /tokenize.
        p.token_id_prompts = true;
        Ok(())
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
        Ok(Box::new(Sglang::new(http, p.model.clone())))
    }

    fn cached_tokens_hint(&self) -> Option<&'static str> {
        Some("start SGLang with --enable-cache-report")
    }

    /// Its `/v1/completions` takes token ids, made by its `/tokenize` where there is one.
    async fn openai_capabilities(
        &self,
        s: &Server<'_>,
        p: &mut ServerProfile,
    ) -> Result<bool, ClientError> {
        super::family::token_ids_through_prompt_tokenize(s, p, TokenizeDialect::Sglang).await
    }

    async fn flush(&self, http: &Http) -> Result<String, ClientError> {
        flush_cache(http).await
    }

    fn metrics(&self) -> Option<&'static dyn MetricsVocabulary> {
        Some(&Metrics)
    }

    /// `/v1/loads` (SGLang 0.5 and later), else the `--enable-metrics` gauges.
    fn busy_sources(&self) -> &'static [crate::busy::BusySource] {
        &[
            crate::busy::BusySource::Endpoint(&LOADS),
            crate::busy::BusySource::MetricsGauges(&[
                "sglang:num_running_reqs",
                "sglang:num_queue_reqs",
            ]),
        ]
    }

    fn capacity_flags(&self) -> CapacityFlags {
        CapacityFlags {
            slots: Some("--max-running-requests".into()),
            kv_pool: Some("--mem-fraction-static or --max-total-tokens".into()),
        }
    }
}

/// SGLang's `/metrics` names.
#[derive(Debug, Clone, Copy)]
pub struct Metrics;

impl MetricsVocabulary for Metrics {
    fn kept(&self) -> &'static [&'static str] {
        &["cached_tokens", "num_requests_total"]
    }

    /// Finished requests (each counted once as it completes).
    fn served(&self, d: &std::collections::BTreeMap<String, f64>) -> Option<crate::busy::Served> {
        let counter = "sglang:num_requests_total";
        Some(crate::busy::Served {
            counter,
            unit: crate::busy::ServedUnit::Requests,
            count: sum(d, counter)?,
        })
    }

    /// `cached_tokens/prompt_tokens`, also when the OpenAI protocol is spoken to SGLang.
    fn cache_evidence(&self, d: &std::collections::BTreeMap<String, f64>) -> Option<(f64, f64)> {
        // SGLang (0.5.23, seen on the real server) creates its `cached_tokens_total` series
        // at the first cache hit since start: with the prompt counter present and no such
        // series, nothing was ever served from the cache.
        let q = sum(d, "sglang:prompt_tokens_total")?;
        Some((sum(d, "sglang:cached_tokens_total").unwrap_or(0.0), q))
    }
}

/// The SGLang native protocol.
#[derive(Debug, Clone)]
pub struct Sglang {
    http: Http,
    model: Option<String>,
}

impl Sglang {
    /// A backend speaking to `http`.
    pub fn new(http: Http, model: Option<String>) -> Self {
        Sglang { http, model }
    }
}

const ENDPOINT: &str = "/generate";

/// Reads SGLang `/generate` stream events.
#[derive(Debug, Default)]
pub struct GenerateReader {
    completion_seen: u64,
    ids_seen: usize,
    /// What the events said so far.
    pub got: Gathered,
}

impl EventReader for GenerateReader {
    fn gathered(self) -> Gathered {
        self.got
    }

    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError> {
        if let Some(done) = super::stream::done_sentinel(ev) {
            return Ok(done);
        }
        let v = event_json(ENDPOINT, ev)?;
        if let Some(e) = in_stream_error(ENDPOINT, ev, Some(&v)) {
            // An over-long prompt may be refused after HTTP 200: keep it recognisable.
            return Err(match e {
                ClientError::InStream { endpoint, message }
                    if super::http::is_context_error(&message) =>
                {
                    ClientError::ContextExceeded {
                        endpoint,
                        status: 200,
                        message,
                    }
                }
                e => e,
            });
        }
        let meta = v.get("meta_info").ok_or_else(|| ClientError::Malformed {
            endpoint: ENDPOINT.to_owned(),
            detail: format!(
                "stream event without meta_info: {}",
                super::http::snippet(&ev.data)
            ),
        })?;
        let completion = get_u64(meta, "completion_tokens");
        // Fallback for a build without the counter: cumulative `output_ids` growing.
        let ids = v.get("output_ids").and_then(Value::as_array).map(Vec::len);
        let has_token = match (completion, ids) {
            (Some(n), _) if n > self.completion_seen => {
                self.completion_seen = n;
                true
            }
            (Some(_), _) => false,
            (None, Some(n)) if n > self.ids_seen => {
                self.ids_seen = n;
                true
            }
            _ => false,
        };
        self.got.counts = Counts {
            prompt_tokens: get_u64(meta, "prompt_tokens"),
            completion_tokens: completion.or(self.got.counts.completion_tokens),
            cached_tokens: get_u64(meta, "cached_tokens"),
            // `{"device": D, "host": H}` (0.5.23; null with nothing cached): H tokens were
            // loaded back from HiCache's host memory.
            cached_host_tokens: meta
                .get("cached_tokens_details")
                .and_then(|d| get_u64(d, "host")),
        };
        let finish = meta.get("finish_reason").filter(|f| !f.is_null());
        let is_final = finish.is_some();
        if let Some(f) = finish {
            self.got.finish_reason = f
                .get("type")
                .and_then(Value::as_str)
                .or_else(|| f.as_str())
                .map(str::to_owned);
            self.got.timings = meta_timings(meta, &self.got.counts);
            self.got.spec = meta_spec(meta);
            // Retracted to free KV cache and recomputed later: its TTFT and decode include
            // the redo, which the capacity map must show as a preemption, not as speed.
            if get_u64(meta, "num_retractions").is_some_and(|n| n > 0) {
                self.got
                    .flags
                    .push(ctxbench_schema::record::Flag::Preempted);
            }
        }
        Ok(EventInfo {
            has_token,
            is_final,
            ends_stream: false,
        })
    }
}

/// Server timing from `meta_info`: seconds and epoch-seconds converted to ms.
fn meta_timings(meta: &Value, counts: &Counts) -> Option<ServerTimings> {
    let s_to_ms = |k: &str| get_f64(meta, k).map(|s| s * 1000.0);
    let span = |a: &str, b: &str| Some((get_f64(meta, b)? - get_f64(meta, a)?) * 1000.0);
    let t = ServerTimings {
        source: "sglang.meta_info".to_owned(),
        prompt_n: counts
            .prompt_tokens
            .map(|p| p.saturating_sub(counts.cached_tokens.unwrap_or(0))),
        cache_n: counts.cached_tokens,
        prompt_ms: span("forward_entry_time", "prefill_finished_time"),
        predicted_n: counts.completion_tokens,
        predicted_ms: span("prefill_finished_time", "request_finished_ts"),
        queue_ms: s_to_ms("queue_time"),
        e2e_ms: s_to_ms("e2e_latency"),
        predicted_per_second: get_f64(meta, "decode_throughput"),
        ..Default::default()
    };
    let t = ServerTimings {
        prompt_per_second: match (t.prompt_n, t.prompt_ms) {
            (Some(n), Some(ms)) if ms > 0.0 => Some(n as f64 / (ms / 1000.0)),
            _ => None,
        },
        ..t
    };
    let any = t.prompt_ms.is_some() || t.e2e_ms.is_some() || t.queue_ms.is_some();
    any.then_some(t)
}

/// Speculative statistics from `meta_info`, under every name SGLang has used.
pub fn meta_spec(meta: &Value) -> Option<SpecStats> {
    let first = |names: &[&str]| names.iter().find_map(|n| get_u64(meta, n));
    let verify = get_u64(meta, "spec_verify_ct");
    let accepted = first(&[
        "spec_num_correct_drafts",
        "spec_accepted_drafts",
        "spec_accept_token_num",
    ]);
    let proposed = first(&[
        "spec_num_proposed_drafts",
        "spec_proposed_drafts",
        "spec_draft_token_num",
    ]);
    let length = get_f64(meta, "spec_accept_length");
    let rate = get_f64(meta, "spec_accept_rate");
    if verify.is_none() && length.is_none() && accepted.is_none() {
        return None;
    }
    let mut s = SpecStats {
        source: "sglang.meta_info".to_owned(),
        verify_steps: verify,
        draft_tokens: proposed,
        accepted_tokens: accepted,
        accept_length: length,
        accept_rate: rate,
    };
    // SGLang defines accept length as completion_tokens ÷ verify steps; use it when the
    // server sent the counts but not the ratio.
    if s.accept_length.is_none() {
        if let (Some(n), Some(v)) = (get_u64(meta, "completion_tokens"), verify) {
            if v > 0 {
                s.accept_length = Some(n as f64 / v as f64);
            }
        }
    }
    Some(s.derive())
}

fn body(req: &GenRequest, stream: bool) -> Value {
    json!({
        "input_ids": req.prompt,
        "sampling_params": {
            "max_new_tokens": req.max_tokens,
            "temperature": 0,
            "ignore_eos": true,
        },
        "stream": stream,
    })
}

#[async_trait]
impl Backend for Sglang {
    fn http(&self) -> &Http {
        &self.http
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Sglang
    }

    fn endpoint(&self) -> &'static str {
        ENDPOINT
    }

    async fn tokenize(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        tokenize(
            &self.http,
            TokenizeDialect::Sglang,
            self.model.as_deref(),
            text,
        )
        .await
    }

    async fn generate_once(
        &self,
        req: &GenRequest,
    ) -> Result<crate::backend::OnceOutcome, ClientError> {
        let reader = GenerateReader::default();
        generate_unstreamed(
            &self.http,
            ENDPOINT,
            &body(req, false),
            req.timeouts.request,
            reader,
        )
        .await
    }

    async fn generate(&self, req: &GenRequest) -> Result<GenOutcome, ClientError> {
        let reader = GenerateReader::default();
        generate_streamed(
            &self.http,
            Framing::Sse,
            ENDPOINT,
            &body(req, true),
            req.timeouts,
            reader,
        )
        .await
    }

    async fn flush(&self) -> Result<String, ClientError> {
        flush_cache(&self.http).await
    }
}

/// SGLang's flush, whichever protocol is spoken to the server (also `--backend openai`).
pub async fn flush_cache(http: &Http) -> Result<String, ClientError> {
    match http
        .post_empty("/flush_cache", Duration::from_secs(60))
        .await
    {
        Ok(_) => Ok("sglang /flush_cache".to_owned()),
        // SGLang refuses with 400 "Flush cache failed." while any request is running.
        Err(ClientError::Http {
            status: 400,
            message,
            ..
        }) => Err(ClientError::Busy {
            endpoint: "/flush_cache".to_owned(),
            message,
        }),
        Err(ClientError::Http { status: 404, .. }) => Err(ClientError::Unsupported {
            what: "sglang /flush_cache".to_owned(),
            hint: "this SGLang build has no /flush_cache".to_owned(),
        }),
        Err(e) => Err(e),
    }
}

/// SGLang `GET /v1/loads?include=core`: `num_running_reqs` + `num_waiting_reqs` per
/// data-parallel rank.
pub const LOADS: crate::busy::BusyEndpoint = crate::busy::BusyEndpoint {
    path: "/v1/loads?include=core",
    describe: "GET /v1/loads (num_running_reqs + num_waiting_reqs)",
    parse: parse_loads,
    malformed: "no loads[].num_running_reqs",
    refused: |_| "no loads answer",
};

/// Parses SGLang's `/v1/loads` answer (`loads[]`, one per data-parallel rank).
pub fn parse_loads(v: &Value) -> Option<crate::busy::Reading> {
    let loads = v.get("loads")?.as_array()?;
    let mut active = 0;
    for l in loads {
        let n = |k: &str| l.get(k).and_then(Value::as_u64);
        active += n("num_running_reqs")? + n("num_waiting_reqs").unwrap_or(0);
    }
    Some(crate::busy::Reading {
        active,
        tasks: std::collections::BTreeMap::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> StreamEvent {
        StreamEvent::data(data)
    }

    #[test]
    fn a_retracted_request_is_flagged_preempted_and_zero_retractions_are_not() {
        // SGLang 0.5.23 sends `num_retractions` in every final meta_info (0 when none:
        // tests/fixtures/recorded/sglang-0.5.23/generate_stream.json).
        let last = |n: u32| {
            let mut r = GenerateReader::default();
            r.on_event(&ev(&format!(
                r#"{{"text":"a","output_ids":[5],"meta_info":{{"id":"x","finish_reason":{{"type":"length","length":1}},"prompt_tokens":100,"completion_tokens":1,"cached_tokens":0,"num_retractions":{n}}}}}"#
            )))
            .unwrap();
            r.got.flags
        };
        assert_eq!(last(2), vec![ctxbench_schema::record::Flag::Preempted]);
        assert!(last(0).is_empty());
    }

    #[test]
    fn cumulative_stream_counts_tokens_from_meta_info() {
        let mut r = GenerateReader::default();
        let a = r
            .on_event(&ev(r#"{"text":"a","output_ids":[5],"meta_info":{"id":"x","finish_reason":null,"prompt_tokens":100,"completion_tokens":1,"cached_tokens":0}}"#))
            .unwrap();
        assert!(a.has_token && !a.is_final);
        // A chunk carrying three tokens is one event with the counter +3.
        let b = r
            .on_event(&ev(r#"{"text":"abcd","output_ids":[5,6,7,8],"meta_info":{"id":"x","finish_reason":null,"prompt_tokens":100,"completion_tokens":4,"cached_tokens":0}}"#))
            .unwrap();
        assert!(b.has_token);
        let f = r
            .on_event(&ev(r#"{"text":"abcd","output_ids":[5,6,7,8],"meta_info":{"id":"x","finish_reason":{"type":"length","length":4},"prompt_tokens":100,"completion_tokens":4,"cached_tokens":0,"e2e_latency":0.25,"spec_verify_ct":2,"spec_accept_length":2.0,"spec_accept_rate":0.5,"spec_num_correct_drafts":2,"spec_num_proposed_drafts":4}}"#))
            .unwrap();
        assert!(f.is_final && !f.has_token);
        assert_eq!(r.got.counts.completion_tokens, Some(4));
        assert_eq!(r.got.counts.cached_tokens, Some(0));
        assert_eq!(r.got.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.got.timings.as_ref().unwrap().e2e_ms, Some(250.0));
        let s = r.got.spec.clone().unwrap();
        assert_eq!(
            (s.verify_steps, s.accepted_tokens, s.draft_tokens),
            (Some(2), Some(2), Some(4))
        );
        assert_eq!(s.accept_length, Some(2.0));
        assert!(r.on_event(&ev("[DONE]")).unwrap().ends_stream);
    }

    #[test]
    fn old_spec_counter_names_are_read_and_ratios_derived() {
        let meta: Value = serde_json::from_str(
            r#"{"completion_tokens":30,"spec_verify_ct":10,"spec_accept_token_num":20,"spec_draft_token_num":40}"#,
        )
        .unwrap();
        let s = meta_spec(&meta).unwrap();
        assert_eq!(s.accepted_tokens, Some(20));
        assert_eq!(s.draft_tokens, Some(40));
        assert_eq!(s.accept_rate, Some(0.5));
        assert_eq!(s.accept_length, Some(3.0));
        let alias: Value = serde_json::from_str(
            r#"{"spec_verify_ct":1,"spec_accepted_drafts":3,"spec_proposed_drafts":4}"#,
        )
        .unwrap();
        assert_eq!(meta_spec(&alias).unwrap().accepted_tokens, Some(3));
        assert!(meta_spec(&serde_json::json!({"completion_tokens": 3})).is_none());
    }

    #[test]
    fn in_stream_context_error_is_recognised() {
        let mut r = GenerateReader::default();
        let e = r
            .on_event(&ev(r#"{"error":{"message":"The input (9000 tokens) is longer than the model's context length (8192 tokens)."}}"#))
            .unwrap_err();
        assert!(matches!(e, ClientError::ContextExceeded { .. }), "{e:?}");
    }
}
