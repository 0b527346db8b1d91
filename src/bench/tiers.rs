//! `--mode tiers` (llama-server, one slot): at each prefix length L, the TTFT of L + N new
//! tokens served from each cache tier, each sample's tier proven from the server's answers,
//! never from the order of requests:
//! - cold: the cold sweep's request (fresh nonce, `cache_prompt: false`, flush), cached 0;
//! - live: a prime of L then the append; the prime was the only slot's last request;
//! - ram: a prime of L, then another prompt that takes the only slot (`GET /slots` shows it
//!   holding that other prompt), then the append: a cached count of L can only come from the
//!   host-memory prompt cache (`--cache-ram`); with it off, the sample is a `cache_miss`;
//! - disk: a prime of L, the slot saved (`n_saved`), erased (`n_erased`) and restored
//!   (`n_restored`, timed by the client and included in the tier's TTFT), then the append.

use super::append::{measure_warm, request, send, Step, WarmSettings, PRIME_TOKENS};
use super::{flush, measure_cold, note_flush, now, record, ColdRequest, RunCtx, Tally};
use crate::client::slots;
use crate::error::RecordError;
use crate::record::{Phase, Sample, Status};
use crate::sample::make_sample;
use crate::warm::{Tier, WarmInfo};

/// Tokens of the prompt that displaces the prefix from the slot.
const DISPLACE_TOKENS: u64 = 64;

/// Measures every tier at every L.
pub async fn run(
    mut ctx: RunCtx<'_>,
    contexts: &[u64],
    warm: &WarmSettings<'_>,
) -> Result<Tally, RecordError> {
    let settings = ctx.settings;
    let mut tally = Tally::default();
    let reps = settings.policy.min_reps.max(1);
    let n = warm.config.appends.first().copied().unwrap_or(128);
    let ls: Vec<u64> = contexts
        .iter()
        .copied()
        .filter(|&l| {
            warm.max_context
                .is_none_or(|m| l + n + u64::from(settings.output_tokens) <= m)
        })
        .collect();
    ctx.observer.start(ls.len() * reps as usize * 4, 0);
    let mut disk = true;
    let mut window = 0u64;
    'points: for &l in &ls {
        for rep in 0..reps {
            for tier in [Tier::Cold, Tier::Live, Tier::Ram, Tier::Disk] {
                if tier == Tier::Disk && !disk {
                    continue;
                }
                let step = one(
                    &mut ctx,
                    warm,
                    tier,
                    (l, n, rep),
                    &mut window,
                    &mut tally,
                    &mut disk,
                )
                .await?;
                if step.ends(&mut tally) {
                    break 'points;
                }
            }
        }
    }
    ctx.observer.finish();
    Ok(tally)
}

/// Primes a new prefix of `cut` tokens of `full` (cold, flushed first) and records it.
async fn prime(
    ctx: &mut RunCtx<'_>,
    full: &[u32],
    cut: usize,
    (l, rep): (u64, u32),
    tally: &mut Tally,
) -> Result<Result<Sample, Step>, RecordError> {
    let settings = ctx.settings;
    let req = request(
        full[..cut].to_vec(),
        PRIME_TOKENS,
        false,
        settings.timeouts_for(l),
    );
    let flushed = flush(ctx.backend, settings).await;
    let at = now();
    let Some(r) = send(ctx.backend, &req, ctx.interrupt).await else {
        return Ok(Err(Step::Interrupted));
    };
    let mut target = settings.target(l);
    target.output_tokens = PRIME_TOKENS;
    let mut s = make_sample(&target, l, rep, cut as u64, at, r);
    s.phase = Phase::Prime;
    note_flush(&mut s, flushed);
    if let Some(r) = record(ctx.writer, tally, ctx.observer, settings, &s)? {
        return Ok(Err(Step::Stopped(r)));
    }
    Ok(Ok(s))
}

