//! Snapshot tests of every renderer. The input is what a sweep writes: the header and the
//! sample lines come from results files recorded with the reference llama-server
//! (`crates/schema/testdata/golden/`), and only the timings are replaced by a formula, so the fits
//! have a known answer. A change in the writer shows here.

use ctxbench_schema::record::{
    ErrorKind, Flag, Phase, PointRecord, RepPolicy, Results, RunHeader, Sample, SampleError,
    SpecStats, Status, StopReason,
};
use ctxbench_stats::compare::{self, Comparison};
use ctxbench_stats::report::{self, Report};

use crate::renderer;

use crate::svg;

use crate::format::ReportFormat;
use ctxbench_schema::testdata::golden;

/// The recorded header, made independent of the machine and port it was recorded on.
fn header(run_id: &str, contexts: &[u64]) -> RunHeader {
    let mut h = golden("sweep.jsonl").header;
    h.run_id = run_id.into();
    h.ctxbench_version = "0.1.0".into();
    h.started_at = "2026-01-01T00:00:00Z".into();
    h.host.hostname = "fixture".into();
    h.host.cpus = 2;
    h.config.contexts = contexts.to_vec();
    h.config.reps = RepPolicy::fixed(3);
    h.config.url = "http://127.0.0.1:8080".into();
    h.server.url = "http://127.0.0.1:8080".into();
    h.server.max_context = Some(131072);
    h
}

/// A recorded sample of `phase` carrying `flag` (or none): the template whose timings the
/// fixture replaces.
fn template(file: &str, phase: Phase, flag: Option<Flag>) -> Sample {
    golden(file)
        .samples
        .into_iter()
        .find(|s| {
            s.status == Status::Ok
                && s.phase == phase
                && s.server.is_some()
                && match &flag {
                    Some(f) => s.has(f),
                    None => !s.has(&Flag::CoalescedTokens) && !s.contaminated,
                }
        })
        .unwrap_or_else(|| panic!("no {phase} sample with {flag:?} in {file}"))
}

/// A sample whose timings follow TTFT = 20 + 0.05L + 8e-6 L² ms and step = 0.5 + 4e-4 L ms,
/// scaled by `speed` and jittered by rep; everything else as the sweep wrote it.
fn sample(
    mut s: Sample,
    run_id: &str,
    c: u64,
    rep: u32,
    speed: f64,
    accept: Option<f64>,
) -> Sample {
    let l = c as f64;
    let jitter = [1.0, 1.03, 0.98][rep as usize % 3];
    let ttft = (20.0 + 0.05 * l + 8e-6 * l * l) * speed * jitter;
    let step = (0.5 + 4e-4 * l) * speed * jitter;
    let n = s.output_tokens.unwrap_or(32);
    s.run_id = run_id.into();
    s.context_tokens = c;
    s.rep = rep;
    s.prompt_tokens_sent = c - 1;
    s.prompt_tokens = Some(c);
    s.ttft_ms = Some(ttft);
    s.prefill_tokens_per_s = s.prefill_tokens_per_s.map(|_| l / (ttft / 1000.0));
    s.decode_tokens_per_s = Some(1000.0 / step);
    s.ms_per_step = Some(step);
    s.e2e_ms = Some(ttft + (n - 1) as f64 * step);
    if let Some(t) = s.server.as_mut() {
        // The server's own clock: a little less than the client's.
        t.prompt_ms = Some(ttft * 0.97);
        t.prompt_per_second = Some(l / (ttft * 0.97 / 1000.0));
        t.predicted_ms = Some((n - 1) as f64 * step * 0.99);
        t.predicted_per_second = Some(1000.0 / (step * 0.99));
        t.predicted_per_token_ms = Some(step * 0.99);
    }
    if let Some(a) = accept {
        let a = a - l / 65536.0;
        let steps = ((n - 1) as f64 / a).round() as u64;
        s.set_spec(
            SpecStats {
                source: "llamacpp.timings".into(),
                verify_steps: Some(steps),
                draft_tokens: Some(steps * 8),
                accepted_tokens: Some(((a - 1.0) * steps as f64).round() as u64),
                accept_length: None,
                accept_rate: None,
            }
            .derive(),
        );
    }
    s
}

