//! Summaries of the warm modes: the append grid TTFT_inc(L, N) beside the cold TTFT of
//! L + N, its fit and the turn budget; a conversation's trajectory and the turns where the
//! cache was lost; the cache-tier table. Only samples whose reuse is proven
//! ([`ctxbench_schema::warm::usable`]) enter a median. No I/O.

use serde::Serialize;

use super::fit::nnls3;
use super::Spread;
use ctxbench_schema::record::{Flag, Phase, Sample, Status};
use ctxbench_schema::warm::{self, Tier, WarmConfig, WarmMode};

/// One cell of the append grid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppendCell {
    /// Cached prefix (L), tokens.
    pub prefix_tokens: u64,
    /// Appended tokens (N).
    pub new_tokens: u64,
    /// Sessions appending at once (`--concurrency`; 1: one session).
    pub concurrency: u32,
    /// Append samples recorded (failures included).
    pub samples: usize,
    /// Of those, reuse proven and summarised.
    pub usable: usize,
    /// Flagged `cache_miss`.
    pub misses: usize,
    /// Without a cached count (reuse not proven).
    pub unverified: usize,
    /// TTFT of the append (usable samples), ms.
    pub ttft_ms: Option<Spread>,
    /// Decode rate of the append, tokens/s.
    pub decode_tokens_per_s: Option<Spread>,
    /// Cold TTFT of L + N (usable cold samples of this run at the same concurrency), ms.
    pub cold_ttft_ms: Option<Spread>,
    /// Cold median ÷ append median: how many times faster the cache made the turn.
    pub speedup: Option<f64>,
}

/// TTFT_inc(L, N) ≈ a + b·N + c·L·N: a fixed cost, the new tokens' own work, and their
/// attention over the cached prefix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppendFit {
    /// The concurrency whose cells were fitted.
    pub concurrency: u32,
    /// a (ms), b (ms per new token), c (ms per new token per prefix token); all ≥ 0.
    pub coef: [f64; 3],
    /// R² of the cell medians.
    pub r2: f64,
    /// Cells fitted.
    pub cells: usize,
}

impl AppendFit {
    /// The fit's TTFT at (L, N), ms.
    pub fn predict(&self, l: f64, n: f64) -> f64 {
        self.coef[0] + self.coef[1] * n + self.coef[2] * l * n
    }
}

/// The turn budget at one L: the largest N that stays under the TTFT target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Budget {
    /// Sessions at once.
    pub concurrency: u32,
    /// Cached prefix (L).
    pub prefix_tokens: u64,
    /// The largest measured N whose median TTFT is under the target (`None`: none is).
    pub measured_n: Option<u64>,
    /// The fit's N at the target (`None`: the fixed cost alone exceeds it, or no fit).
    pub fit_n: Option<f64>,
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnRow {
    /// The turn, from 0.
    pub turn: u32,
    /// Prompt length as sent (tokens the server counted, else the target).
    pub context_tokens: u64,
    /// Cached count the server reported.
    pub cached_tokens: Option<u64>,
    /// The cached count that proves the reuse (the previous prompt and answer).
    pub expected_cached: u64,
    /// Client TTFT, ms.
    pub ttft_ms: Option<f64>,
    /// Decode rate, tokens/s.
    pub decode_tokens_per_s: Option<f64>,
    /// Server prompt tokens computed (`prompt_n`), where reported.
    pub computed_tokens: Option<u64>,
    /// The cache was lost, wholly or partly (`cache_miss`), or the request failed.
    pub lost: bool,
    /// Failed.
    pub failed: bool,
}

/// The cache tiers at one L.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierRow {
    /// Cached prefix (L).
    pub prefix_tokens: u64,
    /// Appended tokens (N).
    pub new_tokens: u64,
    /// Cold recompute of L + N, ms.
    pub cold_ms: Option<Spread>,
    /// Live slot cache, ms.
    pub live_ms: Option<Spread>,
    /// Host-memory prompt cache, ms.
    pub ram_ms: Option<Spread>,
    /// Slot restored from disk: restore request + TTFT, ms.
    pub disk_ms: Option<Spread>,
    /// Tier samples flagged `cache_miss`, per tier name.
    pub misses: Vec<(String, usize)>,
}

