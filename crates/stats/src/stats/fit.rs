//! Scaling fits: TTFT(L) ≈ a + bL + cL² and step(L) ≈ α + βL, by non-negative least squares.
//! No I/O.
//!
//! Why non-negative: every term is a cost (fixed overhead, per-token work, attention over the
//! context), so a negative coefficient is noise, not physics, and would make extrapolation
//! nonsense. With at most three terms the exact non-negative solution is found by solving the
//! unconstrained problem on every subset of terms (the "active sets") and keeping the best
//! feasible one: the optimum, restricted to its non-zero terms, is that subset's
//! unconstrained solution (Lawson & Hanson, *Solving Least Squares Problems*, ch. 23).
//!
//! What is fitted: the median at each context length, not every sample. One preempted or
//! stalled request on a busy host can be several times slower than its siblings, and least
//! squares is not robust to that; the median is, and it is what the tables report. The
//! bootstrap band (resampling samples within each length, then taking medians again) still
//! carries the sample-level noise.
//!
//! Why relative weights: timings span decades (50 ms at 1k, seconds at 16k) and their noise
//! grows with their size, so each median m is weighted by 1/m². The fit then minimises
//! relative error and the small points count as much as the big ones. R² is reported on the
//! raw scale of the medians, as people expect it.

use rand::{RngExt, SeedableRng};
use serde::Serialize;

use super::quantile;

/// Which cost model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// a + bL + cL² (prefill: linear work plus attention over the context).
    Quadratic,
    /// α + βL (a decode step reads the whole KV cache once).
    Linear,
}

impl Model {
    /// Number of coefficients.
    pub fn terms(self) -> usize {
        match self {
            Model::Quadratic => 3,
            Model::Linear => 2,
        }
    }
}

/// Observed median against the fit at one context length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Residual {
    /// Context length (tokens).
    pub context_tokens: u64,
    /// Median of the observations at this length.
    pub observed: f64,
    /// The fit's value at this length.
    pub predicted: f64,
    /// (observed − predicted) / predicted.
    pub relative: f64,
}

/// A fitted cost model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// The model.
    pub model: Model,
    /// Coefficients in ascending powers of L (L in tokens), all ≥ 0.
    pub coef: Vec<f64>,
    /// Coefficient of determination of the per-length medians (raw scale).
    pub r2: f64,
    /// Samples behind the medians.
    pub n: usize,
    /// Context lengths (medians) fitted.
    pub points: usize,
    /// Residuals of the per-length medians.
    pub residuals: Vec<Residual>,
}

impl Fit {
    /// The model's value at context length `l`.
    pub fn predict(&self, l: f64) -> f64 {
        self.coef
            .iter()
            .enumerate()
            .map(|(j, c)| c * l.powi(j as i32))
            .sum()
    }

    /// Largest |relative residual| of the per-length medians.
    pub fn worst_relative_residual(&self) -> f64 {
        self.residuals
            .iter()
            .map(|r| r.relative.abs())
            .fold(0.0, f64::max)
    }

    /// Where the quadratic term overtakes the linear one (cL² > bL, so L = b/c); `None` for a
    /// linear model, or when either term is absent (then one dominates everywhere).
    pub fn crossover(&self) -> Option<f64> {
        match (self.model, self.coef.as_slice()) {
            (Model::Quadratic, [_, b, c]) if *c > 0.0 && *b > 0.0 => Some(b / c),
            _ => None,
        }
    }

    /// The quadratic term is present but the linear one is not: L² dominates at every length.
    pub fn quadratic_only(&self) -> bool {
        matches!((self.model, self.coef.as_slice()), (Model::Quadratic, [_, b, c]) if *c > 0.0 && *b <= 0.0)
    }
}

/// Thresholds under which a fit is called poor.
pub const POOR_R2: f64 = 0.9;
/// A per-length median further than this (relative) from the fit makes the fit poor.
pub const POOR_RESIDUAL: f64 = 0.25;

impl Fit {
    /// R² below [`POOR_R2`] or a median off by more than [`POOR_RESIDUAL`].
    pub fn is_poor(&self) -> bool {
        self.r2.is_nan() || self.r2 < POOR_R2 || self.worst_relative_residual() > POOR_RESIDUAL
    }
}

