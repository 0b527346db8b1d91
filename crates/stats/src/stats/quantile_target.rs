//! A precision target on a percentile (`--precision P --precision-of p90`): how precisely
//! a point's p90 TTFT and p90 step time are known from the distribution-free interval of
//! their order statistics (`tail`, the report's tails), and whether a point can stop.
//! Pure: no I/O.
//!
//! The interval exists only from the n `tail::n_needed` gives (29 for p90 at 95%): that n
//! is the floor of the point's repetitions. Its half-width is relative to the percentile
//! and taken on the wider side: at n near the floor the upper bound is the slowest sample
//! and the interval is far from symmetric, so half its length would understate the side
//! that matters.

use super::tail;

/// The confidence of the intervals: the report's tail intervals'.
pub const CONFIDENCE: f64 = tail::CONFIDENCE;

/// A percentile's name as the CLI and the report spell it: `p90`, `p99.9`.
pub use ctxbench_schema::record::quantile_name as name;

/// Reads `median` / `p50` (`None`: the median, the default target) or `pNN` with
/// 0 < NN < 100 (`Some(NN / 100)`).
pub fn parse(s: &str) -> Result<Option<f64>, String> {
    let t = s.trim().to_ascii_lowercase();
    if t == "median" {
        return Ok(None);
    }
    let pct: f64 = t
        .strip_prefix('p')
        .and_then(|v| v.parse().ok())
        .filter(|p: &f64| p.is_finite() && *p > 0.0 && *p < 100.0)
        .ok_or_else(|| {
            format!("{s}: give median or a percentile such as p90, p95, p99 (between p0 and p100)")
        })?;
    // Rounded to the 1e-8 so that p99.9 reads back as 0.999, not 0.999000…01.
    Ok(((pct - 50.0).abs() > 1e-9).then_some((pct * 1e6).round() / 1e8))
}

/// The fewest samples whose q-quantile has a 95% interval: the floor of a point's
/// repetitions under this target.
pub fn min_n(q: f64) -> usize {
    tail::n_needed(q, CONFIDENCE)
}

/// The repetition cap a percentile target takes when `--max-reps` is not given: three
/// times the floor (87 for p90), so that the interval can narrow past the min-to-max one it
/// starts as; never below `default_cap`.
pub fn default_cap(q: f64, default_cap: u32) -> u32 {
    u32::try_from(min_n(q).saturating_mul(3))
        .unwrap_or(u32::MAX)
        .max(default_cap)
}

/// Relative half-width of the q-quantile's 95% interval from `values`' order statistics,
/// on the wider side: max(hi / x_q, x_q / lo) − 1. `None` below [`min_n`] samples or where
/// a bound is not positive.
pub fn half_width(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    v.sort_by(f64::total_cmp);
    let (l, u) = tail::rank_interval(v.len(), q, CONFIDENCE)?;
    let x = super::spread::quantile(&v, q);
    (x > 0.0).then(|| (v[u - 1] / x).max(x / v[l - 1]) - 1.0)
}

/// The relative half-width of the q-quantile's interval that `n` samples would give if
/// they came as `values` did: the ranks `n` samples use read as quantiles of `values`' own
/// distribution (the wider side, as [`half_width`]); what a cap of `n` would reach. `None`
/// below [`min_n`] samples here or for `n`.
pub fn half_width_at(values: &[f64], q: f64, n: usize) -> Option<f64> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if v.len() < min_n(q) {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let (l, u) = tail::rank_interval(n, q, CONFIDENCE)?;
    let at = |rank: usize| super::spread::quantile(&v, rank as f64 / (n as f64 + 1.0));
    let x = super::spread::quantile(&v, q);
    (x > 0.0).then(|| (at(u) / x).max(x / at(l)) - 1.0)
}

/// Whether a point whose usable samples have TTFTs `ttft_ms` and step times `step_ms`
/// (ms per generated token) has both their q-quantiles within ±`target`.
pub fn precise(ttft_ms: &[f64], step_ms: &[f64], q: f64, target: f64) -> bool {
    half_width(ttft_ms, q).is_some_and(|w| w <= target)
        && half_width(step_ms, q).is_some_and(|w| w <= target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_parses_the_percentiles() {
        assert_eq!(parse("p90"), Ok(Some(0.9)));
        assert_eq!(parse("P99.9"), Ok(Some(0.999)));
        assert_eq!(parse("median"), Ok(None));
        assert_eq!(parse("p50"), Ok(None));
        for bad in ["90", "p0", "p100", "pfoo", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(name(0.9), "p90");
        assert_eq!(name(0.999), "p99.9");
        assert_eq!((min_n(0.9), min_n(0.95), min_n(0.99)), (29, 59, 299));
        assert_eq!(default_cap(0.9, 30), 87);
        assert_eq!(default_cap(0.5, 30), 30);
    }

    #[test]
    fn no_interval_below_the_floor_however_tight_the_samples() {
        let v = vec![100.0; 28];
        assert_eq!(half_width(&v, 0.9), None);
        assert!(!precise(&v, &vec![50.0; 28], 0.9, 0.5));
        let v = vec![100.0; 29];
        assert_eq!(half_width(&v, 0.9), Some(0.0));
        assert!(precise(&v, &vec![50.0; 29], 0.9, 0.01));
    }

    #[test]
    fn the_half_width_is_the_wider_side_and_the_slowest_sample_bounds_it_at_the_floor() {
        // 1..=29: the p90 interval at n = 29 is (x_l, x_29), upper bound the maximum.
        let v: Vec<f64> = (1..=29).map(f64::from).collect();
        let (l, u) = tail::rank_interval(29, 0.9, CONFIDENCE).unwrap();
        assert_eq!(u, 29);
        let x = crate::stats::quantile(&v, 0.9);
        let want = (29.0 / x).max(x / l as f64) - 1.0;
        assert!((half_width(&v, 0.9).unwrap() - want).abs() < 1e-12);
        // A slow outlier widens the p90's interval, where the median's barely moves.
        let mut slow = v.clone();
        slow[28] = 290.0;
        assert!(half_width(&slow, 0.9).unwrap() > 5.0 * half_width(&v, 0.9).unwrap());
    }

    #[test]
    fn more_samples_of_the_same_spread_narrow_the_interval() {
        // The same spread of values (a fixed grid of quantiles of one distribution) at
        // growing n: the interval narrows, so a target the floor misses is reached later.
        let at = |n: usize| {
            let v: Vec<f64> = (1..=n)
                .map(|k| 100.0 * (0.2 * (k as f64 / (n + 1) as f64 - 0.5)).exp())
                .collect();
            half_width(&v, 0.9).unwrap()
        };
        let (w29, w87, w300) = (at(29), at(87), at(300));
        assert!(w29 > w87 && w87 > w300, "{w29} {w87} {w300}");
        assert!(w300 < 0.02 && w29 > 0.02, "{w29} {w300}");
    }
}
