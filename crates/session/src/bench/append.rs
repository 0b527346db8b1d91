//! `--mode append`: the next turn of a long conversation. For each prefix length L (the
//! context ladder), each appended length N and each repetition: the cold prefill of L + N
//! (a fresh nonce, the cache switch and flush as in the cold sweep: the column beside),
//! then a prime that puts a new prefix of L tokens in the cache (its own fresh nonce at
//! token 0, so nothing before it shares it), then that prefix + N new tokens with reuse
//! allowed. The append's cached count must reach L (within the family's allowance,
//! [`crate::warm`]); a miss is flagged and kept out of the summaries.

use std::collections::HashMap;

use super::{
    finish_metrics, flush, measure_cold, note_flush, now, record, scrape, watch_server,
    ColdRequest, RunCtx, Tally,
};
use crate::client::{Backend, GenOutcome, GenRequest, Generated, Timeouts};
use crate::error::{ClientError, RecordError};
use crate::record::{Phase, Sample};
use crate::sample::make_sample;
use crate::warm::{self, WarmConfig, WarmInfo};

/// What the warm modes need beyond the cold loop's context.
pub struct WarmSettings<'a> {
    /// The user's choice.
    pub config: &'a WarmConfig,
    /// The server family's allowance for a cached prefix of L tokens, with its rule.
    pub allowance: &'a (dyn Fn(u64) -> (u64, &'static str) + Sync),
    /// The server's maximum context (per slot), when known.
    pub max_context: Option<u64>,
    /// `--concurrency`: sessions at once (`append` only; `[1]`: one session).
    pub concurrency: &'a [u32],
    /// The protocol spoken (`tiers` reaches each tier its own way per server).
    pub backend: crate::client::BackendKind,
    /// The server's KV pool in tokens, when it says (`tiers` on SGLang: the filler that
    /// evicts a prefix from device memory).
    pub kv_pool_tokens: Option<u64>,
}

/// Tokens the prime generates: it only has to fill the cache.
pub const PRIME_TOKENS: u32 = 2;

