//! Two sides' fractions of the hardware's limit, side by side: an A/B of two kernels says
//! how much of A's remaining headroom B took. Built from the comparison's medians per
//! context length; no I/O.

use serde::Serialize;

use super::{decode_bound_ms, pct, prefill_flops, Limits};
use ctxbench_schema::model::ModelFacts;
use ctxbench_schema::units::fmt_ctx;

/// One side of the comparison, as the roofline needs it.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// Its model's size.
    pub facts: Option<&'a ModelFacts>,
    /// It decodes speculatively: its ms/step is per token, not per read of the weights.
    pub speculative: bool,
}

/// Both sides' medians at one context length.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Medians {
    /// Context length.
    pub context_tokens: u64,
    /// A's ms/step.
    pub a_ms_per_step: Option<f64>,
    /// B's ms/step.
    pub b_ms_per_step: Option<f64>,
    /// A's TTFT, ms.
    pub a_ttft_ms: Option<f64>,
    /// B's TTFT, ms.
    pub b_ttft_ms: Option<f64>,
}

/// A fraction of a bound, flagged when it is above it (a defect of the inputs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fraction {
    /// bound ÷ measured (decode) or FLOPs ÷ (time × peak) (prefill).
    pub value: f64,
    /// Above 1: impossible.
    pub impossible: bool,
}

impl Fraction {
    fn of(value: f64) -> Fraction {
        Fraction {
            value,
            impossible: value > 1.0,
        }
    }

    /// `23%`, or `impossible` above the bound.
    pub fn text(f: Option<Fraction>) -> String {
        match f {
            Some(f) if f.impossible => "impossible".to_owned(),
            Some(f) => pct(f.value),
            None => "–".to_owned(),
        }
    }
}

/// A and B at one context length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VersusRow {
    /// Context length.
    pub context_tokens: u64,
    /// A's decode bound, ms.
    pub a_bound_ms: Option<f64>,
    /// B's decode bound, ms (B's own model facts).
    pub b_bound_ms: Option<f64>,
    /// A's bandwidth utilisation.
    pub a_decode: Option<Fraction>,
    /// B's.
    pub b_decode: Option<Fraction>,
    /// (B − A) ÷ (1 − A): the share of A's decode headroom B took (negative: gave back).
    pub headroom_taken: Option<f64>,
    /// A's prefill MFU.
    pub a_mfu: Option<Fraction>,
    /// B's.
    pub b_mfu: Option<Fraction>,
}

/// Both sides held against the same limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RooflineComparison {
    /// The limits.
    pub limits: Limits,
    /// One row per context length both sides measured.
    pub rows: Vec<VersusRow>,
    /// Figures above 100% of a bound: flagged, no headroom drawn from them.
    pub defects: Vec<String>,
    /// What is missing.
    pub notes: Vec<String>,
}

impl RooflineComparison {
    /// "B took 40% of A's decode headroom at 32k (23% → 54% of the bandwidth bound)", at the
    /// largest length where both fractions are possible.
    pub fn headroom_line(&self) -> Option<String> {
        let r = self
            .rows
            .iter()
            .rev()
            .find(|r| r.headroom_taken.is_some())?;
        let (a, b, t) = (r.a_decode?, r.b_decode?, r.headroom_taken?);
        let verb = if t >= 0.0 { "took" } else { "gave back" };
        Some(format!(
            "B {verb} {} of A's decode headroom at {} ({} → {} of the bandwidth bound)",
            pct(t.abs()),
            fmt_ctx(r.context_tokens),
            pct(a.value),
            pct(b.value)
        ))
    }
}

/// A and B side by side at every context length of `medians`.
pub fn compare(limits: &Limits, a: Side, b: Side, medians: &[Medians]) -> RooflineComparison {
    let mut notes = Vec::new();
    for (name, s) in [("A", a), ("B", b)] {
        if s.facts.is_none() {
            notes.push(format!(
                "{name}: no model facts (the server did not state them; give --model-config)"
            ));
        }
        if s.speculative {
            notes.push(format!("{name} decodes speculatively: its ms/step is per token, not per read of the weights, so its decode fraction is left out"));
        }
    }
    let bw = limits.memory_bandwidth_gb_s;
    let bound = |s: Side, l: u64| match (s.facts, bw, s.speculative) {
        (Some(f), Some(bw), false) => decode_bound_ms(f, bw, l),
        _ => None,
    };
    let mfu = |s: Side, l: u64, t: Option<f64>| {
        let flops = prefill_flops(s.facts?, l)?;
        Some(Fraction::of(
            flops / (t? / 1e3 * limits.peak_tflops? * 1e12),
        ))
    };
    let rows: Vec<VersusRow> = medians
        .iter()
        .map(|m| {
            let l = m.context_tokens;
            let (ab, bb) = (bound(a, l), bound(b, l));
            let frac = |bound: Option<f64>, ms: Option<f64>| {
                Some(Fraction::of(bound? / ms.filter(|x| *x > 0.0)?))
            };
            let (ad, bd) = (frac(ab, m.a_ms_per_step), frac(bb, m.b_ms_per_step));
            let headroom_taken = match (ad, bd) {
                (Some(x), Some(y)) if !x.impossible && !y.impossible && x.value < 1.0 => {
                    Some((y.value - x.value) / (1.0 - x.value))
                }
                _ => None,
            };
            VersusRow {
                context_tokens: l,
                a_bound_ms: ab,
                b_bound_ms: bb,
                a_decode: ad,
                b_decode: bd,
                headroom_taken,
                a_mfu: mfu(a, l, m.a_ttft_ms),
                b_mfu: mfu(b, l, m.b_ttft_ms),
            }
        })
        .collect();
    RooflineComparison {
        limits: limits.clone(),
        defects: defects(limits, &rows),
        rows,
        notes,
    }
}