fn results(run_id: &str, speed: f64, accept: Option<f64>) -> Results {
    let contexts = [1024, 2048, 4096, 8192, 16384];
    let cold = template("sweep.jsonl", Phase::Cold, None);
    let mut samples: Vec<Sample> = contexts
        .iter()
        .flat_map(|&c| (0..3).map(move |r| (c, r)))
        .map(|(c, r)| sample(cold.clone(), run_id, c, r, speed, accept))
        .collect();
    // One cache hit, to show that it is reported and excluded.
    let hit = template("contaminated.jsonl", Phase::Cold, Some(Flag::Contaminated));
    let mut hit = sample(hit, run_id, 4096, 3, 0.01, accept);
    hit.cached_tokens = Some(4000);
    samples.push(hit);
    // Decode at depth: summarised apart, kept out of the main table and the fits.
    let warm = template("sweep.jsonl", Phase::Warm, None);
    samples.push(sample(warm.clone(), run_id, 16384, 0, 0.5, accept));
    samples.push(sample(warm, run_id, 16384, 1, 0.52, accept));
    // A failed request, as the loop records it.
    // As the loop records a transport error at 8192 (33 tokens asked for, 8191 sent).
    let mut failed = Sample::blank(run_id, 8192, 3, 8191, "2026-01-01T00:00:09Z".into(), None);
    failed.status = Status::Failed;
    failed.error = Some(SampleError {
        kind: ErrorKind::Transport,
        message: ctxbench_schema::error::ClientError::Transport {
            endpoint: "/completion".into(),
            detail: "connection reset by peer".into(),
        }
        .to_string(),
    });
    samples.push(failed);
    let mut header = header(run_id, &contexts);
    let mut points = Vec::new();
    if accept.is_some() {
        // The second run measured with --precision: the stop reasons are shown.
        header.config.reps = RepPolicy {
            precision: Some(0.05),
            min_reps: 3,
            max_reps: 4,
            point_budget_s: None,
            run_budget_s: Some(600.0),
            design: None,
            quantile: None,
        };
        for (i, &c) in contexts.iter().enumerate() {
            points.push(PointRecord {
                run_id: run_id.into(),
                context_tokens: c,
                reps: if i % 2 == 0 { 3 } else { 4 },
                usable: 3,
                stop_reason: if i % 2 == 0 {
                    StopReason::PrecisionReached
                } else {
                    StopReason::MaxReps
                },
                ttft_ci_rel: Some(0.03),
                decode_ci_rel: Some(0.02 + i as f64 / 100.0),
                concurrency: None,
                design: None,
                quantile: None,
            });
        }
    }
    Results {
        header,
        samples,
        points,
        ends: vec![],
        resumes: vec![],
        torn_bytes: 0,
    }
}

fn fixture() -> Report {
    let loaded = vec![
        (
            "base".to_owned(),
            "base.jsonl".to_owned(),
            results("r1", 1.0, None),
        ),
        (
            "spec".to_owned(),
            "spec.jsonl".to_owned(),
            results("r2", 0.8, Some(3.2)),
        ),
    ];
    let mut r = report::build(&loaded);
    r.generated_by = "ctxbench (fixture)".into();
    r
}

fn comparison() -> Comparison {
    compare::build(&comparison_sides(), false, &Default::default()).expect("comparable")
}

fn comparison_sides() -> Vec<Vec<compare::Loaded>> {
    // Three interleaved runs per side, each a little off the others (run-to-run drift):
    // the run is the unit of the comparison.
    let side = |name: &str, speeds: [f64; 3], accept: Option<f64>| {
        speeds
            .iter()
            .enumerate()
            .map(|(k, &sp)| {
                let mut r = results(&format!("{name}{k}"), sp, accept);
                r.header.label = Some(name.to_owned());
                (name.to_owned(), format!("{name}-run{k}.jsonl"), r)
            })
            .collect::<Vec<_>>()
    };
    vec![
        side("base", [1.0, 1.02, 0.99], None),
        side("spec", [0.8, 0.81, 0.79], Some(3.2)),
    ]
}

fn render(f: ReportFormat) -> String {
    renderer(f).report(&fixture()).expect("renders")
}

fn render_cmp(f: ReportFormat) -> String {
    renderer(f).compare(&comparison()).expect("renders")
}

#[test]
fn report_table() {
    insta::assert_snapshot!(render(ReportFormat::Table));
}

#[test]
fn report_markdown() {
    insta::assert_snapshot!(render(ReportFormat::Md));
}

#[test]
fn report_csv() {
    insta::assert_snapshot!(render(ReportFormat::Csv));
}

#[test]
fn report_json() {
    insta::assert_snapshot!(render(ReportFormat::Json));
}

#[test]
fn report_html() {
    insta::assert_snapshot!(render(ReportFormat::Html));
}

/// A designed run (`--design auto`): the same samples, its account of how each figure
/// was obtained and of the server time.
fn render_designed(f: ReportFormat) -> String {
    render_run(f, designed_results())
}

