//! The designed sweep's account (`--design auto`), from the results file alone: how each
//! figure was obtained (measured, from n samples, with its 95% interval from the noise model
//! shared across lengths or from the length's own spread), where the server time went, and
//! what a fixed `--reps` sweep of the same precision would have needed under the same noise
//! model. Pure: no I/O.

use serde::Serialize;

use crate::stats::fit::{self, Model};
use crate::stats::noise::{self, LogSpread};
use crate::stats::precision::{self, Length, OwnDrift};
use crate::stats::predicted::{self, Measured};
use ctxbench_schema::record::{
    IntervalBasis, Phase, Prediction, Results, Revision, Sample, StopReason,
};

/// How a figure was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Obtained {
    /// Measured at this length: its samples' median.
    Measured,
    /// Predicted from the fits of the measured lengths (no samples here): its interval adds
    /// the fits' model error to the noise (`prediction`).
    Predicted,
}

/// One figure: the median of a length's usable samples and its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// The median.
    pub median: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Relative half-width (upper side), what the precision target is about.
    pub half_width: f64,
    /// Within the run's target.
    pub within_target: bool,
}

impl Figure {
    /// The figure for `median` with relative half-width `w`, against `target`.
    fn new(median: f64, w: f64, target: f64) -> Figure {
        let f = 1.0 + w;
        Figure {
            median,
            low: median / f,
            high: median * f,
            half_width: w,
            within_target: w <= target,
        }
    }
}

/// One length of a designed run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesignPoint {
    /// Context length.
    pub context_tokens: u64,
    /// How its figures were obtained.
    pub obtained: Obtained,
    /// Usable samples behind them.
    pub n: usize,
    /// Cold samples taken (failed and excluded ones included).
    pub samples: usize,
    /// Where the intervals come from.
    pub basis: IntervalBasis,
    /// Median TTFT (ms) with its interval (`null`: no interval).
    pub ttft_ms: Option<Figure>,
    /// Median prefill rate (tok/s): L ÷ TTFT, so TTFT's relative interval.
    pub prefill_tokens_per_s: Option<Figure>,
    /// Median decode rate (tok/s).
    pub decode_tokens_per_s: Option<Figure>,
    /// Server seconds spent at this length (its cold samples).
    pub server_s: f64,
    /// Its share of the run's server time.
    pub share: f64,
    /// The length's spread was not the model's: what the check found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regime_change: Option<String>,
    /// Why the design stopped here, from the `point` line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// A predicted length: the lengths it was predicted from, the model error and where it
    /// was checked (recomputed from the measured lengths of the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
    /// The target was out of reach here within `--max-reps`: the best relative half-width
    /// `--max-reps` samples would reach at this length's spread (the wider metric's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_precision: Option<f64>,
    /// What the run's progress stated for this length before the end of the run corrected
    /// it (its `point` line's `design.revised`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revised: Option<Revision>,
    /// The drift between the earlier and later half of the run's samples that the intervals
    /// carry (`stats::drift`), and this length's own when it shows one; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftNote>,
}

/// A length's drift, as the design account states it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriftNote {
    /// Relative half-width each interval carries for the run's drift (TTFT, decode).
    pub carried: (f64, f64),
    /// This length's own drift from the earlier half of its samples to the later, beyond
    /// their noise (TTFT, decode; relative shift, signed, and the noise's half-width).
    pub own: (Option<OwnDrift>, Option<OwnDrift>),
    /// The same in words.
    pub text: String,
}

/// The designed run's account.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DesignReport {
    /// The precision asked for (relative half-width at 95%).
    pub target: f64,
    /// The noise model over the lengths whose spread agreed: σ of ln TTFT.
    pub model_ttft: Option<LogSpread>,
    /// σ of ln decode rate.
    pub model_decode: Option<LogSpread>,
    /// Per length, shortest first.
    pub points: Vec<DesignPoint>,
    /// Every figure is within the target.
    pub all_within_target: bool,
    /// Server seconds of every cold sample.
    pub server_s: f64,
    /// The fixed sweeps a user would have run instead, `--reps 3` and `--reps 6` of the same
    /// lengths (the predicted ones too): their server time from this run's cost per sample,
    /// and the precision they would state at this run's spreads.
    pub fixed: Vec<FixedSweep>,
    /// Lengths where the target was out of reach within `--max-reps`, shortest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub out_of_reach: Vec<u64>,
    /// The fits extrapolated to the server's maximum context (TTFT, then ms/step), each with
    /// its bootstrap band as a relative half-width against the target; empty when the
    /// maximum is unknown or was measured.
    pub extrapolation: Vec<Extrapolated>,
}

