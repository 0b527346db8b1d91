//! Tail percentiles (p90, p95, p99) with a distribution-free confidence interval from order
//! statistics. Pure: no I/O.
//!
//! The number of samples below the true q-quantile is Binomial(n, q) whatever the
//! distribution, so the interval between the l-th and the u-th smallest sample covers it
//! with probability P(l ≤ B ≤ u − 1). The widest interval, min to max, covers it with
//! 1 − qⁿ − (1 − q)ⁿ: below the n where that reaches the confidence, no interval exists and
//! a "p99" is only the slowest request; the report then says how many samples it needs.

use serde::Serialize;

use super::spread::quantile;

/// The confidence of the report's tail intervals.
pub const CONFIDENCE: f64 = 0.95;

/// The tail percentiles the report shows, with their names.
pub const LEVELS: [(f64, &str); 3] = [(0.90, "p90"), (0.95, "p95"), (0.99, "p99")];

/// One tail percentile of one metric at one point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tail {
    /// The percentile's name (`p99`).
    pub name: &'static str,
    /// The quantile (0.99).
    pub q: f64,
    /// Samples measured.
    pub n: usize,
    /// Samples the interval needs at the report's confidence.
    pub needed: usize,
    /// The percentile (linear interpolation), only where the interval exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The interval's bounds: the `ranks`-th smallest samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<(f64, f64)>,
    /// The 1-based ranks of the interval's bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<(usize, usize)>,
}

impl Tail {
    /// What stands in for a percentile the samples cannot bound:
    /// `p99 needs n ≥ 299 for a 95% interval; 6 measured`.
    pub fn missing(&self) -> Option<String> {
        self.value.is_none().then(|| {
            format!(
                "{} needs n ≥ {} for a {:.0}% interval; {} measured",
                self.name,
                self.needed,
                CONFIDENCE * 100.0,
                self.n
            )
        })
    }
}

/// p90, p95 and p99 of one metric at one point, and the confidence they are bounded at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tails {
    /// The confidence of the intervals.
    pub confidence: f64,
    /// One per [`LEVELS`].
    pub levels: Vec<Tail>,
}

impl Tails {
    /// The tails of finite values; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Tails> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let levels = LEVELS
            .iter()
            .map(|&(q, name)| tail(&v, q, name, CONFIDENCE))
            .collect();
        Some(Tails {
            confidence: CONFIDENCE,
            levels,
        })
    }
}

/// One percentile of sorted, non-empty values with its interval at `confidence`.
pub fn tail(sorted: &[f64], q: f64, name: &'static str, confidence: f64) -> Tail {
    let n = sorted.len();
    let ranks = rank_interval(n, q, confidence);
    Tail {
        name,
        q,
        n,
        needed: n_needed(q, confidence),
        value: ranks.map(|_| quantile(sorted, q)),
        interval: ranks.map(|(l, u)| (sorted[l - 1], sorted[u - 1])),
        ranks,
    }
}

/// The least n for which min to max covers the q-quantile with at least `confidence`:
/// 1 − qⁿ − (1 − q)ⁿ ≥ confidence. 299 for p99 at 95%, 59 for p95, 29 for p90.
pub fn n_needed(q: f64, confidence: f64) -> usize {
    (2..10_000_000)
        .find(|&n| coverage_of_range(n, q) >= confidence)
        .unwrap_or(usize::MAX)
}

/// Coverage of the interval from the smallest to the largest of n samples.
fn coverage_of_range(n: usize, q: f64) -> f64 {
    let n = n as i32;
    1.0 - q.powi(n) - (1.0 - q).powi(n)
}

/// The binomial probabilities P(B = k), k = 0..=n, of B ~ Binomial(n, q), computed in logs
/// so that large n do not underflow.
fn binomial_pmf(n: usize, q: f64) -> Vec<f64> {
    let (lq, lr) = (q.ln(), (1.0 - q).ln());
    let mut ln_choose = 0.0_f64;
    (0..=n)
        .map(|k| {
            if k > 0 {
                ln_choose += ((n - k + 1) as f64).ln() - (k as f64).ln();
            }
            (ln_choose + k as f64 * lq + (n - k) as f64 * lr).exp()
        })
        .collect()
}

