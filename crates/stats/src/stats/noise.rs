//! A noise model shared across context lengths: how precisely a point's median is known
//! from n samples when the *relative* spread of a metric is the same at every length. Used
//! by the designed sweep (`--design auto`) to decide how many samples each length needs, and
//! by the report to state each figure's interval. Pure: no I/O.
//!
//! # The model
//! Timings are multiplicative: a 2% jitter at 1k is 2% at 128k. On the log scale a metric's
//! samples at one length scatter around that length's centre with one standard deviation σ
//! for every length, so samples taken where they are cheap estimate σ for the lengths where
//! they are expensive.
//!
//! - **σ, pooled and robust**: 1.0483 × the median of |ln xᵢ − ln xⱼ| over every pair of
//!   samples *of the same length* (Shamos' estimator, pooled), each length weighing as its
//!   degrees of freedom. The median of pairwise differences ignores a preempted request, as
//!   the reported median does, and a pair from one length carries no between-length trend.
//!   Its efficiency for normal data is 86%, so it is credited with 0.86 × Σ(nᵢ − 1) degrees
//!   of freedom.
//! - **The median's interval**: for n normal samples Var(median) = k(n) σ²/n, with k(n)
//!   from [`MEDIAN_VARIANCE`] (1 for n ≤ 2, π/2 in the limit). The 95% interval of the log
//!   median is ± t(df) √(k(n)/n) σ, t with the model's degrees of freedom: a model pooled
//!   over many cheap samples gives t ≈ 2, and a length needs only the samples that make
//!   √(k(n)/n) small enough. The relative half-width stated is the upper side,
//!   exp(h) − 1 (the wider one).
//! - **The check**: a length whose own spread is not the model's (another regime, a second
//!   client, a point that pages) is caught by an F test of its own log-scale variance
//!   against the pooled one ([`consistency`]); such a length is then judged on its own
//!   samples alone ([`own_half_width`]: t with n − 1 degrees of freedom), which costs it
//!   samples, as it should.

use serde::Serialize;

use super::significance::{f_sf, t_quantile};

/// Confidence level of every interval here.
pub const LEVEL: f64 = 0.95;

/// Shamos' constant: σ = 1.0483 × median |xᵢ − xⱼ| for normal data (1 / (√2 Φ⁻¹(3/4))).
pub const SHAMOS: f64 = 1.0483;

/// Efficiency of Shamos' estimator against the standard deviation for normal data.
pub const SHAMOS_EFFICIENCY: f64 = 0.86;

/// A length whose spread has p below this against the model is judged on its own.
pub const REGIME_P: f64 = 0.01;

/// n·Var(median)/σ² for n normal samples, n = 1…40 (computed by numerical integration of
/// the order statistics' densities; the even n average the two middle values, hence the
/// zigzag). Beyond 40: the limit π/2, an upper bound (at n = 41, the last entry's variance
/// per sample, so it never rises).
pub const MEDIAN_VARIANCE: [f64; 40] = [
    1.0, 1.0, 1.346, 1.1928, 1.4342, 1.2885, 1.4731, 1.3455, 1.4949, 1.3833, 1.5088, 1.4103,
    1.5184, 1.4305, 1.5254, 1.4462, 1.5308, 1.4588, 1.535, 1.4691, 1.5385, 1.4777, 1.5413, 1.485,
    1.5437, 1.4913, 1.5457, 1.4967, 1.5474, 1.5015, 1.5489, 1.5058, 1.5503, 1.5096, 1.5514, 1.513,
    1.5525, 1.5161, 1.5534, 1.5189,
];

/// k(n) of [`MEDIAN_VARIANCE`].
pub fn median_variance(n: usize) -> f64 {
    let last = MEDIAN_VARIANCE.len();
    match n {
        0 => f64::INFINITY,
        n if n <= last => MEDIAN_VARIANCE[n - 1],
        // Never more per sample than the table's last entry: Var(median) keeps falling.
        n => std::f64::consts::FRAC_PI_2.min(MEDIAN_VARIANCE[last - 1] * n as f64 / last as f64),
    }
}