/// A fixed `--reps N` sweep of the same lengths, beside the designed run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FixedSweep {
    /// Its repetitions a length.
    pub reps: u32,
    /// Its server time: N × each length's mean sample time in this run (a predicted length's
    /// from a quadratic fit of the measured lengths' sample times).
    pub server_s: f64,
    /// The designed run's server time ÷ this.
    pub ratio: Option<f64>,
    /// The widest relative half-width it would state, each length on its own N samples at
    /// this run's spread (t with N − 1 degrees of freedom); `null` when a spread is unknown.
    pub widest_half_width: Option<f64>,
}

/// The fixed sweeps the account compares with.
pub const FIXED_REPS: [u32; 2] = [3, 6];

/// One fit's extrapolation to the server's maximum context, as the design account states it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Extrapolated {
    /// `TTFT` or `ms/step`.
    pub metric: &'static str,
    /// The fit's value there, with its 90% bootstrap band.
    pub band: fit::Extrapolation,
    /// The band's wider side, relative to the value.
    pub half_width: f64,
    /// Within the run's target (a band of the samples' noise only: model error beyond the
    /// measured range is not known).
    pub within_target: bool,
}

/// The TTFT and ms/step fits of `samples` extrapolated to `max_context`, against `target`.
fn extrapolations(samples: &[Sample], max_context: Option<u64>, target: f64) -> Vec<Extrapolated> {
    use crate::stats::metric::{self, Metric};
    let mut out = Vec::new();
    for (m, model, name) in [
        (Metric::TtftMs, Model::Quadratic, "TTFT"),
        (Metric::MsPerStep, Model::Linear, "ms/step"),
    ] {
        let obs = metric::observations(samples, m);
        let largest = obs.iter().map(|o| o.0).max().unwrap_or(0);
        let Some(band) = max_context.filter(|&c| c > largest).and_then(|c| {
            fit::extrapolate(
                model,
                &obs,
                c,
                crate::stats::bootstrap::EXTRAPOLATION_RESAMPLES,
                crate::stats::bootstrap::SEED,
            )
        }) else {
            continue;
        };
        let half_width = if band.predicted > 0.0 {
            (band.high / band.predicted - 1.0).max(1.0 - band.low / band.predicted)
        } else {
            f64::INFINITY
        };
        out.push(Extrapolated {
            metric: name,
            band,
            half_width,
            within_target: half_width <= target,
        });
    }
    out
}

/// The usable cold TTFTs and decode rates at each length, shortest first.
fn usable(samples: &[Sample], contexts: &[u64]) -> Vec<(u64, Vec<f64>, Vec<f64>)> {
    contexts
        .iter()
        .map(|&c| {
            let ok: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.context_tokens == c && s.usable())
                .collect();
            let t = ok.iter().filter_map(|s| s.ttft_ms).collect();
            let d = ok.iter().filter_map(|s| s.decode_tokens_per_s).collect();
            (c, t, d)
        })
        .collect()
}

fn median(v: &[f64]) -> Option<f64> {
    crate::stats::Spread::of(v.iter().copied()).map(|s| s.median)
}

