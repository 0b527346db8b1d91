//! `--mode append --concurrency c`: c sessions at once, each with its own prefix. One
//! repetition of a cell (L, N, c) is: a cold wave of c prompts of L + N (the column beside,
//! measured as the cold grid measures it), then c primes one after another (each a new
//! prefix of L tokens with its own nonce at token 0, so a server with slots gives each its
//! own slot and nothing is shared between sessions), then the c appends, each its prefix +
//! N new tokens, released together from one t0. Every append proves its own reuse from its
//! cached count (a session whose prefix was evicted by another is a flagged miss); the wave
//! is one measurement for the idle check, as a cold wave is.

use super::protocol::{before_sample, flush, record, scrape};
use super::warm_steps::{prime, request, WarmSettings};
use super::wave::{check_wave_idle, measure_wave, prepare_wave, release, wave_deltas, WaveRequest};
use super::{RunCtx, Step, Tally};
use ctxbench_schema::error::RecordError;
use ctxbench_schema::record::{Phase, Sample, Status};
use ctxbench_schema::warm::{self, WarmInfo};

/// One repetition of the cell (L, N, c): the cold wave, the c primes, the append wave.
/// `window` is the next free prompt window (each prompt takes its own nonce).
pub(super) async fn cell(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    (l, n, c, rep): (u64, u64, u32, u32),
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let (backend, settings) = (ctx.backend, ctx.settings);
    let total = l + n;
    // The last request of a wave may wait for all c requests' work (a CPU server runs them
    // in series), so the timeout is that of c × (L + N).
    let timeouts = settings.timeouts_for(total.saturating_mul(u64::from(c)));
    // 1. The cold column: c cold prompts of L + N together, as the cold grid measures them.
    ctx.observer.sample_started(total, rep);
    let Some(waited) = wait_idle(ctx, total, rep).await else {
        return Ok(Step::Interrupted);
    };
    let cold = WaveRequest {
        context: total,
        c,
        wave: rep,
        nonce: *window,
        timeouts,
    };
    *window += u64::from(c);
    let Some(cold) =
        measure_wave(backend, ctx.builder, settings, ctx.interrupt, cold, waited).await
    else {
        return Ok(Step::Interrupted);
    };
    if let Some(step) = record_all(ctx, tally, &cold)? {
        return Ok(step);
    }
    // 2. The primes, one after another after one flush: c new prefixes into the cache.
    let fulls: Vec<Vec<u32>> = (0..c)
        .map(|i| ctx.builder.build(total, *window + u64::from(i)))
        .collect();
    *window += u64::from(c);
    let mut flushed = flush(backend, settings).await;
    let mut prefixes = Vec::with_capacity(c as usize);
    for full in &fulls {
        let Some(mut prime) = prime(ctx, full, (l, n, rep), flushed.take()).await else {
            return Ok(Step::Interrupted);
        };
        prime.concurrency = Some(c);
        prime.wave = Some(rep);
        let primed = prime.status == Status::Ok;
        prefixes.push(prime.prompt_tokens.unwrap_or(l));
        if let Some(r) = record(ctx.writer, tally, ctx.observer, settings, &prime)? {
            return Ok(Step::Stopped(r));
        }
        if !primed {
            // A session without its prefix has nothing to append to: the cell's repetition
            // ends here (its cold wave and primes are recorded).
            return Ok(Step::Go);
        }
    }
    // 3. The appends: each session's prefix + N new tokens, released together.
    let mut reqs: Vec<_> = fulls
        .into_iter()
        .map(|full| {
            request(
                full,
                settings.output_tokens,
                warm.config.negative_control,
                timeouts,
            )
        })
        .collect();
    ctx.observer.sample_started(total, rep);
    let Some(waited) = wait_idle(ctx, total, rep).await else {
        return Ok(Step::Interrupted);
    };
    let Some(prepared) = prepare_wave(backend, ctx.interrupt, &mut reqs).await else {
        return Ok(Step::Interrupted);
    };
    let before = scrape(settings).await;
    let Some(mut appends) = release(
        backend,
        settings,
        ctx.interrupt,
        (&reqs, prepared),
        (total, rep),
    )
    .await
    else {
        return Ok(Step::Interrupted);
    };
    for (s, &prefix) in appends.iter_mut().zip(&prefixes) {
        s.phase = Phase::Append;
        let (allowance, rule) = (warm.allowance)(prefix);
        s.warm = Some(WarmInfo {
            prefix_tokens: prefix,
            new_tokens: n,
            expected_cached: prefix,
            allowance,
            allowance_rule: rule.to_owned(),
            bypass: warm.config.negative_control,
            ..Default::default()
        });
        warm::judge(s);
    }
    let deltas = wave_deltas(settings, &mut appends, before).await;
    check_wave_idle(settings, &mut appends, waited, deltas.as_ref()).await;
    match record_all(ctx, tally, &appends)? {
        Some(step) => Ok(step),
        None => Ok(Step::Go),
    }
}

/// Waits for an idle server before a wave (`None`: interrupted; `Some(None)`: no check).
async fn wait_idle(
    ctx: &mut RunCtx<'_>,
    context: u64,
    rep: u32,
) -> Option<Option<crate::idle::Waited>> {
    tokio::select! {
        w = before_sample(ctx.settings.idle.as_ref(), &mut *ctx.observer, context, rep) => Some(w),
        _ = ctx.interrupt.wait_for(|v| *v) => None,
    }
}

/// Records a wave's samples; the first reason to stop ends the run after all are written.
fn record_all(
    ctx: &mut RunCtx<'_>,
    tally: &mut Tally,
    samples: &[Sample],
) -> Result<Option<Step>, RecordError> {
    let mut stop = None;
    for s in samples {
        if let Some(r) = record(ctx.writer, tally, ctx.observer, ctx.settings, s)? {
            stop.get_or_insert(r);
        }
    }
    Ok(stop.map(Step::Stopped))
}
