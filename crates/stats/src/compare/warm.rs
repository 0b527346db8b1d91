//! The warm half of `ctxbench compare`: two `--mode append` runs (cache on vs off, two
//! servers) compared per (L, N) cell on TTFT_inc, and two `--mode tiers` runs per (L, tier)
//! cell, with the same interval and verdict as the cold cells
//! ([`crate::stats::significance::compare_cell`]). Unlike the warm summaries, every
//! completed sample of the right length counts here, hit or miss: a side whose cache is off
//! is exactly the thing compared; each side's hits and misses are counted beside the ratio so
//! the reader sees which side the cache served. Conversation runs are not compared (their
//! turns depend on generated answers, so the two runs' prompts differ), and say so. Pure.

use serde::Serialize;

use super::loaded::Loaded;
use super::retention::{edges, EdgeRow};
use crate::stats::metric::Metric;
use crate::stats::significance::{self, RatioInterval, Settings, Verdict};
use ctxbench_schema::record::{Flag, Phase, Sample, Status};
use ctxbench_schema::warm::{self, WarmMode};

/// B against A on the warm cells of two warm runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarmComparison {
    /// The warm mode both sides ran (`None`: they differ, or one side is cold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<WarmMode>,
    /// One row per cell present on both sides, L then N (then tier) ascending.
    pub rows: Vec<WarmRow>,
    /// Why nothing (or not everything) warm was compared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// `retention`: the two maps' edges per L and each side's miss cost.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<EdgeRow>,
}

/// B/A of TTFT_inc at one warm cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarmRow {
    /// Cached prefix (L).
    pub prefix_tokens: u64,
    /// Appended tokens (N).
    pub new_tokens: u64,
    /// `tiers`: the tier (`live`, `ram`, `disk`, `cold`); `retention`: the cell (`gap 10 s`,
    /// `pressure 0.5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Sessions appending at once (`--concurrency`; 1: one session).
    pub concurrency: u32,
    /// Median TTFT_inc of A (median of run medians with several runs), ms.
    pub a: Option<f64>,
    /// Same for B.
    pub b: Option<f64>,
    /// B/A of the geometric means.
    pub ratio: Option<f64>,
    /// Its interval; `None` with too few runs or samples.
    pub interval: Option<RatioInterval>,
    /// Units (samples or runs) of A behind the interval.
    pub n_a: usize,
    /// Units of B.
    pub n_b: usize,
    /// What it means.
    pub verdict: Verdict,
    /// A's completed samples whose reuse was proven (cached count reaches L).
    pub a_hits: usize,
    /// A's samples flagged `cache_miss`.
    pub a_misses: usize,
    /// B's proven hits.
    pub b_hits: usize,
    /// B's `cache_miss` samples.
    pub b_misses: usize,
}

impl WarmRow {
    /// The cell as written in tables: `4k + 128`, `4k + 128 ×2` for two sessions at once,
    /// or `4k + 128 ram` for a tier.
    pub fn label(&self) -> String {
        let mut base = format!(
            "{} + {}",
            ctxbench_schema::units::fmt_ctx(self.prefix_tokens),
            ctxbench_schema::units::fmt_ctx(self.new_tokens)
        );
        if self.concurrency > 1 {
            base.push_str(&format!(" ×{}", self.concurrency));
        }
        match &self.tier {
            Some(t) => format!("{base} {t}"),
            None => base,
        }
    }

    /// The interval, when a verdict was possible (as the compare table's rows show theirs).
    pub fn shown_interval(&self) -> Option<RatioInterval> {
        self.interval
            .filter(|_| !matches!(self.verdict, Verdict::TooFewRuns | Verdict::TooFewSamples))
    }

    /// The significance result behind this row (TTFT_inc is a time: longer is worse), for
    /// the gate (`ctxbench compare --fail-if-slower`).
    pub fn cell(&self, basis: significance::Basis) -> significance::CellComparison {
        significance::CellComparison {
            metric: Metric::TtftMs,
            n_a: self.n_a,
            n_b: self.n_b,
            basis,
            ratio: self.ratio,
            interval: self.interval,
            verdict: self.verdict,
        }
    }

    /// Whether every sample of B at this cell was a cache miss (and there was one).
    pub fn b_all_missed(&self) -> bool {
        self.b_misses > 0 && self.b_hits == 0
    }
}

/// (L, N, sessions at once, tier).
type Key = (u64, u64, u32, Option<String>);

fn mode_of(g: &[Loaded]) -> Option<WarmMode> {
    g.first()
        .and_then(|(_, _, r)| r.header.config.warm.as_ref().map(|w| w.mode))
}

