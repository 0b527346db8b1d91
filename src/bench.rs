//! The measuring loop: warmup, then one cold request per (context, repetition), each turned
//! into a [`Sample`] and recorded the moment it is measured.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::adaptive::{relative_half_width, PointProgress, RepPolicy, StopReason};
use crate::client::{Backend, GenOutcome, GenRequest, Timeouts};
use crate::costmodel::{CostModel, Observation};
use crate::error::{ClientError, RecordError};
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
    /// How many repetitions each context gets.
    pub policy: RepPolicy,
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
}

impl BenchSettings {
    /// Timeouts for a request at `context` tokens: long prompts are allowed longer.
    pub fn timeouts_for(&self, context: u64) -> Timeouts {
        Timeouts {
            request: self.timeout_base + self.timeout_per_1k.mul_f64(context as f64 / 1000.0),
            stall: self.stall_timeout,
        }
    }

    /// Timeouts once the cost model predicts the request: the static allowance or four
    /// times the prediction above the base, whichever is larger, so a slow-but-healthy
    /// long point is never cut while a hung short one is caught early.
    pub fn timeouts_with_prediction(&self, context: u64, predicted_s: Option<f64>) -> Timeouts {
        let mut t = self.timeouts_for(context);
        if let Some(p) = predicted_s.filter(|p| p.is_finite() && *p > 0.0) {
            t.request = t
                .request
                .max(self.timeout_base + Duration::from_secs_f64(4.0 * p));
        }
        t
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
    /// Server-reported busy time of the warmup (prompt + generation), in ms.
    pub server_busy_ms: f64,
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
        server_busy_ms: out.timings.as_ref().map_or(0.0, |t| {
            t.prompt_ms.unwrap_or(0.0) + t.predicted_ms.unwrap_or(0.0)
        }),
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
        spec_accept_length: None,
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
    /// Server-reported busy time of the recorded samples (prompt + generation), in ms.
    pub server_busy_ms: f64,
    /// Set when the sweep stopped early, with the reason.
    pub stopped: Option<String>,
    /// The user interrupted.
    pub interrupted: bool,
}

/// The `point` line: how many repetitions a context got and why it stopped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointRecord {
    /// Always `"point"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The run.
    pub run_id: String,
    /// Context length.
    pub context_tokens: u64,
    /// Repetitions taken (all sessions, failures included).
    pub reps: u32,
    /// Usable samples.
    pub usable: usize,
    /// Why no more repetitions were taken.
    pub stop_reason: StopReason,
    /// Relative 95% CI half-width of the median TTFT (`null`: too few samples).
    pub ttft_ci_rel: Option<f64>,
    /// Relative 95% CI half-width of the median decode rate.
    pub decode_ci_rel: Option<f64>,
}

fn observation(context: u64, p: &PointProgress, steps_ms: &[f64]) -> Option<Observation> {
    let med = |v: &[f64]| crate::stats::Spread::of(v.iter().copied()).map(|s| s.median);
    Some(Observation {
        context: context as f64,
        ttft_s: med(&p.ttft_ms)? / 1000.0,
        step_s: med(steps_ms)? / 1000.0,
    })
}

