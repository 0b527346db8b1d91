//! Correctness beside speed, from results files alone: needle retrieval per context ×
//! depth, warm samples whose greedy output differs from their cold sample's, and output
//! agreement between two runs that sent the same prompts (`--prompt-seed`). Pure: no I/O.
//!
//! Greedy outputs can differ legitimately (batch composition, thread count, the order of a
//! floating-point reduction), so a difference is reported as "outputs differ", never as
//! "wrong".

use serde::Serialize;

use ctxbench_schema::record::{Flag, NeedleVerdict, Phase, Sample, Status};

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
            (Some(p), Some(q)) => ctxbench_schema::fingerprint::first_divergence(p, q),
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
                ctxbench_schema::fingerprint::KEPT_IDS
            ),
        };
        let _ = writeln!(
            out,
            "{:<7}  {:>5}  {:>8.0}%  {div}",
            ctxbench_schema::units::fmt_ctx(r.context_tokens),
            r.pairs,
            share
        );
    }
    if rows.iter().any(|r| r.identical < r.pairs) {
        out.push_str("outputs differ: a speed-up between these runs came with different greedy outputs. That is not proof of an error (batching, thread counts and reduction order change greedy outputs legitimately), but check it before trusting the speed-up.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::{FingerprintOf, NeedleCheck};

    fn sample(ctx: u64, rep: u32, phase: Phase, ids: &[u32]) -> Sample {
        let mut s: Sample = serde_json::from_value(serde_json::json!({
            "run_id": "r", "context_tokens": ctx, "rep": rep, "phase": phase.as_str(),
            "status": "ok", "at": "t", "prompt_tokens_sent": ctx, "prompt_tokens": ctx,
            "length_ok": true, "cached_tokens": 0, "cache_verified": true,
            "contaminated": false, "ttft_ms": 1.0, "prefill_tokens_per_s": null,
            "decode_tokens_per_s": null, "ms_per_step": null, "output_tokens": 4,
            "token_chunks": 4, "e2e_ms": 2.0, "finish_reason": "limit", "server": null
        }))
        .unwrap();
        let out = ctxbench_schema::fingerprint::Generated {
            ids: Some(ids.to_vec()),
            text: String::new(),
        };
        let (f, of, kept) = ctxbench_schema::fingerprint::of(&out).unwrap();
        s.output_fingerprint = Some(f);
        s.fingerprint_of = Some(of);
        s.output_ids = kept;
        s
    }

    #[test]
    fn agreement_pairs_by_context_rep_and_phase_and_finds_the_first_divergence() {
        let a = vec![
            sample(1024, 0, Phase::Cold, &[1, 2, 3, 4]),
            sample(1024, 1, Phase::Cold, &[5, 6, 7, 8]),
            sample(2048, 0, Phase::Cold, &[1, 2, 3, 4]),
        ];
        let b = vec![
            sample(2048, 0, Phase::Cold, &[1, 2, 9, 4]),
            sample(1024, 1, Phase::Cold, &[5, 6, 7, 8]),
            sample(1024, 0, Phase::Cold, &[1, 2, 3, 4]),
        ];
        let rows = agreement(Some(7), &a, Some(7), &b).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].pairs, rows[0].identical), (2, 2));
        assert_eq!((rows[1].pairs, rows[1].identical), (1, 0));
        assert_eq!(rows[1].earliest_divergence, Some(2));
        let text = agreement_text("a", "b", &Ok(rows));
        assert!(text.contains("token 2  OUTPUTS DIFFER"), "{text}");
        assert!(!text.contains("wrong"));
        // Different or missing seeds: the prompts differ, so nothing is compared.
        assert!(agreement(Some(7), &a, Some(8), &b).is_err());
        assert!(agreement(None, &a, Some(7), &b).is_err());
        // Text and id fingerprints are never compared with each other.
        let mut t = b.clone();
        t[2].fingerprint_of = Some(FingerprintOf::Text);
        let rows = agreement(Some(7), &a, Some(7), &t).unwrap();
        assert_eq!(rows[0].pairs, 1);
    }

    #[test]
    fn needle_cells_count_errors_apart_and_forget_a_failure_retried() {
        let with = |rep: u32, depth: u32, verdict: NeedleVerdict, ok: bool| {
            let mut s = sample(1024, rep, Phase::Needle, &[1]);
            if !ok {
                s.status = Status::Failed;
            }
            s.needle = Some(NeedleCheck {
                depth_pct: depth,
                value: "12345".into(),
                fact_at: 10,
                fact_tokens: 5,
                question_tokens: 5,
                answer: ok.then(|| "x".into()),
                verdict,
            });
            s
        };
        let s = vec![
            with(0, 10, NeedleVerdict::Pass, true),
            with(1, 50, NeedleVerdict::Error, false),
            with(1, 50, NeedleVerdict::Fail, true), // the resumed retry
            with(2, 90, NeedleVerdict::Error, false),
        ];
        let c = needle_cells(&s);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].pass, c[0].fail, c[0].error), (1, 0, 0));
        assert_eq!((c[1].pass, c[1].fail, c[1].error), (0, 1, 0));
        assert_eq!((c[2].pass, c[2].fail, c[2].error), (0, 0, 1));
    }
}
