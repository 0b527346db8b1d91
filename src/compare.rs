//! `ctxbench compare A.jsonl B.jsonl [...]`: per context point and metric, the ratio of
//! medians B/A with a bootstrap confidence interval and a plain verdict. Built from the
//! results files alone; refuses runs that did not measure the same thing.

use serde::Serialize;

use crate::error::UsageError;
use crate::record::{self, Results};
use crate::report;
use crate::stats::bootstrap::{self, RatioCi};
use crate::stats::metric::Metric;

/// Runs compared against a baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Run A.
    pub baseline: RunInfo,
    /// Each other run against A.
    pub versus: Vec<Versus>,
    /// Confidence level of the intervals.
    pub level: f64,
    /// Bootstrap resamples per interval.
    pub resamples: usize,
    /// Noise band: a change is called only when its whole interval lies beyond ±noise.
    pub noise: f64,
}

/// What identifies a run in a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// Short name.
    pub label: String,
    /// Results file.
    pub path: String,
    /// Run id.
    pub run_id: String,
    /// Corpus label.
    pub corpus: String,
}

/// One run (B) against the baseline (A).
#[derive(Debug, Clone, Serialize)]
pub struct Versus {
    /// Run B.
    pub run: RunInfo,
    /// Recorded configuration and server differences (what changed between the runs).
    pub differences: Vec<String>,
    /// Why the runs are not comparable (only non-empty with `--allow-mismatch`).
    pub mismatches: Vec<String>,
    /// One row per context point present in both runs, and metric.
    pub rows: Vec<CompareRow>,
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
    /// Median of A.
    pub a: Option<f64>,
    /// Median of B.
    pub b: Option<f64>,
    /// B/A with its interval.
    pub ratio: Option<RatioCi>,
    /// What it means.
    pub verdict: Verdict,
}

impl CompareRow {
    /// The point or cell as written in tables: `16k`, or `16k ×4` in a concurrency grid.
    pub fn label(&self) -> String {
        match self.concurrency {
            Some(c) => format!("{} ×{c}", crate::units::fmt_ctx(self.context_tokens)),
            None => crate::units::fmt_ctx(self.context_tokens),
        }
    }
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

/// A plain verdict for B relative to A.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// B is better (lower time or higher rate): the whole interval is beyond the noise band.
    Faster,
    /// B is worse: the whole interval is beyond the noise band.
    Slower,
    /// The interval reaches into the noise band around 1.
    NoSignificantDifference,
    /// Fewer than two usable samples on a side: no interval worth the name.
    TooFewSamples,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoSignificantDifference => "no significant difference",
            Verdict::TooFewSamples => "too few samples",
        })
    }
}

/// The verdict for a ratio interval of `metric`. Excluding 1 is not enough: runs on a real
/// host drift by a few percent between runs (two identical runs against the reference server
/// differed by up to 11% at one point, with intervals excluding 1), so a change is called
/// only when the whole interval lies outside the band [1/(1+noise), 1+noise]
/// (criterion's "noise threshold" idea).
pub fn verdict(metric: Metric, ci: Option<&RatioCi>, noise: f64) -> Verdict {
    let (lo, hi) = (1.0 / (1.0 + noise), 1.0 + noise);
    match ci {
        Some(c) if c.n_a >= 2 && c.n_b >= 2 => {
            if !c.excludes_one() || (c.high >= lo && c.low <= hi) {
                Verdict::NoSignificantDifference
            } else if (c.ratio > 1.0) == metric.higher_is_better() {
                Verdict::Faster
            } else {
                Verdict::Slower
            }
        }
        _ => Verdict::TooFewSamples,
    }
}

fn info(label: &str, path: &str, r: &Results) -> RunInfo {
    RunInfo {
        label: label.to_owned(),
        path: path.to_owned(),
        run_id: r.header.run_id.clone(),
        corpus: r.header.corpus.label.clone(),
    }
}

