//! How precisely each length's figures are known under the noise model shared across
//! lengths (`noise`): the judgement the designed sweep makes before every repetition, and
//! the report makes again from the results file. Pure: no I/O.
//!
//! The model a length is judged with is built shortest length first: each length is
//! checked against the lengths below it and joins the pool only when its spread is theirs,
//! so the noise is "estimated from the cheap lengths, checked at the expensive ones". A
//! length whose spread is not the model's is judged on its own samples.

use super::noise::{self, Consistency, LogSpread};
use ctxbench_schema::record::IntervalBasis;

/// One length's usable samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Length<'a> {
    /// Context length.
    pub context: u64,
    /// TTFTs (ms).
    pub ttft: &'a [f64],
    /// Decode rates (tok/s).
    pub decode: &'a [f64],
}

/// A log-scale spread and the degrees of freedom it is known to.
pub type SpreadDf = (f64, f64);

/// What the shared noise model makes of one length: its intervals and the samples it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The model the length is judged with (the shorter lengths that agree with it, and this
    /// one when it agrees too): TTFT, decode.
    pub model: (Option<LogSpread>, Option<LogSpread>),
    /// Samples the model of the shorter lengths alone asks for here.
    pub planned: Option<u32>,
    /// The length's spread is not the model's: what the check found.
    pub regime: Option<String>,
    /// Where the intervals come from.
    pub basis: IntervalBasis,
    /// Relative 95% half-width of the median TTFT (`None`: no interval).
    pub ttft_half_width: Option<f64>,
    /// The same for the decode rate.
    pub decode_half_width: Option<f64>,
    /// Samples this length needs under this judgement (`None`: more than `max_reps`, or
    /// nothing to judge with yet).
    pub needed: Option<u32>,
    /// The log-scale spread each interval was computed with and its degrees of freedom
    /// (TTFT, decode): on the shared model, the larger of the model's σ and this length's
    /// own (a length is never judged quieter than it measured); on its own samples, theirs.
    pub spread: (Option<SpreadDf>, Option<SpreadDf>),
}

impl Judgement {
    /// Both intervals within `target`.
    pub fn precise(&self, target: f64) -> bool {
        let ok = |w: Option<f64>| w.is_some_and(|w| w <= target);
        ok(self.ttft_half_width) && ok(self.decode_half_width)
    }

    /// Whether the noise model says `target` cannot be reached within `cap` samples here:
    /// even with the spread at the lower end of its one-sided 95% interval
    /// (`noise::sd_lower`) and known exactly, `cap` samples leave a median's interval wider
    /// than the target. Conservative on purpose: a quiet host whose first pair happened to
    /// differ is not given up on.
    pub fn out_of_reach(&self, target: f64, cap: u32) -> bool {
        [self.spread.0, self.spread.1]
            .into_iter()
            .flatten()
            .any(|(sd, df)| noise::half_width_known(noise::sd_lower(sd, df), cap as usize) > target)
    }

    /// The wider of the two half-widths `n` samples would reach here with the spread as
    /// judged now (on its own samples, t with n − 1 degrees of freedom; on the shared model,
    /// with at least the degrees of freedom n samples here add): what this host allows with
    /// `n` samples. `None` while a spread is unknown.
    pub fn reach(&self, n: u32) -> Option<f64> {
        let at = |s: Option<SpreadDf>| {
            let (sd, df) = s?;
            // n samples here would give the model at least their own degrees of freedom.
            let df = match self.basis {
                IntervalBasis::Own => f64::from(n.max(2) - 1),
                _ => df.max(noise::SHAMOS_EFFICIENCY * f64::from(n.max(2) - 1)),
            };
            Some(noise::half_width(sd, df, n as usize))
        };
        Some(at(self.spread.0)?.max(at(self.spread.1)?))
    }
}

/// Indices of the lengths shorter than `lengths[i]`, shortest first.
fn shorter(lengths: &[Length<'_>], i: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..lengths.len())
        .filter(|&j| lengths[j].context < lengths[i].context)
        .collect();
    v.sort_by_key(|&j| lengths[j].context);
    v
}

/// The lengths' samples pooled, one slice per length and metric.
struct Pool<'a> {
    contexts: Vec<u64>,
    ttft: Vec<&'a [f64]>,
    decode: Vec<&'a [f64]>,
}

impl<'a> Pool<'a> {
    /// Each metric's pooled spread at `context`: scaled by the spread's trend with length
    /// where the pooled lengths establish one (`noise::length_trend`).
    fn models(&self, context: u64) -> (Option<LogSpread>, Option<LogSpread>) {
        let at = |groups: &[&[f64]]| {
            let m = noise::pooled(groups)?;
            let g: Vec<(u64, &[f64])> = self
                .contexts
                .iter()
                .copied()
                .zip(groups.iter().copied())
                .collect();
            Some(match noise::length_trend(&g) {
                Some(t) => t.apply(m, context),
                None => m,
            })
        };
        (at(&self.ttft), at(&self.decode))
    }

    /// The check of `p` against this pool: each metric's consistency, when both can be
    /// checked.
    fn check(&self, p: &Length<'_>) -> (Option<Consistency>, Option<Consistency>) {
        let (t, d) = self.models(p.context);
        (
            t.and_then(|m| noise::consistency(p.ttft, &m)),
            d.and_then(|m| noise::consistency(p.decode, &m)),
        )
    }

