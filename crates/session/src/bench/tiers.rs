//! `--mode tiers` (llama-server with one slot, or SGLang's native `/generate`): at each prefix
//! length L, the TTFT of L + N new tokens served from each cache tier, each sample's tier
//! proven from the server's answers, never from the order of requests:
//! - cold: the cold sweep's request (fresh nonce, cache switch, flush), cached 0;
//! - live: a prime of L then the append; the prime was the server's last request;
//! - ram (host memory): a prime of L, then the prefix is pushed out of the live cache, then
//!   the append. llama.cpp: another prompt takes the only slot (`GET /slots` shows it holding
//!   that prompt), so a cached count of L can only come from the host-memory prompt cache
//!   (`--cache-ram`). SGLang: new prompts of as many tokens as the device KV pool holds
//!   evict it from device memory, and the append's `cached_tokens_details` says how many
//!   cached tokens HiCache loaded back from host memory: the tier is what that split says
//!   (host > 0: ram; all on the device: live, the filler did not evict it). Without a host
//!   tier (`--cache-ram 0`, SGLang without `--enable-hierarchical-cache`) the sample is a
//!   `cache_miss`;
//! - disk (llama.cpp): a prime of L, the slot saved (`n_saved`), erased (`n_erased`) and
//!   restored (`n_restored`, timed by the client and included in the tier's TTFT), then the
//!   append.

