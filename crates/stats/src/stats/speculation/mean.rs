//! A mean with its t-interval, shared by the speculative figures and their decomposition.

use serde::Serialize;

/// A mean with its t-interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeanInterval {
    /// The mean (of samples, or of run means).
    pub mean: f64,
    /// Lower end (`None` with a single unit).
    pub low: Option<f64>,
    /// Upper end.
    pub high: Option<f64>,
    /// Units behind it.
    pub n: usize,
}

impl MeanInterval {
    /// `mean` ± `half` over `n` units: the tests' interval.
    #[cfg(test)]
    pub(crate) fn around(mean: f64, half: f64, n: usize) -> Option<MeanInterval> {
        Some(MeanInterval {
            mean,
            low: Some(mean - half),
            high: Some(mean + half),
            n,
        })
    }

    /// The interval cut to what the quantity can be.
    pub fn within(self, lo: f64, hi: f64) -> MeanInterval {
        MeanInterval {
            low: self.low.map(|v| v.clamp(lo, hi)),
            high: self.high.map(|v| v.clamp(lo, hi)),
            ..self
        }
    }
}