/// The impossible figures of the rows, worded once per kind.
fn defects(limits: &Limits, rows: &[VersusRow]) -> Vec<String> {
    let at = |pick: &dyn Fn(&VersusRow) -> [Option<Fraction>; 2]| -> Vec<String> {
        rows.iter()
            .flat_map(|r| {
                let [x, y] = pick(r);
                [("A", x), ("B", y)]
                    .into_iter()
                    .filter(|(_, f)| f.is_some_and(|f| f.impossible))
                    .map(move |(side, _)| format!("{side} at {}", fmt_ctx(r.context_tokens)))
            })
            .collect()
    };
    let mut out = Vec::new();
    let decode = at(&|r| [r.a_decode, r.b_decode]);
    if !decode.is_empty() {
        out.push(format!(
            "above 100% of the bound: check --memory-bandwidth ({}) and the model facts: decode measured faster than memory allows ({}); no headroom figure is drawn from it",
            limits.source,
            decode.join(", ")
        ));
    }
    let prefill = at(&|r| [r.a_mfu, r.b_mfu]);
    if !prefill.is_empty() {
        out.push(format!(
            "above 100% of peak FLOPs: check --peak-tflops ({}) and the model facts: prefill measured faster than the peak allows ({})",
            limits.source,
            prefill.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> ModelFacts {
        // 1 GB of weights a step reads, 100 kB of cache per token, 2 GFLOPs per token.
        ModelFacts {
            source: "t".into(),
            weight_bytes: Some(1_000_000_000),
            kv_bytes_per_token: Some(100_000),
            flops_per_token: Some(2e9),
            ..ModelFacts::default()
        }
    }

    #[test]
    fn b_taking_part_of_a_s_headroom_is_said_in_one_line() {
        // 1 TB/s: the bound at 10k tokens is (1 GB + 1 GB) / 1 TB/s = 2 ms.
        let limits = Limits::resolve(None, Some(1000.0), Some(100.0))
            .unwrap()
            .unwrap();
        let f = facts();
        let side = Side {
            facts: Some(&f),
            speculative: false,
        };
        let m = Medians {
            context_tokens: 10_000,
            a_ms_per_step: Some(8.0),
            b_ms_per_step: Some(4.0),
            // 2e13 FLOPs over 0.4 s at 100 TFLOPs: 50%.
            a_ttft_ms: Some(400.0),
            b_ttft_ms: Some(100.0),
        };
        let c = compare(&limits, side, side, &[m]);
        let r = c.rows[0];
        assert_eq!(r.a_bound_ms, Some(2.0));
        assert_eq!(r.a_decode.unwrap().value, 0.25);
        assert_eq!(r.b_decode.unwrap().value, 0.5);
        // From 25% to 50%: a third of the 75% left.
        assert!((r.headroom_taken.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            c.headroom_line().unwrap(),
            "B took 33% of A's decode headroom at 10000 (25% → 50% of the bandwidth bound)"
        );
        assert_eq!(r.a_mfu.unwrap().value, 0.5);
        // B's prefill at 200% of the peak: impossible, said, never a figure.
        assert!(r.b_mfu.unwrap().impossible);
        assert_eq!(Fraction::text(r.b_mfu), "impossible");
        assert_eq!(c.defects.len(), 1);
        assert!(
            c.defects[0].contains("above 100% of peak FLOPs")
                && c.defects[0].contains("B at 10000")
        );
    }

    #[test]
    fn an_impossible_side_gives_no_headroom_and_a_speculative_one_no_fraction() {
        let limits = Limits::resolve(None, Some(100.0), None).unwrap().unwrap();
        let f = facts();
        let plain = Side {
            facts: Some(&f),
            speculative: false,
        };
        let m = Medians {
            context_tokens: 1000,
            a_ms_per_step: Some(20.0),
            // The bound is 11 ms: 5 ms is impossible.
            b_ms_per_step: Some(5.0),
            ..Medians::default()
        };
        let c = compare(&limits, plain, plain, &[m]);
        assert!(c.rows[0].b_decode.unwrap().impossible);
        assert!(c.rows[0].headroom_taken.is_none() && c.headroom_line().is_none());
        assert!(c.defects[0].starts_with("above 100% of the bound: check --memory-bandwidth"));
        let spec = Side {
            facts: Some(&f),
            speculative: true,
        };
        let c = compare(&limits, plain, spec, &[m]);
        assert!(c.rows[0].b_decode.is_none() && c.defects.is_empty());
        assert!(c.notes[0].contains("speculatively"));
    }
}
