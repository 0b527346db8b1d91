//! The measuring loop: warmup, then one cold request per (context, repetition), each turned
//! into a [`Sample`] and recorded the moment it is measured.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::{Backend, GenOutcome, GenRequest, SpecStats, Timeouts};
use crate::error::{ClientError, RecordError};
use crate::metrics::{self, Scraper};
use crate::progress::Observer;
use crate::prompt::PromptBuilder;
use crate::record::{ResultsWriter, Sample, SampleError, Status};

/// What to do when a request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Record the failure and go on with the next sample.
    Continue,
    /// Record the failure and stop the sweep.
    Stop,
}

/// Settings of the measuring loop.
#[derive(Debug, Clone)]
pub struct BenchSettings {
    /// Run id stamped on every sample.
    pub run_id: String,
    /// Tokens to generate per request.
    pub output_tokens: u32,
    /// Repetitions per context.
    pub reps: u32,
    /// Ask the server not to reuse its cache.
    pub cache_bypass: bool,
    /// Allowed |server prompt tokens − target|.
    pub length_tolerance: u64,
    /// Whole-request timeout: `base + per_1k × context/1000`.
    pub timeout_base: Duration,
    /// Extra timeout per 1000 context tokens.
    pub timeout_per_1k: Duration,
    /// Longest silence once bytes flow.
    pub stall_timeout: Duration,
    /// Failure policy.
    pub on_error: OnError,
    /// Flush the server's prefix cache before every measured request.
    pub flush: bool,
    /// Scrape Prometheus counters before and after every sample.
    pub metrics: Option<Scraper>,
}

impl BenchSettings {
    /// Timeouts for a request at `context` tokens: long prompts are allowed longer.
    pub fn timeouts_for(&self, context: u64) -> Timeouts {
        Timeouts {
            request: self.timeout_base + self.timeout_per_1k.mul_f64(context as f64 / 1000.0),
            stall: self.stall_timeout,
        }
    }
}

/// What the warmup learned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Warmup {
    /// Token ids sent.
    pub sent: u64,
    /// Prompt tokens the server reported.
    pub reported: Option<u64>,
    /// Tokens the server added (BOS).
    pub server_added: u64,
    /// The server reported a cached-token count.
    pub reports_cached_tokens: bool,
    /// The server reported its own timings.
    pub reports_timings: bool,
}

/// Tokens in the warmup prompt.
pub const WARMUP_TOKENS: u64 = 64;

/// Sends one unmeasured request (its own nonce, so it shares no prefix with any measured
/// prompt) and learns how the server counts a token-id prompt.
pub async fn warmup(
    backend: &dyn Backend,
    builder: &mut PromptBuilder<'_>,
    settings: &BenchSettings,
) -> Result<Warmup, ClientError> {
    let prompt = builder.build(WARMUP_TOKENS, u64::MAX / 2);
    let sent = prompt.len() as u64;
    let out = backend
        .generate(&GenRequest {
            prompt,
            max_tokens: 2,
            cache_bypass: settings.cache_bypass,
            timeouts: settings.timeouts_for(WARMUP_TOKENS),
        })
        .await?;
    let reported = out.counts.prompt_tokens;
    Ok(Warmup {
        sent,
        reported,
        server_added: reported.map_or(0, |r| r.saturating_sub(sent)),
        reports_cached_tokens: out.counts.cached_tokens.is_some(),
        reports_timings: out.timings.is_some(),
    })
}

