//! The two effects of speculation, separated per length (issue 45, point 1): acceptance
//! α(L) (tokens a verify step yields, bonus token included) and cost (the verify step's time
//! against the plain step's). Per output token, a speculative server spends t_verify / α and a
//! plain one t_plain, so
//!
//! speedup ≈ α · t_plain / t_verify
//!
//! which is checked against the measured decode ratio (plain ÷ speculative ms per token). Since
//! ln S = ln α − ln(t_verify / t_plain), a change of the speedup since the first length splits
//! into the two terms' log changes: when the speedup moved by more than 10%, the term that
//! pushed it that way (the larger, if both did) is named; otherwise it holds. Pure: no I/O.

use serde::Serialize;

use super::mean::MeanInterval;
use ctxbench_schema::units::fmt_ctx;

/// Below this relative change (10%) a term is said to hold.
const HOLDS: f64 = 0.10;
/// The predicted and measured speedups agree when within this relative distance (15%).
const AGREES: f64 = 0.15;

/// The measured inputs at one length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    /// Context length.
    pub context_tokens: u64,
    /// Acceptance length α (speculative side).
    pub accept_length: Option<MeanInterval>,
    /// ms per verify step (speculative side).
    pub verify_ms: Option<MeanInterval>,
    /// ms per plain decode step (plain side).
    pub plain_ms: Option<MeanInterval>,
    /// The measured speedup, plain ÷ speculative ms per token.
    pub measured: Option<f64>,
}

/// Which term moved the speedup at a length, against the first length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mover {
    /// The first length: the reference the others are held against.
    Reference,
    /// The verify step's cost against the plain step's changed more than acceptance.
    Cost,
    /// Acceptance changed more than the cost ratio.
    Acceptance,
    /// Both terms held within 10%.
    Neither,
    /// An input is missing.
    Unknown,
}

/// The decomposition at one length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Effects {
    /// Context length.
    pub context_tokens: u64,
    /// α with its interval.
    pub accept_length: Option<MeanInterval>,
    /// ms per verify step with its interval.
    pub verify_ms: Option<MeanInterval>,
    /// ms per plain step with its interval.
    pub plain_ms: Option<MeanInterval>,
    /// t_verify ÷ t_plain: what a verify step costs in plain steps.
    pub cost_ratio: Option<f64>,
    /// α · t_plain / t_verify.
    pub predicted_speedup: Option<f64>,
    /// Its approximate interval (delta method on logs: the three relative half-widths
    /// added in quadrature); `None` when an input has no interval.
    pub predicted_interval: Option<(f64, f64)>,
    /// Plain ÷ speculative ms per token, measured.
    pub measured_speedup: Option<f64>,
    /// Predicted and measured agree within 15% (`None`: one is missing).
    pub agrees: Option<bool>,
    /// The term that moved the speedup since the first length.
    pub mover: Mover,
    /// One sentence saying so.
    pub sentence: String,
}

fn rel_half(m: &MeanInterval) -> Option<f64> {
    match (m.low, m.high) {
        (Some(lo), Some(hi)) if m.mean > 0.0 => Some((hi - lo) / 2.0 / m.mean),
        _ => None,
    }
}

/// α · t_plain / t_verify with its delta-method interval.
fn predict(
    a: &MeanInterval,
    v: &MeanInterval,
    p: &MeanInterval,
) -> Option<(f64, Option<(f64, f64)>)> {
    if v.mean <= 0.0 {
        return None;
    }
    let s = a.mean * p.mean / v.mean;
    let h = [a, v, p]
        .iter()
        .map(|m| rel_half(m))
        .collect::<Option<Vec<f64>>>()
        .map(|h| h.iter().map(|x| x * x).sum::<f64>().sqrt());
    Some((s, h.map(|h| (s * (-h).exp(), s * h.exp()))))
}