/// The fixture's samples under a designed policy (`--precision 0.05 --design auto`).
fn designed_results() -> Results {
    let mut r = results("r3", 1.0, None);
    r.header.config.reps = RepPolicy {
        precision: Some(0.05),
        min_reps: 2,
        max_reps: 30,
        point_budget_s: None,
        run_budget_s: None,
        design: Some(ctxbench_schema::record::DesignMode::Auto),
        quantile: None,
    };
    r
}

/// One run's report, labelled `designed`.
fn render_run(f: ReportFormat, r: Results) -> String {
    let mut report = report::build(&[("designed".to_owned(), "designed.jsonl".to_owned(), r)]);
    report.generated_by = "ctxbench (fixture)".into();
    renderer(f).report(&report).expect("renders")
}

/// A designed run that predicted 12k from the fits instead of measuring it (its `point`
/// line says so and it has no samples).
fn render_designed_with_a_prediction(f: ReportFormat) -> String {
    let mut r = designed_results();
    r.header.config.contexts.push(12288);
    r.header.config.contexts.sort_unstable();
    r.points.push(PointRecord {
        run_id: r.header.run_id.clone(),
        context_tokens: 12288,
        reps: 0,
        usable: 0,
        stop_reason: StopReason::Predicted,
        ttft_ci_rel: None,
        decode_ci_rel: None,
        concurrency: None,
        design: None,
        quantile: None,
    });
    render_run(f, r)
}

#[test]
fn report_designed_table() {
    insta::assert_snapshot!(render_designed(ReportFormat::Table));
}

#[test]
fn report_designed_markdown() {
    insta::assert_snapshot!(render_designed(ReportFormat::Md));
}

#[test]
fn report_svg_plots() {
    let plots = svg::report_plots(&fixture()).unwrap();
    let names: Vec<&str> = plots.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ttft_ms",
            "prefill_tokens_per_s",
            "decode_tokens_per_s",
            "ms_per_step",
            "acceptance_length"
        ]
    );
    insta::assert_snapshot!("svg_ttft", plots[0].svg);
    insta::assert_snapshot!("svg_acceptance", plots[4].svg);
}

#[test]
fn compare_table() {
    insta::assert_snapshot!(render_cmp(ReportFormat::Table));
}

#[test]
fn compare_markdown() {
    insta::assert_snapshot!(render_cmp(ReportFormat::Md));
}

#[test]
fn compare_csv_json_html() {
    insta::assert_snapshot!("compare_csv", render_cmp(ReportFormat::Csv));
    insta::assert_snapshot!("compare_json", render_cmp(ReportFormat::Json));
    insta::assert_snapshot!("compare_html", render_cmp(ReportFormat::Html));
}

#[test]
fn compare_svg_plot() {
    insta::assert_snapshot!(svg::compare_plot(&comparison()).unwrap());
}

#[test]
fn fits_of_the_fixture_recover_its_formula() {
    // Not a snapshot: the numbers the renderers show must be the right ones.
    let r = fixture();
    let t = r.runs[0].ttft_fit.as_ref().unwrap();
    assert!((t.fit.coef[2] - 8e-6).abs() / 8e-6 < 0.05, "{:?}", t.fit);
    let s = r.runs[0].step_fit.as_ref().unwrap();
    assert!((s.fit.coef[1] - 4e-4).abs() / 4e-4 < 0.05, "{:?}", s.fit);
    let e = t.extrapolation.unwrap();
    assert_eq!(e.context_tokens, 131072);
    assert!(r.runs[0].warnings.iter().any(|w| w.kind == "contaminated"));
    assert!(r.runs[0].warnings.iter().any(|w| w.kind == "extrapolation"));
    assert!(r.runs[0].warnings.iter().any(|w| w.kind == "failed"));
    assert_eq!(
        r.runs[0].points[4].samples, 3,
        "warm samples kept out of the table"
    );
    assert_eq!(r.runs[0].points[4].warm, 2, "and summarised apart");
    assert_eq!(r.runs[1].acceptance.len(), 5);
}

#[test]
fn html_is_self_contained() {
    let html = render(ReportFormat::Html);
    for banned in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!html.contains(banned), "{banned} in the HTML report");
    }
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(html.contains("EXTRAPOLATED"));
}

#[test]
fn compare_verdicts_of_a_20_percent_speedup() {
    let c = comparison();
    let v = &c.versus[0];
    // B is 0.8× A everywhere over 3 runs each that drift by ±2%: clearly faster at every
    // point, with the run as the unit.
    assert_eq!(v.basis, ctxbench_stats::stats::significance::Basis::Runs);
    for r in &v.rows {
        assert_eq!(r.verdict, compare::Verdict::Faster, "{r:?}");
        assert_eq!((r.n_a, r.n_b), (3, 3), "{r:?}");
    }
}

