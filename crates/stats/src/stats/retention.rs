//! The retention map (`--mode retention`): per prefix length L, each cell's hits (by the warm
//! hit rule) after an idle gap (at pressure 0) or after foreign traffic (at gap 0), the TTFT
//! beside the cold TTFT of the same length, and each miss's named cause; then the map's edges
//! per L: the largest gap and pressure at which the prefix still came back in every
//! repetition, the first at which it did not, and what a miss costs. From the samples alone;
//! no I/O.

use serde::Serialize;

use super::Spread;
use ctxbench_schema::record::{Flag, Phase, Sample, Status};
use ctxbench_schema::warm;

/// One cell of the map: a length, a gap and a pressure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetentionCell {
    /// Cached prefix (L), tokens.
    pub prefix_tokens: u64,
    /// Appended tokens (N).
    pub new_tokens: u64,
    /// Planned idle gap, seconds.
    pub gap_s: f64,
    /// Planned foreign traffic, fraction of the pool.
    pub pressure: f64,
    /// Appends recorded (failures included).
    pub samples: usize,
    /// Appends with a verdict (completed, with a cached count): the n of "k of n".
    pub judged: usize,
    /// Of those, hits: the prefix came back (the k).
    pub hits: usize,
    /// Of those, misses (`cache_miss`).
    pub misses: usize,
    /// Median cached count the server reported.
    pub cached_tokens: Option<u64>,
    /// Longest idle time measured between a prime and its append, seconds.
    pub idle_s: Option<f64>,
    /// Median foreign prompt tokens the server counted before the append.
    pub foreign_tokens: Option<u64>,
    /// The pool the pressure is a fraction of, tokens.
    pub pool_tokens: Option<u64>,
    /// TTFT of the hits, ms.
    pub ttft_ms: Option<Spread>,
    /// TTFT of the misses, ms.
    pub miss_ttft_ms: Option<Spread>,
    /// Cold TTFT of L + N (the run's cold column), ms.
    pub cold_ttft_ms: Option<Spread>,
    /// Misses per named cause.
    pub causes: Vec<(String, usize)>,
    /// The evidence of the first miss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// A point on an axis: the value and k of n.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EdgePoint {
    /// The gap (s) or pressure (fraction of the pool).
    pub value: f64,
    /// Repetitions in which the prefix came back.
    pub hits: usize,
    /// Repetitions judged.
    pub judged: usize,
}

/// One axis's edge at one L.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edge {
    /// The largest value, before the first loss, at which every repetition came back
    /// (`None`: lost at the smallest value).
    pub held: Option<EdgePoint>,
    /// The first value at which a repetition did not come back (`None`: never lost).
    pub lost: Option<EdgePoint>,
    /// A larger value came back in every repetition after the loss: the edge is not sharp.
    pub recovered_after: bool,
}

/// The map's edges at one L.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetentionRow {
    /// Cached prefix (L), tokens.
    pub prefix_tokens: u64,
    /// Along the idle gap (seconds, at pressure 0).
    pub gap: Edge,
    /// Along the pressure (fraction of the pool, at gap 0).
    pub pressure: Edge,
    /// Median TTFT of every hit at this L, ms.
    pub warm_ms: Option<f64>,
    /// Median cold TTFT of L + N, ms.
    pub cold_ms: Option<f64>,
    /// What a miss costs: cold minus warm, seconds.
    pub miss_cost_s: Option<f64>,
}

/// The retention appends of a run.
fn appends(samples: &[Sample]) -> impl Iterator<Item = &Sample> {
    samples.iter().filter(|s| {
        s.phase == Phase::Append && s.warm.as_ref().is_some_and(|w| w.retention.is_some())
    })
}

type Key = (u64, u64, u64, u64);

fn key(s: &Sample) -> Option<Key> {
    let w = s.warm.as_ref()?;
    let r = w.retention.as_ref()?;
    Some((
        w.prefix_tokens,
        w.new_tokens,
        r.gap_s.to_bits(),
        r.pressure.to_bits(),
    ))
}

fn median_u64(v: impl IntoIterator<Item = u64>) -> Option<u64> {
    Spread::of(v.into_iter().map(|x| x as f64)).map(|s| s.median.round() as u64)
}

fn cold_of(samples: &[Sample], context: u64) -> Option<Spread> {
    Spread::of(
        samples
            .iter()
            .filter(|s| s.phase == Phase::Cold && s.usable() && s.context_tokens == context)
            .filter_map(|s| s.ttft_ms),
    )
}

/// Whether a retention append has a verdict, and whether it is a hit.
fn verdict(s: &Sample) -> Option<bool> {
    (s.status == Status::Ok && s.cached_tokens.is_some()).then(|| !s.has(&Flag::CacheMiss))
}