/// The account of a designed run (`None` for any other run).
pub fn build(results: &Results) -> Option<DesignReport> {
    let policy = results.header.config.reps;
    policy.design?;
    let target = policy.precision?;
    let cold: Vec<&Sample> = results
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Cold && s.concurrency.unwrap_or(1) == 1)
        .collect();
    let mut contexts: Vec<u64> = cold.iter().map(|s| s.context_tokens).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let owned: Vec<Sample> = cold.iter().map(|s| (*s).clone()).collect();
    let data = usable(&owned, &contexts);
    let lengths: Vec<Length<'_>> = data
        .iter()
        .map(|(c, t, d)| Length {
            context: *c,
            ttft: t,
            decode: d,
        })
        .collect();
    let spent = |c: u64| -> f64 {
        cold.iter()
            .filter(|s| s.context_tokens == c)
            .map(|s| s.server_s())
            .sum()
    };
    let server_s: f64 = contexts.iter().map(|&c| spent(c)).sum();
    let mut points = Vec::new();
    let mut spreads = Vec::new();
    for (i, l) in lengths.iter().enumerate() {
        let j = precision::judge(&lengths, i, target, 1, policy.max_reps);
        spreads.push(length_spread(&j, l));
        let fig = |m: Option<f64>, w: Option<f64>| Some(Figure::new(m?, w?, target));
        let prefill = median(l.ttft).map(|t| l.context as f64 / (t / 1000.0));
        let stop = results.point(l.context).and_then(|p| p.design.as_ref());
        points.push(DesignPoint {
            context_tokens: l.context,
            obtained: Obtained::Measured,
            n: l.ttft.len().min(l.decode.len()),
            samples: cold
                .iter()
                .filter(|s| s.context_tokens == l.context)
                .count(),
            basis: j.basis.clone(),
            ttft_ms: fig(median(l.ttft), j.ttft_half_width),
            prefill_tokens_per_s: fig(prefill, j.ttft_half_width),
            decode_tokens_per_s: fig(median(l.decode), j.decode_half_width),
            server_s: spent(l.context),
            share: if server_s > 0.0 {
                spent(l.context) / server_s
            } else {
                0.0
            },
            regime_change: j.regime.clone(),
            why: stop.map(|d| d.why.clone()),
            prediction: None,
            host_precision: (l.ttft.len() >= 2 && j.out_of_reach(target, policy.max_reps))
                .then(|| j.reach(policy.max_reps))
                .flatten()
                .filter(|h| *h > target),
            revised: stop.and_then(|d| d.revised.as_deref().cloned()),
            drift: j.drift_text().map(|text| DriftNote {
                carried: (j.drift.0.exp_m1(), j.drift.1.exp_m1()),
                own: j.drifted,
                text,
            }),
        });
    }
    let predicted = predicted_points(results, &points, target);
    let (model_ttft, model_decode) = precision::run_model(&lengths);
    let per_sample: Vec<(u64, f64)> = contexts
        .iter()
        .map(|&c| {
            let k = cold.iter().filter(|s| s.context_tokens == c).count().max(1);
            (c, spent(c) / k as f64)
        })
        .collect();
    let fixed = fixed_sweeps(&per_sample, &predicted, &spreads, server_s);
    points.extend(predicted);
    points.sort_by_key(|p| p.context_tokens);
    let out_of_reach = points
        .iter()
        .filter(|p| p.host_precision.is_some())
        .map(|p| p.context_tokens)
        .collect();
    let all_within_target = points.iter().all(|p| {
        [p.ttft_ms, p.decode_tokens_per_s]
            .iter()
            .all(|f| f.is_some_and(|f| f.within_target))
    });
    Some(DesignReport {
        target,
        model_ttft,
        model_decode,
        points,
        all_within_target,
        server_s,
        fixed,
        out_of_reach,
        extrapolation: extrapolations(&owned, results.header.server.max_context, target),
    })
}

/// The fixed `--reps N` sweeps of the same lengths a user would run instead, at this run's
/// cost per sample, with the widest interval each would state.
fn fixed_sweeps(
    per_sample: &[(u64, f64)],
    predicted: &[DesignPoint],
    spreads: &[Option<f64>],
    server_s: f64,
) -> Vec<FixedSweep> {
    // A fixed sweep measures the predicted lengths too: their sample time from a quadratic
    // fit of the measured lengths' (what the cost model would predict).
    let cost_fit = fit::fit(Model::Quadratic, per_sample);
    let predicted_s: f64 = predicted
        .iter()
        .filter_map(|p| {
            cost_fit
                .as_ref()
                .map(|f| f.predict(p.context_tokens as f64))
        })
        .sum();
    let sweep_s = per_sample.iter().map(|x| x.1).sum::<f64>() + predicted_s;
    FIXED_REPS
        .iter()
        .map(|&n| {
            let f = f64::from(n) * sweep_s;
            FixedSweep {
                reps: n,
                server_s: f,
                ratio: (f > 0.0).then(|| server_s / f),
                widest_half_width: spreads
                    .iter()
                    .map(|s| s.map(|sd| noise::half_width(sd, f64::from(n - 1), n as usize)))
                    .collect::<Option<Vec<f64>>>()
                    .and_then(|v| v.into_iter().reduce(f64::max)),
            }
        })
        .collect()
}

