//! `ctxbench compare A.jsonl B.jsonl [...]` or `compare --a A1 A2 A3 --b B1 B2 B3`: per
//! context point and metric, B/A with a confidence interval and a plain verdict from
//! [`crate::stats::significance`] (Welch's t on log values, the run as the unit when a side
//! has several results files, a noise band, "too few runs"/"too few samples" instead of a
//! guess). Built from the results files alone; refuses runs that did not measure the same
//! thing.

use serde::Serialize;

use crate::stats::metric::{self, Metric};
use crate::stats::significance::{self, Basis, CellComparison, RatioInterval, Settings};
use crate::stats::speculation::{self, SpecSide, Speculation};
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record::{self, Results};

pub use crate::stats::significance::Verdict;

pub mod coverage;
pub mod gate;
pub mod loaded;
pub mod replay;
pub mod retention;
pub mod warm;

pub use loaded::Loaded;

/// Runs compared against a baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Side A (the baseline).
    pub baseline: RunInfo,
    /// Each other side against A.
    pub versus: Vec<Versus>,
    /// Confidence level of the intervals.
    pub level: f64,
    /// Noise band: a change is called only when its whole interval lies beyond ±noise.
    pub noise: f64,
    /// Runs per side needed for a verdict when a side has several runs.
    pub min_runs: usize,
    /// Samples per side needed for a verdict when each side is one run.
    pub min_samples: usize,
}

/// What identifies one side (one or more runs of the same thing) in a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// Short name.
    pub label: String,
    /// Results file (the first one when the side has several).
    pub path: String,
    /// Every results file of this side.
    pub paths: Vec<String>,
    /// Run id (of the first file).
    pub run_id: String,
    /// Corpus label.
    pub corpus: String,
}

/// One side (B) against the baseline (A).
#[derive(Debug, Clone, Serialize)]
pub struct Versus {
    /// Side B.
    pub run: RunInfo,
    /// What the intervals are over: run medians, or the samples of one run each.
    pub basis: Basis,
    /// Recorded configuration and server differences (what changed between the runs).
    pub differences: Vec<String>,
    /// Lengths a side's designed run (`--design auto`) predicted from its fits instead of
    /// measuring: never compared and never gated (a prediction is not a measurement).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub predicted: Vec<String>,
    /// A designed run (`--design auto`) against the other run, per length and metric: the
    /// other median covered by the designed interval, or the drift between them
    /// ([`coverage`]). Empty unless a side is one designed run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<coverage::Coverage>,
    /// Why the runs are not comparable (only non-empty with `--allow-mismatch`).
    pub mismatches: Vec<String>,
    /// One row per context point present in both sides, and metric.
    pub rows: Vec<CompareRow>,
    /// Output agreement per context, when both runs used the same `--prompt-seed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement: Option<Vec<crate::integrity::AgreementRow>>,
    /// Why outputs were not compared (a prompt seed on one side only, or two seeds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement_note: Option<String>,
    /// Does speculation pay (one side speculative, the other plain): see
    /// [`crate::stats::speculation`]. Absent when neither side speculates (and not asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<Speculation>,
    /// Warm runs (`--mode append|tiers`): TTFT_inc B/A per warm cell ([`warm`]). Absent when
    /// neither side is a warm run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm: Option<warm::WarmComparison>,
    /// Both sides' fractions of the hardware's limit (`--hardware`, `--memory-bandwidth`,
    /// `--peak-tflops`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roofline: Option<crate::roofline::versus::RooflineComparison>,
}

impl Versus {
    /// Whether some greedy outputs at `context` differ between the runs.
    pub fn outputs_differ_at(&self, context: u64) -> bool {
        self.agreement
            .iter()
            .flatten()
            .any(|r| r.context_tokens == context && r.identical < r.pairs)
    }
}