#[test]
fn one_run_of_3_samples_per_side_gives_too_few_samples_not_a_verdict() {
    let one = |name: &str, sp: f64| {
        vec![(
            name.to_owned(),
            format!("{name}.jsonl"),
            results(name, sp, None),
        )]
    };
    let c = compare::build(&[one("a", 1.0), one("b", 0.8)], false, &Default::default())
        .expect("comparable");
    let v = &c.versus[0];
    assert_eq!(
        v.basis,
        ctxbench_stats::stats::significance::Basis::SamplesOfOneRun
    );
    for r in &v.rows {
        assert_eq!(r.verdict, compare::Verdict::TooFewSamples, "{r:?}");
        assert!(r.ratio.is_some() && r.interval.is_none(), "{r:?}");
    }
    let t = crate::renderer(crate::format::ReportFormat::Table)
        .compare(&c)
        .expect("renders");
    assert!(
        t.contains("too few samples") && t.contains("at least 6 per side"),
        "{t}"
    );
}

#[test]
fn a_top_point_above_the_fit_warns_that_the_extrapolation_is_low() {
    // TTFT growing like L^2.3 (as the reference server does past 64k on 2 cores): the
    // quadratic fit falls short at the largest length.
    let mut r = results("r3", 1.0, None);
    for s in r.samples.iter_mut().filter(|s| s.status == Status::Ok) {
        let l = s.context_tokens as f64;
        s.ttft_ms = Some(5.0 + 1e-7 * l.powf(2.3));
    }
    let report = report::build(&[("steep".to_owned(), "steep.jsonl".to_owned(), r)]);
    let text = crate::table::fits_text(&report);
    assert!(text.contains("above the fit"), "{text}");
    assert!(text.contains("likely too low"), "{text}");
    // The fixture's exact quadratic carries no such warning.
    assert!(!crate::table::fits_text(&fixture()).contains("above the fit"));
}

/// A capacity grid 1k, 4k × c = 1, 2, 4, 8 on a server with 4 slots: at 1k the aggregate
/// doubles up to c = 4 and c = 8 queues (knee 4); at 4k c = 2 barely gains (knee 1), c = 4
/// had no common window and c = 8 queued.
fn capacity_results() -> Results {
    let contexts = [1024u64, 4096];
    let levels = [1u32, 2, 4, 8];
    let mut header = header("grid", &contexts);
    header.config.concurrency = levels.to_vec();
    header.config.reps = RepPolicy::fixed(2);
    header.server.total_slots = Some(4);
    header.server.kv_pool_tokens = None;
    header.server.server_kind = "llama.cpp".into();
    let mut samples = Vec::new();
    for &ctx in &contexts {
        let l = ctx as f64;
        for &c in &levels {
            // Aggregate tok/s per request, and whether the cell queued or had no window.
            let (per_req, queued, no_window) = match (ctx, c) {
                (1024, 8) => (60.0, true, true),
                (1024, _) => (100.0 * (1.0 - 0.02 * f64::from(c)), false, false),
                (_, 1) => (50.0, false, false),
                (_, 2) => (28.0, false, false),
                (_, 4) => (15.0, false, true),
                _ => (8.0, true, true),
            };
            for wave in 0..2u32 {
                for slot in 0..c {
                    let waited = queued && slot >= 4;
                    let ttft = (20.0 + 0.05 * l)
                        * (1.0 + f64::from(slot))
                        * if waited { 3.0 } else { 1.0 };
                    let window = (!no_window).then_some(per_req);
                    let mut s = Sample {
                        run_id: "grid".into(),
                        context_tokens: ctx,
                        rep: wave,
                        prompt_tokens: Some(ctx),
                        cached_tokens: Some(0),
                        cache_verified: true,
                        ttft_ms: Some(ttft),
                        decode_tokens_per_s: Some(per_req),
                        ms_per_step: Some(1000.0 / per_req),
                        ..Sample::default()
                    };
                    let stats = ctxbench_schema::record::WaveStats {
                        slot,
                        first_token_ms: Some(ttft),
                        window_decode_tokens_per_s: window,
                        window_ms_per_step: window.map(|r| 1000.0 / r),
                        aggregate_decode_tokens_per_s: window.map(|r| r * f64::from(c)),
                        wave_output_tokens_per_s: Some(per_req * f64::from(c.min(4))),
                        waited_for: waited.then(|| slot - 4),
                        ..Default::default()
                    };
                    if c > 1 {
                        ctxbench_stats::capacity::apply_wave(
                            std::slice::from_mut(&mut s),
                            vec![stats],
                            c,
                            wave,
                        );
                        if no_window && !s.has(&Flag::NoOverlap) {
                            s.flags.push(Flag::NoOverlap);
                        }
                    } else {
                        s.concurrency = Some(1);
                        s.wave = Some(wave);
                        s.wave_stats = Some(stats);
                    }
                    samples.push(s);
                }
            }
        }
    }
    Results {
        header,
        samples,
        points: vec![],
        ends: vec![],
        resumes: vec![],
        torn_bytes: 0,
    }
}

