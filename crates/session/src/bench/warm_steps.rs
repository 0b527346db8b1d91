//! The warm modes' shared steps (`append`, its waves, `tiers`): what they are given, the
//! cold column beside a warm cell, the prime that fills the cache and the warm measurement
//! judged against the family's allowance. Each goes through the measuring protocol
//! (`bench::protocol`).

use super::protocol::{self, note_flush, now, record, send};
use super::{measure_cold, ColdRequest, RunCtx, Step, Tally};
use crate::sample::make_sample;
use ctxbench_client::{GenRequest, Generated, Timeouts};
use ctxbench_schema::error::{ClientError, RecordError};
use ctxbench_schema::record::{Phase, Sample};
use ctxbench_schema::warm::{self, WarmConfig, WarmInfo};

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
    pub backend: ctxbench_client::BackendKind,
    /// The server's KV pool in tokens, when it says (`tiers` on SGLang: the filler that
    /// evicts a prefix from device memory).
    pub kv_pool_tokens: Option<u64>,
    /// llama-server's slots, when it says (`retention`: how many prefixes live at once).
    pub slots: Option<u64>,
}

impl WarmSettings<'_> {
    /// The appended N (the first of `--appends`, 128 when none) and the Ls of `contexts`
    /// whose L + N + the answer fit the server's context (every L when it is not known).
    pub(crate) fn lengths(&self, contexts: &[u64], output_tokens: u32) -> (u64, Vec<u64>) {
        let n = self.config.appends.first().copied().unwrap_or(128);
        let ls = contexts
            .iter()
            .copied()
            .filter(|&l| {
                self.max_context
                    .is_none_or(|m| l + n + u64::from(output_tokens) <= m)
            })
            .collect();
        (n, ls)
    }
}

/// Tokens the prime generates: it only has to fill the cache.
pub const PRIME_TOKENS: u32 = 2;

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
    let Some((s, _)) = measure_cold(ctx, req).await else {
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
    let settings = ctx.settings;
    // The same idle check as a cold sample's: another client's request between the prime
    // and this one would both slow it and may evict the prefix (then it is a flagged miss).
    // No flush: the cache is the point.
    let before = protocol::before(ctx, (context, rep), false).await?;
    let at = now();
    let r = send(ctx.backend, req, ctx.interrupt).await?;
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
    protocol::after(settings, &mut s, before, 1).await;
    Some((s, generated))
}
