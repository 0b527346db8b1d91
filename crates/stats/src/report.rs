//! The report model: results files → statistics (summaries, fits, extrapolations,
//! warnings), ready for the renderers. Built from results files alone, so any run can be
//! re-reported later, anywhere. No I/O here; `ctxbench report` reads and writes.

pub mod design;
pub mod impossible;
pub mod sharing;
#[cfg(test)]
mod speculation_tests;
pub mod warning;

pub use warning::{warn, Warning};

use std::path::PathBuf;

use crate::stats::fit::{self, Extrapolation, Fit, Model};
use crate::stats::metric::{self, Metric};
use crate::stats::{self, PointSummary, Spread};
use ctxbench_schema::record::{
    CorpusInfo, Host, Phase, PointRecord, Results, RunConfig, Sample, ServerInfo,
};
use ctxbench_schema::units::fmt_ctx;
use serde::Serialize;

pub use crate::stats::bootstrap::{EXTRAPOLATION_RESAMPLES, SEED};

/// Everything a report shows, for one or more runs.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// ctxbench version that built the report.
    pub generated_by: String,
    /// One entry per results file, in the order given.
    pub runs: Vec<RunReport>,
    /// Prompts, corpora and draft positions across the runs (`stats::prompts`).
    #[serde(skip_serializing_if = "crate::stats::prompts::PromptsReport::is_empty")]
    pub prompts: crate::stats::prompts::PromptsReport,
}

/// One results file, summarised and fitted.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Short name (the file stem), used in legends.
    pub label: String,
    /// The results file.
    pub path: String,
    /// The run's id.
    pub run_id: String,
    /// When the run started.
    pub started_at: String,
    /// ctxbench version that measured it, with its commit when recorded: `0.1.0 (abc1234)`.
    pub ctxbench_version: String,
    /// The client machine.
    pub host: Host,
    /// What the user chose, as recorded.
    pub config: RunConfig,
    /// The server's identity and capabilities, as probed.
    pub server: ServerInfo,
    /// The corpus.
    pub corpus: CorpusInfo,
    /// What the user named the run (`--label`).
    pub run_label: Option<String>,
    /// Per-context summaries: cold usable samples, and apart from them the warm
    /// decode-at-depth samples.
    pub points: Vec<PointSummary>,
    /// Per context, the last `point` line: repetitions taken and why they stopped.
    pub stops: Vec<PointRecord>,
    /// Speculative acceptance length per context, when the samples carry it.
    pub acceptance: Vec<AcceptancePoint>,
    /// TTFT(L) ≈ a + bL + cL².
    pub ttft_fit: Option<ScalingFit>,
    /// ms/step(L) ≈ α + βL.
    pub step_fit: Option<ScalingFit>,
    /// What the reader must know before trusting the numbers.
    pub warnings: Vec<Warning>,
    /// Needle retrieval per context × depth (`--needle`), apart from the speed numbers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub needle: Vec<crate::integrity::NeedleCell>,
    /// The capacity map (context × concurrency), for a run with `--concurrency` above 1;
    /// the points and fits above are then its lowest concurrency level's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::capacity::CapacityMap>,
    /// The price of a token at each context length (`--price-per-hour`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::price::CostTable>,
    /// Warm context at depth (`--mode append|conversation|tiers`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm: Option<crate::stats::warm::WarmReport>,
    /// The model's size as the results header records it (`model_facts`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_facts: Option<ctxbench_schema::model::ModelFacts>,
    /// How far from the hardware's limit (`--hardware`, `--memory-bandwidth`,
    /// `--peak-tflops`): see [`crate::roofline`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roofline: Option<crate::roofline::Roofline>,
    /// The designed sweep's account (`--design auto`): how each figure was obtained, where
    /// the server time went, and what a fixed sweep of the same precision would have needed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub design: Option<design::DesignReport>,
}

/// Acceptance length at one context length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AcceptancePoint {
    /// Context length.
    pub context_tokens: u64,
    /// Mean accepted tokens per verify step, over samples.
    pub accept_length: Spread,
}