/// What a warm run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarmReport {
    /// The mode and options.
    pub config: WarmConfig,
    /// The allowance rules the samples were judged by (one per distinct rule).
    pub allowance_rules: Vec<String>,
    /// Warm samples flagged `cache_miss`.
    pub misses: usize,
    /// Warm samples without a cached count.
    pub unverified: usize,
    /// Warm samples sent with the cache switch off (`--negative-control`).
    pub bypassed: usize,
    /// `append`: the grid, concurrency then L then N ascending.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub append: Vec<AppendCell>,
    /// `append`: the fit of the cell medians, one per concurrency level with enough cells.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fits: Vec<AppendFit>,
    /// `append` with `--ttft-target`: the turn budget per concurrency and L.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budget: Vec<Budget>,
    /// `conversation`: the turns in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRow>,
    /// `tiers`: one row per L.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierRow>,
    /// `tiers`: the smallest L from which restoring from disk beats recomputing at every
    /// measured L (`None`: it never does, or no disk tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore_beats_cold_from: Option<u64>,
    /// `retention`: the map's cells, L then pressure then gap.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retention: Vec<super::retention::RetentionCell>,
    /// `retention`: the map's edges per L and what a miss costs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retention_edges: Vec<super::retention::RetentionRow>,
}

fn is_warm_phase(p: &Phase) -> bool {
    matches!(p, Phase::Append | Phase::Turn | Phase::Tier)
}

/// The warm report of a run, `None` for a cold sweep.
pub fn summarize(config: Option<&WarmConfig>, samples: &[Sample]) -> Option<WarmReport> {
    let config = config?.clone();
    let warm: Vec<&Sample> = samples.iter().filter(|s| is_warm_phase(&s.phase)).collect();
    let mut rules: Vec<String> = warm
        .iter()
        .filter_map(|s| s.warm.as_ref().map(|w| w.allowance_rule.clone()))
        .filter(|r| !r.is_empty())
        .collect();
    rules.sort();
    rules.dedup();
    let mut r = WarmReport {
        allowance_rules: rules,
        misses: warm.iter().filter(|s| s.has(&Flag::CacheMiss)).count(),
        unverified: warm
            .iter()
            .filter(|s| s.status == Status::Ok && s.cached_tokens.is_none())
            .count(),
        bypassed: warm
            .iter()
            .filter(|s| s.warm.as_ref().is_some_and(|w| w.bypass))
            .count(),
        append: Vec::new(),
        fits: Vec::new(),
        budget: Vec::new(),
        turns: Vec::new(),
        tiers: Vec::new(),
        restore_beats_cold_from: None,
        retention: Vec::new(),
        retention_edges: Vec::new(),
        config,
    };
    match r.config.mode {
        WarmMode::Append => {
            r.append = append_cells(samples);
            for c in levels(&r.append) {
                let cells: Vec<AppendCell> = r
                    .append
                    .iter()
                    .filter(|x| x.concurrency == c)
                    .cloned()
                    .collect();
                let fit = append_fit(&cells);
                if let Some(t) = r.config.ttft_target_ms {
                    r.budget.extend(budget(&cells, fit.as_ref(), t));
                }
                r.fits.extend(fit);
            }
        }
        WarmMode::Conversation => r.turns = turns(samples),
        WarmMode::Tiers => {
            r.tiers = tier_rows(samples);
            r.restore_beats_cold_from = restore_crossover(&r.tiers);
        }
        WarmMode::Retention => {
            r.retention = super::retention::cells(samples);
            r.retention_edges = super::retention::rows(&r.retention, samples);
        }
    }
    Some(r)
}

