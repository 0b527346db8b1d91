//! Bootstrap confidence interval for the ratio of two medians (run B over run A). No I/O.
//!
//! Each resample draws n_A values from A and n_B from B with replacement and takes
//! median(B*) / median(A*); the interval is the percentile interval of those ratios
//! (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13). With few repetitions the
//! interval is coarse but honest: it can only be as narrow as the data allow.

use rand::{RngExt, SeedableRng};
use serde::Serialize;

use super::quantile;

/// Bootstrap refits behind an extrapolation band.
pub const EXTRAPOLATION_RESAMPLES: usize = 400;
/// Fixed seed: the same results file always gives the same report.
pub const SEED: u64 = 0x00C7_8BE7;

/// Ratio of medians with a percentile bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioCi {
    /// median(B) / median(A).
    pub ratio: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// Coverage, e.g. 0.95.
    pub level: f64,
    /// Values from A.
    pub n_a: usize,
    /// Values from B.
    pub n_b: usize,
}

impl RatioCi {
    /// The interval excludes 1: the difference is significant at this level.
    pub fn excludes_one(&self) -> bool {
        self.low > 1.0 || self.high < 1.0
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile(v, 0.5)
}

/// The ratio of medians of `b` over `a` with a `level` interval from `resamples` resamples;
/// `None` when either side has no finite value or A's median is not positive.
pub fn ratio_of_medians(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<RatioCi> {
    let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
    let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let ma = median(&mut a.clone());
    if ma <= 0.0 {
        return None;
    }
    let ratio = median(&mut b.clone()) / ma;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ra = vec![0.0; a.len()];
    let mut rb = vec![0.0; b.len()];
    let mut ratios = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for x in ra.iter_mut() {
            *x = a[rng.random_range(0..a.len())];
        }
        for x in rb.iter_mut() {
            *x = b[rng.random_range(0..b.len())];
        }
        let d = median(&mut ra);
        if d > 0.0 {
            ratios.push(median(&mut rb) / d);
        }
    }
    ratios.retain(|r| r.is_finite());
    ratios.sort_by(f64::total_cmp);
    let tail = (1.0 - level.clamp(0.0, 1.0)) / 2.0;
    let (low, high) = if ratios.is_empty() {
        (ratio, ratio)
    } else {
        (quantile(&ratios, tail), quantile(&ratios, 1.0 - tail))
    };
    Some(RatioCi {
        ratio,
        low: low.min(ratio),
        high: high.max(ratio),
        level,
        n_a: a.len(),
        n_b: b.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_clear_speedup_excludes_one() {
        let a = [100.0, 102.0, 98.0, 101.0, 99.0];
        let b = [50.0, 51.0, 49.0, 50.5, 49.5];
        let r = ratio_of_medians(&a, &b, 1000, 0.95, 1).unwrap();
        assert!((r.ratio - 0.5).abs() < 1e-9);
        assert!(r.excludes_one() && r.high < 0.6, "{r:?}");
    }

    #[test]
    fn overlapping_samples_do_not_exclude_one() {
        let a = [100.0, 120.0, 80.0, 110.0];
        let b = [105.0, 90.0, 115.0, 95.0];
        let r = ratio_of_medians(&a, &b, 1000, 0.95, 1).unwrap();
        assert!(!r.excludes_one(), "{r:?}");
    }

    #[test]
    fn empty_or_zero_baseline_gives_none() {
        assert!(ratio_of_medians(&[], &[1.0], 10, 0.95, 1).is_none());
        assert!(ratio_of_medians(&[0.0], &[1.0], 10, 0.95, 1).is_none());
    }

    proptest! {
        #[test]
        fn interval_brackets_the_ratio_and_scales(
            a in proptest::collection::vec(1.0f64..1e3, 1..8),
            b in proptest::collection::vec(1.0f64..1e3, 1..8),
            k in 0.1f64..10.0,
        ) {
            let r = ratio_of_medians(&a, &b, 200, 0.95, 3).unwrap();
            prop_assert!(r.low <= r.ratio && r.ratio <= r.high);
            let bk: Vec<f64> = b.iter().map(|x| x * k).collect();
            let rk = ratio_of_medians(&a, &bk, 200, 0.95, 3).unwrap();
            prop_assert!((rk.ratio - r.ratio * k).abs() <= 1e-9 * rk.ratio.max(1.0));
        }
    }
}