/// A fit with what follows from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingFit {
    /// The metric fitted.
    pub metric: Metric,
    /// The fit itself.
    pub fit: Fit,
    /// Length where the quadratic term overtakes the linear one (TTFT only).
    pub crossover_tokens: Option<f64>,
    /// Observed slowdown from the smallest to the largest point.
    pub slowdown: Option<Slowdown>,
    /// Prediction at the server's maximum context, when it lies beyond the data.
    pub extrapolation: Option<Extrapolation>,
    /// R² or residuals say the model does not describe the data.
    pub poor: bool,
    /// A 90% bootstrap band of each coefficient (samples resampled within each length).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coef_band: Option<Vec<fit::CoefBand>>,
}

/// Observed ratio of medians between the largest and the smallest point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slowdown {
    /// Smallest context.
    pub from_tokens: u64,
    /// Largest context.
    pub to_tokens: u64,
    /// Median there.
    pub from: f64,
    /// Median there.
    pub to: f64,
    /// to / from.
    pub ratio: f64,
}

/// What the configuration and the server's capabilities mean for every sample of a run:
/// the sweep says these before it measures, and every report of the file repeats them.
pub fn config_warnings(config: &RunConfig, server: &ServerInfo) -> Vec<Warning> {
    let mut w = Vec::new();
    // A flush before every sample does what a per-request switch would: no warning then.
    if !config.cache_bypass && (server.cache_bypass || server.flush_check.is_none()) {
        w.push(warn("cache_bypass_off", if server.cache_bypass {
            "--cache-bypass off: the server may reuse cached prompts; such samples are flagged and excluded".to_owned()
        } else {
            "this API has no per-request cache switch; relying on the nonce and on verification".to_owned()
        }));
    }
    if !config.nonce {
        w.push(warn(
            "nonce_off",
            "--nonce off: repetitions send identical prompts, which a prefix cache can serve without a prefill".to_owned(),
        ));
    }
    if server.reports_cached_tokens == Some(false) {
        let hint = server
            .cached_tokens_hint
            .as_ref()
            .map_or(String::new(), |h| format!(" ({h})"));
        w.push(warn("cache_unverified", format!("the server does not report cached-token counts: cold prefill cannot be proven for this run (samples are marked cache_unverified){hint}")));
    }
    w
}

/// Builds the report of one results file. Pure: no I/O.
pub fn build_run(label: &str, path: &str, results: &Results) -> RunReport {
    let h = &results.header;
    // Tables, plots and fits use cold samples; warm decode-at-depth samples (a cached
    // prefix reused on purpose) are summarised apart in the same points. Phases this
    // version does not know are left out, and said so.
    let capacity = crate::capacity::map(&results.samples, &h.config, &h.server);
    // A grid's one-request view (table, fits) is its lowest concurrency level: requests
    // sharing the server would blur how one request's cost grows with context.
    let lowest = h.config.concurrency_levels().into_iter().min().unwrap_or(1);
    let alone: Vec<Sample> = results
        .samples
        .iter()
        .filter(|s| s.concurrency.unwrap_or(1) == lowest)
        .cloned()
        .collect();
    let known: Vec<Sample> = alone
        .iter()
        .filter(|s| matches!(s.phase, Phase::Cold | Phase::Warm))
        .cloned()
        .collect();
    let needle = crate::integrity::needle_cells(&results.samples);
    let points = stats::summarize(&known);

    let mut warnings = sample_warnings(results, &alone, &points);
    warnings.extend(impossible::warning(&results.samples));
    warnings.extend(integrity_warnings(&needle, &results.samples));
    warnings.extend(server_warnings(results, &points));
    warnings.extend(sharing::report_warnings(&h.server, &results.samples));
    if let Some(m) = &capacity {
        warnings.extend(capacity_warnings(m, lowest));
    }
    let max_context = h.server.max_context;
    // A conversation measures no cold ladder: its fits' "too few lengths" would be noise.
    let mut fit_warnings = Vec::new();
    let ttft_fit = scaling_fit(
        Metric::TtftMs,
        Model::Quadratic,
        &alone,
        &points,
        max_context,
        &mut fit_warnings,
    );
    let step_fit = scaling_fit(
        Metric::MsPerStep,
        Model::Linear,
        &alone,
        &points,
        max_context,
        &mut fit_warnings,
    );
    let conversation = h
        .config
        .warm
        .as_ref()
        .is_some_and(|w| w.mode == ctxbench_schema::warm::WarmMode::Conversation);
    if !conversation {
        warnings.extend(fit_warnings);
    }
    let cold: Vec<&Sample> = known.iter().filter(|s| s.phase == Phase::Cold).collect();
    let acceptance = acceptance_points(&points, &cold);
    let design = design::build(results);
    let mut stops = stop_records(&points, results, lowest);
    if let Some(d) = &design {
        design::restate(&mut stops, d);
    }

    RunReport {
        label: label.to_owned(),
        path: path.to_owned(),
        run_id: h.run_id.clone(),
        started_at: h.started_at.clone(),
        ctxbench_version: match &h.ctxbench_commit {
            Some(c) => format!("{} ({c})", h.ctxbench_version),
            None => h.ctxbench_version.clone(),
        },
        host: h.host.clone(),
        config: h.config.clone(),
        server: h.server.clone(),
        corpus: h.corpus.clone(),
        run_label: h.label.clone(),
        stops,
        points,
        acceptance,
        ttft_fit,
        step_fit,
        warnings,
        needle,
        capacity,
        cost: None,
        warm: crate::stats::warm::summarize(h.config.warm.as_ref(), &results.samples),
        model_facts: h.model_facts.clone(),
        roofline: None,
        design,
    }
}