fn contexts(r: &Results) -> Vec<u64> {
    let mut c: Vec<u64> = if r.header.config.contexts.is_empty() {
        r.samples.iter().map(|s| s.context_tokens).collect()
    } else {
        r.header.config.contexts.clone()
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
                .map(|&x| crate::units::fmt_ctx(x))
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
    out
}

/// Recorded differences between two runs' configuration and server, ignoring what always
/// differs (URLs, the probe's wording).
pub fn differences(a: &Results, b: &Results) -> Vec<String> {
    // The URL always differs between an A and a B server; the rest is what the user chose.
    let strip = |c: &record::RunConfig| record::RunConfig {
        url: String::new(),
        ..c.clone()
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
    if a.header.label != b.header.label {
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

/// B against A at every context point both have. Pure.
pub fn rows(
    a: &Results,
    b: &Results,
    resamples: usize,
    level: f64,
    noise: f64,
    seed: u64,
) -> Vec<CompareRow> {
    let mut out = Vec::new();
    let cb = contexts(b);
    // Grids are compared cell by cell: (context, concurrency) present in both runs.
    let (la, lb) = (
        a.header.config.concurrency_levels(),
        b.header.config.concurrency_levels(),
    );
    let grid = la != [1] || lb != [1];
    let levels: Vec<u32> = la.into_iter().filter(|c| lb.contains(c)).collect();
    for c in contexts(a).into_iter().filter(|c| cb.contains(c)) {
        for &conc in &levels {
            for (i, m) in Metric::ALL.into_iter().enumerate() {
                let at = |r: &Results| -> Vec<f64> {
                    r.samples
                        .iter()
                        .filter(|s| s.usable() && s.context_tokens == c)
                        .filter(|s| s.concurrency.unwrap_or(1) == conc)
                        .filter_map(|s| value(s, m))
                        .filter(|v| v.is_finite())
                        .collect()
                };
                let (va, vb) = (at(a), at(b));
                let med = |v: &[f64]| crate::stats::Spread::of(v.iter().copied()).map(|s| s.median);
                let ci = bootstrap::ratio_of_medians(
                    &va,
                    &vb,
                    resamples,
                    level,
                    seed ^ c.rotate_left(17) ^ i as u64 ^ u64::from(conc - 1).rotate_left(40),
                );
                out.push(CompareRow {
                    context_tokens: c,
                    concurrency: grid.then_some(conc),
                    metric: m,
                    a: med(&va),
                    b: med(&vb),
                    verdict: verdict(m, ci.as_ref(), noise),
                    ratio: ci,
                });
            }
        }
    }
    out
}

/// Compares each run after the first against the first. Refuses mismatched runs unless
/// `allow_mismatch`.
pub fn build(
    loaded: &[(String, String, Results)],
    allow_mismatch: bool,
    resamples: usize,
    level: f64,
    noise: f64,
) -> Result<Comparison, UsageError> {
    let Some((la, pa, a)) = loaded.first() else {
        return Err(UsageError::Invalid(
            "compare needs at least two results files".into(),
        ));
    };
    if loaded.len() < 2 {
        return Err(UsageError::Invalid(
            "compare needs at least two results files".into(),
        ));
    }
    let mut versus = Vec::new();
    for (lb, pb, b) in &loaded[1..] {
        let mism = mismatches(a, b);
        if !mism.is_empty() && !allow_mismatch {
            return Err(UsageError::Invalid(format!(
                "refusing to compare {la} with {lb}: they did not measure the same thing:\n  {}\n(--allow-mismatch compares the common points anyway)",
                mism.join("\n  ")
            )));
        }
        versus.push(Versus {
            run: info(lb, pb, b),
            differences: differences(a, b),
            mismatches: mism,
            rows: rows(a, b, resamples, level, noise, report::SEED),
        });
    }
    Ok(Comparison {
        baseline: info(la, pa, a),
        versus,
        level,
        resamples,
        noise,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::bootstrap::RatioCi;

    fn ci(ratio: f64, low: f64, high: f64) -> RatioCi {
        RatioCi {
            ratio,
            low,
            high,
            level: 0.95,
            n_a: 3,
            n_b: 3,
        }
    }

    #[test]
    fn verdict_depends_on_the_metric_direction() {
        let lower = ci(0.5, 0.4, 0.6);
        assert_eq!(verdict(Metric::TtftMs, Some(&lower), 0.05), Verdict::Faster);
        assert_eq!(
            verdict(Metric::DecodeTokensPerS, Some(&lower), 0.05),
            Verdict::Slower
        );
        let unclear = ci(0.9, 0.7, 1.1);
        assert_eq!(
            verdict(Metric::MsPerStep, Some(&unclear), 0.05),
            Verdict::NoSignificantDifference
        );
        let mut one = lower;
        one.n_b = 1;
        assert_eq!(
            verdict(Metric::TtftMs, Some(&one), 0.05),
            Verdict::TooFewSamples
        );
        assert_eq!(verdict(Metric::TtftMs, None, 0.05), Verdict::TooFewSamples);
    }

    #[test]
    fn a_significant_change_inside_the_noise_band_is_not_called() {
        // 0.6% slower with a tight interval: real, but drift-sized.
        let tiny = ci(1.006, 1.003, 1.028);
        assert_eq!(
            verdict(Metric::TtftMs, Some(&tiny), 0.05),
            Verdict::NoSignificantDifference
        );
        assert_eq!(verdict(Metric::TtftMs, Some(&tiny), 0.0), Verdict::Slower);
        // An interval that starts inside the band is not called either.
        let edge = ci(1.108, 1.014, 1.135);
        assert_eq!(
            verdict(Metric::TtftMs, Some(&edge), 0.05),
            Verdict::NoSignificantDifference
        );
        let clear = ci(1.9, 1.6, 2.2);
        assert_eq!(verdict(Metric::TtftMs, Some(&clear), 0.05), Verdict::Slower);
    }
}
