//! Correctness beside speed, from results files alone: needle retrieval per context ×
//! depth, warm samples whose greedy output differs from their cold sample's, and output
//! agreement between two runs that sent the same prompts (`--prompt-seed`). Pure: no I/O.
//!
//! Greedy outputs can differ legitimately (batch composition, thread count, the order of a
//! floating-point reduction), so a difference is reported as "outputs differ", never as
//! "wrong".

use serde::Serialize;

use crate::record::{Flag, NeedleVerdict, Phase, Sample, Status};

/// Needle results at one context and depth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NeedleCell {
    /// Context length.
    pub context_tokens: u64,
    /// Depth of the fact, percent.
    pub depth_pct: u32,
    /// Answers that held the value.
    pub pass: usize,
    /// Answers without the value.
    pub fail: usize,
    /// No answer seen (the request failed, or the protocol shows no answer text):
    /// neither pass nor fail.
    pub error: usize,
}

/// Needle results per context × depth, sorted. A failed request later retried
/// successfully (`--resume`) no longer counts as an error.
pub fn needle_cells(samples: &[Sample]) -> Vec<NeedleCell> {
    let mut cells: Vec<NeedleCell> = Vec::new();
    let needles: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.phase == Phase::Needle)
        .collect();
    for s in &needles {
        let Some(n) = &s.needle else { continue };
        let retried = s.status == Status::Failed
            && needles.iter().any(|o| {
                o.status == Status::Ok
                    && o.context_tokens == s.context_tokens
                    && o.needle
                        .as_ref()
                        .is_some_and(|x| x.depth_pct == n.depth_pct)
            });
        if retried {
            continue;
        }
        let i = match cells
            .iter()
            .position(|c| c.context_tokens == s.context_tokens && c.depth_pct == n.depth_pct)
        {
            Some(i) => i,
            None => {
                cells.push(NeedleCell {
                    context_tokens: s.context_tokens,
                    depth_pct: n.depth_pct,
                    pass: 0,
                    fail: 0,
                    error: 0,
                });
                cells.len() - 1
            }
        };
        match n.verdict {
            NeedleVerdict::Pass => cells[i].pass += 1,
            NeedleVerdict::Fail => cells[i].fail += 1,
            _ => cells[i].error += 1,
        }
    }
    cells.sort_by_key(|c| (c.context_tokens, c.depth_pct));
    cells
}

/// Warm samples flagged `nondeterministic`, per context: (context, flagged, warm samples
/// with a fingerprint).
pub fn nondeterministic(samples: &[Sample]) -> Vec<(u64, usize, usize)> {
    let mut out: Vec<(u64, usize, usize)> = Vec::new();
    for s in samples
        .iter()
        .filter(|s| s.phase == Phase::Warm && s.output_fingerprint.is_some())
    {
        let i = match out.iter().position(|x| x.0 == s.context_tokens) {
            Some(i) => i,
            None => {
                out.push((s.context_tokens, 0, 0));
                out.len() - 1
            }
        };
        out[i].2 += 1;
        out[i].1 += usize::from(s.has(&Flag::Nondeterministic));
    }
    out.sort_unstable();
    out
}

/// Output agreement between two runs at one context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgreementRow {
    /// Context length.
    pub context_tokens: u64,
    /// Sample pairs with a fingerprint on both sides.
    pub pairs: usize,
    /// Of those, identical outputs.
    pub identical: usize,
    /// Among differing pairs, the earliest token index where one diverges (within the
    /// kept ids).
    pub earliest_divergence: Option<usize>,
    /// Pairs that differ beyond the kept ids (the first index is not known).
    pub differ_late: usize,
}

impl AgreementRow {
    /// Identical ÷ pairs.
    pub fn share(&self) -> Option<f64> {
        (self.pairs > 0).then(|| self.identical as f64 / self.pairs as f64)
    }
}