/// The smallest n in `lo..=hi` for which `ok` holds, `ok` being false below some n and
/// true from it on (a half-width falls with every sample); `None` when `ok(hi)` is false.
fn smallest(lo: u32, hi: u32, ok: impl Fn(u32) -> bool) -> Option<u32> {
    if lo > hi || !ok(hi) {
        return None;
    }
    if ok(lo) {
        return Some(lo);
    }
    // ok(b) and not ok(a), always.
    let (mut a, mut b) = (lo, hi);
    while b - a > 1 {
        let m = a + (b - a) / 2;
        match ok(m) {
            true => b = m,
            false => a = m,
        }
    }
    Some(b)
}

/// One metric's log-scale spread, pooled over the lengths it was estimated from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LogSpread {
    /// σ of ln(value) (0.02 ≈ 2% relative spread).
    pub sd: f64,
    /// Degrees of freedom credited to it.
    pub df: f64,
    /// Lengths that contributed at least one pair.
    pub points: usize,
    /// Samples at those lengths.
    pub samples: usize,
    /// d ln σ / d ln L applied to get `sd` at the length judged ([`LengthTrend`]; 0: the
    /// same relative spread at every length).
    pub slope: f64,
}

/// Natural logs of the finite, positive values.
pub fn logs(values: &[f64]) -> Vec<f64> {
    values
        .iter()
        .filter(|x| x.is_finite() && **x > 0.0)
        .map(|x| x.ln())
        .collect()
}

/// The pooled spread of several lengths' samples (raw values, one slice per length); `None`
/// without a single pair of samples at one length. Each length weighs as its degrees of
/// freedom (n − 1), not as its n(n − 1)/2 pairs: the cheapest length, which takes the most
/// samples, would otherwise be the whole model.
pub fn pooled(groups: &[&[f64]]) -> Option<LogSpread> {
    // (|difference|, weight) of every pair within a length.
    let mut diffs: Vec<(f64, f64)> = Vec::new();
    let (mut points, mut samples, mut dof) = (0, 0, 0usize);
    for g in groups {
        let l = logs(g);
        if l.len() < 2 {
            continue;
        }
        points += 1;
        samples += l.len();
        dof += l.len() - 1;
        let w = 2.0 / l.len() as f64;
        for i in 0..l.len() {
            for j in i + 1..l.len() {
                diffs.push(((l[i] - l[j]).abs(), w));
            }
        }
    }
    if diffs.is_empty() {
        return None;
    }
    diffs.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(LogSpread {
        sd: SHAMOS * weighted_median(&diffs),
        df: SHAMOS_EFFICIENCY * dof as f64,
        points,
        samples,
        slope: 0.0,
    })
}

/// One-sided 95% normal quantile: the trend used is the smallest decrease of the spread
/// with length that the data establish at this level.
const TREND_Z: f64 = 1.645;

/// A relative spread that falls with length: σ(L) = σ̄ · max(1, (min(L, L_top) / L̄)^slope),
/// with slope ≤ 0 — used only to judge the lengths *noisier* than the pool (the cheap ones),
/// never to judge a length quieter than the pooled level. Fitted to the per-length spreads (Shamos, robust) of the lengths with at
/// least three samples: weighted least squares of ln s on ln L, each weighing as the
/// inverse variance of ln s (≈ 2 × 0.86 × (n − 1)). The slope used is the *upper* end of its
/// one-sided 95% interval, capped at 0: only a decrease the data establish is used, so noise
/// at cheap lengths (additive scheduler jitter on a 45 ms TTFT) stops making the model
/// pessimistic at long lengths without ever assuming a long length is quieter than shown.
/// A rising spread is left to the per-length check. Below the pooled level the factor is
/// held at 1 ([`LengthTrend::factor`]): no extrapolated fall.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthTrend {
    /// d ln σ / d ln L (≤ 0).
    pub slope: f64,
    /// ln L̄: the weighted centre of the lengths, where the pooled σ applies.
    pub centre: f64,
    /// ln L_top: the longest length fitted.
    pub top: f64,
}

impl LengthTrend {
    /// The factor σ(L) / σ̄, never below 1: a length is never judged quieter than the pooled
    /// lengths measured (issue 47: a fall σ ∝ L^-0.93 fitted on 1k–8k judged 16k and 32k on
    /// two samples each at ±1.6%, and a fixed run minutes later landed 16% away). Only a
    /// cheap length noisier than the pool is judged with more.
    pub fn factor(&self, context: u64) -> f64 {
        let x = (context.max(1) as f64).ln().min(self.top);
        (self.slope * (x - self.centre)).exp().max(1.0)
    }

