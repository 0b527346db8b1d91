//! `--mode retention`: when the cache forgets. At each prefix length L, the cold column
//! (L + N, as the cold sweep measures it), then per cell and repetition a prime of a new
//! prefix of L tokens (its own nonce), then either an idle gap (`--gaps`, at pressure 0) or
//! foreign traffic (`--pressure`, at gap 0: other prompts, each with its own prefix, totalling
//! that fraction of the server's KV pool, each counted by the server) or, with `--grid`, both
//! (the traffic at once, the append when the gap is over), then the append of N judged by
//! the warm hit rule. A miss is named: time-based eviction after a gap alone,
//! capacity eviction after pressure, slot reuse on llama-server with more prompts than slots
//! (`GET /slots` read before the append is the evidence).
//!
//! Long gaps cost no server time: the gaps of up to S sessions overlap (S: llama-server's
//! slots; a pool that holds several prefixes), each on its own prefix. Requests are still
//! sent one at a time, so none is measured while another's runs. A prime is sent only when it
//! will end before the next append falls due, and on llama-server no prime follows an append
//! until every live session has appended (a new prompt takes the least recently used slot,
//! which would be a live session's).

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::protocol::record;
use super::warm_steps::{cold, measure_warm, prime, request, WarmSettings, PRIME_TOKENS};
use super::{RunCtx, Step, Tally};
use ctxbench_client::{slots, BackendKind};
use ctxbench_schema::error::RecordError;
use ctxbench_schema::record::{Flag, Phase, Sample, Status};
use ctxbench_schema::warm::{MissCause, Retention, WarmInfo};

/// One append of the map: a length, its gap and pressure, a repetition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// Cached prefix (L).
    pub l: u64,
    /// Idle seconds.
    pub gap: f64,
    /// Foreign traffic, fraction of the pool.
    pub pressure: f64,
    /// Repetition.
    pub rep: u32,
}

/// The map's cells at each L: every gap at pressure 0, every pressure at gap 0; with `grid`
/// also every gap × every pressure.
pub fn cells(gaps: &[f64], pressure: &[f64], grid: bool) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = gaps.iter().map(|&g| (g, 0.0)).collect();
    for &p in pressure {
        if !out.contains(&(0.0, p)) {
            out.push((0.0, p));
        }
    }
    if grid {
        for &p in pressure.iter().filter(|p| **p > 0.0) {
            for &g in gaps.iter().filter(|g| **g > 0.0) {
                out.push((g, p));
            }
        }
    }
    out
}

/// The seconds the gap units wait when up to `s` sessions' gaps overlap: sorted longest
/// first, in batches of `s`, each batch waits its longest gap.
pub fn overlapped_wait(gaps: &mut [f64], s: usize) -> f64 {
    gaps.sort_by(|a, b| b.total_cmp(a));
    gaps.chunks(s.max(1)).map(|c| c[0]).sum()
}

/// The pool the pressure is a fraction of, and where it comes from.
pub fn pool(warm: &WarmSettings<'_>) -> (Option<u64>, String) {
    match (warm.kv_pool_tokens, warm.backend, warm.slots, warm.max_context) {
        (Some(p), BackendKind::Sglang, ..) => (Some(p), "SGLang max_total_num_tokens".into()),
        (Some(p), BackendKind::Vllm, ..) => (Some(p), "vLLM num_gpu_blocks × block_size".into()),
        (Some(p), ..) => (Some(p), "the server's KV pool".into()),
        (None, BackendKind::Llamacpp, Some(s), Some(c)) => (
            Some(s * c),
            format!("llama.cpp slots × context ({s} × {c}, /props)"),
        ),
        (None, _, _, Some(c)) => (
            Some(c),
            format!("no KV pool reported: one context of {c} tokens (pressure in tokens, not a fraction of the pool)"),
        ),
        _ => (None, "no KV pool and no context reported".into()),
    }
}

/// Sessions whose gaps may overlap at L.
fn sessions_at_once(warm: &WarmSettings<'_>, l: u64, n: u64) -> usize {
    match (warm.backend, warm.slots, warm.kv_pool_tokens) {
        (BackendKind::Llamacpp, Some(s), _) => s.max(1) as usize,
        (_, _, Some(p)) => (p / (2 * (l + n)).max(1)).clamp(1, 8) as usize,
        _ => 1,
    }
}

