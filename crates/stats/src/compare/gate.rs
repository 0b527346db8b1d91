//! The CI gate of `ctxbench compare --fail-if-slower`: every cell of every B that is
//! significantly worse than A by more than the threshold, cold cells (per context, or
//! per (context, concurrency) in a grid) and warm cells alike (TTFT_inc per (L, N) of
//! `--mode append`, per (L, N, tier) of `--mode tiers`), each under the same rule
//! ([`significance::fails_gate`]). A cell without a verdict never fails the gate, and the
//! gate says how many there were, cold and warm apart. Built from the comparison alone
//! (so from the results files alone). Pure: the binary prints [`Gate::lines`].

use serde::Serialize;

use super::{Comparison, Verdict};
use crate::stats::significance::{self, CellComparison, RatioInterval};

/// One cell of one B that fails the gate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// B's label.
    pub side: String,
    /// The metric as printed: `TTFT`, `prefill`, `decode`, `ms/step`, or `TTFT_inc` (warm).
    pub metric: &'static str,
    /// The cell as printed in the tables: `1k`, `16k ×4`, `4k + 128`, `4k + 128 disk`.
    pub cell: String,
    /// Whether it is a warm cell.
    pub warm: bool,
    /// How much worse B is (0.3 = a time 30% longer, a rate 1.3× lower).
    pub worse_by: f64,
    /// B/A.
    pub ratio: Option<f64>,
    /// Its interval.
    pub interval: Option<RatioInterval>,
}

/// What the gate found over a whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    /// The threshold (0.05 = 5%).
    pub threshold: f64,
    /// The cells that fail, cold ones first, in table order.
    pub failures: Vec<Failure>,
    /// Cold cells without a verdict (too few runs or samples).
    pub undecided_cold: usize,
    /// Warm cells without a verdict.
    pub undecided_warm: usize,
    /// Warm cells compared (with a verdict or not).
    pub warm_cells: usize,
    /// Why a B's warm cells were not compared (conversation runs, mixed modes, no common
    /// cell), with B's label: nothing there could fail the gate.
    pub warm_not_gated: Vec<String>,
    /// Lengths a side predicted from its fits instead of measuring (`--design auto`): never
    /// gated, said so.
    pub predicted_not_gated: Vec<String>,
}

fn undecided(v: Verdict) -> bool {
    matches!(v, Verdict::TooFewRuns | Verdict::TooFewSamples)
}

fn failure(
    side: &str,
    metric: &'static str,
    cell: String,
    warm: bool,
    c: &CellComparison,
    threshold: f64,
) -> Option<Failure> {
    Some(Failure {
        side: side.to_owned(),
        metric,
        cell,
        warm,
        worse_by: significance::fails_gate(c, threshold)?,
        ratio: c.ratio,
        interval: c.interval,
    })
}

/// The gate over every B of `cmp` at `threshold` (0.05 = 5%).
pub fn apply(cmp: &Comparison, threshold: f64) -> Gate {
    let mut g = Gate {
        threshold,
        failures: Vec::new(),
        undecided_cold: 0,
        undecided_warm: 0,
        warm_cells: 0,
        warm_not_gated: Vec::new(),
        predicted_not_gated: Vec::new(),
    };
    let mut warm_failures = Vec::new();
    for v in &cmp.versus {
        let side = &v.run.label;
        for n in &v.predicted {
            if !g.predicted_not_gated.contains(n) {
                g.predicted_not_gated.push(n.clone());
            }
        }
        for r in &v.rows {
            g.undecided_cold += usize::from(undecided(r.verdict));
            let f = failure(
                side,
                r.metric.label(),
                r.label(),
                false,
                &r.cell(v.basis),
                threshold,
            );
            g.failures.extend(f);
        }
        let Some(w) = &v.warm else { continue };
        if w.rows.is_empty() {
            g.warm_not_gated
                .extend(w.notes.iter().map(|n| format!("{side}: {n}")));
        }
        for r in &w.rows {
            g.warm_cells += 1;
            g.undecided_warm += usize::from(undecided(r.verdict));
            let f = failure(
                side,
                "TTFT_inc",
                r.label(),
                true,
                &r.cell(v.basis),
                threshold,
            );
            warm_failures.extend(f);
        }
    }
    g.failures.extend(warm_failures);
    g
}