    /// `m` at `context`: its σ scaled by the trend, the slope recorded.
    pub fn apply(&self, m: LogSpread, context: u64) -> LogSpread {
        LogSpread {
            sd: m.sd * self.factor(context),
            slope: self.slope,
            ..m
        }
    }
}

/// The trend of a metric's relative spread over `groups` (context, raw values); `None`
/// without three lengths of at least three samples spanning 4× in length, or when no
/// decrease is established.
pub fn length_trend(groups: &[(u64, &[f64])]) -> Option<LengthTrend> {
    // (ln L, ln s, weight)
    let pts: Vec<(f64, f64, f64)> = groups
        .iter()
        .filter_map(|&(c, v)| {
            let n = logs(v).len();
            let s = pooled(&[v])?.sd;
            (n >= 3 && s > 0.0 && c > 0).then(|| {
                let w = 2.0 * SHAMOS_EFFICIENCY * (n - 1) as f64;
                ((c as f64).ln(), s.ln(), w)
            })
        })
        .collect();
    let (lo, hi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    if pts.len() < 3 || hi - lo < 4f64.ln() {
        return None;
    }
    let sw: f64 = pts.iter().map(|p| p.2).sum();
    let xm = pts.iter().map(|p| p.0 * p.2).sum::<f64>() / sw;
    let ym = pts.iter().map(|p| p.1 * p.2).sum::<f64>() / sw;
    let sxx: f64 = pts.iter().map(|p| p.2 * (p.0 - xm).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| p.2 * (p.0 - xm) * (p.1 - ym)).sum();
    // Known variances (the weights are inverse variances): se(b) = 1/√Sxx.
    let upper = sxy / sxx + TREND_Z / sxx.sqrt();
    (upper < 0.0).then_some(LengthTrend {
        slope: upper.max(-1.0),
        centre: xm,
        top: hi,
    })
}

/// The weighted median of sorted (value, weight) pairs: the value where the cumulative
/// weight reaches half the total (the mean of the two values when it lands on a boundary).
fn weighted_median(sorted: &[(f64, f64)]) -> f64 {
    let half = sorted.iter().map(|x| x.1).sum::<f64>() / 2.0;
    let mut acc = 0.0;
    for (i, &(v, w)) in sorted.iter().enumerate() {
        acc += w;
        if (acc - half).abs() <= 1e-12 * half {
            return sorted.get(i + 1).map_or(v, |n| (v + n.0) / 2.0);
        }
        if acc > half {
            return v;
        }
    }
    sorted.last().map_or(f64::NAN, |x| x.0)
}

/// One-sided 95% lower bound of a spread `sd` known to `df` degrees of freedom:
/// σ·√(df / χ²₀.₉₅(df)), the χ² quantile by Wilson and Hilferty's approximation (within 1%
/// from 1 df). What a decision that a target is *out of reach* rests on: a spread estimated
/// from one pair can be three times too large, and a quiet host must not be given up on.
pub fn sd_lower(sd: f64, df: f64) -> f64 {
    if !(df.is_finite() && df > 0.0) {
        return 0.0;
    }
    let a = 2.0 / (9.0 * df);
    let q = df * (1.0 - a + TREND_Z * a.sqrt()).powi(3);
    sd * (df / q).sqrt()
}

/// Relative half-width of the median of `n` samples if σ were known exactly to be `sd`
/// (the normal quantile instead of t): the best `n` samples can do.
pub fn half_width_known(sd: f64, n: usize) -> f64 {
    if n == 0 {
        return f64::INFINITY;
    }
    (1.959964 * (median_variance(n) / n as f64).sqrt() * sd).exp_m1()
}

/// The classical variance of the logs of one length's samples and its degrees of freedom
/// (n − 1); `None` below two values.
pub fn own_variance(values: &[f64]) -> Option<(f64, f64)> {
    let l = logs(values);
    if l.len() < 2 {
        return None;
    }
    let n = l.len() as f64;
    let m = l.iter().sum::<f64>() / n;
    Some((
        l.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0),
        n - 1.0,
    ))
}

/// The two-sided t quantile of the interval at [`LEVEL`]; infinite without degrees of
/// freedom.
fn t(df: f64) -> f64 {
    if df.is_finite() && df > 0.0 {
        t_quantile(0.5 + LEVEL / 2.0, df)
    } else {
        f64::INFINITY
    }
}

