//! The draft length K and the batch as axes (issue 45, point 3): from one campaign over K
//! (`sweep --server-cmd … -L k 0,2,4 --spec-flags '… {k}' --concurrency 1,2`, K = 0 the
//! server without speculation), the decode time per output token at every (K, L, batch)
//! cell, and per (L, batch) the K to deploy. Pure: no I/O.
//!
//! # The unit
//! One request at a time: each usable cold sample's ms per token. A batch of c: each wave's
//! mean in-window ms per step (the window where all c requests decoded at once), one value
//! per wave, since a wave's requests share their steps and are not independent. With several
//! runs per K the run is the unit, as in `compare` ([`significance::compare_cell`]).
//!
//! # The rule for K*
//! The fastest K (lowest median ms per token) is K* when its ratio interval against every
//! other K lies wholly on the faster side; otherwise the cell is undecided between the
//! fastest and every K it does not beat ("undecided between 2 and 4"). A K > 0 *pays* at a
//! cell when its interval against K = 0 lies wholly below 1 (faster than the plain server).
//! What to deploy: K* when decided; K = 0 when no K pays; else the fastest K among those
//! that pay (and the table says it was undecided).

use serde::Serialize;

use super::super::metric::Metric;
use super::super::significance::{self, RatioInterval, Settings};
use ctxbench_schema::record::{Phase, Results, Sample};
use ctxbench_schema::units::fmt_ctx;

/// One K of the campaign: its value and its runs.
#[derive(Debug, Clone, Copy)]
pub struct KSide<'a> {
    /// The draft length (0: no speculation).
    pub k: u32,
    /// Its runs (results files).
    pub runs: &'a [&'a Results],
}

/// One K at one (L, batch) cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KCell {
    /// The draft length.
    pub k: u32,
    /// Median ms per output token (median of run medians with several runs).
    pub ms_per_token: Option<f64>,
    /// Units behind it (samples or waves of one run, or runs).
    pub n: usize,
    /// Plain ÷ this K's ms per token, against K = 0 (absent for K = 0 itself, or without a
    /// K = 0 side).
    pub speedup: Option<f64>,
    /// Its interval.
    pub speedup_interval: Option<RatioInterval>,
    /// The whole interval is above 1.
    pub pays: bool,
}

/// The answer at one (L, batch) cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// Context length.
    pub context_tokens: u64,
    /// Requests decoding together.
    pub batch: u32,
    /// Every K measured here, ascending.
    pub ks: Vec<KCell>,
    /// The fastest K whose interval beats every other one (`None`: undecided).
    pub k_star: Option<u32>,
    /// When undecided: the fastest K and every K it does not beat, ascending.
    pub undecided: Vec<u32>,
    /// The K to deploy here (see the module docs).
    pub deploy: u32,
    /// Some K had fewer units than an interval needs (`min_samples` of one run, `min_runs`
    /// of several): the cell is undecided for want of data, not because the Ks tie.
    pub too_few: bool,
    /// The answer in one sentence ("4k × batch 1: K* = 4 (1.60× the plain server, …)").
    pub sentence: String,
}

/// The whole K × L × batch answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KSchedule {
    /// The K values measured, ascending.
    pub ks: Vec<u32>,
    /// The lengths every K measured, ascending.
    pub contexts: Vec<u64>,
    /// The batch sizes every K measured, ascending.
    pub batches: Vec<u32>,
    /// One cell per (batch, L), batch-major.
    pub cells: Vec<Cell>,
    /// Per batch: the largest measured length at which some K > 0 still pays.
    pub last_paying: Vec<(u32, Option<u64>)>,
    /// The server's maximum context, when a header recorded it.
    pub max_context: Option<u64>,
    /// The confidence level.
    pub level: f64,
    /// What to know besides.
    pub notes: Vec<String>,
}