/// Measures each context in turn, small first, taking repetitions as `settings.policy`
/// says and skipping those already in `prior` (resume); records every sample as measured.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    backend: &dyn Backend,
    builder: &mut PromptBuilder<'_>,
    contexts: &[u64],
    prior: &[Sample],
    settings: &BenchSettings,
    writer: &mut ResultsWriter,
    observer: &mut dyn Observer,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Tally, RecordError> {
    let mut tally = Tally::default();
    let policy = settings.policy;
    let done: HashSet<(u64, u32)> = prior
        .iter()
        .filter(|s| s.status == Status::Ok)
        .map(|s| (s.context_tokens, s.rep))
        .collect();
    tally.skipped = done.len();
    let planned = contexts.len() * policy.min_reps.max(1) as usize;
    observer.start(planned.saturating_sub(done.len()), tally.skipped);
    let run_start = Instant::now();
    let mut observations: Vec<Observation> = Vec::new();
    let mut slot = prior.len() as u64;
    'points: for (pi, &context) in contexts.iter().enumerate() {
        let mut prog = PointProgress::default();
        let mut steps = Vec::new();
        for s in prior
            .iter()
            .filter(|s| s.context_tokens == context && s.status == Status::Ok)
        {
            prog.reps += 1;
            prog.elapsed_s += s.e2e_ms.unwrap_or(0.0) / 1000.0;
            if s.usable() {
                prog.ttft_ms.extend(s.ttft_ms);
                prog.decode.extend(s.decode_tokens_per_s);
                steps.extend(s.ms_per_step);
            }
        }
        let mut next_rep = 0u32;
        loop {
            let model = CostModel::new(observations.clone());
            let cost = model.request_s(context as f64, settings.output_tokens);
            if let Err(reason) = policy.next(&prog, run_start.elapsed().as_secs_f64(), cost) {
                let rec = PointRecord {
                    kind: "point".into(),
                    run_id: settings.run_id.clone(),
                    context_tokens: context,
                    reps: prog.reps,
                    usable: prog.ttft_ms.len(),
                    stop_reason: reason,
                    ttft_ci_rel: relative_half_width(&prog.ttft_ms),
                    decode_ci_rel: relative_half_width(&prog.decode),
                };
                writer.append(&rec)?;
                observer.point_done(&rec);
                break;
            }
            if *interrupt.borrow() {
                tally.interrupted = true;
                break 'points;
            }
            while done.contains(&(context, next_rep)) {
                next_rep += 1;
            }
            let rep = next_rep;
            next_rep += 1;
            observer.eta(remaining_s(&model, contexts, pi, &prog, settings));
            observer.sample_started(context, rep);
            let prompt = builder.build(context, slot);
            slot += 1;
            let sent = prompt.len() as u64;
            let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
            let req = GenRequest {
                prompt,
                max_tokens: settings.output_tokens,
                cache_bypass: settings.cache_bypass,
                timeouts: settings.timeouts_with_prediction(context, cost),
            };
            let t0 = Instant::now();
            let result = tokio::select! {
                r = backend.generate(&req) => r,
                _ = interrupt.wait_for(|v| *v) => {
                    tally.interrupted = true;
                    break 'points;
                }
            };
            let mut fatal = matches!(
                result,
                Err(ClientError::Connect { .. } | ClientError::Unauthorized { .. })
            );
            // A lost connection is fatal when the server is gone: further requests would
            // only record "cannot connect" failures.
            if matches!(result, Err(ClientError::Transport { .. }))
                && !backend.http().reachable().await
            {
                fatal = true;
            }
            let sample = make_sample(settings, context, rep, sent, at, result);
            writer.append(&sample)?;
            prog.reps += 1;
            prog.elapsed_s += t0.elapsed().as_secs_f64();
            if sample.usable() {
                prog.ttft_ms.extend(sample.ttft_ms);
                prog.decode.extend(sample.decode_tokens_per_s);
                steps.extend(sample.ms_per_step);
            }
            if let Some(t) = &sample.server {
                tally.server_busy_ms += t.prompt_ms.unwrap_or(0.0) + t.predicted_ms.unwrap_or(0.0);
            }
            tally.recorded += 1;
            tally.contaminated += sample.contaminated as usize;
            observer.sample_done(&sample);
            if let Some(o) = observation(context, &prog, &steps) {
                observations.retain(|x| x.context != o.context);
                observations.push(o);
            }
            if let Some(e) = &sample.error {
                tally.failed += 1;
                if fatal || settings.on_error == OnError::Stop {
                    tally.stopped = Some(e.message.clone());
                    break 'points;
                }
            }
        }
    }
    observer.finish();
    Ok(tally)
}

/// Predicted seconds left: this point's and every later point's planned repetitions.
fn remaining_s(
    model: &CostModel,
    contexts: &[u64],
    current: usize,
    prog: &PointProgress,
    settings: &BenchSettings,
) -> Option<f64> {
    let reps = settings.policy.min_reps.max(1);
    let mut total = 0.0;
    for (i, &c) in contexts.iter().enumerate().skip(current) {
        let n = if i == current {
            reps.saturating_sub(prog.reps).max(1)
        } else {
            reps
        };
        total += model.request_s(c as f64, settings.output_tokens)? * n as f64;
    }
    Some(total)
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
            policy: RepPolicy {
                precision: None,
                min_reps: 1,
                max_reps: 1,
                point_budget_s: None,
                run_budget_s: None,
            },
            cache_bypass: true,
            length_tolerance: 0,
            timeout_base: Duration::from_secs(60),
            timeout_per_1k: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(30),
            on_error: OnError::Continue,
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