/// The decomposition at every length, `rows` in ascending context order; the first length
/// with every input is the reference the others' movers are named against.
pub fn decompose(rows: &[Inputs]) -> Vec<Effects> {
    let mut reference: Option<(u64, f64, f64, f64)> = None;
    rows.iter()
        .map(|r| {
            let (a, v, p) = (r.accept_length, r.verify_ms, r.plain_ms);
            let cost_ratio = match (v, p) {
                (Some(v), Some(p)) if p.mean > 0.0 => Some(v.mean / p.mean),
                _ => None,
            };
            let pred = match (a, v, p) {
                (Some(a), Some(v), Some(p)) => predict(&a, &v, &p),
                _ => None,
            };
            let agrees = match (pred, r.measured) {
                (Some((s, _)), Some(m)) if m > 0.0 => Some((s / m - 1.0).abs() <= AGREES),
                _ => None,
            };
            let (mover, sentence) = match (a, cost_ratio, pred) {
                (Some(a), Some(c), Some((s, _))) => {
                    let here = (r.context_tokens, a.mean, c);
                    match reference {
                        None => {
                            reference = Some((here.0, here.1, here.2, s));
                            (Mover::Reference, reference_sentence(here, s))
                        }
                        Some(r0) => mover(r0, here, s),
                    }
                }
                _ => (
                    Mover::Unknown,
                    format!(
                        "{}: acceptance or a step's cost is not reported, so the speedup cannot be split",
                        fmt_ctx(r.context_tokens)
                    ),
                ),
            };
            Effects {
                context_tokens: r.context_tokens,
                accept_length: a,
                verify_ms: v,
                plain_ms: p,
                cost_ratio,
                predicted_speedup: pred.map(|x| x.0),
                predicted_interval: pred.and_then(|x| x.1),
                measured_speedup: r.measured,
                agrees,
                mover,
                sentence,
            }
        })
        .collect()
}

fn reference_sentence((c, a, cost): (u64, f64, f64), s: f64) -> String {
    format!(
        "{}: a verify step costs {cost:.2}× a plain step and yields {a:.2} tokens: {a:.2} ÷ {cost:.2} = {s:.2}× (the reference for the lengths after it)",
        fmt_ctx(c)
    )
}