fn key(s: &Sample) -> Option<Key> {
    let w = s.warm.as_ref()?;
    let tier = match s.phase {
        // A retention cell: its gap or its pressure, in the tier's place.
        Phase::Append => w
            .retention
            .as_ref()
            .map(|r| match (r.gap_s > 0.0, r.pressure > 0.0) {
                (true, true) => format!("gap {} s pressure {}", r.gap_s, r.pressure),
                (false, true) => format!("pressure {}", r.pressure),
                _ => format!("gap {} s", r.gap_s),
            }),
        Phase::Tier => Some(w.tier?.as_str().to_owned()),
        _ => return None,
    };
    Some((
        w.prefix_tokens,
        w.new_tokens,
        s.concurrency.unwrap_or(1),
        tier,
    ))
}

/// Counted: completed, of the right length, not overlapped (hit or miss alike).
fn counted(s: &Sample) -> bool {
    s.status == Status::Ok && s.length_ok != Some(false) && s.clean()
}

fn keys(g: &[Loaded]) -> Vec<Key> {
    let mut k: Vec<Key> = g
        .iter()
        .flat_map(|(_, _, r)| r.samples.iter().filter_map(key))
        .collect();
    k.sort();
    k.dedup();
    k
}

fn at<'a>(r: &'a ctxbench_schema::record::Results, k: &'a Key) -> impl Iterator<Item = &'a Sample> {
    r.samples
        .iter()
        .filter(move |s| counted(s) && key(s).as_ref() == Some(k))
}

fn median(v: &[f64]) -> Option<f64> {
    crate::stats::Spread::of(v.iter().copied()).map(|s| s.median)
}

/// The warm comparison of B against A; `None` when neither side is a warm run.
pub fn compare(a: &[Loaded], b: &[Loaded], s: &Settings) -> Option<WarmComparison> {
    let (ma, mb) = (mode_of(a), mode_of(b));
    if ma.is_none() && mb.is_none() {
        return None;
    }
    let mut out = WarmComparison {
        mode: None,
        rows: Vec::new(),
        notes: Vec::new(),
        edges: Vec::new(),
    };
    let name = |m: Option<WarmMode>| m.map_or("a cold sweep", |m| m.as_str());
    if ma != mb {
        out.notes.push(format!(
            "warm cells not compared: A is {} and B is {} (compare two runs of the same --mode)",
            name(ma),
            name(mb)
        ));
        return Some(out);
    }
    out.mode = ma;
    if ma == Some(WarmMode::Conversation) {
        out.notes.push(
            "conversation runs are not compared turn by turn: each turn appends the answer the server generated, so the two runs' prompts differ after the first turn; compare two --mode append runs for TTFT_inc at fixed (L, N), or read each run's trajectory with `ctxbench report`"
                .into(),
        );
        return Some(out);
    }
    if ma == Some(WarmMode::Retention) {
        out.edges = edges(a, b, s.level);
    }
    let kb = keys(b);
    for k in keys(a).into_iter().filter(|k| kb.contains(k)) {
        let runs = |g: &[Loaded]| -> Vec<Vec<f64>> {
            g.iter()
                .map(|(_, _, r)| at(r, &k).filter_map(|s| s.ttft_ms).collect())
                .collect()
        };
        let tally = |g: &[Loaded]| -> (usize, usize) {
            g.iter().fold((0, 0), |(h, m), (_, _, r)| {
                let here: Vec<&Sample> = at(r, &k).collect();
                (
                    h + here.iter().filter(|s| warm::usable(s)).count(),
                    m + here.iter().filter(|s| s.has(&Flag::CacheMiss)).count(),
                )
            })
        };
        let (va, vb) = (runs(a), runs(b));
        let cell = significance::compare_cell(Metric::TtftMs, &va, &vb, s);
        let center = |v: &[Vec<f64>]| {
            let meds: Vec<f64> = v.iter().filter_map(|r| median(r)).collect();
            median(&meds)
        };
        let ((a_hits, a_misses), (b_hits, b_misses)) = (tally(a), tally(b));
        out.rows.push(WarmRow {
            prefix_tokens: k.0,
            new_tokens: k.1,
            concurrency: k.2,
            tier: k.3.clone(),
            a: center(&va),
            b: center(&vb),
            ratio: cell.ratio,
            interval: cell.interval,
            n_a: cell.n_a,
            n_b: cell.n_b,
            verdict: cell.verdict,
            a_hits,
            a_misses,
            b_hits,
            b_misses,
        });
    }
    if out.rows.is_empty() {
        out.notes.push(
            "no warm cell was measured by both runs (different --contexts or --append): nothing warm to compare"
                .into(),
        );
    }
    Some(out)
}

