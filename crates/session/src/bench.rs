//! The measuring loop: a warmup, then for each context the repetitions the policy asks for
//! (cold, streamed or two-point, each optionally followed by warm decode-at-depth samples),
//! with flushes and metric scrapes around them; every sample is recorded as it is measured.

use std::collections::HashSet;
use std::time::Duration;

// tokio's clock, so the loop's budgets can be tested on a paused clock.
use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use crate::adaptive::{relative_half_width, Decide, PointProgress, RepPolicy, StopReason};
use crate::client::Scraper;
use crate::client::{Backend, GenRequest, Timeouts};
use crate::costmodel::{CostModel, Observation};
use crate::error::{ClientError, RecordError};
use crate::metrics;
use crate::prompt::PromptBuilder;
use crate::record::{ErrorKind, Flag, Line, Phase, ResultsWriter, Sample, ServerTimings, Status};
use crate::sample::{
    apply_metric_deltas, make_sample, make_two_point_sample, make_warm_sample, Target, TwoPointPair,
};

/// Receives events from the measuring loop; the loop does not know who listens (the
/// binary's terminal display is one implementation, tests record events).
pub trait Observer {
    /// The run is about to measure `total` samples (`skipped` already recorded).
    fn start(&mut self, _total: usize, _skipped: usize) {}
    /// A request at `context` is about to be sent.
    fn sample_started(&mut self, _context: u64, _rep: u32) {}
    /// The server is busy with `active` other request(s): ctxbench waits for it to be idle
    /// before measuring (see `crate::idle`).
    fn waiting_for_idle(&mut self, _context: u64, _rep: u32, _active: u64) {}
    /// The wait for idle is over after `waited_s` seconds (`expired`: it ran out, the sample
    /// is measured anyway and flagged).
    fn idle_reached(&mut self, _waited_s: f64, _expired: bool) {}
    /// A sample was recorded.
    fn sample_done(&mut self, _sample: &Sample) {}
    /// Predicted seconds left (from the cost model), when known.
    fn eta(&mut self, _remaining_s: Option<f64>) {}
    /// A context is finished: how many repetitions and why it stopped.
    fn point_done(&mut self, _point: &PointRecord) {}
    /// A warning worth a line of its own (said even when quiet).
    fn warn(&mut self, _msg: &str) {}
    /// A note about the server or the run (a capability it lacks, where a count comes
    /// from); `always`: said even when quiet.
    fn note(&mut self, _msg: &str, _always: bool) {}
    /// A line of the setup (the flush chosen, the plan), said unless quiet.
    fn info(&mut self, _msg: &str) {}
    /// Measuring is over.
    fn finish(&mut self) {}
}

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
    /// Allowed difference as a fraction of the target, when larger (calibrated lengths).
    pub length_tolerance_pct: f64,
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
    /// How long a flush refused because the server is busy is retried (`--flush-wait`).
    pub flush_wait: Duration,
    /// Scrape Prometheus counters before and after every sample.
    pub metrics: Option<Scraper>,
    /// `Some((A, B))`: the two-point method (non-streamed, max_tokens A then B).
    pub two_point: Option<(u32, u32)>,
    /// Warm decode samples after each cold one, reusing its prefix on purpose.
    pub decode_samples: u32,
    /// Needle checks after each context's speed samples (`--needle`).
    pub needle: Option<NeedleSettings>,
    /// Where the nonce ends in what the server sees (tokens it adds in front, then the
    /// nonce), known after the warmup; `None` without a nonce.
    pub nonce_end: Option<u64>,
    /// The idle check around every measured request (`None`: `--idle-check off`, or the
    /// server exposes nothing to read).
    pub idle: Option<crate::idle::IdleCheck>,
    /// `--prompts K`: repetition `r` sends prompt `r mod K` (its corpus window).
    pub prompts: Option<u32>,
}

/// How the needle checks are made (see [`crate::needle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedleSettings {
    /// Depths, percent of the filler before the fact.
    pub depths: Vec<u32>,
    /// `--prompt-seed`: the values are drawn from it when given.
    pub seed: Option<u64>,
    /// Nonce tokens at the start of every prompt (0 with `--nonce off`).
    pub nonce_tokens: usize,
}

impl BenchSettings {
    /// Allowed |server prompt tokens − target| at `context`.
    pub fn tolerance_for(&self, context: u64) -> u64 {
        self.length_tolerance
            .max((self.length_tolerance_pct * context as f64).ceil() as u64)
    }