/// Groups (L, y) observations by L (ascending), dropping non-finite values.
fn groups(obs: &[(u64, f64)]) -> Vec<(u64, Vec<f64>)> {
    let mut out: Vec<(u64, Vec<f64>)> = Vec::new();
    let mut sorted: Vec<(u64, f64)> = obs.iter().copied().filter(|o| o.1.is_finite()).collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    for (l, y) in sorted {
        match out.last_mut() {
            Some((k, v)) if *k == l => v.push(y),
            _ => out.push((l, vec![y])),
        }
    }
    out
}

/// Fits `model` to (context tokens, value) observations. `None` when there are fewer distinct
/// context lengths than coefficients (the fit would be meaningless).
pub fn fit(model: Model, obs: &[(u64, f64)]) -> Option<Fit> {
    fit_groups(model, &groups(obs))
}

fn fit_groups(model: Model, g: &[(u64, Vec<f64>)]) -> Option<Fit> {
    let k = model.terms();
    if g.len() < k {
        return None;
    }
    // Scale L to [0, 1] so that L² (up to 1e10) does not ruin the normal equations.
    let scale = g.iter().map(|(l, _)| *l as f64).fold(1.0, f64::max);
    let meds: Vec<(u64, f64)> = g.iter().map(|(l, ys)| (*l, quantile(ys, 0.5))).collect();
    let rows: Vec<([f64; 3], f64, f64)> = meds // (basis, median, weight)
        .iter()
        .map(|&(l, m)| {
            let x = l as f64 / scale;
            let w = m.abs().max(f64::MIN_POSITIVE.sqrt());
            ([1.0, x, x * x], m, 1.0 / (w * w))
        })
        .collect();
    let c = nonneg_subset_ls(&rows, k);
    let coef: Vec<f64> = (0..k).map(|j| c[j] / scale.powi(j as i32)).collect();
    let mut f = Fit {
        model,
        coef,
        r2: 0.0,
        n: g.iter().map(|x| x.1.len()).sum(),
        points: g.len(),
        residuals: Vec::new(),
    };
    let mean = meds.iter().map(|m| m.1).sum::<f64>() / meds.len() as f64;
    let ss_tot: f64 = meds.iter().map(|m| (m.1 - mean).powi(2)).sum();
    let ss_res: f64 = meds
        .iter()
        .map(|&(l, m)| (m - f.predict(l as f64)).powi(2))
        .sum();
    f.r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else if ss_res <= 1e-12 {
        1.0
    } else {
        0.0
    };
    f.residuals = meds
        .iter()
        .map(|&(l, observed)| {
            let predicted = f.predict(l as f64);
            Residual {
                context_tokens: l,
                observed,
                predicted,
                relative: if predicted != 0.0 {
                    (observed - predicted) / predicted
                } else {
                    f64::INFINITY
                },
            }
        })
        .collect();
    Some(f)
}

/// Non-negative least squares on up to three basis columns given per row (a model other
/// than the polynomials above, e.g. the warm append's a + b·N + c·L·N), each row weighted by
/// 1/y² as [`fit`] weighs its medians. Columns should be scaled to about [0, 1] by the
/// caller. `None` with fewer rows than columns.
pub fn nnls3(rows: &[([f64; 3], f64)]) -> Option<[f64; 3]> {
    if rows.len() < 3 {
        return None;
    }
    let rows: Vec<([f64; 3], f64, f64)> = rows
        .iter()
        .filter(|(_, y)| y.is_finite())
        .map(|&(b, y)| {
            let w = y.abs().max(f64::MIN_POSITIVE.sqrt());
            (b, y, 1.0 / (w * w))
        })
        .collect();
    Some(nonneg_subset_ls(&rows, 3))
}

