//! The host's drift over a designed run: how far each length's later samples moved from its
//! earlier ones, beyond what their noise explains. Pure: no I/O.
//!
//! A designed run visits its lengths in passes, so each length's samples (kept in the order
//! they were taken) span the run. On a shared host the server's speed moves with its
//! neighbours' load over minutes; the within-run spread holds the jitter *around* that
//! movement, but a median's t-interval treats the samples as independent draws and so
//! states where the run's *average* host state put the median — a run taken while the
//! host sat at one end of that movement lands outside it (issue 47: fixed runs a minute
//! after the designed ones fell outside their intervals at 2k–8k).
//!
//! So each length's samples are split into their earlier and later half and the shift of
//! the log median between them is compared with what the noise alone would give
//! (±1.96·σ·√(2k(m)/m) for m samples a half, σ the run's spread *within* halves, which the
//! drift does not inflate). The shift beyond that noise is the drift at that length; the
//! host's drift is the inverse-variance weighted shift over every length (a host-wide
//! slowdown moves all lengths). A length's interval then carries the larger of the two
//! as a between-pass component, in quadrature with the noise of its median
//! (`precision::judge`): it covers the median the host gave at any time during the run,
//! not only its average, and a length that drifted is named with the amount.

use super::noise::{self, median_variance};

/// Two-sided 95% normal quantile.
const Z: f64 = 1.959964;

/// One set of samples split into its earlier and later half (the middle one of an odd
/// count in neither).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// ln(median of the later half) − ln(median of the earlier half).
    pub shift: f64,
    /// The 95% half-width that shift has from noise alone.
    pub noise: f64,
    /// Samples in each half.
    pub per_half: usize,
}

impl Shift {
    /// The shift beyond its noise (log scale, ≥ 0): the drift this length shows.
    pub fn excess(&self) -> f64 {
        (self.shift.abs() - self.noise).max(0.0)
    }
}

/// Median of a non-empty slice of finite values.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n % 2 {
        1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The earlier and later half of `values` (time order), as logs.
fn split(values: &[f64]) -> Option<(Vec<f64>, Vec<f64>)> {
    let l = noise::logs(values);
    let m = l.len() / 2;
    (m >= 1).then(|| (l[..m].to_vec(), l[l.len() - m..].to_vec()))
}

/// The shift between the halves of one length's samples, its noise from a spread `sd`
/// (log scale); `None` below two samples.
pub fn shift(values: &[f64], sd: f64) -> Option<Shift> {
    let (early, late) = split(values)?;
    let m = early.len();
    Some(Shift {
        shift: median(&late) - median(&early),
        noise: Z * sd * (2.0 * median_variance(m) / m as f64).sqrt(),
        per_half: m,
    })
}

/// The run's spread within halves: Shamos' estimator pooled over every length's earlier
/// and later half apart (pairs that straddle the halves carry the drift and are left out).
/// `None` without a half of two samples.
pub fn within_halves(groups: &[&[f64]]) -> Option<f64> {
    let halves: Vec<Vec<f64>> = groups
        .iter()
        .filter_map(|g| split(g))
        .flat_map(|(a, b)| [a, b])
        .map(|h| h.into_iter().map(f64::exp).collect())
        .collect();
    let refs: Vec<&[f64]> = halves.iter().map(Vec::as_slice).collect();
    noise::pooled(&refs).map(|m| m.sd)
}

/// The host's drift over the run: the lengths' shifts weighted by the inverse of their
/// noise variance; its noise the weighted mean's.
pub fn host(groups: &[&[f64]], sd: f64) -> Option<Shift> {
    let shifts: Vec<Shift> = groups.iter().filter_map(|g| shift(g, sd)).collect();
    let w: Vec<f64> = shifts
        .iter()
        .map(|s| {
            let v = (s.noise / Z).powi(2);
            if v > 0.0 {
                1.0 / v
            } else {
                1.0
            }
        })
        .collect();
    let sw: f64 = w.iter().sum();
    if shifts.is_empty() || sw <= 0.0 {
        return None;
    }
    let mean = shifts.iter().zip(&w).map(|(s, w)| s.shift * w).sum::<f64>() / sw;
    let noise = if sd > 0.0 { Z / sw.sqrt() } else { 0.0 };
    Some(Shift {
        shift: mean,
        noise,
        per_half: shifts.iter().map(|s| s.per_half).sum(),
    })
}

/// One metric's drift at one length: the between-pass component its interval carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    /// This length's own shift between its halves.
    pub own: Option<Shift>,
    /// The host's shift over every length.
    pub host: Option<Shift>,
}