    /// What a sample at `context` is checked against.
    pub fn target(&self, context: u64) -> Target<'_> {
        Target {
            run_id: &self.run_id,
            tolerance: self.tolerance_for(context),
            output_tokens: self.output_tokens,
            nonce_end: self.nonce_end,
        }
    }

    /// Timeouts for a request at `context` tokens: long prompts are allowed longer.
    pub fn timeouts_for(&self, context: u64) -> Timeouts {
        Timeouts {
            request: self.timeout_base + self.timeout_per_1k.mul_f64(context as f64 / 1000.0),
            stall: self.stall_timeout,
        }
    }

    /// Timeouts for an unmeasured request (the warmup, dry-run calibration): nothing
    /// predicts its cost yet, so a tiny `--timeout` meant for measured requests (which the
    /// cost model raises) does not cut it; it gets at least [`UNMEASURED_TIMEOUT`].
    pub fn timeouts_unmeasured(&self, context: u64) -> Timeouts {
        let mut t = self.timeouts_for(context);
        t.request = t.request.max(UNMEASURED_TIMEOUT);
        t
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

/// The least time an unmeasured request (warmup, calibration) is allowed.
pub const UNMEASURED_TIMEOUT: Duration = Duration::from_secs(60);

/// Tokens in the warmup prompt.
pub const WARMUP_TOKENS: u64 = 64;

/// Sends one unmeasured request (its own nonce, so it shares no prefix with any measured
/// prompt) and learns how the server counts a token-id prompt.
pub async fn warmup(
    backend: &dyn Backend,
    builder: &mut PromptBuilder,
    settings: &BenchSettings,
) -> Result<Warmup, ClientError> {
    let prompt = builder.build(WARMUP_TOKENS, u64::MAX / 2);
    let sent = prompt.len() as u64;
    let req = GenRequest {
        prompt,
        prepared: None,
        max_tokens: 2,
        cache_bypass: settings.cache_bypass,
        timeouts: settings.timeouts_unmeasured(WARMUP_TOKENS),
    };
    // Not measured: a connection the server broke is retried once on a fresh one.
    let out = match backend.generate(&req).await {
        Err(ClientError::Transport { .. }) => {
            backend.http().renew();
            backend.generate(&req).await?
        }
        other => other?,
    };
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

/// Writes one sample and counts it; returns why the sweep must stop, if it must.
fn record(
    writer: &mut ResultsWriter,
    tally: &mut Tally,
    observer: &mut dyn Observer,
    settings: &BenchSettings,
    sample: &Sample,
) -> Result<Option<String>, RecordError> {
    writer.sample(sample)?;
    tally.recorded += 1;
    tally.contaminated += sample.contaminated as usize;
    tally.server_busy_ms += server_busy_ms(sample);
    observer.sample_done(sample);
    if let Some(e) = &sample.error {
        tally.failed += 1;
        let fatal = matches!(e.kind, ErrorKind::Connect | ErrorKind::Unauthorized);
        if fatal || settings.on_error == OnError::Stop {
            return Ok(Some(e.message.clone()));
        }
    }
    Ok(None)
}

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

async fn scrape(settings: &BenchSettings) -> Option<metrics::Snapshot> {
    match &settings.metrics {
        Some(m) => m.scrape().await.ok(),
        None => None,
    }
}

async fn flush(
    backend: &dyn Backend,
    settings: &BenchSettings,
) -> Option<Result<String, ClientError>> {
    match settings.flush {
        true => Some(flush_when_idle(backend, settings.flush_wait).await),
        false => None,
    }
}

/// How long a flush refused because the server is busy is retried before giving up, by
/// default (`--flush-wait`).
pub const FLUSH_IDLE_WAIT: Duration = Duration::from_secs(120);

/// Flushes; a refusal because the server is busy (another client's request is running)
/// is retried with backoff (0.25 s doubling to 4 s) until it succeeds or `bound` passes,
/// and a flush that had to wait says how long. Any other error is returned at once.
pub async fn flush_when_idle(
    backend: &dyn Backend,
    bound: Duration,
) -> Result<String, ClientError> {
    let start = Instant::now();
    let mut wait = Duration::from_millis(250);
    let mut refused = false;
    loop {
        match backend.flush().await {
            Err(ClientError::Busy { .. }) if start.elapsed() + wait <= bound => {
                refused = true;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(4));
            }
            Ok(what) if refused => {
                return Ok(format!(
                    "{what} (after {:.1} s waiting for the server to go idle)",
                    start.elapsed().as_secs_f64()
                ))
            }
            r => return r,
        }
    }
}

fn note_flush(s: &mut Sample, flushed: Option<Result<String, ClientError>>) {
    match flushed {
        Some(Ok(what)) => s.flush = Some(what),
        Some(Err(e)) => {
            s.flush = Some(format!("failed: {e}"));
            s.flags.push(Flag::FlushFailed);
        }
        None => {}
    }
}

/// Scrapes after a sample and stores the deltas since `before`.
async fn finish_metrics(
    settings: &BenchSettings,
    s: Option<&mut Sample>,
    before: Option<&metrics::Snapshot>,
) {
    let (Some(m), Some(s)) = (&settings.metrics, s) else {
        return;
    };
    if s.metrics.is_some() {
        return;
    }
    match (before, m.scrape().await) {
        (Some(before), Ok(after)) => apply_metric_deltas(s, before, &after),
        _ => s.flags.push(Flag::MetricsUnavailable),
    }
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

pub use crate::record::PointRecord;
impl Tally {
    /// Wall time over server-busy time, when it means something: only for a sweep that
    /// completed every sample (a stopped, interrupted or failing sweep spent wall time the
    /// server never reported, so the ratio would blame the client). `Err` says why not.
    pub fn efficiency(&self, wall_s: f64) -> Result<f64, String> {
        let busy_s = self.server_busy_ms / 1000.0;
        if self.interrupted {
            Err("the sweep was interrupted".into())
        } else if self.stopped.is_some() {
            Err("the sweep stopped early".into())
        } else if self.failed > 0 {
            Err(format!(
                "{} sample(s) failed, and failures report no server time",
                self.failed
            ))
        } else if busy_s <= 0.0 {
            Err("the server reported no timings".into())
        } else {
            Ok(wall_s / busy_s)
        }
    }
}

/// A point's progress from the samples recorded by earlier sessions (resume), and their
/// decode step times.
fn prior_progress(prior: &[Sample], context: u64, min_reps: u32) -> (PointProgress, Vec<f64>) {
    let mut prog = PointProgress::default();
    let mut steps = Vec::new();
    for s in prior
        .iter()
        .filter(|s| s.context_tokens == context && s.status == Status::Ok && s.phase == Phase::Cold)
    {
        // Taken again when measured (see `run`): no repetition of the plan.
        if s.has(&Flag::ForeignLoad) {
            continue;
        }
        prog.add_rep(s.e2e_ms.unwrap_or(0.0) / 1000.0, min_reps);
        if s.usable() {
            prog.ttft_ms.extend(s.ttft_ms);
            prog.decode.extend(s.decode_tokens_per_s);
            steps.extend(s.ms_per_step);
        }
    }
    (prog, steps)
}

/// The `point` line of a finished context.
fn point_record(
    settings: &BenchSettings,
    context: u64,
    prog: &PointProgress,
    reason: StopReason,
) -> PointRecord {
    PointRecord {
        run_id: settings.run_id.clone(),
        context_tokens: context,
        reps: prog.reps,
        usable: prog.ttft_ms.len(),
        stop_reason: reason,
        ttft_ci_rel: relative_half_width(&prog.ttft_ms),
        decode_ci_rel: relative_half_width(&prog.decode),
        concurrency: None,
    }
}

fn observation(context: u64, p: &PointProgress, steps_ms: &[f64]) -> Option<Observation> {
    let med = |v: &[f64]| crate::stats::Spread::of(v.iter().copied()).map(|s| s.median);
    Some(Observation {
        context: context as f64,
        ttft_s: med(&p.ttft_ms)? / 1000.0,
        step_s: med(steps_ms)? / 1000.0,
    })
}

/// What the measuring loop drives and where its results go: one bundle instead of the same
/// six arguments on every function of the loop.
pub struct RunCtx<'r> {
    /// The server's protocol.
    pub backend: &'r dyn Backend,
    /// Prompts of exact length.
    pub builder: &'r mut PromptBuilder,
    /// How to measure.
    pub settings: &'r BenchSettings,
    /// Where samples go, one line each as measured.
    pub writer: &'r mut ResultsWriter,
    /// Who listens (progress, warnings).
    pub observer: &'r mut dyn Observer,
    /// Turns true on Ctrl-C.
    pub interrupt: &'r mut tokio::sync::watch::Receiver<bool>,
}

impl RunCtx<'_> {
    /// The same bundle, borrowed again for a callee.
    pub fn reborrow(&mut self) -> RunCtx<'_> {
        RunCtx {
            backend: self.backend,
            builder: &mut *self.builder,
            settings: self.settings,
            writer: &mut *self.writer,
            observer: &mut *self.observer,
            interrupt: &mut *self.interrupt,
        }
    }
}

