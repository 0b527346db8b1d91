//! The measuring loop: a warmup, then for each context the repetitions the policy asks for
//! (cold, streamed or two-point, each optionally followed by warm decode-at-depth samples),
//! with flushes and metric scrapes around them; every sample is recorded as it is measured.

use std::collections::{HashMap, HashSet};

// tokio's clock, so the loop's budgets can be tested on a paused clock.
use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use crate::adaptive::{relative_half_width, Decide, PointProgress, StopReason};
use crate::costmodel::{CostModel, Observation};
use crate::design::{Design, Next, PointState};
use crate::prompt::PromptBuilder;
use crate::sample::{make_sample, make_two_point_sample, make_warm_sample, TwoPointPair};
pub use ctx::{
    BenchSettings, NeedleSettings, Observer, OnError, RunCtx, Step, Tally, UNMEASURED_TIMEOUT,
};
use ctxbench_client::{Backend, GenRequest, Timeouts};
use ctxbench_schema::error::{ClientError, RecordError};
pub use ctxbench_schema::record::PointRecord;
use ctxbench_schema::record::{ErrorKind, Flag, Line, Phase, Sample, Status};
pub use protocol::{flush_when_idle, server_busy_ms, FLUSH_IDLE_WAIT};
use protocol::{gone_error, note_flush, now, record, send, watch_server};

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
    /// Seconds per token (prompt and output together) the warmup took end to end.
    pub s_per_token: Option<f64>,
    /// Calibrated prompts: the server's count of a message of only the warmup's nonce (BOS
    /// and chat template included; see [`Backend::counted_prefix`]).
    pub counted_nonce: Option<u64>,
}

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
    let took = out
        .stream
        .t_end
        .saturating_duration_since(out.stream.t_sent);
    let tokens = reported.unwrap_or(sent) + out.counts.completion_tokens.unwrap_or(2);
    let s_per_token = (tokens > 0).then(|| took.as_secs_f64() / tokens as f64);
    let counted_nonce = backend
        .counted_prefix(&req, crate::prompt::NONCE_TOKENS)
        .await?;
    Ok(Warmup {
        s_per_token,
        counted_nonce,
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
        prog.server_s += s.server_s();
        if s.usable() {
            prog.ttft_ms.extend(s.ttft_ms);
            prog.decode.extend(s.decode_tokens_per_s);
            prog.step_ms.extend(crate::adaptive::counted_step_ms(s));
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
        design: None,
        quantile: settings
            .policy
            .quantile
            .map(|q| crate::adaptive::quantile_ci(q, prog)),
    }
}

fn observation(context: u64, p: &PointProgress, steps_ms: &[f64]) -> Option<Observation> {
    let med = |v: &[f64]| ctxbench_stats::stats::Spread::of(v.iter().copied()).map(|s| s.median);
    Some(Observation {
        context: context as f64,
        ttft_s: med(&p.ttft_ms)? / 1000.0,
        step_s: med(steps_ms)? / 1000.0,
    })
}

/// Measures each context in turn, small first, taking repetitions as `settings.policy`
/// says and skipping those already in `prior` (resume); records every sample as measured.
pub async fn run(
    mut ctx: RunCtx<'_>,
    contexts: &[u64],
    prior: &[Sample],
) -> Result<Tally, RecordError> {
    let settings = ctx.settings;
    let mut tally = Tally::default();
    let done: HashSet<(u64, u32)> = prior
        .iter()
        .filter(|s| s.status == Status::Ok && s.phase == Phase::Cold)
        .map(|s| (s.context_tokens, s.rep))
        .collect();
    tally.skipped = done.len();
    let planned = contexts.len() * settings.policy.min_reps.max(1) as usize;
    // Each cold sample is followed by its warm decode samples.
    let needles = settings.needle.as_ref().map_or(0, |n| n.depths.len()) * contexts.len();
    ctx.observer.start(
        planned.saturating_sub(done.len()) * (1 + settings.decode_samples as usize) + needles,
        tally.skipped,
    );
    let mut sweep = Sweep {
        contexts,
        prior,
        done,
        run_start: Instant::now(),
        design: Book::new(settings, contexts, prior),
        // A resumed run's cost model starts from what the file already measured.
        observations: contexts
            .iter()
            .filter_map(|&c| {
                let (p, steps) = prior_progress(prior, c, 0);
                observation(c, &p, &steps)
            })
            .collect(),
        window: prior.len() as u64,
        values: settings
            .needle
            .as_ref()
            .map(|n| crate::needle::Values::new(n.seed)),
        carry: HashMap::new(),
    };
    // A designed run visits the cheap lengths, then the longest, then the ones between (which
    // it may predict instead of measuring), one sample per length per pass, so that a
    // length's samples are spread over the run (`design::waits`).
    let designed = sweep.design.is_some();
    let mut open: Vec<usize> = match designed {
        true => crate::design::order(contexts),
        false => (0..contexts.len()).collect(),
    };
    // A pass in which every length waited (which the rules exclude) makes the next ignore
    // the waits, so the run always ends.
    let mut may_wait = true;
    'passes: while !open.is_empty() {
        let mut again = Vec::new();
        let mut visited = false;
        for pi in open {
            let waits = |b: &Book| b.design.waits(&b.points, pi);
            if may_wait && sweep.design.as_ref().is_some_and(waits) {
                again.push(pi);
                continue;
            }
            visited = true;
            match point(&mut ctx, &mut sweep, pi, &mut tally, designed).await? {
                Visit::Again => again.push(pi),
                Visit::Done(step) => {
                    if step.ends(&mut tally) {
                        break 'passes;
                    }
                }
            }
        }
        open = again;
        may_wait = visited;
    }
    revise_at_end(&mut ctx, &sweep)?;
    ctx.observer.finish();
    Ok(tally)
}