/// The cells of the map, L then pressure then gap ascending.
pub fn cells(samples: &[Sample]) -> Vec<RetentionCell> {
    let mut keys: Vec<Key> = appends(samples).filter_map(key).collect();
    keys.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then(f64::from_bits(a.3).total_cmp(&f64::from_bits(b.3)))
            .then(f64::from_bits(a.2).total_cmp(&f64::from_bits(b.2)))
    });
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let here: Vec<&Sample> = appends(samples).filter(|s| key(s) == Some(k)).collect();
            let hits: Vec<&Sample> = here.iter().copied().filter(|s| warm::usable(s)).collect();
            let missed: Vec<&Sample> = here
                .iter()
                .copied()
                .filter(|s| verdict(s) == Some(false))
                .collect();
            let info = |s: &Sample| s.warm.as_ref().and_then(|w| w.retention.clone());
            let mut causes: Vec<(String, usize)> = Vec::new();
            for s in &missed {
                let c = info(s)
                    .and_then(|r| r.cause)
                    .map_or("unnamed", |c| c.as_str());
                match causes.iter_mut().find(|(n, _)| n == c) {
                    Some((_, k)) => *k += 1,
                    None => causes.push((c.to_owned(), 1)),
                }
            }
            RetentionCell {
                prefix_tokens: k.0,
                new_tokens: k.1,
                gap_s: f64::from_bits(k.2),
                pressure: f64::from_bits(k.3),
                samples: here.len(),
                judged: here.iter().filter(|s| verdict(s).is_some()).count(),
                hits: here.iter().filter(|s| verdict(s) == Some(true)).count(),
                misses: missed.len(),
                cached_tokens: median_u64(here.iter().filter_map(|s| s.cached_tokens)),
                idle_s: here
                    .iter()
                    .filter_map(|s| info(s).map(|r| r.idle_s))
                    .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
                foreign_tokens: median_u64(
                    here.iter()
                        .filter_map(|s| info(s).map(|r| r.foreign_tokens)),
                ),
                pool_tokens: here
                    .iter()
                    .find_map(|s| info(s).and_then(|r| r.pool_tokens)),
                ttft_ms: Spread::of(hits.iter().filter_map(|s| s.ttft_ms)),
                miss_ttft_ms: Spread::of(missed.iter().filter_map(|s| s.ttft_ms)),
                cold_ttft_ms: cold_of(samples, k.0 + k.1),
                causes,
                evidence: missed
                    .iter()
                    .find_map(|s| s.warm.as_ref().and_then(|w| w.evidence.clone())),
            }
        })
        .collect()
}

/// The edge along one axis from its points `(value, hits, judged)` (any order; points
/// without a verdict are ignored).
pub fn edge(points: &[(f64, usize, usize)]) -> Edge {
    let mut pts: Vec<EdgePoint> = points
        .iter()
        .filter(|p| p.2 > 0)
        .map(|&(value, hits, judged)| EdgePoint {
            value,
            hits,
            judged,
        })
        .collect();
    pts.sort_by(|a, b| a.value.total_cmp(&b.value));
    let first_loss = pts.iter().position(|p| p.hits < p.judged);
    let before = &pts[..first_loss.unwrap_or(pts.len())];
    Edge {
        held: before.last().copied(),
        lost: first_loss.map(|i| pts[i]),
        recovered_after: first_loss
            .is_some_and(|i| pts[i + 1..].iter().any(|p| p.hits == p.judged)),
    }
}