/// Measures each context in turn, small first, taking repetitions as `settings.policy`
/// says and skipping those already in `prior` (resume); records every sample as measured.
// The loop over points and repetitions reads as one piece (stop rules, resume, warm
// samples, needle checks); the work of each step is in the functions it calls.
pub async fn run(
    mut ctx: RunCtx<'_>,
    contexts: &[u64],
    prior: &[Sample],
) -> Result<Tally, RecordError> {
    let RunCtx {
        backend, settings, ..
    } = ctx;
    let mut tally = Tally::default();
    let policy = settings.policy;
    let done: HashSet<(u64, u32)> = prior
        .iter()
        .filter(|s| s.status == Status::Ok && s.phase == Phase::Cold)
        .map(|s| (s.context_tokens, s.rep))
        .collect();
    tally.skipped = done.len();
    let planned = contexts.len() * policy.min_reps.max(1) as usize;
    // Each cold sample is followed by its warm decode samples.
    let needles = settings.needle.as_ref().map_or(0, |n| n.depths.len()) * contexts.len();
    ctx.observer.start(
        planned.saturating_sub(done.len()) * (1 + settings.decode_samples as usize) + needles,
        tally.skipped,
    );
    let run_start = Instant::now();
    let mut observations: Vec<Observation> = Vec::new();
    let mut window = prior.len() as u64;
    let mut values = settings
        .needle
        .as_ref()
        .map(|n| crate::needle::Values::new(n.seed));
    'points: for (pi, &context) in contexts.iter().enumerate() {
        let (mut prog, mut steps) = prior_progress(prior, context, policy.min_reps);
        // Cold TTFTs at this point without a cached-token count (the cache-hit rule's data).
        let mut unverified_ttft: Vec<f64> = prior
            .iter()
            .filter(|s| {
                s.context_tokens == context && s.status == Status::Ok && s.phase == Phase::Cold
            })
            .filter(|s| !s.cache_verified)
            .filter_map(|s| s.ttft_ms)
            .collect();
        let mut next_rep = 0u32;
        let mut retakes = 0u32;
        loop {
            let model = CostModel::new(observations.clone());
            let cost = model.request_s(context as f64, settings.output_tokens);
            if let Err(reason) = policy.next(&prog, run_start.elapsed().as_secs_f64(), cost) {
                let rec = point_record(settings, context, &prog, reason);
                ctx.writer.append(&Line::Point(rec.clone()))?;
                ctx.observer.point_done(&rec);
                if let (Some(n), Some(values)) = (&settings.needle, values.as_mut()) {
                    let nctx = NeedleCtx {
                        backend,
                        settings,
                        needle: n,
                        prior,
                    };
                    let stop = needle_point(
                        &nctx,
                        ctx.reborrow(),
                        values,
                        (context, &mut window),
                        &mut tally,
                    )
                    .await?;
                    match stop {
                        NeedleStop::Done => {}
                        NeedleStop::Interrupted => {
                            tally.interrupted = true;
                            break 'points;
                        }
                        NeedleStop::Stopped(reason) => {
                            tally.stopped = Some(reason);
                            break 'points;
                        }
                    }
                }
                break;
            }
            if *ctx.interrupt.borrow() {
                tally.interrupted = true;
                break 'points;
            }
            while done.contains(&(context, next_rep)) {
                next_rep += 1;
            }
            let rep = next_rep;
            next_rep += 1;
            ctx.observer
                .eta(remaining_s(&model, contexts, pi, &prog, settings));
            ctx.observer.sample_started(context, rep);
            let timeouts = settings.timeouts_with_prediction(context, cost);
            let t0 = Instant::now();
            // `--prompts K`: repetition r re-reads prompt r mod K (resume keeps the mapping).
            let prompt_index = settings.prompts.map(|k| rep % k.max(1));
            let body = prompt_index.map_or(window, u64::from);
            let cold = ColdRequest {
                context,
                rep,
                window: body,
                timeouts,
            };
            let measured = measure_cold(
                backend,
                ctx.builder,
                settings,
                (&mut *ctx.observer, &mut *ctx.interrupt),
                cold,
            )
            .await;
            window += 2; // two-point uses two prompts
            let Some((mut sample, req)) = measured else {
                tally.interrupted = true;
                break 'points;
            };
            sample.prompt_index = prompt_index;
            sample.corpus_offset = Some(ctx.builder.offset(body));
            flag_suspected_hit(&mut sample, &unverified_ttft, &observations);
            if sample.status == Status::Ok && !sample.cache_verified {
                unverified_ttft.extend(sample.ttft_ms);
            }
            // A lost connection is fatal when the server is gone: further requests would
            // only record "cannot connect" failures.
            let server_gone = sample
                .error
                .as_ref()
                .is_some_and(|e| e.kind == ErrorKind::Transport)
                && !backend.reachable().await;
            // A sample another client's work overlapped is taken again (at most as many times
            // as the point's planned repetitions): its time still counts against the budget.
            if sample.has(&Flag::ForeignLoad) && retakes < policy.max_reps.max(1) {
                retakes += 1;
                prog.beyond_min_s += t0.elapsed().as_secs_f64();
            } else {
                prog.add_rep(t0.elapsed().as_secs_f64(), policy.min_reps);
            }
            if sample.usable() {
                prog.ttft_ms.extend(sample.ttft_ms);
                prog.decode.extend(sample.decode_tokens_per_s);
                steps.extend(sample.ms_per_step);
            }
            if let Some(o) = observation(context, &prog, &steps) {
                observations.retain(|x| x.context != o.context);
                observations.push(o);
            }
            // Recorded before the warm samples, so a kill during them loses nothing measured.
            let cold_ok = sample.status == Status::Ok;
            let cold_print = sample.output_fingerprint.clone();
            let mut stop = record(ctx.writer, &mut tally, ctx.observer, settings, &sample)?;
            if server_gone && stop.is_none() {
                stop = sample.error.as_ref().map(|e| e.message.clone());
            }
            // Decode at depth: the same prompt again, cache reuse allowed on purpose.
            if let (true, None, Some(mut req)) = (cold_ok, &stop, req) {
                req.cache_bypass = false;
                for _ in 0..settings.decode_samples {
                    let waited = tokio::select! {
                        w = crate::bench::guard::before_sample(settings.idle.as_ref(), ctx.observer, context, rep) => w,
                        _ = ctx.interrupt.wait_for(|v| *v) => break,
                    };
                    let before = scrape(settings).await;
                    let at = now();
                    let r = tokio::select! {
                        r = backend.generate(&req) => r,
                        e = watch_server(backend) => Err(e),
                        _ = ctx.interrupt.wait_for(|v| *v) => break,
                    };
                    let sent = req.prompt.len() as u64;
                    let mut w =
                        make_warm_sample(&settings.target(context), context, rep, sent, at, r);
                    (w.prompt_index, w.corpus_offset) =
                        (prompt_index, Some(ctx.builder.offset(body)));
                    // Same prompt, greedy: the same tokens, or the server is not
                    // deterministic at this depth.
                    if let (Some(c), Some(x)) = (&cold_print, &w.output_fingerprint) {
                        if c != x {
                            w.flags.push(Flag::Nondeterministic);
                        }
                    }
                    finish_metrics(settings, Some(&mut w), before.as_ref()).await;
                    crate::bench::guard::after_sample(settings.idle.as_ref(), &mut w, waited, 1)
                        .await;
                    stop = record(ctx.writer, &mut tally, ctx.observer, settings, &w)?;
                    if stop.is_some() {
                        break;
                    }
                }
            }
            if let Some(reason) = stop {
                tally.stopped = Some(reason);
                break 'points;
            }
            if *ctx.interrupt.borrow() {
                tally.interrupted = true;
                break 'points;
            }
        }
    }
    ctx.observer.finish();
    Ok(tally)
}