/// Names the term that moved the speedup since the reference `r0`: none when the speedup
/// held within 10%, else the one whose log change went the speedup's way and is larger.
fn mover(r0: (u64, f64, f64, f64), (c, a, cost): (u64, f64, f64), s: f64) -> (Mover, String) {
    let (c0, a0, cost0, s0) = r0;
    // ln S = ln α − ln(cost): the two terms' contributions to the speedup's change.
    let (da, dc) = ((a / a0).ln(), -(cost / cost0).ln());
    let ds = da + dc;
    let holds = (1.0 + HOLDS).ln();
    let at = fmt_ctx(c);
    let since = fmt_ctx(c0);
    let cost_words =
        format!("the verify step costs {cost:.2}× the plain step ({cost0:.2}× at {since})");
    let acc_words = format!("acceptance is {a:.2} ({a0:.2} at {since})");
    if ds.abs() < holds {
        return (
            Mover::Neither,
            format!("{at}: {cost_words} and {acc_words}: the speedup holds ({s0:.2}× → {s:.2}×)"),
        );
    }
    // The term pushing the speedup the way it went, the larger one if both do.
    let toward = |x: f64| {
        if x.signum() == ds.signum() {
            x.abs()
        } else {
            0.0
        }
    };
    let moved = if toward(dc) >= toward(da) {
        Mover::Cost
    } else {
        Mover::Acceptance
    };
    let (lead, other, name, not, other_change) = match moved {
        Mover::Cost => (&cost_words, &acc_words, "cost", "acceptance", da),
        _ => (&acc_words, &cost_words, "acceptance", "cost", dc),
    };
    let clause = if other_change.abs() < holds {
        format!("{name}, not {not}, moved the speedup from {s0:.2}× to {s:.2}×")
    } else {
        format!("{name} more than {not} moved the speedup from {s0:.2}× to {s:.2}×")
    };
    (moved, format!("{at}: {lead} while {other}: {clause}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mi(mean: f64, half: f64) -> Option<MeanInterval> {
        MeanInterval::around(mean, half, 6)
    }

    fn row(c: u64, a: f64, v: f64, p: f64) -> Inputs {
        Inputs {
            context_tokens: c,
            accept_length: mi(a, 0.1 * a),
            verify_ms: mi(v, 0.0),
            plain_ms: mi(p, 0.0),
            measured: Some(a * p / v),
        }
    }

    #[test]
    fn cost_that_grows_while_acceptance_holds_is_named_cost() {
        // α holds at 3.1; the verify step goes from 1.0× to 1.9× a plain step.
        let e = decompose(&[row(4096, 3.1, 10.0, 10.0), row(32768, 3.05, 38.0, 20.0)]);
        assert_eq!(e[0].mover, Mover::Reference);
        assert!((e[0].predicted_speedup.unwrap() - 3.1).abs() < 1e-9);
        assert_eq!(e[1].mover, Mover::Cost);
        assert!((e[1].cost_ratio.unwrap() - 1.9).abs() < 1e-9);
        assert!(
            e[1].sentence.starts_with("32k: the verify step costs 1.90× the plain step (1.00× at 4k) while acceptance is 3.05 (3.10 at 4k): cost, not acceptance, moved the speedup from 3.10× to 1.61×"),
            "{}",
            e[1].sentence
        );
        assert_eq!(e[1].agrees, Some(true));
        // Only α has an interval width (±10%): the product's is ±10% on logs.
        let (lo, hi) = e[1].predicted_interval.unwrap();
        let s = e[1].predicted_speedup.unwrap();
        assert!((hi / s - 0.1f64.exp()).abs() < 1e-9 && (s / lo - 0.1f64.exp()).abs() < 1e-9);
    }

    #[test]
    fn a_drafter_window_cliff_is_named_acceptance_and_a_flat_pair_neither() {
        let e = decompose(&[
            row(4096, 5.0, 20.0, 10.0),
            row(8192, 5.2, 21.0, 10.5),
            row(16384, 1.2, 22.0, 11.0),
        ]);
        assert_eq!(e[1].mover, Mover::Neither);
        assert!(
            e[1].sentence.contains("the speedup holds (2.50× → 2.60×)"),
            "{}",
            e[1].sentence
        );
        assert_eq!(e[2].mover, Mover::Acceptance);
        assert!(
            e[2].sentence
                .contains("acceptance, not cost, moved the speedup from 2.50× to 0.60×"),
            "{}",
            e[2].sentence
        );
    }

    #[test]
    fn both_terms_moving_names_the_larger_and_a_disagreeing_measurement_is_flagged() {
        let mut r = row(8192, 3.0, 60.0, 10.0);
        // Measured 0.3×, predicted 0.5×.
        r.measured = Some(0.3);
        // Cost ratio 2 → 6 (ln 3 down), α 4 → 3 (ln 4/3 down): cost is the larger push.
        let e = decompose(&[row(1024, 4.0, 20.0, 10.0), r]);
        assert_eq!(e[1].mover, Mover::Cost);
        assert!(
            e[1].sentence.contains("cost more than acceptance"),
            "{}",
            e[1].sentence
        );
        assert_eq!(e[1].agrees, Some(false));
        // Terms that offset each other: the speedup holds, nothing is named.
        let e = decompose(&[row(1024, 4.0, 20.0, 10.0), row(2048, 2.0, 20.0, 20.0)]);
        assert_eq!(e[1].mover, Mover::Neither);
        // Acceptance rising while cost rises more: the speedup fell, cost is named.
        let e = decompose(&[row(1024, 2.0, 20.0, 10.0), row(2048, 2.4, 60.0, 10.0)]);
        assert!(
            e[1].sentence.contains("cost more than acceptance"),
            "{}",
            e[1].sentence
        );
        // A missing input: unknown, and the next full row becomes the reference.
        let mut gap = row(512, 4.0, 20.0, 10.0);
        gap.verify_ms = None;
        let e = decompose(&[gap, row(1024, 4.0, 20.0, 10.0)]);
        assert_eq!((e[0].mover, e[1].mover), (Mover::Unknown, Mover::Reference));
        assert_eq!(e[0].predicted_interval, None);
    }
}
