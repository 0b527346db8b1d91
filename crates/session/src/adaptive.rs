//! Adaptive repetitions: keep measuring a point until the median is known precisely enough,
//! or its budget is spent. Pure decisions, no I/O.

/// Confidence level of the median's interval.
pub const CONFIDENCE: f64 = 0.95;

/// Distribution-free confidence interval of the median from order statistics: the interval
/// [x(k), x(n−k+1)] covers the median with probability ≥ `CONFIDENCE` (binomial argument).
/// `None` when n is too small for any such interval (n < 6 at 95%).
pub fn median_ci(values: &[f64]) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let n = v.len();
    if n == 0 {
        return None;
    }
    v.sort_by(f64::total_cmp);
    // Largest k with P(Binom(n, 1/2) < k) ≤ α/2.
    let alpha_half = (1.0 - CONFIDENCE) / 2.0;
    let mut cdf = 0.0;
    let mut k = 0usize;
    for i in 0..n {
        let p = binom_pmf(n, i);
        if cdf + p > alpha_half {
            break;
        }
        cdf += p;
        k = i + 1;
    }
    if k == 0 {
        return None;
    }
    Some((v[k - 1], v[n - k]))
}

fn binom_pmf(n: usize, i: usize) -> f64 {
    // ln C(n, i) − n ln 2, summed in logs to stay finite for large n.
    let ln_c: f64 = (0..i)
        .map(|j| ((n - j) as f64).ln() - ((j + 1) as f64).ln())
        .sum();
    (ln_c - n as f64 * std::f64::consts::LN_2).exp()
}

/// Fewest values whose median has a distribution-free CI at the loop's confidence (6 at
/// 95%): with fewer, progress lines say "n/a" and why.
pub fn min_values_for_ci() -> usize {
    (1..64)
        .find(|&n| median_ci(&vec![1.0; n]).is_some())
        .unwrap_or(64)
}

/// Relative half-width of the median's CI: (hi − lo) / 2 / median.
pub fn relative_half_width(values: &[f64]) -> Option<f64> {
    let (lo, hi) = median_ci(values)?;
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let med = ctxbench_stats::stats::quantile(&v, 0.5);
    (med.abs() > 0.0).then(|| (hi - lo) / 2.0 / med.abs())
}

use ctxbench_schema::record::{Flag, Sample};
pub use ctxbench_schema::record::{QuantileCi, RepPolicy, StopReason};
use ctxbench_stats::stats::quantile_target;

/// A usable sample's step time where the report counts its decode: not where client and
/// server disagree, not an output that ended early (as `stats::summarize` does).
pub fn counted_step_ms(s: &Sample) -> Option<f64> {
    if s.has(&Flag::ClientServerDisagree) || s.has(&Flag::ShortOutput) {
        return None;
    }
    s.ms_per_step
}

/// What a point reached on the percentile a `--precision-of` target names: the
/// half-widths of its TTFT's and step time's intervals, and the samples they need.
pub fn quantile_ci(q: f64, p: &PointProgress) -> QuantileCi {
    QuantileCi {
        q,
        needed: quantile_target::min_n(q),
        ttft_half_width: quantile_target::half_width(&p.ttft_ms, q),
        step_half_width: quantile_target::half_width(&p.step_ms, q),
    }
}

/// State of one point, as the loop sees it.
#[derive(Debug, Clone, Default)]
pub struct PointProgress {
    /// Repetitions taken so far (usable or not).
    pub reps: u32,
    /// TTFTs of usable samples (ms).
    pub ttft_ms: Vec<f64>,
    /// Decode rates of usable samples (tok/s).
    pub decode: Vec<f64>,
    /// Step times (ms per generated token) of usable samples whose decode the report counts
    /// (not client≠server, not a short output; see [`counted_step_ms`]): the samples its
    /// step-time tails are of, and a percentile target's.
    pub step_ms: Vec<f64>,
    /// Seconds spent on this point's repetitions beyond `min_reps` (what the point budget
    /// limits: the minimum is always taken, whatever it costs).
    pub beyond_min_s: f64,
    /// Server seconds of the repetitions taken (see `Sample::server_s`).
    pub server_s: f64,
}

impl PointProgress {
    /// Counts one repetition that took `secs`; only time beyond the first `min_reps`
    /// repetitions counts against the point budget.
    pub fn add_rep(&mut self, secs: f64, min_reps: u32) {
        if self.reps >= min_reps {
            self.beyond_min_s += secs;
        }
        self.reps += 1;
    }
}

