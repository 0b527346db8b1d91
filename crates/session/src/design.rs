//! The designed sweep (`--precision P --design auto`): which length to measure how often,
//! for every length's median TTFT (and prefill rate) and decode rate to be within ±P at 95%,
//! for the least server time. Pure decisions, no I/O; the loop (`bench::point`) asks
//! [`Design::next`] before every repetition and records [`Design::record`] on the `point`
//! line. Everything is recomputed from the samples, so a resumed run decides as the
//! uninterrupted one would have from the same samples.
//!
//! How (the justification is in docs/measurement.md, "The designed sweep"):
//! - **Cheap lengths first.** The loop goes small to large, so the cost model knows what a
//!   large length costs before it is started, and the noise model is built where samples
//!   are cheap. It goes in passes, one sample per length per visit ([`visits`]), so each
//!   length's samples span the run and a drift of the server shows as spread.
//! - **A noise model shared across lengths** (`stats::noise`): the relative spread of TTFT
//!   and of the decode rate, pooled over the shorter lengths whose own spread agrees with
//!   it. With it, a length needs only the samples that bring its median's interval within
//!   ±P — often one or two at the expensive end instead of the six a distribution-free
//!   interval needs.
//! - **Marginal information per second.** A cheap length takes more samples than it needs
//!   for itself while each pays for itself: one more sample there adds a degree of freedom
//!   to the model, which lowers the t quantile every longer length is judged with and so
//!   the samples they need; it is taken when the predicted server time it saves at the
//!   longer lengths exceeds its own cost ([`Design::noise_pays`]).
//! - **Checked where it matters.** Every length takes at least [`FLOOR`] samples (one to
//!   answer the user's question at that length, a second to check its spread). A length
//!   whose spread the model does not explain (an F test at 1%) is judged on its own samples
//!   alone, which costs it more samples, and its `point` line says why.
//! - **Predicted lengths.** The lengths up to a quarter of the longest are measured first
//!   (smallest first), then the longest (always measured: the user's real question is
//!   never answered by extrapolation alone), then the ones between, smallest first: each of
//!   those is *predicted* from the fits of the measured lengths instead of measured when
//!   the prediction's interval, model error included, is within ±P
//!   (`stats::predicted`; [`order`], [`Design::prediction`]).
//! - **A budget that runs out** (`--run-budget`) keeps one sample in reserve for every
//!   length not yet measured, and every figure is recorded with the precision it reached.

use ctxbench_schema::record::{IntervalBasis, PointDesign, Prediction, Revision, StopReason};
pub use ctxbench_stats::stats::precision::Judgement;
use ctxbench_stats::stats::precision::{self, Length};
use ctxbench_stats::stats::predicted::{self, Measured};
use ctxbench_stats::stats::{drift, noise, quantile_target};

/// Samples every length gets unless the run budget is spent: one to answer, one to check
/// its spread against the model.
pub const FLOOR: u32 = 2;

/// Samples a length takes when the target is out of reach there ([`Design::next`]): what a
/// fixed `--reps 6` sweep takes, so that a designed run on a host too noisy for its target
/// never costs more than the fixed sweep its user would have run instead.
pub const OUT_OF_REACH_REPS: u32 = 6;

/// Usable samples from which a length's own distribution is read for what `--max-reps`
/// would give ([`Design::projected_at_cap`]): twice a fixed `--reps 6` sweep's, so that
/// two clusters show as such rather than as a chance pair.
pub const CONVERGENCE_LOOK: u32 = 12;

/// How many extra samples at the current length the noise-model rule looks ahead (the
/// samples a longer length needs change in whole steps, so one sample alone may show no
/// gain where a few do).
const HORIZON: u32 = 8;

/// One length as the design sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointState {
    /// Context length.
    pub context: u64,
    /// Repetitions taken (usable or not).
    pub reps: u32,
    /// TTFTs of the usable samples (ms).
    pub ttft_ms: Vec<f64>,
    /// Decode rates of the usable samples (tok/s).
    pub decode: Vec<f64>,
    /// Step times of the usable samples the report's step-time tails count (ms per token;
    /// `adaptive::counted_step_ms`): what a percentile target judges.
    pub step_ms: Vec<f64>,
    /// Predicted seconds of one more sample here (`None`: nothing predicts it yet).
    pub cost_s: Option<f64>,
    /// Server seconds spent here so far.
    pub spent_s: f64,
    /// Seconds spent beyond the first [`FLOOR`] repetitions (what `--point-budget` limits).
    pub beyond_floor_s: f64,
    /// The length is done (measured or predicted): it needs no reserve.
    pub settled: bool,
}

/// The design's settings (from the run's `RepPolicy`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Design {
    /// Relative half-width asked of every median's 95% interval.
    pub target: f64,
    /// Repetitions never exceeded at one length.
    pub max_reps: u32,
    /// Seconds one length may take beyond its first [`FLOOR`] samples.
    pub point_budget_s: Option<f64>,
    /// Seconds the whole run may take.
    pub run_budget_s: Option<f64>,
    /// The server's maximum context: the fits' extrapolation there is a figure the design
    /// brings within the target too, when it can ([`Design::extrapolation_pays`]).
    pub extrapolate_to: Option<u64>,
    /// `--precision-of pNN`: the percentile whose interval the target is on (`None`: the
    /// median). See [`Design::next_quantile`].
    pub quantile: Option<f64>,
}

/// Why the design takes another sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The length has no sample yet.
    First,
    /// A second sample, to check the length's spread against the model.
    Check,
    /// An interval is still wider than the target.
    Precision,
    /// The length is precise, but one more sample here costs less than it saves at the
    /// longer lengths (a better-known noise model).
    NoiseModel,
    /// The longest length is precise, but the fits' extrapolation to the server's maximum
    /// is not, and a sample here narrows it.
    Extrapolation,
}

/// What the design decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Take another sample, for this reason.
    Measure(Why),
    /// The length is done.
    Stop(StopReason),
}

/// Percent rounded up to 0.1% (5.04% is not "±5.0%"), or "n/a".
fn pct(w: Option<f64>) -> String {
    w.map_or("n/a".to_owned(), |w| {
        format!("±{:.1}%", (w * 1000.0 - 1e-9).ceil() / 10.0)
    })
}

/// The precision each variant of a campaign (`--server-cmd` with `-L`/`-F`) is designed
/// for, so that the comparison is known to ±`p`: a ratio B/A's log half-width is the two
/// medians' in quadrature, so two variants each within ±p/√2 give a ratio within about ±p.
/// A single variant is designed for `p` itself. The run stays the unit: each run is designed
/// on its own, for this precision.
pub fn variant_precision(p: f64, variants: usize) -> f64 {
    if variants >= 2 {
        p / std::f64::consts::SQRT_2
    } else {
        p
    }
}

/// Whether `contexts[i]` may be predicted instead of measured: longer than a quarter of the
/// longest length, and not the longest.
fn may_predict(contexts: &[u64], i: usize) -> bool {
    let longest = contexts.iter().copied().max().unwrap_or(0);
    contexts[i] < longest && contexts[i] > longest / 4
}