/// Turns a request's outcome into a sample. Pure: no I/O, unit-tested.
pub fn make_sample(
    settings: &BenchSettings,
    context: u64,
    rep: u32,
    sent: u64,
    at: String,
    result: Result<GenOutcome, ClientError>,
) -> Sample {
    let mut s = Sample {
        kind: "sample".into(),
        run_id: settings.run_id.clone(),
        context_tokens: context,
        rep,
        phase: "cold".into(),
        status: Status::Ok,
        error: None,
        at,
        prompt_tokens_sent: sent,
        prompt_tokens: None,
        length_ok: None,
        cached_tokens: None,
        cache_verified: false,
        contaminated: false,
        ttft_ms: None,
        prefill_tokens_per_s: None,
        decode_tokens_per_s: None,
        ms_per_step: None,
        output_tokens: None,
        token_chunks: None,
        e2e_ms: None,
        finish_reason: None,
        flags: Vec::new(),
        server: None,
        method: "stream".into(),
        spec_accept_length: None,
        spec_accept_rate: None,
        spec_verify_steps: None,
        spec_draft_tokens: None,
        spec_accepted_tokens: None,
        spec_source: None,
        ms_per_verify_step: None,
        metrics: None,
        flush: None,
    };
    let out = match result {
        Ok(o) => o,
        Err(e) => {
            s.status = Status::Failed;
            s.error = Some(SampleError {
                kind: e.kind().to_owned(),
                message: e.to_string(),
            });
            return s;
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    s.prompt_tokens = out.counts.prompt_tokens;
    s.cached_tokens = out.counts.cached_tokens;
    s.cache_verified = s.cached_tokens.is_some();
    s.contaminated = s.cached_tokens.is_some_and(|c| c > 0);
    s.length_ok = s
        .prompt_tokens
        .map(|p| p.abs_diff(context) <= settings.length_tolerance);
    s.ttft_ms = out.stream.ttft().map(ms);
    s.e2e_ms = Some(ms(out.stream.e2e()));
    s.token_chunks = Some(out.stream.token_events as u64);
    s.output_tokens = out.counts.completion_tokens;
    s.finish_reason = out.finish_reason;
    s.server = out.timings;
    if let (Some(p), Some(t)) = (s.prompt_tokens, s.ttft_ms) {
        if t > 0.0 {
            s.prefill_tokens_per_s = Some(p as f64 / (t / 1000.0));
        }
    }
    // Decode: (n − 1) tokens over first→last token, n from the server's count, so a chunk
    // carrying several tokens (speculative decoding) is not mistaken for one step.
    if let (Some(n), Some(span)) = (s.output_tokens, out.stream.decode_span()) {
        let span_ms = ms(span);
        if n >= 2 && span_ms > 0.0 {
            s.decode_tokens_per_s = Some((n - 1) as f64 / (span_ms / 1000.0));
            s.ms_per_step = Some(span_ms / (n - 1) as f64);
        }
    }
    if let Some(spec) = out.spec {
        set_spec(&mut s, spec);
    }
    if s.contaminated {
        s.flags.push("contaminated".into());
    }
    if !s.cache_verified {
        s.flags.push("cache_unverified".into());
    }
    if s.length_ok == Some(false) {
        s.flags.push("length_mismatch".into());
    }
    if s.prompt_tokens.is_none() {
        s.flags.push("length_unreported".into());
    }
    if s.output_tokens
        .is_some_and(|n| n < settings.output_tokens as u64)
    {
        s.flags.push("short_output".into());
    }
    if s.ttft_ms.is_none() {
        s.flags.push("no_tokens".into());
    }
    s
}

/// Stores speculative statistics on a sample; time per verify step is the decode span over
/// the verify steps, kept apart from the per-token `ms_per_step`.
pub fn set_spec(s: &mut Sample, spec: SpecStats) {
    s.spec_accept_length = spec.accept_length;
    s.spec_accept_rate = spec.accept_rate;
    s.spec_verify_steps = spec.verify_steps;
    s.spec_draft_tokens = spec.draft_tokens;
    s.spec_accepted_tokens = spec.accepted_tokens;
    s.spec_source = Some(spec.source);
    s.ms_per_verify_step = match (s.ms_per_step, s.output_tokens, spec.verify_steps) {
        (Some(per_token), Some(n), Some(v)) if n >= 2 && v > 0 => {
            Some(per_token * (n - 1) as f64 / v as f64)
        }
        _ => None,
    };
}

/// Adds Prometheus deltas to a sample; speculative statistics come from them when the
/// response itself had none (vLLM).
fn apply_metric_deltas(s: &mut Sample, before: &metrics::Snapshot, after: &metrics::Snapshot) {
    let d = metrics::deltas(before, after);
    // Counted verify steps beat derived ones (llama.cpp's timings have none; its newest
    // /metrics do).
    let derived = s
        .spec_source
        .as_deref()
        .is_some_and(|x| x.contains("derived"));
    if s.spec_source.is_none() || derived {
        if let Some(spec) = metrics::spec_from_deltas(&d) {
            set_spec(s, spec);
        }
    }
    s.metrics = serde_json::to_value(&d).ok();
}

/// How the measuring loop ended.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Samples recorded by this invocation.
    pub recorded: usize,
    /// Of those, failed.
    pub failed: usize,
    /// Of those, contaminated.
    pub contaminated: usize,
    /// Samples skipped because already recorded (resume).
    pub skipped: usize,
    /// Set when the sweep stopped early, with the reason.
    pub stopped: Option<String>,
    /// The user interrupted.
    pub interrupted: bool,
}

/// Measures every (context, rep) not in `done`, small contexts first, recording as it goes.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    backend: &dyn Backend,
    builder: &mut PromptBuilder<'_>,
    contexts: &[u64],
    done: &HashSet<(u64, u32)>,
    settings: &BenchSettings,
    writer: &mut ResultsWriter,
    observer: &mut dyn Observer,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Tally, RecordError> {
    let mut tally = Tally::default();
    let todo: Vec<(u64, u32)> = contexts
        .iter()
        .flat_map(|&c| (0..settings.reps).map(move |r| (c, r)))
        .filter(|k| !done.contains(k))
        .collect();
    tally.skipped = contexts.len() * settings.reps as usize - todo.len();
    observer.start(todo.len(), tally.skipped);
    for (slot, (context, rep)) in (done.len() as u64..).zip(todo) {
        if *interrupt.borrow() {
            tally.interrupted = true;
            break;
        }
        observer.sample_started(context, rep);
        let flushed = match settings.flush {
            true => Some(backend.flush().await),
            false => None,
        };
        let before = match &settings.metrics {
            Some(m) => m.scrape().await.ok(),
            None => None,
        };
        let prompt = builder.build(context, slot);
        let sent = prompt.len() as u64;
        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let req = GenRequest {
            prompt,
            max_tokens: settings.output_tokens,
            cache_bypass: settings.cache_bypass,
            timeouts: settings.timeouts_for(context),
        };
        let result = tokio::select! {
            r = backend.generate(&req) => r,
            _ = interrupt.wait_for(|v| *v) => {
                tally.interrupted = true;
                break;
            }
        };
        let fatal = matches!(
            result,
            Err(ClientError::Connect { .. } | ClientError::Unauthorized { .. })
        );
        let mut sample = make_sample(settings, context, rep, sent, at, result);
        match flushed {
            Some(Ok(what)) => sample.flush = Some(what),
            Some(Err(e)) => {
                sample.flush = Some(format!("failed: {e}"));
                sample.flags.push("flush_failed".into());
            }
            None => {}
        }
        if let (Some(m), Some(before)) = (&settings.metrics, &before) {
            match m.scrape().await {
                Ok(after) => apply_metric_deltas(&mut sample, before, &after),
                Err(_) => sample.flags.push("metrics_unavailable".into()),
            }
        }
        writer.append(&sample)?;
        tally.recorded += 1;
        tally.contaminated += sample.contaminated as usize;
        observer.sample_done(&sample);
        if let Some(e) = &sample.error {
            tally.failed += 1;
            if fatal || settings.on_error == OnError::Stop {
                tally.stopped = Some(e.message.clone());
                break;
            }
        }
    }
    observer.finish();
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Counts, ServerTimings, StreamStats};
    use std::time::Instant;

    fn settings() -> BenchSettings {
        BenchSettings {
            run_id: "r".into(),
            output_tokens: 33,
            reps: 1,
            cache_bypass: true,
            length_tolerance: 0,
            timeout_base: Duration::from_secs(60),
            timeout_per_1k: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(30),
            on_error: OnError::Continue,
            flush: false,
            metrics: None,
        }
    }

    fn outcome(cached: Option<u64>, prompt: u64, n: u64, token_events: usize) -> GenOutcome {
        let t0 = Instant::now();
        GenOutcome {
            stream: StreamStats {
                t_sent: t0,
                t_first_byte: Some(t0 + Duration::from_millis(10)),
                t_first_token: Some(t0 + Duration::from_millis(100)),
                t_last_token: Some(t0 + Duration::from_millis(420)),
                t_end: t0 + Duration::from_millis(421),
                events: token_events + 3,
                token_events,
                bytes: 1000,
                saw_final: true,
            },
            counts: Counts {
                prompt_tokens: Some(prompt),
                completion_tokens: Some(n),
                cached_tokens: cached,
            },
            timings: Some(ServerTimings {
                source: "t".into(),
                prompt_ms: Some(95.0),
                ..Default::default()
            }),
            finish_reason: Some("limit".into()),
            spec: None,
        }
    }

    #[test]
    fn cold_sample_metrics_use_server_count_over_first_to_last() {
        let s = make_sample(
            &settings(),
            4096,
            0,
            4096,
            "t".into(),
            Ok(outcome(Some(0), 4096, 33, 33)),
        );
        assert_eq!(s.status, Status::Ok);
        assert!(s.usable() && s.cache_verified && !s.contaminated);
        assert!((s.ttft_ms.unwrap() - 100.0).abs() < 1e-6);
        // 32 intervals over 320 ms.
        assert!((s.decode_tokens_per_s.unwrap() - 100.0).abs() < 1e-6);
        assert!((s.ms_per_step.unwrap() - 10.0).abs() < 1e-6);
        assert!((s.prefill_tokens_per_s.unwrap() - 40960.0).abs() < 1e-6);
        assert!(s.flags.is_empty(), "{:?}", s.flags);
    }

    #[test]
    fn multi_token_chunks_do_not_change_the_per_token_rate() {
        // Speculative decoding: 33 tokens in 9 chunks, same interval: same tok/s.
        let s = make_sample(
            &settings(),
            4096,
            0,
            4096,
            "t".into(),
            Ok(outcome(Some(0), 4096, 33, 9)),
        );
        assert!((s.decode_tokens_per_s.unwrap() - 100.0).abs() < 1e-6);
        assert_eq!(s.token_chunks, Some(9));
    }

    #[test]
    fn spec_stats_land_in_their_fields_and_per_step_time_is_per_verify_step() {
        // 33 tokens over 320 ms: 10 ms per token; 8 verify steps: 40 ms per step.
        let mut o = outcome(Some(0), 4096, 33, 9);
        o.spec = Some(
            SpecStats {
                source: "t".into(),
                verify_steps: Some(8),
                draft_tokens: Some(32),
                accepted_tokens: Some(24),
                accept_length: None,
                accept_rate: None,
            }
            .derive(),
        );
        let s = make_sample(&settings(), 4096, 0, 4096, "t".into(), Ok(o));
        assert!((s.ms_per_step.unwrap() - 10.0).abs() < 1e-6);
        assert!((s.ms_per_verify_step.unwrap() - 40.0).abs() < 1e-6);
        assert_eq!(s.spec_accept_length, Some(4.0));
        assert_eq!(s.spec_accept_rate, Some(0.75));
        assert_eq!(s.spec_verify_steps, Some(8));
        assert_eq!(s.method, "stream");
    }

    #[test]
    fn cache_hit_is_contaminated_and_unusable() {
        let s = make_sample(
            &settings(),
            4096,
            0,
            4096,
            "t".into(),
            Ok(outcome(Some(4095), 4096, 33, 33)),
        );
        assert!(s.contaminated && !s.usable());
        assert!(s.flags.contains(&"contaminated".to_owned()));
    }

    #[test]
    fn wrong_length_and_unverified_cache_are_flagged() {
        let s = make_sample(
            &settings(),
            4096,
            0,
            4096,
            "t".into(),
            Ok(outcome(None, 4097, 33, 33)),
        );
        assert_eq!(s.length_ok, Some(false));
        assert!(!s.usable());
        assert!(s.flags.contains(&"cache_unverified".to_owned()));
        assert!(s.flags.contains(&"length_mismatch".to_owned()));
    }

    #[test]
    fn failures_keep_their_cause() {
        let e = ClientError::Transport {
            endpoint: "/completion".into(),
            detail: "connection reset".into(),
        };
        let s = make_sample(&settings(), 4096, 1, 4096, "t".into(), Err(e));
        assert_eq!(s.status, Status::Failed);
        let err = s.error.unwrap();
        assert_eq!(err.kind, "transport");
        assert!(err.message.contains("connection reset"));
    }

    #[test]
    fn timeouts_scale_with_context() {
        let st = settings();
        assert_eq!(st.timeouts_for(0).request, Duration::from_secs(60));
        assert_eq!(st.timeouts_for(180_000).request, Duration::from_secs(960));
    }
}