/// Why two runs' outputs cannot be compared, or the rows.
pub fn agreement(
    a_seed: Option<u64>,
    a: &[Sample],
    b_seed: Option<u64>,
    b: &[Sample],
) -> Result<Vec<AgreementRow>, String> {
    match (a_seed, b_seed) {
        (Some(x), Some(y)) if x == y => {}
        (Some(x), Some(y)) => {
            return Err(format!(
                "output agreement: not compared, the runs used different --prompt-seed ({x} vs {y}), so their prompts differ"
            ))
        }
        _ => {
            return Err(
                "output agreement: not compared, give both runs the same --prompt-seed so they send identical prompts".into(),
            )
        }
    }
    let key = |s: &Sample| (s.context_tokens, s.rep, s.phase.as_str().to_owned());
    let mut rows: Vec<AgreementRow> = Vec::new();
    for x in a.iter().filter(|s| s.status == Status::Ok) {
        let Some(fx) = &x.output_fingerprint else {
            continue;
        };
        // Pair by (context, rep, phase); a phase with several samples per rep (warm) pairs
        // its n-th with the other run's n-th.
        let nth = a
            .iter()
            .filter(|s| key(s) == key(x))
            .position(|s| std::ptr::eq(s, x));
        let Some(y) = b
            .iter()
            .filter(|s| key(s) == key(x))
            .nth(nth.unwrap_or(0))
            .filter(|s| s.status == Status::Ok)
        else {
            continue;
        };
        let Some(fy) = &y.output_fingerprint else {
            continue;
        };
        if x.fingerprint_of != y.fingerprint_of {
            continue;
        }
        let i = match rows
            .iter()
            .position(|r| r.context_tokens == x.context_tokens)
        {
            Some(i) => i,
            None => {
                rows.push(AgreementRow {
                    context_tokens: x.context_tokens,
                    pairs: 0,
                    identical: 0,
                    earliest_divergence: None,
                    differ_late: 0,
                });
                rows.len() - 1
            }
        };
        let r = &mut rows[i];
        r.pairs += 1;
        if fx == fy {
            r.identical += 1;
            continue;
        }
        let div = match (&x.output_ids, &y.output_ids) {
            (Some(p), Some(q)) => crate::fingerprint::first_divergence(p, q),
            _ => None,
        };
        match div {
            Some(d) => r.earliest_divergence = Some(r.earliest_divergence.map_or(d, |e| e.min(d))),
            None => r.differ_late += 1,
        }
    }
    rows.sort_by_key(|r| r.context_tokens);
    Ok(rows)
}

/// The agreement section of `compare` as text: one line per context, "outputs differ"
/// loudly where they do.
pub fn agreement_text(
    label_a: &str,
    label_b: &str,
    rows: &Result<Vec<AgreementRow>, String>,
) -> String {
    use std::fmt::Write;
    let rows = match rows {
        Err(why) => return format!("{why}\n"),
        Ok(r) if r.is_empty() => {
            return "output agreement: no sample pairs with output fingerprints\n".to_owned()
        }
        Ok(r) => r,
    };
    let mut out = format!(
        "output agreement ({label_a} vs {label_b}; greedy outputs of the same prompts, paired by context, rep and phase):\ncontext  pairs  identical  first divergence\n"
    );
    for r in rows {
        let share = r.share().unwrap_or(0.0) * 100.0;
        let div = match (r.identical == r.pairs, r.earliest_divergence) {
            (true, _) => "–".to_owned(),
            (false, Some(d)) => format!("token {d}  OUTPUTS DIFFER"),
            (false, None) => format!(
                "after token {}  OUTPUTS DIFFER",
                crate::fingerprint::KEPT_IDS
            ),
        };
        let _ = writeln!(
            out,
            "{:<7}  {:>5}  {:>8.0}%  {div}",
            crate::units::fmt_ctx(r.context_tokens),
            r.pairs,
            share
        );
    }
    if rows.iter().any(|r| r.identical < r.pairs) {
        out.push_str("outputs differ: a speed-up between these runs came with different greedy outputs. That is not proof of an error (batching, thread counts and reduction order change greedy outputs legitimately), but check it before trusting the speed-up.\n");
    }
    out
}