/// Sends one request, stopping for an interrupted run (`None`) or a server gone away.
pub(crate) async fn send(
    backend: &dyn Backend,
    req: &GenRequest,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<Result<GenOutcome, ClientError>> {
    tokio::select! {
        r = backend.generate(req) => Some(r),
        e = watch_server(backend) => Some(Err(e)),
        _ = interrupt.wait_for(|v| *v) => None,
    }
}

/// A request for `prompt` generating `max_tokens`, reuse allowed unless `bypass`.
pub(crate) fn request(
    prompt: Vec<u32>,
    max_tokens: u32,
    bypass: bool,
    timeouts: Timeouts,
) -> GenRequest {
    GenRequest {
        prompt,
        prepared: None,
        max_tokens,
        cache_bypass: bypass,
        timeouts,
    }
}

/// Whether L + N plus the output fits the server's context.
fn fits(max_context: Option<u64>, total: u64, output: u32) -> bool {
    max_context.is_none_or(|m| total + u64::from(output) <= m)
}

/// How one repetition of a warm mode's cell ended.
pub(crate) enum Step {
    Go,
    Interrupted,
    Stopped(String),
}

impl Step {
    /// Whether the run ends here; an ending is noted on `tally`.
    pub(crate) fn ends(self, tally: &mut Tally) -> bool {
        match self {
            Step::Go => false,
            Step::Interrupted => {
                tally.interrupted = true;
                true
            }
            Step::Stopped(reason) => {
                tally.stopped = Some(reason);
                true
            }
        }
    }
}

/// Measures the append grid L × N; every sample is written as it is measured.
pub async fn run(
    mut ctx: RunCtx<'_>,
    contexts: &[u64],
    warm: &WarmSettings<'_>,
) -> Result<Tally, RecordError> {
    let settings = ctx.settings;
    let mut tally = Tally::default();
    let reps = settings.policy.min_reps.max(1);
    let levels: &[u32] = match warm.concurrency {
        [] => &[1],
        l => l,
    };
    let cells: Vec<(u64, u64, u32)> = contexts
        .iter()
        .flat_map(|&l| warm.config.appends.iter().map(move |&n| (l, n)))
        .filter(|&(l, n)| fits(warm.max_context, l + n, settings.output_tokens))
        .flat_map(|(l, n)| levels.iter().map(move |&c| (l, n, c)))
        .collect();
    let skipped = contexts.len() * warm.config.appends.len() * levels.len() - cells.len();
    if skipped > 0 {
        ctx.observer.warn(&format!(
            "{skipped} cell(s) of L × N left out: L + N + {} output tokens exceeds the server's context of {} tokens",
            settings.output_tokens,
            warm.max_context.unwrap_or(0)
        ));
    }
    let planned: usize = cells.iter().map(|&(_, _, c)| 3 * c as usize).sum();
    ctx.observer.start(planned * reps as usize, 0);
    let mut window = 0u64;
    // Cold repetitions (waves) are numbered per cold cell (L + N, c): two cells of the same
    // total share its cold column.
    let mut cold_reps: HashMap<(u64, u32), u32> = HashMap::new();
    'cells: for &(l, n, c) in &cells {
        for rep in 0..reps {
            let cold_rep = cold_reps.entry((l + n, c)).or_insert(0);
            let at = (l, n, rep);
            let step = match c {
                1 => cell(&mut ctx, warm, at, *cold_rep, &mut window, &mut tally).await?,
                _ => {
                    let at = (l, n, c, *cold_rep);
                    super::append_wave::cell(&mut ctx, warm, at, &mut window, &mut tally).await?
                }
            };
            *cold_rep += 1;
            if step.ends(&mut tally) {
                break 'cells;
            }
        }
    }
    ctx.observer.finish();
    Ok(tally)
}

/// One repetition of one cell: the cold L + N, the prime of L, the append of N.
async fn cell(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    (l, n, rep): (u64, u64, u32),
    cold_rep: u32,
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let (backend, settings) = (ctx.backend, ctx.settings);
    let total = l + n;
    // 1. The cold prefill of L + N, exactly as the cold sweep measures it.
    if let step @ (Step::Interrupted | Step::Stopped(_)) =
        cold(ctx, total, cold_rep, window, tally).await?
    {
        return Ok(step);
    }
    // 2. The prime: a new prefix of L tokens (fresh nonce at token 0), cold, into the cache.
    let full = ctx.builder.build(total, *window);
    *window += 1;
    let flushed = flush(backend, settings).await;
    let Some(prime) = prime(ctx, &full, (l, n, rep), flushed).await else {
        return Ok(Step::Interrupted);
    };
    let primed = prime.status == crate::record::Status::Ok;
    let prefix = prime.prompt_tokens.unwrap_or(l);
    if let Some(r) = record(ctx.writer, tally, ctx.observer, settings, &prime)? {
        return Ok(Step::Stopped(r));
    }
    if !primed {
        return Ok(Step::Go);
    }
    // 3. The append: the same prefix and N new tokens, reuse allowed (or, as the negative
    // control, refused).
    let req = request(
        full,
        settings.output_tokens,
        warm.config.negative_control,
        settings.timeouts_for(total),
    );
    ctx.observer.sample_started(total, rep);
    let s = measure_warm(
        ctx,
        warm,
        &req,
        (total, rep),
        WarmInfo {
            prefix_tokens: prefix,
            new_tokens: n,
            expected_cached: prefix,
            bypass: warm.config.negative_control,
            ..Default::default()
        },
        Phase::Append,
    )
    .await;
    let Some((s, _)) = s else {
        return Ok(Step::Interrupted);
    };
    if let Some(r) = record(ctx.writer, tally, ctx.observer, settings, &s)? {
        return Ok(Step::Stopped(r));
    }
    Ok(Step::Go)
}