/// What the file and its samples say about themselves: a torn last line, phases this
/// version does not know, and samples excluded from the table (cache hits, wrong
/// lengths, failures, inverted two-point pairs).
fn sample_warnings(results: &Results, alone: &[Sample], points: &[PointSummary]) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if results.torn_bytes > 0 {
        warnings.push(warn(
            "torn_line",
            format!(
                "the file ends with a torn line ({} bytes): the run was killed mid-write; it was ignored",
                results.torn_bytes
            ),
        ));
    }
    let other_phases = alone
        .iter()
        .filter(|s| {
            !matches!(
                s.phase,
                Phase::Cold
                    | Phase::Warm
                    | Phase::Needle
                    | Phase::Append
                    | Phase::Prime
                    | Phase::Turn
                    | Phase::Tier
            )
        })
        .count();
    if other_phases > 0 {
        warnings.push(warn(
            "other_phase",
            format!("{other_phases} sample(s) of a phase this ctxbench does not know are not in this report"),
        ));
    }
    let total = |f: fn(&PointSummary) -> usize| points.iter().map(f).sum::<usize>();
    let (cont, mism, failed) = (
        total(|p| p.contaminated),
        total(|p| p.length_mismatch),
        total(|p| p.failed),
    );
    if cont > 0 {
        warnings.push(warn("contaminated", format!("{cont} sample(s) hit the prefix cache (cached_tokens > 0): not cold prefills, excluded from the table and the fits")));
    }
    let suspected = total(|p| p.suspected_cache_hit);
    if suspected > 0 {
        warnings.push(warn("suspected_cache_hit", format!("{suspected} sample(s) without a cached-token count had a TTFT below ¼ of what this run's own cold samples predict (the slowest other sample at that length, or the median at the next shorter length): suspected cache hits the server did not report, excluded from the table and the fits")));
    }
    if mism > 0 {
        warnings.push(warn("length_mismatch", format!("{mism} sample(s) had a server-reported prompt length different from the target: excluded")));
    }
    if failed > 0 {
        warnings.push(warn(
            "failed",
            format!("{failed} request(s) failed: resume the sweep to fill the gaps"),
        ));
    }
    let inverted = total(|p| p.two_point_inverted);
    if inverted > 0 {
        warnings.push(warn("two_point_inverted", format!("{inverted} two-point sample(s) had t_B ≤ t_A: no decode rate for them (the reason is in each sample's two_point.reason)")));
    }
    warnings
}

