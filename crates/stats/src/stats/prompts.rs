//! Prompts, corpora and draft positions: what speculative acceptance depends on besides
//! the context length. Pure: built from results files alone.
//!
//! - **Between prompts vs between repetitions** (`--prompts K`): a one-way random-effects
//!   ANOVA per point splits the spread of decode ms/token and acceptance length into the
//!   part that follows the prompt's text (between-prompt SD) and the noise of repeating the
//!   same prompt (within-prompt SD).
//! - **The synthetic-text trap**: two runs that differ only in their corpus (one `repeat`,
//!   one natural text) give the acceptance per corpus and the inflation ratio
//!   (repeat ÷ natural) with a 95% interval; the prompt (its mean over repetitions) is the
//!   unit where the run has `--prompts`, else the sample.
//! - **Per draft position** (vLLM counts them): acceptance rate at position 0, 1, … =
//!   accepted at that position ÷ drafts, beside proposed vs accepted draft tokens, verify
//!   steps, ms per verify step and ms per token.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::significance::t_quantile;
use ctxbench_schema::record::{CorpusSpec, Flag, Results, RunConfig, Sample};

/// A one-way random-effects ANOVA of one metric at one point, prompts as the groups.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Components {
    /// Prompts (groups) with at least one value.
    pub prompts: usize,
    /// Values in all.
    pub n: usize,
    /// Grand mean.
    pub mean: f64,
    /// Between-prompt standard deviation: √max(0, (MSB − MSW) / n₀).
    pub between_sd: f64,
    /// Within-prompt (repetition) standard deviation: √MSW.
    pub within_sd: f64,
    /// Share of the variance that follows the prompt: σ²_b ÷ (σ²_b + σ²_w).
    pub icc: f64,
    /// MSB ÷ MSW (`None` when there is no within-prompt noise at all).
    pub f: Option<f64>,
}

/// One-way random-effects ANOVA (unbalanced: n₀ = (N − Σnᵢ²/N)/(k − 1)). Needs two groups
/// and more values than groups.
pub fn one_way(groups: &[Vec<f64>]) -> Option<Components> {
    let groups: Vec<&Vec<f64>> = groups.iter().filter(|g| !g.is_empty()).collect();
    let k = groups.len();
    let n: usize = groups.iter().map(|g| g.len()).sum();
    if k < 2 || n <= k {
        return None;
    }
    let nf = n as f64;
    let mean = groups.iter().flat_map(|g| g.iter()).sum::<f64>() / nf;
    let mut ssb = 0.0;
    let mut ssw = 0.0;
    for g in &groups {
        let m = g.iter().sum::<f64>() / g.len() as f64;
        ssb += g.len() as f64 * (m - mean).powi(2);
        ssw += g.iter().map(|x| (x - m).powi(2)).sum::<f64>();
    }
    let msb = ssb / (k as f64 - 1.0);
    let msw = ssw / (nf - k as f64);
    let n0 =
        (nf - groups.iter().map(|g| (g.len() as f64).powi(2)).sum::<f64>() / nf) / (k as f64 - 1.0);
    let var_b = ((msb - msw) / n0).max(0.0);
    let total = var_b + msw;
    Some(Components {
        prompts: k,
        n,
        mean,
        between_sd: var_b.sqrt(),
        within_sd: msw.sqrt(),
        icc: if total > 0.0 { var_b / total } else { 0.0 },
        f: (msw > 0.0).then(|| msb / msw),
    })
}

/// The spread of one point of one run, split by prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptSpread {
    /// The run's label.
    pub run: String,
    /// Its corpus (short name).
    pub corpus: String,
    /// Context length.
    pub context_tokens: u64,
    /// Decode ms per output token.
    pub ms_per_token: Option<Components>,
    /// Acceptance length (tokens per verify step).
    pub accept_length: Option<Components>,
}