impl Drift {
    /// The component carried (log scale): the larger excess of the length's own shift and
    /// the host's.
    pub fn term(&self) -> f64 {
        let e = |s: Option<Shift>| s.map_or(0.0, |s| s.excess());
        e(self.own).max(e(self.host))
    }

    /// This length's own shift between its halves and the noise it is beyond, relative
    /// (signed shift, half-width of the noise); `None` when it is within its noise.
    pub fn own_drift(&self) -> Option<(f64, f64)> {
        let s = self.own.filter(|s| s.excess() > 0.0)?;
        Some((s.shift.exp_m1(), s.noise.exp_m1()))
    }
}

/// The drift of one metric at `groups[i]`, every group a length's samples in time order.
pub fn at(groups: &[&[f64]], i: usize) -> Drift {
    let Some(sd) = within_halves(groups).or_else(|| noise::pooled(groups).map(|m| m.sd)) else {
        return Drift {
            own: None,
            host: None,
        };
    };
    Drift {
        own: groups.get(i).and_then(|g| shift(g, sd)),
        host: host(groups, sd),
    }
}

/// A relative half-width `w` widened by a between-pass component `term` (log scale), in
/// quadrature on the log scale.
pub fn widen(w: f64, term: f64) -> f64 {
    if term <= 0.0 {
        return w;
    }
    w.ln_1p().hypot(term).exp_m1()
}

/// The relative half-width the median's noise may take for the whole interval to be
/// within `target` beside `term`; `None` when the component alone reaches the target.
pub fn room(target: f64, term: f64) -> Option<f64> {
    if term <= 0.0 {
        return Some(target);
    }
    let t = target.ln_1p();
    (term < t).then(|| (t * t - term * term).sqrt().exp_m1())
}

#[cfg(test)]
mod tests {
    use super::*;

    const Z8: [f64; 8] = [0.0, 0.67, -0.67, 1.15, -1.15, 0.32, -0.32, 1.53];

    /// `n` samples in time order around `centre` with spread `sd`, the host slowing by
    /// `trend` (log) from the first to the last.
    fn run(centre: f64, sd: f64, n: usize, trend: f64) -> Vec<f64> {
        (0..n)
            .map(|k| {
                let t = if n > 1 {
                    trend * k as f64 / (n - 1) as f64
                } else {
                    0.0
                };
                centre * (sd * Z8[k % 8] + t).exp()
            })
            .collect()
    }

    #[test]
    fn a_steady_host_shows_no_drift_and_a_slowing_one_is_measured_beyond_its_noise() {
        let steady: Vec<Vec<f64>> = [50.0, 120.0, 400.0]
            .iter()
            .map(|&c| run(c, 0.03, 8, 0.0))
            .collect();
        let g: Vec<&[f64]> = steady.iter().map(Vec::as_slice).collect();
        for i in 0..3 {
            assert_eq!(at(&g, i).term(), 0.0, "{:?}", at(&g, i));
        }
        // 40% slower by the end of the run: every length shows it, and the host too.
        let slowing: Vec<Vec<f64>> = [50.0, 120.0, 400.0]
            .iter()
            .map(|&c| run(c, 0.03, 8, 0.4))
            .collect();
        let g: Vec<&[f64]> = slowing.iter().map(Vec::as_slice).collect();
        let d = at(&g, 2);
        assert!(d.term() > 0.1, "{d:?}");
        assert!(d.own_drift().unwrap().0 > 0.15, "{d:?}");
        // A length of two samples (the longest: first and last of the run) carries the
        // host's drift even where its own pair cannot show it beyond noise.
        let mut two = slowing.clone();
        two.push(vec![1000.0, 1000.0 * 1.02]);
        let g: Vec<&[f64]> = two.iter().map(Vec::as_slice).collect();
        let d = at(&g, 3);
        assert!(d.own_drift().is_none(), "{d:?}");
        assert!(d.term() > 0.1, "{d:?}");
    }

    #[test]
    fn widening_is_in_quadrature_and_the_room_left_shrinks_to_none() {
        assert_eq!(widen(0.05, 0.0), 0.05);
        let w = widen(0.05, 0.05f64.ln_1p());
        assert!(
            (w.ln_1p() - 0.05f64.ln_1p() * 2f64.sqrt()).abs() < 1e-12,
            "{w}"
        );
        assert_eq!(room(0.05, 0.0), Some(0.05));
        let r = room(0.05, 0.03).unwrap();
        assert!((widen(r, 0.03) - 0.05).abs() < 1e-12, "{r}");
        assert_eq!(room(0.05, 0.05f64.ln_1p()), None);
    }
}