/// What a visit to a point left.
enum Visit {
    /// The point is finished (its `point` line written), and the run goes on or ends.
    Done(Step),
    /// The point wants more samples, on a later pass (a designed run).
    Again,
}

/// A point's progress between the visits of a designed run.
struct Carry {
    prog: PointProgress,
    steps: Vec<f64>,
    unverified_ttft: Vec<f64>,
    next_rep: u32,
    retakes: u32,
}

/// What the sweep carries from one point to the next.
struct Sweep<'a> {
    contexts: &'a [u64],
    prior: &'a [Sample],
    /// (context, rep) of the cold samples already recorded (resume).
    done: HashSet<(u64, u32)>,
    run_start: Instant,
    /// The designed sweep's view of every length (`--design auto`).
    design: Option<Book>,
    /// Median TTFT and step time per measured length: the cost model's data.
    observations: Vec<Observation>,
    /// The next corpus window (each prompt reads its own).
    window: u64,
    /// The needle values, drawn in order (seeded with `--prompt-seed`).
    values: Option<crate::needle::Values>,
    /// The progress of the points a designed run will visit again.
    carry: HashMap<usize, Carry>,
}

/// One point's repetitions (as the policy asks), then its `point` line and needle checks.
/// With `one_per_visit` (a designed run) the visit ends after one sample while the point
/// wants more ([`Visit::Again`]), and the next visit goes on from there.
async fn point(
    ctx: &mut RunCtx<'_>,
    sweep: &mut Sweep<'_>,
    pi: usize,
    tally: &mut Tally,
    one_per_visit: bool,
) -> Result<Visit, RecordError> {
    let settings = ctx.settings;
    let policy = settings.policy;
    let context = sweep.contexts[pi];
    let Carry {
        mut prog,
        mut steps,
        mut unverified_ttft,
        mut next_rep,
        mut retakes,
    } = match sweep.carry.remove(&pi) {
        Some(c) => c,
        None => first_visit(sweep.prior, context, policy.min_reps),
    };
    let mut taken = 0u32;
    loop {
        let model = CostModel::new(sweep.observations.clone());
        let cost = model.request_s(context as f64, settings.output_tokens);
        let (decision, eta) = decide(sweep, settings, pi, &prog, &model);
        if let Err(rec) = decision {
            ctx.writer.append(&Line::Point(Box::new(rec.clone())))?;
            ctx.observer.point_done(&rec);
            return needles(ctx, sweep, context, tally).await.map(Visit::Done);
        }
        if one_per_visit && taken > 0 {
            let carry = Carry {
                prog,
                steps,
                unverified_ttft,
                next_rep,
                retakes,
            };
            sweep.carry.insert(pi, carry);
            return Ok(Visit::Again);
        }
        if *ctx.interrupt.borrow() {
            return Ok(Visit::Done(Step::Interrupted));
        }
        taken += 1;
        while sweep.done.contains(&(context, next_rep)) {
            next_rep += 1;
        }
        let rep = next_rep;
        next_rep += 1;
        ctx.observer.eta(eta);
        ctx.observer.sample_started(context, rep);
        let t0 = Instant::now();
        // `--prompts K`: repetition r re-reads prompt r mod K (resume keeps the mapping).
        let prompt_index = settings.prompts.map(|k| rep % k.max(1));
        let body = prompt_index.map_or(sweep.window, u64::from);
        let cold = ColdRequest {
            context,
            rep,
            window: body,
            timeouts: settings.timeouts_with_prediction(context, cost),
        };
        let measured = measure_cold(ctx, cold).await;
        sweep.window += 2; // two-point uses two prompts
        let Some((mut sample, req)) = measured else {
            return Ok(Visit::Done(Step::Interrupted));
        };
        sample.prompt_index = prompt_index;
        sample.corpus_offset = Some(ctx.builder.offset(body));
        flag_suspected_hit(&mut sample, &unverified_ttft, &sweep.observations);
        if sample.status == Status::Ok && !sample.cache_verified {
            unverified_ttft.extend(sample.ttft_ms);
        }
        // A lost connection is fatal when the server is gone: further requests would
        // only record "cannot connect" failures.
        let server_gone = sample
            .error
            .as_ref()
            .is_some_and(|e| e.kind == ErrorKind::Transport)
            && !ctx.backend.reachable().await;
        // A sample another client's work overlapped is taken again (at most as many times
        // as the point's planned repetitions): its time still counts against the budget.
        if sample.has(&Flag::ForeignLoad) && retakes < policy.max_reps.max(1) {
            retakes += 1;
            prog.beyond_min_s += t0.elapsed().as_secs_f64();
        } else {
            prog.add_rep(t0.elapsed().as_secs_f64(), policy.min_reps);
        }
        prog.server_s += sample.server_s();
        if sample.usable() {
            prog.ttft_ms.extend(sample.ttft_ms);
            prog.decode.extend(sample.decode_tokens_per_s);
            prog.step_ms
                .extend(crate::adaptive::counted_step_ms(&sample));
            steps.extend(sample.ms_per_step);
        }
        if let Some(o) = observation(context, &prog, &steps) {
            sweep.observations.retain(|x| x.context != o.context);
            sweep.observations.push(o);
        }
        // Recorded before the warm samples, so a kill during them loses nothing measured.
        let mut stop = record(ctx.writer, tally, ctx.observer, settings, &sample)?;
        if server_gone && stop.is_none() {
            stop = sample.error.as_ref().map(|e| e.message.clone());
        }
        if let (Status::Ok, None, Some(req)) = (&sample.status, &stop, req) {
            let cold = (&sample, prompt_index, body);
            stop = decode_at_depth(ctx, req, cold, tally).await?;
        }
        if let Some(reason) = stop {
            return Ok(Visit::Done(Step::Stopped(reason)));
        }
        if *ctx.interrupt.borrow() {
            return Ok(Visit::Done(Step::Interrupted));
        }
    }
}

