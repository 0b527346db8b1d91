//! Predicts what a request at context L will cost from the points measured so far: drives
//! the ETA, the plan's duration estimate and request timeouts. Pure, no I/O.
//!
//! Interpolation is piecewise linear in log-log space between measured medians, and beyond
//! the largest point it extends the slope of the last two (a quadratic prefill shows up as
//! slope 2). This is an estimate for scheduling, not the report's fit.

/// Observed cost at one context length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Context length (tokens).
    pub context: f64,
    /// Median time to first token (s).
    pub ttft_s: f64,
    /// Median time per generated token (s).
    pub step_s: f64,
}

/// The model: observations sorted by context.
#[derive(Debug, Clone, Default)]
pub struct CostModel {
    points: Vec<Observation>,
}

impl CostModel {
    /// A model from observations (non-positive or non-finite ones are ignored).
    pub fn new(mut obs: Vec<Observation>) -> Self {
        obs.retain(|o| {
            o.context > 0.0
                && o.ttft_s > 0.0
                && o.step_s > 0.0
                && o.ttft_s.is_finite()
                && o.step_s.is_finite()
        });
        obs.sort_by(|a, b| a.context.total_cmp(&b.context));
        obs.dedup_by(|a, b| a.context == b.context);
        CostModel { points: obs }
    }

    /// Whether anything has been observed.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Predicted seconds for one request of `context` tokens generating `output` tokens.
    pub fn request_s(&self, context: f64, output: u32) -> Option<f64> {
        // Beyond the data, prefill grows at least linearly (every token is computed) even
        // when small points, dominated by fixed overhead, suggest less.
        let ttft = self.interp(context, |o| o.ttft_s, 1.0)?;
        let step = self.interp(context, |o| o.step_s, 0.0)?;
        Some(ttft + step * output.saturating_sub(1) as f64)
    }

    fn interp(
        &self,
        x: f64,
        f: impl Fn(&Observation) -> f64,
        min_extrap_slope: f64,
    ) -> Option<f64> {
        let p = &self.points;
        match p.len() {
            0 => None,
            // One point: assume cost proportional to context (an underestimate for prefill
            // at long context; corrected once a second point is in).
            1 => Some(f(&p[0]) * x / p[0].context),
            n => {
                let i = match p.iter().position(|o| o.context >= x) {
                    Some(0) => 0,
                    Some(i) => i - 1,
                    None => n - 2,
                };
                let (a, b) = (&p[i], &p[i + 1]);
                let (lx, la, lb) = (x.ln(), a.context.ln(), b.context.ln());
                let (ya, yb) = (f(a).ln(), f(b).ln());
                // Slope clamped to [0, 3]: noise must not predict costs that shrink with
                // context or explode beyond cubic.
                let mut slope = ((yb - ya) / (lb - la)).clamp(0.0, 3.0);
                if x > b.context {
                    slope = slope.max(min_extrap_slope);
                    // Beyond the data: extend from the last point.
                    return Some((yb + slope * (lx - lb)).exp());
                }
                Some((ya + slope * (lx - la)).exp())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(c: f64, ttft: f64, step: f64) -> Observation {
        Observation {
            context: c,
            ttft_s: ttft,
            step_s: step,
        }
    }

    #[test]
    fn quadratic_growth_is_extrapolated_as_quadratic() {
        let m = CostModel::new(vec![obs(1000.0, 0.01, 0.001), obs(2000.0, 0.04, 0.002)]);
        let t = m.request_s(8000.0, 1).unwrap();
        assert!((t - 0.64).abs() < 1e-9, "{t}");
        // Between points: on the power law.
        let t = m.request_s(2f64.sqrt() * 1000.0, 1).unwrap();
        assert!((t - 0.02).abs() < 1e-9, "{t}");
    }

    #[test]
    fn decode_steps_add_to_the_request() {
        let m = CostModel::new(vec![obs(1000.0, 0.01, 0.001), obs(2000.0, 0.02, 0.001)]);
        assert!((m.request_s(1000.0, 33).unwrap() - (0.01 + 0.032)).abs() < 1e-9);
    }

    #[test]
    fn empty_and_single_point_models() {
        assert!(CostModel::new(vec![]).request_s(1.0, 1).is_none());
        let m = CostModel::new(vec![obs(1000.0, 0.1, 0.001)]);
        assert!((m.request_s(4000.0, 1).unwrap() - 0.4).abs() < 1e-9);
    }

    #[test]
    fn prefill_extrapolates_at_least_linearly() {
        // Fixed overhead makes small points look flat; far beyond them TTFT still grows ∝ L.
        let m = CostModel::new(vec![obs(500.0, 0.010, 0.001), obs(1000.0, 0.011, 0.001)]);
        let t = m.request_s(100_000.0, 1).unwrap();
        assert!((t - 1.1).abs() < 1e-9, "{t}");
        // Between the points, the data rules.
        let t = m.request_s(750.0, 1).unwrap();
        assert!(t < 0.011 && t > 0.010);
    }

    #[test]
    fn noise_cannot_make_cost_shrink() {
        let m = CostModel::new(vec![obs(1000.0, 0.05, 0.001), obs(2000.0, 0.04, 0.001)]);
        assert!(m.request_s(64000.0, 1).unwrap() >= 0.04);
    }
}