/// Output agreement of B with A (see [`crate::integrity::agreement`]); nothing when
/// neither run seeded its prompts.
fn agreement_of(
    a: &Results,
    b: &Results,
) -> (Option<Vec<crate::integrity::AgreementRow>>, Option<String>) {
    let (sa, sb) = (a.header.config.prompt_seed, b.header.config.prompt_seed);
    if sa.is_none() && sb.is_none() {
        return (None, None);
    }
    match crate::integrity::agreement(sa, &a.samples, sb, &b.samples) {
        Ok(rows) => (Some(rows), None),
        Err(why) => (None, Some(why)),
    }
}

/// B/A at one context point for one metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    /// Context length.
    pub context_tokens: u64,
    /// Concurrency of the cell, in a concurrency grid (absent: one request at a time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// The metric.
    pub metric: Metric,
    /// Median of A (the median of its run medians when A has several runs).
    pub a: Option<f64>,
    /// Median of B, likewise.
    pub b: Option<f64>,
    /// B/A: ratio of geometric means of the units (run medians, or samples of one run).
    pub ratio: Option<f64>,
    /// Its interval; `None` with too few runs or samples.
    pub interval: Option<RatioInterval>,
    /// Units (runs, or samples) of A behind the interval.
    pub n_a: usize,
    /// Units of B.
    pub n_b: usize,
    /// What it means.
    pub verdict: Verdict,
}

impl CompareRow {
    /// The point or cell as written in tables: `16k`, or `16k ×4` in a concurrency grid.
    pub fn label(&self) -> String {
        match self.concurrency {
            Some(c) => format!(
                "{} ×{c}",
                ctxbench_schema::units::fmt_ctx(self.context_tokens)
            ),
            None => ctxbench_schema::units::fmt_ctx(self.context_tokens),
        }
    }

    /// The interval, when it is worth printing: beside "too few runs/samples" an interval
    /// over one or two values only looks precise (readme-audit L17).
    pub fn shown_interval(&self) -> Option<RatioInterval> {
        self.interval
            .filter(|_| !matches!(self.verdict, Verdict::TooFewRuns | Verdict::TooFewSamples))
    }

    /// The significance result behind this row, for the gate ([`gate`]).
    pub fn cell(&self, basis: Basis) -> CellComparison {
        CellComparison {
            metric: self.metric,
            n_a: self.n_a,
            n_b: self.n_b,
            basis,
            ratio: self.ratio,
            interval: self.interval,
            verdict: self.verdict,
        }
    }
}

/// A side's label: the label its runs share, else the file's own label (one file), else the
/// first file's label and how many files there are.
fn group_label(group: &[Loaded]) -> String {
    let shared = group.first().and_then(|(_, _, r)| r.header.label.as_ref());
    match (group, shared) {
        ([], _) => String::new(),
        (g, Some(l)) if g.iter().all(|(_, _, r)| r.header.label.as_ref() == Some(l)) => l.clone(),
        ([(l, _, _)], _) => l.clone(),
        ([(l, _, _), ..], _) => format!("{l} (+{} runs)", group.len() - 1),
    }
}

fn info(group: &[Loaded]) -> RunInfo {
    let (path, run_id, corpus) = group
        .first()
        .map(|(_, p, r)| {
            (
                p.clone(),
                r.header.run_id.clone(),
                r.header.corpus.label.clone(),
            )
        })
        .unwrap_or_default();
    RunInfo {
        label: group_label(group),
        path,
        paths: group.iter().map(|(_, p, _)| p.clone()).collect(),
        run_id,
        corpus,
    }
}

/// The cold points a run measured: its context ladder, or for a warm run the lengths of its
/// cold column (L + N: append at every N, tiers at the first).
fn contexts(r: &Results) -> Vec<u64> {
    let ladder = &r.header.config.contexts;
    let mut c: Vec<u64> = match (&r.header.config.warm, ladder.is_empty()) {
        (_, true) => r.samples.iter().map(|s| s.context_tokens).collect(),
        (None, false) => ladder.clone(),
        (Some(w), false) => {
            let ns: Vec<u64> = match w.mode {
                ctxbench_schema::warm::WarmMode::Append => w.appends.clone(),
                ctxbench_schema::warm::WarmMode::Tiers
                | ctxbench_schema::warm::WarmMode::Retention => {
                    vec![w.appends.first().copied().unwrap_or(128)]
                }
                ctxbench_schema::warm::WarmMode::Conversation => Vec::new(),
            };
            ladder
                .iter()
                .flat_map(|l| ns.iter().map(move |n| l + n))
                .collect()
        }
    };
    c.sort_unstable();
    c.dedup();
    c
}