/// A point's progress before this run's first visit: what `prior` (resume) measured.
fn first_visit(prior: &[Sample], context: u64, min_reps: u32) -> Carry {
    let (prog, steps) = prior_progress(prior, context, min_reps);
    // Cold TTFTs at this point without a cached-token count (the cache-hit rule's data).
    let unverified_ttft = prior
        .iter()
        .filter(|s| s.context_tokens == context && s.status == Status::Ok && s.phase == Phase::Cold)
        .filter(|s| !s.cache_verified)
        .filter_map(|s| s.ttft_ms)
        .collect();
    Carry {
        prog,
        steps,
        unverified_ttft,
        next_rep: 0,
        retakes: 0,
    }
}

/// A designed run's end: every length this session wrote a `point` line for is judged again
/// with every sample of the run (`Design::revise`), and a line whose interval no longer reads
/// the same is corrected by a later `point` line (the file's last line for a length is its
/// figure, as the report's), which the progress prints as a correction.
fn revise_at_end(ctx: &mut RunCtx<'_>, sweep: &Sweep<'_>) -> Result<(), RecordError> {
    let Some(book) = sweep.design.as_ref() else {
        return Ok(());
    };
    let mut written: Vec<(&usize, &PointRecord)> = book.lines.iter().collect();
    written.sort_by_key(|(&pi, _)| sweep.contexts[pi]);
    for (&pi, line) in written {
        let Some(earlier) = line.design.as_ref() else {
            continue;
        };
        let Some(d) = book
            .design
            .revise(&book.points, pi, line.stop_reason, earlier)
        else {
            continue;
        };
        let rec = PointRecord {
            ttft_ci_rel: d.ttft_half_width,
            decode_ci_rel: d.decode_half_width,
            design: Some(d),
            ..line.clone()
        };
        ctx.writer.append(&Line::Point(Box::new(rec.clone())))?;
        ctx.observer.point_done(&rec);
    }
    Ok(())
}