/// Relative half-width (upper side) of the 95% interval of the median of `n` samples, with
/// σ = `sd` known to `df` degrees of freedom.
pub fn half_width(sd: f64, df: f64, n: usize) -> f64 {
    if n == 0 {
        return f64::INFINITY;
    }
    let h = t(df) * (median_variance(n) / n as f64).sqrt() * sd;
    h.exp_m1()
}

/// The same for a length judged on its own samples: σ from their classical variance, t
/// with n − 1 degrees of freedom. `None` below two samples.
pub fn own_half_width(values: &[f64]) -> Option<f64> {
    let (var, df) = own_variance(values)?;
    Some(half_width(var.sqrt(), df, logs(values).len()))
}

/// The fewest samples, between `floor` and `cap`, whose median's interval is within
/// `target` under a spread `sd` known to `df` degrees of freedom; `None` when even `cap`
/// is not enough.
pub fn reps_needed(target: f64, sd: f64, df: f64, floor: u32, cap: u32) -> Option<u32> {
    smallest(floor.max(1), cap, |n| {
        half_width(sd, df, n as usize) <= target
    })
}

/// The fewest samples a length needs *on its own* (no pooled model: t with n − 1
/// degrees of freedom) for `target` when its spread is `sd` — what a fixed-repetition sweep,
/// which pools nothing, needs at every length. At least 2 (one sample has no interval).
pub fn own_reps_needed(target: f64, sd: f64, cap: u32) -> Option<u32> {
    smallest(2, cap.max(2), |n| {
        half_width(sd, f64::from(n - 1), n as usize) <= target
    })
}

/// One metric's consistency check at one length: its own variance against the pooled σ.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Consistency {
    /// This length's own log-scale SD.
    pub own_sd: f64,
    /// Its samples.
    pub n: usize,
    /// The model's σ.
    pub model_sd: f64,
    /// own variance ÷ model variance.
    pub ratio: f64,
    /// P(F ≥ ratio) under the model (F with n − 1 and the model's degrees of freedom).
    pub p: f64,
}

impl Consistency {
    /// The spread is not the model's at [`REGIME_P`] (only a *larger* spread counts: a
    /// quieter length is simply well served by the model).
    pub fn rejects(&self) -> bool {
        self.p < REGIME_P
    }
}