/// Which cold sample to measure: its point, repetition, corpus window and time limits.
struct ColdRequest {
    context: u64,
    rep: u32,
    window: u64,
    timeouts: Timeouts,
}

/// What the needle checks of one context share.
struct NeedleCtx<'a> {
    backend: &'a dyn Backend,
    settings: &'a BenchSettings,
    needle: &'a NeedleSettings,
    prior: &'a [Sample],
}

/// How a context's needle checks ended.
enum NeedleStop {
    Done,
    Interrupted,
    Stopped(String),
}

/// One needle check per depth at `context` (rep = the depth's index), cold like every
/// measured prompt: fresh nonce, cache switch and flush, cached tokens verified.
// Each depth's check is prepare → flush → send → judge → record in order; split, the
// interrupt and stop handling would be repeated in each piece.
async fn needle_point(
    ctx: &NeedleCtx<'_>,
    run: RunCtx<'_>,
    values: &mut crate::needle::Values,
    (context, window): (u64, &mut u64),
    tally: &mut Tally,
) -> Result<NeedleStop, RecordError> {
    let RunCtx {
        builder,
        writer,
        observer,
        interrupt,
        ..
    } = run;
    let settings = ctx.settings;
    let mut target = settings.target(context);
    target.output_tokens = crate::needle::ANSWER_TOKENS;
    let question = match ctx.backend.tokenize(crate::needle::QUESTION).await {
        Ok(q) => Some(q),
        Err(e) => {
            observer.warn(&format!(
                "needle checks at {context}: cannot tokenize the question: {e}"
            ));
            None
        }
    };
    for (i, &depth) in ctx.needle.depths.iter().enumerate() {
        let rep = i as u32;
        let done = ctx.prior.iter().any(|s| {
            s.phase == Phase::Needle
                && s.status == Status::Ok
                && s.context_tokens == context
                && s.needle.as_ref().is_some_and(|n| n.depth_pct == depth)
        });
        if done {
            continue;
        }
        if *interrupt.borrow() {
            return Ok(NeedleStop::Interrupted);
        }
        // Drawn even when the check cannot run, so a seeded run's later values stay put.
        let value = values.next_value();
        let base = builder.build(context, *window);
        *window += 1;
        let at = now();
        observer.sample_started(context, rep);
        let fact = match &question {
            Some(_) => ctx.backend.tokenize(&crate::needle::fact(&value)).await,
            None => Err(ClientError::Unsupported {
                what: "needle question".to_owned(),
                hint: "the server's tokenizer failed".to_owned(),
            }),
        };
        let placed = match (&fact, &question) {
            (Ok(f), Some(q)) => crate::needle::place(&base, ctx.needle.nonce_tokens, f, q, depth)
                .map(|p| (p, f.len(), q.len())),
            _ => None,
        };
        let sent = base.len() as u64;
        let (mut s, answer, fact_at, fact_len, q_len) = match (fact, placed) {
            (Err(e), _) => {
                let s = make_sample(&target, context, rep, sent, at, Err(e));
                (s, None, 0, 0, 0)
            }
            (Ok(_), None) => {
                let e = ClientError::Unsupported {
                    what: format!("a needle check at {context} tokens"),
                    hint: "the prompt is too short to hold the fact and the question".to_owned(),
                };
                (
                    make_sample(&target, context, rep, sent, at, Err(e)),
                    None,
                    0,
                    0,
                    0,
                )
            }
            (Ok(_), Some((placed, f_len, q_len))) => {
                let mut req = GenRequest {
                    prompt: placed.prompt,
                    prepared: None,
                    max_tokens: crate::needle::ANSWER_TOKENS,
                    cache_bypass: settings.cache_bypass,
                    timeouts: settings.timeouts_for(context),
                };
                let prepared = tokio::select! {
                    r = ctx.backend.prepare(&mut req) => r,
                    e = watch_server(ctx.backend) => Err(e),
                    _ = interrupt.wait_for(|v| *v) => return Ok(NeedleStop::Interrupted),
                };
                let flushed = flush(ctx.backend, settings).await;
                let r = match prepared {
                    Ok(()) => tokio::select! {
                        r = ctx.backend.generate(&req) => r,
                        e = watch_server(ctx.backend) => Err(e),
                        _ = interrupt.wait_for(|v| *v) => return Ok(NeedleStop::Interrupted),
                    },
                    Err(e) => Err(e),
                };
                let answer = r.as_ref().ok().map(|o| o.output.text.clone());
                let mut s = make_sample(&target, context, rep, sent, at, r);
                note_flush(&mut s, flushed);
                (s, answer, placed.fact_at as u64, f_len as u64, q_len as u64)
            }
        };
        s.phase = Phase::Needle;
        // Only an answer seen is judged: a failed request is an error, never a fail.
        let verdict = match (&s.status, &answer) {
            (Status::Ok, Some(a)) if a.is_empty() && s.output_fingerprint.is_none() => {
                crate::record::NeedleVerdict::Unseen
            }
            (Status::Ok, Some(a)) => crate::needle::check(a, &value),
            _ => crate::record::NeedleVerdict::Error,
        };
        s.needle = Some(crate::record::NeedleCheck {
            depth_pct: depth,
            value,
            fact_at,
            fact_tokens: fact_len,
            question_tokens: q_len,
            answer,
            verdict,
        });
        if let Some(reason) = record(writer, tally, observer, settings, &s)? {
            return Ok(NeedleStop::Stopped(reason));
        }
    }
    Ok(NeedleStop::Done)
}