/// The designed sweep's view of every length, kept beside the loop's own progress.
struct Book {
    design: Design,
    points: Vec<PointState>,
    /// The `point` line this session wrote for each length (index into the contexts).
    lines: HashMap<usize, PointRecord>,
}

impl Book {
    /// The book of a `--design auto` run (`None` otherwise), every length's samples read
    /// from `prior` (resume): the design recomputes from the file.
    fn new(settings: &BenchSettings, contexts: &[u64], prior: &[Sample]) -> Option<Book> {
        let policy = settings.policy;
        policy.design?;
        let design = Design {
            target: policy.precision?,
            max_reps: policy.max_reps,
            point_budget_s: policy.point_budget_s,
            run_budget_s: policy.run_budget_s,
            extrapolate_to: settings.extrapolate_to,
            quantile: policy.quantile,
        };
        let points = contexts
            .iter()
            .map(|&c| {
                let (prog, _) = prior_progress(prior, c, crate::design::FLOOR);
                state(c, &prog)
            })
            .collect();
        Some(Book {
            design,
            points,
            lines: HashMap::new(),
        })
    }
}

/// A length's progress as the design sees it (its cost is set by [`decide`]).
fn state(context: u64, prog: &PointProgress) -> PointState {
    PointState {
        context,
        reps: prog.reps,
        ttft_ms: prog.ttft_ms.clone(),
        decode: prog.decode.clone(),
        step_ms: prog.step_ms.clone(),
        cost_s: None,
        spent_s: prog.server_s,
        beyond_floor_s: prog.beyond_min_s,
        settled: false,
    }
}

/// Whether point `pi` takes another repetition — the design's decision with `--design
/// auto`, else the policy's — and the predicted seconds left. `Err` holds the point's line.
fn decide(
    sweep: &mut Sweep<'_>,
    settings: &BenchSettings,
    pi: usize,
    prog: &PointProgress,
    model: &CostModel,
) -> (Result<(), PointRecord>, Option<f64>) {
    let elapsed = sweep.run_start.elapsed().as_secs_f64();
    let context = sweep.contexts[pi];
    let Some(book) = sweep.design.as_mut() else {
        let cost = model.request_s(context as f64, settings.output_tokens);
        let next = settings.policy.next(prog, elapsed, cost);
        let eta = remaining_s(model, sweep.contexts, pi, prog, settings);
        return (
            next.map_err(|reason| point_record(settings, context, prog, reason)),
            eta,
        );
    };
    book.points[pi] = state(context, prog);
    for p in &mut book.points {
        p.cost_s = model.request_s(p.context as f64, settings.output_tokens);
    }
    let (next, j) = book.design.next(&book.points, pi, elapsed);
    let eta = book.design.remaining_s(&book.points, pi);
    match next {
        Next::Measure(_) => (Ok(()), eta),
        Next::Stop(reason) => {
            book.points[pi].settled = true;
            let mut rec = point_record(settings, context, prog, reason);
            // The precision stated is the design's (its basis is on the record).
            let d = book.design.record(&book.points, pi, &j, reason);
            rec.ttft_ci_rel = d.ttft_half_width;
            rec.decode_ci_rel = d.decode_half_width;
            rec.design = Some(d);
            book.lines.insert(pi, rec.clone());
            (Err(rec), eta)
        }
    }
}