/// Reasons two runs did not measure the same thing (different points, corpus, output
/// length or method). Pure.
pub fn mismatches(a: &Results, b: &Results) -> Vec<String> {
    let mut out = Vec::new();
    let (ca, cb) = (contexts(a), contexts(b));
    if ca != cb {
        let f = |c: &[u64]| {
            c.iter()
                .map(|&x| ctxbench_schema::units::fmt_ctx(x))
                .collect::<Vec<_>>()
                .join(",")
        };
        out.push(format!(
            "context points differ: [{}] vs [{}]",
            f(&ca),
            f(&cb)
        ));
    }
    let (x, y) = (&a.header.config, &b.header.config);
    if x.corpus != y.corpus {
        out.push(format!(
            "corpus differs: {} vs {}",
            x.corpus.label(),
            y.corpus.label()
        ));
    }
    if x.seed != y.seed {
        out.push(format!("seed differs: {} vs {}", x.seed, y.seed));
    }
    if x.output_tokens != y.output_tokens {
        out.push(format!(
            "output tokens differ: {} vs {}",
            x.output_tokens, y.output_tokens
        ));
    }
    if x.method != y.method {
        out.push(format!("method differs: {} vs {}", x.method, y.method));
    }
    out.extend(warm::mismatches(a, b));
    out
}

/// Recorded differences between two runs' configuration and server, ignoring what always
/// differs (URLs, the probe's wording).
pub fn differences(a: &Results, b: &Results) -> Vec<String> {
    // The URL always differs between an A and a B server; the rest is what the user chose.
    let strip = |c: &record::RunConfig| record::RunConfig {
        url: String::new(),
        ..record::identity(c)
    };
    let mut d: Vec<String> =
        record::config_diff(&strip(&a.header.config), &strip(&b.header.config))
            .into_iter()
            .map(|l| format!("config.{}", l.trim_start()))
            .collect();
    d.extend(
        record::server_diff(&a.header.server, &b.header.server)
            .into_iter()
            .map(|l| format!("server.{}", l.trim_start())),
    );
    // A managed server's label is its command line, listed above already.
    let is_cmd =
        |r: &Results| r.header.label.is_some() && r.header.label == r.header.config.server_cmd;
    if a.header.label != b.header.label && !(is_cmd(a) && is_cmd(b)) {
        let show = |l: &Option<String>| {
            l.as_deref()
                .map_or("(none)".to_owned(), |s| format!("{s:?}"))
        };
        d.push(format!(
            "label: {} -> {}",
            show(&a.header.label),
            show(&b.header.label)
        ));
    }
    d
}

/// Per run, the values of `m` at context `c` (usable cold samples).
fn values_by_run(group: &[Loaded], m: Metric, c: u64, cell: Option<u32>) -> Vec<Vec<f64>> {
    group
        .iter()
        .map(|(_, _, r)| match cell {
            None => metric::observations(&r.samples, m)
                .into_iter()
                .filter(|o| o.0 == c)
                .map(|o| o.1)
                .collect(),
            Some(conc) => r
                .samples
                .iter()
                .filter(|s| s.usable() && s.phase == record::Phase::Cold && s.context_tokens == c)
                .filter(|s| s.concurrency.unwrap_or(1) == conc)
                .filter_map(|s| value(s, m))
                .filter(|v| v.is_finite())
                .collect(),
        })
        .collect()
}

/// A sample's value of `m`; inside a concurrent wave, decode is the request's rate in the
/// window where all the wave's requests decoded at once.
fn value(s: &record::Sample, m: Metric) -> Option<f64> {
    let w = s
        .wave_stats
        .as_ref()
        .filter(|_| s.concurrency.unwrap_or(1) > 1);
    match (m, w) {
        (Metric::DecodeTokensPerS, Some(w)) => w.window_decode_tokens_per_s,
        (Metric::MsPerStep, Some(w)) => w.window_ms_per_step,
        _ => m.of(s),
    }
}