    fn push(&mut self, p: &Length<'a>) {
        self.contexts.push(p.context);
        self.ttft.push(p.ttft);
        self.decode.push(p.decode);
    }
}

/// The model of the lengths shorter than `lengths[i]`: built shortest first, each length
/// checked against the lengths below it and left out when its spread is not theirs.
fn pool_below<'a>(lengths: &[Length<'a>], i: usize) -> Pool<'a> {
    let mut pool = Pool {
        contexts: Vec::new(),
        ttft: Vec::new(),
        decode: Vec::new(),
    };
    for j in shorter(lengths, i) {
        let (t, d) = pool.check(&lengths[j]);
        if !(t.is_some_and(|c| c.rejects()) || d.is_some_and(|c| c.rejects())) {
            pool.push(&lengths[j]);
        }
    }
    pool
}

/// What the check found, in words; `None` when the spread is the model's.
fn regime_text(t: Option<Consistency>, d: Option<Consistency>) -> Option<String> {
    let words = |name: &str, c: Consistency| {
        format!(
            "{name} spread {:.1}% over {} samples against {:.1}% in the noise model (variance ratio {:.1}, p = {:.4})",
            c.own_sd * 100.0,
            c.n,
            c.model_sd * 100.0,
            c.ratio,
            c.p
        )
    };
    let found: Vec<String> = [("TTFT", t), ("decode", d)]
        .into_iter()
        .filter_map(|(name, c)| c.filter(Consistency::rejects).map(|c| words(name, c)))
        .collect();
    (!found.is_empty()).then(|| {
        format!(
            "{}: not the shorter lengths' noise, so this length is judged on its own samples",
            found.join("; ")
        )
    })
}

/// The larger of two sample counts, when both are known.
fn both(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    Some(a?.max(b?))
}

/// Samples a length needs under a shared model, between `floor` and `cap`.
fn needed_shared(
    target: f64,
    (t, d): (Option<LogSpread>, Option<LogSpread>),
    floor: u32,
    cap: u32,
) -> Option<u32> {
    let need = |m: LogSpread| noise::reps_needed(target, m.sd, m.df, floor, cap);
    both(t.and_then(need), d.and_then(need))
}

/// What the shared model makes of `lengths[i]` for a precision `target`: at least `floor`
/// and at most `cap` samples a length.
pub fn judge(lengths: &[Length<'_>], i: usize, target: f64, floor: u32, cap: u32) -> Judgement {
    let mut pool = pool_below(lengths, i);
    let below = pool.models(lengths[i].context);
    let planned = needed_shared(target, below, floor, cap);
    let p = lengths[i];
    let (ct, cd) = pool.check(&p);
    if let Some(regime) = regime_text(ct, cd) {
        let own = |v: &[f64]| {
            noise::own_variance(v)
                .and_then(|(var, _)| noise::own_reps_needed(target, var.sqrt(), cap))
        };
        let spread = |v: &[f64]| noise::own_variance(v).map(|(var, df)| (var.sqrt(), df));
        return Judgement {
            model: below,
            planned,
            regime: Some(regime),
            basis: IntervalBasis::Own,
            ttft_half_width: noise::own_half_width(p.ttft),
            decode_half_width: noise::own_half_width(p.decode),
            needed: both(own(p.ttft), own(p.decode)),
            spread: (spread(p.ttft), spread(p.decode)),
        };
    }
    pool.push(&p);
    let model = pool.models(p.context);
    // Never quieter than this length measured: a spread the F test lets through (two
    // samples cannot reject much) still widens its own interval.
    let here = |m: Option<LogSpread>, v: &[f64]| {
        m.map(|m| LogSpread {
            sd: m
                .sd
                .max(noise::own_variance(v).map_or(0.0, |(var, _)| var.sqrt())),
            ..m
        })
    };
    let used = (here(model.0, p.ttft), here(model.1, p.decode));
    let width = |m: Option<LogSpread>, v: &[f64]| {
        m.map(|m| noise::half_width(m.sd, m.df, noise::logs(v).len()))
            .filter(|w| w.is_finite())
    };
    let (ttft_half_width, decode_half_width) = (width(used.0, p.ttft), width(used.1, p.decode));
    let basis = match (ttft_half_width, decode_half_width) {
        (Some(_), Some(_)) => IntervalBasis::Shared,
        _ => IntervalBasis::Unknown,
    };
    Judgement {
        model,
        planned,
        regime: None,
        basis,
        ttft_half_width,
        decode_half_width,
        needed: needed_shared(target, used, floor, cap),
        spread: (used.0.map(|m| (m.sd, m.df)), used.1.map(|m| (m.sd, m.df))),
    }
}

/// The noise model over every length whose spread agrees with the shorter ones': TTFT,
/// decode (what a report states as the run's noise), at the longest length.
pub fn run_model(lengths: &[Length<'_>]) -> (Option<LogSpread>, Option<LogSpread>) {
    let Some(longest) = (0..lengths.len()).max_by_key(|&i| lengths[i].context) else {
        return (None, None);
    };
    let mut pool = pool_below(lengths, longest);
    let (t, d) = pool.check(&lengths[longest]);
    if !(t.is_some_and(|c| c.rejects()) || d.is_some_and(|c| c.rejects())) {
        pool.push(&lengths[longest]);
    }
    pool.models(lengths[longest].context)
}
