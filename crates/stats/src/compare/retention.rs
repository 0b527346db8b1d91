//! Two retention maps side by side by their edges (`compare` of two `--mode retention` runs):
//! per L, along the idle gap and along the pressure, the largest value held in every
//! repetition and the first lost, in A and in B, and what a miss costs on each side (cold
//! TTFT of L + N minus the warm TTFT of the hits at L) with a Welch interval. Each side's
//! runs are pooled. Pure.

use serde::Serialize;

use super::loaded::Loaded;
use crate::stats::retention::{cells, rows, RetentionRow};
use crate::stats::significance::t_quantile;
use ctxbench_schema::record::{Phase, Sample};
use ctxbench_schema::warm;

/// What a miss costs on one side: the mean cold TTFT of L + N minus the mean warm TTFT of
/// the hits at L, with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MissCost {
    /// Mean cold minus mean warm, seconds.
    pub mean_s: f64,
    /// Lower end of the Welch interval, seconds (`None` with fewer than 2 of either).
    pub low_s: Option<f64>,
    /// Upper end.
    pub high_s: Option<f64>,
    /// Cold samples of L + N.
    pub n_cold: usize,
    /// Warm hits at L.
    pub n_warm: usize,
}

/// One L of the two maps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeRow {
    /// Cached prefix (L), tokens.
    pub prefix_tokens: u64,
    /// A's edges at L (`None`: A did not measure L).
    pub a: Option<RetentionRow>,
    /// B's edges at L.
    pub b: Option<RetentionRow>,
    /// What a miss costs in A.
    pub a_cost: Option<MissCost>,
    /// What a miss costs in B.
    pub b_cost: Option<MissCost>,
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = match v.len() {
        0 | 1 => 0.0,
        _ => v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0),
    };
    (m, var)
}

/// Cold minus warm with a `level` Welch interval, in seconds (inputs in ms).
pub fn miss_cost(cold: &[f64], warm: &[f64], level: f64) -> Option<MissCost> {
    if cold.is_empty() || warm.is_empty() {
        return None;
    }
    let ((mc, vc), (mw, vw)) = (mean_var(cold), mean_var(warm));
    let (nc, nw) = (cold.len() as f64, warm.len() as f64);
    let diff = mc - mw;
    let half = match (cold.len() >= 2 && warm.len() >= 2, vc / nc + vw / nw) {
        (false, _) => None,
        (true, 0.0) => Some(0.0),
        (true, se2) => {
            // Welch–Satterthwaite degrees of freedom.
            let df = se2 * se2 / ((vc / nc).powi(2) / (nc - 1.0) + (vw / nw).powi(2) / (nw - 1.0));
            Some(t_quantile(0.5 + level / 2.0, df) * se2.sqrt())
        }
    };
    Some(MissCost {
        mean_s: diff / 1000.0,
        low_s: half.map(|h| (diff - h) / 1000.0),
        high_s: half.map(|h| (diff + h) / 1000.0),
        n_cold: cold.len(),
        n_warm: warm.len(),
    })
}

fn retention_appends(s: &Sample) -> bool {
    s.phase == Phase::Append && s.warm.as_ref().is_some_and(|w| w.retention.is_some())
}

/// A side's rows and miss costs per L.
fn side(g: &[Loaded], level: f64) -> Vec<(RetentionRow, Option<MissCost>)> {
    let samples: Vec<Sample> = g.iter().flat_map(|(_, _, r)| r.samples.clone()).collect();
    let c = cells(&samples);
    rows(&c, &samples)
        .into_iter()
        .map(|r| {
            let n = c
                .iter()
                .find(|c| c.prefix_tokens == r.prefix_tokens)
                .map_or(0, |c| c.new_tokens);
            let cold: Vec<f64> = samples
                .iter()
                .filter(|s| s.phase == Phase::Cold && s.usable())
                .filter(|s| s.context_tokens == r.prefix_tokens + n)
                .filter_map(|s| s.ttft_ms)
                .collect();
            let warm: Vec<f64> = samples
                .iter()
                .filter(|s| retention_appends(s) && warm::usable(s))
                .filter(|s| {
                    s.warm
                        .as_ref()
                        .is_some_and(|w| w.prefix_tokens == r.prefix_tokens)
                })
                .filter_map(|s| s.ttft_ms)
                .collect();
            let cost = miss_cost(&cold, &warm, level);
            (r, cost)
        })
        .collect()
}