fn median(v: &[f64]) -> Option<f64> {
    crate::stats::Spread::of(v.iter().copied()).map(|s| s.median)
}

/// The median of the run medians (the median itself for one run).
fn center(runs: &[Vec<f64>]) -> Option<f64> {
    let meds: Vec<f64> = runs.iter().filter_map(|r| median(r)).collect();
    median(&meds)
}

/// Context points every file of the group measured.
fn group_contexts(group: &[Loaded]) -> Vec<u64> {
    let mut it = group.iter().map(|(_, _, r)| contexts(r));
    let first = it.next().unwrap_or_default();
    it.fold(first, |acc, c| {
        acc.into_iter().filter(|x| c.contains(x)).collect()
    })
}

/// B against A at every context point both sides have, and in concurrency grids at every
/// (context, concurrency) cell both have. Pure.
pub fn rows(a: &[Loaded], b: &[Loaded], s: &Settings) -> Vec<CompareRow> {
    let mut out = Vec::new();
    let cb = group_contexts(b);
    let levels = |g: &[Loaded]| {
        g.first()
            .map_or(vec![1], |(_, _, r)| r.header.config.concurrency_levels())
    };
    let (la, lb) = (levels(a), levels(b));
    let grid = la != [1] || lb != [1];
    let common: Vec<u32> = la.into_iter().filter(|c| lb.contains(c)).collect();
    for c in group_contexts(a).into_iter().filter(|c| cb.contains(c)) {
        for &conc in &common {
            let cell_of = grid.then_some(conc);
            for m in Metric::ALL {
                let (va, vb) = (
                    values_by_run(a, m, c, cell_of),
                    values_by_run(b, m, c, cell_of),
                );
                let cell = significance::compare_cell(m, &va, &vb, s);
                out.push(CompareRow {
                    context_tokens: c,
                    concurrency: cell_of,
                    metric: m,
                    a: center(&va),
                    b: center(&vb),
                    ratio: cell.ratio,
                    interval: cell.interval,
                    n_a: cell.n_a,
                    n_b: cell.n_b,
                    verdict: cell.verdict,
                });
            }
        }
    }
    out
}