/// What the configuration and the server's capabilities mean for the samples: the
/// configuration's warnings, unverified cache state, and a synthetic corpus behind
/// speculative numbers.
fn server_warnings(results: &Results, points: &[PointSummary]) -> Vec<Warning> {
    let h = &results.header;
    let mut warnings = config_warnings(&h.config, &h.server);
    let server_says_unverified = warnings.iter().any(|w| w.kind == "cache_unverified");
    let unver: usize = points.iter().map(|p| p.cache_unverified).sum();
    if unver > 0 && !server_says_unverified {
        let hint = h
            .server
            .cached_tokens_hint
            .as_ref()
            .map_or(String::new(), |h| format!(" ({h})"));
        warnings.push(warn("cache_unverified", format!("{unver} sample(s) have no cached-token count from the server: cold prefill is not proven for them{hint}")));
    }
    // Only acceptance is inflated by a synthetic corpus: say so where there is some.
    let has_spec = results
        .samples
        .iter()
        .any(|s| s.spec_accept_length.is_some());
    if has_spec && h.corpus.label.contains("synthetic") {
        warnings.push(warn(
            "synthetic_corpus",
            format!(
                "corpus: {}; use --corpus PATH with real text for speculative decoding numbers",
                h.corpus.label
            ),
        ));
    }
    if has_spec {
        warnings.extend(speculation_warnings(results));
    }
    warnings
}

/// A speculative run's acceptance warnings: a prompt that wraps a real corpus (the text
/// repeats itself, so drafts find their continuation in the prompt: acceptance inflated, as
/// on the repeated sentence), and a cliff in acceptance along the lengths
/// ([`crate::stats::speculation::cliff`]).
fn speculation_warnings(results: &Results) -> Vec<Warning> {
    use ctxbench_schema::record::CorpusSpec;
    let h = &results.header;
    let mut out = Vec::new();
    // The repeated sentence always wraps and is named synthetic above already.
    let real_text = matches!(
        h.corpus.spec,
        CorpusSpec::Path(_) | CorpusSpec::Natural(_) | CorpusSpec::Code(_)
    );
    if h.corpus.wraps && real_text {
        let longest: Vec<u64> = results
            .samples
            .iter()
            .filter(|s| s.spec_accept_length.is_some() && s.context_tokens > h.corpus.tokens)
            .map(|s| s.context_tokens)
            .collect();
        let from = longest
            .iter()
            .min()
            .map_or(String::new(), |c| format!(" (from {} on)", fmt_ctx(*c)));
        out.push(warn(
            "wrapped_corpus",
            format!(
                "acceptance measured on prompts that wrap the corpus{from}: {} has {} tokens, so a longer prompt repeats its text and drafts find the continuation in the prompt; acceptance there is inflated: give a longer corpus (--corpus PATH)",
                h.corpus.label,
                h.corpus.tokens
            ),
        ));
    }
    let acc = crate::stats::speculation::run_acceptance(results, 0.95);
    if let Some(c) = crate::stats::speculation::cliff::find(&acc) {
        out.push(warn("acceptance_cliff", c.message));
    }
    let along = crate::stats::speculation::position::units_of(results);
    if let Some(c) = crate::stats::speculation::position::find(&along, 0.95) {
        out.push(warn("acceptance_cliff_position", c.message));
    }
    out
}