/// The order a designed run visits `contexts` in (indices): the lengths up to a quarter of
/// the longest, smallest first (cheap: they build the noise and cost models); then the
/// longest, always measured; then the lengths between, smallest first, each of which may be
/// predicted from the fits of the measured lengths around it.
pub fn order(contexts: &[u64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..contexts.len()).collect();
    idx.sort_by_key(|&i| contexts[i]);
    let longest = contexts.iter().copied().max().unwrap_or(0);
    let (mut first, mut later): (Vec<usize>, Vec<usize>) = idx
        .into_iter()
        .partition(|&i| !may_predict(contexts, i) && contexts[i] < longest);
    // The longest length (the first of `later`'s maxima) goes right after the cheap ones.
    if let Some(pos) = later.iter().position(|&i| contexts[i] == longest) {
        first.push(later.remove(pos));
    }
    first.extend(later);
    first
}

/// Bootstrap refits behind the design's view of the extrapolation band (the report's own
/// band uses more; a decision needs its width to a few tenths of a percent).
const BAND_RESAMPLES: usize = 300;

/// The wider relative half-width of the 90% bands of the TTFT (quadratic) and ms/step
/// (linear, from the decode rates) fits extrapolated to `at`, from every length's samples;
/// with `extra`, as if that length had one more sample at its median. `None` when nothing
/// is extrapolated (`at` within the measured range, or too few lengths for the fits).
pub fn extrapolation_band(points: &[PointState], at: u64, extra: Option<usize>) -> Option<f64> {
    use ctxbench_stats::stats::fit::{extrapolate, Model};
    let obs = |f: &dyn Fn(&PointState) -> Vec<f64>| -> Vec<(u64, f64)> {
        points
            .iter()
            .enumerate()
            .flat_map(|(k, p)| {
                let mut v = f(p);
                if extra == Some(k) {
                    v.extend(median(&v));
                }
                v.into_iter().map(move |y| (p.context, y))
            })
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect()
    };
    let ttft = obs(&|p| p.ttft_ms.clone());
    let step = obs(&|p| p.decode.iter().map(|r| 1000.0 / r).collect());
    if ttft.iter().map(|o| o.0).max()? >= at {
        return None;
    }
    let width = |model, o: &[(u64, f64)]| {
        let e = extrapolate(model, o, at, BAND_RESAMPLES, 32)?;
        (e.predicted > 0.0).then(|| (e.high / e.predicted - 1.0).max(1.0 - e.low / e.predicted))
    };
    let (t, d) = (
        width(Model::Quadratic, &ttft)?,
        width(Model::Linear, &step)?,
    );
    Some(t.max(d))
}

/// The median of the finite values.
fn median(v: &[f64]) -> Option<f64> {
    ctxbench_stats::stats::Spread::of(v.iter().copied()).map(|s| s.median)
}

impl Design {
    /// The prediction of `points[i]` from the fits of the measured lengths when it may be
    /// predicted ([`order`]) and both its intervals, model error included, are within the
    /// target; `None` means it is measured.
    pub fn prediction(&self, points: &[PointState], i: usize) -> Option<Prediction> {
        let contexts: Vec<u64> = points.iter().map(|p| p.context).collect();
        // A percentile is not predicted: the fits are of medians.
        if self.quantile.is_some() || !may_predict(&contexts, i) || points[i].reps > 0 {
            return None;
        }
        predicted::predict_within(&self.measured(points, i), points[i].context, self.target)
    }

    /// Every measured length but `points[i]`, as the fits of a prediction see it: its
    /// medians and their half-widths as judged now.
    fn measured(&self, points: &[PointState], i: usize) -> Vec<Measured> {
        (0..points.len())
            .filter(|&k| k != i && !points[k].ttft_ms.is_empty() && !points[k].decode.is_empty())
            .filter_map(|k| {
                let j = self.judge(points, k);
                Some(Measured {
                    context: points[k].context,
                    ttft_ms: median(&points[k].ttft_ms)?,
                    ttft_half_width: j.ttft_half_width.unwrap_or(f64::INFINITY),
                    decode_tokens_per_s: median(&points[k].decode)?,
                    decode_half_width: j.decode_half_width.unwrap_or(f64::INFINITY),
                })
            })
            .collect()
    }

    /// The correction of `points[i]`'s `point` line at the end of the run: the length judged
    /// again with every sample of the run (the report's judgement: the same function,
    /// `stats::precision::judge`, on the same samples), when what `earlier` stated no longer
    /// reads the same (another interval at 0.1%, or another basis). Samples that arrived at
    /// the shorter lengths after this one stopped move the noise model, and its check, so
    /// the interval stated during the run can be the wrong one by the end ("4k: ±4.1% during
    /// the run, ±14.3% once its own spread was judged"). The corrected line repeats the stop
    /// reason, states the final intervals, and keeps what `earlier` said in `revised`.
    pub fn revise(
        &self,
        points: &[PointState],
        i: usize,
        stop: StopReason,
        earlier: &PointDesign,
    ) -> Option<PointDesign> {
        let mut now = match earlier.basis {
            IntervalBasis::Fit => {
                let pr = predicted::predict(&self.measured(points, i), points[i].context)?;
                self.record_predicted(&points[i], pr)
            }
            _ => self.record(points, i, &self.judge(points, i), stop),
        };
        let same = |a: Option<f64>, b: Option<f64>| pct(a) == pct(b);
        if now.basis == earlier.basis
            && same(now.ttft_half_width, earlier.ttft_half_width)
            && same(now.decode_half_width, earlier.decode_half_width)
        {
            return None;
        }
        let how = match (&earlier.basis, &now.basis) {
            (IntervalBasis::Fit, _) => "once the fits held every measured length's samples",
            (IntervalBasis::Own, IntervalBasis::Own) => "with the run's last samples",
            (_, IntervalBasis::Own) => "once its own spread was judged",
            _ => "once the noise model held every length's samples",
        };
        let over = |w: Option<f64>| match w {
            Some(w) if w > self.target => format!(" (over {})", pct(Some(self.target))),
            _ => String::new(),
        };
        now.why = format!(
            "revised at the end of the run: TTFT {} during the run, {}{} {how}; decode {} during the run, {}{}; {}",
            pct(earlier.ttft_half_width),
            pct(now.ttft_half_width),
            over(now.ttft_half_width),
            pct(earlier.decode_half_width),
            pct(now.decode_half_width),
            over(now.decode_half_width),
            now.why
        );
        now.revised = Some(Box::new(Revision {
            ttft_half_width: earlier.ttft_half_width,
            decode_half_width: earlier.decode_half_width,
            basis: earlier.basis.clone(),
        }));
        Some(now)
    }

