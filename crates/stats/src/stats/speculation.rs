//! Does speculative decoding pay, and up to which context length? From a speculative and a
//! plain variant of the same server measured over the same ladder (results files alone).
//! Pure: no I/O.
//!
//! # What is computed, per context length
//! - **Net decode speedup** = plain ms per output token ÷ speculative ms per output token
//!   (`ms_per_step`: the client's time per generated token, draft and verify included), with
//!   the interval of [`significance::compare_cell`] turned around (Welch on logs, so 1/x of a
//!   ratio interval is exact): the run is the unit when a side has several runs, the samples
//!   otherwise, with the same minimum counts as `compare`.
//! - **TTFT cost** = speculative TTFT ÷ plain TTFT (the draft's own prefill), same interval.
//! - **Acceptance** from the speculative side's samples: mean acceptance length and rate with
//!   a t-interval (over run means when there are several runs), drafted and accepted tokens,
//!   verify steps, ms per verify step beside ms per token.
//!
//! # The rule for L*
//! A length *pays* when the speedup's whole interval is above 1, *loses* when it is wholly
//! below 1; otherwise it is undecided (no noise band here: the question is the sign). L* lies
//! between the last paying length and the first losing one: the first losing length is the
//! smallest measured length whose interval's upper end is below 1, the last paying length the
//! largest length below it whose interval's lower end is above 1. No losing length and every
//! length paying: "pays at every measured length".
//!
//! # The fit
//! A decode step reads the whole KV cache, so time per token is linear in context on both
//! sides (the speculative side: draft steps plus one verify step, each linear in L, over the
//! tokens a step yields): t(L) ≈ α + βL, fitted to each side's medians like
//! [`fit::Model::Linear`]. The speedup is then t_plain(L) / t_spec(L), and it crosses 1 where
//! the two lines meet, L = (α_s − α_p) / (β_p − β_s). Beyond the measured lengths this is an
//! extrapolation (acceptance that changes with context would bend it), and it is marked so.

use serde::Serialize;

pub mod ab;
pub mod cliff;
pub mod effects;
pub mod mean;
pub mod position;
pub mod schedule;

pub use mean::MeanInterval;

use super::fit::{self, Fit, Model};
use super::metric::Metric;
use super::significance::{self, t_quantile, Basis, RatioInterval, Settings};
use ctxbench_schema::record::{Phase, Results, Sample};
use ctxbench_schema::units::fmt_ctx;

/// Which side of a comparison is the speculative one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SpecSide {
    /// The side whose samples report speculative statistics (acceptance, drafted tokens).
    Auto,
    /// The baseline A is speculative, B plain.
    A,
    /// B is speculative, the baseline A plain.
    B,
    /// No speculation analysis.
    Off,
}

/// One variant as the analysis sees it: its label and its runs (results files).
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// Short name.
    pub label: &'a str,
    /// Its runs.
    pub runs: &'a [&'a Results],
}

/// How the speculative side was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Detection {
    /// From the samples: one side reports speculative statistics, the other does not.
    Samples,
    /// The user said so (`--spec-side`).
    Given,
}

/// Why there is no speculation analysis of a pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotAnalysed {
    /// Neither side's samples report speculative statistics.
    NeitherSpeculative,
    /// Both sides report them: which one is the plain variant is not known.
    BothSpeculative,
}

impl NotAnalysed {
    /// What it means and what to do.
    pub fn message(&self) -> &'static str {
        match self {
            NotAnalysed::NeitherSpeculative => "neither side's samples report speculative statistics (acceptance, drafted tokens): no speedup analysis; if one side does speculate but its server does not report it, say which with --spec-side a|b",
            NotAnalysed::BothSpeculative => "both sides' samples report speculative statistics: the speedup needs a plain variant; if one side is the one to call plain anyway, say which is speculative with --spec-side a|b",
        }
    }
}

/// Is speculation paying at one length?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Payoff {
    /// The speedup's whole interval is above 1.
    Pays,
    /// Its whole interval is below 1: speculation is slower.
    Slower,
    /// The interval contains 1.
    Undecided,
    /// Too few runs or samples for an interval.
    TooFew,
}

impl Payoff {
    /// In words, for tables.
    pub fn text(self) -> &'static str {
        match self {
            Payoff::Pays => "pays",
            Payoff::Slower => "slower",
            Payoff::Undecided => "undecided",
            Payoff::TooFew => "too few",
        }
    }
}

/// Everything the answer says about one context length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecPoint {
    /// Context length.
    pub context_tokens: u64,
    /// Plain ms per output token (median; median of run medians with several runs).
    pub plain_ms_per_token: Option<f64>,
    /// Speculative ms per output token, likewise.
    pub spec_ms_per_token: Option<f64>,
    /// Plain ÷ speculative ms per token (ratio of geometric means of the units).
    pub speedup: Option<f64>,
    /// Its interval; `None` with too few units.
    pub speedup_interval: Option<RatioInterval>,
    /// Units (runs or samples) of the plain side.
    pub n_plain: usize,
    /// Units of the speculative side.
    pub n_spec: usize,
    /// What the interval says.
    pub pays: Payoff,
    /// Plain TTFT (median).
    pub plain_ttft_ms: Option<f64>,
    /// Speculative TTFT (median).
    pub spec_ttft_ms: Option<f64>,
    /// Speculative ÷ plain TTFT.
    pub ttft_cost: Option<f64>,
    /// Its interval.
    pub ttft_cost_interval: Option<RatioInterval>,
    /// Mean acceptance length (tokens per verify step, bonus token included).
    pub accept_length: Option<MeanInterval>,
    /// Mean acceptance rate (accepted ÷ drafted).
    pub accept_rate: Option<MeanInterval>,
    /// Draft tokens proposed, summed over the speculative samples.
    pub draft_tokens: Option<u64>,
    /// Draft tokens accepted, summed.
    pub accepted_tokens: Option<u64>,
    /// Verify steps per request (median).
    pub verify_steps: Option<f64>,
    /// ms per verify step (median), beside `spec_ms_per_token`.
    pub ms_per_verify_step: Option<f64>,
}