/// Speculative counters of one point of one run, per draft position where counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionPoint {
    /// The run's label.
    pub run: String,
    /// Its corpus (short name).
    pub corpus: String,
    /// Context length.
    pub context_tokens: u64,
    /// Samples summed.
    pub samples: usize,
    /// Verify steps (every decode step, with or without a draft).
    pub verify_steps: u64,
    /// Verify steps that carried a draft (the per-position denominator).
    pub drafts: Option<u64>,
    /// Draft tokens proposed.
    pub draft_tokens: Option<u64>,
    /// Draft tokens accepted.
    pub accepted_tokens: u64,
    /// Acceptance rate at draft position 0, 1, …: accepted there ÷ drafts.
    pub position_rates: Vec<f64>,
    /// Median decode ms per output token.
    pub ms_per_token: Option<f64>,
    /// Median ms per verify step.
    pub ms_per_verify_step: Option<f64>,
}

/// Acceptance of the repeated sentence against natural text at one context length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inflation {
    /// The label the two runs share (or the synthetic run's label).
    pub run: String,
    /// The natural run's corpus, as its header says.
    pub natural_corpus: String,
    /// Context length.
    pub context_tokens: u64,
    /// Mean acceptance length with the repeated sentence, and its units (prompts or samples).
    pub repeat: (f64, usize),
    /// Mean acceptance length with natural text, and its units.
    pub natural: (f64, usize),
    /// Mean acceptance rate with each corpus (repeat, natural), where reported.
    pub rates: (Option<f64>, Option<f64>),
    /// repeat ÷ natural.
    pub ratio: f64,
    /// Its 95% interval (log-scale delta method, Welch degrees of freedom).
    pub interval: Option<(f64, f64)>,
}

/// Everything this module derives from a set of results files.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PromptsReport {
    /// Per run and point with `--prompts` (two prompts or more, repeated).
    pub spread: Vec<PromptSpread>,
    /// Per run and point with speculative counters.
    pub positions: Vec<PositionPoint>,
    /// Per pair of runs that differ only by corpus (repeat vs natural) and point.
    pub inflation: Vec<Inflation>,
}

impl PromptsReport {
    /// Nothing to show.
    pub fn is_empty(&self) -> bool {
        self.spread.is_empty() && self.positions.is_empty() && self.inflation.is_empty()
    }
}

/// Cold usable samples of one request at a time, by context.
fn by_context(r: &Results) -> BTreeMap<u64, Vec<&Sample>> {
    let mut m: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for s in r
        .samples
        .iter()
        .filter(|s| s.usable() && s.concurrency.unwrap_or(1) == 1)
    {
        m.entry(s.context_tokens).or_default().push(s);
    }
    m
}

/// Acceptance length of a sample of a speculative run: a request in which the server made
/// no draft at all (n-gram speculation that found no match) produced one token per step,
/// length 1, though its counters carry no speculative numbers; a sample whose counters were
/// not read says nothing.
fn accept_length(s: &Sample, speculative: bool) -> Option<f64> {
    match s.spec_accept_length {
        Some(l) => Some(l),
        None if speculative && !s.has(&Flag::MetricsUnavailable) => Some(1.0),
        None => None,
    }
}

/// Whether any sample of the run carries speculative numbers.
fn speculative(r: &Results) -> bool {
    r.samples.iter().any(|s| s.spec_accept_length.is_some())
}

/// Values of `f` grouped by prompt index (samples without one are left out).
fn groups(samples: &[&Sample], f: impl Fn(&Sample) -> Option<f64>) -> Vec<Vec<f64>> {
    let mut g: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for s in samples {
        if let (Some(i), Some(v)) = (s.prompt_index, f(s)) {
            g.entry(i).or_default().push(v);
        }
    }
    g.into_values().collect()
}

/// The units of acceptance length: per-prompt means where prompts are indexed, else
/// samples.
fn units(samples: &[&Sample], f: impl Fn(&Sample) -> Option<f64> + Copy) -> Vec<f64> {
    if samples.iter().any(|s| s.prompt_index.is_some()) {
        groups(samples, f)
            .iter()
            .map(|g| g.iter().sum::<f64>() / g.len() as f64)
            .collect()
    } else {
        samples.iter().filter_map(|s| f(s)).collect()
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(crate::stats::quantile(&v, 0.5))
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var)
}