    /// Whether `points[i]` waits for a later pass of a designed run. A designed run goes
    /// through [`order`] in passes, one sample per length per visit, so a length's samples
    /// are spread over the run instead of taken back to back: a drift of the server's speed
    /// then shows as spread (it widens the noise model, or fails a length's check against
    /// it) instead of hiding between runs. Measured on the reference llama-server: 16k's
    /// TTFT moved between 5.5 and 6.7 s within minutes while 1k's held to ±0.5%, and 8k's
    /// was 1380–1505 ms in one run and 1535–1543 ms in the next, each run's samples tight.
    /// Two rules order the waits:
    /// - a length that may be predicted waits for the cheap lengths, and, while the
    ///   prediction is within reach, for the longest's check sample (so that it is
    ///   predicted from a checked longest length, or else measured);
    /// - the longest's check sample waits for every other length to be done, about to be
    ///   predicted, or a length between already being measured (with which it then
    ///   alternates), so that its two samples span the run.
    pub fn waits(&self, points: &[PointState], i: usize) -> bool {
        let contexts: Vec<u64> = points.iter().map(|p| p.context).collect();
        let Some(top) = (0..points.len()).max_by_key(|&k| (contexts[k], std::cmp::Reverse(k)))
        else {
            return false;
        };
        // Within reach: predicted if the longest's check sample agrees with its first.
        let checked: Vec<PointState> = match points[top].reps {
            1 => {
                let mut c = points.to_vec();
                let t = &mut c[top];
                t.reps = FLOOR;
                t.ttft_ms = t.ttft_ms.repeat(2);
                t.decode = t.decode.repeat(2);
                c
            }
            _ => Vec::new(),
        };
        let assumed = if checked.is_empty() { points } else { &checked };
        let tentative = |k: usize| {
            may_predict(&contexts, k)
                && points[k].reps == 0
                && self.prediction(assumed, k).is_some()
        };
        if may_predict(&contexts, i) && points[i].reps == 0 {
            let cheap_open = (0..points.len())
                .any(|k| k != top && !may_predict(&contexts, k) && !points[k].settled);
            return cheap_open || (points[top].reps < FLOOR && tentative(i));
        }
        // A length between that has started measuring (so is not predicted) no longer holds
        // the check back: the two alternate in the passes instead of each taking its samples
        // in one block (issue 47: a block of six 4k samples within 12 s sat in one stretch
        // of a loaded host, 1917–2322 ms, and the fixed run a minute later saw 1606–1761).
        let started = |k: usize| may_predict(&contexts, k) && points[k].reps > 0;
        i == top
            && (1..FLOOR).contains(&points[i].reps)
            && (0..points.len())
                .any(|k| k != i && !points[k].settled && !tentative(k) && !started(k))
    }

    /// What the design makes of `points[i]` now (`stats::precision::judge`).
    pub fn judge(&self, points: &[PointState], i: usize) -> Judgement {
        let lengths: Vec<Length<'_>> = points
            .iter()
            .map(|p| Length {
                context: p.context,
                ttft: &p.ttft_ms,
                decode: &p.decode,
            })
            .collect();
        precision::judge(&lengths, i, self.target, FLOOR, self.max_reps)
    }

    /// Predicted seconds the lengths longer than `points[i]` still need under a model of
    /// spreads `sd` known to `df` degrees of freedom; `None` when a cost is unknown.
    fn longer_cost(&self, points: &[PointState], i: usize, sd: (f64, f64), df: f64) -> Option<f64> {
        let need = |s: f64| noise::reps_needed(self.target, s, df, FLOOR, self.max_reps);
        let none = self.out_of_reach_reps();
        let n = need(sd.0).unwrap_or(none).max(need(sd.1).unwrap_or(none));
        points
            .iter()
            .filter(|q| q.context > points[i].context)
            .map(|q| Some(q.cost_s? * f64::from(n.saturating_sub(q.reps))))
            .sum()
    }

    /// Whether another sample at `points[i]` (a length judged on the shared model) saves
    /// more predicted server time at the longer lengths than it costs: up to [`HORIZON`]
    /// samples ahead, k more samples add about 0.86·k degrees of freedom to the model.
    pub fn noise_pays(&self, points: &[PointState], i: usize, j: &Judgement) -> bool {
        let (Some(t), Some(d), Some(cost)) = (j.model.0, j.model.1, points[i].cost_s) else {
            return false;
        };
        if j.basis != IntervalBasis::Shared {
            return false;
        }
        let df = t.df.min(d.df);
        let Some(now) = self.longer_cost(points, i, (t.sd, d.sd), df) else {
            return false;
        };
        (1..=HORIZON).any(|k| {
            let more = df + noise::SHAMOS_EFFICIENCY * f64::from(k);
            self.longer_cost(points, i, (t.sd, d.sd), more)
                .is_some_and(|later| now - later > cost * f64::from(k))
        })
    }

    /// Whether another sample at `points[i]` (a length already precise) is taken for the
    /// fits' extrapolation to the server's maximum: `points[i]` is the longest length (a fit
    /// read beyond the measured range leans on it the most), the wider of the TTFT and
    /// ms/step bands ([`extrapolation_band`]) is over the target, one more sample there (at
    /// its median, the band recomputed) narrows it, and the band can reach the target within
    /// `--max-reps` (a band shrinks about as 1/√n with the samples that carry it: n·(band /
    /// target)² ≤ the cap, so a band these samples do not narrow stops them within a few).
    /// Otherwise the report states the band as it is, "over ±P".
    pub fn extrapolation_pays(&self, points: &[PointState], i: usize) -> bool {
        let Some(at) = self.extrapolate_to else {
            return false;
        };
        let longest = points.iter().map(|p| p.context).max();
        if Some(points[i].context) != longest || points[i].reps < FLOOR {
            return false;
        }
        let Some(now) = extrapolation_band(points, at, None) else {
            return false;
        };
        let n = f64::from(points[i].reps);
        now > self.target
            && n * (now / self.target).powi(2) <= f64::from(self.max_reps)
            && extrapolation_band(points, at, Some(i)).is_some_and(|after| after < now)
    }

    /// Samples a length takes when the target is out of reach: [`OUT_OF_REACH_REPS`], within
    /// the floor and `--max-reps`.
    pub fn out_of_reach_reps(&self) -> u32 {
        OUT_OF_REACH_REPS.min(self.max_reps).max(FLOOR)
    }

    /// Whether the target is out of reach at a length judged `j` (after its check sample):
    /// not reached, and either the noise model says `--max-reps` samples cannot reach it
    /// ([`Judgement::out_of_reach`]) or the interval this length reached does not narrow
    /// toward it ([`Design::projected_at_cap`]).
    pub fn out_of_reach(&self, p: &PointState, j: &Judgement) -> bool {
        p.reps >= FLOOR
            && !j.precise(self.target)
            && (j.out_of_reach(self.target, self.max_reps)
                || self.projected_at_cap(p, j).is_some_and(|w| w > self.target))
    }

