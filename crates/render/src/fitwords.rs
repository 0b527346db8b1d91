//! Fits and their coefficients in words: shared by the terminal, Markdown and HTML.

use ctxbench_schema::units::fmt_ctx;

use ctxbench_schema::units::num;
use ctxbench_stats::report::ScalingFit;
use ctxbench_stats::stats::fit::Model;

/// A coefficient: plain when readable, scientific when tiny or huge.
pub fn coef(x: f64) -> String {
    if x == 0.0 {
        "0".to_owned()
    } else if (0.01..1e5).contains(&x.abs()) {
        // Four significant digits: 0.04562, 20.00, 1234.
        let decimals = (3 - x.abs().log10().floor() as i32).max(0) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.3e}")
    }
}

/// A token count that need not be a multiple of 1024 (a crossover, say): `3.7k`.
pub fn tokens(x: f64) -> String {
    if !x.is_finite() {
        "–".to_owned()
    } else if x >= 1024.0 {
        format!("{:.1}k", x / 1024.0)
    } else {
        format!("{x:.0}")
    }
}

/// Milliseconds, switching to seconds when large.
pub fn ms(x: f64) -> String {
    if x.abs() >= 10_000.0 {
        format!("{} s", num(x / 1000.0))
    } else {
        format!("{} ms", num(x))
    }
}

/// `TTFT(L) ≈ a + b·L + c·L²` with the fitted numbers.
pub fn equation(f: &ScalingFit) -> String {
    let c = &f.fit.coef;
    match f.fit.model {
        Model::Quadratic => format!(
            "{}(L) ≈ {} + {}·L + {}·L² ms",
            f.metric.label(),
            coef(c[0]),
            coef(c[1]),
            coef(c[2])
        ),
        Model::Linear => format!(
            "{}(L) ≈ {} + {}·L ms",
            f.metric.label(),
            coef(c[0]),
            coef(c[1])
        ),
    }
}

/// The lines under a fit: slowdown, crossover, extrapolation, residuals.
pub fn fit_notes(f: &ScalingFit) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(s) = &f.slowdown {
        out.push(format!(
            "slowdown {} → {}: {:.1}× ({} → {}, measured medians)",
            fmt_ctx(s.from_tokens),
            fmt_ctx(s.to_tokens),
            s.ratio,
            ms(s.from),
            ms(s.to)
        ));
    }
    if f.fit.model == Model::Quadratic {
        out.push(match f.crossover_tokens {
            Some(x) => format!(
                "the quadratic term overtakes the linear one at L ≈ {}",
                tokens(x)
            ),
            None if f.fit.quadratic_only() => {
                "no linear term was needed: the quadratic term dominates at every length".to_owned()
            }
            None => "no quadratic term was needed to fit these points".to_owned(),
        });
    }
    if let Some(e) = &f.extrapolation {
        // One sample per length gives every resample the same data: no band to show.
        let band = if e.high - e.low > 1e-9 * e.predicted.abs() {
            format!(
                "{:.0}% band {} – {}, from measurement noise only, not model error",
                e.level * 100.0,
                ms(e.low),
                ms(e.high)
            )
        } else {
            "no band: one sample per length; take more repetitions".to_owned()
        };
        out.push(format!(
            "EXTRAPOLATED to {} (server maximum; measured up to {}): {} ({band})",
            fmt_ctx(e.context_tokens),
            fmt_ctx(e.measured_up_to),
            ms(e.predicted),
        ));
        // Costs growing faster than the model at the top end make the extrapolation low.
        if let Some(last) = f.fit.residuals.last().filter(|r| r.relative > 0.10) {
            out.push(format!(
                "the largest point lies {:.0}% above the fit: cost grows faster than the model there, so the extrapolation is likely too low",
                last.relative * 100.0
            ));
        }
    }
    let res: Vec<String> = f
        .fit
        .residuals
        .iter()
        .map(|r| {
            // Round first so that a tiny negative residual is not shown as "-0%".
            let pct = (r.relative * 100.0).round() + 0.0;
            format!("{} {pct:+.0}%", fmt_ctx(r.context_tokens))
        })
        .collect();
    out.push(format!("residuals (median vs fit): {}", res.join(", ")));
    out
}
