//! Predicting a length from the fits instead of measuring it (`--design auto`): TTFT ≈
//! a + bL + cL² and ms per output token ≈ α + βL, fitted to the measured lengths' medians,
//! read off at a length between two measured ones. Pure: no I/O.
//!
//! The interval of a predicted figure is not the fit's noise band alone: a fit can describe
//! every point it was made from and still miss between them (a server that changes regime).
//! So its relative half-width combines, in quadrature (independent errors),
//! - **noise**: the wider of the two measured neighbours' half-widths (the prediction rests
//!   on them, and is no more precise than they are), and
//! - **model error**: the fit's worst *leave-one-out* miss at the measured lengths that lie
//!   between two other measured lengths — each such length left out, the fit of the others
//!   predicts it, and the relative miss is what interpolating across a gap costs on this
//!   server (that miss holds the left-out median's own noise too, so it errs wide). Without
//!   such a length there is no check of the model and no prediction.
//!
//! Only interpolation: a length is never predicted beyond the longest measured one.

use super::fit::{self, Model};
use ctxbench_schema::record::Prediction;

/// One measured length: its medians and their relative 95% half-widths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Context length.
    pub context: u64,
    /// Median TTFT (ms).
    pub ttft_ms: f64,
    /// Its relative half-width (infinite when it has none).
    pub ttft_half_width: f64,
    /// Median decode rate (tok/s).
    pub decode_tokens_per_s: f64,
    /// Its relative half-width.
    pub decode_half_width: f64,
}

/// The fit of `model` through `pts` read at `at`; `None` when it cannot be fitted or is not a
/// positive number.
fn fit_at(model: Model, pts: &[(u64, f64)], at: u64) -> Option<f64> {
    fit::fit(model, pts)
        .map(|f| f.predict(at as f64))
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// The relative miss between an observation and a prediction, the wider way round (a 10%
/// overestimate is an 11% underestimate seen from the other side).
fn miss(observed: f64, predicted: f64) -> f64 {
    (observed / predicted - 1.0)
        .abs()
        .max((predicted / observed - 1.0).abs())
}

/// The worst leave-one-out miss of `model` at the lengths of `pts` (ascending) that lie
/// between two others, and those lengths; `None` when there is none or a fit fails.
fn model_error(model: Model, pts: &[(u64, f64)]) -> Option<(f64, Vec<u64>)> {
    let mut worst = 0.0f64;
    let mut at = Vec::new();
    for k in 1..pts.len().saturating_sub(1) {
        let rest: Vec<(u64, f64)> = pts
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != k)
            .map(|(_, p)| *p)
            .collect();
        let predicted = fit_at(model, &rest, pts[k].0)?;
        worst = worst.max(miss(pts[k].1, predicted));
        at.push(pts[k].0);
    }
    (!at.is_empty()).then_some((worst, at))
}

/// The prediction at `at` from the `measured` lengths, whatever its precision; `None` when
/// `at` is not between two measured lengths, or the fits cannot be checked (a quadratic
/// needs four measured lengths: three to fit, one left out).
pub fn predict(measured: &[Measured], at: u64) -> Option<Prediction> {
    let mut m: Vec<Measured> = measured
        .iter()
        .copied()
        .filter(|x| x.context != at && x.ttft_ms > 0.0 && x.decode_tokens_per_s > 0.0)
        .filter(|x| x.ttft_ms.is_finite() && x.decode_tokens_per_s.is_finite())
        .collect();
    m.sort_by_key(|x| x.context);
    let below = m.iter().rev().find(|x| x.context < at)?;
    let above = m.iter().find(|x| x.context > at)?;
    let ttft: Vec<(u64, f64)> = m.iter().map(|x| (x.context, x.ttft_ms)).collect();
    // ms per output token: linear in L where the decode rate is not.
    let step: Vec<(u64, f64)> = m
        .iter()
        .map(|x| (x.context, 1000.0 / x.decode_tokens_per_s))
        .collect();
    let (ttft_err, checked_at) = model_error(Model::Quadratic, &ttft)?;
    let (step_err, _) = model_error(Model::Linear, &step)?;
    let t = fit_at(Model::Quadratic, &ttft, at)?;
    let s = fit_at(Model::Linear, &step, at)?;
    Some(Prediction {
        from_contexts: m.iter().map(|x| x.context).collect(),
        ttft_ms: t,
        ttft_half_width: below
            .ttft_half_width
            .max(above.ttft_half_width)
            .hypot(ttft_err),
        decode_tokens_per_s: 1000.0 / s,
        decode_half_width: below
            .decode_half_width
            .max(above.decode_half_width)
            .hypot(step_err),
        ttft_model_error: ttft_err,
        decode_model_error: step_err,
        checked_at,
    })
}

