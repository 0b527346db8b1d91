//! A drafter-window cliff (issue 45, point 2): a change-point in acceptance along the
//! context length. The rule: two adjacent measured lengths whose acceptance intervals do not
//! overlap (the longer one's upper end below the shorter one's lower end) and whose mean falls
//! by more than half. Acceptance is the rate (accepted ÷ drafted) where both lengths have it,
//! else the draft tokens accepted per verify step (acceptance length − 1, the bonus token
//! taken out so that "half" means half of what the draft contributed). Pure: no I/O.

use serde::Serialize;

use super::mean::MeanInterval;
use ctxbench_schema::units::fmt_ctx;

/// What the acceptance figures of a cliff are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Accepted ÷ drafted tokens.
    Rate,
    /// Draft tokens accepted per verify step (acceptance length − 1).
    AcceptedPerStep,
}

/// Acceptance at one length, as the rule reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Acceptance {
    /// Context length.
    pub context_tokens: u64,
    /// Acceptance rate with its interval.
    pub rate: Option<MeanInterval>,
    /// Acceptance length (bonus token included) with its interval.
    pub length: Option<MeanInterval>,
}

/// A cliff found, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cliff {
    /// The last length before the fall.
    pub before_tokens: u64,
    /// The first length after it.
    pub after_tokens: u64,
    /// Which acceptance figure.
    pub measure: Measure,
    /// Acceptance before, with its interval.
    pub before: MeanInterval,
    /// Acceptance after.
    pub after: MeanInterval,
    /// The finding in one sentence, with the likely cause.
    pub message: String,
}

fn shift(m: MeanInterval, by: f64) -> MeanInterval {
    MeanInterval {
        mean: m.mean - by,
        low: m.low.map(|v| v - by),
        high: m.high.map(|v| v - by),
        n: m.n,
    }
}

fn pair(x: &Acceptance, y: &Acceptance) -> Option<(Measure, MeanInterval, MeanInterval)> {
    match (x.rate, y.rate, x.length, y.length) {
        (Some(a), Some(b), _, _) => Some((Measure::Rate, a, b)),
        (_, _, Some(a), Some(b)) => Some((Measure::AcceptedPerStep, shift(a, 1.0), shift(b, 1.0))),
        _ => None,
    }
}

/// The first cliff along `points` (ascending context), by the rule in the module docs.
pub fn find(points: &[Acceptance]) -> Option<Cliff> {
    points.windows(2).find_map(|w| {
        let (measure, a, b) = pair(&w[0], &w[1])?;
        let (Some(a_low), Some(b_high)) = (a.low, b.high) else {
            return None;
        };
        if !(b_high < a_low && b.mean < a.mean / 2.0) {
            return None;
        }
        let what = match measure {
            Measure::Rate => "acceptance",
            Measure::AcceptedPerStep => "draft tokens accepted per step",
        };
        let f = |x: f64| format!("{x:.2}");
        let message = format!(
            "{what} falls from {} ({}–{}) to {} ({}–{}) between {} and {}: the intervals do not overlap and it more than halves — a drafter window shorter than the context is the usual cause (e.g. --speculative-dflash-draft-window-size, a draft trained or RoPE-scaled to a shorter context)",
            f(a.mean),
            f(a_low),
            f(a.high.unwrap_or(a.mean)),
            f(b.mean),
            f(b.low.unwrap_or(b.mean).max(0.0)),
            f(b_high),
            fmt_ctx(w[0].context_tokens),
            fmt_ctx(w[1].context_tokens)
        );
        Some(Cliff {
            before_tokens: w[0].context_tokens,
            after_tokens: w[1].context_tokens,
            measure,
            before: a,
            after: b,
            message,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mi(mean: f64, half: f64) -> Option<MeanInterval> {
        MeanInterval::around(mean, half, 4)
    }

    fn rate(c: u64, m: f64, h: f64) -> Acceptance {
        Acceptance {
            context_tokens: c,
            rate: mi(m, h),
            length: None,
        }
    }

    #[test]
    fn a_fall_from_071_to_008_between_4k_and_8k_is_a_cliff() {
        let c = find(&[
            rate(2048, 0.72, 0.05),
            rate(4096, 0.71, 0.05),
            rate(8192, 0.08, 0.03),
            rate(16384, 0.02, 0.01),
        ])
        .unwrap();
        assert_eq!((c.before_tokens, c.after_tokens), (4096, 8192));
        assert_eq!(c.measure, Measure::Rate);
        assert!(
            c.message.starts_with(
                "acceptance falls from 0.71 (0.66–0.76) to 0.08 (0.05–0.11) between 4k and 8k"
            ),
            "{}",
            c.message
        );
        assert!(c.message.contains("--speculative-dflash-draft-window-size"));
    }

    #[test]
    fn overlapping_intervals_or_a_fall_of_less_than_half_is_no_cliff() {
        // Halved but the intervals overlap.
        assert_eq!(find(&[rate(1, 0.6, 0.2), rate(2, 0.25, 0.2)]), None);
        // Apart but only a 40% fall.
        assert_eq!(find(&[rate(1, 0.5, 0.01), rate(2, 0.3, 0.01)]), None);
        // No interval (one unit): no evidence.
        let one = Acceptance {
            context_tokens: 1,
            rate: Some(MeanInterval {
                mean: 0.9,
                low: None,
                high: None,
                n: 1,
            }),
            length: None,
        };
        assert_eq!(find(&[one, rate(2, 0.01, 0.01)]), None);
    }

    #[test]
    fn without_a_rate_the_accepted_draft_tokens_per_step_are_used() {
        let len = |c, m, h| Acceptance {
            context_tokens: c,
            rate: None,
            length: mi(m, h),
        };
        // 4.0 → 1.8 per step: 3.0 → 0.8 draft tokens accepted, under half.
        let c = find(&[len(4096, 4.0, 0.2), len(8192, 1.8, 0.2)]).unwrap();
        assert_eq!(c.measure, Measure::AcceptedPerStep);
        assert!((c.before.mean - 3.0).abs() < 1e-9);
        // 4.0 → 2.6: 3.0 → 1.6, more than half kept.
        assert_eq!(find(&[len(4096, 4.0, 0.1), len(8192, 2.6, 0.1)]), None);
    }
}