    /// From [`CONVERGENCE_LOOK`] usable samples on, what `--max-reps` samples would give
    /// this length if they came as its samples so far did: the median's order-statistic
    /// interval at the cap's ranks read off these samples' own distribution
    /// (`precision::order_statistic_half_width_at`), the drift kept in quadrature; the
    /// wider of TTFT and decode. The noise model judges with the pooled spread, which a
    /// length whose samples fall in two clusters does not follow: on the loaded host a
    /// K = 0 campaign variant at 128 tokens took all 30 samples for ±11.9% against a ±7.1%
    /// target the model called reachable. `None` before the look, or at the cap.
    pub fn projected_at_cap(&self, p: &PointState, j: &Judgement) -> Option<f64> {
        let n = p.ttft_ms.len().min(p.decode.len());
        if n < CONVERGENCE_LOOK as usize || p.reps >= self.max_reps {
            return None;
        }
        let cap = self.max_reps as usize;
        let at_cap = |v: &[f64], term: f64| {
            precision::order_statistic_half_width_at(v, cap).map(|w| drift::widen(w, term))
        };
        let (t, d) = (at_cap(&p.ttft_ms, j.drift.0), at_cap(&p.decode, j.drift.1));
        t.into_iter().chain(d).reduce(f64::max)
    }

    /// Whether to take another sample at `points[i]`, with the judgement behind it.
    /// `run_elapsed_s` is the run's time so far.
    ///
    /// **Futility**: where the target is out of reach ([`Design::out_of_reach`]) the length
    /// takes no more than [`Design::out_of_reach_reps`] samples and stops
    /// ([`StopReason::OutOfReach`]), its `point` line stating what they reached and the best
    /// `--max-reps` would allow (on a host at σ ≈ 110% the design used to take `--max-reps`
    /// at every length, more than a fixed sweep, for ±57–69%).
    pub fn next(&self, points: &[PointState], i: usize, run_elapsed_s: f64) -> (Next, Judgement) {
        if let Some(q) = self.quantile {
            return self.next_quantile(points, i, run_elapsed_s, q);
        }
        let j = self.judge(points, i);
        let p = &points[i];
        if p.reps == 0 {
            if self.prediction(points, i).is_some() {
                return (Next::Stop(StopReason::Predicted), j);
            }
            return (Next::Measure(Why::First), j);
        }
        let precise = j.precise(self.target);
        if self.out_of_reach(p, &j) && p.reps >= self.out_of_reach_reps() {
            return (Next::Stop(StopReason::OutOfReach), j);
        }
        let why = if p.reps < FLOOR {
            Why::Check
        } else if !precise {
            Why::Precision
        } else if self.noise_pays(points, i, &j) {
            Why::NoiseModel
        } else if self.extrapolation_pays(points, i) {
            Why::Extrapolation
        } else {
            return (Next::Stop(StopReason::PrecisionReached), j);
        };
        if let Some(stop) = self.limit(points, i, run_elapsed_s) {
            // Extra samples for the model are optional: a precise length stopped by a
            // limit has reached its precision.
            let reason = match why {
                Why::NoiseModel | Why::Extrapolation => StopReason::PrecisionReached,
                _ => stop,
            };
            return (Next::Stop(reason), j);
        }
        (Next::Measure(why), j)
    }

    /// [`Design::next`] for a percentile target (`--precision-of pNN`): the design keeps its
    /// order, its passes (each length's samples spread over the run), its budgets and its
    /// futility look, but judges each length on its own order statistics — the p90's
    /// interval exists only from `quantile_target::min_n` samples (29), which is its floor,
    /// and the shared noise model, the cheap-length trade and the predicted lengths are of
    /// medians, so none of them applies: every length is measured. Stops when the TTFT's and
    /// the step time's percentile are both within ±P; out of reach when, from the floor on,
    /// `--max-reps` samples coming as these did would not get there
    /// ([`Design::quantile_at_cap`]).
    pub fn next_quantile(
        &self,
        points: &[PointState],
        i: usize,
        run_elapsed_s: f64,
        q: f64,
    ) -> (Next, Judgement) {
        let j = self.judge(points, i);
        let p = &points[i];
        if p.reps == 0 {
            return (Next::Measure(Why::First), j);
        }
        if quantile_target::precise(&p.ttft_ms, &p.step_ms, q, self.target) {
            return (Next::Stop(StopReason::PrecisionReached), j);
        }
        if self.quantile_at_cap(p, q).is_some_and(|w| w > self.target) {
            return (Next::Stop(StopReason::OutOfReach), j);
        }
        if let Some(stop) = self.limit(points, i, run_elapsed_s) {
            return (Next::Stop(stop), j);
        }
        let why = match p.reps < FLOOR {
            true => Why::Check,
            false => Why::Precision,
        };
        (Next::Measure(why), j)
    }

    /// What `--max-reps` samples would give the percentile `q` at this length if they came
    /// as its samples so far did (`quantile_target::half_width_at`), the wider of TTFT and
    /// step time; `None` below the percentile's floor or at the cap.
    pub fn quantile_at_cap(&self, p: &PointState, q: f64) -> Option<f64> {
        if p.reps >= self.max_reps {
            return None;
        }
        let cap = self.max_reps as usize;
        let t = quantile_target::half_width_at(&p.ttft_ms, q, cap)?;
        let s = quantile_target::half_width_at(&p.step_ms, q, cap)?;
        Some(t.max(s))
    }

    /// The `point` line's words for a length of a percentile-targeted design.
    fn quantile_why(&self, p: &PointState, q: f64, stop: StopReason) -> (String, Option<f64>) {
        let name = quantile_target::name(q);
        let need = quantile_target::min_n(q);
        let widths = format!(
            "{name} TTFT {}, step time {} from {} usable sample(s) (order statistics; a {name} interval needs {need})",
            pct(quantile_target::half_width(&p.ttft_ms, q)),
            pct(quantile_target::half_width(&p.step_ms, q)),
            p.ttft_ms.len().min(p.step_ms.len()),
        );
        let target = pct(Some(self.target));
        let host = (stop == StopReason::OutOfReach)
            .then(|| self.quantile_at_cap(p, q))
            .flatten();
        let why = match stop {
            StopReason::PrecisionReached => format!("{widths}, within {target}"),
            StopReason::OutOfReach => format!(
                "{target} on the {name} is out of reach on this host: within --max-reps {} these samples' own distribution allows at best {} here, so this length stops at {} samples and states what they reached: {widths}; ask for --precision {} or wider",
                self.max_reps,
                pct(host),
                p.reps,
                host.map_or("n/a".to_owned(), |h| format!("{:.2}", (h * 100.0).ceil() / 100.0)),
            ),
            other => format!("{other}: {widths}; the target {target} is not reached"),
        };
        (why, host)
    }