/// A session between its prime and its append.
struct Live {
    u: Unit,
    full: Vec<u32>,
    prefix: u64,
    primed: Instant,
    due: Instant,
    sessions: u32,
}

/// Measures the map; every sample is written as it is measured; what `prior` holds is
/// skipped (resume).
pub async fn run(
    mut ctx: RunCtx<'_>,
    contexts: &[u64],
    warm: &WarmSettings<'_>,
    prior: &[Sample],
) -> Result<Tally, RecordError> {
    let settings = ctx.settings;
    let mut tally = Tally::default();
    let reps = settings.policy.min_reps.max(1);
    let (n, ls) = warm.lengths(contexts, settings.output_tokens);
    let (pool_tokens, pool_source) = pool(warm);
    let mut grid = cells(&warm.config.gaps_s, &warm.config.pressure, warm.config.grid);
    if pool_tokens.is_none() && grid.iter().any(|c| c.1 > 0.0) {
        ctx.observer.warn(&format!(
            "retention: {pool_source}: the pressure axis is left out"
        ));
        grid.retain(|c| c.1 == 0.0);
    }
    let done: HashSet<(u64, u64, u64, u32)> = prior
        .iter()
        .filter_map(|s| {
            let w = s.warm.as_ref()?;
            let r = w.retention.as_ref()?;
            Some((
                w.prefix_tokens,
                r.gap_s.to_bits(),
                r.pressure.to_bits(),
                s.rep,
            ))
        })
        .collect();
    let cold_done: HashSet<(u64, u32)> = prior
        .iter()
        .filter(|s| s.phase == Phase::Cold && s.status == Status::Ok)
        .map(|s| (s.context_tokens, s.rep))
        .collect();
    let units: Vec<Unit> = ls
        .iter()
        .flat_map(|&l| {
            grid.iter().flat_map(move |&(gap, pressure)| {
                (0..reps).map(move |rep| Unit {
                    l,
                    gap,
                    pressure,
                    rep,
                })
            })
        })
        .filter(|u| !done.contains(&(u.l, u.gap.to_bits(), u.pressure.to_bits(), u.rep)))
        .collect();
    let colds = ls.len() * reps as usize;
    tally.skipped = done.len() + cold_done.len().min(colds);
    plan(&mut ctx, warm, (&ls, n, &grid, reps), &units, pool_tokens);
    ctx.observer.start(
        colds.saturating_sub(cold_done.len()) + 2 * units.len(),
        tally.skipped,
    );
    let started = Instant::now();
    let mut window = prior.len() as u64;
    let pool = (pool_tokens, pool_source.as_str());
    'ls: for &l in &ls {
        for rep in 0..reps {
            if cold_done.contains(&(l + n, rep)) {
                continue;
            }
            if cold(&mut ctx, l + n, rep, &mut window, &mut tally)
                .await?
                .ends(&mut tally)
            {
                break 'ls;
            }
        }
        let here: Vec<Unit> = units.iter().copied().filter(|u| u.l == l).collect();
        let step = sessions(&mut ctx, warm, (l, n), &here, pool, &mut window, &mut tally).await?;
        if step.ends(&mut tally) {
            break;
        }
    }
    let gaps: f64 = units.iter().map(|u| u.gap).sum();
    // A server whose answers carry no timings of its own (vLLM here) has none to sum.
    let server = match tally.server_busy_ms > 0.0 {
        true => format!("{:.1} s of server time", tally.server_busy_ms / 1000.0),
        false => "server time not reported by this server's answers".to_owned(),
    };
    ctx.observer.info(&format!(
        "retention: {:.0} s of wall time, {server}, for gaps that sum to {gaps:.0} s",
        started.elapsed().as_secs_f64(),
    ));
    ctx.observer.finish();
    Ok(tally)
}