/// The two maps' edges per L (every L either side measured, ascending); empty when neither
/// side has a retention append.
pub fn edges(a: &[Loaded], b: &[Loaded], level: f64) -> Vec<EdgeRow> {
    let (sa, sb) = (side(a, level), side(b, level));
    let mut ls: Vec<u64> = sa
        .iter()
        .chain(sb.iter())
        .map(|(r, _)| r.prefix_tokens)
        .collect();
    ls.sort_unstable();
    ls.dedup();
    let find = |s: &[(RetentionRow, Option<MissCost>)], l: u64| {
        s.iter().find(|(r, _)| r.prefix_tokens == l).cloned()
    };
    ls.into_iter()
        .map(|l| {
            let (a, a_cost) = find(&sa, l).map_or((None, None), |(r, c)| (Some(r), c));
            let (b, b_cost) = find(&sb, l).map_or((None, None), |(r, c)| (Some(r), c));
            EdgeRow {
                prefix_tokens: l,
                a,
                b,
                a_cost,
                b_cost,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::{Results, Status};
    use ctxbench_schema::warm::{Retention, WarmInfo};

    fn append(l: u64, pressure: f64, hit: bool, ttft: f64) -> Sample {
        let mut s = Sample {
            phase: Phase::Append,
            context_tokens: l + 64,
            prompt_tokens: Some(l + 64),
            cached_tokens: Some(if hit { l } else { 0 }),
            length_ok: Some(true),
            status: Status::Ok,
            ttft_ms: Some(ttft),
            warm: Some(WarmInfo {
                prefix_tokens: l,
                new_tokens: 64,
                expected_cached: l,
                allowance: 1,
                retention: Some(Retention {
                    pressure,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        warm::judge(&mut s);
        s
    }

    fn cold(l: u64, ttft: f64) -> Sample {
        Sample {
            context_tokens: l + 64,
            prompt_tokens: Some(l + 64),
            cached_tokens: Some(0),
            length_ok: Some(true),
            ttft_ms: Some(ttft),
            ..Default::default()
        }
    }

    fn side_of(samples: Vec<Sample>) -> Vec<Loaded> {
        let mut r: Results = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.samples = samples;
        vec![("x".into(), "x.jsonl".into(), r)]
    }

    #[test]
    fn the_edges_sit_side_by_side_with_each_sides_miss_cost() {
        // A keeps the prefix under pressure 1; B loses it at 0.5.
        let a = side_of(vec![
            append(1024, 0.0, true, 20.0),
            append(1024, 0.0, true, 22.0),
            append(1024, 0.5, true, 21.0),
            append(1024, 1.0, true, 23.0),
            cold(1024, 1000.0),
            cold(1024, 1010.0),
        ]);
        let b = side_of(vec![
            append(1024, 0.0, true, 30.0),
            append(1024, 0.0, true, 34.0),
            append(1024, 0.5, false, 900.0),
            cold(1024, 1200.0),
            cold(1024, 1220.0),
            cold(2048, 2000.0),
            append(2048, 0.0, true, 40.0),
        ]);
        let e = edges(&a, &b, 0.95);
        assert_eq!(e.len(), 2);
        let (ea, eb) = (e[0].a.as_ref().unwrap(), e[0].b.as_ref().unwrap());
        assert_eq!(ea.pressure.held.map(|p| p.value), Some(1.0));
        assert_eq!(ea.pressure.lost, None);
        assert_eq!(eb.pressure.held.map(|p| p.value), Some(0.0));
        assert_eq!(eb.pressure.lost.map(|p| (p.value, p.hits)), Some((0.5, 0)));
        // A: cold 1005 ms − warm 21.5 ms; its interval around it.
        let ca = e[0].a_cost.unwrap();
        assert!((ca.mean_s - 0.9835).abs() < 1e-9, "{ca:?}");
        assert!(ca.low_s.unwrap() < ca.mean_s && ca.mean_s < ca.high_s.unwrap());
        assert_eq!((ca.n_cold, ca.n_warm), (2, 4));
        // B's misses do not count as warm: cold 1210 − warm 32.
        assert!((e[0].b_cost.unwrap().mean_s - 1.178).abs() < 1e-9);
        // 2k only in B: A's side empty, B's without an interval (one of each).
        assert!(e[1].a.is_none() && e[1].a_cost.is_none());
        let cb = e[1].b_cost.unwrap();
        assert_eq!((cb.low_s, cb.high_s), (None, None));
    }

    #[test]
    fn the_welch_interval_widens_with_the_spread_and_is_a_point_without_any() {
        let tight = miss_cost(&[1000.0, 1000.0], &[10.0, 10.0], 0.95).unwrap();
        assert_eq!((tight.low_s, tight.high_s), (Some(0.99), Some(0.99)));
        let wide = miss_cost(&[900.0, 1100.0, 1000.0], &[10.0, 12.0], 0.95).unwrap();
        assert!(wide.high_s.unwrap() - wide.low_s.unwrap() > 0.2, "{wide:?}");
        assert!(miss_cost(&[], &[1.0], 0.95).is_none());
    }
}