/// Why two warm runs did not measure the same warm cells (different mode or appends).
pub fn mismatches(
    a: &ctxbench_schema::record::Results,
    b: &ctxbench_schema::record::Results,
) -> Vec<String> {
    let (x, y) = (a.header.config.warm.as_ref(), b.header.config.warm.as_ref());
    match (x, y) {
        (Some(x), Some(y)) if x.mode != y.mode => vec![format!(
            "warm mode differs: {} vs {}",
            x.mode.as_str(),
            y.mode.as_str()
        )],
        (Some(x), Some(y)) if x.appends != y.appends => vec![format!(
            "appended tokens differ: {:?} vs {:?}",
            x.appends, y.appends
        )],
        (Some(x), None) | (None, Some(x)) => vec![format!(
            "one run is --mode {} and the other a cold sweep",
            x.mode.as_str()
        )],
        _ => Vec::new(),
    }
}

/// The lines under the warm table: what counts and which side the cache served.
pub fn notes(w: &WarmComparison) -> Vec<String> {
    let mut out = w.notes.clone();
    if w.rows.is_empty() {
        return out;
    }
    out.insert(
        0,
        "TTFT_inc of every completed warm sample, hit or miss (hits: cached count reached L; misses: flagged cache_miss, the prefix was recomputed)"
            .into(),
    );
    let b_off = w.rows.iter().all(WarmRow::b_all_missed);
    let a_off = w.rows.iter().all(|r| r.a_misses > 0 && r.a_hits == 0);
    if b_off && !a_off {
        out.push(
            "every sample of B was a cache miss: B/A is the cost of recomputing the prefix".into(),
        );
    }
    if a_off && !b_off {
        out.push("every sample of A was a cache miss: B/A is the saving of B's cache".into());
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use ctxbench_schema::record::{Results, Sample};
    use ctxbench_schema::warm::{WarmConfig, WarmInfo};

    /// A run of `mode` with eight append samples at 4k + 128 of TTFT `ttft`, `ttft` + 1, …
    /// ms, all proven hits (`hit`) or all misses.
    pub(crate) fn run(mode: WarmMode, ttft: f64, hit: bool) -> Loaded {
        let mut r: Results = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.header.config.warm = Some(WarmConfig {
            mode,
            appends: vec![128],
            turn_tokens: None,
            ttft_target_ms: None,
            negative_control: !hit,
            gaps_s: Vec::new(),
            pressure: Vec::new(),
            grid: false,
        });
        r.samples = (0..8)
            .map(|i| {
                let mut s = Sample {
                    phase: Phase::Append,
                    status: Status::Ok,
                    ttft_ms: Some(ttft + i as f64),
                    cached_tokens: Some(if hit { 4096 } else { 0 }),
                    length_ok: Some(true),
                    warm: Some(WarmInfo {
                        prefix_tokens: 4096,
                        new_tokens: 128,
                        expected_cached: 4096,
                        allowance: 1,
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                warm::judge(&mut s);
                s
            })
            .collect();
        ("x".into(), "x.jsonl".into(), r)
    }

    #[test]
    fn a_cache_off_side_is_compared_on_its_misses_and_called_slower() {
        let a = vec![run(WarmMode::Append, 20.0, true)];
        let b = vec![run(WarmMode::Append, 200.0, false)];
        let w = compare(&a, &b, &Settings::default()).expect("warm");
        assert_eq!(w.rows.len(), 1, "{w:?}");
        let r = &w.rows[0];
        assert_eq!((r.prefix_tokens, r.new_tokens), (4096, 128));
        assert_eq!((r.a_hits, r.a_misses, r.b_hits, r.b_misses), (8, 0, 0, 8));
        assert_eq!(r.verdict, Verdict::Slower);
        assert!(r.ratio.is_some_and(|x| x > 5.0), "{r:?}");
        assert!(notes(&w).iter().any(|n| n.contains("every sample of B")));
        // The other way round B is the faster side.
        let w = compare(&b, &a, &Settings::default()).expect("warm");
        assert_eq!(w.rows[0].verdict, Verdict::Faster);
    }

    #[test]
    fn conversation_runs_and_mixed_modes_say_why_nothing_warm_was_compared() {
        let a = vec![run(WarmMode::Conversation, 20.0, true)];
        let w = compare(&a, &a, &Settings::default()).expect("warm");
        assert!(w.rows.is_empty());
        assert!(w.notes[0].contains("conversation runs are not compared"));
        let b = vec![run(WarmMode::Append, 20.0, true)];
        let w = compare(&a, &b, &Settings::default()).expect("warm");
        assert!(w.rows.is_empty() && w.notes[0].contains("A is conversation and B is append"));
        let mut cold = run(WarmMode::Append, 20.0, true);
        cold.2.header.config.warm = None;
        assert!(compare(&[cold.clone()], &[cold], &Settings::default()).is_none());
    }
}