/// A designed run's `point` lines as the report states them: each with the interval of
/// the design account (the same judgement, on every sample of the file), so the stop table
/// and the design table never state two intervals for one figure — even for a file whose run
/// ended before it could correct a line (an interrupt), or was written before corrections.
pub fn restate(stops: &mut [ctxbench_schema::record::PointRecord], d: &DesignReport) {
    for s in stops.iter_mut() {
        if let Some(p) = d
            .points
            .iter()
            .find(|p| p.context_tokens == s.context_tokens)
        {
            s.ttft_ci_rel = p.ttft_ms.map(|f| f.half_width);
            s.decode_ci_rel = p.decode_tokens_per_s.map(|f| f.half_width);
        }
    }
}

/// The lengths the run predicted instead of measuring (their `point` lines say
/// `predicted` and they have no cold samples), each predicted again from every measured
/// length of the file (the `point` line's own prediction when that fails).
fn predicted_points(results: &Results, measured: &[DesignPoint], target: f64) -> Vec<DesignPoint> {
    let m: Vec<Measured> = measured
        .iter()
        .filter_map(|p| {
            let (t, d) = (p.ttft_ms?, p.decode_tokens_per_s?);
            Some(Measured {
                context: p.context_tokens,
                ttft_ms: t.median,
                ttft_half_width: t.half_width,
                decode_tokens_per_s: d.median,
                decode_half_width: d.half_width,
            })
        })
        .collect();
    let mut out: Vec<DesignPoint> = Vec::new();
    for line in results.points.iter().rev() {
        let c = line.context_tokens;
        let done = measured
            .iter()
            .chain(out.iter())
            .any(|p| p.context_tokens == c);
        if line.stop_reason != StopReason::Predicted || done {
            continue;
        }
        let recorded = line
            .design
            .as_ref()
            .and_then(|d| d.predicted.as_deref().cloned());
        let Some(pr) = predicted::predict(&m, c).or(recorded) else {
            continue;
        };
        let prefill = c as f64 / (pr.ttft_ms / 1000.0);
        out.push(DesignPoint {
            context_tokens: c,
            obtained: Obtained::Predicted,
            n: 0,
            samples: 0,
            basis: IntervalBasis::Fit,
            ttft_ms: Some(Figure::new(pr.ttft_ms, pr.ttft_half_width, target)),
            prefill_tokens_per_s: Some(Figure::new(prefill, pr.ttft_half_width, target)),
            decode_tokens_per_s: Some(Figure::new(
                pr.decode_tokens_per_s,
                pr.decode_half_width,
                target,
            )),
            server_s: 0.0,
            share: 0.0,
            regime_change: None,
            why: line.design.as_ref().map(|d| d.why.clone()),
            prediction: Some(pr),
            host_precision: None,
            revised: line
                .design
                .as_ref()
                .and_then(|d| d.revised.as_deref().cloned()),
            drift: None,
        });
    }
    out
}