fn usable_at(r: &Results, c: u64, batch: u32) -> impl Iterator<Item = &Sample> {
    r.samples.iter().filter(move |s| {
        s.usable()
            && s.phase == Phase::Cold
            && s.context_tokens == c
            && s.concurrency.unwrap_or(1) == batch
    })
}

/// The units of one run at (L, batch): samples alone, or per wave its mean in-window ms per
/// step.
fn units(r: &Results, c: u64, batch: u32) -> Vec<f64> {
    if batch <= 1 {
        return usable_at(r, c, batch)
            .filter_map(|s| Metric::MsPerStep.of(s))
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
    }
    let mut waves: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
    for s in usable_at(r, c, batch) {
        let v = s.wave_stats.as_ref().and_then(|w| w.window_ms_per_step);
        if let Some(v) = v.filter(|v| v.is_finite() && *v > 0.0) {
            waves.entry(s.wave.unwrap_or(s.rep)).or_default().push(v);
        }
    }
    waves
        .values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .collect()
}

fn per_run(side: &KSide, c: u64, batch: u32) -> Vec<Vec<f64>> {
    side.runs.iter().map(|r| units(r, c, batch)).collect()
}

fn median(v: &[f64]) -> Option<f64> {
    super::super::Spread::of(v.iter().copied()).map(|s| s.median)
}

fn center(runs: &[Vec<f64>]) -> Option<f64> {
    let meds: Vec<f64> = runs.iter().filter_map(|r| median(r)).collect();
    median(&meds)
}

/// Values present in every side.
fn common<T: Ord + Copy>(sides: &[KSide], f: impl Fn(&Results) -> Vec<T>) -> Vec<T> {
    let per: Vec<Vec<T>> = sides
        .iter()
        .map(|s| {
            let mut v: Vec<T> = s.runs.iter().flat_map(|r| f(r)).collect();
            v.sort_unstable();
            v.dedup();
            v
        })
        .collect();
    let mut out = per.first().cloned().unwrap_or_default();
    out.retain(|x| per.iter().all(|p| p.contains(x)));
    out
}

/// `a` faster than `b` by an interval wholly on the faster side (b ÷ a ms above 1).
fn beats(a: &[Vec<f64>], b: &[Vec<f64>], s: &Settings) -> bool {
    significance::compare_cell(Metric::MsPerStep, a, b, s)
        .interval
        .is_some_and(|i| i.low > 1.0)
}