/// The cold prefill of `total` as the cold sweep measures it (its own window), recorded:
/// the cold column beside a warm sample.
pub(crate) async fn cold(
    ctx: &mut RunCtx<'_>,
    total: u64,
    rep: u32,
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let settings = ctx.settings;
    ctx.observer.sample_started(total, rep);
    let req = ColdRequest {
        context: total,
        rep,
        window: *window,
        timeouts: settings.timeouts_for(total),
    };
    *window += 1;
    let Some((s, _)) = measure_cold(
        ctx.backend,
        ctx.builder,
        settings,
        (&mut *ctx.observer, &mut *ctx.interrupt),
        req,
    )
    .await
    else {
        return Ok(Step::Interrupted);
    };
    Ok(
        match record(ctx.writer, tally, ctx.observer, settings, &s)? {
            Some(r) => Step::Stopped(r),
            None => Step::Go,
        },
    )
}

/// Sends the prime of a prefix of L tokens (`full` less its last `n`), after a flush
/// whose outcome is `flushed`: its sample, or `None` when interrupted.
pub(crate) async fn prime(
    ctx: &mut RunCtx<'_>,
    full: &[u32],
    (l, n, rep): (u64, u64, u32),
    flushed: Option<Result<String, ClientError>>,
) -> Option<Sample> {
    let settings = ctx.settings;
    let cut = full.len().saturating_sub(n as usize);
    let req = request(
        full[..cut].to_vec(),
        PRIME_TOKENS,
        false,
        settings.timeouts_for(l),
    );
    ctx.observer.sample_started(l, rep);
    let at = now();
    let r = send(ctx.backend, &req, ctx.interrupt).await?;
    let mut target = settings.target(l);
    target.output_tokens = PRIME_TOKENS;
    let mut prime = make_sample(&target, l, rep, cut as u64, at, r);
    prime.phase = Phase::Prime;
    note_flush(&mut prime, flushed);
    Some(prime)
}

/// Sends a warm request (no flush: the cache is the point) with the metrics scraped around
/// it, and judges its reuse against `info` (the allowance filled in from the family).
/// Returns the sample and what was generated.
pub(crate) async fn measure_warm(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    req: &GenRequest,
    (context, rep): (u64, u32),
    mut info: WarmInfo,
    phase: Phase,
) -> Option<(Sample, Option<Generated>)> {
    let (backend, settings) = (ctx.backend, ctx.settings);
    // The same idle check as a cold sample's: another client's request between the prime
    // and this one would both slow it and may evict the prefix (then it is a flagged miss).
    let waited = tokio::select! {
        w = crate::bench::guard::before_sample(settings.idle.as_ref(), ctx.observer, context, rep) => w,
        _ = ctx.interrupt.wait_for(|v| *v) => return None,
    };
    let before = scrape(settings).await;
    let at = now();
    let r = send(backend, req, ctx.interrupt).await?;
    let generated = r.as_ref().ok().map(|o| o.output.clone());
    let mut s = make_sample(
        &settings.target(context),
        context,
        rep,
        req.prompt.len() as u64,
        at,
        r,
    );
    s.phase = phase;
    let (allowance, rule) = (warm.allowance)(info.expected_cached);
    info.allowance = allowance;
    info.allowance_rule = rule.to_owned();
    s.warm = Some(info);
    warm::judge(&mut s);
    finish_metrics(settings, Some(&mut s), before.as_ref()).await;
    crate::bench::guard::after_sample(settings.idle.as_ref(), &mut s, waited, 1).await;
    Some((s, generated))
}

#[cfg(test)]
mod tests {
    use super::fits;

    #[test]
    fn a_cell_fits_only_with_its_output_inside_the_context() {
        assert!(fits(Some(4096), 4000, 96));
        assert!(!fits(Some(4096), 4000, 97));
        assert!(fits(None, u64::MAX / 2, 32));
    }
}