/// Checks one length's samples against the pooled spread; `None` below two samples.
pub fn consistency(values: &[f64], model: &LogSpread) -> Option<Consistency> {
    let (var, df) = own_variance(values)?;
    let mvar = model.sd * model.sd;
    let (ratio, p) = if mvar > 0.0 {
        let r = var / mvar;
        (r, f_sf(r, df, model.df.max(f64::MIN_POSITIVE)))
    } else if var > 0.0 {
        // A model with no spread at all cannot hold a length that has some.
        (f64::INFINITY, 0.0)
    } else {
        (1.0, 1.0)
    };
    Some(Consistency {
        own_sd: var.sqrt(),
        n: df as usize + 1,
        model_sd: model.sd,
        ratio,
        p,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic "normal" noise: z-scores spread evenly over the distribution.
    fn noisy(centre: f64, sd: f64, n: usize) -> Vec<f64> {
        const Z: [f64; 8] = [0.0, 0.67, -0.67, 1.15, -1.15, 0.32, -0.32, 1.53];
        (0..n).map(|i| centre * (sd * Z[i % 8]).exp()).collect()
    }

    #[test]
    fn an_extrapolated_fall_of_the_spread_is_refused_below_the_pooled_level() {
        // 8%, 4%, 2%, 1% at 1k, 2k, 4k, 8k (σ ∝ 1/L), 10 samples each: a clear decrease.
        let g: Vec<(u64, Vec<f64>)> = [(1024u64, 0.08), (2048, 0.04), (4096, 0.02), (8192, 0.01)]
            .iter()
            .map(|&(c, sd)| (c, noisy(c as f64, sd, 10)))
            .collect();
        let groups: Vec<(u64, &[f64])> = g.iter().map(|(c, v)| (*c, v.as_slice())).collect();
        let t = length_trend(&groups).expect("a clear decrease");
        assert!(t.slope < -0.5 && t.slope >= -1.0, "{t:?}");
        // The fall is refused below the pooled level: 8k and 32k (which a design trusts to
        // two samples) are judged with the pooled spread, never the extrapolated 1%; only the
        // cheap 1k, noisier than the pool, is judged with more.
        assert_eq!(t.factor(32768), 1.0);
        assert_eq!(t.factor(8192), 1.0);
        assert!(t.factor(1024) > 1.0);
        let m = pooled(&[&g[0].1, &g[1].1, &g[2].1, &g[3].1]).unwrap();
        let at = t.apply(m, 32768);
        assert!(
            at.sd == m.sd && at.df == m.df && at.slope == t.slope,
            "{at:?}"
        );
        // The same spread everywhere: no trend.
        let flat: Vec<(u64, Vec<f64>)> = [1024u64, 2048, 4096, 8192]
            .iter()
            .map(|&c| (c, noisy(c as f64, 0.03, 10)))
            .collect();
        let groups: Vec<(u64, &[f64])> = flat.iter().map(|(c, v)| (*c, v.as_slice())).collect();
        assert!(length_trend(&groups).is_none());
        // A decrease from three samples a length is too uncertain to use: 8% to 6% to 4%.
        let weak: Vec<(u64, Vec<f64>)> = [(1024u64, 0.08), (2048, 0.06), (4096, 0.04)]
            .iter()
            .map(|&(c, sd)| (c, noisy(c as f64, sd, 3)))
            .collect();
        let groups: Vec<(u64, &[f64])> = weak.iter().map(|(c, v)| (*c, v.as_slice())).collect();
        assert!(length_trend(&groups).is_none());
        // A rising spread is left to the per-length check.
        let rising: Vec<(u64, Vec<f64>)> = [(1024u64, 0.01), (2048, 0.02), (4096, 0.04)]
            .iter()
            .map(|&(c, sd)| (c, noisy(c as f64, sd, 10)))
            .collect();
        let groups: Vec<(u64, &[f64])> = rising.iter().map(|(c, v)| (*c, v.as_slice())).collect();
        assert!(length_trend(&groups).is_none());
    }

    #[test]
    fn a_spreads_lower_bound_gives_up_on_a_target_only_when_the_data_say_so() {
        // χ²₀.₉₅(5) = 11.07: the bound is σ·√(5/11.07) = 0.672σ.
        assert!(
            (sd_lower(1.0, 5.0) - 0.672).abs() < 0.005,
            "{}",
            sd_lower(1.0, 5.0)
        );
        // From one pair (0.86 df) a spread may be half what was seen.
        let one = sd_lower(1.0, 0.86);
        assert!(one > 0.4 && one < 0.6, "{one}");
        assert_eq!(sd_lower(1.0, 0.0), 0.0);
        // A known spread: n = 30 at 110% is still ±50% and more; at 2%, under ±1.5%.
        assert!(half_width_known(1.1, 30) > 0.5);
        assert!(half_width_known(0.02, 30) < 0.015);
        assert!(half_width_known(0.02, 2) < half_width(0.02, 40.0, 2));
    }

    #[test]
    fn the_median_variance_table_falls_to_its_limit() {
        // Var(median)/σ² = k(n)/n falls with every sample added (it holds at 41).
        for n in 1..80 {
            let per = |n: usize| median_variance(n) / n as f64;
            assert!(
                per(n + 1) < per(n) || (n == 40 && per(41) <= per(40)),
                "{n}"
            );
        }
        assert!((median_variance(3) - 1.346).abs() < 1e-9);
        assert!(median_variance(100) - std::f64::consts::FRAC_PI_2 < 1e-12);
    }

    #[test]
    fn the_f_tail_matches_tabled_critical_values() {
        // 5% points of F(1, 10) and F(2, 20); 1% point of F(2, 30).
        assert!((f_sf(4.9646, 1.0, 10.0) - 0.05).abs() < 1e-4);
        assert!((f_sf(3.4928, 2.0, 20.0) - 0.05).abs() < 1e-4);
        assert!((f_sf(5.3903, 2.0, 30.0) - 0.01).abs() < 1e-4);
        assert_eq!(f_sf(0.0, 2.0, 3.0), 1.0);
    }

    #[test]
    fn a_pooled_spread_recovers_the_relative_noise_of_every_length() {
        let a = noisy(50.0, 0.03, 8);
        let b = noisy(2_000.0, 0.03, 8);
        let m = pooled(&[&a, &b]).unwrap();
        assert!((m.sd - 0.03).abs() < 0.008, "{m:?}");
        assert_eq!((m.points, m.samples), (2, 16));
        assert!((m.df - 0.86 * 14.0).abs() < 1e-9);
        // One outlier (a preempted request 3× slower) barely moves it.
        let mut c = a.clone();
        c[0] *= 3.0;
        let r = pooled(&[&c, &b]).unwrap();
        assert!((r.sd - m.sd).abs() < 0.01, "{r:?} vs {m:?}");
        assert!(pooled(&[&[1.0], &[2.0]]).is_none());
        // A length of many samples weighs as its degrees of freedom, not its pairs: 30
        // samples at 8% and 6 lengths of 6 at 2% give a model nearer 2% than 8%.
        let many = noisy(50.0, 0.08, 30);
        let few: Vec<Vec<f64>> = (0..6)
            .map(|k| noisy(100.0 * f64::from(k + 1), 0.02, 6))
            .collect();
        let mut groups: Vec<&[f64]> = few.iter().map(Vec::as_slice).collect();
        groups.push(&many);
        let m = pooled(&groups).unwrap();
        assert!(m.sd < 0.05, "{m:?}");
        assert_eq!(weighted_median(&[(1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]), 2.0);
        assert_eq!(weighted_median(&[(1.0, 1.0), (2.0, 1.0)]), 1.5);
    }

    #[test]
    fn a_well_known_spread_needs_fewer_samples_than_a_length_alone() {
        // 2% noise, ±5%: with a model of 40 df one sample does (3%: two); alone, a length
        // needs four.
        assert_eq!(reps_needed(0.05, 0.02, 40.0, 1, 30), Some(1));
        assert_eq!(reps_needed(0.05, 0.03, 40.0, 1, 30), Some(2));
        assert_eq!(own_reps_needed(0.05, 0.02, 30), Some(4));
        // The model's own uncertainty costs samples: 3 df instead of 40.
        assert!(reps_needed(0.05, 0.03, 3.0, 1, 30) > reps_needed(0.05, 0.03, 40.0, 1, 30));
        // Impossible within the cap.
        assert_eq!(reps_needed(0.01, 0.5, 40.0, 1, 10), None);
        // The search agrees with counting up, and reaches far (a very noisy host).
        for sd in [0.01, 0.05, 0.2] {
            let count = (2..=400).find(|&n| half_width(sd, f64::from(n - 1), n as usize) <= 0.05);
            assert_eq!(own_reps_needed(0.05, sd, 400), count, "{sd}");
        }
        assert!(own_reps_needed(0.05, 2.0, 1_000_000).unwrap() > 10_000);
        assert_eq!(half_width(0.02, 10.0, 0), f64::INFINITY);
    }

    #[test]
    fn a_half_width_is_the_interval_the_samples_support() {
        // n = 2 at 3% with 40 df: t = 2.02, √(1/2): h = 0.0429 → +4.38%.
        let w = half_width(0.03, 40.0, 2);
        assert!((w - 0.0438).abs() < 5e-4, "{w}");
        let own = own_half_width(&noisy(100.0, 0.03, 8)).unwrap();
        assert!(own > half_width(0.03, 40.0, 8) * 0.5 && own < 0.1, "{own}");
        assert!(own_half_width(&[1.0]).is_none());
    }

    #[test]
    fn a_length_far_noisier_than_the_model_is_caught_and_a_similar_one_is_not() {
        let model = pooled(&[&noisy(50.0, 0.02, 8), &noisy(80.0, 0.02, 8)]).unwrap();
        let same = consistency(&noisy(5_000.0, 0.02, 3), &model).unwrap();
        assert!(!same.rejects(), "{same:?}");
        let noisier = consistency(&noisy(5_000.0, 0.15, 3), &model).unwrap();
        assert!(noisier.rejects(), "{noisier:?}");
        assert!(noisier.ratio > 20.0);
        // Quieter is never a regime change.
        let quiet = consistency(&noisy(5_000.0, 0.001, 3), &model).unwrap();
        assert!(!quiet.rejects());
        assert!(consistency(&[5.0], &model).is_none());
    }
}