fn k_list(ks: &[u32]) -> String {
    match ks {
        [] => String::new(),
        [one] => one.to_string(),
        _ => {
            let (last, rest) = ks.split_last().expect("two or more");
            format!(
                "{} and {last}",
                rest.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    }
}

/// The answer at one (L, batch).
fn cell(sides: &[KSide], c: u64, batch: u32, s: &Settings) -> Cell {
    let data: Vec<Vec<Vec<f64>>> = sides.iter().map(|k| per_run(k, c, batch)).collect();
    let plain = sides.iter().position(|k| k.k == 0);
    let ks: Vec<KCell> = sides
        .iter()
        .zip(&data)
        .map(|(side, d)| {
            let cmp = plain
                .filter(|_| side.k > 0)
                .map(|p| significance::compare_cell(Metric::MsPerStep, &data[p], d, s));
            // B/A with A = plain: the speedup is its reciprocal.
            let iv = cmp.and_then(|c| c.interval).map(|i| RatioInterval {
                low: 1.0 / i.high,
                high: 1.0 / i.low,
                ..i
            });
            KCell {
                k: side.k,
                ms_per_token: center(d),
                n: match d.len() {
                    1 => d[0].len(),
                    _ => d.iter().filter(|r| !r.is_empty()).count(),
                },
                speedup: cmp.and_then(|c| c.ratio).map(|r| 1.0 / r),
                speedup_interval: iv,
                pays: iv.is_some_and(|i| i.low > 1.0),
            }
        })
        .collect();
    let fastest = ks
        .iter()
        .enumerate()
        .filter_map(|(i, k)| Some((i, k.ms_per_token?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i);
    let (k_star, undecided) = match fastest {
        None => (None, Vec::new()),
        Some(f) => {
            let mut not_beaten: Vec<u32> = (0..sides.len())
                .filter(|&o| o != f && !beats(&data[f], &data[o], s))
                .map(|o| sides[o].k)
                .collect();
            if not_beaten.is_empty() {
                (Some(sides[f].k), Vec::new())
            } else {
                not_beaten.push(sides[f].k);
                not_beaten.sort_unstable();
                (None, not_beaten)
            }
        }
    };
    let deploy = k_star.unwrap_or_else(|| {
        ks.iter()
            .filter(|k| k.pays)
            .filter_map(|k| Some((k.k, k.ms_per_token?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(k, _)| k)
    });
    // An interval needs `min_samples` units of one run, or `min_runs` runs.
    let needed = |d: &Vec<Vec<f64>>| match d.len() {
        1 => s.min_samples.max(2),
        _ => s.min_runs.max(2),
    };
    let short: Vec<(u32, usize, usize)> = sides
        .iter()
        .zip(&data)
        .zip(&ks)
        .filter(|((_, d), kc)| kc.n < needed(d))
        .map(|((side, d), kc)| (side.k, kc.n, needed(d)))
        .collect();
    let too_few = k_star.is_none() && !short.is_empty();
    let sentence = if too_few {
        too_few_sentence(c, batch, &short)
    } else {
        cell_sentence(c, batch, k_star, &undecided, deploy, &ks)
    };
    Cell {
        context_tokens: c,
        batch,
        ks,
        k_star,
        undecided,
        deploy,
        too_few,
        sentence,
    }
}

/// A cell without the units an interval needs: it says so, and that K = 0 is the default
/// kept until it is measured, not a finding that no K pays.
fn too_few_sentence(c: u64, batch: u32, short: &[(u32, usize, usize)]) -> String {
    let which: Vec<String> = short
        .iter()
        .map(|(k, n, need)| format!("K = {k} has {n} of the {need} units an interval needs"))
        .collect();
    format!(
        "{} × batch {batch}: too few measurements to decide ({}): K = 0 is kept until measured further (more --reps, or --runs)",
        fmt_ctx(c),
        which.join(", ")
    )
}

fn cell_sentence(
    c: u64,
    batch: u32,
    k_star: Option<u32>,
    undecided: &[u32],
    deploy: u32,
    ks: &[KCell],
) -> String {
    let at = format!("{} × batch {batch}", fmt_ctx(c));
    let pays = |k: u32| {
        ks.iter()
            .find(|x| x.k == k)
            .and_then(|x| Some((x.speedup?, x.speedup_interval?)))
            .map(|(s, i)| format!(" ({s:.2}× the plain server, {:.2}–{:.2})", i.low, i.high))
            .unwrap_or_default()
    };
    match k_star {
        Some(0) => format!("{at}: K* = 0: the plain server beats every draft length"),
        Some(k) => format!("{at}: K* = {k}{}: faster than every other K", pays(k)),
        None if undecided.is_empty() => format!("{at}: no K measured here; deploy K = 0"),
        None => {
            let why = if deploy == 0 {
                "no K pays against the plain server, so K = 0".to_owned()
            } else {
                format!("deploy K = {deploy}{}, the fastest that pays", pays(deploy))
            };
            format!("{at}: undecided between {}: {why}", k_list(undecided))
        }
    }
}

/// K* per (L, batch) from one side per K (at least two, at most one per K value).
pub fn build(sides: &[KSide], s: &Settings) -> KSchedule {
    let mut sides: Vec<KSide> = sides.to_vec();
    sides.sort_by_key(|k| k.k);
    let contexts = common(&sides, |r| {
        r.samples
            .iter()
            .filter(|x| x.usable() && x.phase == Phase::Cold)
            .map(|x| x.context_tokens)
            .collect()
    });
    let batches = common(&sides, |r| r.header.config.concurrency_levels());
    let cells: Vec<Cell> = batches
        .iter()
        .flat_map(|&b| contexts.iter().map(move |&c| (b, c)))
        .map(|(b, c)| cell(&sides, c, b, s))
        .collect();
    let last_paying = batches
        .iter()
        .map(|&b| {
            let l = cells
                .iter()
                .filter(|c| c.batch == b && c.ks.iter().any(|k| k.pays))
                .map(|c| c.context_tokens)
                .max();
            (b, l)
        })
        .collect();
    let max_context = sides
        .iter()
        .flat_map(|k| k.runs.iter().filter_map(|r| r.header.server.max_context))
        .min();
    let mut notes = Vec::new();
    if !sides.iter().any(|k| k.k == 0) {
        notes.push("no K = 0 side: whether speculation pays at all is not known (add 0 to the K list: the server without speculation)".to_owned());
    }
    KSchedule {
        ks: sides.iter().map(|k| k.k).collect(),
        contexts,
        batches,
        cells,
        last_paying,
        max_context,
        level: s.level,
        notes,
    }
}

/// One rectangle of the deployable schedule: a batch range × a context range and its K.
/// The ranges are inclusive; `None` as an upper end is open (∞).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    /// Smallest batch size.
    pub batch_lo: u32,
    /// Largest batch size (`None`: no limit).
    pub batch_hi: Option<u32>,
    /// Shortest context.
    pub ctx_lo: u64,
    /// Longest context (`None`: no limit).
    pub ctx_hi: Option<u64>,
    /// The K to deploy.
    pub k: u32,
    /// The batch size measured for this rectangle (its lower end but for the first row,
    /// which reaches down to 1).
    pub measured_batch: u32,
    /// The lengths measured inside it; every other length of the rectangle is carried from
    /// the nearest measured one below it (below the first measured length: from above).
    pub measured_contexts: Vec<u64>,
    /// The cell was undecided (its K is the rule's choice, not a measured winner).
    pub undecided: bool,
    /// Undecided for want of measurements: its K = 0 is a default, not a finding.
    pub too_few: bool,
}

/// The deployable schedule: every batch ≥ 1 and every context ≥ 1 covered, each rectangle
/// carried from the measured cell at its lower corner (the first length's rectangle reaches
/// down to 1, the last up to ∞; likewise for batch). A K changes only at a measured length
/// or batch: no more resolution than was measured. Adjacent lengths with the same K merge.
pub fn buckets(s: &KSchedule) -> Vec<Bucket> {
    let mut out = Vec::new();
    for (bi, &b) in s.batches.iter().enumerate() {
        let batch_lo = if bi == 0 { 1 } else { b };
        let batch_hi = s.batches.get(bi + 1).map(|n| n - 1);
        let mut row: Vec<Bucket> = Vec::new();
        for (ci, &c) in s.contexts.iter().enumerate() {
            let Some(cell) = s
                .cells
                .iter()
                .find(|x| x.batch == b && x.context_tokens == c)
            else {
                continue;
            };
            let ctx_lo = if ci == 0 { 1 } else { c };
            let ctx_hi = s.contexts.get(ci + 1).map(|n| n - 1);
            match row.last_mut() {
                // Same K as the length before: one rectangle, carried from its first cell.
                Some(prev)
                    if prev.k == cell.deploy
                        && prev.undecided == cell.k_star.is_none()
                        && prev.too_few == cell.too_few =>
                {
                    prev.ctx_hi = ctx_hi;
                    prev.measured_contexts.push(c);
                }
                _ => row.push(Bucket {
                    batch_lo,
                    batch_hi,
                    ctx_lo,
                    ctx_hi,
                    k: cell.deploy,
                    measured_batch: b,
                    measured_contexts: vec![c],
                    undecided: cell.k_star.is_none(),
                    too_few: cell.too_few,
                }),
            }
        }
        out.extend(row);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ctxbench_schema::record::{RunConfig, Status, WaveStats};

    /// A run whose samples have `ms` per token at each (L, batch): `cells` lists
    /// (L, batch, values); at batch > 1 each value is one wave of `batch` requests.
    pub(crate) fn run(cells: &[(u64, u32, &[f64])]) -> Results {
        let mut r = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.samples.clear();
        let mut levels: Vec<u32> = cells.iter().map(|c| c.1).collect();
        levels.sort_unstable();
        levels.dedup();
        r.header.config = RunConfig {
            concurrency: levels,
            ..r.header.config.clone()
        };
        for &(c, b, vals) in cells {
            for (i, &v) in vals.iter().enumerate() {
                for slot in 0..b {
                    let mut s = Sample {
                        context_tokens: c,
                        status: Status::Ok,
                        phase: Phase::Cold,
                        length_ok: Some(true),
                        rep: i as u32,
                        ms_per_step: Some(v),
                        ..Sample::default()
                    };
                    if b > 1 {
                        s.concurrency = Some(b);
                        s.wave = Some(i as u32);
                        s.wave_stats = Some(WaveStats {
                            slot,
                            window_ms_per_step: Some(v),
                            ..WaveStats::default()
                        });
                    }
                    r.samples.push(s);
                }
            }
        }
        r
    }

    fn near(x: f64) -> [f64; 6] {
        [x * 0.99, x * 1.01, x, x * 0.995, x * 1.005, x]
    }

    #[test]
    fn the_fastest_k_that_beats_every_other_is_k_star_and_ties_are_undecided() {
        // 512: K=4 clearly fastest. 4k: K=2 and K=4 alike, both beat plain. 16k: plain wins.
        let plain = run(&[
            (512, 1, &near(10.0)),
            (4096, 1, &near(20.0)),
            (16384, 1, &near(40.0)),
        ]);
        let k2 = run(&[
            (512, 1, &near(7.0)),
            (4096, 1, &near(15.0)),
            (16384, 1, &near(48.0)),
        ]);
        let k4 = run(&[
            (512, 1, &near(5.0)),
            (4096, 1, &near(15.05)),
            (16384, 1, &near(60.0)),
        ]);
        let (p, a, b) = ([&plain], [&k2], [&k4]);
        let sides = [
            KSide { k: 4, runs: &b },
            KSide { k: 0, runs: &p },
            KSide { k: 2, runs: &a },
        ];
        let s = build(&sides, &Settings::default());
        assert_eq!(s.ks, [0, 2, 4]);
        assert_eq!(s.batches, [1]);
        let c = &s.cells;
        assert_eq!((c[0].k_star, c[0].deploy), (Some(4), 4));
        assert!(
            c[0].sentence
                .starts_with("512 × batch 1: K* = 4 (2.00× the plain server"),
            "{}",
            c[0].sentence
        );
        assert_eq!(c[1].k_star, None);
        assert_eq!(c[1].undecided, [2, 4]);
        assert_eq!(c[1].deploy, 2);
        assert!(
            c[1].sentence
                .contains("undecided between 2 and 4: deploy K = 2"),
            "{}",
            c[1].sentence
        );
        assert_eq!((c[2].k_star, c[2].deploy), (Some(0), 0));
        assert_eq!(s.last_paying, [(1, Some(4096))]);
    }

    #[test]
    fn a_batch_is_its_own_axis_with_the_wave_as_unit_and_nothing_paying_deploys_0() {
        let plain = run(&[(1024, 1, &near(10.0)), (1024, 2, &near(12.0))]);
        let k4 = run(&[
            (1024, 1, &near(6.0)),
            (1024, 2, &[11.0, 13.5, 12.0, 10.5, 13.0, 12.2]),
        ]);
        let (p, b) = ([&plain], [&k4]);
        let s = build(
            &[KSide { k: 0, runs: &p }, KSide { k: 4, runs: &b }],
            &Settings::default(),
        );
        assert_eq!(s.batches, [1, 2]);
        let two = s.cells.iter().find(|c| c.batch == 2).unwrap();
        // Six waves of two requests: six units, not twelve.
        assert_eq!(two.ks[1].n, 6);
        assert_eq!(two.k_star, None);
        assert_eq!(two.deploy, 0);
        assert!(
            two.sentence
                .contains("no K pays against the plain server, so K = 0"),
            "{}",
            two.sentence
        );
        assert_eq!(s.last_paying, [(1, Some(1024)), (2, None)]);
    }

    #[test]
    fn a_cell_with_too_few_samples_says_so_instead_of_no_k_pays() {
        // What `--precision` with its default --min-reps 3 leaves: three samples a K, where
        // an interval from one run needs six. K = 4 looks 2× faster but nothing is decided.
        let plain = run(&[(512, 1, &[10.0, 10.1, 9.9]), (2048, 1, &near(20.0))]);
        let k4 = run(&[(512, 1, &[5.0, 5.1, 4.9]), (2048, 1, &near(30.0))]);
        let (p, b) = ([&plain], [&k4]);
        let s = build(
            &[KSide { k: 0, runs: &p }, KSide { k: 4, runs: &b }],
            &Settings::default(),
        );
        let short = &s.cells[0];
        assert!(short.too_few && short.k_star.is_none(), "{short:?}");
        assert_eq!(short.deploy, 0);
        assert!(
            short.sentence.contains("too few measurements to decide")
                && short.sentence.contains("K = 4 has 3 of the 6 units")
                && !short.sentence.contains("no K pays"),
            "{}",
            short.sentence
        );
        // Six samples a side: a real verdict, plain wins.
        let long = &s.cells[1];
        assert!(!long.too_few);
        assert_eq!(long.k_star, Some(0));
        // The deployed K = 0 of the short cell is marked as a default, not merged with the
        // measured K = 0 above it.
        let u = buckets(&s);
        assert_eq!(u.len(), 2);
        assert!(u[0].too_few && !u[1].too_few);
    }

    #[test]
    fn buckets_cover_every_batch_and_length_and_change_only_at_measured_points() {
        let plain = run(&[
            (512, 1, &near(10.0)),
            (4096, 1, &near(20.0)),
            (16384, 1, &near(40.0)),
            (512, 4, &near(12.0)),
            (4096, 4, &near(22.0)),
            (16384, 4, &near(44.0)),
        ]);
        let k4 = run(&[
            (512, 1, &near(5.0)),
            (4096, 1, &near(10.0)),
            (16384, 1, &near(60.0)),
            (512, 4, &near(6.0)),
            (4096, 4, &near(30.0)),
            (16384, 4, &near(70.0)),
        ]);
        let (p, b) = ([&plain], [&k4]);
        let s = build(
            &[KSide { k: 0, runs: &p }, KSide { k: 4, runs: &b }],
            &Settings::default(),
        );
        let u = buckets(&s);
        // (batch_lo, batch_hi, ctx_lo, ctx_hi, K)
        type Row = (u32, Option<u32>, u64, Option<u64>, u32);
        let got: Vec<Row> = u
            .iter()
            .map(|b| (b.batch_lo, b.batch_hi, b.ctx_lo, b.ctx_hi, b.k))
            .collect();
        assert_eq!(
            got,
            [
                // Batch 1–3: K = 4 up to just below 16k (512 and 4k merged), then 0.
                (1, Some(3), 1, Some(16383), 4),
                (1, Some(3), 16384, None, 0),
                // Batch 4 and above: K = 4 only below 4k.
                (4, None, 1, Some(4095), 4),
                (4, None, 4096, None, 0),
            ]
        );
        assert_eq!(
            (u[0].measured_batch, &u[0].measured_contexts[..]),
            (1, &[512, 4096][..])
        );
        assert_eq!(
            (u[3].measured_batch, &u[3].measured_contexts[..]),
            (4, &[4096, 16384][..])
        );
        assert!(u.iter().all(|b| !b.undecided));
    }
}