/// Weighted least squares with every coefficient ≥ 0 on the first `k` (≤ 3) columns: the
/// best of the unconstrained solutions on each subset of columns that comes out
/// non-negative. The all-zero model is always feasible; it wins only for data that is all
/// ≤ 0.
fn nonneg_subset_ls(rows: &[([f64; 3], f64, f64)], k: usize) -> [f64; 3] {
    let mut best: Option<(f64, [f64; 3])> = None;
    for mask in 1u32..(1 << k) {
        let cols: Vec<usize> = (0..k).filter(|j| mask & (1 << j) != 0).collect();
        let Some(sol) = weighted_ls(rows, &cols) else {
            continue;
        };
        if sol.iter().any(|c| *c < 0.0) {
            continue;
        }
        let mut c = [0.0; 3];
        for (j, v) in cols.iter().zip(&sol) {
            c[*j] = *v;
        }
        let sse: f64 = rows
            .iter()
            .map(|(b, y, w)| {
                let p: f64 = (0..k).map(|j| c[j] * b[j]).sum();
                w * (y - p) * (y - p)
            })
            .sum();
        if best.is_none_or(|(s, _)| sse < s) {
            best = Some((sse, c));
        }
    }
    best.map_or([0.0; 3], |b| b.1)
}

/// Solves the weighted normal equations on the given columns; `None` when singular.
fn weighted_ls(rows: &[([f64; 3], f64, f64)], cols: &[usize]) -> Option<Vec<f64>> {
    let k = cols.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (b, y, w) in rows {
        for (i, &ci) in cols.iter().enumerate() {
            for (j, &cj) in cols.iter().enumerate() {
                a[i][j] += w * b[ci] * b[cj];
            }
            a[i][k] += w * b[ci] * y;
        }
    }
    // Gauss-Jordan elimination with partial pivoting; a pivot tiny next to the matrix's
    // scale means the chosen columns are (nearly) collinear on these lengths.
    let scale = (0..k).map(|i| a[i][i].abs()).fold(0.0, f64::max);
    for col in 0..k {
        let piv = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        let p = a[piv][col].abs();
        if p.is_nan() || p <= 1e-13 * scale {
            return None;
        }
        a.swap(col, piv);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let x: Vec<f64> = (0..k).map(|i| a[i][k] / a[i][i]).collect();
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// A prediction beyond the measured range, with a bootstrap band.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Extrapolation {
    /// Where (tokens).
    pub context_tokens: u64,
    /// The fit's value there.
    pub predicted: f64,
    /// Lower end of the band.
    pub low: f64,
    /// Upper end of the band.
    pub high: f64,
    /// Coverage of the band (0.90: the 5th to 95th percentile of bootstrap refits).
    pub level: f64,
    /// Bootstrap refits.
    pub resamples: usize,
    /// Largest measured context length.
    pub measured_up_to: u64,
}

/// Predicts `model` at `at` tokens, with a band from refits on resampled data: within each
/// context length, observations are drawn with replacement, so the band reflects the
/// measured noise (not model error: an extrapolation can be wrong in ways no band shows).
pub fn extrapolate(
    model: Model,
    obs: &[(u64, f64)],
    at: u64,
    resamples: usize,
    seed: u64,
) -> Option<Extrapolation> {
    let g = groups(obs);
    let base = fit_groups(model, &g)?;
    let mut preds: Vec<f64> = refits(model, &g, resamples, seed)
        .iter()
        .map(|f| f.predict(at as f64))
        .collect();
    preds.retain(|p| p.is_finite());
    preds.sort_by(f64::total_cmp);
    let predicted = base.predict(at as f64);
    let (low, high) = if preds.is_empty() {
        (predicted, predicted)
    } else {
        (quantile(&preds, 0.05), quantile(&preds, 0.95))
    };
    Some(Extrapolation {
        context_tokens: at,
        predicted,
        low: low.min(predicted),
        high: high.max(predicted),
        level: 0.90,
        resamples,
        measured_up_to: g.last().map(|x| x.0).unwrap_or(0),
    })
}

/// Fits of `model` on `resamples` bootstrap resamples of the groups: within each context
/// length, observations drawn with replacement.
fn refits(model: Model, g: &[(u64, Vec<f64>)], resamples: usize, seed: u64) -> Vec<Fit> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let rg: Vec<(u64, Vec<f64>)> = g
            .iter()
            .map(|(l, ys)| {
                let mut r: Vec<f64> = (0..ys.len())
                    .map(|_| ys[rng.random_range(0..ys.len())])
                    .collect();
                r.sort_by(f64::total_cmp);
                (*l, r)
            })
            .collect();
        if let Some(f) = fit_groups(model, &rg) {
            out.push(f);
        }
    }
    out
}