impl Gate {
    /// Whether some cell fails (exit code 3).
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    /// What the gate prints (on stderr), `baseline` being A's label.
    pub fn lines(&self, baseline: &str) -> Vec<String> {
        let pct = self.threshold * 100.0;
        let mut out = Vec::new();
        let no_verdict = "had too few runs or samples for a verdict; they cannot fail the gate (that is not a pass: measure more runs)";
        if self.undecided_cold > 0 {
            out.push(format!(
                "gate: {} cell(s) {no_verdict}",
                self.undecided_cold
            ));
        }
        if self.undecided_warm > 0 {
            out.push(format!(
                "gate: {} warm cell(s) (TTFT_inc) {no_verdict}",
                self.undecided_warm
            ));
        }
        out.extend(
            self.warm_not_gated
                .iter()
                .map(|n| format!("gate: warm cells not gated: {n}")),
        );
        out.extend(
            self.predicted_not_gated
                .iter()
                .map(|n| format!("gate: {n}")),
        );
        if self.failures.is_empty() {
            let warm = if self.warm_cells > 0 {
                format!(" (cold cells and {} warm cell(s))", self.warm_cells)
            } else {
                String::new()
            };
            out.push(format!(
                "gate: no metric is significantly slower than the baseline by more than {pct:.1}%{warm}"
            ));
            return out;
        }
        out.push(format!(
            "gate FAILED: {} cell(s) significantly slower than {baseline} by more than {pct:.1}%:",
            self.failures.len()
        ));
        for f in &self.failures {
            let ci = f
                .interval
                .map(|i| {
                    format!(
                        ", B/A {:.3} ({:.3}–{:.3})",
                        f.ratio.unwrap_or(f64::NAN),
                        i.low,
                        i.high
                    )
                })
                .unwrap_or_default();
            out.push(format!(
                "  {}: {} at {}: {:.1}% worse{ci}",
                f.side,
                f.metric,
                f.cell,
                f.worse_by * 100.0
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::warm::tests::run;
    use crate::stats::significance::Settings;
    use ctxbench_schema::warm::{Tier, WarmMode};

    fn gate(a: super::super::Loaded, b: super::super::Loaded, threshold: f64) -> Gate {
        let cmp = crate::compare::build(&[vec![a], vec![b]], false, &Settings::default())
            .expect("comparable");
        apply(&cmp, threshold)
    }

    #[test]
    fn a_length_a_designed_run_predicted_is_never_gated_and_the_gate_says_so() {
        let a = ctxbench_schema::testdata::golden("sweep.jsonl");
        let mut b = a.clone();
        // B predicted its longest length instead of measuring it: its samples there go, a
        // `predicted` point line stays.
        let longest = b.samples.iter().map(|s| s.context_tokens).max().unwrap();
        b.samples.retain(|s| s.context_tokens != longest);
        b.points.retain(|p| p.context_tokens != longest);
        b.points.push(ctxbench_schema::record::PointRecord {
            run_id: b.header.run_id.clone(),
            context_tokens: longest,
            reps: 0,
            usable: 0,
            stop_reason: ctxbench_schema::record::StopReason::Predicted,
            ttft_ci_rel: Some(0.04),
            decode_ci_rel: Some(0.04),
            concurrency: None,
            design: None,
            quantile: None,
        });
        let cmp = crate::compare::build(
            &[
                vec![("a".into(), "a.jsonl".into(), a)],
                vec![("b".into(), "b.jsonl".into(), b)],
            ],
            false,
            &Settings::default(),
        )
        .expect("comparable");
        let v = &cmp.versus[0];
        assert!(
            v.rows.iter().all(|r| r.context_tokens != longest),
            "{:?}",
            v.rows
        );
        assert_eq!(v.predicted.len(), 1, "{:?}", v.predicted);
        assert!(
            v.predicted[0].contains("b predicted it"),
            "{:?}",
            v.predicted
        );
        let g = apply(&cmp, 0.05);
        let lines = g.lines("a").join("\n");
        assert!(
            lines.contains(&format!(
                "gate: {longest} tokens: b predicted it from its fits"
            )),
            "{lines}"
        );
        assert!(lines.contains("not compared, not gated"), "{lines}");
    }

    #[test]
    fn a_warm_cell_slower_beyond_the_threshold_fails_the_gate_and_is_named() {
        let a = run(WarmMode::Append, 20.0, true);
        let b = run(WarmMode::Append, 200.0, false);
        let g = gate(a.clone(), b.clone(), 0.05);
        assert!(g.failed(), "{g:?}");
        assert_eq!(g.failures.len(), 1, "{g:?}");
        let f = &g.failures[0];
        assert_eq!(
            (f.metric, f.cell.as_str(), f.warm),
            ("TTFT_inc", "4k + 128", true)
        );
        assert!(f.worse_by > 5.0, "{f:?}");
        let lines = g.lines("on").join("\n");
        assert!(lines.contains("gate FAILED: 1 cell(s) significantly slower than on"));
        assert!(lines.contains("x: TTFT_inc at 4k + 128: "), "{lines}");
        // The cold rows of these runs have no samples: counted apart, never failing.
        assert!(g.undecided_cold > 0 && g.undecided_warm == 0, "{g:?}");
        // B faster than A: nothing fails, and the warm cell is said to be checked.
        let g = gate(b.clone(), a, 0.05);
        assert!(!g.failed(), "{g:?}");
        assert_eq!(g.warm_cells, 1);
        assert!(g.lines("off").join("\n").contains("and 1 warm cell(s)"));
        // A threshold beyond the change: nothing fails.
        let a = run(WarmMode::Append, 20.0, true);
        assert!(!gate(a, b, 100.0).failed());
    }

    #[test]
    fn a_warm_cell_within_the_noise_band_or_without_a_verdict_does_not_fail() {
        // 3% slower: inside the ±5% band.
        let a = run(WarmMode::Append, 100.0, true);
        let b = run(WarmMode::Append, 103.0, true);
        let g = gate(a.clone(), b, 0.0);
        assert!(!g.failed(), "{g:?}");
        assert_eq!((g.warm_cells, g.undecided_warm), (1, 0));
        // Two samples per side: too few for a verdict, however slow.
        let mut b = run(WarmMode::Append, 1000.0, false);
        let mut a2 = a;
        a2.2.samples.truncate(2);
        b.2.samples.truncate(2);
        let g = gate(a2, b, 0.05);
        assert!(!g.failed(), "{g:?}");
        assert_eq!(g.undecided_warm, 1);
        assert!(g
            .lines("a")
            .iter()
            .any(|l| l.starts_with("gate: 1 warm cell(s) (TTFT_inc) had too few")));
    }

    #[test]
    fn a_tier_cell_is_named_with_its_tier_and_conversations_say_they_are_not_gated() {
        let tiered = |ttft: f64, hit: bool| {
            let mut r = run(WarmMode::Tiers, ttft, hit);
            for s in &mut r.2.samples {
                s.phase = ctxbench_schema::record::Phase::Tier;
                if let Some(w) = s.warm.as_mut() {
                    w.tier = Some(Tier::Disk);
                }
            }
            r
        };
        let g = gate(tiered(20.0, true), tiered(200.0, true), 0.05);
        assert_eq!(g.failures.len(), 1, "{g:?}");
        assert_eq!(g.failures[0].cell, "4k + 128 disk");
        let c = run(WarmMode::Conversation, 20.0, true);
        let g = gate(c.clone(), c, 0.05);
        assert!(!g.failed());
        assert!(g
            .lines("a")
            .iter()
            .any(|l| l.starts_with("gate: warm cells not gated: x: conversation runs")));
    }
}