/// One tier's sample at L.
async fn one(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    tier: Tier,
    (l, n, rep): (u64, u64, u32),
    window: &mut u64,
    tally: &mut Tally,
    disk: &mut bool,
) -> Result<Step, RecordError> {
    let (backend, settings) = (ctx.backend, ctx.settings);
    let total = l + n;
    ctx.observer.sample_started(total, rep);
    if tier == Tier::Cold {
        let cold = ColdRequest {
            context: total,
            rep,
            window: *window,
            timeouts: settings.timeouts_for(total),
        };
        *window += 1;
        let Some((s, _)) = measure_cold(
            backend,
            ctx.builder,
            settings,
            (&mut *ctx.observer, &mut *ctx.interrupt),
            cold,
        )
        .await
        else {
            return Ok(Step::Interrupted);
        };
        return Ok(
            match record(ctx.writer, tally, ctx.observer, settings, &s)? {
                Some(r) => Step::Stopped(r),
                None => Step::Go,
            },
        );
    }
    let full = ctx.builder.build(total, *window);
    *window += 1;
    let cut = full.len().saturating_sub(n as usize);
    let p = match prime(ctx, &full, cut, (l, rep), tally).await? {
        Ok(p) => p,
        Err(step) => return Ok(step),
    };
    if p.status != Status::Ok {
        return Ok(Step::Go);
    }
    let prefix = p.prompt_tokens.unwrap_or(l);
    let http = backend.http();
    let (evidence, restore_ms) = match tier {
        Tier::Live => (
            format!(
                "the prime ({} tokens computed, cache_n {}) was the only slot's last request",
                p.server.as_ref().and_then(|t| t.prompt_n).unwrap_or(0),
                p.cached_tokens.unwrap_or(0)
            ),
            None,
        ),
        Tier::Ram => {
            // Another prompt takes the only slot: the prefix leaves the live cache.
            let other = ctx.builder.build(DISPLACE_TOKENS, *window);
            *window += 1;
            let req = request(
                other,
                PRIME_TOKENS,
                false,
                settings.timeouts_for(DISPLACE_TOKENS),
            );
            let Some(r) = send(backend, &req, ctx.interrupt).await else {
                return Ok(Step::Interrupted);
            };
            if let Err(e) = r {
                ctx.observer
                    .warn(&format!("tiers at {l}: the displacing request failed: {e}"));
                return Ok(Step::Go);
            }
            let held = slots::state(http)
                .await
                .ok()
                .and_then(|s| s.into_iter().next());
            match held {
                Some(s) if s.n_prompt_tokens.is_some_and(|t| t < prefix) => (
                    format!(
                        "before it, GET /slots: the only slot held another prompt of {} tokens (task {}); a reuse of the prefix can only come from the host-memory prompt cache",
                        s.n_prompt_tokens.unwrap_or(0),
                        s.id_task.map_or("?".to_owned(), |t| t.to_string())
                    ),
                    None,
                ),
                other => {
                    ctx.observer.warn(&format!(
                        "tiers at {l}: GET /slots does not show the slot displaced ({other:?}); the ram sample is not taken"
                    ));
                    return Ok(Step::Go);
                }
            }
        }
        Tier::Disk => {
            let file = format!("ctxbench-{}-{l}-{rep}.bin", settings.run_id);
            let saved = match slots::save(http, 0, &file).await {
                Ok(s) => s,
                Err(e) => {
                    ctx.observer.warn(&format!(
                        "tiers: no disk tier (slot save/restore): {e}; measured: cold, live, ram"
                    ));
                    *disk = false;
                    return Ok(Step::Go);
                }
            };
            let erased = crate::client::llamacpp::erase_slots(http, 1).await;
            let restored = slots::restore(http, 0, &file).await;
            match (erased, restored) {
                (Ok(e), Ok(r)) => (
                    format!(
                        "slot saved ({} tokens), erased ({e}), restored ({} tokens; server {} ms)",
                        saved.tokens,
                        r.tokens,
                        r.server_ms.map_or("?".to_owned(), |m| format!("{m:.1}"))
                    ),
                    Some(r.client_ms),
                ),
                (e, r) => {
                    ctx.observer.warn(&format!(
                        "tiers at {l}: the slot could not be erased and restored ({:?}, {:?}); the disk sample is not taken",
                        e.err(),
                        r.err()
                    ));
                    return Ok(Step::Go);
                }
            }
        }
        // Measured above, by the cold sweep's own request.
        Tier::Cold => return Ok(Step::Go),
    };
    let req = request(
        full,
        settings.output_tokens,
        false,
        settings.timeouts_for(total),
    );
    let info = WarmInfo {
        prefix_tokens: prefix,
        new_tokens: n,
        expected_cached: prefix,
        tier: Some(tier),
        evidence: Some(evidence),
        restore_ms,
        ..Default::default()
    };
    let Some((s, _)) = measure_warm(ctx, warm, &req, (total, rep), info, Phase::Tier).await else {
        return Ok(Step::Interrupted);
    };
    Ok(
        match record(ctx.writer, tally, ctx.observer, settings, &s)? {
            Some(r) => Step::Stopped(r),
            None => Step::Go,
        },
    )
}