/// The relative spread a length has under the model it was judged with (the larger of
/// TTFT's and decode's): the shared model's, or its own when its spread was not the
/// model's. `None` when nothing is known.
fn length_spread(j: &precision::Judgement, l: &Length<'_>) -> Option<f64> {
    let sd = |m: Option<LogSpread>, v: &[f64]| match j.basis {
        IntervalBasis::Own => noise::own_variance(v).map(|(var, _)| var.sqrt()),
        _ => m.map(|m| m.sd),
    };
    Some(sd(j.model.0, l.ttft)?.max(sd(j.model.1, l.decode)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::{DesignMode, RepPolicy, Status};

    const Z: [f64; 8] = [0.0, 0.67, -0.67, 1.15, -1.15, 0.32, -0.32, 1.53];

    /// `n` samples at `context`, relative spread `sd`, each costing `secs` of request time.
    fn samples(context: u64, n: usize, sd: f64, secs: f64) -> Vec<Sample> {
        (0..n)
            .map(|i| Sample {
                context_tokens: context,
                rep: i as u32,
                phase: Phase::Cold,
                status: Status::Ok,
                ttft_ms: Some(context as f64 / 10.0 * (sd * Z[i % 8]).exp()),
                decode_tokens_per_s: Some(100.0 * (sd * Z[(i + 5) % 8]).exp()),
                e2e_ms: Some(secs * 1000.0),
                ..Sample::default()
            })
            .collect()
    }

    fn designed(samples: Vec<Sample>) -> Results {
        let mut r = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.header.config.reps = RepPolicy {
            precision: Some(0.05),
            min_reps: 2,
            max_reps: 30,
            point_budget_s: None,
            run_budget_s: None,
            design: Some(DesignMode::Auto),
            quantile: None,
        };
        r.samples = samples;
        r.points.clear();
        r
    }

    #[test]
    fn every_figure_says_it_was_measured_with_its_interval_and_the_time_is_accounted() {
        let r = designed([samples(1024, 10, 0.02, 0.1), samples(8192, 2, 0.02, 2.0)].concat());
        let d = build(&r).expect("a designed run has an account");
        assert_eq!(d.points.len(), 2);
        for p in &d.points {
            assert_eq!(p.obtained, Obtained::Measured);
            assert_eq!(p.basis, IntervalBasis::Shared, "{p:?}");
            let t = p.ttft_ms.unwrap();
            assert!(
                t.low < t.median && t.median < t.high && t.within_target,
                "{p:?}"
            );
            let pf = p.prefill_tokens_per_s.unwrap();
            assert!((pf.half_width - t.half_width).abs() < 1e-12);
        }
        assert_eq!((d.points[0].n, d.points[1].n), (10, 2));
        assert!(d.all_within_target);
        assert!((d.server_s - 5.0).abs() < 1e-9, "{d:?}");
        assert!((d.points[1].share - 0.8).abs() < 1e-9);
        // Beside the fixed sweeps a user would run: --reps 3 and --reps 6 of the same
        // lengths, at this run's cost per sample (0.1 s and 2 s a sample here).
        let reps: Vec<u32> = d.fixed.iter().map(|f| f.reps).collect();
        assert_eq!(reps, [3, 6]);
        for f in &d.fixed {
            assert!((f.server_s - f64::from(f.reps) * 2.1).abs() < 1e-9, "{f:?}");
            assert!((f.ratio.unwrap() - 5.0 / f.server_s).abs() < 1e-9, "{f:?}");
            // Each length on its own samples at 2%: 3 samples state more than 6 do.
            assert!(f.widest_half_width.unwrap() > 0.0);
        }
        assert!(d.fixed[0].widest_half_width > d.fixed[1].widest_half_width);
        assert!(d.out_of_reach.is_empty());
        // The TTFT fit's extrapolation to the server's maximum, with its band.
        let mut far = r.clone();
        far.samples.extend(samples(4096, 4, 0.02, 1.0));
        far.header.server.max_context = Some(65536);
        let e = build(&far).unwrap().extrapolation;
        let t = e.iter().find(|e| e.metric == "TTFT").expect("{e:?}");
        assert_eq!(t.band.context_tokens, 65536);
        assert!(
            t.half_width.is_finite() && t.band.low <= t.band.predicted,
            "{t:?}"
        );
        assert_eq!(t.within_target, t.half_width <= 0.05);
        far.header.server.max_context = Some(8192);
        assert!(
            build(&far).unwrap().extrapolation.is_empty(),
            "measured there"
        );
        // Not a designed run: no account.
        let mut plain = r.clone();
        plain.header.config.reps.design = None;
        assert!(build(&plain).is_none());
    }

    #[test]
    fn a_length_noisier_than_the_model_is_stated_on_its_own_spread_and_short_of_the_target() {
        let r = designed([samples(1024, 10, 0.02, 0.1), samples(8192, 3, 0.2, 2.0)].concat());
        let d = build(&r).unwrap();
        let p = &d.points[1];
        assert_eq!(p.basis, IntervalBasis::Own, "{p:?}");
        assert!(p.regime_change.as_deref().unwrap().contains("TTFT spread"));
        assert!(!p.ttft_ms.unwrap().within_target);
        assert!(!d.all_within_target);
        // A fixed --reps 6 sweep would state the noisy length at its own spread: over ±5%.
        assert!(d.fixed[1].widest_half_width.unwrap() > 0.05, "{d:?}");
    }

    #[test]
    fn the_stop_table_states_the_design_accounts_interval_and_a_correction_is_carried() {
        // A point line that stated ±4.1% during the run, for a length the file's samples
        // judge on its own spread: the report states one interval, the account's.
        let mut r = designed([samples(1024, 10, 0.02, 0.1), samples(8192, 3, 0.2, 2.0)].concat());
        let line = |ci: f64, revised| ctxbench_schema::record::PointRecord {
            run_id: r.header.run_id.clone(),
            context_tokens: 8192,
            reps: 3,
            usable: 3,
            stop_reason: StopReason::PrecisionReached,
            ttft_ci_rel: Some(ci),
            decode_ci_rel: Some(ci),
            concurrency: None,
            design: Some(ctxbench_schema::record::PointDesign {
                target: 0.05,
                planned: Some(2),
                ttft_half_width: Some(ci),
                decode_half_width: Some(ci),
                basis: IntervalBasis::Shared,
                model_ttft_sd: Some(0.02),
                model_decode_sd: Some(0.02),
                model_df: Some(8.0),
                regime_change: None,
                why: String::new(),
                server_s: 6.0,
                predicted: None,
                host_precision: None,
                revised,
            }),
            quantile: None,
        };
        r.points.push(line(0.041, None));
        let d = build(&r).unwrap();
        let mut stops = vec![r.points[0].clone()];
        restate(&mut stops, &d);
        let own = d.points[1].ttft_ms.unwrap().half_width;
        assert!(own > 0.05, "{d:?}");
        assert_eq!(stops[0].ttft_ci_rel, Some(own));
        // A corrected line (the last for a length) carries what the run printed before.
        let earlier = ctxbench_schema::record::Revision {
            ttft_half_width: Some(0.041),
            decode_half_width: Some(0.041),
            basis: IntervalBasis::Shared,
        };
        r.points.push(line(own, Some(Box::new(earlier.clone()))));
        let d = build(&r).unwrap();
        assert_eq!(d.points[1].revised.as_ref(), Some(&earlier));
    }

    #[test]
    fn a_host_too_noisy_for_the_target_is_named_with_the_precision_it_allows() {
        // σ ≈ 110% at every length: ±5% is out of reach within --max-reps 30.
        let r = designed([samples(1024, 6, 1.1, 0.1), samples(8192, 6, 1.1, 2.0)].concat());
        let d = build(&r).unwrap();
        assert_eq!(d.out_of_reach, [1024, 8192], "{d:?}");
        for p in &d.points {
            let h = p.host_precision.unwrap();
            assert!(h > 0.3, "{p:?}");
        }
        // A quiet host is never out of reach.
        let quiet = designed([samples(1024, 6, 0.02, 0.1), samples(8192, 2, 0.02, 2.0)].concat());
        assert!(build(&quiet).unwrap().out_of_reach.is_empty());
    }

    #[test]
    fn a_predicted_length_is_marked_with_its_sources_and_interval_from_the_file_alone() {
        let mut r = designed(
            [
                samples(1024, 10, 0.01, 0.1),
                samples(2048, 6, 0.01, 0.3),
                samples(4096, 4, 0.01, 1.0),
                samples(32768, 2, 0.01, 40.0),
            ]
            .concat(),
        );
        // The samples' TTFT is L/10 ms (a straight line, on the quadratic model); decode 100.
        r.points.push(ctxbench_schema::record::PointRecord {
            run_id: r.header.run_id.clone(),
            context_tokens: 16384,
            reps: 0,
            usable: 0,
            stop_reason: StopReason::Predicted,
            ttft_ci_rel: Some(0.02),
            decode_ci_rel: Some(0.02),
            concurrency: None,
            design: None,
            quantile: None,
        });
        let d = build(&r).unwrap();
        let contexts: Vec<u64> = d.points.iter().map(|p| p.context_tokens).collect();
        assert_eq!(contexts, [1024, 2048, 4096, 16384, 32768]);
        let p = &d.points[3];
        assert_eq!((p.obtained, p.n, p.samples), (Obtained::Predicted, 0, 0));
        assert_eq!(p.basis, IntervalBasis::Fit);
        let t = p.ttft_ms.unwrap();
        assert!((t.median / 1638.4 - 1.0).abs() < 0.03, "{p:?}");
        assert!(t.within_target && t.low < t.median && t.median < t.high);
        let pr = p.prediction.as_ref().unwrap();
        assert_eq!(pr.from_contexts, [1024, 2048, 4096, 32768]);
        assert_eq!(pr.checked_at, [2048, 4096]);
        // The fixed sweep would have measured 16k too: its estimate includes it.
        let per_length: f64 = [0.1, 0.3, 1.0, 40.0].iter().sum();
        assert!(d.fixed[1].server_s > 6.0 * per_length * 1.1, "{d:?}");
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["points"][3]["obtained"], "predicted");
        assert_eq!(json["points"][3]["basis"], "fit");
    }
}
