//! `report` and `compare` on results files from real sweeps against the reference
//! llama-server, and the HTML report rendered by a real browser (headless Chromium).

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{run, serial, sweep_shared, sweep_to, RefServer, SweepRun};
use serde_json::Value;

/// Two real sweeps, made once per test binary: `a` (1k,2k,4k × 2 reps) and `short`
/// (1k,2k × 1 rep, so it does not match `a`). The file names are the runs' names in reports.
struct Runs {
    a: SweepRun,
    short: SweepRun,
}

fn runs() -> &'static Runs {
    static R: OnceLock<Runs> = OnceLock::new();
    R.get_or_init(|| {
        let _g = serial();
        let srv = RefServer::start(8192, &[]);
        let a = sweep_shared(
            "a.jsonl",
            &srv.url(),
            &["--contexts", "1k,2k,4k", "--reps", "2", "--quiet"],
        )
        .ok();
        let short = sweep_shared(
            "short.jsonl",
            &srv.url(),
            &["--contexts", "1k,2k", "--reps", "1", "--quiet"],
        )
        .ok();
        Runs { a, short }
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_sweep_writes_its_report_beside_the_results() {
    let r = runs();
    let md = r.a.out.with_extension("md");
    let html = r.a.out.with_extension("html");
    let plots = r.a.out.with_file_name("a-plots");
    let md_text = std::fs::read_to_string(&md).expect("markdown report written by the sweep");
    assert!(md_text.contains("| 4k | 2/2 |"), "{md_text}");
    assert!(md_text.contains("TTFT(L) ≈"), "{md_text}");
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    for name in [
        "ttft_ms",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "ms_per_step",
    ] {
        let svg = std::fs::read_to_string(plots.join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{name}");
    }
    // The fits are printed after the summary table.
    assert!(r.a.stdout.contains("fits for a"), "{}", r.a.stdout);
    assert!(r.a.stdout.contains("ms/step(L) ≈"), "{}", r.a.stdout);
}

#[test]
fn report_json_has_fits_with_nonnegative_coefficients_and_an_extrapolation() {
    let r = runs();
    let (code, stdout, stderr) = run(&["report", s(&r.a.out), "--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let run0 = &v["runs"][0];
    assert_eq!(run0["points"].as_array().unwrap().len(), 3);
    for key in ["ttft_fit", "step_fit"] {
        let f = &run0[key];
        let coef = f["fit"]["coef"].as_array().expect(key);
        assert!(coef.iter().all(|c| c.as_f64().unwrap() >= 0.0), "{f}");
        assert_eq!(f["fit"]["n"], 6);
        assert_eq!(f["fit"]["residuals"].as_array().unwrap().len(), 3);
        // The server's maximum (8192) is beyond the largest point (4096).
        let e = &f["extrapolation"];
        assert_eq!(e["context_tokens"], 8192, "{f}");
        assert!(e["low"].as_f64().unwrap() <= e["predicted"].as_f64().unwrap());
        assert!(e["predicted"].as_f64().unwrap() <= e["high"].as_f64().unwrap());
    }
    assert_eq!(run0["ttft_fit"]["fit"]["coef"].as_array().unwrap().len(), 3);
    assert_eq!(run0["step_fit"]["fit"]["coef"].as_array().unwrap().len(), 2);
}

#[test]
fn report_csv_and_table_and_plots() {
    let r = runs();
    let (code, csv, _) = run(&["report", s(&r.a.out), s(&r.short.out), "--format", "csv"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 3 + 2, "{csv}");
    assert!(lines[1].starts_with("a,1024,2,2,"), "{csv}");
    assert!(lines[4].starts_with("short,1024,1,1,"), "{csv}");
    let dir = tempfile::tempdir().unwrap();
    let (code, table, stderr) = run(&["report", s(&r.a.out), "--plots", s(dir.path())]);
    assert_eq!(code, 0, "{stderr}");
    assert!(table.lines().any(|l| l.starts_with("4k ")), "{table}");
    assert!(std::fs::read_to_string(dir.path().join("ttft_ms.svg"))
        .unwrap()
        .contains("</svg>"));
    // Two context lengths cannot carry a quadratic fit: said, not faked.
    let (_, short_table, _) = run(&["report", s(&r.short.out)]);
    assert!(
        short_table.contains("a quadratic fit needs 3"),
        "{short_table}"
    );
}

#[test]
fn compare_a_run_with_itself_finds_no_difference() {
    let r = runs();
    let (code, stdout, stderr) = run(&["compare", s(&r.a.out), s(&r.a.out), "--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let rows = v["versus"][0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3 * 4);
    // One run of 2 samples per side: a ratio, but too few samples for a verdict.
    for row in rows {
        assert_eq!(row["ratio"].as_f64(), Some(1.0), "{row}");
        assert_eq!(row["verdict"], "too_few_samples", "{row}");
    }
    // The same run three times per side: runs as the unit, no difference.
    let a = s(&r.a.out);
    let (code, stdout, stderr) = run(&[
        "compare", "--a", a, a, a, "--b", a, a, a, "--format", "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["versus"][0]["basis"], "runs");
    for row in v["versus"][0]["rows"].as_array().unwrap() {
        assert_eq!(row["verdict"], "no_significant_difference", "{row}");
        assert_eq!(row["n_a"], 3, "{row}");
    }
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("ab.svg");
    let (code, md, _) = run(&[
        "compare",
        s(&r.a.out),
        s(&r.a.out),
        "--format",
        "md",
        "--plot",
        s(&plot),
    ]);
    assert_eq!(code, 0);
    assert!(md.contains("| 2k | TTFT |"), "{md}");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("</svg>"));
}

#[test]
fn compare_refuses_runs_with_different_points_unless_told() {
    let r = runs();
    let (code, _, stderr) = run(&["compare", s(&r.a.out), s(&r.short.out)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("context points differ"), "{stderr}");
    assert!(stderr.contains("--allow-mismatch"), "{stderr}");
    let (code, stdout, stderr) = run(&[
        "compare",
        s(&r.a.out),
        s(&r.short.out),
        "--allow-mismatch",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let rows = v["versus"][0]["rows"].as_array().unwrap();
    // Only the common points, and one sample in `short` is too few for an interval.
    assert_eq!(rows.len(), 2 * 4);
    assert!(
        rows.iter().all(|r| r["verdict"] == "too_few_samples"),
        "{stdout}"
    );
}

#[test]
fn report_of_a_missing_file_names_it() {
    let (code, _, stderr) = run(&["report", "/nonexistent/r.jsonl"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("/nonexistent/r.jsonl"), "{stderr}");
}

/// Renders the sweep's HTML report in headless Chromium and checks the screenshot: the
/// page must be drawn, and the plots' colours must be on it (the SVG rendered).
#[test]
fn the_html_report_renders_in_a_real_browser() {
    let r = runs();
    let html = r.a.out.with_extension("html");
    let chromium = which("chromium").expect(
        "chromium is required for this test: run scripts/install-test-deps (Debian package chromium)",
    );
    let dir = tempfile::tempdir().unwrap();
    let png_path = dir.path().join("shot.png");
    let profile = dir.path().join("profile");
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png_path.display()))
        .arg("--window-size=1200,1600")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("run chromium");
    assert!(
        png_path.exists(),
        "no screenshot; chromium said: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 1600));
    let bytes = &buf[..info.buffer_size()];
    let channels = info.color_type.samples();
    let pixels: Vec<&[u8]> = bytes.chunks(channels).collect();
    // The first run's colour (Okabe-Ito blue 0,114,178) appears only if the SVG plots drew.
    let blue = pixels
        .iter()
        .filter(|p| p[0].abs_diff(0) < 12 && p[1].abs_diff(114) < 12 && p[2].abs_diff(178) < 12)
        .count();
    assert!(
        blue > 200,
        "plot colour barely present ({blue} px): plots did not render"
    );
    // Text and tables: many dark pixels, and the page is not one flat colour.
    let dark = pixels
        .iter()
        .filter(|p| p[0] < 80 && p[1] < 80 && p[2] < 80)
        .count();
    assert!(dark > 2000, "too little text drawn ({dark} px)");
    let _ = std::fs::copy(
        &png_path,
        std::env::temp_dir().join("ctxbench-report-screenshot.png"),
    );
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

#[test]
fn labelled_runs_are_named_by_their_label_and_compare_lists_the_change() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let args = |label: &'static str| ["--contexts", "1k,2k", "--reps", "2", "--label", label];
    let base = sweep_to("x.jsonl", &srv.url(), &args("-t 2")).ok();
    let cand = sweep_to("y.jsonl", &srv.url(), &args("draft window 4096")).ok();
    assert_eq!(base.results().header.label.as_deref(), Some("-t 2"));
    let (code, out, err) = run(&[
        "compare",
        base.out.to_str().unwrap(),
        cand.out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("B = draft window 4096 vs A = -t 2"), "{out}");
    assert!(
        out.contains(r#"label: "-t 2" -> "draft window 4096""#),
        "{out}"
    );
    // The report names runs by label too.
    let (code, out, err) = run(&[
        "report",
        base.out.to_str().unwrap(),
        cand.out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("draft window 4096"), "{out}");
}

#[test]
fn one_sample_per_length_gives_no_extrapolation_band_and_says_so() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let one = sweep_to(
        "one.jsonl",
        &srv.url(),
        &["--contexts", "1k,2k,4k", "--reps", "1"],
    )
    .ok();
    assert!(one.stdout.contains("EXTRAPOLATED"), "{}", one.stdout);
    assert!(
        one.stdout.contains("no band: one sample per length"),
        "a zero-width band must not pass for certainty: {}",
        one.stdout
    );
    assert!(!one.stdout.contains("90% band"), "{}", one.stdout);
}

#[test]
fn report_format_llmd_br_writes_a_document_per_point_sharing_the_run_id() {
    let r = runs();
    let (code, stdout, stderr) = run(&["report", s(&r.a.out), "--format", "llmd-br"]);
    assert_eq!(code, 0, "{stderr}");
    let docs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 3, "one per context: {stdout}");
    let eid = &docs[0]["run"]["eid"];
    for (d, ctx) in docs.iter().zip([1024, 2048, 4096]) {
        assert_eq!(d["version"], "0.2.1");
        assert_eq!(&d["run"]["eid"], eid);
        assert_eq!(
            d["scenario"]["load"]["standardized"]["input_seq_len"]["value"],
            ctx
        );
        let ttft =
            &d["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"];
        // Seconds: the reference server's TTFTs at these lengths are well under 60 s.
        assert_eq!(ttft["units"], "s");
        assert!(ttft["mean"].as_f64().unwrap() < 60.0, "{ttft}");
        assert!(ttft.get("p99").is_none(), "2 samples bound no p99: {ttft}");
    }
    // With --out, a folder of one file per point; a comparison has no such form.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("br");
    let (code, _, stderr) = run(&[
        "report",
        s(&r.a.out),
        "--format",
        "llmd-br",
        "--out",
        s(&out),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 3);
    let (code, _, stderr) = run(&["compare", s(&r.a.out), s(&r.a.out), "--format", "llmd-br"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("llmd-br"), "{stderr}");
}