/// What the capacity map says that the one-request table cannot: failed requests in the
/// cells above the lowest concurrency, and cells where the server did not do what its
/// limits predicted.
fn capacity_warnings(m: &crate::capacity::CapacityMap, lowest: u32) -> Vec<Warning> {
    let mut warnings = Vec::new();
    let failed: Vec<&crate::capacity::Cell> = m
        .cells
        .iter()
        .filter(|c| c.concurrency != lowest && c.failed > 0)
        .collect();
    if !failed.is_empty() {
        warnings.push(warn(
            "failed",
            format!(
                "{} request(s) failed in the capacity grid ({}): those cells are incomplete and cannot show whether requests waited; resume the sweep to fill the gaps, or raise --timeout for cells that queue",
                failed.iter().map(|c| c.failed).sum::<usize>(),
                failed
                    .iter()
                    .map(|c| format!(
                        "{} × {}: {} of {}",
                        fmt_ctx(c.context_tokens),
                        c.concurrency,
                        c.failed,
                        c.requests
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    for x in &m.mispredicted {
        warnings.push(warn(
            "prediction_missed",
            format!("the server did not do what its limits predicted at {x}"),
        ));
    }
    warnings
}

/// One scaling fit of a metric over the one-request samples, with its slowdown and its
/// extrapolation to the server's maximum; warns when there is no fit, a poor one, or an
/// extrapolation far beyond the data.
fn scaling_fit(
    metric: Metric,
    model: Model,
    alone: &[Sample],
    points: &[PointSummary],
    max_context: Option<u64>,
    warnings: &mut Vec<Warning>,
) -> Option<ScalingFit> {
    let obs = metric::observations(alone, metric);
    let Some(f) = fit::fit(model, &obs) else {
        let lengths = {
            let mut l: Vec<u64> = obs.iter().map(|o| o.0).collect();
            l.dedup();
            l.len()
        };
        warnings.push(warn(
            "no_fit",
            format!(
                "{}: {} context length(s) with cold usable samples; a {} fit needs {}",
                metric.label(),
                lengths,
                match model {
                    Model::Quadratic => "quadratic",
                    Model::Linear => "linear",
                },
                model.terms()
            ),
        ));
        return None;
    };
    let slowdown = slowdown(metric, points);
    let largest = obs.iter().map(|o| o.0).max().unwrap_or(0);
    let extrapolation = max_context
        .filter(|&m| m > largest)
        .and_then(|m| fit::extrapolate(model, &obs, m, EXTRAPOLATION_RESAMPLES, SEED));
    let poor = f.is_poor();
    if poor {
        warnings.push(warn(
            "poor_fit",
            format!(
                "{} fit is poor (R² {:.3}, worst median off by {:.0}%): the {} model does not describe these data; noisy host or too few repetitions?",
                metric.label(),
                f.r2,
                f.worst_relative_residual() * 100.0,
                match model {
                    Model::Quadratic => "a + bL + cL²",
                    Model::Linear => "α + βL",
                }
            ),
        ));
    }
    if let Some(e) = &extrapolation {
        if e.context_tokens > 4 * e.measured_up_to {
            warnings.push(warn(
                "extrapolation",
                format!(
                    "{} at {} is extrapolated more than 4× beyond the largest measured point ({}): measure closer to the limit before relying on it",
                    metric.label(),
                    fmt_ctx(e.context_tokens),
                    fmt_ctx(e.measured_up_to)
                ),
            ));
        }
    }
    Some(ScalingFit {
        metric,
        crossover_tokens: f.crossover(),
        fit: f,
        slowdown,
        extrapolation,
        poor,
        coef_band: fit::coefficient_bands(model, &obs, EXTRAPOLATION_RESAMPLES, SEED),
    })
}

/// The observed ratio of medians from the smallest to the largest point with a value.
fn slowdown(metric: Metric, points: &[PointSummary]) -> Option<Slowdown> {
    let with: Vec<&PointSummary> = points
        .iter()
        .filter(|p| metric.spread(p).is_some())
        .collect();
    match (with.first(), with.last()) {
        (Some(a), Some(b)) if a.context_tokens < b.context_tokens => {
            let (x, y) = (
                metric.spread(a).map(|s| s.median).unwrap_or(f64::NAN),
                metric.spread(b).map(|s| s.median).unwrap_or(f64::NAN),
            );
            Some(Slowdown {
                from_tokens: a.context_tokens,
                to_tokens: b.context_tokens,
                from: x,
                to: y,
                ratio: y / x,
            })
        }
        _ => None,
    }
}

/// Speculative acceptance length per context, where the cold usable samples carry it.
fn acceptance_points(points: &[PointSummary], cold: &[&Sample]) -> Vec<AcceptancePoint> {
    let mut acceptance = Vec::new();
    for p in points {
        let v = cold
            .iter()
            .filter(|s| s.context_tokens == p.context_tokens && s.usable())
            .filter_map(|s| s.spec_accept_length);
        if let Some(sp) = Spread::of(v) {
            acceptance.push(AcceptancePoint {
                context_tokens: p.context_tokens,
                accept_length: sp,
            });
        }
    }
    acceptance
}

/// Per point, the last `point` line of its (lowest-concurrency) cell.
fn stop_records(points: &[PointSummary], results: &Results, lowest: u32) -> Vec<PointRecord> {
    points
        .iter()
        .filter_map(|p| {
            results
                .points
                .iter()
                .rev()
                .find(|r| {
                    r.context_tokens == p.context_tokens && r.concurrency.unwrap_or(1) == lowest
                })
                .cloned()
        })
        .collect()
}

/// What the needle checks and the warm-vs-cold output comparison say, worded once.
fn integrity_warnings(needle: &[crate::integrity::NeedleCell], samples: &[Sample]) -> Vec<Warning> {
    let mut w = Vec::new();
    let sum = |f: fn(&crate::integrity::NeedleCell) -> usize| needle.iter().map(f).sum::<usize>();
    let (fail, error) = (sum(|c| c.fail), sum(|c| c.error));
    if fail > 0 {
        w.push(warn("needle_fail", format!("{fail} needle check(s) answered without the value placed in the prompt (retrieval per context × depth is in the needle table)")));
    }
    if error > 0 {
        w.push(warn("needle_error", format!("{error} needle check(s) without a verdict (the request failed, or the protocol shows no answer text): no answer was seen, so they count as neither pass nor fail")));
    }
    let nd: Vec<String> = crate::integrity::nondeterministic(samples)
        .into_iter()
        .filter(|x| x.1 > 0)
        .map(|(c, n, of)| format!("{} ({n} of {of})", fmt_ctx(c)))
        .collect();
    if !nd.is_empty() {
        w.push(warn("nondeterministic", format!("outputs differ: warm samples produced other greedy tokens than their cold sample from the same prompt at {}: the server is not deterministic at that depth (batching, thread counts and reduction order can cause this legitimately)", nd.join(", "))));
    }
    w
}

/// A unique short label per file: the stem, or the path when stems collide.
pub fn labels(paths: &[PathBuf]) -> Vec<String> {
    let stems: Vec<String> = paths
        .iter()
        .map(|p| {
            p.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string())
        })
        .collect();
    stems
        .iter()
        .zip(paths)
        .map(|(s, p)| {
            if stems.iter().filter(|x| *x == s).count() > 1 {
                p.display().to_string()
            } else {
                s.clone()
            }
        })
        .collect()
}

impl Report {
    /// Adds the price of a token to every run, for a server costing `price_per_hour` USD.
    pub fn with_price(mut self, price_per_hour: Option<f64>) -> Self {
        for run in &mut self.runs {
            run.cost = price_per_hour.map(|p| {
                let mut c = crate::price::costs(&run.points, p);
                if let Some(m) = &run.capacity {
                    c.cells = crate::price::cell_costs(m, p);
                }
                c
            });
        }
        self
    }
}

impl Report {
    /// Holds every run against the machine's `limits` (see [`crate::roofline`]), with the
    /// model facts its header records, completed by `model_config` (`--model-config`) where
    /// they are silent. A figure above 100% of its bound also becomes a warning of the run.
    pub fn with_roofline(
        mut self,
        limits: Option<&crate::roofline::Limits>,
        model_config: Option<&ctxbench_schema::model::ModelFacts>,
    ) -> Self {
        let Some(limits) = limits else {
            return self;
        };
        for run in &mut self.runs {
            let facts = match (run.model_facts.clone(), model_config.cloned()) {
                (Some(h), Some(c)) => Some(h.or(c)),
                (h, c) => h.or(c),
            };
            let step_fit = run
                .step_fit
                .as_ref()
                .map(|s| (&s.fit, s.coef_band.as_deref()));
            let r = crate::roofline::analyse(&crate::roofline::Input {
                facts: facts.as_ref(),
                limits,
                points: &run.points,
                step_fit,
            });
            run.warnings.extend(
                r.defects
                    .iter()
                    .map(|d| warn("roofline_impossible", d.clone())),
            );
            run.roofline = Some(r);
        }
        self
    }
}

/// Builds the report of several results files.
pub fn build(loaded: &[(String, String, Results)]) -> Report {
    Report {
        generated_by: format!("ctxbench {}", env!("CARGO_PKG_VERSION")),
        runs: loaded.iter().map(|(l, p, r)| build_run(l, p, r)).collect(),
        prompts: crate::stats::prompts::build(loaded),
    }
}