/// Says what the map will cost before it starts.
fn plan(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    (ls, n, grid, reps): (&[u64], u64, &[(f64, f64)], u32),
    units: &[Unit],
    pool_tokens: Option<u64>,
) {
    let mut wait = 0.0;
    let mut foreign = 0u64;
    for &l in ls {
        let mut gaps: Vec<f64> = units
            .iter()
            .filter(|u| u.l == l && u.pressure == 0.0)
            .map(|u| u.gap)
            .collect();
        wait += overlapped_wait(&mut gaps, sessions_at_once(warm, l, n));
        // Cells under pressure run alone: their gaps (the grid's) add up.
        wait += units
            .iter()
            .filter(|u| u.l == l && u.pressure > 0.0)
            .map(|u| u.gap)
            .sum::<f64>();
        foreign += units
            .iter()
            .filter(|u| u.l == l)
            .map(|u| (u.pressure * pool_tokens.unwrap_or(0) as f64).ceil() as u64)
            .sum::<u64>();
    }
    let sum: f64 = units.iter().map(|u| u.gap).sum();
    let alone: f64 = units
        .iter()
        .filter(|u| u.pressure > 0.0)
        .map(|u| u.gap)
        .sum();
    let grid_words = match alone > 0.0 {
        true => format!("; the grid's cells under pressure run alone, their gaps add {alone:.0} s"),
        false => String::new(),
    };
    let at_once: Vec<String> = ls
        .iter()
        .map(|&l| format!("{l}: {}", sessions_at_once(warm, l, n)))
        .collect();
    ctx.observer.info(&format!(
        "retention plan: {} L × {} cell(s) × {reps} rep(s) = {} append(s) to measure (each after its own prime), {} cold; foreign traffic {foreign} tokens; the gaps sum to {sum:.0} s, overlapped (sessions at once per L: {}) they wait ≈ {wait:.0} s{grid_words}, plus the requests' own time",
        ls.len(),
        grid.len(),
        units.len(),
        ls.len() * reps as usize,
        at_once.join(", ")
    ));
    ctx.observer.eta(Some(wait));
}

/// Runs the units of one L: the gap units with their gaps overlapped, then each pressure
/// unit alone (a grid cell's append falls due when its gap is over, its traffic sent first).
async fn sessions(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    (l, n): (u64, u64),
    units: &[Unit],
    pool: (Option<u64>, &str),
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let s = sessions_at_once(warm, l, n);
    let mut pending: Vec<Unit> = units
        .iter()
        .copied()
        .filter(|u| u.pressure == 0.0)
        .collect();
    pending.sort_by(|a, b| b.gap.total_cmp(&a.gap));
    let mut pending = std::collections::VecDeque::from(pending);
    let mut live: Vec<Live> = Vec::new();
    // The longest prime at this L so far: whether the next fits before an append falls due.
    let mut prime_s: f64 = 0.0;
    let mut appended = false;
    loop {
        let next_due = live.iter().map(|x| x.due).min();
        // On llama-server a prime after an append would take a live session's slot.
        let room = (live.is_empty() || !appended) && live.len() < s;
        let fits = next_due
            .is_none_or(|d| Instant::now() + Duration::from_secs_f64(1.5 * prime_s + 0.2) <= d);
        if let (Some(&u), true, true) = (pending.front(), room, fits) {
            pending.pop_front();
            appended = appended && !live.is_empty();
            let t0 = Instant::now();
            match prime_one(ctx, u, n, window, tally).await? {
                Ok(Some((full, prefix))) => {
                    prime_s = prime_s.max(t0.elapsed().as_secs_f64());
                    let primed = Instant::now();
                    live.push(Live {
                        u,
                        full,
                        prefix,
                        primed,
                        due: primed + Duration::from_secs_f64(u.gap),
                        sessions: 0,
                    });
                    let k = live.len() as u32;
                    live.iter_mut().for_each(|x| x.sessions = x.sessions.max(k));
                }
                Ok(None) => {}
                Err(step) => return Ok(step),
            }
            continue;
        }
        let Some(i) = (0..live.len()).min_by_key(|&i| live[i].due) else {
            break;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(live[i].due) => {}
            _ = ctx.interrupt.wait_for(|v| *v) => return Ok(Step::Interrupted),
        }
        let x = live.swap_remove(i);
        appended = true;
        let step = append(ctx, warm, x, (n, pool), window, tally).await?;
        if !matches!(step, Step::Go) {
            return Ok(step);
        }
    }
    for &u in units.iter().filter(|u| u.pressure > 0.0) {
        let step = match prime_one(ctx, u, n, window, tally).await? {
            Ok(Some((full, prefix))) => {
                let primed = Instant::now();
                let x = Live {
                    u,
                    full,
                    prefix,
                    primed,
                    due: primed + Duration::from_secs_f64(u.gap),
                    sessions: 1,
                };
                append(ctx, warm, x, (n, pool), window, tally).await?
            }
            Ok(None) => Step::Go,
            Err(step) => step,
        };
        if !matches!(step, Step::Go) {
            return Ok(step);
        }
    }
    Ok(Step::Go)
}