/// The 1-based ranks (l, u) whose order statistics bound the q-quantile of n samples with
/// at least `confidence`: grown from the binomial mode one rank at a time, always on the
/// side that adds more probability. `None` when even min to max is not enough.
pub fn rank_interval(n: usize, q: f64, confidence: f64) -> Option<(usize, usize)> {
    if n < 2 || !(0.0..1.0).contains(&q) || q <= 0.0 || n < n_needed(q, confidence) {
        return None;
    }
    let pmf = binomial_pmf(n, q);
    // B counts of samples below the quantile; [X_(a), X_(b+1)] covers it when a ≤ B ≤ b,
    // and a ≥ 1, b + 1 ≤ n for both order statistics to exist.
    let mode = (((n + 1) as f64 * q).floor() as usize).clamp(1, n - 1);
    let (mut a, mut b) = (mode, mode);
    let mut mass = pmf[mode];
    while mass < confidence {
        let left = if a > 1 { pmf[a - 1] } else { -1.0 };
        let right = if b + 1 < n { pmf[b + 1] } else { -1.0 };
        if left < 0.0 && right < 0.0 {
            return None;
        }
        if left >= right {
            a -= 1;
            mass += left;
        } else {
            b += 1;
            mass += right;
        }
    }
    Some((a, b + 1))
}

/// Coverage of the ranks (l, u) for the q-quantile of n samples: P(l ≤ B ≤ u − 1).
pub fn coverage(n: usize, q: f64, (l, u): (usize, usize)) -> f64 {
    binomial_pmf(n, q)[l..u].iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_needed_are_the_textbook_ones() {
        assert_eq!(n_needed(0.99, 0.95), 299);
        assert_eq!(n_needed(0.95, 0.95), 59);
        assert_eq!(n_needed(0.90, 0.95), 29);
        assert_eq!(n_needed(0.5, 0.95), 6);
    }

    #[test]
    fn a_p99_of_a_few_samples_is_missing_with_the_n_it_needs() {
        let t = Tails::of([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let p99 = t.levels[2];
        assert_eq!((p99.value, p99.interval, p99.ranks), (None, None, None));
        assert_eq!(
            p99.missing().unwrap(),
            "p99 needs n ≥ 299 for a 95% interval; 6 measured"
        );
    }

    #[test]
    fn the_median_of_ten_is_bounded_by_the_second_and_ninth() {
        // The published table: n = 10, median, 95% → (x₂, x₉), coverage 97.9%.
        assert_eq!(rank_interval(10, 0.5, 0.95), Some((2, 9)));
        assert!((coverage(10, 0.5, (2, 9)) - 0.9785).abs() < 1e-4);
        assert_eq!(rank_interval(5, 0.5, 0.95), None);
    }

    #[test]
    fn at_exactly_the_n_needed_the_interval_reaches_the_max() {
        // The slowest sample is the upper bound; the lower one needs no more than a few
        // ranks below it, as samples below the p99 are almost certain.
        let (l, u) = rank_interval(299, 0.99, 0.95).unwrap();
        assert_eq!(u, 299);
        assert!(l > 280 && coverage(299, 0.99, (l, u)) >= 0.95, "{l}");
        assert_eq!(rank_interval(298, 0.99, 0.95), None);
        let v: Vec<f64> = (1..=299).map(f64::from).collect();
        let t = tail(&v, 0.99, "p99", 0.95);
        assert_eq!(t.interval, Some((l as f64, 299.0)));
        assert!((t.value.unwrap() - 296.02).abs() < 1e-9);
    }

    #[test]
    fn large_n_does_not_underflow_and_brackets_the_quantile() {
        let v: Vec<f64> = (1..=20_000).map(f64::from).collect();
        let t = tail(&v, 0.99, "p99", 0.95);
        let (lo, hi) = t.interval.unwrap();
        let p = t.value.unwrap();
        assert!(lo < p && p < hi, "{lo} {p} {hi}");
        // ±1.96·√(n·q·(1−q)) ≈ ±28 ranks around 19,800.
        assert!(hi - lo < 80.0 && hi - lo > 80.0 / 2.0, "{lo} {hi}");
    }

    proptest::proptest! {
        #[test]
        fn the_ranks_cover_at_least_the_confidence(n in 2usize..2000, qi in 0usize..3) {
            let q = LEVELS[qi].0;
            match rank_interval(n, q, CONFIDENCE) {
                Some((l, u)) => {
                    proptest::prop_assert!(1 <= l && l < u && u <= n);
                    proptest::prop_assert!(coverage(n, q, (l, u)) >= CONFIDENCE);
                }
                None => proptest::prop_assert!(n < n_needed(q, CONFIDENCE)),
            }
        }
    }
}