/// The concurrency levels of the append cells, ascending.
pub fn levels(cells: &[AppendCell]) -> Vec<u32> {
    let mut v: Vec<u32> = cells.iter().map(|c| c.concurrency).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn cold_at(samples: &[Sample], context: u64, c: u32) -> Option<Spread> {
    Spread::of(
        samples
            .iter()
            .filter(|s| s.usable() && s.context_tokens == context)
            .filter(|s| s.concurrency.unwrap_or(1) == c)
            .filter_map(|s| s.ttft_ms),
    )
}

fn decode_of(s: &Sample) -> Option<f64> {
    match s.has(&Flag::ClientServerDisagree) {
        true => None,
        false => s.decode_tokens_per_s,
    }
}

/// The append grid from the samples, concurrency then L then N ascending.
pub fn append_cells(samples: &[Sample]) -> Vec<AppendCell> {
    let appends: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.phase == Phase::Append)
        .collect();
    let key = |s: &Sample| {
        let w = s.warm.as_ref()?;
        Some((s.concurrency.unwrap_or(1), w.prefix_tokens, w.new_tokens))
    };
    let mut keys: Vec<(u32, u64, u64)> = appends.iter().filter_map(|s| key(s)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|(c, l, n)| {
            let here: Vec<&&Sample> = appends
                .iter()
                .filter(|s| key(s) == Some((c, l, n)))
                .collect();
            let ok: Vec<&&Sample> = here.iter().copied().filter(|s| warm::usable(s)).collect();
            let ttft = Spread::of(ok.iter().filter_map(|s| s.ttft_ms));
            let cold = cold_at(samples, l + n, c);
            AppendCell {
                prefix_tokens: l,
                new_tokens: n,
                concurrency: c,
                samples: here.len(),
                usable: ok.len(),
                misses: here.iter().filter(|s| s.has(&Flag::CacheMiss)).count(),
                unverified: here
                    .iter()
                    .filter(|s| s.status == Status::Ok && s.cached_tokens.is_none())
                    .count(),
                decode_tokens_per_s: Spread::of(ok.iter().filter_map(|s| decode_of(s))),
                speedup: match (&cold, &ttft) {
                    (Some(c), Some(t)) if t.median > 0.0 => Some(c.median / t.median),
                    _ => None,
                },
                ttft_ms: ttft,
                cold_ttft_ms: cold,
            }
        })
        .collect()
}

/// Fits TTFT_inc(L, N) ≈ a + b·N + c·L·N to the cell medians (of one concurrency level);
/// `None` with fewer than three cells or a single L and N (the terms cannot be told apart).
pub fn append_fit(cells: &[AppendCell]) -> Option<AppendFit> {
    let concurrency = cells.first().map_or(1, |c| c.concurrency);
    let pts: Vec<(f64, f64, f64)> = cells
        .iter()
        .filter_map(|c| {
            c.ttft_ms
                .map(|t| (c.prefix_tokens as f64, c.new_tokens as f64, t.median))
        })
        .collect();
    if pts.len() < 3 {
        return None;
    }
    // Scaled to [0, 1] so L·N (up to 1e10) does not ruin the normal equations.
    let sn = pts.iter().map(|p| p.1).fold(1.0, f64::max);
    let sln = pts.iter().map(|p| p.0 * p.1).fold(1.0, f64::max);
    let rows: Vec<([f64; 3], f64)> = pts
        .iter()
        .map(|&(l, n, y)| ([1.0, n / sn, l * n / sln], y))
        .collect();
    let c = nnls3(&rows)?;
    let fit = AppendFit {
        concurrency,
        coef: [c[0], c[1] / sn, c[2] / sln],
        r2: 0.0,
        cells: pts.len(),
    };
    let mean = pts.iter().map(|p| p.2).sum::<f64>() / pts.len() as f64;
    let ss_tot: f64 = pts.iter().map(|p| (p.2 - mean).powi(2)).sum();
    let ss_res: f64 = pts
        .iter()
        .map(|&(l, n, y)| (y - fit.predict(l, n)).powi(2))
        .sum();
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        1.0
    };
    Some(AppendFit { r2, ..fit })
}

/// The turn budget at each L (cells of one concurrency level): the largest measured N under
/// `target_ms`, and the fit's N.
pub fn budget(cells: &[AppendCell], fit: Option<&AppendFit>, target_ms: f64) -> Vec<Budget> {
    let concurrency = cells.first().map_or(1, |c| c.concurrency);
    let mut ls: Vec<u64> = cells.iter().map(|c| c.prefix_tokens).collect();
    ls.dedup();
    ls.into_iter()
        .map(|l| {
            let measured_n = cells
                .iter()
                .filter(|c| c.prefix_tokens == l)
                .filter(|c| c.ttft_ms.is_some_and(|t| t.median <= target_ms))
                .map(|c| c.new_tokens)
                .max();
            let fit_n = fit.and_then(|f| {
                let per_token = f.coef[1] + f.coef[2] * l as f64;
                (target_ms > f.coef[0] && per_token > 0.0)
                    .then(|| (target_ms - f.coef[0]) / per_token)
            });
            Budget {
                concurrency,
                prefix_tokens: l,
                measured_n,
                fit_n,
            }
        })
        .collect()
}

