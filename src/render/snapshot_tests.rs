//! Snapshot tests of every renderer. The input is a constructed report (samples made from a
//! formula, not measurements): these tests pin formatting, not numbers from a server.

use serde_json::json;

use super::{renderer, svg};
use crate::cli::ReportFormat;
use crate::compare::{self, Comparison};
use crate::record::{Host, Results, RunHeader, Sample, Status, SCHEMA_VERSION};
use crate::report::{self, Report};

fn header(run_id: &str, contexts: &[u64]) -> RunHeader {
    RunHeader {
        kind: "run".into(),
        schema: SCHEMA_VERSION,
        run_id: run_id.into(),
        ctxbench_version: "0.1.0".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        host: Host {
            hostname: "fixture".into(),
            os: "linux".into(),
            arch: "x86_64".into(),
            cpus: 2,
        },
        config: json!({"backend": "llamacpp", "contexts": contexts, "corpus": {"kind": "repeat"},
            "method": "stream", "output_tokens": 32, "reps": 3, "seed": 0, "cache_bypass": true,
            "url": "http://127.0.0.1:8080"}),
        server: json!({"server_kind": "llama.cpp", "server_version": "b1", "model": "tiny.gguf",
            "max_context": 131072, "max_context_source": "/props", "url": "http://127.0.0.1:8080"}),
        corpus: json!({"label": "repeat (synthetic: inflates speculative acceptance)", "tokens": 3000}),
        label: None,
    }
}

/// A sample whose timings follow TTFT = 20 + 0.05L + 8e-6 L² ms and step = 0.5 + 4e-4 L ms,
/// scaled by `speed` and jittered by rep.
fn sample(run_id: &str, c: u64, rep: u32, speed: f64, accept: Option<f64>) -> Sample {
    let l = c as f64;
    let jitter = [1.0, 1.03, 0.98][rep as usize % 3];
    let ttft = (20.0 + 0.05 * l + 8e-6 * l * l) * speed * jitter;
    let step = (0.5 + 4e-4 * l) * speed * jitter;
    Sample {
        kind: "sample".into(),
        run_id: run_id.into(),
        context_tokens: c,
        rep,
        phase: "cold".into(),
        status: Status::Ok,
        error: None,
        at: "2026-01-01T00:00:01Z".into(),
        prompt_tokens_sent: c,
        prompt_tokens: Some(c),
        length_ok: Some(true),
        cached_tokens: Some(0),
        cache_verified: true,
        contaminated: false,
        ttft_ms: Some(ttft),
        prefill_tokens_per_s: Some(l / (ttft / 1000.0)),
        decode_tokens_per_s: Some(1000.0 / step),
        ms_per_step: Some(step),
        output_tokens: Some(32),
        token_chunks: Some(32),
        e2e_ms: Some(ttft + 31.0 * step),
        finish_reason: Some("limit".into()),
        flags: vec![],
        server: None,
        spec_accept_length: accept.map(|a| a - l / 65536.0),
        method: "stream".into(),
        ..Default::default()
    }
}

fn results(run_id: &str, speed: f64, accept: Option<f64>) -> Results {
    let contexts = [1024, 2048, 4096, 8192, 16384];
    let mut samples: Vec<Sample> = contexts
        .iter()
        .flat_map(|&c| (0..3).map(move |r| (c, r)))
        .map(|(c, r)| sample(run_id, c, r, speed, accept))
        .collect();
    // One cache hit, to show that it is reported and excluded.
    let mut hit = sample(run_id, 4096, 3, 0.01, accept);
    hit.contaminated = true;
    hit.cached_tokens = Some(4000);
    samples.push(hit);
    // A decode-at-depth sample: counted in a warning, kept out of tables and fits.
    let mut warm = sample(run_id, 16384, 3, 0.001, accept);
    warm.phase = "warm".into();
    samples.push(warm);
    Results {
        header: header(run_id, &contexts),
        samples,
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
    compare::build(&loaded, false, 500, 0.95, 0.05).expect("comparable")
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
    assert!(r.runs[0].warnings.iter().any(|w| w.kind == "other_phase"));
    assert_eq!(
        r.runs[0].points[4].samples, 3,
        "warm sample kept out of the table"
    );
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
    // B is 0.8× A everywhere with 3 reps of ±3% jitter: clearly faster at every point.
    for r in &v.rows {
        assert_eq!(r.verdict, compare::Verdict::Faster, "{r:?}");
    }
}

#[test]
fn a_top_point_above_the_fit_warns_that_the_extrapolation_is_low() {
    // TTFT growing like L^2.3 (as the reference server does past 64k on 2 cores): the
    // quadratic fit falls short at the largest length.
    let mut r = results("r3", 1.0, None);
    for s in &mut r.samples {
        let l = s.context_tokens as f64;
        s.ttft_ms = Some(5.0 + 1e-7 * l.powf(2.3));
    }
    let report = report::build(&[("steep".to_owned(), "steep.jsonl".to_owned(), r)]);
    let text = super::table::fits_text(&report);
    assert!(text.contains("above the fit"), "{text}");
    assert!(text.contains("likely too low"), "{text}");
    // The fixture's exact quadratic carries no such warning.
    assert!(!super::table::fits_text(&fixture()).contains("above the fit"));
}