/// Flags a sample the cache-hit rule catches (see `cachehit`) as it is recorded, so the
/// adaptive policy does not count it: compared with this point's other unverified samples
/// and with the median TTFT at the nearest shorter length measured so far.
fn flag_suspected_hit(sample: &mut Sample, same: &[f64], observations: &[Observation]) {
    if sample.status != Status::Ok || sample.cache_verified || sample.phase != "cold" {
        return;
    }
    let Some(t) = sample.ttft_ms else { return };
    let here = sample.context_tokens as f64;
    let shorter = observations
        .iter()
        .filter(|o| o.context < here)
        .max_by(|a, b| a.context.total_cmp(&b.context))
        .map(|o| o.ttft_s * 1000.0);
    if crate::stats::cachehit::is_suspect(t, same, shorter) {
        sample.flags.push(crate::record::Flag::SuspectedCacheHit);
    }
}

/// One cold measurement (streamed, or the two requests of the two-point method): its
/// prompt prepared first (see [`Backend::prepare`]), then the flush and metric scrapes
/// around the measured request. `None` when interrupted. The request is handed back
/// for decode-at-depth samples.
// Both methods' sequence (prepare → scrape → flush → send → sample) side by side, so the
// order that keeps tokenizer traffic and flushes out of the measurement is seen at once.
async fn measure_cold(
    backend: &dyn Backend,
    builder: &mut PromptBuilder,
    settings: &BenchSettings,
    (observer, interrupt): (&mut dyn Observer, &mut tokio::sync::watch::Receiver<bool>),
    cold: ColdRequest,
) -> Option<(Sample, Option<GenRequest>)> {
    let ColdRequest {
        context,
        rep,
        window,
        timeouts,
    } = cold;
    let at = now();
    let prompt = builder.build(context, window);
    let sent = prompt.len() as u64;
    let req = |prompt, max_tokens| GenRequest {
        prompt,
        prepared: None,
        max_tokens,
        cache_bypass: settings.cache_bypass,
        timeouts,
    };
    match settings.two_point {
        Some(ab) => {
            // A and B each get their own nonce: neither can reuse the other's prefill.
            let (mut a, mut b) = (
                req(prompt, ab.0),
                req(builder.build(context, window + 1), ab.1),
            );
            // Both prepared before A is sent: no tokenizer or calibration traffic between
            // or during the two measurements, nor in the metrics scraped around them.
            let prepared = tokio::select! {
                r = async { backend.prepare(&mut a).await?; backend.prepare(&mut b).await } => r,
                e = watch_server(backend) => Err(e),
                _ = interrupt.wait_for(|v| *v) => return None,
            };
            if let Err(e) = prepared {
                let not_sent = ClientError::Unsupported {
                    what: "request B".to_owned(),
                    hint: "not sent: the prompts could not be prepared".to_owned(),
                };
                let pair = TwoPointPair {
                    tokens: ab,
                    a: Err(e),
                    b: Err(not_sent),
                };
                let s =
                    make_two_point_sample(&settings.target(context), context, rep, sent, at, pair);
                return Some((s, None));
            }
            let waited = tokio::select! {
                w = crate::bench::guard::before_sample(settings.idle.as_ref(), observer, context, rep) => w,
                _ = interrupt.wait_for(|v| *v) => return None,
            };
            let before = scrape(settings).await;
            let flushed = flush(backend, settings).await;
            let pair = async {
                let a = backend.generate_once(&a).await;
                if settings.flush {
                    let _ = flush_when_idle(backend, settings.flush_wait).await;
                }
                let b = backend.generate_once(&b).await;
                (a, b)
            };
            tokio::select! {
                (a, b) = pair => {
                    let pair = TwoPointPair { tokens: ab, a, b };
                    let mut s = make_two_point_sample(&settings.target(context), context, rep, sent, at, pair);
                    note_flush(&mut s, flushed);
                    finish_metrics(settings, Some(&mut s), before.as_ref()).await;
                    crate::bench::guard::after_sample(settings.idle.as_ref(), &mut s, waited, 2).await;
                    Some((s, None))
                }
                e = watch_server(backend) => {
                    let pair = TwoPointPair { tokens: ab, a: Err(e), b: Err(gone_error(backend)) };
                    let mut s = make_two_point_sample(&settings.target(context), context, rep, sent, at, pair);
                    note_flush(&mut s, flushed);
                    Some((s, None))
                }
                _ = interrupt.wait_for(|v| *v) => None,
            }
        }
        None => {
            let mut req = req(prompt, settings.output_tokens);
            // Prepared before the scrape, the flush and t0: the prompt's tokenizer
            // round-trips or calibration requests are in none of them.
            let prepared = tokio::select! {
                r = backend.prepare(&mut req) => r,
                e = watch_server(backend) => Err(e),
                _ = interrupt.wait_for(|v| *v) => return None,
            };
            if let Err(e) = prepared {
                let s = make_sample(&settings.target(context), context, rep, sent, at, Err(e));
                return Some((s, None));
            }
            let waited = tokio::select! {
                w = crate::bench::guard::before_sample(settings.idle.as_ref(), observer, context, rep) => w,
                _ = interrupt.wait_for(|v| *v) => return None,
            };
            let before = scrape(settings).await;
            let flushed = flush(backend, settings).await;
            let result = tokio::select! {
                r = backend.generate(&req) => r,
                e = watch_server(backend) => Err(e),
                _ = interrupt.wait_for(|v| *v) => return None,
            };
            let mut s = make_sample(&settings.target(context), context, rep, sent, at, result);
            note_flush(&mut s, flushed);
            finish_metrics(settings, Some(&mut s), before.as_ref()).await;
            crate::bench::guard::after_sample(settings.idle.as_ref(), &mut s, waited, 1).await;
            Some((s, Some(req)))
        }
    }
}