use super::protocol::{flush, record, send};
use super::warm_steps::{measure_warm, request, WarmSettings, PRIME_TOKENS};
use super::{RunCtx, Step, Tally};
use ctxbench_client::{slots, BackendKind};
use ctxbench_schema::error::RecordError;
use ctxbench_schema::record::{Flag, Phase, Sample, Status};
use ctxbench_schema::warm::{Tier, WarmInfo};

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
    let (n, ls) = warm.lengths(contexts, settings.output_tokens);
    let sglang = warm.backend == BackendKind::Sglang;
    let mut ladder = vec![Tier::Cold, Tier::Live];
    match (sglang, warm.kv_pool_tokens) {
        (false, _) => ladder.extend([Tier::Ram, Tier::Disk]),
        (true, Some(_)) => ladder.push(Tier::Ram),
        (true, None) => ctx.observer.warn(
            "tiers: SGLang did not report its KV pool (max_total_num_tokens in /server_info), so the prefix cannot be evicted from device memory on purpose: no host-memory tier; measured: cold, live",
        ),
    }
    ctx.observer
        .start(ls.len() * reps as usize * ladder.len(), 0);
    let mut disk = !sglang;
    let mut window = 0u64;
    'points: for &l in &ls {
        for rep in 0..reps {
            for &tier in &ladder {
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

/// Primes a new prefix of L tokens (`full` less its last `n`; cold, flushed first) and
/// records it.
async fn prime(
    ctx: &mut RunCtx<'_>,
    full: &[u32],
    (l, n, rep): (u64, u64, u32),
    tally: &mut Tally,
) -> Result<Result<Sample, Step>, RecordError> {
    let flushed = flush(ctx.backend, ctx.settings).await;
    let Some(s) = super::warm_steps::prime(ctx, full, (l, n, rep), flushed).await else {
        return Ok(Err(Step::Interrupted));
    };
    if let Some(r) = record(ctx.writer, tally, ctx.observer, ctx.settings, &s)? {
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
    let settings = ctx.settings;
    let total = l + n;
    if tier == Tier::Cold {
        return super::warm_steps::cold(ctx, total, rep, window, tally).await;
    }
    ctx.observer.sample_started(total, rep);
    let full = ctx.builder.build(total, *window);
    *window += 1;
    let p = match prime(ctx, &full, (l, n, rep), tally).await? {
        Ok(p) => p,
        Err(step) => return Ok(step),
    };
    if p.status != Status::Ok {
        return Ok(Step::Go);
    }
    let prefix = p.prompt_tokens.unwrap_or(l);
    let (evidence, restore_ms) = match tier {
        Tier::Live => (
            format!(
                "the prime ({} tokens computed, cached {}) was the server's last request",
                p.server.as_ref().and_then(|t| t.prompt_n).unwrap_or(0),
                p.cached_tokens.unwrap_or(0)
            ),
            None,
        ),
        Tier::Ram if warm.backend == BackendKind::Sglang => {
            let pool = warm.kv_pool_tokens.unwrap_or(0);
            match evict_device(ctx, warm, pool, window).await {
                Some(Ok(sent)) => (
                    format!(
                        "then {sent} new tokens through a device KV pool of {pool} tokens evicted it from device memory"
                    ),
                    None,
                ),
                Some(Err(e)) => {
                    ctx.observer.warn(&format!(
                        "tiers at {l}: the request that evicts the prefix failed: {e}; the ram sample is not taken"
                    ));
                    return Ok(Step::Go);
                }
                None => return Ok(Step::Interrupted),
            }
        }
        Tier::Ram => match displace(ctx, (l, prefix), window).await {
            Ok(evidence) => (evidence, None),
            Err(step) => return Ok(step),
        },
        Tier::Disk => match save_erase_restore(ctx, (l, rep), disk).await {
            Ok(placed) => placed,
            Err(step) => return Ok(step),
        },
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
    let Some((mut s, _)) = measure_warm(ctx, warm, &req, (total, rep), info, Phase::Tier).await
    else {
        return Ok(Step::Interrupted);
    };
    if warm.backend == BackendKind::Sglang {
        attribute_host_split(&mut s);
    }
    Ok(
        match record(ctx.writer, tally, ctx.observer, settings, &s)? {
            Some(r) => Step::Stopped(r),
            None => Step::Go,
        },
    )
}

/// The ram tier on llama.cpp: another prompt takes the only slot, so the prefix leaves the
/// live cache; the slot's state proves it. The evidence, or how the step ends.
async fn displace(
    ctx: &mut RunCtx<'_>,
    (l, prefix): (u64, u64),
    window: &mut u64,
) -> Result<String, Step> {
    let (settings, http) = (ctx.settings, ctx.backend.http());
    // Another prompt takes the only slot: the prefix leaves the live cache.
    let other = ctx.builder.build(DISPLACE_TOKENS, *window);
    *window += 1;
    let req = request(
        other,
        PRIME_TOKENS,
        false,
        settings.timeouts_for(DISPLACE_TOKENS),
    );
    let Some(r) = send(ctx.backend, &req, ctx.interrupt).await else {
        return Err(Step::Interrupted);
    };
    if let Err(e) = r {
        ctx.observer
            .warn(&format!("tiers at {l}: the displacing request failed: {e}"));
        return Err(Step::Go);
    }
    let held = slots::state(http)
        .await
        .ok()
        .and_then(|s| s.into_iter().next());
    match held {
        Some(s) if s.n_prompt_tokens.is_some_and(|t| t < prefix) => Ok(
            format!(
                "before it, GET /slots: the only slot held another prompt of {} tokens (task {}); a reuse of the prefix can only come from the host-memory prompt cache",
                s.n_prompt_tokens.unwrap_or(0),
                s.id_task.map_or("?".to_owned(), |t| t.to_string())
            ),
        ),
        other => {
            ctx.observer.warn(&format!(
                "tiers at {l}: GET /slots does not show the slot displaced ({other:?}); the ram sample is not taken"
            ));
            Err(Step::Go)
        }
    }
}

/// The disk tier on llama.cpp: the slot saved to a file, erased and restored from it. The
/// evidence and the restore's client time, or how the step ends (`disk` turns false when
/// the server cannot save slots).
async fn save_erase_restore(
    ctx: &mut RunCtx<'_>,
    (l, rep): (u64, u32),
    disk: &mut bool,
) -> Result<(String, Option<f64>), Step> {
    let (settings, http) = (ctx.settings, ctx.backend.http());
    let file = format!("ctxbench-{}-{l}-{rep}.bin", settings.run_id);
    let saved = match slots::save(http, 0, &file).await {
        Ok(s) => s,
        Err(e) => {
            ctx.observer.warn(&format!(
                "tiers: no disk tier (slot save/restore): {e}; measured: cold, live, ram"
            ));
            *disk = false;
            return Err(Step::Go);
        }
    };
    let erased = ctxbench_client::llamacpp::erase_slots(http, 1).await;
    let restored = slots::restore(http, 0, &file).await;
    match (erased, restored) {
        (Ok(e), Ok(r)) => Ok((
            format!(
                "slot saved ({} tokens), erased ({e}), restored ({} tokens; server {} ms)",
                saved.tokens,
                r.tokens,
                r.server_ms.map_or("?".to_owned(), |m| format!("{m:.1}"))
            ),
            Some(r.client_ms),
        )),
        (e, r) => {
            ctx.observer.warn(&format!(
                "tiers at {l}: the slot could not be erased and restored ({:?}, {:?}); the disk sample is not taken",
                e.err(),
                r.err()
            ));
            Err(Step::Go)
        }
    }
}

/// Sends new prompts (each with its own nonce, at most the server's context) until `pool`
/// tokens went through the device KV pool, so its least recently used prefix (the prime) is
/// evicted from device memory. Returns the tokens sent (or why it could not), `None` when
/// interrupted.
async fn evict_device(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    pool: u64,
    window: &mut u64,
) -> Option<Result<u64, String>> {
    let settings = ctx.settings;
    // Half the pool per request: a request as large as the pool is refused (SGLang 0.5.23
    // with --max-total-tokens 4096 takes at most 4090 input tokens).
    let room = warm.max_context.unwrap_or(pool).saturating_sub(64).max(64);
    let chunk = (pool / 2).clamp(64, room);
    let mut sent = 0u64;
    // A little more than the pool: what the radix cache keeps for running requests.
    let goal = pool + pool / 8;
    while sent < goal {
        let filler = ctx.builder.build(chunk, *window);
        *window += 1;
        let req = request(filler, 1, false, settings.timeouts_for(chunk));
        let computed = match send(ctx.backend, &req, ctx.interrupt).await? {
            Ok(o) => o.counts.prompt_tokens,
            Err(e) => return Some(Err(e.to_string())),
        };
        // A refused prompt can still end in a clean stream (SGLang: an error event, then a
        // finish): only a prompt the server counted whole went through its pool.
        if computed.is_some_and(|c| c + 16 < chunk) {
            return Some(Err(format!(
                "the server counted {} of the filler's {chunk} prompt tokens",
                computed.unwrap_or(0)
            )));
        }
        sent += chunk;
    }
    Some(Ok(sent))
}

/// Sets an SGLang tier sample's tier from what the server said it served it from
/// (`cached_tokens_details`): host tokens > 0 is the host tier; all from the device is the
/// live tier, whatever was planned; no split on a hit leaves the tier unproven (`None`,
/// kept out of the tier table).
fn attribute_host_split(s: &mut Sample) {
    let (Some(w), true) = (s.warm.as_mut(), s.status == Status::Ok) else {
        return;
    };
    let cached = s.cached_tokens.unwrap_or(0);
    let missed = s.flags.contains(&Flag::CacheMiss);
    let said = match s.cached_host_tokens {
        Some(h) if h > 0 && !missed => {
            w.tier = Some(Tier::Ram);
            format!("the append's cached_tokens_details: {h} of {cached} cached tokens loaded back from host memory")
        }
        Some(_) if !missed => {
            let planned = w.tier;
            w.tier = Some(Tier::Live);
            match planned {
                Some(Tier::Ram) => format!("the append's cached_tokens_details: all {cached} cached tokens on the device, none from host memory: the filler did not evict the prefix, so the sample counts as live"),
                _ => format!("the append's cached_tokens_details: all {cached} cached tokens on the device"),
            }
        }
        None if !missed => {
            w.tier = None;
            "the server did not split its cached tokens by tier (no cached_tokens_details): tier not proven".to_owned()
        }
        _ => format!(
            "the append's cached count {cached} is short of the prefix: recomputed, no tier served it (no host-memory tier: SGLang needs --enable-hierarchical-cache)"
        ),
    };
    let ev = w.evidence.take().unwrap_or_default();
    w.evidence = Some(match ev.is_empty() {
        true => said,
        false => format!("{ev}; {said}"),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier_sample(planned: Tier, cached: u64, host: Option<u64>) -> Sample {
        let mut s = Sample {
            cached_tokens: Some(cached),
            cached_host_tokens: host,
            warm: Some(WarmInfo {
                prefix_tokens: 1000,
                new_tokens: 100,
                expected_cached: 1000,
                allowance: 1,
                tier: Some(planned),
                evidence: Some("filler".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        ctxbench_schema::warm::judge(&mut s);
        attribute_host_split(&mut s);
        s
    }

    fn tier_of(s: &Sample) -> Option<Tier> {
        s.warm.as_ref().and_then(|w| w.tier)
    }

    #[test]
    fn an_sglang_tier_is_what_the_servers_host_split_says_not_what_was_planned() {
        // Loaded back from host memory: the host tier, also when live was planned.
        assert_eq!(
            tier_of(&tier_sample(Tier::Ram, 1000, Some(1000))),
            Some(Tier::Ram)
        );
        assert_eq!(
            tier_of(&tier_sample(Tier::Live, 1000, Some(600))),
            Some(Tier::Ram)
        );
        // All on the device after the filler: it did not evict the prefix, so it is live.
        let s = tier_sample(Tier::Ram, 1000, Some(0));
        assert_eq!(tier_of(&s), Some(Tier::Live));
        let ev = s.warm.unwrap().evidence.unwrap();
        assert!(
            ev.starts_with("filler; ") && ev.contains("did not evict"),
            "{ev}"
        );
        // A hit without a split proves no tier: kept out of the table.
        assert_eq!(tier_of(&tier_sample(Tier::Ram, 1000, None)), None);
        // Recomputed: the planned tier stays, flagged a miss, the evidence says why.
        let s = tier_sample(Tier::Ram, 0, None);
        assert_eq!(tier_of(&s), Some(Tier::Ram));
        assert!(s.has(&Flag::CacheMiss));
        assert!(s
            .warm
            .unwrap()
            .evidence
            .unwrap()
            .contains("no tier served it"));
    }
}
