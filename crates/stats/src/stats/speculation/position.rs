//! A drafter-window cliff along the position inside the context (issue 45, point 2), from
//! the speculative steps a stream shows (`Sample::spec_steps_along`): each sample's position
//! buckets are the units, each with its draft tokens accepted per step (tokens per step − 1,
//! the step's own token taken out). The rule: the one split of the units by position that
//! best separates their means (the largest between-group sum of squares), kept when the two
//! sides' intervals do not overlap (the later side's upper end below the earlier side's lower
//! end) and the later mean is under half the earlier. Pure: no I/O.

use serde::Serialize;

use super::mean::MeanInterval;
use super::mean_interval;
use ctxbench_schema::record::{Phase, Results};

/// Units a side needs for an interval.
const MIN_SIDE: usize = 2;

/// One sample's bucket: where it starts, its width, and draft tokens accepted per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// First position of the bucket.
    pub position: u64,
    /// Positions in the bucket.
    pub width: u64,
    /// Draft tokens accepted per verify step in it.
    pub accepted_per_step: f64,
}

/// A fall in acceptance along the position, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionCliff {
    /// The fall lies after this position …
    pub after_position: u64,
    /// … and before this one (the buckets either side of the split).
    pub before_position: u64,
    /// Draft tokens accepted per step before the split, with its interval.
    pub before: MeanInterval,
    /// After it.
    pub after: MeanInterval,
    /// The finding in one sentence.
    pub message: String,
}

/// The units of a run: every usable cold speculative sample's buckets with at least one
/// step (a plain sample's record, from a client hiccup, is not read).
pub fn units_of(r: &Results) -> Vec<Unit> {
    r.samples
        .iter()
        .filter(|s| s.usable() && s.phase == Phase::Cold && super::is_speculative(s))
        .filter_map(|s| s.spec_steps_along.as_ref())
        .flat_map(|a| {
            a.buckets().map(|(position, steps, tokens)| Unit {
                position,
                width: u64::from(a.bucket_tokens),
                accepted_per_step: f64::from(tokens) / f64::from(steps) - 1.0,
            })
        })
        .collect()
}

fn interval(v: &[f64], level: f64) -> Option<MeanInterval> {
    mean_interval(&[v.to_vec()], false, level).map(|m| m.within(0.0, f64::INFINITY))
}

/// The fall along the position by the rule in the module docs, at confidence `level`.
pub fn find(units: &[Unit], level: f64) -> Option<PositionCliff> {
    let mut u = units.to_vec();
    u.sort_by_key(|x| x.position);
    let n = u.len();
    let mut best: Option<(f64, usize)> = None;
    for k in MIN_SIDE..=n.saturating_sub(MIN_SIDE) {
        // Split only between distinct positions.
        if u[k - 1].position == u[k].position {
            continue;
        }
        let mean = |s: &[Unit]| s.iter().map(|x| x.accepted_per_step).sum::<f64>() / s.len() as f64;
        let (l, r) = (mean(&u[..k]), mean(&u[k..]));
        let score = (k * (n - k)) as f64 / n as f64 * (l - r).powi(2);
        if l > r && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, k));
        }
    }
    let (_, k) = best?;
    let side = |s: &[Unit]| s.iter().map(|x| x.accepted_per_step).collect::<Vec<f64>>();
    let (a, b) = (
        interval(&side(&u[..k]), level)?,
        interval(&side(&u[k..]), level)?,
    );
    let (Some(a_low), Some(b_high)) = (a.low, b.high) else {
        return None;
    };
    if !(b_high < a_low && b.mean < a.mean / 2.0) {
        return None;
    }
    let (after_position, before_position) = (u[k - 1].position, u[k].position + u[k].width);
    let f = |x: f64| format!("{x:.2}");
    let message = format!(
        "along the position in the context (speculative steps read off the stream), draft tokens accepted per step fall from {} ({}–{}) to {} ({}–{}) between positions {} and {}: the intervals do not overlap and it more than halves — a drafter window shorter than the context is the usual cause (e.g. --speculative-dflash-draft-window-size, a sliding-window draft)",
        f(a.mean),
        f(a_low),
        f(a.high.unwrap_or(a.mean)),
        f(b.mean),
        f(b.low.unwrap_or(b.mean)),
        f(b_high),
        after_position,
        before_position
    );
    Some(PositionCliff {
        after_position,
        before_position,
        before: a,
        after: b,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(values: &[(u64, f64)]) -> Vec<Unit> {
        values
            .iter()
            .map(|&(position, accepted_per_step)| Unit {
                position,
                width: 16,
                accepted_per_step,
            })
            .collect()
    }

    #[test]
    fn a_fall_past_position_128_is_found_between_the_buckets_around_it() {
        // Measured shape (reference server, 128-token window draft): 8 accepted per step
        // up to 128, then 0.3–6 with a mean near 2.7.
        let mut v: Vec<(u64, f64)> = (0..6).map(|i| (33 + 16 * i, 8.0)).collect();
        let after = [
            0.33, 3.75, 6.0, 4.5, 4.33, 3.33, 1.0, 0.6, 5.0, 1.5, 2.0, 0.78,
        ];
        v.extend(
            after
                .iter()
                .enumerate()
                .map(|(i, &a)| (129 + 16 * i as u64, a)),
        );
        let c = find(&units(&v), 0.95).unwrap();
        assert_eq!((c.after_position, c.before_position), (113, 145));
        assert!((c.before.mean - 8.0).abs() < 1e-9);
        assert!(c.after.mean < 3.0, "{}", c.after.mean);
        assert!(
            c.message.contains("fall from 8.00 (8.00–8.00) to 2.76")
                && c.message.contains("between positions 113 and 145"),
            "{}",
            c.message
        );
    }

    #[test]
    fn flat_noisy_or_rising_acceptance_is_no_cliff() {
        let flat: Vec<(u64, f64)> = (0..12)
            .map(|i| (16 * i, 4.0 + (i % 3) as f64 * 0.5))
            .collect();
        assert_eq!(find(&units(&flat), 0.95), None);
        let rising: Vec<(u64, f64)> = (0..12)
            .map(|i| (16 * i, if i < 6 { 1.0 } else { 6.0 }))
            .collect();
        assert_eq!(find(&units(&rising), 0.95), None);
        // Apart but only a 40% fall.
        let small: Vec<(u64, f64)> = (0..12)
            .map(|i| (16 * i, if i < 6 { 5.0 } else { 3.0 }))
            .collect();
        assert_eq!(find(&units(&small), 0.95), None);
        // Too few units for two intervals.
        assert_eq!(find(&units(&[(0, 8.0), (16, 0.1), (32, 0.1)]), 0.95), None);
    }

    #[test]
    fn samples_at_one_position_are_not_split_apart() {
        // Two samples over the same buckets: the split falls between positions only.
        let mut v: Vec<(u64, f64)> = Vec::new();
        for _ in 0..2 {
            v.extend((0..4).map(|i| (16 * i, 7.0)));
            v.extend((4..8).map(|i| (16 * i, 0.5)));
        }
        let c = find(&units(&v), 0.95).unwrap();
        assert_eq!((c.after_position, c.before_position), (48, 80));
    }
}