/// The lengths each side predicted instead of measuring (a `point` line `predicted`, no
/// cold sample): (side's label, context), in the order found.
fn predicted_contexts(a: &[Loaded], b: &[Loaded]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for (label, _, r) in a.iter().chain(b.iter()) {
        for p in &r.points {
            let measured = r
                .samples
                .iter()
                .any(|s| s.context_tokens == p.context_tokens && s.phase == record::Phase::Cold);
            let key = (label.clone(), p.context_tokens);
            if p.stop_reason == record::StopReason::Predicted && !measured && !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// [`predicted_contexts`] in words: those lengths are left out of the rows, so they are
/// never compared and never gated.
pub fn predicted_notes(a: &[Loaded], b: &[Loaded]) -> Vec<String> {
    predicted_contexts(a, b)
        .into_iter()
        .map(|(label, c)| format!(
            "{c} tokens: {label} predicted it from its fits (--design auto) instead of measuring it: not compared, not gated"
        ))
        .collect()
}

/// Mismatches within one side: its runs must have measured the same thing too.
fn check_group(group: &[Loaded], allow_mismatch: bool) -> Result<Vec<String>, UsageError> {
    let mut out = Vec::new();
    let Some((l0, _, r0)) = group.first() else {
        return Ok(out);
    };
    for (l, _, r) in &group[1..] {
        let mism = mismatches(r0, r);
        if !mism.is_empty() && !allow_mismatch {
            return Err(UsageError::Invalid(format!(
                "refusing to pool {l0} and {l} as runs of one side: they did not measure the same thing:\n  {}\n(--allow-mismatch compares the common points anyway)",
                mism.join("\n  ")
            )));
        }
        out.extend(mism.into_iter().map(|m| format!("{l0} vs {l}: {m}")));
    }
    Ok(out)
}

/// Compares every side after the first with the first. Each side is one or more results
/// files (runs of the same thing); with several runs on either side the run is the unit.
/// Refuses mismatched runs unless `allow_mismatch`. A speculative side against a plain one
/// gets the speculation answer (side detected from the samples).
pub fn build(
    sides: &[Vec<Loaded>],
    allow_mismatch: bool,
    s: &Settings,
) -> Result<Comparison, UsageError> {
    build_with(sides, allow_mismatch, s, SpecSide::Auto)
}

/// The speculation analysis of B against A, as `spec_side` says; `None` in auto mode when
/// neither side speculates (nothing to say about speculation).
fn speculation_of(
    a: &[Loaded],
    b: &[Loaded],
    spec_side: SpecSide,
    s: &Settings,
) -> Option<Speculation> {
    let (ra, rb): (Vec<&Results>, Vec<&Results>) = (
        a.iter().map(|(_, _, r)| r).collect(),
        b.iter().map(|(_, _, r)| r).collect(),
    );
    let (la, lb) = (group_label(a), group_label(b));
    let out = speculation::analyse(
        &speculation::Side {
            label: &la,
            runs: &ra,
        },
        &speculation::Side {
            label: &lb,
            runs: &rb,
        },
        spec_side,
        s,
    )?;
    let neither = matches!(
        &out,
        Speculation::NotAnalysed {
            reason: speculation::NotAnalysed::NeitherSpeculative,
            ..
        }
    );
    (!neither).then_some(out)
}

/// [`build`] with the speculative side given (`--spec-side`).
pub fn build_with(
    sides: &[Vec<Loaded>],
    allow_mismatch: bool,
    s: &Settings,
    spec_side: SpecSide,
) -> Result<Comparison, UsageError> {
    let too_few = || UsageError::Invalid("compare needs at least two results files".into());
    let Some(a) = sides.first() else {
        return Err(too_few());
    };
    if sides.len() < 2 || sides.iter().any(|g| g.is_empty()) {
        return Err(too_few());
    }
    let within_a = check_group(a, allow_mismatch)?;
    let (la, ra) = (&a[0].0, &a[0].2);
    let mut versus = Vec::new();
    for b in &sides[1..] {
        let (lb, rb) = (&b[0].0, &b[0].2);
        let mut mism = mismatches(ra, rb);
        if !mism.is_empty() && !allow_mismatch {
            return Err(UsageError::Invalid(format!(
                "refusing to compare {la} with {lb}: they did not measure the same thing:\n  {}\n(--allow-mismatch compares the common points anyway)",
                mism.join("\n  ")
            )));
        }
        mism.extend(within_a.iter().cloned());
        mism.extend(check_group(b, allow_mismatch)?);
        let (agreement, agreement_note) = agreement_of(ra, rb);
        versus.push(Versus {
            speculation: speculation_of(a, b, spec_side, s),
            warm: warm::compare(a, b, s),
            agreement,
            agreement_note,
            run: info(b),
            basis: if a.len() > 1 || b.len() > 1 {
                Basis::Runs
            } else {
                Basis::SamplesOfOneRun
            },
            differences: differences(ra, rb),
            predicted: predicted_notes(a, b),
            coverage: coverage::coverage(a, b),
            mismatches: mism,
            rows: {
                // A prediction is not a measurement: those lengths get no row.
                let skip = predicted_contexts(a, b);
                let mut r = rows(a, b, s);
                r.retain(|row| skip.iter().all(|(_, c)| *c != row.context_tokens));
                r
            },
            roofline: None,
        });
    }
    Ok(Comparison {
        baseline: info(a),
        versus,
        level: s.level,
        noise: s.noise,
        min_runs: s.min_runs,
        min_samples: s.min_samples,
    })
}

impl Comparison {
    /// Holds both sides of every pair against the machine's `limits`, with each side's
    /// recorded model facts completed by `model_config` (`--model-config`). `sides` are the
    /// groups this comparison was built from.
    pub fn with_roofline(
        mut self,
        sides: &[Vec<Loaded>],
        limits: Option<&crate::roofline::Limits>,
        model_config: Option<&ctxbench_schema::model::ModelFacts>,
    ) -> Self {
        let Some(limits) = limits else {
            return self;
        };
        let facts = |g: &[Loaded]| {
            let recorded = g.first().and_then(|(_, _, r)| r.header.model_facts.clone());
            match (recorded, model_config.cloned()) {
                (Some(h), Some(c)) => Some(h.or(c)),
                (h, c) => h.or(c),
            }
        };
        let speculative = |g: &[Loaded]| {
            g.iter()
                .flat_map(|(_, _, r)| &r.samples)
                .any(|s| s.spec_accept_length.is_some())
        };
        let Some(a) = sides.first() else {
            return self;
        };
        let fa = facts(a);
        for (v, b) in self.versus.iter_mut().zip(&sides[1..]) {
            let fb = facts(b);
            use crate::roofline::versus::Side;
            v.roofline = Some(crate::roofline::versus::compare(
                limits,
                Side {
                    facts: fa.as_ref(),
                    speculative: speculative(a),
                },
                Side {
                    facts: fb.as_ref(),
                    speculative: speculative(b),
                },
                &roofline_medians(&v.rows),
            ));
        }
        self
    }
}

/// Both sides' ms/step and TTFT per context length (one request at a time), from the rows.
fn roofline_medians(rows: &[CompareRow]) -> Vec<crate::roofline::versus::Medians> {
    let mut out: Vec<crate::roofline::versus::Medians> = Vec::new();
    for r in rows.iter().filter(|r| r.concurrency.unwrap_or(1) == 1) {
        if out
            .last()
            .is_none_or(|m| m.context_tokens != r.context_tokens)
        {
            out.push(crate::roofline::versus::Medians {
                context_tokens: r.context_tokens,
                ..Default::default()
            });
        }
        let Some(m) = out.last_mut() else { continue };
        match r.metric {
            Metric::MsPerStep => (m.a_ms_per_step, m.b_ms_per_step) = (r.a, r.b),
            Metric::TtftMs => (m.a_ttft_ms, m.b_ttft_ms) = (r.a, r.b),
            _ => {}
        }
    }
    out
}

/// One line that says what the intervals of `v` are over, for every renderer.
pub fn method_note(cmp: &Comparison, v: &Versus) -> String {
    let band = format!(
        "faster or slower only when the whole interval is beyond ±{:.0}%",
        cmp.noise * 100.0
    );
    match v.basis {
        Basis::Runs => format!(
            "B/A of the geometric means of run medians, {:.0}% Welch t-interval with the run as the unit ({} run(s) of A, {} of B; at least {} per side for a verdict); {band}",
            cmp.level * 100.0,
            cmp.baseline.paths.len(),
            v.run.paths.len(),
            cmp.min_runs
        ),
        Basis::SamplesOfOneRun => format!(
            "B/A of the geometric means of the samples, {:.0}% Welch t-interval over the samples of one run each (at least {} per side for a verdict; run-to-run drift is not measured: give several runs per side with --a/--b); {band}",
            cmp.level * 100.0,
            cmp.min_samples
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_of_several_runs_is_labelled_by_its_shared_label_or_its_first_file() {
        let mk = |label: &str, hl: Option<&str>| -> Loaded {
            let mut r = ctxbench_schema::testdata::golden("sweep.jsonl");
            r.header.label = hl.map(str::to_owned);
            (label.to_owned(), format!("{label}.jsonl"), r)
        };
        let g = vec![mk("a1", Some("-t 1")), mk("a2", Some("-t 1"))];
        assert_eq!(group_label(&g), "-t 1");
        assert_eq!(info(&g).paths, ["a1.jsonl", "a2.jsonl"]);
        let g = vec![mk("a1", None), mk("a2", None), mk("a3", Some("x"))];
        assert_eq!(group_label(&g), "a1 (+2 runs)");
        assert_eq!(group_label(&g[..1]), "a1");
    }
}