/// A point named in the answer: its length, speedup and interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Named {
    /// Context length.
    pub context_tokens: u64,
    /// Speedup.
    pub speedup: f64,
    /// Its interval.
    pub interval: RatioInterval,
}

/// Where speculation stops paying, by the rule in the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LStar {
    /// Every measured length with an interval pays.
    PaysEverywhere {
        /// The smallest measured length.
        first: Named,
        /// The largest.
        last: Named,
    },
    /// A measured length loses: L* lies above `last_paying` (if any) and at or below
    /// `first_losing`.
    StopsPaying {
        /// The largest paying length below the first losing one.
        last_paying: Option<Named>,
        /// The smallest losing length.
        first_losing: Named,
        /// Longer lengths that pay again (speedup not monotone in context).
        pays_again: Vec<u64>,
        /// The longest decided length when it is not slower (the speedup rose again with
        /// context: undecided or paying there), with what it says.
        longest_not_slower: Option<(Named, Payoff)>,
    },
    /// No measured length loses, but not all pay.
    NeverSlower {
        /// The largest paying length, if any.
        last_paying: Option<Named>,
        /// Lengths whose interval contains 1.
        undecided: Vec<u64>,
    },
    /// No length has an interval (too few runs or samples).
    Unknown,
}

/// The fitted speedup curve and where it crosses 1.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpeedupFit {
    /// Plain ms per token ≈ α + βL.
    pub plain: Fit,
    /// Speculative ms per token ≈ α + βL.
    pub spec: Fit,
    /// Where the fitted speedup crosses 1 (`None`: it never does for L > 0).
    pub crossing: Option<f64>,
    /// The fitted speedup falls with context (crossing: where it stops paying) or rises
    /// (crossing: where it starts paying).
    pub falling: bool,
    /// The crossing lies outside the measured lengths (beyond the longest, or below the
    /// shortest).
    pub crossing_extrapolated: bool,
    /// The crossing lies beyond the server's maximum context.
    pub crossing_beyond_max: bool,
    /// The server's maximum context, when recorded.
    pub max_context: Option<u64>,
    /// The fitted speedup at the server's maximum context (extrapolated).
    pub speedup_at_max: Option<f64>,
    /// Either side's fit is poor (see [`Fit::is_poor`]).
    pub poor: bool,
}

impl SpeedupFit {
    /// The fitted speedup at `l`.
    pub fn speedup(&self, l: f64) -> f64 {
        self.plain.predict(l) / self.spec.predict(l)
    }
}

/// The whole answer for one pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecAnalysis {
    /// The plain side's label.
    pub plain: String,
    /// The speculative side's label.
    pub speculative: String,
    /// Whether the speculative side is the baseline A (else B).
    pub speculative_is_a: bool,
    /// How that was decided.
    pub detection: Detection,
    /// What the intervals are over.
    pub basis: Basis,
    /// Confidence level.
    pub level: f64,
    /// One row per context length both sides measured.
    pub points: Vec<SpecPoint>,
    /// Where speculation stops paying.
    pub l_star: LStar,
    /// The fitted curve; `None` with fewer than two lengths.
    pub fit: Option<SpeedupFit>,
    /// The two effects (acceptance and cost) per length, and which one moved the speedup.
    pub effects: Vec<effects::Effects>,
    /// A drafter-window cliff in acceptance along the lengths, when the rule finds one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cliff: Option<cliff::Cliff>,
    /// The line a user can act on.
    pub answer: String,
    /// What to know besides (a side that reports no statistics, a non-monotone speedup).
    pub notes: Vec<String>,
}

/// The outcome for one pair: an analysis, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Speculation {
    /// The answer.
    Analysed(Box<SpecAnalysis>),
    /// No analysis, and why.
    NotAnalysed {
        /// The reason.
        reason: NotAnalysed,
        /// In words.
        message: String,
    },
}

/// A sample reports speculative statistics.
pub fn is_speculative(s: &Sample) -> bool {
    s.spec_accept_length.is_some()
        || s.spec_draft_tokens.is_some_and(|d| d > 0)
        || s.spec_verify_steps.is_some()
}

/// Usable cold samples of one request at a time (a concurrency grid's waves are not a
/// decode speed of one request).
fn usable(r: &Results) -> impl Iterator<Item = &Sample> {
    r.samples
        .iter()
        .filter(|s| s.usable() && s.phase == Phase::Cold && s.concurrency.unwrap_or(1) == 1)
}