/// Decode at depth: `settings.decode_samples` warm samples of the cold sample's prompt,
/// cache reuse allowed on purpose; each recorded. Returns why the sweep must stop, if it
/// must. An interrupt ends the samples (the caller sees it).
async fn decode_at_depth(
    ctx: &mut RunCtx<'_>,
    mut req: GenRequest,
    (cold, prompt_index, body): (&Sample, Option<u32>, u64),
    tally: &mut Tally,
) -> Result<Option<String>, RecordError> {
    let settings = ctx.settings;
    let (context, rep) = (cold.context_tokens, cold.rep);
    req.cache_bypass = false;
    for _ in 0..settings.decode_samples {
        let Some(before) = protocol::before(ctx, (context, rep), false).await else {
            break;
        };
        let at = now();
        let Some(r) = send(ctx.backend, &req, ctx.interrupt).await else {
            break;
        };
        let sent = req.prompt.len() as u64;
        let mut w = make_warm_sample(&settings.target(context), context, rep, sent, at, r);
        (w.prompt_index, w.corpus_offset) = (prompt_index, Some(ctx.builder.offset(body)));
        // Same prompt, greedy: the same tokens, or the server is not deterministic at
        // this depth.
        if let (Some(c), Some(x)) = (&cold.output_fingerprint, &w.output_fingerprint) {
            if c != x {
                w.flags.push(Flag::Nondeterministic);
            }
        }
        protocol::after(settings, &mut w, before, 1).await;
        if let Some(stop) = record(ctx.writer, tally, ctx.observer, settings, &w)? {
            return Ok(Some(stop));
        }
    }
    Ok(None)
}

/// Which cold sample to measure: its point, repetition, corpus window and time limits.
struct ColdRequest {
    context: u64,
    rep: u32,
    window: u64,
    timeouts: Timeouts,
}

/// The needle checks of one point, when `--needle` asked for them.
async fn needles(
    ctx: &mut RunCtx<'_>,
    sweep: &mut Sweep<'_>,
    context: u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let (Some(n), Some(values)) = (&ctx.settings.needle, sweep.values.as_mut()) else {
        return Ok(Step::Go);
    };
    let question = match ctx.backend.tokenize(crate::needle::QUESTION).await {
        Ok(q) => Some(q),
        Err(e) => {
            ctx.observer.warn(&format!(
                "needle checks at {context}: cannot tokenize the question: {e}"
            ));
            None
        }
    };
    for (i, &depth) in n.depths.iter().enumerate() {
        let done = sweep.prior.iter().any(|s| {
            s.phase == Phase::Needle
                && s.status == Status::Ok
                && s.context_tokens == context
                && s.needle.as_ref().is_some_and(|x| x.depth_pct == depth)
        });
        if done {
            continue;
        }
        if *ctx.interrupt.borrow() {
            return Ok(Step::Interrupted);
        }
        // Drawn even when the check cannot run, so a seeded run's later values stay put.
        let value = values.next_value();
        let check = NeedleCheck {
            context,
            rep: i as u32,
            depth,
            nonce_tokens: n.nonce_tokens,
            question: question.as_deref(),
        };
        let Some(s) = needle_check(ctx, check, value, &mut sweep.window).await else {
            return Ok(Step::Interrupted);
        };
        if let Some(reason) = record(ctx.writer, tally, ctx.observer, ctx.settings, &s)? {
            return Ok(Step::Stopped(reason));
        }
    }
    Ok(Step::Go)
}

/// One needle check: where it goes and what it asks.
struct NeedleCheck<'q> {
    context: u64,
    /// The depth's index.
    rep: u32,
    depth: u32,
    nonce_tokens: usize,
    /// The question's tokens (`None`: the tokenizer failed, and the check is an error).
    question: Option<&'q [u32]>,
}