    /// The cap or budget that forbids another sample at `points[i]`, if one does. The run
    /// budget keeps one sample's predicted cost in reserve for every longer length not yet
    /// measured.
    fn limit(&self, points: &[PointState], i: usize, run_elapsed_s: f64) -> Option<StopReason> {
        let p = &points[i];
        if p.reps >= self.max_reps {
            return Some(StopReason::MaxReps);
        }
        let cost = p.cost_s.unwrap_or(0.0);
        if let Some(b) = self.run_budget_s {
            // Any length not yet measured, shorter ones included: the lengths between wait
            // for the longest's check sample (`visits`).
            let reserve: f64 = points
                .iter()
                .filter(|q| q.context != p.context && q.reps == 0 && !q.settled)
                .map(|q| q.cost_s.unwrap_or(0.0))
                .sum();
            if run_elapsed_s + cost + reserve > b {
                return Some(StopReason::RunBudget);
            }
        }
        match self.point_budget_s {
            Some(b) if p.reps >= FLOOR && p.beyond_floor_s + cost > b => {
                Some(StopReason::PointBudget)
            }
            _ => None,
        }
    }

    /// Predicted seconds left for `points[i]` and every longer length, under the model as it
    /// stands; `None` while a cost is unknown.
    pub fn remaining_s(&self, points: &[PointState], i: usize) -> Option<f64> {
        let p = &points[i];
        if let Some(q) = self.quantile {
            // Each length still to reach the percentile's floor, at its cost a sample.
            let need = u32::try_from(quantile_target::min_n(q)).unwrap_or(u32::MAX);
            return points
                .iter()
                .filter(|x| x.context >= p.context && !x.settled)
                .map(|x| Some(x.cost_s? * f64::from(need.saturating_sub(x.reps))))
                .sum();
        }
        let j = self.judge(points, i);
        let here = j
            .needed
            .unwrap_or(self.out_of_reach_reps())
            .saturating_sub(p.reps)
            .max(u32::from(p.reps == 0));
        let (t, d) = (j.model.0?, j.model.1?);
        let later = self.longer_cost(points, i, (t.sd, d.sd), t.df.min(d.df))?;
        Some(p.cost_s? * f64::from(here) + later)
    }

    /// The `point` line's record of the decision that ended `points[i]`.
    pub fn record(
        &self,
        points: &[PointState],
        i: usize,
        j: &Judgement,
        stop: StopReason,
    ) -> PointDesign {
        let p = &points[i];
        if stop == StopReason::Predicted {
            if let Some(pr) = self.prediction(points, i) {
                return self.record_predicted(p, pr);
            }
        }
        if let Some(q) = self.quantile {
            let (why, host) = self.quantile_why(p, q, stop);
            return PointDesign {
                target: self.target,
                planned: Some(u32::try_from(quantile_target::min_n(q)).unwrap_or(u32::MAX)),
                ttft_half_width: j.ttft_half_width,
                decode_half_width: j.decode_half_width,
                basis: IntervalBasis::Own,
                model_ttft_sd: None,
                model_decode_sd: None,
                model_df: None,
                regime_change: None,
                why,
                server_s: p.spent_s,
                predicted: None,
                host_precision: host,
                revised: None,
            };
        }
        let widths = format!(
            "TTFT {}, decode {} from {} usable sample(s)",
            pct(j.ttft_half_width),
            pct(j.decode_half_width),
            p.ttft_ms.len().min(p.decode.len())
        );
        let basis = match j.basis {
            IntervalBasis::Own => "this length's own spread".to_owned(),
            _ => match j.model {
                (Some(t), Some(d)) => format!(
                    "the shared noise model (σ TTFT {:.1}%, decode {:.1}%, {:.0} df)",
                    t.sd * 100.0,
                    d.sd * 100.0,
                    t.df.min(d.df)
                ),
                _ => "no noise model yet".to_owned(),
            },
        };
        let target = pct(Some(self.target));
        let projected = self.projected_at_cap(p, j);
        let host = (stop == StopReason::OutOfReach)
            .then(|| match (j.reach(self.max_reps), projected) {
                (Some(m), Some(o)) => Some(m.max(o)),
                (m, o) => m.or(o),
            })
            .flatten();
        // Which look found the target out of reach, in the point line's words.
        let (allows, stops) = match projected {
            Some(o) if o > self.target && p.reps > self.out_of_reach_reps() => (
                "this length's own samples (their distribution at the cap's order statistics) allow",
                format!(
                    "so this length stops at {} samples (its interval did not narrow as the noise model expected)",
                    p.reps
                ),
            ),
            _ => (
                "the noise model allows",
                format!(
                    "so this length stops at {} samples (no more than a --reps {} sweep takes, once that is known)",
                    p.reps,
                    self.out_of_reach_reps()
                ),
            ),
        };
        let why = match (stop, j.precise(self.target)) {
            (StopReason::PrecisionReached, _) => format!("{widths}, within {target} by {basis}"),
            (StopReason::OutOfReach, _) => format!(
                "{target} is out of reach on this host: within --max-reps {} {allows} at best {} here, {stops} and states what they reached: {widths} by {basis}; ask for --precision {} or wider to have the design plan for this host",
                self.max_reps,
                pct(host),
                host.map_or("n/a".to_owned(), |h| format!("{:.2}", (h * 100.0).ceil() / 100.0)),
            ),
            (other, true) => format!(
                "{other}: {widths}, within {target} by {basis}, but its spread is unchecked (one sample)"
            ),
            (other, false) => {
                format!("{other}: {widths} by {basis}; the target {target} is not reached")
            }
        };
        let mut why = why + &self.extrapolation_note(points, i, j);
        if let Some(d) = j.drift_text() {
            why = format!("{why}; {d}");
        }
        PointDesign {
            target: self.target,
            planned: j.planned,
            ttft_half_width: j.ttft_half_width,
            decode_half_width: j.decode_half_width,
            basis: j.basis.clone(),
            model_ttft_sd: j.model.0.map(|m| m.sd),
            model_decode_sd: j.model.1.map(|m| m.sd),
            model_df: j.model.0.zip(j.model.1).map(|(t, d)| t.df.min(d.df)),
            regime_change: j.regime.clone(),
            why,
            server_s: p.spent_s,
            predicted: None,
            host_precision: host,
            revised: None,
        }
    }

    /// What the longest length's samples beyond its own need did for the extrapolation to
    /// the server's maximum (empty for any other length, or when there were none).
    fn extrapolation_note(&self, points: &[PointState], i: usize, j: &Judgement) -> String {
        let (Some(at), Some(needed)) = (self.extrapolate_to, j.needed) else {
            return String::new();
        };
        let longest = points.iter().map(|p| p.context).max();
        let extra = points[i].reps.saturating_sub(needed.max(FLOOR));
        match extrapolation_band(points, at, None) {
            Some(band) if extra > 0 && Some(points[i].context) == longest => format!(
                "; {extra} more sample(s) for the fits' extrapolation to {at} tokens, whose 90% band is now {}",
                pct(Some(band))
            ),
            _ => String::new(),
        }
    }