/// The repetition decision of a [`RepPolicy`] (the policy is the results file's; the
/// decision, which reads the measurements, is the loop's).
pub trait Decide {
    /// Whether to take another repetition; `Err(reason)` to stop. `run_elapsed_s` is the
    /// run's time so far; `next_cost_s` the predicted cost of one more repetition.
    fn next(
        &self,
        p: &PointProgress,
        run_elapsed_s: f64,
        next_cost_s: Option<f64>,
    ) -> Result<(), StopReason>;
}

impl Decide for RepPolicy {
    fn next(
        &self,
        p: &PointProgress,
        run_elapsed_s: f64,
        next_cost_s: Option<f64>,
    ) -> Result<(), StopReason> {
        let Some(target) = self.precision else {
            return if p.reps < self.max_reps {
                Ok(())
            } else {
                Err(StopReason::FixedReps)
            };
        };
        if p.reps < self.min_reps {
            return Ok(());
        }
        let precise = |v: &[f64]| relative_half_width(v).is_some_and(|w| w <= target);
        // A percentile target (`--precision-of`) judges that percentile's interval alone;
        // below the samples it needs there is none, so the point goes on.
        let reached = match self.quantile {
            Some(q) => quantile_target::precise(&p.ttft_ms, &p.step_ms, q, target),
            None => precise(&p.ttft_ms) && precise(&p.decode),
        };
        if reached {
            return Err(StopReason::PrecisionReached);
        }
        if p.reps >= self.max_reps {
            return Err(StopReason::MaxReps);
        }
        let cost = next_cost_s.unwrap_or(0.0);
        if let Some(b) = self.run_budget_s {
            if run_elapsed_s + cost > b {
                return Err(StopReason::RunBudget);
            }
        }
        if let Some(b) = self.point_budget_s {
            if p.beyond_min_s + cost > b {
                return Err(StopReason::PointBudget);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_ci_needs_six_samples_at_95_percent() {
        assert!(median_ci(&[1.0, 2.0, 3.0, 4.0, 5.0]).is_none());
        let (lo, hi) = median_ci(&[6.0, 1.0, 5.0, 2.0, 4.0, 3.0]).unwrap();
        assert_eq!((lo, hi), (1.0, 6.0));
        // n = 20: k = 6 (P(B < 6) = 0.0207 ≤ 0.025), so [x(6), x(15)].
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(median_ci(&v).unwrap(), (6.0, 15.0));
    }

    #[test]
    fn fixed_reps_without_precision() {
        let pol = RepPolicy {
            precision: None,
            min_reps: 3,
            max_reps: 3,
            point_budget_s: None,
            run_budget_s: None,
            design: None,
            quantile: None,
        };
        let mut p = PointProgress::default();
        for _ in 0..3 {
            assert!(pol.next(&p, 0.0, None).is_ok());
            p.reps += 1;
        }
        assert_eq!(pol.next(&p, 0.0, None), Err(StopReason::FixedReps));
    }

    fn policy() -> RepPolicy {
        RepPolicy {
            precision: Some(0.05),
            min_reps: 3,
            max_reps: 30,
            point_budget_s: Some(60.0),
            run_budget_s: Some(600.0),
            design: None,
            quantile: None,
        }
    }

    #[test]
    fn tight_data_stops_on_precision_noisy_data_on_max_or_budget() {
        let tight = PointProgress {
            reps: 8,
            ttft_ms: vec![100.0, 101.0, 99.0, 100.5, 100.2, 99.8, 100.1, 100.0],
            decode: vec![50.0; 8],
            beyond_min_s: 1.0,
            ..Default::default()
        };
        assert_eq!(
            policy().next(&tight, 1.0, Some(0.1)),
            Err(StopReason::PrecisionReached)
        );
        let noisy = PointProgress {
            reps: 8,
            ttft_ms: vec![50.0, 150.0, 80.0, 120.0, 60.0, 140.0, 100.0, 90.0],
            decode: vec![50.0; 8],
            beyond_min_s: 1.0,
            ..Default::default()
        };
        assert!(policy().next(&noisy, 1.0, Some(0.1)).is_ok());
        assert_eq!(
            policy().next(&noisy, 1.0, Some(60.0)),
            Err(StopReason::PointBudget)
        );
        assert_eq!(
            policy().next(&noisy, 599.0, Some(2.0)),
            Err(StopReason::RunBudget)
        );
        let mut maxed = noisy.clone();
        maxed.reps = 30;
        assert_eq!(
            policy().next(&maxed, 1.0, Some(0.1)),
            Err(StopReason::MaxReps)
        );
    }

    #[test]
    fn a_tight_ttft_does_not_stop_a_point_whose_decode_rate_is_noisy() {
        let p = PointProgress {
            reps: 8,
            ttft_ms: vec![100.0; 8],
            decode: vec![30.0, 70.0, 40.0, 60.0, 35.0, 65.0, 50.0, 45.0],
            beyond_min_s: 1.0,
            ..Default::default()
        };
        assert!(relative_half_width(&p.ttft_ms).unwrap() <= 0.05);
        assert!(policy().next(&p, 1.0, Some(0.1)).is_ok());
        // And the converse: tight decode, noisy TTFT.
        let q = PointProgress {
            ttft_ms: p.decode.clone(),
            decode: p.ttft_ms.clone(),
            ..p
        };
        assert!(policy().next(&q, 1.0, Some(0.1)).is_ok());
    }

    fn p90_policy() -> RepPolicy {
        RepPolicy {
            quantile: Some(0.9),
            max_reps: 87,
            ..policy()
        }
    }

    fn progress(ttft_ms: Vec<f64>, decode: Vec<f64>) -> PointProgress {
        PointProgress {
            reps: ttft_ms.len() as u32,
            ttft_ms,
            step_ms: decode.iter().map(|r| 1000.0 / r).collect(),
            decode,
            beyond_min_s: 1.0,
            ..Default::default()
        }
    }

    #[test]
    fn a_p90_target_does_not_stop_below_the_samples_its_interval_needs() {
        // Identical samples: the median's interval is within any target from 6 samples on,
        // the p90's does not exist below 29.
        let p = progress(vec![100.0; 28], vec![50.0; 28]);
        assert_eq!(
            policy().next(&p, 1.0, Some(0.1)),
            Err(StopReason::PrecisionReached)
        );
        assert!(p90_policy().next(&p, 1.0, Some(0.1)).is_ok());
        let q = quantile_ci(0.9, &p);
        assert_eq!((q.needed, q.ttft_half_width), (29, None));
        let p = progress(vec![100.0; 29], vec![50.0; 29]);
        assert_eq!(
            p90_policy().next(&p, 1.0, Some(0.1)),
            Err(StopReason::PrecisionReached)
        );
        assert_eq!(quantile_ci(0.9, &p).step_half_width, Some(0.0));
    }

    #[test]
    fn a_p90_target_goes_on_while_the_tail_is_wide_and_stops_at_the_cap() {
        // 40 samples whose bulk is tight but whose slowest tenth is spread over 1.3–2×: the
        // median is known to ±0.5%, the p90 is not known to ±5%.
        let ttft: Vec<f64> = (0..40)
            .map(|k| match k < 36 {
                true => 100.0 + 0.01 * f64::from(k),
                false => 130.0 + 20.0 * f64::from(k - 36),
            })
            .collect();
        let p = progress(ttft, vec![50.0; 40]);
        assert!(relative_half_width(&p.ttft_ms).unwrap() < 0.005);
        assert_eq!(
            policy().next(&p, 1.0, Some(0.1)),
            Err(StopReason::PrecisionReached)
        );
        let w = quantile_ci(0.9, &p).ttft_half_width.unwrap();
        assert!(w > 0.05, "{w}");
        assert!(p90_policy().next(&p, 1.0, Some(0.1)).is_ok());
        // A noisy step time alone keeps it going too.
        let steady = progress(
            vec![100.0; 40],
            p.ttft_ms.iter().map(|t| 5000.0 / t).collect(),
        );
        assert!(p90_policy().next(&steady, 1.0, Some(0.1)).is_ok());
        let capped = PointProgress { reps: 87, ..p };
        // A step time the report does not count (client and server disagree) is not judged.
        let mut s = Sample {
            ms_per_step: Some(20.0),
            ..Sample::default()
        };
        assert_eq!(counted_step_ms(&s), Some(20.0));
        s.flags.push(Flag::ClientServerDisagree);
        assert_eq!(counted_step_ms(&s), None);
        assert_eq!(
            p90_policy().next(&capped, 1.0, Some(0.1)),
            Err(StopReason::MaxReps)
        );
    }

    #[test]
    fn min_reps_are_always_taken() {
        let p = PointProgress {
            reps: 2,
            beyond_min_s: 1e9,
            ..Default::default()
        };
        assert!(policy().next(&p, 1e9, Some(1e9)).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn ci_brackets_the_median(v in proptest::collection::vec(0.0f64..1e6, 6..80)) {
            let (lo, hi) = median_ci(&v).unwrap();
            let mut s = v.clone();
            s.sort_by(f64::total_cmp);
            let m = ctxbench_stats::stats::quantile(&s, 0.5);
            proptest::prop_assert!(lo <= m && m <= hi);
        }
    }
}