/// One needle check at one depth, cold like every measured prompt (fresh nonce, cache
/// switch and flush, cached tokens verified) and judged from the answer. `None` when the
/// user interrupted it.
async fn needle_check(
    ctx: &mut RunCtx<'_>,
    check: NeedleCheck<'_>,
    value: String,
    window: &mut u64,
) -> Option<Sample> {
    let NeedleCheck {
        context,
        rep,
        depth,
        nonce_tokens,
        question,
    } = check;
    let settings = ctx.settings;
    let mut target = settings.target(context);
    target.output_tokens = crate::needle::ANSWER_TOKENS;
    let base = ctx.builder.build(context, *window);
    *window += 1;
    let sent = base.len() as u64;
    let at = now();
    ctx.observer.sample_started(context, rep);
    let placed = match question {
        None => Err(ClientError::Unsupported {
            what: "needle question".to_owned(),
            hint: "the server's tokenizer failed".to_owned(),
        }),
        Some(q) => match ctx.backend.tokenize(&crate::needle::fact(&value)).await {
            Err(e) => Err(e),
            Ok(f) => crate::needle::place(&base, nonce_tokens, &f, q, depth)
                .map(|p| (p, f.len(), q.len()))
                .ok_or_else(|| ClientError::Unsupported {
                    what: format!("a needle check at {context} tokens"),
                    hint: "the prompt is too short to hold the fact and the question".to_owned(),
                }),
        },
    };
    let (placed, fact_len, q_len) = match placed {
        Ok(p) => p,
        Err(e) => {
            let mut s = make_sample(&target, context, rep, sent, at, Err(e));
            s.phase = Phase::Needle;
            s.needle = Some(needle_record(depth, value, (0, 0, 0), None, &s));
            return Some(s);
        }
    };
    let mut req = GenRequest {
        prompt: placed.prompt,
        prepared: None,
        max_tokens: crate::needle::ANSWER_TOKENS,
        cache_bypass: settings.cache_bypass,
        timeouts: settings.timeouts_with_prediction(context, None),
    };
    let fact_text = crate::needle::fact(&value);
    let parts = needle_fit::Parts {
        fact_text: &fact_text,
        question: question.unwrap_or_default(),
        fact_at: placed.fact_at,
        fact_len,
        filler: &base[nonce_tokens.min(base.len())..],
    };
    // The question whole at the end and the fact at its depth, verified before sending;
    // a prompt that cannot hold them is not sent as a test of the model.
    let fitted = tokio::select! {
        r = needle_fit::fit(ctx.backend, &mut req, &parts) => r,
        e = watch_server(ctx.backend) => Err(e.to_string()),
        _ = ctx.interrupt.wait_for(|v| *v) => return None,
    };
    let fact_at = match fitted {
        Ok(at) => at,
        Err(why) => {
            let e = ClientError::Unsupported {
                what: format!("a needle prompt of {context} tokens with the question whole at its end and the fact at {depth}%"),
                hint: format!("{why}; the check is left out of the verdicts"),
            };
            let mut s = make_sample(&target, context, rep, sent, at, Err(e));
            s.phase = Phase::Needle;
            let at_len = (placed.fact_at as u64, fact_len as u64, q_len as u64);
            let mut n = needle_record(depth, value, at_len, None, &s);
            n.verdict = ctxbench_schema::record::NeedleVerdict::Excluded;
            s.needle = Some(n);
            return Some(s);
        }
    };
    let before = protocol::before(ctx, (context, rep), true).await?;
    let r = send(ctx.backend, &req, ctx.interrupt).await?;
    let answer = r.as_ref().ok().map(|o| o.output.text.clone());
    let mut s = make_sample(&target, context, rep, sent, at, r);
    s.phase = Phase::Needle;
    protocol::after(settings, &mut s, before, 1).await;
    let at_len = (fact_at as u64, fact_len as u64, q_len as u64);
    s.needle = Some(needle_record(depth, value, at_len, answer, &s));
    Some(s)
}

/// The needle check's record: where the fact was, what came back and the verdict. Only an
/// answer seen is judged: a failed request is an error, never a fail.
fn needle_record(
    depth: u32,
    value: String,
    (fact_at, fact_tokens, question_tokens): (u64, u64, u64),
    answer: Option<String>,
    s: &Sample,
) -> ctxbench_schema::record::NeedleCheck {
    let verdict = match (&s.status, &answer) {
        // The server counted another length than the prompt was built for: the fact and
        // the question may not be where they were put, so the answer proves nothing.
        (Status::Ok, Some(_)) if s.length_ok == Some(false) => {
            ctxbench_schema::record::NeedleVerdict::Excluded
        }
        (Status::Ok, Some(a)) if a.is_empty() && s.output_fingerprint.is_none() => {
            ctxbench_schema::record::NeedleVerdict::Unseen
        }
        (Status::Ok, Some(a)) => crate::needle::check(a, &value),
        _ => ctxbench_schema::record::NeedleVerdict::Error,
    };
    ctxbench_schema::record::NeedleCheck {
        depth_pct: depth,
        value,
        fact_at,
        fact_tokens,
        question_tokens,
        answer,
        verdict,
    }
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
    if ctxbench_stats::stats::cachehit::is_suspect(t, same, shorter) {
        sample
            .flags
            .push(ctxbench_schema::record::Flag::SuspectedCacheHit);
    }
}