/// The map's edges per L.
pub fn rows(cells: &[RetentionCell], samples: &[Sample]) -> Vec<RetentionRow> {
    let mut ls: Vec<(u64, u64)> = cells
        .iter()
        .map(|c| (c.prefix_tokens, c.new_tokens))
        .collect();
    ls.dedup();
    ls.into_iter()
        .map(|(l, n)| {
            let at: Vec<&RetentionCell> = cells.iter().filter(|c| c.prefix_tokens == l).collect();
            let axis = |gap: bool| -> Vec<(f64, usize, usize)> {
                at.iter()
                    .filter(|c| match gap {
                        true => c.pressure == 0.0,
                        false => c.gap_s == 0.0,
                    })
                    .map(|c| (if gap { c.gap_s } else { c.pressure }, c.hits, c.judged))
                    .collect()
            };
            let warm_ms = Spread::of(
                appends(samples)
                    .filter(|s| s.warm.as_ref().is_some_and(|w| w.prefix_tokens == l))
                    .filter(|s| warm::usable(s))
                    .filter_map(|s| s.ttft_ms),
            )
            .map(|s| s.median);
            let cold_ms = cold_of(samples, l + n).map(|s| s.median);
            RetentionRow {
                prefix_tokens: l,
                gap: edge(&axis(true)),
                pressure: edge(&axis(false)),
                miss_cost_s: match (cold_ms, warm_ms) {
                    (Some(c), Some(w)) => Some((c - w) / 1000.0),
                    _ => None,
                },
                warm_ms,
                cold_ms,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::warm::{MissCause, Retention, WarmInfo};

    fn append(l: u64, gap: f64, pressure: f64, hit: bool, ttft: f64) -> Sample {
        let mut s = Sample {
            phase: Phase::Append,
            context_tokens: l + 64,
            prompt_tokens: Some(l + 64),
            cached_tokens: Some(if hit { l } else { 0 }),
            length_ok: Some(true),
            ttft_ms: Some(ttft),
            warm: Some(WarmInfo {
                prefix_tokens: l,
                new_tokens: 64,
                expected_cached: l,
                allowance: 1,
                retention: Some(Retention {
                    gap_s: gap,
                    idle_s: gap,
                    pressure,
                    cause: (!hit).then_some(MissCause::CapacityEviction),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        warm::judge(&mut s);
        s
    }

    #[test]
    fn the_edge_is_the_last_value_held_in_every_rep_and_the_first_lost() {
        let e = edge(&[(0.0, 3, 3), (10.0, 3, 3), (60.0, 2, 3), (300.0, 0, 3)]);
        assert_eq!(e.held.map(|p| p.value), Some(10.0));
        let lost = e.lost.unwrap();
        assert_eq!((lost.value, lost.hits, lost.judged), (60.0, 2, 3));
        assert!(!e.recovered_after);
        // Never lost: held at the largest, nothing lost.
        let e = edge(&[(1.0, 2, 2), (0.0, 2, 2)]);
        assert_eq!((e.held.map(|p| p.value), e.lost), (Some(1.0), None));
        // Lost at the first value: nothing held.
        let e = edge(&[(0.0, 0, 2), (1.0, 0, 2)]);
        assert_eq!(e.held, None);
        assert_eq!(e.lost.map(|p| p.value), Some(0.0));
        // A later value that came back again: the edge is not sharp, and said so.
        let e = edge(&[(0.0, 2, 2), (0.5, 1, 2), (1.0, 2, 2)]);
        assert_eq!(e.held.map(|p| p.value), Some(0.0));
        assert!(e.recovered_after);
        // Cells without a verdict (failed, no count) do not count as held or lost.
        let e = edge(&[(0.0, 2, 2), (1.0, 0, 0), (2.0, 1, 1)]);
        assert_eq!((e.held.map(|p| p.value), e.lost), (Some(2.0), None));
    }

    #[test]
    fn the_map_has_both_axes_per_l_and_a_miss_costs_cold_minus_warm() {
        let mut samples = Vec::new();
        for l in [512u64, 1024] {
            samples.push(append(l, 0.0, 0.0, true, 10.0));
            samples.push(append(l, 0.0, 0.0, true, 12.0));
            samples.push(append(l, 5.0, 0.0, true, 11.0));
            samples.push(append(l, 0.0, 0.5, true, 11.0));
            samples.push(append(l, 0.0, 2.0, false, 900.0));
            samples.push(Sample {
                context_tokens: l + 64,
                prompt_tokens: Some(l + 64),
                cached_tokens: Some(0),
                length_ok: Some(true),
                ttft_ms: Some(1011.0),
                ..Default::default()
            });
        }
        let c = cells(&samples);
        assert_eq!(c.len(), 8, "{c:?}");
        let lost = c.iter().find(|c| c.pressure == 2.0).unwrap();
        assert_eq!((lost.hits, lost.judged, lost.misses), (0, 1, 1));
        assert_eq!(lost.causes, vec![("capacity_eviction".to_owned(), 1)]);
        assert_eq!(lost.cached_tokens, Some(0));
        assert!(lost.ttft_ms.is_none() && lost.miss_ttft_ms.is_some());
        let r = rows(&c, &samples);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].gap.held.map(|p| p.value), Some(5.0));
        assert_eq!(r[0].gap.lost, None);
        assert_eq!(r[0].pressure.held.map(|p| p.value), Some(0.5));
        assert_eq!(r[0].pressure.lost.map(|p| p.value), Some(2.0));
        // Cold 1011 ms, warm median of the hits 11 ms: a miss costs 1 s.
        assert!((r[0].miss_cost_s.unwrap() - 1.0).abs() < 1e-9, "{:?}", r[0]);
    }
}