/// The prediction at `at` when both its half-widths are within `target`.
pub fn predict_within(measured: &[Measured], at: u64, target: f64) -> Option<Prediction> {
    predict(measured, at).filter(|p| p.ttft_half_width <= target && p.decode_half_width <= target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server exactly on the models (TTFT 20 + 0.02L + 2e-6L² ms; 5 + 1e-4·L ms a token),
    /// each figure known to ±`w`, with TTFT multiplied by `bend(L)`.
    fn server(lengths: &[u64], w: f64, bend: fn(u64) -> f64) -> Vec<Measured> {
        lengths
            .iter()
            .map(|&c| {
                let l = c as f64;
                Measured {
                    context: c,
                    ttft_ms: (20.0 + 0.02 * l + 2e-6 * l * l) * bend(c),
                    ttft_half_width: w,
                    decode_tokens_per_s: 1000.0 / (5.0 + 1e-4 * l),
                    decode_half_width: w,
                }
            })
            .collect()
    }

    #[test]
    fn a_length_on_the_fits_is_predicted_with_the_neighbours_noise_and_a_checked_model() {
        let m = server(&[1024, 2048, 4096, 32768], 0.02, |_| 1.0);
        let p = predict_within(&m, 16384, 0.05).expect("on the model: predicted");
        let l = 16384.0;
        assert!((p.ttft_ms / (20.0 + 0.02 * l + 2e-6 * l * l) - 1.0).abs() < 1e-6);
        assert!((p.decode_tokens_per_s * (5.0 + 1e-4 * l) / 1000.0 - 1.0).abs() < 1e-6);
        assert!(p.ttft_model_error < 1e-6 && (p.ttft_half_width - 0.02).abs() < 1e-6);
        assert_eq!(p.from_contexts, vec![1024, 2048, 4096, 32768]);
        assert_eq!(p.checked_at, vec![2048, 4096]);
        // Too noisy neighbours: a prediction, but not within ±5%.
        let noisy = server(&[1024, 2048, 4096, 32768], 0.06, |_| 1.0);
        assert!(predict(&noisy, 16384).is_some());
        assert!(predict_within(&noisy, 16384, 0.05).is_none());
    }

    #[test]
    fn a_server_that_changes_regime_is_not_predicted_across_it() {
        // Above 4k TTFT is 40% slower than the model: leaving 4k out, the others miss it.
        let m = server(&[1024, 2048, 4096, 8192, 32768], 0.01, |c| {
            if c > 4096 {
                1.4
            } else {
                1.0
            }
        });
        let p = predict(&m, 16384).unwrap();
        assert!(p.ttft_model_error > 0.05, "{p:?}");
        assert!(predict_within(&m, 16384, 0.05).is_none());
    }

    #[test]
    fn nothing_is_predicted_outside_the_measured_range_or_without_a_check() {
        let m = server(&[1024, 2048, 4096, 32768], 0.01, |_| 1.0);
        assert!(predict(&m, 65536).is_none(), "never extrapolated");
        assert!(predict(&m, 512).is_none());
        // Three lengths: a quadratic through them cannot be checked by leaving one out.
        let three = server(&[1024, 4096, 32768], 0.01, |_| 1.0);
        assert!(predict(&three, 16384).is_none());
    }
}