/// Whether any usable sample of the side reports speculative statistics.
pub fn side_is_speculative(side: &Side) -> bool {
    side.runs.iter().any(|r| usable(r).any(is_speculative))
}

fn per_run(side: &Side, c: u64, f: impl Fn(&Sample) -> Option<f64>) -> Vec<Vec<f64>> {
    side.runs
        .iter()
        .map(|r| {
            usable(r)
                .filter(|s| s.context_tokens == c)
                .filter_map(&f)
                .filter(|v| v.is_finite())
                .collect()
        })
        .collect()
}

fn median(v: &[f64]) -> Option<f64> {
    super::Spread::of(v.iter().copied()).map(|s| s.median)
}

fn center(runs: &[Vec<f64>]) -> Option<f64> {
    let meds: Vec<f64> = runs.iter().filter_map(|r| median(r)).collect();
    median(&meds)
}

/// Mean with a `level` t-interval over `units` (samples, or run means by `by_runs`).
pub fn mean_interval(runs: &[Vec<f64>], by_runs: bool, level: f64) -> Option<MeanInterval> {
    let units: Vec<f64> = if by_runs {
        runs.iter()
            .filter(|r| !r.is_empty())
            .map(|r| r.iter().sum::<f64>() / r.len() as f64)
            .collect()
    } else {
        runs.concat()
    };
    let n = units.len();
    if n == 0 {
        return None;
    }
    let mean = units.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return Some(MeanInterval {
            mean,
            low: None,
            high: None,
            n,
        });
    }
    let var = units.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
    let half = t_quantile(0.5 + level / 2.0, n as f64 - 1.0) * (var / n as f64).sqrt();
    Some(MeanInterval {
        mean,
        low: Some(mean - half),
        high: Some(mean + half),
        n,
    })
}

fn contexts(side: &Side) -> Vec<u64> {
    let mut c: Vec<u64> = side
        .runs
        .iter()
        .flat_map(|r| usable(r).map(|s| s.context_tokens))
        .collect();
    c.sort_unstable();
    c.dedup();
    c
}