    /// The `point` line's record of a length predicted instead of measured.
    fn record_predicted(&self, p: &PointState, pr: Prediction) -> PointDesign {
        let list = |v: &[u64]| {
            v.iter()
                .map(|&c| match c % 1024 {
                    0 => format!("{}k", c / 1024),
                    _ => c.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let why = format!(
            "predicted from the fits of {} (not measured): TTFT {} (model error {}), decode {} (model error {}), within {}; the model error is the fits' worst leave-one-out miss at {}",
            list(&pr.from_contexts),
            pct(Some(pr.ttft_half_width)),
            pct(Some(pr.ttft_model_error)),
            pct(Some(pr.decode_half_width)),
            pct(Some(pr.decode_model_error)),
            pct(Some(self.target)),
            list(&pr.checked_at)
        );
        PointDesign {
            target: self.target,
            planned: Some(0),
            ttft_half_width: Some(pr.ttft_half_width),
            decode_half_width: Some(pr.decode_half_width),
            basis: IntervalBasis::Fit,
            model_ttft_sd: None,
            model_decode_sd: None,
            model_df: None,
            regime_change: None,
            why,
            server_s: p.spent_s,
            predicted: Some(Box::new(pr)),
            host_precision: None,
            revised: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic "normal" noise: z-scores spread evenly over the distribution.
    const Z: [f64; 8] = [0.0, 0.67, -0.67, 1.15, -1.15, 0.32, -0.32, 1.53];

    /// A length with `n` samples of relative spread `sd` (TTFT and decode alike) and a
    /// predicted cost per sample.
    fn pt(context: u64, n: usize, sd: f64, cost_s: f64) -> PointState {
        let v = |centre: f64| (0..n).map(|i| centre * (sd * Z[i % 8]).exp()).collect();
        PointState {
            context,
            reps: n as u32,
            ttft_ms: v(context as f64 / 10.0),
            decode: v(100.0),
            cost_s: Some(cost_s),
            ..Default::default()
        }
    }

    fn design() -> Design {
        Design {
            target: 0.05,
            max_reps: 30,
            point_budget_s: None,
            run_budget_s: None,
            extrapolate_to: None,
            quantile: None,
        }
    }

    #[test]
    fn a_campaigns_variants_are_designed_for_the_comparisons_precision() {
        let each = variant_precision(0.05, 2);
        assert!((each - 0.05 / 2f64.sqrt()).abs() < 1e-12);
        // Two medians each within ±p/√2 (log scale): their ratio within ±p.
        let ratio = ((1.0 + each).ln().hypot((1.0 + each).ln())).exp_m1();
        assert!((ratio - 0.05).abs() < 0.002, "{ratio}");
        assert_eq!(variant_precision(0.05, 1), 0.05);
        assert_eq!(variant_precision(0.05, 5), each);
    }

    #[test]
    fn the_order_measures_the_cheap_lengths_then_the_longest_then_the_ones_between() {
        let c = [1024, 2048, 4096, 8192, 16384, 32768];
        let o: Vec<u64> = order(&c).into_iter().map(|i| c[i]).collect();
        assert_eq!(o, [1024, 2048, 4096, 8192, 32768, 16384]);
        // Unsorted input: the same lengths, the same order.
        let c = [16384, 1024, 4096];
        let o: Vec<u64> = order(&c).into_iter().map(|i| c[i]).collect();
        assert_eq!(o, [1024, 4096, 16384]);
        let c = [2048, 1024, 8192, 4096];
        let o: Vec<u64> = order(&c).into_iter().map(|i| c[i]).collect();
        assert_eq!(o, [1024, 2048, 8192, 4096]);
        assert!(order(&[]).is_empty());
    }

    #[test]
    fn the_longests_check_sample_waits_for_the_rest_and_the_lengths_between_for_the_cheap() {
        let d = design();
        let settle = |mut p: PointState| {
            p.settled = true;
            p
        };
        // 1k still open: 16k (between) waits for it; 32k's check sample waits too.
        let pts = vec![
            pt(1024, 2, 0.02, 0.1),
            pt(4096, 2, 0.02, 0.5),
            pt(16384, 0, 0.02, 10.0),
            pt(32768, 1, 0.02, 40.0),
        ];
        assert!(d.waits(&pts, 2));
        assert!(d.waits(&pts, 3));
        assert!(!d.waits(&pts, 0) && !d.waits(&pts, 1));
        // The cheap lengths done: 16k cannot be predicted (two measured lengths are not a
        // quadratic), so it is measured now, and 32k's check waits for it.
        let mut done = pts.clone();
        done[0] = settle(done[0].clone());
        done[1] = settle(done[1].clone());
        assert!(!d.waits(&done, 2));
        assert!(d.waits(&done, 3));
        // 16k done too: nothing is left to wait for.
        done[2] = settle(pt(16384, 2, 0.02, 10.0));
        assert!(!d.waits(&done, 3));
        // A longest length already checked never waits.
        let mut two = pts.clone();
        two[3] = pt(32768, 2, 0.02, 40.0);
        assert!(!d.waits(&two, 3));
        // Within reach of a prediction (four quiet measured lengths around it), 16k waits for
        // the longest's check instead, and the check does not wait for it.
        let ladder = vec![
            settle(pt(1024, 12, 0.01, 0.1)),
            settle(pt(2048, 8, 0.01, 0.2)),
            settle(pt(4096, 6, 0.01, 0.5)),
            settle(pt(8192, 4, 0.01, 2.0)),
            pt(16384, 0, 0.01, 8.0),
            pt(32768, 1, 0.01, 32.0),
        ];
        assert!(d.waits(&ladder, 4), "16k should wait for a checked 32k");
        assert!(!d.waits(&ladder, 5));
    }

    #[test]
    fn the_longest_takes_samples_for_an_extrapolation_over_the_target_while_they_narrow_it() {
        let ladder = |n_top: usize| {
            vec![
                pt(1024, 6, 0.03, 0.1),
                pt(2048, 4, 0.03, 0.2),
                pt(4096, 3, 0.03, 0.5),
                pt(8192, 3, 0.03, 2.0),
                pt(16384, n_top, 0.03, 8.0),
            ]
        };
        let far = Design {
            extrapolate_to: Some(65536),
            max_reps: 30,
            ..design()
        };
        let pts = ladder(2);
        let band = extrapolation_band(&pts, 65536, None).unwrap();
        assert!(band > 0.05, "{band}");
        // One more sample at the longest narrows it.
        assert!(extrapolation_band(&pts, 65536, Some(4)).unwrap() < band);
        assert!(far.extrapolation_pays(&pts, 4));
        assert_eq!(far.next(&pts, 4, 0.0).0, Next::Measure(Why::Extrapolation));
        // Only the longest carries it; without a maximum beyond it, nothing is taken.
        assert!(!far.extrapolation_pays(&pts, 3));
        assert!(!design().extrapolation_pays(&pts, 4));
        let inside = Design {
            extrapolate_to: Some(16384),
            ..far
        };
        assert!(!inside.extrapolation_pays(&pts, 4));
        // A cap the band cannot reach within: the band is stated as it is instead.
        let capped = Design { max_reps: 4, ..far };
        assert!(!capped.extrapolation_pays(&pts, 4), "{band}");
        assert_eq!(
            capped.next(&pts, 4, 0.0).0,
            Next::Stop(StopReason::PrecisionReached)
        );
        // 30 samples at the longest do not bring a 4× extrapolation within ±5% when the
        // curvature is known to the cheap lengths' few samples: by then it has stopped.
        let many = ladder(30);
        let band = extrapolation_band(&many, 65536, None).unwrap();
        assert!(band > 0.05, "{band}");
        assert!(!far.extrapolation_pays(&many, 4));
        // Every length well measured on a quieter server: within the target, nothing more.
        let known: Vec<PointState> = ladder(30)
            .into_iter()
            .map(|p| pt(p.context, 30, 0.01, p.cost_s.unwrap()))
            .collect();
        let band = extrapolation_band(&known, 65536, None).unwrap();
        assert!(band <= 0.05, "{band}");
        assert!(!far.extrapolation_pays(&known, 4));
    }

    #[test]
    fn every_length_gets_its_first_sample_whatever_the_budget() {
        let d = Design {
            run_budget_s: Some(0.0),
            ..design()
        };
        let pts = [pt(1024, 8, 0.02, 0.1), pt(65536, 0, 0.02, 100.0)];
        assert_eq!(d.next(&pts, 1, 1e9).0, Next::Measure(Why::First));
    }

    #[test]
    fn a_length_with_the_models_noise_stops_after_its_check_sample() {
        let mut pts = vec![
            pt(1024, 12, 0.02, 0.1),
            pt(2048, 10, 0.02, 0.3),
            pt(65536, 1, 0.02, 60.0),
        ];
        let (next, j) = design().next(&pts, 2, 0.0);
        assert_eq!(next, Next::Measure(Why::Check));
        assert_eq!(j.planned, Some(2), "{j:?}");
        pts[2] = pt(65536, 2, 0.02, 60.0);
        let (next, j) = design().next(&pts, 2, 0.0);
        assert_eq!(next, Next::Stop(StopReason::PrecisionReached), "{j:?}");
        assert_eq!(j.basis, IntervalBasis::Shared);
        assert!(j.ttft_half_width.unwrap() <= 0.05 && j.regime.is_none());
        let rec = design().record(&pts, 2, &j, StopReason::PrecisionReached);
        assert!(
            rec.why.contains("within ±5.0% by the shared noise model"),
            "{}",
            rec.why
        );
    }

    #[test]
    fn a_length_noisier_than_the_model_is_judged_on_its_own_and_says_why() {
        let pts = vec![
            pt(1024, 12, 0.02, 0.1),
            pt(2048, 10, 0.02, 0.3),
            pt(65536, 3, 0.2, 60.0),
        ];
        let (next, j) = design().next(&pts, 2, 0.0);
        assert_eq!(next, Next::Measure(Why::Precision), "{j:?}");
        assert_eq!(j.basis, IntervalBasis::Own);
        let why = j.regime.as_deref().unwrap();
        assert!(
            why.contains("TTFT spread") && why.contains("judged on its own"),
            "{why}"
        );
        // It needs far more samples than the model planned.
        assert!(j.needed.is_none_or(|n| n > 2 * j.planned.unwrap()), "{j:?}");
        // And a noisy length does not join the model the longer lengths are judged with.
        let mut more = pts.clone();
        more.push(pt(131072, 2, 0.02, 200.0));
        let j = design().judge(&more, 3);
        assert_eq!(j.basis, IntervalBasis::Shared);
        assert!(j.model.0.unwrap().sd < 0.05, "{j:?}");
    }

    #[test]
    fn cheap_samples_are_taken_while_they_save_more_at_the_expensive_lengths() {
        // 3% noise known to a few df: each extra 1k sample (0.1 s) lowers the samples a
        // 100 s length needs.
        let pts = vec![pt(1024, 6, 0.03, 0.1), pt(131072, 0, 0.03, 100.0)];
        let (next, j) = design().next(&pts, 0, 0.0);
        assert!(j.precise(0.05), "{j:?}");
        assert_eq!(next, Next::Measure(Why::NoiseModel));
        // When the longer length is cheaper still, they do not pay.
        let cheap = vec![pt(1024, 6, 0.03, 0.1), pt(2048, 0, 0.03, 0.05)];
        let (next, j) = design().next(&cheap, 0, 0.0);
        assert!(j.precise(0.05), "{j:?}");
        assert_eq!(next, Next::Stop(StopReason::PrecisionReached));
    }

    #[test]
    fn the_run_budget_keeps_a_sample_for_every_unmeasured_length_and_states_the_precision() {
        let d = Design {
            run_budget_s: Some(100.0),
            ..design()
        };
        // 90 s spent, 1k imprecise: its next sample (1 s) would eat the 64k length's reserve.
        let pts = vec![pt(1024, 2, 0.3, 1.0), pt(65536, 0, 0.02, 10.0)];
        let (next, j) = d.next(&pts, 0, 90.0);
        assert_eq!(next, Next::Stop(StopReason::RunBudget));
        let rec = d.record(&pts, 0, &j, StopReason::RunBudget);
        assert!(rec.ttft_half_width.unwrap() > 0.05, "{rec:?}");
        assert!(rec.why.contains("not reached"), "{}", rec.why);
        // Without the longer length's reserve it would have gone on.
        assert_eq!(d.next(&pts[..1], 0, 90.0).0, Next::Measure(Why::Precision));
    }

    #[test]
    fn caps_stop_a_length_that_cannot_reach_the_target() {
        let d = Design {
            max_reps: 3,
            point_budget_s: Some(5.0),
            ..design()
        };
        // 5% noise: the target is within reach of 3 samples with the spread known, but not
        // reached by these 3.
        let near = vec![pt(1024, 3, 0.05, 1.0)];
        assert_eq!(d.next(&near, 0, 0.0).0, Next::Stop(StopReason::MaxReps));
        // 50%: out of reach within 3, so it is said to be (the futility stop).
        let noisy = vec![pt(1024, 3, 0.5, 1.0)];
        assert_eq!(d.next(&noisy, 0, 0.0).0, Next::Stop(StopReason::OutOfReach));
        let d = Design {
            point_budget_s: Some(5.0),
            ..design()
        };
        let mut p = pt(1024, 3, 0.5, 1.0);
        p.beyond_floor_s = 4.5;
        assert_eq!(d.next(&[p], 0, 0.0).0, Next::Stop(StopReason::PointBudget));
    }

    #[test]
    fn a_target_out_of_reach_stops_at_a_fixed_sweeps_samples_instead_of_the_cap() {
        // σ ≈ 110% (a host loaded to 1k TTFT 32–1342 ms): ±5% is out of reach within 30.
        let d = design();
        let two = vec![pt(1024, 2, 1.1, 0.1), pt(8192, 0, 1.1, 2.0)];
        let (next, j) = d.next(&two, 0, 0.0);
        assert!(j.out_of_reach(0.05, 30), "{j:?}");
        // Not yet at a --reps 6 sweep's samples: it goes on, for its stated precision.
        assert_eq!(next, Next::Measure(Why::Precision));
        let six = vec![pt(1024, 6, 1.1, 0.1), pt(8192, 0, 1.1, 2.0)];
        let (next, j) = d.next(&six, 0, 0.0);
        assert_eq!(next, Next::Stop(StopReason::OutOfReach), "{j:?}");
        let rec = d.record(&six, 0, &j, StopReason::OutOfReach);
        let host = rec.host_precision.expect("the precision this host allows");
        assert!(host > 0.3 && host < rec.ttft_half_width.unwrap(), "{rec:?}");
        assert!(
            rec.why.contains("out of reach") && rec.why.contains("--precision"),
            "{}",
            rec.why
        );
        // The longer length, on the shared model, stops there too.
        let long = vec![pt(1024, 6, 1.1, 0.1), pt(8192, 6, 1.1, 2.0)];
        assert_eq!(d.next(&long, 1, 0.0).0, Next::Stop(StopReason::OutOfReach));
        // A quiet host whose first pair happened to differ by 3σ is not given up on.
        let mut lucky = pt(1024, 2, 0.03, 0.1);
        lucky.ttft_ms = vec![100.0, 100.0 * (0.03f64 * 3.0 * 2f64.sqrt()).exp()];
        let j = d.judge(&[lucky.clone()], 0);
        assert!(!j.out_of_reach(0.05, 30), "{j:?}");
    }

    #[test]
    fn a_length_whose_interval_does_not_narrow_stops_at_the_look_not_the_cap() {
        // Two clusters 22% apart (the request got the core or it did not), 5 of 12 in the
        // faster one: the pooled spread says ±10% is reachable within 30 samples, but the
        // median's order-statistic interval spans both clusters and would still do so at 30.
        let d = Design {
            target: 0.1,
            ..design()
        };
        let clusters = |n: usize| -> PointState {
            let mut p = pt(1024, n, 0.02, 0.1);
            p.ttft_ms = (0..n)
                .map(|i| if i % 2 == 0 && i < 10 { 100.0 } else { 122.0 })
                .collect();
            p
        };
        let twelve = vec![clusters(12)];
        let (next, j) = d.next(&twelve, 0, 0.0);
        assert!(
            !j.out_of_reach(0.1, 30),
            "the model alone calls it reachable: {j:?}"
        );
        let projected = d.projected_at_cap(&twelve[0], &j).unwrap();
        assert!(projected > 0.1, "{projected}");
        assert_eq!(next, Next::Stop(StopReason::OutOfReach), "{j:?}");
        let rec = d.record(&twelve, 0, &j, StopReason::OutOfReach);
        assert!(rec.why.contains("did not narrow"), "{}", rec.why);
        assert!(rec.host_precision.unwrap() >= projected, "{rec:?}");
        // Before the look it goes on; a length that narrows as expected is not stopped.
        assert_eq!(
            d.next(&[clusters(11)], 0, 0.0).0,
            Next::Measure(Why::Precision)
        );
        let steady = vec![pt(1024, 12, 0.12, 0.1)];
        let j = d.judge(&steady, 0);
        assert!(d.projected_at_cap(&steady[0], &j).unwrap() <= 0.1, "{j:?}");
    }

    #[test]
    fn a_percentile_design_measures_every_length_to_its_floor_and_stops_on_its_own_order_statistics(
    ) {
        let d = Design {
            target: 0.2,
            max_reps: 87,
            quantile: Some(0.9),
            ..design()
        };
        let with_steps = |mut p: PointState| {
            p.step_ms = p.decode.iter().map(|r| 1000.0 / r).collect();
            p
        };
        // A quiet length: precise only once the p90's interval exists (29 samples).
        let at = |n| vec![with_steps(pt(1024, n, 0.03, 0.1))];
        assert_eq!(d.next(&at(28), 0, 0.0).0, Next::Measure(Why::Precision));
        let (next, j) = d.next(&at(29), 0, 0.0);
        assert_eq!(next, Next::Stop(StopReason::PrecisionReached));
        let rec = d.record(&at(29), 0, &j, StopReason::PrecisionReached);
        assert!(rec.why.starts_with("p90 TTFT"), "{}", rec.why);
        assert!(rec.why.contains("needs 29"), "{}", rec.why);
        // A length between is measured, not predicted (the fits are of medians).
        let three = vec![
            with_steps(pt(1024, 29, 0.03, 0.1)),
            with_steps(pt(4096, 0, 0.03, 0.5)),
            with_steps(pt(8192, 29, 0.03, 1.0)),
        ];
        assert_eq!(d.next(&three, 1, 0.0).0, Next::Measure(Why::First));
        // A tail in two clusters (one in ten samples twice as slow, the p90 at their border):
        // the p90's interval straddles both at any n, so the cap would not reach ±20%.
        let mut slow = with_steps(pt(1024, 29, 0.03, 0.1));
        for (k, t) in slow.ttft_ms.iter_mut().enumerate() {
            if k % 10 == 0 {
                *t *= 2.0;
            }
        }
        let (next, j) = d.next(&[slow.clone()], 0, 0.0);
        assert_eq!(next, Next::Stop(StopReason::OutOfReach), "{j:?}");
        let rec = d.record(&[slow], 0, &j, StopReason::OutOfReach);
        assert!(rec.why.contains("out of reach"), "{}", rec.why);
        assert!(rec.host_precision.unwrap() > 0.2, "{rec:?}");
    }

    #[test]
    fn the_end_of_the_run_corrects_a_point_line_a_later_look_widened() {
        let d = design();
        // 8k stopped at its check sample under a quiet model of 1k …
        let mut pts = vec![pt(1024, 6, 0.02, 0.1), pt(8192, 2, 0.02, 2.0)];
        let (_, j) = d.next(&pts, 1, 0.0);
        let earlier = d.record(&pts, 1, &j, StopReason::PrecisionReached);
        assert!(d
            .revise(&pts, 1, StopReason::PrecisionReached, &earlier)
            .is_none());
        // … and 1k's later samples show a noisier host (the pool moved): corrected, and the
        // correction says what the run printed.
        pts[0] = pt(1024, 24, 0.06, 0.1);
        let now = d
            .revise(&pts, 1, StopReason::PrecisionReached, &earlier)
            .expect("a wider interval is corrected");
        assert!(now.ttft_half_width > earlier.ttft_half_width, "{now:?}");
        let r = now.revised.as_ref().unwrap();
        assert_eq!(r.ttft_half_width, earlier.ttft_half_width);
        assert!(
            now.why.starts_with("revised at the end of the run: TTFT"),
            "{}",
            now.why
        );
        assert!(now.why.contains("during the run"), "{}", now.why);
    }

    #[test]
    fn the_remaining_time_follows_the_plan() {
        let pts = vec![
            pt(1024, 12, 0.02, 0.1),
            pt(2048, 10, 0.02, 0.3),
            pt(65536, 0, 0.02, 60.0),
        ];
        // 2k is done (its own samples are enough); 64k needs its two.
        let left = design().remaining_s(&pts, 1).unwrap();
        assert!((left - 120.0).abs() < 1e-9, "{left}");
        let mut unknown = pts.clone();
        unknown[2].cost_s = None;
        assert!(design().remaining_s(&unknown, 1).is_none());
    }
}