/// Resolves, with the error to record, when the server stops listening while a request is
/// in flight (checked every second by a TCP connect). A server shutting down can hold a
/// request open for its own shutdown timeout (llama-server: 30 s) without a byte; this
/// notices at once that nothing listens any more.
async fn watch_server(backend: &dyn Backend) -> ClientError {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !backend.listening().await {
            return gone_error(backend);
        }
    }
}

fn gone_error(backend: &dyn Backend) -> ClientError {
    ClientError::Transport {
        endpoint: backend.endpoint().to_owned(),
        detail: "the server stopped accepting connections mid-request".to_owned(),
    }
}

/// Server-reported busy time of a sample (prompt + generation; both requests of a
/// two-point sample), in ms.
pub fn server_busy_ms(s: &Sample) -> f64 {
    let main = s.server.as_ref().map_or(0.0, ServerTimings::busy_ms);
    let a = s
        .two_point
        .as_ref()
        .and_then(|t| t.a_server_busy_ms)
        .unwrap_or(0.0);
    main + a
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
pub(crate) mod tests {
    use super::*;

    /// Settings for unit tests: one fixed repetition, 33 output tokens.
    pub(crate) fn settings() -> BenchSettings {
        BenchSettings {
            nonce_end: None,
            prompts: None,
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
            length_tolerance_pct: 0.0,
            timeout_base: Duration::from_secs(60),
            timeout_per_1k: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(30),
            on_error: OnError::Continue,
            flush: false,
            flush_wait: FLUSH_IDLE_WAIT,
            metrics: None,
            two_point: None,
            decode_samples: 0,
            needle: None,
            idle: None,
        }
    }

    #[test]
    fn timeouts_scale_with_context() {
        let st = settings();
        assert_eq!(st.timeouts_for(0).request, Duration::from_secs(60));
        assert_eq!(st.timeouts_for(180_000).request, Duration::from_secs(960));
    }

    #[test]
    fn a_tiny_timeout_is_raised_by_the_prediction_and_spares_unmeasured_requests() {
        let mut st = settings();
        st.timeout_base = Duration::from_millis(10);
        st.timeout_per_1k = Duration::ZERO;
        // No prediction: the static value.
        let none = st.timeouts_with_prediction(8192, None).request;
        assert_eq!(none, Duration::from_millis(10));
        // A prediction of 0.8 s: at least 4× that above the base.
        let predicted = st.timeouts_with_prediction(8192, Some(0.8)).request;
        assert_eq!(predicted, Duration::from_millis(3210));
        assert_eq!(st.timeouts_unmeasured(64).request, UNMEASURED_TIMEOUT);
        // A larger --timeout is kept as it is.
        st.timeout_base = Duration::from_secs(300);
        assert_eq!(st.timeouts_unmeasured(64).request, Duration::from_secs(300));
    }

    #[test]
    fn efficiency_is_only_computed_for_a_sweep_that_completed() {
        let ok = Tally {
            recorded: 4,
            server_busy_ms: 2000.0,
            ..Tally::default()
        };
        assert_eq!(ok.efficiency(3.0), Ok(1.5));
        let failed = Tally {
            failed: 1,
            ..ok.clone()
        };
        assert!(failed
            .efficiency(3.0)
            .unwrap_err()
            .contains("1 sample(s) failed"));
        let stopped = Tally {
            stopped: Some("connection lost".into()),
            ..ok.clone()
        };
        assert!(stopped
            .efficiency(31.8)
            .unwrap_err()
            .contains("stopped early"));
        let interrupted = Tally {
            interrupted: true,
            ..ok.clone()
        };
        assert!(interrupted.efficiency(3.0).is_err());
        let silent = Tally {
            server_busy_ms: 0.0,
            ..ok
        };
        assert!(silent.efficiency(3.0).is_err());
    }
}

#[cfg(test)]
mod loop_tests;

pub mod append;
mod append_wave;
pub mod conversation;
pub mod guard;
pub mod tiers;
pub mod wave;