/// repeat ÷ natural of the means, with a 95% interval on the log scale (delta method,
/// Welch–Satterthwaite degrees of freedom); `None` with fewer than two units a side.
pub fn ratio_of_means(a: &[f64], b: &[f64]) -> Option<(f64, Option<(f64, f64)>)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let ((ma, va), (mb, vb)) = (mean_var(a), mean_var(b));
    if ma <= 0.0 || mb <= 0.0 {
        return None;
    }
    let r = ma / mb;
    if a.len() < 2 || b.len() < 2 {
        return Some((r, None));
    }
    let sa = va / (a.len() as f64 * ma * ma);
    let sb = vb / (b.len() as f64 * mb * mb);
    let se2 = sa + sb;
    let df = if se2 > 0.0 {
        se2 * se2 / (sa * sa / (a.len() as f64 - 1.0) + sb * sb / (b.len() as f64 - 1.0))
    } else {
        (a.len() + b.len() - 2) as f64
    };
    let half = t_quantile(0.975, df) * se2.sqrt();
    Some((r, Some((r * (-half).exp(), r * half.exp()))))
}

fn positions(run: &str, corpus: &str, context: u64, s: &[&Sample]) -> Option<PositionPoint> {
    let spec: Vec<&&Sample> = s.iter().filter(|x| x.spec_verify_steps.is_some()).collect();
    if spec.is_empty() {
        return None;
    }
    let sum = |f: &dyn Fn(&Sample) -> Option<u64>| -> Option<u64> {
        let v: Vec<u64> = spec.iter().filter_map(|x| f(x)).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let drafts = sum(&|x| x.spec_drafts);
    let mut per: Vec<u64> = Vec::new();
    for x in &spec {
        for (i, c) in x.spec_accepted_per_position.iter().flatten().enumerate() {
            if per.len() <= i {
                per.resize(i + 1, 0);
            }
            per[i] += c;
        }
    }
    let position_rates = match drafts {
        Some(d) if d > 0 => per.iter().map(|c| *c as f64 / d as f64).collect(),
        _ => Vec::new(),
    };
    Some(PositionPoint {
        run: run.to_owned(),
        corpus: corpus.to_owned(),
        context_tokens: context,
        samples: spec.len(),
        verify_steps: sum(&|x| x.spec_verify_steps).unwrap_or(0),
        drafts,
        draft_tokens: sum(&|x| x.spec_draft_tokens),
        accepted_tokens: sum(&|x| x.spec_accepted_tokens).unwrap_or(0),
        position_rates,
        ms_per_token: median(spec.iter().filter_map(|x| x.ms_per_step).collect()),
        ms_per_verify_step: median(spec.iter().filter_map(|x| x.ms_per_verify_step).collect()),
    })
}

/// What makes two runs "the same but for the corpus": the configuration without the
/// corpus, the URL or the seeds, and the run's label.
fn pair_key(r: &Results) -> String {
    let c = RunConfig {
        corpus: CorpusSpec::Repeat,
        url: String::new(),
        metrics_url: None,
        ..ctxbench_schema::record::identity(&r.header.config)
    };
    format!(
        "{}|{:?}",
        serde_json::to_string(&c).unwrap_or_default(),
        r.header.label
    )
}

/// Builds the section's numbers from `(label, path, results)` as the report loads them.
pub fn build(loaded: &[(String, String, Results)]) -> PromptsReport {
    let mut out = PromptsReport::default();
    for (label, _, r) in loaded {
        let corpus = r.header.config.corpus.short_name();
        let spec = speculative(r);
        for (&ctx, s) in &by_context(r) {
            if r.header.config.prompts.is_some_and(|k| k >= 2) {
                let ms = one_way(&groups(s, |x| x.ms_per_step));
                let al = one_way(&groups(s, |x| accept_length(x, spec)));
                if ms.is_some() || al.is_some() {
                    out.spread.push(PromptSpread {
                        run: label.clone(),
                        corpus: corpus.clone(),
                        context_tokens: ctx,
                        ms_per_token: ms,
                        accept_length: al,
                    });
                }
            }
            out.positions.extend(positions(label, &corpus, ctx, s));
        }
    }
    for (la, _, a) in loaded {
        if a.header.config.corpus != CorpusSpec::Repeat {
            continue;
        }
        for (_, _, b) in loaded.iter().filter(|(_, _, b)| {
            matches!(
                b.header.config.corpus,
                CorpusSpec::Natural(_) | CorpusSpec::Path(_) | CorpusSpec::Code(_)
            ) && pair_key(b) == pair_key(a)
        }) {
            let (sa, sb) = (by_context(a), by_context(b));
            let (pa, pb) = (speculative(a), speculative(b));
            for (ctx, xa) in &sa {
                let Some(xb) = sb.get(ctx) else { continue };
                let (ua, ub) = (
                    units(xa, |x| accept_length(x, pa)),
                    units(xb, |x| accept_length(x, pb)),
                );
                let Some((ratio, interval)) = ratio_of_means(&ua, &ub) else {
                    continue;
                };
                let rate = |v: &[&Sample]| {
                    let u = units(v, |x| x.spec_accept_rate);
                    (!u.is_empty()).then(|| u.iter().sum::<f64>() / u.len() as f64)
                };
                out.inflation.push(Inflation {
                    run: a.header.label.clone().unwrap_or_else(|| la.clone()),
                    natural_corpus: b.header.config.corpus.label(),
                    context_tokens: *ctx,
                    repeat: (mean_var(&ua).0, ua.len()),
                    natural: (mean_var(&ub).0, ub.len()),
                    rates: (rate(xa), rate(xb)),
                    ratio,
                    interval,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anova_splits_prompt_spread_from_repetition_noise() {
        // Three prompts far apart, repetitions close: nearly all variance is between.
        let g = vec![
            vec![10.0, 10.2, 9.8],
            vec![20.0, 20.2, 19.8],
            vec![30.0, 30.2, 29.8],
        ];
        let c = one_way(&g).unwrap();
        assert!((c.mean - 20.0).abs() < 1e-9);
        assert!((c.within_sd - 0.2).abs() < 1e-9, "{c:?}");
        // MSB = 3·(100+0+100)/2 = 300; σ²_b = (300 − 0.04)/3.
        assert!((c.between_sd - ((300.0f64 - 0.04) / 3.0).sqrt()).abs() < 1e-9);
        assert!(c.icc > 0.99);
        // Identical prompts: no between-prompt spread at all.
        let same = one_way(&[vec![1.0, 2.0], vec![2.0, 1.0]]).unwrap();
        assert_eq!(same.between_sd, 0.0);
        assert!(one_way(&[vec![1.0], vec![2.0]]).is_none(), "no repetition");
    }

    #[test]
    fn a_request_without_any_draft_counts_as_length_one_in_a_speculative_run() {
        let none = Sample::default();
        assert_eq!(accept_length(&none, true), Some(1.0));
        assert_eq!(
            accept_length(&none, false),
            None,
            "plain run: no acceptance"
        );
        let unread = Sample {
            flags: vec![Flag::MetricsUnavailable],
            ..Sample::default()
        };
        assert_eq!(accept_length(&unread, true), None, "counters not read");
    }

    #[test]
    fn ratio_interval_covers_the_ratio_and_needs_two_units() {
        let (r, i) = ratio_of_means(&[3.0, 3.2, 2.8], &[1.5, 1.4, 1.6]).unwrap();
        assert!((r - 2.0).abs() < 1e-9);
        let (lo, hi) = i.unwrap();
        assert!(lo < 2.0 && hi > 2.0 && lo > 1.0, "{lo} {hi}");
        assert_eq!(ratio_of_means(&[3.0], &[1.5]).unwrap().1, None);
    }
}