/// A conversation's turns in order.
pub fn turns(samples: &[Sample]) -> Vec<TurnRow> {
    let mut rows: Vec<TurnRow> = samples
        .iter()
        .filter(|s| s.phase == Phase::Turn)
        .filter_map(|s| {
            let w = s.warm.as_ref()?;
            Some(TurnRow {
                turn: w.turn.unwrap_or(s.rep),
                context_tokens: s.prompt_tokens.unwrap_or(s.context_tokens),
                cached_tokens: s.cached_tokens,
                expected_cached: w.expected_cached,
                ttft_ms: s.ttft_ms,
                decode_tokens_per_s: decode_of(s),
                computed_tokens: s.server.as_ref().and_then(|t| t.prompt_n),
                lost: s.has(&Flag::CacheMiss),
                failed: s.status != Status::Ok,
            })
        })
        .collect();
    rows.sort_by_key(|r| r.turn);
    rows
}

fn tier_of(s: &Sample) -> Option<Tier> {
    s.warm.as_ref().and_then(|w| w.tier)
}

/// The tier table: one row per L.
pub fn tier_rows(samples: &[Sample]) -> Vec<TierRow> {
    let tiered: Vec<&Sample> = samples.iter().filter(|s| s.phase == Phase::Tier).collect();
    let mut keys: Vec<(u64, u64)> = tiered
        .iter()
        .filter_map(|s| s.warm.as_ref().map(|w| (w.prefix_tokens, w.new_tokens)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|(l, n)| {
            let at = |t: Tier| -> Vec<&&Sample> {
                tiered
                    .iter()
                    .filter(|s| tier_of(s) == Some(t))
                    .filter(|s| s.warm.as_ref().is_some_and(|w| w.prefix_tokens == l))
                    .collect()
            };
            let ms = |t: Tier| {
                Spread::of(
                    at(t)
                        .into_iter()
                        .filter(|s| warm::usable(s))
                        .filter_map(|s| {
                            let restore = s.warm.as_ref().and_then(|w| w.restore_ms).unwrap_or(0.0);
                            s.ttft_ms.map(|x| x + restore)
                        }),
                )
            };
            let misses = [Tier::Live, Tier::Ram, Tier::Disk]
                .into_iter()
                .map(|t| {
                    let m = at(t).iter().filter(|s| s.has(&Flag::CacheMiss)).count();
                    (t.as_str().to_owned(), m)
                })
                .filter(|(_, m)| *m > 0)
                .collect();
            TierRow {
                prefix_tokens: l,
                new_tokens: n,
                cold_ms: cold_at(samples, l + n, 1),
                live_ms: ms(Tier::Live),
                ram_ms: ms(Tier::Ram),
                disk_ms: ms(Tier::Disk),
                misses,
            }
        })
        .collect()
}

/// The smallest L from which the disk tier's median beats the cold median at every
/// measured L.
pub fn restore_crossover(rows: &[TierRow]) -> Option<u64> {
    let mut from = None;
    for r in rows {
        match (&r.disk_ms, &r.cold_ms) {
            (Some(d), Some(c)) if d.median < c.median => {
                from.get_or_insert(r.prefix_tokens);
            }
            (Some(_), Some(_)) => from = None,
            _ => {}
        }
    }
    from
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::warm::WarmInfo;

    fn append(l: u64, n: u64, cached: u64, ttft: f64) -> Sample {
        let mut s = Sample {
            phase: Phase::Append,
            context_tokens: l + n,
            prompt_tokens: Some(l + n),
            cached_tokens: Some(cached),
            length_ok: Some(true),
            ttft_ms: Some(ttft),
            warm: Some(WarmInfo {
                prefix_tokens: l,
                new_tokens: n,
                expected_cached: l,
                allowance: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        warm::judge(&mut s);
        s
    }

    fn cold(c: u64, ttft: f64) -> Sample {
        Sample {
            context_tokens: c,
            prompt_tokens: Some(c),
            cached_tokens: Some(0),
            length_ok: Some(true),
            ttft_ms: Some(ttft),
            ..Default::default()
        }
    }

    #[test]
    fn the_grid_fits_a_plus_bn_plus_cln_and_gives_the_turn_budget() {
        // TTFT = 10 + 0.1·N + 0.0001·L·N exactly.
        let f = |l: f64, n: f64| 10.0 + 0.1 * n + 0.0001 * l * n;
        let mut samples = Vec::new();
        for l in [1000u64, 4000, 16000] {
            for n in [100u64, 1000] {
                samples.push(append(l, n, l, f(l as f64, n as f64)));
                samples.push(cold(l + n, 10.0 * f(l as f64, n as f64)));
            }
        }
        // A miss is kept out: its TTFT would wreck the median.
        samples.push(append(1000, 100, 0, 1e6));
        let cells = append_cells(&samples);
        assert_eq!(cells.len(), 6);
        assert_eq!((cells[0].usable, cells[0].misses), (1, 1));
        assert!((cells[0].speedup.unwrap() - 10.0).abs() < 1e-9);
        let fit = append_fit(&cells).unwrap();
        assert!((fit.coef[0] - 10.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.coef[1] - 0.1).abs() < 1e-6 && (fit.coef[2] - 1e-4).abs() < 1e-9);
        assert!(fit.r2 > 0.999);
        // Target 200 ms: at L = 1000, N·0.2 ≤ 190 → 950 (fit), 100 measured (1000 is 210).
        let b = budget(&cells, Some(&fit), 200.0);
        assert_eq!(b[0].measured_n, Some(100));
        assert!((b[0].fit_n.unwrap() - 950.0).abs() < 1e-3);
        // At L = 16000 even N = 100 is 10 + 10 + 160 = 180: under.
        assert_eq!(b[2].measured_n, Some(100));
    }

    #[test]
    fn sessions_at_once_are_their_own_cells_beside_the_cold_wave_of_the_same_size() {
        let at = |mut s: Sample, c: u32| {
            s.concurrency = (c > 1).then_some(c);
            s
        };
        let mut samples = Vec::new();
        for l in [1000u64, 4000] {
            for n in [100u64, 1000] {
                let one = 10.0 + 0.1 * n as f64;
                samples.push(at(append(l, n, l, one), 1));
                samples.push(at(append(l, n, l, 2.0 * one), 2));
                samples.push(at(append(l, n, l, 2.0 * one), 2));
                samples.push(at(cold(l + n, 5.0 * one), 1));
                samples.push(at(cold(l + n, 30.0 * one), 2));
            }
        }
        let config = WarmConfig {
            mode: WarmMode::Append,
            appends: vec![100, 1000],
            turn_tokens: None,
            ttft_target_ms: Some(100.0),
            negative_control: false,
            gaps_s: Vec::new(),
            pressure: Vec::new(),
            grid: false,
        };
        let r = summarize(Some(&config), &samples).unwrap();
        assert_eq!(r.append.len(), 8);
        let (one, two): (Vec<_>, Vec<_>) = r.append.iter().partition(|c| c.concurrency == 1);
        assert_eq!((one.len(), two.len()), (4, 4));
        // Each level beside its own cold column: 5× at one session, 15× at two.
        assert!(one.iter().all(|c| (c.speedup.unwrap() - 5.0).abs() < 1e-9));
        assert!(two.iter().all(|c| (c.speedup.unwrap() - 15.0).abs() < 1e-9));
        assert!(two.iter().all(|c| c.usable == 2));
        assert_eq!(
            r.fits.iter().map(|f| f.concurrency).collect::<Vec<_>>(),
            [1, 2]
        );
        assert!((r.fits[1].coef[1] - 0.2).abs() < 1e-6, "{:?}", r.fits[1]);
        // Under 100 ms: N = 100 takes 20 ms (one session), 40 ms (two); N = 1000 neither.
        assert_eq!(r.budget.len(), 4);
        assert!(r.budget.iter().all(|b| b.measured_n == Some(100)));
        assert_eq!(r.budget[2].concurrency, 2);
    }

    #[test]
    fn restoring_beats_cold_from_the_first_l_where_it_stays_ahead() {
        let row = |l: u64, cold: f64, disk: f64| TierRow {
            prefix_tokens: l,
            new_tokens: 128,
            cold_ms: Spread::of([cold]),
            live_ms: None,
            ram_ms: None,
            disk_ms: Spread::of([disk]),
            misses: vec![],
        };
        let rows = [
            row(1024, 10.0, 20.0),
            row(2048, 30.0, 25.0),
            row(4096, 40.0, 45.0),
            row(8192, 90.0, 50.0),
            row(16384, 200.0, 60.0),
        ];
        assert_eq!(restore_crossover(&rows), Some(8192));
        assert_eq!(restore_crossover(&rows[..1]), None);
    }
}