fn capacity_fixture() -> Report {
    let mut r = report::build(&[(
        "grid".to_owned(),
        "grid.jsonl".to_owned(),
        capacity_results(),
    )]);
    r.generated_by = "ctxbench (fixture)".into();
    r
}

/// How many times `needle` occurs in `hay`.
fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[test]
fn capacity_plots_draw_a_line_per_context_the_knee_and_hollow_waiting_cells() {
    let r = capacity_fixture();
    let map = r.runs[0].capacity.as_ref().expect("a grid has a map");
    let knees: Vec<Option<u32>> = map.knees.iter().map(|k| k.concurrency).collect();
    assert_eq!(knees, [Some(4), Some(1)], "{:?}", map.knees);
    let plots = svg::report_plots(&r).unwrap();
    let names: Vec<&str> = plots.iter().map(|p| p.name.as_str()).collect();
    for n in [
        "capacity_aggregate_decode_tokens_per_s",
        "capacity_ms_per_step",
        "capacity_ttft_median_ms",
        "capacity_ttft_worst_ms",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    let agg = plots
        .iter()
        .find(|p| p.name == "capacity_aggregate_decode_tokens_per_s")
        .unwrap();
    let svg = &agg.svg;
    // One line per context (4 cells each) and its legend sample, in the context's colour.
    for col in ["#0072B2", "#D55E00"] {
        assert_eq!(
            count(
                svg,
                &format!(
                    "<polyline fill=\"none\" opacity=\"1\" stroke=\"{col}\" stroke-width=\"2\""
                )
            ),
            2,
            "{col}"
        );
    }
    for label in [
        "\n1k\n",
        "\n4k\n",
        "\nall c ran together\n",
        "\nqueued: some waited (or were preempted)\n",
        "\nno common window\n",
        "\nknee (last c that pays)\n",
    ] {
        assert_eq!(count(svg, label), 1, "legend entry {label:?}");
    }
    // The knee is ringed on both lines, and once in the legend.
    assert_eq!(
        count(
            svg,
            "r=\"10\" opacity=\"1\" fill=\"none\" stroke=\"#000000\""
        ),
        3
    );
    // Cells where requests waited are hollow circles (1k × 8, 4k × 8), a cell without a
    // common window a hollow square (4k × 4); the legend shows one of each in grey.
    assert_eq!(
        count(
            svg,
            "r=\"5\" opacity=\"1\" fill=\"none\" stroke=\"#0072B2\""
        ),
        1
    );
    assert_eq!(
        count(
            svg,
            "r=\"5\" opacity=\"1\" fill=\"none\" stroke=\"#D55E00\""
        ),
        1
    );
    assert_eq!(count(svg, "<rect"), 3, "background, 4k × 4, legend: {svg}");
    assert_eq!(
        count(
            svg,
            "height=\"10\" opacity=\"1\" fill=\"none\" stroke=\"#D55E00\""
        ),
        1
    );
    assert!(agg.caption.contains("hollow circle = some requests waited"));
    // ms/step has no value where there was no common window: 4k keeps c = 1, 2 only.
    let steps = plots
        .iter()
        .find(|p| p.name == "capacity_ms_per_step")
        .unwrap();
    assert!(!steps.svg.contains("\nno common window\n"));
    // The HTML report carries the plots inline, captioned.
    let html = renderer(ReportFormat::Html).report(&r).unwrap();
    assert!(html.contains("Capacity: aggregate decode rate"));
    assert!(html.contains("ringed = the knee"));
}

#[test]
fn a_run_without_concurrency_has_no_capacity_plots() {
    let plots = svg::report_plots(&fixture()).unwrap();
    assert!(!plots.is_empty());
    assert!(plots.iter().all(|p| !p.name.starts_with("capacity")));
    assert!(svg::capacity_plots(&fixture()).unwrap().is_empty());
}

#[test]
fn two_runs_with_the_same_maximum_share_one_extrapolation_legend_entry() {
    // readme-audit L15: a label beside each band overlapped when two runs' bands sat at
    // the same maximum context.
    let r = fixture();
    let bands = r
        .runs
        .iter()
        .filter_map(|x| x.ttft_fit.as_ref()?.extrapolation)
        .map(|e| e.context_tokens)
        .collect::<Vec<_>>();
    assert_eq!(bands, [131072, 131072]);
    for p in svg::report_plots(&r).unwrap().iter().take(4) {
        assert_eq!(count(&p.svg, "extrapolated"), 1, "{}", p.name);
        assert_eq!(count(&p.svg, "(90% band)"), 0, "{}", p.name);
    }
}

#[test]
fn capacity_map_table_markdown_and_html() {
    let r = capacity_fixture();
    insta::assert_snapshot!(
        "capacity_table",
        renderer(ReportFormat::Table).report(&r).unwrap()
    );
    let md = renderer(ReportFormat::Md).report(&r).unwrap();
    assert!(
        md.contains("| 1k | 98.00 | 192.0 | 368.0 | 240.0* |"),
        "{md}"
    );
    let html = renderer(ReportFormat::Html).report(&r).unwrap();
    assert!(html.contains("<td>queues→queued (8 of 16)</td>"), "{html}");
}

#[test]
fn a_grid_cell_whose_requests_failed_is_not_a_missed_prediction_but_a_warning() {
    let mut res = capacity_results();
    for s in res
        .samples
        .iter_mut()
        .filter(|s| s.context_tokens == 4096 && s.concurrency == Some(8))
    {
        s.status = Status::Failed;
        s.flags.retain(|f| *f != Flag::Queued);
    }
    let run = report::build_run("grid", "grid.jsonl", &res);
    let map = run.capacity.as_ref().unwrap();
    let cell = map
        .cells
        .iter()
        .find(|c| c.context_tokens == 4096 && c.concurrency == 8)
        .unwrap();
    assert_eq!((cell.failed, cell.requests), (16, 16));
    assert_eq!(cell.measured, "failed");
    assert!(map.mispredicted.is_empty(), "{:?}", map.mispredicted);
    let w: Vec<&str> = run.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(
        w.iter()
            .any(|m| m.starts_with("16 request(s) failed in the capacity grid (4k × 8: 16 of 16)")),
        "{w:?}"
    );
    assert!(!w
        .iter()
        .any(|m| m.contains("did not do what its limits predicted")));
}

#[test]
fn a_capacity_grid_is_priced_per_cell_at_its_aggregate_rate() {
    // $3.60 an hour is $0.001 a second: a cell decoding r tok/s costs 1000/r per M tokens.
    let r = capacity_fixture().with_price(Some(3.6));
    let run = &r.runs[0];
    let cost = run.cost.as_ref().expect("a cost table");
    let map = run.capacity.as_ref().expect("a capacity map");
    assert_eq!(cost.cells.len(), map.cells.len());
    let mut priced = 0;
    for (c, cell) in cost.cells.iter().zip(&map.cells) {
        assert_eq!(
            (c.context_tokens, c.concurrency),
            (cell.context_tokens, cell.concurrency)
        );
        match cell
            .aggregate_decode_tokens_per_s
            .or(cell.wave_output_tokens_per_s)
        {
            Some(rate) => {
                let usd = c.usd_per_m_output.expect("a rate gives a cost");
                assert!((usd - 1000.0 / rate).abs() < 1e-9 * usd, "{c:?} at {rate}");
                priced += 1;
            }
            None => assert_eq!(c.usd_per_m_output, None),
        }
    }
    assert!(priced >= 4, "{priced} cells priced");
    let text = renderer(ReportFormat::Table).report(&r).unwrap();
    assert!(text.contains("in each capacity cell"), "{text}");
    assert!(text.contains("c=8"), "{text}");
    let md = renderer(ReportFormat::Md).report(&r).unwrap();
    assert!(md.contains("in each capacity cell"), "{md}");
}

/// The fixture's model and machine: 1 GB of weights a step reads, 100 kB of KV cache per
/// token, 2 GFLOPs per prompt token and 100,000 × L² attention FLOPs, on 4000 GB/s and
/// 100 TFLOPs. Its steps (0.5 + 4e-4·L ms) cost 4e-4 ms × 4 TB/s = 1.6 MB per context
/// token: 16× the cache.
fn roofline_inputs(
    bandwidth: f64,
) -> (
    ctxbench_stats::roofline::Limits,
    ctxbench_schema::model::ModelFacts,
) {
    let limits = ctxbench_stats::roofline::Limits::resolve(None, Some(bandwidth), Some(100.0))
        .unwrap()
        .unwrap();
    let facts = ctxbench_schema::model::ModelFacts {
        source: "config.json".into(),
        weight_bytes: Some(1_000_000_000),
        kv_bytes_per_token: Some(100_000),
        flops_per_token: Some(2e9),
        attention_flops_per_token2: Some(1e5),
        ..Default::default()
    };
    (limits, facts)
}

#[test]
fn report_roofline_in_text_markdown_html_and_json() {
    let (limits, facts) = roofline_inputs(4000.0);
    let r = fixture().with_roofline(Some(&limits), Some(&facts));
    let roof = r.runs[0].roofline.as_ref().expect("a roofline");
    // 1k: (1 GB + 102 MB) / 4 TB/s = 0.276 ms against 0.5 + 0.41 ms measured: 30%.
    let d = roof.decode[0];
    assert!(
        (d.bound_ms - 0.2756).abs() < 1e-3 && (d.utilisation - 0.302).abs() < 0.005,
        "{d:?}"
    );
    let fit = roof.step_fit.as_ref().unwrap();
    assert!(
        (fit.kv_ratio().unwrap() - 16.0).abs() < 0.5 && fit.reads_far_more(),
        "{fit:?}"
    );
    insta::assert_snapshot!("roofline_table", crate::roofline::text(roof));
    let md = renderer(ReportFormat::Md).report(&r).unwrap();
    let section = &md[md.find("### Roofline").expect("the section")..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    insta::assert_snapshot!("roofline_markdown", section);
    let html = renderer(ReportFormat::Html).report(&r).unwrap();
    assert!(
        html.contains("Roofline: how far from the hardware"),
        "{html}"
    );
    assert!(
        html.contains("<td>30%</td>") || html.contains(">30%<"),
        "{html}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&renderer(ReportFormat::Json).report(&r).unwrap()).unwrap();
    let j = &json["runs"][0]["roofline"];
    assert_eq!(j["decode"].as_array().unwrap().len(), 5);
    assert!(
        j["decode_headroom"]["fraction"].as_f64().unwrap() < 0.1,
        "{j}"
    );
    assert!(
        j["step_fit"]["bytes_per_context_token"].as_f64().unwrap() > 1.5e6,
        "{j}"
    );
}

#[test]
fn an_impossible_roofline_is_a_warning_in_every_format_and_never_a_headroom_figure() {
    // 40 GB/s: a 0.9 ms step would have to read 1.1 GB at 1.2 TB/s.
    let (limits, facts) = roofline_inputs(40.0);
    let r = fixture().with_roofline(Some(&limits), Some(&facts));
    assert!(r.runs[0]
        .roofline
        .as_ref()
        .unwrap()
        .decode_headroom
        .is_none());
    for f in [
        ReportFormat::Table,
        ReportFormat::Md,
        ReportFormat::Html,
        ReportFormat::Json,
    ] {
        let out = renderer(f).report(&r).unwrap();
        assert!(
            out.contains("above 100% of the bound: check --memory-bandwidth"),
            "{f:?}: {out}"
        );
        assert!(!out.contains("of the bandwidth bound: up to"), "{f:?}");
    }
    let text = renderer(ReportFormat::Table).report(&r).unwrap();
    assert!(
        text.contains("impossible") && text.contains("WARNING: above 100%"),
        "{text}"
    );
}

#[test]
fn compare_roofline_side_by_side() {
    let (limits, facts) = roofline_inputs(4000.0);
    let sides = comparison_sides();
    let c = compare::build(&sides, false, &Default::default())
        .unwrap()
        .with_roofline(&sides, Some(&limits), Some(&facts));
    let roof = c.versus[0].roofline.as_ref().expect("a roofline");
    // B speculates: its ms/step is per token, so only A's fraction is shown.
    assert!(roof
        .rows
        .iter()
        .all(|r| r.a_decode.is_some() && r.b_decode.is_none()));
    assert!(roof
        .notes
        .iter()
        .any(|n| n.starts_with("B decodes speculatively")));
    insta::assert_snapshot!("roofline_compare_table", crate::roofline::versus_text(roof));
    let md = renderer(ReportFormat::Md).compare(&c).unwrap();
    assert!(
        md.contains("| context | bound ms | A bandwidth used |"),
        "{md}"
    );
    // Two plain sides: B 0.8× as slow took part of A's headroom.
    let plain: Vec<Vec<compare::Loaded>> = sides
        .into_iter()
        .map(|side| {
            side.into_iter()
                .map(|(l, p, mut r)| {
                    for s in &mut r.samples {
                        s.spec_accept_length = None;
                    }
                    (l, p, r)
                })
                .collect()
        })
        .collect();
    let c = compare::build(&plain, false, &Default::default())
        .unwrap()
        .with_roofline(&plain, Some(&limits), Some(&facts));
    let roof = c.versus[0].roofline.as_ref().unwrap();
    let line = roof.headroom_line().expect("a headroom line");
    assert!(
        line.starts_with("B took ") && line.contains("of A's decode headroom at 16k"),
        "{line}"
    );
    let text = renderer(ReportFormat::Table).compare(&c).unwrap();
    assert!(text.contains(&line), "{text}");
}

#[test]
fn a_predicted_length_has_its_own_marked_row_in_the_main_table_between_the_measured_ones() {
    let t = render_designed_with_a_prediction(ReportFormat::Table);
    let table: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("context "))
        .take_while(|l| !l.is_empty())
        .collect();
    let ctx: Vec<&str> = table
        .iter()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ctx, ["1k", "2k", "4k", "8k", "12k", "16k"], "{t}");
    let row = table
        .iter()
        .find(|l| l.starts_with("12k"))
        .expect("12k row");
    assert!(row.contains("pred."), "{row}");
    assert!(
        row.contains("PREDICTED, not measured (fits of 1k, 2k, 4k, 8k, 16k)"),
        "{row}"
    );
    // TTFT = 20 + 0.05·L + 8e-6·L² at 12k: 1842 ms, stated with an interval.
    assert!(row.contains("1842 ±"), "{row}");
    let md = render_designed_with_a_prediction(ReportFormat::Md);
    let md_row = md
        .lines()
        .find(|l| l.starts_with("| 12k"))
        .expect("12k row in the Markdown results");
    assert!(md_row.contains("PREDICTED, not measured"), "{md_row}");
}

#[test]
fn report_designed_with_a_prediction_table() {
    insta::assert_snapshot!(render_designed_with_a_prediction(ReportFormat::Table));
}

#[test]
fn report_designed_with_a_prediction_markdown() {
    insta::assert_snapshot!(render_designed_with_a_prediction(ReportFormat::Md));
}

/// The llm-d Benchmark Report v0.2.1 schema, as llm-d-benchmark publishes it
/// (tests/fixtures/llmd/SOURCE.md).
fn llmd_validator() -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/llmd/br_v0_2_1_json_schema.json"
    );
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn assert_valid(v: &jsonschema::Validator, doc: &serde_json::Value) {
    let errors: Vec<String> = v.iter_errors(doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
}

#[test]
fn llmd_br_documents_are_valid_one_per_point_sharing_the_run_id() {
    let v = llmd_validator();
    let docs = crate::llmd::documents(&results("base", 1.0, None), "base.jsonl");
    assert_eq!(docs.len(), 5, "one per context");
    for d in &docs {
        assert_valid(&v, d);
        assert_eq!(d["run"]["eid"], "base");
        assert_eq!(d["version"], "0.2.1");
    }
    // 4k: three cold samples and one cache hit, which is counted and left out.
    let d = &docs[2];
    let agg = &d["results"]["request_performance"]["aggregate"];
    assert_eq!(agg["requests"]["total"], 4);
    let ttft = &agg["latency"]["time_to_first_token"];
    assert_eq!(ttft["units"], "s");
    let median_ms = 20.0 + 0.05 * 4096.0 + 8e-6 * 4096.0 * 4096.0;
    assert!(
        (ttft["p50"].as_f64().unwrap() - median_ms / 1000.0).abs() < 1e-9,
        "{ttft}"
    );
    // Three samples bound no tail: no p90 is claimed, and the profiling says why.
    assert!(
        ttft.get("p90").is_none() && ttft.get("p99").is_none(),
        "{ttft}"
    );
    let facts = &d["results"]["profiling"]["ctxbench"];
    assert_eq!(facts["cold_proof"]["cache_hits_excluded"], 1);
    assert_eq!(
        facts["tails"]["time_to_first_token_ms"]["levels"][2]["needed"],
        299
    );
    // The schema is strict: a field it does not name is refused.
    let mut bad = d.clone();
    bad["run"]["ctxbench_note"] = serde_json::json!("x");
    assert!(!v.is_valid(&bad));
}

#[test]
fn llmd_br_of_a_grid_has_a_document_per_cell_and_tails_where_n_allows() {
    let v = llmd_validator();
    let docs = crate::llmd::documents(&capacity_results(), "grid.jsonl");
    assert_eq!(docs.len(), 8, "2 contexts × 4 levels");
    for d in &docs {
        assert_valid(&v, d);
    }
    let c: Vec<_> = docs
        .iter()
        .map(|d| d["scenario"]["load"]["standardized"]["concurrency"].clone())
        .collect();
    assert_eq!(c[..4], [1, 2, 4, 8].map(serde_json::Value::from));
    // 40 values: p90 has its interval, p95 and p99 do not.
    let s =
        crate::llmd::statistics(&(1..=40).map(f64::from).collect::<Vec<_>>(), "s", 1.0).unwrap();
    assert!(s.get("p90").is_some() && s.get("p95").is_none() && s.get("p99").is_none());
    assert_eq!(s["mean"], 20.5);
}