/// One cold measurement (streamed, or the two requests of the two-point method): its
/// prompt prepared first (see [`Backend::prepare`]), then the protocol's steps around the
/// measured request. `None` when interrupted. The request is handed back for
/// decode-at-depth samples.
async fn measure_cold(
    ctx: &mut RunCtx<'_>,
    cold: ColdRequest,
) -> Option<(Sample, Option<GenRequest>)> {
    let ColdRequest {
        context,
        rep,
        window,
        timeouts,
    } = cold;
    let settings = ctx.settings;
    let at = now();
    let prompt = ctx.builder.build(context, window);
    let sent = prompt.len() as u64;
    let req = |prompt, max_tokens| GenRequest {
        prompt,
        prepared: None,
        max_tokens,
        cache_bypass: settings.cache_bypass,
        timeouts,
    };
    let Some(ab) = settings.two_point else {
        let mut req = req(prompt, settings.output_tokens);
        // Prepared before the scrape, the flush and t0: the prompt's tokenizer
        // round-trips or calibration requests are in none of them.
        let prepared = tokio::select! {
            r = ctx.backend.prepare(&mut req) => r,
            e = watch_server(ctx.backend) => Err(e),
            _ = ctx.interrupt.wait_for(|v| *v) => return None,
        };
        if let Err(e) = prepared {
            let s = make_sample(&settings.target(context), context, rep, sent, at, Err(e));
            return Some((s, None));
        }
        let before = protocol::before(ctx, (context, rep), true).await?;
        // Stamped again once the idle wait and the flush are over: `at` is when it was sent.
        let at = now();
        let result = send(ctx.backend, &req, ctx.interrupt).await?;
        let mut s = make_sample(&settings.target(context), context, rep, sent, at, result);
        protocol::after(settings, &mut s, before, 1).await;
        return Some((s, Some(req)));
    };
    // A and B each get their own nonce: neither can reuse the other's prefill.
    let (mut a, mut b) = (
        req(prompt, ab.0),
        req(ctx.builder.build(context, window + 1), ab.1),
    );
    // Both prepared before A is sent: no tokenizer or calibration traffic between or
    // during the two measurements, nor in the metrics scraped around them.
    let backend = ctx.backend;
    let prepared = tokio::select! {
        r = async { backend.prepare(&mut a).await?; backend.prepare(&mut b).await } => r,
        e = watch_server(backend) => Err(e),
        _ = ctx.interrupt.wait_for(|v| *v) => return None,
    };
    let two_point =
        |pair| make_two_point_sample(&settings.target(context), context, rep, sent, at, pair);
    if let Err(e) = prepared {
        let not_sent = ClientError::Unsupported {
            what: "request B".to_owned(),
            hint: "not sent: the prompts could not be prepared".to_owned(),
        };
        return Some((
            two_point(TwoPointPair {
                tokens: ab,
                a: Err(e),
                b: Err(not_sent),
            }),
            None,
        ));
    }
    let before = protocol::before(ctx, (context, rep), true).await?;
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
            let mut s = two_point(TwoPointPair { tokens: ab, a, b });
            protocol::after(settings, &mut s, before, 2).await;
            Some((s, None))
        }
        e = watch_server(backend) => {
            let mut s = two_point(TwoPointPair { tokens: ab, a: Err(e), b: Err(gone_error(backend)) });
            note_flush(&mut s, before.into_flushed());
            Some((s, None))
        }
        _ = ctx.interrupt.wait_for(|v| *v) => None,
    }
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
    use crate::adaptive::RepPolicy;
    use std::time::Duration;

    /// Settings for unit tests: one fixed repetition, 33 output tokens.
    pub(crate) fn settings() -> BenchSettings {
        BenchSettings {
            warmup_s_per_token: None,
            nonce_end: None,
            prompts: None,
            extrapolate_to: None,
            run_id: "r".into(),
            output_tokens: 33,
            policy: RepPolicy {
                precision: None,
                min_reps: 1,
                max_reps: 1,
                point_budget_s: None,
                run_budget_s: None,
                design: None,
                quantile: None,
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
            fleet: None,
            fleet_flush: false,
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
pub mod ctx;
mod needle_fit;
pub mod protocol;
pub mod retention;
pub mod tiers;
pub mod warm_steps;
pub mod wave;