/// A 90% band of one coefficient (5th to 95th percentile of bootstrap refits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CoefBand {
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
}

/// A 90% band of each coefficient of the fit of `model`, from refits on resampled data
/// (as [`extrapolate`]); each band holds the fit's own coefficient. `None` when there is no
/// fit.
pub fn coefficient_bands(
    model: Model,
    obs: &[(u64, f64)],
    resamples: usize,
    seed: u64,
) -> Option<Vec<CoefBand>> {
    let g = groups(obs);
    let base = fit_groups(model, &g)?;
    let fits = refits(model, &g, resamples, seed);
    Some(
        base.coef
            .iter()
            .enumerate()
            .map(|(j, &c)| {
                let mut v: Vec<f64> = fits
                    .iter()
                    .map(|f| f.coef[j])
                    .filter(|x| x.is_finite())
                    .collect();
                v.sort_by(f64::total_cmp);
                match v.is_empty() {
                    true => CoefBand { low: c, high: c },
                    false => CoefBand {
                        low: quantile(&v, 0.05).min(c),
                        high: quantile(&v, 0.95).max(c),
                    },
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn obs(f: impl Fn(f64) -> f64) -> Vec<(u64, f64)> {
        [1024u64, 2048, 4096, 8192, 16384]
            .iter()
            .flat_map(|&l| [(l, f(l as f64)), (l, f(l as f64) * 1.01)])
            .collect()
    }

    #[test]
    fn recovers_a_quadratic_cost_model() {
        let f = fit(Model::Quadratic, &obs(|l| 20.0 + 0.05 * l + 8e-6 * l * l)).unwrap();
        assert!((f.coef[0] - 20.0).abs() / 20.0 < 0.05, "{f:?}");
        assert!((f.coef[1] - 0.05).abs() / 0.05 < 0.05, "{f:?}");
        assert!((f.coef[2] - 8e-6).abs() / 8e-6 < 0.05, "{f:?}");
        assert!(f.r2 > 0.999 && !f.is_poor());
        let x = f.crossover().unwrap();
        assert!((x - 6250.0).abs() < 400.0, "{x}");
        assert_eq!(f.residuals.len(), 5);
    }

    #[test]
    fn a_purely_quadratic_cost_has_no_crossover_and_says_so() {
        // Super-quadratic data (as a 2-core CPU gives at 128k) drives the linear term to 0.
        let f = fit(Model::Quadratic, &obs(|l| 10.0 + 6e-6 * l * l)).unwrap();
        assert_eq!(f.coef[1], 0.0, "{f:?}");
        assert!(f.crossover().is_none() && f.quadratic_only());
        let g = fit(Model::Quadratic, &obs(|l| 20.0 + 0.05 * l + 8e-6 * l * l)).unwrap();
        assert!(!g.quadratic_only());
    }

    #[test]
    fn negative_trend_is_clamped_to_zero_not_fitted_negative() {
        // Falling times cannot come from non-negative costs: slope must be 0.
        let f = fit(Model::Linear, &obs(|l| 100.0 - 0.001 * l)).unwrap();
        assert_eq!(f.coef[1], 0.0);
        assert!(f.coef[0] > 80.0 && f.coef[0] < 100.0, "{f:?}");
    }

    #[test]
    fn too_few_lengths_give_no_fit() {
        assert!(fit(Model::Quadratic, &[(1024, 1.0), (2048, 2.0), (2048, 2.1)]).is_none());
        assert!(fit(Model::Linear, &[(1024, 1.0), (2048, 2.0)]).is_some());
    }

    #[test]
    fn one_outlier_sample_does_not_drag_the_fit() {
        // A preempted request 5× slower than its siblings: the median ignores it.
        let mut o = obs(|l| 1.0 + 0.001 * l);
        o.push((2048, 5.0 * (1.0 + 0.001 * 2048.0)));
        let f = fit(Model::Linear, &o).unwrap();
        assert!(f.worst_relative_residual() < 0.02, "{f:?}");
        assert_eq!((f.n, f.points), (11, 5));
    }

    #[test]
    fn scattered_data_is_a_poor_fit() {
        let o = vec![
            (1024, 10.0),
            (2048, 90.0),
            (4096, 5.0),
            (8192, 100.0),
            (16384, 12.0),
        ];
        assert!(fit(Model::Linear, &o).unwrap().is_poor());
    }

    #[test]
    fn extrapolation_band_brackets_the_prediction_and_is_deterministic() {
        let o: Vec<(u64, f64)> = [1024u64, 2048, 4096, 8192]
            .iter()
            .flat_map(|&l| {
                let y = 5.0 + 0.001 * l as f64;
                [(l, y * 0.97), (l, y), (l, y * 1.04)]
            })
            .collect();
        let e = extrapolate(Model::Linear, &o, 131072, 200, 7).unwrap();
        assert!(e.low <= e.predicted && e.predicted <= e.high, "{e:?}");
        assert!(e.high > e.low);
        assert!((e.predicted - (5.0 + 131.072)).abs() / 136.0 < 0.1, "{e:?}");
        assert_eq!(e, extrapolate(Model::Linear, &o, 131072, 200, 7).unwrap());
        assert_eq!(e.measured_up_to, 8192);
    }

    #[test]
    fn coefficient_bands_hold_the_fit_and_narrow_with_less_noise() {
        let mk = |spread: f64| -> Vec<(u64, f64)> {
            [1024u64, 2048, 4096, 8192]
                .iter()
                .flat_map(|&l| {
                    let y = 5.0 + 0.001 * l as f64;
                    [(l, y * (1.0 - spread)), (l, y), (l, y * (1.0 + spread))]
                })
                .collect()
        };
        let f = fit(Model::Linear, &mk(0.05)).unwrap();
        let b = coefficient_bands(Model::Linear, &mk(0.05), 200, 7).unwrap();
        assert_eq!(b.len(), 2);
        for (c, band) in f.coef.iter().zip(&b) {
            assert!(band.low <= *c && *c <= band.high, "{c} {band:?}");
        }
        assert!(b[0].high > b[0].low);
        let tight = coefficient_bands(Model::Linear, &mk(0.001), 200, 7).unwrap();
        assert!(tight[1].high - tight[1].low < b[1].high - b[1].low);
        assert!(coefficient_bands(Model::Linear, &[(1, 1.0)], 10, 1).is_none());
    }

    fn weighted_sse(f: &[f64], o: &[(u64, f64)]) -> f64 {
        let g = groups(o);
        g.iter()
            .map(|(l, ys)| {
                let m = quantile(ys, 0.5);
                let w = m.abs().max(f64::MIN_POSITIVE.sqrt());
                let p: f64 = f
                    .iter()
                    .enumerate()
                    .map(|(j, c)| c * (*l as f64).powi(j as i32))
                    .sum();
                (m - p).powi(2) / (w * w)
            })
            .sum()
    }

    proptest! {
        #[test]
        fn coefficients_are_never_negative(ys in proptest::collection::vec(0.1f64..1e4, 4..12)) {
            let o: Vec<(u64, f64)> = ys.iter().enumerate().map(|(i, y)| (1024 << (i % 5), *y)).collect();
            for m in [Model::Linear, Model::Quadratic] {
                if let Some(f) = fit(m, &o) {
                    prop_assert!(f.coef.iter().all(|c| *c >= 0.0), "{:?}", f);
                    prop_assert!(f.r2 <= 1.0 + 1e-9);
                }
            }
        }

        #[test]
        fn no_nonnegative_model_beats_the_fit(
            ys in proptest::collection::vec(0.1f64..1e3, 5..10),
            a in 0.0f64..100.0, b in 0.0f64..0.1, c in 0.0f64..1e-5,
        ) {
            let o: Vec<(u64, f64)> = ys.iter().enumerate().map(|(i, y)| (1024 << (i % 5), *y)).collect();
            let f = fit(Model::Quadratic, &o).unwrap();
            let best = weighted_sse(&f.coef, &o);
            prop_assert!(best <= weighted_sse(&[a, b, c], &o) * (1.0 + 1e-6) + 1e-9);
        }
    }
}