fn sum_u64(side: &Side, c: u64, f: impl Fn(&Sample) -> Option<u64>) -> Option<u64> {
    let v: Vec<u64> = side
        .runs
        .iter()
        .flat_map(|r| usable(r).filter(|s| s.context_tokens == c).filter_map(&f))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// The point's numbers. `plain`/`spec` are the two sides, whatever their order in the
/// comparison.
fn point(plain: &Side, spec: &Side, c: u64, by_runs: bool, s: &Settings) -> SpecPoint {
    let ms = |side: &Side| per_run(side, c, |x| Metric::MsPerStep.of(x));
    let ttft = |side: &Side| per_run(side, c, |x| Metric::TtftMs.of(x));
    let (mp, msp) = (ms(plain), ms(spec));
    // B/A with A = plain: spec/plain ms per token; the speedup is its reciprocal.
    let cell = significance::compare_cell(Metric::MsPerStep, &mp, &msp, s);
    let speedup_interval = cell.interval.map(|i| RatioInterval {
        low: 1.0 / i.high,
        high: 1.0 / i.low,
        ..i
    });
    let pays = match speedup_interval {
        None => Payoff::TooFew,
        Some(i) if i.low > 1.0 => Payoff::Pays,
        Some(i) if i.high < 1.0 => Payoff::Slower,
        Some(_) => Payoff::Undecided,
    };
    let (tp, ts) = (ttft(plain), ttft(spec));
    let tcell = significance::compare_cell(Metric::TtftMs, &tp, &ts, s);
    SpecPoint {
        context_tokens: c,
        plain_ms_per_token: center(&mp),
        spec_ms_per_token: center(&msp),
        speedup: cell.ratio.map(|r| 1.0 / r),
        speedup_interval,
        n_plain: cell.n_a,
        n_spec: cell.n_b,
        pays,
        plain_ttft_ms: center(&tp),
        spec_ttft_ms: center(&ts),
        ttft_cost: tcell.ratio,
        ttft_cost_interval: tcell.interval,
        // A t-interval knows nothing of the bounds: every step yields at least one token,
        // and a rate lies in [0, 1].
        accept_length: mean_interval(
            &per_run(spec, c, |x| x.spec_accept_length),
            by_runs,
            s.level,
        )
        .map(|m| m.within(1.0, f64::INFINITY)),
        accept_rate: mean_interval(&per_run(spec, c, |x| x.spec_accept_rate), by_runs, s.level)
            .map(|m| m.within(0.0, 1.0)),
        draft_tokens: sum_u64(spec, c, |x| x.spec_draft_tokens),
        accepted_tokens: sum_u64(spec, c, |x| x.spec_accepted_tokens),
        verify_steps: median(&per_run(spec, c, |x| x.spec_verify_steps.map(|v| v as f64)).concat()),
        ms_per_verify_step: center(&per_run(spec, c, |x| x.ms_per_verify_step)),
    }
}

fn named(p: &SpecPoint) -> Option<Named> {
    Some(Named {
        context_tokens: p.context_tokens,
        speedup: p.speedup?,
        interval: p.speedup_interval?,
    })
}

/// L* by the rule in the module docs. `points` in ascending context order.
pub fn l_star(points: &[SpecPoint]) -> LStar {
    let decided: Vec<&SpecPoint> = points.iter().filter(|p| p.pays != Payoff::TooFew).collect();
    let (Some(first), Some(last)) = (decided.first(), decided.last()) else {
        return LStar::Unknown;
    };
    if let Some(i) = decided.iter().position(|p| p.pays == Payoff::Slower) {
        let losing = decided[i];
        return LStar::StopsPaying {
            last_paying: decided[..i]
                .iter()
                .rev()
                .find(|p| p.pays == Payoff::Pays)
                .and_then(|p| named(p)),
            first_losing: named(losing).expect("a decided point has an interval"),
            pays_again: decided[i + 1..]
                .iter()
                .filter(|p| p.pays == Payoff::Pays)
                .map(|p| p.context_tokens)
                .collect(),
            longest_not_slower: (last.pays != Payoff::Slower)
                .then(|| named(last).map(|n| (n, last.pays)))
                .flatten(),
        };
    }
    if decided.iter().all(|p| p.pays == Payoff::Pays) {
        return LStar::PaysEverywhere {
            first: named(first).expect("decided"),
            last: named(last).expect("decided"),
        };
    }
    LStar::NeverSlower {
        last_paying: decided
            .iter()
            .rev()
            .find(|p| p.pays == Payoff::Pays)
            .and_then(|p| named(p)),
        undecided: decided
            .iter()
            .filter(|p| p.pays == Payoff::Undecided)
            .map(|p| p.context_tokens)
            .collect(),
    }
}

/// The fitted speedup curve from both sides' ms per token (every usable sample).
pub fn speedup_fit(plain: &Side, spec: &Side, max_context: Option<u64>) -> Option<SpeedupFit> {
    let obs = |side: &Side| -> Vec<(u64, f64)> {
        side.runs
            .iter()
            .flat_map(|r| usable(r).filter_map(|s| Some((s.context_tokens, s.ms_per_step?))))
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect()
    };
    let (pf, sf) = (
        fit::fit(Model::Linear, &obs(plain))?,
        fit::fit(Model::Linear, &obs(spec))?,
    );
    let (ap, bp, a_s, bs) = (pf.coef[0], pf.coef[1], sf.coef[0], sf.coef[1]);
    // t_p(L) = t_s(L) where (bp − bs)·L = a_s − ap.
    let crossing = (bp != bs)
        .then(|| (a_s - ap) / (bp - bs))
        .filter(|l| l.is_finite() && *l > 0.0);
    let measured = || {
        pf.residuals
            .iter()
            .chain(&sf.residuals)
            .map(|r| r.context_tokens)
    };
    let longest = measured().max().unwrap_or(0) as f64;
    let shortest = measured().min().unwrap_or(0) as f64;
    let mut f = SpeedupFit {
        poor: pf.is_poor() || sf.is_poor(),
        plain: pf,
        spec: sf,
        crossing,
        // The speedup (a_p + b_p L)/(a_s + b_s L) falls with L when b_p/a_p < b_s/a_s.
        falling: bp * a_s < bs * ap,
        crossing_extrapolated: crossing.is_some_and(|l| l > longest || l < shortest),
        crossing_beyond_max: false,
        max_context,
        speedup_at_max: None,
    };
    f.crossing_beyond_max = matches!((crossing, max_context), (Some(l), Some(m)) if l > m as f64);
    f.speedup_at_max = max_context
        .map(|m| f.speedup(m as f64))
        .filter(|v| v.is_finite());
    Some(f)
}

/// `1.41× (1.32–1.50)`.
pub fn speedup_text(n: &Named) -> String {
    format!(
        "{:.2}×, {:.2}–{:.2}",
        n.speedup, n.interval.low, n.interval.high
    )
}

fn fit_clause(f: &Option<SpeedupFit>) -> Option<String> {
    let f = f.as_ref()?;
    // A poor fit (a load spike, acceptance that changes with length) can put its crossing
    // anywhere, even on the wrong side: the line to act on claims none from it.
    if f.poor {
        return Some(
            "the straight-line fit is poor, so no crossing is read from it: the measured lengths are the answer"
                .to_owned(),
        );
    }
    let poor = "";
    let max = f.max_context.map(fmt_ctx);
    Some(match (f.crossing, f.falling) {
        (Some(l), true) if f.crossing_beyond_max => format!(
            "the fit would cross 1 only at {} tokens, beyond the server's maximum {} (extrapolated{poor})",
            approx_tokens(l),
            max.unwrap_or_default()
        ),
        (Some(l), true) => format!(
            "the fit crosses 1 at ≈{}{} {}",
            approx_tokens(l),
            if f.crossing_extrapolated { " (extrapolated)" } else { " (between measured lengths)" },
            poor
        )
        .trim_end()
        .to_owned(),
        (Some(l), false) => format!(
            "the fit rises through 1 at ≈{}{}{poor}",
            approx_tokens(l),
            if f.crossing_extrapolated { " (extrapolated)" } else { "" }
        ),
        (None, _) => match (f.speedup_at_max, max) {
            (Some(s), Some(m)) => format!(
                "the fit does not cross 1: {s:.2}× at the server's maximum {m} (extrapolated{poor})"
            ),
            _ => format!("the fit does not cross 1{poor}"),
        },
    })
}

/// The line a user can act on.
pub fn answer(l: &LStar, f: &Option<SpeedupFit>) -> String {
    let fit = fit_clause(f).map(|c| format!("; {c}")).unwrap_or_default();
    match l {
        LStar::PaysEverywhere { first, last } if first.context_tokens == last.context_tokens => format!(
            "speculation pays at the one length with a verdict, {} ({}){fit}",
            fmt_ctx(first.context_tokens),
            speedup_text(first)
        ),
        LStar::PaysEverywhere { first, last } => format!(
            "speculation pays at every measured length: {} ({}) to {} ({}){fit}",
            fmt_ctx(first.context_tokens),
            speedup_text(first),
            fmt_ctx(last.context_tokens),
            speedup_text(last)
        ),
        LStar::StopsPaying {
            last_paying: Some(p),
            first_losing: q,
            ..
        } => format!(
            "speculation pays up to {} ({}); from {} on it is slower ({}): L* lies between them{fit}",
            fmt_ctx(p.context_tokens),
            speedup_text(p),
            fmt_ctx(q.context_tokens),
            speedup_text(q)
        ),
        LStar::StopsPaying {
            last_paying: None,
            first_losing: q,
            longest_not_slower: Some((n, pays)),
            ..
        } => format!(
            "speculation does not pay from {} ({}), but the speedup rises with context: {} at {} ({}); measure longer contexts before turning it off{fit}",
            fmt_ctx(q.context_tokens),
            speedup_text(q),
            pays.text(),
            fmt_ctx(n.context_tokens),
            speedup_text(n)
        ),
        LStar::StopsPaying {
            last_paying: None,
            first_losing: q,
            ..
        } => format!(
            "speculation does not pay: slower from {} on ({}); turn it off{fit}",
            fmt_ctx(q.context_tokens),
            speedup_text(q)
        ),
        LStar::NeverSlower {
            last_paying: Some(p),
            undecided,
        } => format!(
            "speculation pays up to {} ({}) and is never measurably slower (undecided at {}){fit}",
            fmt_ctx(p.context_tokens),
            speedup_text(p),
            ctx_list(undecided)
        ),
        LStar::NeverSlower {
            last_paying: None,
            undecided,
        } => format!(
            "no measured difference: speculation neither pays nor costs measurably at {}{fit}",
            ctx_list(undecided)
        ),
        LStar::Unknown => "too few runs or samples per length for an interval: measure more repetitions (or runs) before deciding".to_owned(),
    }
}

/// A fitted length, not a measured one: `4.9k`.
fn approx_tokens(x: f64) -> String {
    if x >= 1024.0 {
        format!("{:.1}k", x / 1024.0)
    } else {
        format!("{x:.0}")
    }
}

fn ctx_list(c: &[u64]) -> String {
    c.iter().map(|&x| fmt_ctx(x)).collect::<Vec<_>>().join(", ")
}

/// The analysis of a pair (`a` the baseline, `b` the other side), or why there is none;
/// `None` when `side` is [`SpecSide::Off`].
pub fn analyse(a: &Side, b: &Side, side: SpecSide, s: &Settings) -> Option<Speculation> {
    let (sa, sb) = (side_is_speculative(a), side_is_speculative(b));
    let (spec_is_a, detection) = match side {
        SpecSide::Off => return None,
        SpecSide::A => (true, Detection::Given),
        SpecSide::B => (false, Detection::Given),
        SpecSide::Auto => match (sa, sb) {
            (true, false) => (true, Detection::Samples),
            (false, true) => (false, Detection::Samples),
            (both, _) => {
                let reason = if both {
                    NotAnalysed::BothSpeculative
                } else {
                    NotAnalysed::NeitherSpeculative
                };
                return Some(Speculation::NotAnalysed {
                    message: reason.message().to_owned(),
                    reason,
                });
            }
        },
    };
    let (plain, spec) = if spec_is_a { (b, a) } else { (a, b) };
    let mut notes = Vec::new();
    if detection == Detection::Given {
        let (spec_reports, plain_reports) = if spec_is_a { (sa, sb) } else { (sb, sa) };
        if !spec_reports {
            notes.push(format!("{}'s samples report no speculative statistics: taken as the speculative side because --spec-side said so (no acceptance numbers)", spec.label));
        }
        if plain_reports {
            notes.push(format!("{}'s samples report speculative statistics, yet it is taken as the plain side (--spec-side)", plain.label));
        }
    }
    let by_runs = a.runs.len() > 1 || b.runs.len() > 1;
    let cs = contexts(spec);
    let points: Vec<SpecPoint> = contexts(plain)
        .into_iter()
        .filter(|c| cs.contains(c))
        .map(|c| point(plain, spec, c, by_runs, s))
        .collect();
    let l_star = l_star(&points);
    let effects = effects::decompose(&effect_inputs(plain, spec, &points, by_runs, s.level));
    let cliff = cliff::find(&acceptance_of(&points));
    if let LStar::StopsPaying { pays_again, .. } = &l_star {
        if !pays_again.is_empty() {
            notes.push(format!(
                "the speedup is not monotone in context: it pays again at {} (look at the noise, or at acceptance per length)",
                ctx_list(pays_again)
            ));
        }
    }
    let max_context = spec
        .runs
        .iter()
        .chain(plain.runs)
        .find_map(|r| r.header.server.max_context);
    let fit = speedup_fit(plain, spec, max_context);
    let mut answer = answer(&l_star, &fit);
    let too_few: Vec<u64> = points
        .iter()
        .filter(|p| p.pays == Payoff::TooFew)
        .map(|p| p.context_tokens)
        .collect();
    if !too_few.is_empty() && !matches!(l_star, LStar::Unknown) {
        // The answer speaks of the lengths with a verdict; say which had none.
        answer.push_str(&format!(
            " ({} without a verdict: too few samples)",
            ctx_list(&too_few)
        ));
    }
    Some(Speculation::Analysed(Box::new(SpecAnalysis {
        plain: plain.label.to_owned(),
        speculative: spec.label.to_owned(),
        speculative_is_a: spec_is_a,
        detection,
        basis: if by_runs {
            Basis::Runs
        } else {
            Basis::SamplesOfOneRun
        },
        level: s.level,
        points,
        l_star,
        fit,
        effects,
        cliff,
        answer,
        notes,
    })))
}

/// Per length, α, the verify step's and the plain step's cost with intervals, and the
/// measured speedup: what [`effects::decompose`] splits.
fn effect_inputs(
    plain: &Side,
    spec: &Side,
    points: &[SpecPoint],
    by_runs: bool,
    level: f64,
) -> Vec<effects::Inputs> {
    points
        .iter()
        .map(|p| {
            let c = p.context_tokens;
            effects::Inputs {
                context_tokens: c,
                accept_length: p.accept_length,
                verify_ms: mean_interval(
                    &per_run(spec, c, |x| x.ms_per_verify_step),
                    by_runs,
                    level,
                ),
                plain_ms: mean_interval(&per_run(plain, c, |x| x.ms_per_step), by_runs, level),
                measured: p.speedup,
            }
        })
        .collect()
}

/// Acceptance per length as the cliff rule reads it.
pub fn acceptance_of(points: &[SpecPoint]) -> Vec<cliff::Acceptance> {
    points
        .iter()
        .map(|p| cliff::Acceptance {
            context_tokens: p.context_tokens,
            rate: p.accept_rate,
            length: p.accept_length,
        })
        .collect()
}

/// Acceptance per length of one run (cold usable samples, the samples as units): the input
/// of the cliff rule for a speculative run's own report.
pub fn run_acceptance(r: &Results, level: f64) -> Vec<cliff::Acceptance> {
    let runs = [r];
    let side = Side {
        label: "",
        runs: &runs,
    };
    contexts(&side)
        .into_iter()
        .map(|c| cliff::Acceptance {
            context_tokens: c,
            rate: mean_interval(&per_run(&side, c, |x| x.spec_accept_rate), false, level)
                .map(|m| m.within(0.0, 1.0)),
            length: mean_interval(&per_run(&side, c, |x| x.spec_accept_length), false, level)
                .map(|m| m.within(1.0, f64::INFINITY)),
        })
        .filter(|a| a.rate.is_some() || a.length.is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::{Sample, Status};

    fn sample(c: u64, ms: f64, ttft: f64, spec: Option<(f64, f64)>) -> Sample {
        Sample {
            context_tokens: c,
            status: Status::Ok,
            phase: Phase::Cold,
            length_ok: Some(true),
            ms_per_step: Some(ms),
            ttft_ms: Some(ttft),
            spec_accept_length: spec.map(|s| s.0),
            spec_accept_rate: spec.map(|s| s.1),
            spec_verify_steps: spec.map(|_| 4),
            spec_draft_tokens: spec.map(|_| 32),
            spec_accepted_tokens: spec.map(|s| (32.0 * s.1) as u64),
            ms_per_verify_step: spec.map(|s| ms * s.0),
            ..Sample::default()
        }
    }

    /// One run: at each context, six samples of ms/token `f(c)` with a ±1% wobble.
    fn run(cs: &[u64], f: impl Fn(u64) -> f64, spec: Option<(f64, f64)>) -> Results {
        let mut r = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.samples = cs
            .iter()
            .flat_map(|&c| {
                let f = &f;
                (0..6).map(move |i| {
                    let w = 1.0 + 0.01 * (i as f64 - 2.5) / 2.5;
                    sample(
                        c,
                        f(c) * w,
                        100.0 * w * if spec.is_some() { 2.0 } else { 1.0 },
                        spec,
                    )
                })
            })
            .collect();
        r.header.server.max_context = Some(1 << 20);
        r
    }

    const LADDER: [u64; 5] = [1024, 2048, 4096, 8192, 16384];

    #[test]
    fn a_poor_fit_claims_no_crossing_in_the_line_to_act_on() {
        // The real Q4_1 -> F16 pair on a loaded host: the speculative side's 512 was timed in
        // a load spike (166 ms/tok, 133 at 1536), its fit is flat with R² < 0, and the lines
        // "met" at 4.4k: a crossing no measurement supports.
        let fit = |coef: Vec<f64>, r2: f64| super::super::fit::Fit {
            model: super::super::fit::Model::Linear,
            coef,
            r2,
            n: 6,
            points: 2,
            residuals: Vec::new(),
        };
        let mut f = SpeedupFit {
            plain: fit(vec![46.3, 0.0224], 1.0),
            spec: fit(vec![146.2, 0.0], -0.05),
            crossing: Some(4470.0),
            falling: false,
            crossing_extrapolated: true,
            crossing_beyond_max: true,
            max_context: Some(4096),
            speedup_at_max: Some(0.94),
            poor: true,
        };
        let c = fit_clause(&Some(f.clone())).unwrap();
        assert!(
            c.contains("poor") && c.contains("no crossing") && !c.contains("4.4k"),
            "{c}"
        );
        f.poor = false;
        assert!(fit_clause(&Some(f)).unwrap().contains("rises through 1"));
    }

    #[test]
    fn a_draft_that_pays_less_with_depth_gives_l_star_between_the_last_paying_and_first_losing_length(
    ) {
        // Plain 2 + 0.0005 L ms/token, speculative 1 + 0.0007 L: 1.46× at 1k, the lines meet
        // at L = 5000, slower from 8k on.
        let plain = run(&LADDER, |c| 2.0 + 0.0005 * c as f64, None);
        let spec = run(&LADDER, |c| 1.0 + 0.0007 * c as f64, Some((3.0, 0.5)));
        let (p, s) = ([&plain], [&spec]);
        let a = analyse(
            &Side {
                label: "plain",
                runs: &p,
            },
            &Side {
                label: "spec",
                runs: &s,
            },
            SpecSide::Auto,
            &Settings::default(),
        )
        .unwrap();
        let Speculation::Analysed(a) = a else {
            panic!("{a:?}")
        };
        assert!(!a.speculative_is_a && a.detection == Detection::Samples);
        let pays: Vec<Payoff> = a.points.iter().map(|p| p.pays).collect();
        assert_eq!(
            pays,
            [
                Payoff::Pays,
                Payoff::Pays,
                Payoff::Pays,
                Payoff::Slower,
                Payoff::Slower
            ]
        );
        let LStar::StopsPaying {
            last_paying: Some(lp),
            first_losing,
            pays_again,
            longest_not_slower: None,
        } = &a.l_star
        else {
            panic!("{:?}", a.l_star)
        };
        assert_eq!(
            (lp.context_tokens, first_losing.context_tokens),
            (4096, 8192)
        );
        assert!(pays_again.is_empty());
        let f = a.fit.as_ref().unwrap();
        assert!((f.crossing.unwrap() - 5000.0).abs() < 50.0, "{f:?}");
        assert!(f.falling && !f.crossing_extrapolated);
        assert!(
            a.answer.starts_with("speculation pays up to 4k (1.05×"),
            "{}",
            a.answer
        );
        assert!(
            a.answer.contains("; from 8k on it is slower (0.91×"),
            "{}",
            a.answer
        );
        // The TTFT cost (the draft's prefill) and acceptance with intervals.
        let p0 = &a.points[0];
        assert!((p0.ttft_cost.unwrap() - 2.0).abs() < 1e-9);
        let al = p0.accept_length.unwrap();
        assert_eq!((al.mean, al.n), (3.0, 6));
        assert_eq!(p0.draft_tokens, Some(6 * 32));
        // The two effects: acceptance holds at 3.0, the verify step grows dearer than the
        // plain one, and α · t_plain / t_verify gives back the measured speedup.
        use effects::Mover;
        let movers: Vec<Mover> = a.effects.iter().map(|e| e.mover).collect();
        assert_eq!(movers[0], Mover::Reference);
        assert_eq!(movers[4], Mover::Cost);
        assert!(
            a.effects.iter().all(|e| e.agrees == Some(true)),
            "{:?}",
            a.effects
        );
        assert!(a.cliff.is_none());
    }

    #[test]
    fn pays_everywhere_is_said_with_the_fit_to_the_servers_maximum_and_sides_can_be_swapped() {
        let plain = run(&LADDER, |c| 6.0 + 0.003 * c as f64, None);
        let spec = run(&LADDER, |c| 2.0 + 0.001 * c as f64, Some((9.0, 1.0)));
        let (p, s) = ([&plain], [&spec]);
        // The speculative run given as the baseline A.
        let Some(Speculation::Analysed(a)) = analyse(
            &Side {
                label: "spec",
                runs: &s,
            },
            &Side {
                label: "plain",
                runs: &p,
            },
            SpecSide::Auto,
            &Settings::default(),
        ) else {
            panic!()
        };
        assert!(a.speculative_is_a);
        assert!(
            matches!(a.l_star, LStar::PaysEverywhere { .. }),
            "{:?}",
            a.l_star
        );
        let f = a.fit.as_ref().unwrap();
        assert_eq!(f.crossing, None);
        assert!((f.speedup_at_max.unwrap() - 3.0).abs() < 0.01, "{f:?}");
        assert!(
            a.answer
                .starts_with("speculation pays at every measured length: 1k (3.00×")
                && a.answer.contains(
                    "the fit does not cross 1: 3.00× at the server's maximum 1024k (extrapolated)"
                ),
            "{}",
            a.answer
        );
    }

    #[test]
    fn a_draft_that_never_pays_and_sides_that_cannot_be_told_apart() {
        let plain = run(&LADDER, |c| 1.0 + 0.0005 * c as f64, None);
        let spec = run(&LADDER, |c| 2.0 + 0.001 * c as f64, Some((1.0, 0.0)));
        let (p, s) = ([&plain], [&spec]);
        let side = |l, r| Side { label: l, runs: r };
        let Some(Speculation::Analysed(a)) = analyse(
            &side("plain", &p),
            &side("spec", &s),
            SpecSide::Auto,
            &Settings::default(),
        ) else {
            panic!()
        };
        assert!(matches!(
            a.l_star,
            LStar::StopsPaying {
                last_paying: None,
                ..
            }
        ));
        assert!(
            a.answer
                .starts_with("speculation does not pay: slower from 1k on (0.50×"),
            "{}",
            a.answer
        );
        for (x, y, want) in [
            (&p, &p, NotAnalysed::NeitherSpeculative),
            (&s, &s, NotAnalysed::BothSpeculative),
        ] {
            let got = analyse(
                &side("x", x),
                &side("y", y),
                SpecSide::Auto,
                &Settings::default(),
            );
            assert!(
                matches!(got, Some(Speculation::NotAnalysed { ref reason, .. }) if *reason == want),
                "{got:?}"
            );
        }
        // Told which side speculates, the analysis runs and says what it took on trust.
        let Some(Speculation::Analysed(a)) = analyse(
            &side("x", &p),
            &side("y", &p),
            SpecSide::B,
            &Settings::default(),
        ) else {
            panic!()
        };
        assert_eq!(a.detection, Detection::Given);
        assert!(
            a.notes[0].contains("report no speculative statistics"),
            "{:?}",
            a.notes
        );
        assert!(analyse(
            &side("x", &p),
            &side("y", &s),
            SpecSide::Off,
            &Settings::default()
        )
        .is_none());
    }

    #[test]
    fn the_l_star_rule_on_undecided_and_too_few_points() {
        let pt = |c: u64, pays: Payoff| SpecPoint {
            context_tokens: c,
            plain_ms_per_token: None,
            spec_ms_per_token: None,
            speedup: Some(1.0),
            speedup_interval: (pays != Payoff::TooFew).then_some(RatioInterval {
                low: 0.9,
                high: 1.1,
                level: 0.95,
                df: 5.0,
            }),
            n_plain: 6,
            n_spec: 6,
            pays,
            plain_ttft_ms: None,
            spec_ttft_ms: None,
            ttft_cost: None,
            ttft_cost_interval: None,
            accept_length: None,
            accept_rate: None,
            draft_tokens: None,
            accepted_tokens: None,
            verify_steps: None,
            ms_per_verify_step: None,
        };
        use Payoff::*;
        let l = l_star(&[pt(1, Pays), pt(2, Undecided), pt(4, TooFew)]);
        assert!(
            matches!(&l, LStar::NeverSlower { last_paying: Some(p), undecided } if p.context_tokens == 1 && undecided == &[2]),
            "{l:?}"
        );
        // The first losing length decides, a later paying one is reported, not trusted.
        let l = l_star(&[pt(1, Pays), pt(2, Undecided), pt(4, Slower), pt(8, Pays)]);
        assert!(
            matches!(&l, LStar::StopsPaying { last_paying: Some(p), first_losing: q, pays_again, .. } if p.context_tokens == 1 && q.context_tokens == 4 && pays_again == &[8]),
            "{l:?}"
        );
        assert_eq!(l_star(&[pt(1, TooFew)]), LStar::Unknown);
        // Slower at short lengths, undecided at the longest: the answer says it rises.
        let l = l_star(&[pt(1, Slower), pt(2, Slower), pt(4, Undecided)]);
        assert!(
            matches!(&l, LStar::StopsPaying { last_paying: None, longest_not_slower: Some((n, Undecided)), .. } if n.context_tokens == 4),
            "{l:?}"
        );
        assert!(answer(&l, &None).contains("but the speedup rises with context: undecided at 4 ("));
        assert!(answer(&LStar::Unknown, &None).contains("too few"));
    }

    #[test]
    fn acceptance_intervals_are_over_samples_or_run_means() {
        let m = mean_interval(&[vec![1.0, 2.0, 3.0]], false, 0.95).unwrap();
        assert_eq!((m.mean, m.n), (2.0, 3));
        // t(0.975, 2) = 4.303; sd 1, n 3.
        assert!((m.high.unwrap() - (2.0 + 4.302_653 / 3f64.sqrt())).abs() < 1e-4);
        let m = mean_interval(&[vec![1.0, 3.0], vec![5.0]], true, 0.95).unwrap();
        assert_eq!((m.mean, m.n), (3.5, 2));
        let m = mean_interval(&[vec![9.0]], false, 0.95).unwrap();
        assert_eq!((m.low, m.n), (None, 1));
        assert!(mean_interval(&[vec![]], false, 0.95).is_none());
    }

    #[test]
    fn a_rate_interval_stays_within_zero_and_one() {
        // Rates near 1 with spread: the t-interval alone would reach past 100%.
        let m = mean_interval(&[vec![1.0, 0.9, 1.0, 0.97]], false, 0.95)
            .unwrap()
            .within(0.0, 1.0);
        assert_eq!(m.high, Some(1.0));
        assert!(m.low.unwrap() < m.mean && m.low.unwrap() >= 0.0);
    }
}