/// Primes a new prefix of L tokens (no flush: other sessions' prefixes are live), records
/// it; the full prompt and the prefix as counted, `None` when the prime failed.
async fn prime_one(
    ctx: &mut RunCtx<'_>,
    u: Unit,
    n: u64,
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Result<Option<(Vec<u32>, u64)>, Step>, RecordError> {
    let full = ctx.builder.build(u.l + n, *window);
    *window += 1;
    let Some(p) = prime(ctx, &full, (u.l, n, u.rep), None).await else {
        return Ok(Err(Step::Interrupted));
    };
    if let Some(r) = record(ctx.writer, tally, ctx.observer, ctx.settings, &p)? {
        return Ok(Err(Step::Stopped(r)));
    }
    Ok(Ok(
        (p.status == Status::Ok).then(|| (full, p.prompt_tokens.unwrap_or(u.l)))
    ))
}

/// What foreign traffic went through the server: prompts, tokens counted, and why it
/// stopped short (a prompt refused, failed or not counted whole).
#[derive(Debug, Default)]
struct Foreign {
    prompts: u32,
    tokens: u64,
    short: Option<String>,
}

/// Sends other prompts (each its own nonce, at most a context each) totalling `goal`
/// tokens; `None` when interrupted.
async fn foreign(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    goal: u64,
    window: &mut u64,
    tally: &mut Tally,
) -> Option<Foreign> {
    let settings = ctx.settings;
    let room = warm
        .max_context
        .unwrap_or(4096)
        .saturating_sub(u64::from(PRIME_TOKENS) + 64)
        .max(64);
    let k = goal.div_ceil(room).max(1);
    let chunk = goal.div_ceil(k).max(16);
    let mut f = Foreign::default();
    while f.tokens + 16 < goal {
        let prompt = ctx.builder.build(chunk, *window);
        *window += 1;
        let req = request(prompt, PRIME_TOKENS, false, settings.timeouts_for(chunk));
        match super::protocol::send(ctx.backend, &req, ctx.interrupt).await? {
            Ok(o) => {
                f.prompts += 1;
                if let Some(t) = &o.timings {
                    tally.server_busy_ms +=
                        t.prompt_ms.unwrap_or(0.0) + t.predicted_ms.unwrap_or(0.0);
                }
                // Only a prompt the server counted whole went through its pool.
                match o.counts.prompt_tokens {
                    Some(c) if c + 16 >= chunk => f.tokens += c,
                    c => {
                        f.short = Some(format!(
                            "the server counted {} of a foreign prompt's {chunk} tokens",
                            c.map_or("none".to_owned(), |c| c.to_string())
                        ));
                        break;
                    }
                }
            }
            Err(e) => {
                f.short = Some(format!("a foreign prompt failed: {e}"));
                break;
            }
        }
    }
    Some(f)
}

/// `GET /slots` in words.
async fn slots_said(ctx: &RunCtx<'_>) -> Option<String> {
    let s = slots::state(ctx.backend.http()).await.ok()?;
    let words: Vec<String> = s
        .iter()
        .map(|x| {
            format!(
                "slot {} held {} tokens (task {})",
                x.id,
                x.n_prompt_tokens.map_or("?".to_owned(), |t| t.to_string()),
                x.id_task.map_or("?".to_owned(), |t| t.to_string())
            )
        })
        .collect();
    Some(format!(
        "GET /slots before the append: {}",
        words.join(", ")
    ))
}

/// The foreign traffic (pressure units), then the append, judged and its miss named.
async fn append(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    x: Live,
    (n, (pool_tokens, pool_source)): (u64, (Option<u64>, &str)),
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let settings = ctx.settings;
    let total = x.u.l + n;
    let goal = (x.u.pressure * pool_tokens.unwrap_or(0) as f64).ceil() as u64;
    let f = match goal {
        0 => Foreign::default(),
        g => match foreign(ctx, warm, g, window, tally).await {
            Some(f) => f,
            None => return Ok(Step::Interrupted),
        },
    };
    // A grid cell: the traffic ran during the gap; the rest of the gap is idle.
    tokio::select! {
        _ = tokio::time::sleep_until(x.due) => {}
        _ = ctx.interrupt.wait_for(|v| *v) => return Ok(Step::Interrupted),
    }
    let llama = warm.backend == BackendKind::Llamacpp;
    let said = match llama {
        true => slots_said(ctx).await,
        false => None,
    };
    let idle_s = x.primed.elapsed().as_secs_f64();
    let req = request(
        x.full,
        settings.output_tokens,
        false,
        settings.timeouts_for(total),
    );
    ctx.observer.sample_started(total, x.u.rep);
    let info = WarmInfo {
        prefix_tokens: x.prefix,
        new_tokens: n,
        expected_cached: x.prefix,
        retention: Some(Retention {
            gap_s: x.u.gap,
            idle_s,
            pressure: x.u.pressure,
            pool_tokens,
            pool_source: pool_source.to_owned(),
            foreign_prompts: f.prompts,
            foreign_tokens: f.tokens,
            sessions: x.sessions,
            cause: None,
        }),
        ..Default::default()
    };
    let Some((mut s, _)) =
        measure_warm(ctx, warm, &req, (total, x.u.rep), info, Phase::Append).await
    else {
        return Ok(Step::Interrupted);
    };
    name(&mut s, warm.slots.filter(|_| llama), &f, said);
    if let Some(short) = &f.short {
        ctx.observer.warn(&format!(
            "retention at L = {} pressure {}: {short}; the append is kept, flagged foreign_short",
            x.u.l, x.u.pressure
        ));
        s.flags.push(Flag::ForeignShort);
    }
    Ok(
        match record(ctx.writer, tally, ctx.observer, settings, &s)? {
            Some(r) => Step::Stopped(r),
            None => Step::Go,
        },
    )
}

/// Names a retention append's outcome: the evidence always, the cause of a miss (`slots`:
/// llama-server's slot count).
fn name(s: &mut Sample, slots: Option<u64>, f: &Foreign, said: Option<String>) {
    let missed = s.has(&Flag::CacheMiss);
    let Some(w) = s.warm.as_mut() else { return };
    let Some(r) = w.retention.as_mut() else {
        return;
    };
    let mut ev = vec![format!(
        "cached {} of {} after {:.1} s idle",
        s.cached_tokens.map_or("?".to_owned(), |c| c.to_string()),
        w.prefix_tokens,
        r.idle_s
    )];
    if r.sessions > 1 {
        ev.push(format!(
            "{} sessions' prefixes live at once (the others' primes and appends only)",
            r.sessions
        ));
    }
    if f.prompts > 0 {
        ev.push(format!(
            "{} foreign prompt(s) of {} tokens counted by the server = {:.2} of the pool of {} tokens ({})",
            f.prompts,
            f.tokens,
            f.tokens as f64 / r.pool_tokens.unwrap_or(1).max(1) as f64,
            r.pool_tokens.unwrap_or(0),
            r.pool_source
        ));
    }
    if let Some(words) = said {
        ev.push(words);
    }
    // llama-server gives a new prompt the least recently used slot: k foreign prompts took
    // every one of k slots.
    let all_taken = slots.is_some_and(|k| u64::from(f.prompts) >= k);
    if !missed && s.status == Status::Ok && all_taken {
        ev.push("every slot took a foreign prompt since the prime, yet the prefix came back: from the host-memory prompt cache (--cache-ram)".to_owned());
    }
    if missed && s.status == Status::Ok {
        // Prompts that wanted a slot since the prime: the live sessions and the foreign ones.
        let wanted = u64::from(r.sessions.max(1)) + u64::from(f.prompts);
        r.cause = Some(match slots {
            Some(k) if wanted > k => {
                ev.push(format!(
                    "{wanted} prompts for {k} slot(s) since the prime: another took the prefix's slot"
                ));
                MissCause::SlotReuse
            }
            _ if f.prompts > 0 => MissCause::CapacityEviction,
            _ => MissCause::TimeEviction,
        });
    }
    w.evidence = Some(ev.join("; "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_is_every_gap_at_no_pressure_and_every_pressure_at_no_gap() {
        let c = cells(&[0.0, 1.0, 10.0], &[0.0, 0.5, 2.0], false);
        assert_eq!(
            c,
            vec![(0.0, 0.0), (1.0, 0.0), (10.0, 0.0), (0.0, 0.5), (0.0, 2.0)]
        );
        // Without a zero gap the pressure axis still starts at its own values.
        assert_eq!(cells(&[5.0], &[1.0], false), vec![(5.0, 0.0), (0.0, 1.0)]);
    }

    #[test]
    fn the_grid_adds_every_gap_under_every_pressure_once() {
        let c = cells(&[0.0, 1.0, 10.0], &[0.0, 0.5], true);
        assert_eq!(
            c,
            vec![
                (0.0, 0.0),
                (1.0, 0.0),
                (10.0, 0.0),
                (0.0, 0.5),
                (1.0, 0.5),
                (10.0, 0.5)
            ]
        );
        // The axes alone when one of them is only 0.
        assert_eq!(
            cells(&[0.0, 1.0], &[0.0], true),
            cells(&[0.0, 1.0], &[0.0], false)
        );
    }

    fn miss(sessions: u32) -> Sample {
        let mut s = Sample {
            cached_tokens: Some(0),
            warm: Some(WarmInfo {
                prefix_tokens: 1000,
                new_tokens: 100,
                expected_cached: 1000,
                allowance: 1,
                retention: Some(Retention {
                    sessions,
                    pool_tokens: Some(4096),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        ctxbench_schema::warm::judge(&mut s);
        s
    }

    fn cause(s: &Sample) -> Option<MissCause> {
        s.warm.as_ref().and_then(|w| w.retention.as_ref()?.cause)
    }

    #[test]
    fn a_miss_is_named_by_what_came_between_the_prime_and_the_append() {
        let none = Foreign::default();
        let two = Foreign {
            prompts: 2,
            tokens: 4096,
            short: None,
        };
        // A gap alone: time. On llama-server too, while every session had a slot.
        let mut s = miss(1);
        name(&mut s, None, &none, None);
        assert_eq!(cause(&s), Some(MissCause::TimeEviction));
        let mut s = miss(2);
        name(
            &mut s,
            Some(2),
            &none,
            Some("GET /slots before the append: …".into()),
        );
        assert_eq!(cause(&s), Some(MissCause::TimeEviction));
        // Foreign traffic: capacity; on llama-server with more prompts than slots, slot reuse
        // with the count and the slots' reading as its evidence.
        let mut s = miss(1);
        name(&mut s, None, &two, None);
        assert_eq!(cause(&s), Some(MissCause::CapacityEviction));
        let mut s = miss(1);
        name(
            &mut s,
            Some(2),
            &two,
            Some("GET /slots before the append: slot 0 held 2049 tokens".into()),
        );
        assert_eq!(cause(&s), Some(MissCause::SlotReuse));
        let ev = s.warm.unwrap().evidence.unwrap();
        assert!(
            ev.contains("3 prompts for 2 slot(s)") && ev.contains("slot 0 held"),
            "{ev}"
        );
        // A hit has no cause, only its evidence.
        let mut s = miss(1);
        s.cached_tokens = Some(1000);
        s.flags.clear();
        name(&mut s, Some(1), &two, None);
        assert_eq!(cause(&s), None);
        let ev = s.warm.unwrap().evidence.unwrap();
        assert!(ev.contains("host-memory prompt cache"), "{ev}");
    }

    #[test]
    fn overlapping_gaps_wait_for_the_longest_of_each_batch() {
        // 3 reps of 0, 10, 300 s: 930 s one at a time.
        let mut g = vec![0.0, 10.0, 300.0, 0.0, 10.0, 300.0, 0.0, 10.0, 300.0];
        assert_eq!(overlapped_wait(&mut g.clone(), 1), 930.0);
        // Two at once: (300, 300), (300, 10), (10, 10), (0, 0), (0): 610 s.
        assert_eq!(overlapped_wait(&mut g.clone(), 2), 610.0);
        assert_eq!(overlapped_wait(&mut g, 9), 300.0);
    }
}
