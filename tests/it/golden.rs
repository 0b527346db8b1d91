//! Results files recorded by an earlier ctxbench against the reference llama-server
//! (`crates/schema/testdata/golden/`, see its README) still read, losslessly, and render as text a
//! person would write. The schema document names every field they hold.

use std::path::{Path, PathBuf};

use ctxbench_render::{renderer, ReportFormat};
use ctxbench_schema::record::{self, Line, Phase, Results};
use ctxbench_stats::report;
use serde_json::Value;

const FILES: [&str; 5] = [
    "sweep.jsonl",
    "two-point.jsonl",
    "contaminated.jsonl",
    "precision.jsonl",
    "needle.jsonl",
];

fn path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/schema/testdata/golden")
        .join(name)
}

fn read(name: &str) -> Results {
    record::read_results(&path(name), false).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn rendered(name: &str, format: ReportFormat) -> String {
    let r = report::build(&[(name.to_owned(), name.to_owned(), read(name))]);
    renderer(format).report(&r).unwrap()
}

#[test]
fn every_line_of_every_golden_file_reads_into_the_typed_schema_and_writes_back_the_same() {
    for name in FILES {
        let text = std::fs::read_to_string(path(name)).unwrap();
        let mut kinds = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let original: Value = serde_json::from_str(line).unwrap();
            let typed: Line =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1));
            assert!(!matches!(typed, Line::Unknown), "{name}:{}", i + 1);
            // Nothing is lost or invented: the typed line serializes to the same JSON.
            assert_eq!(
                serde_json::to_value(&typed).unwrap(),
                original,
                "{name}:{}",
                i + 1
            );
            kinds.push(original["type"].as_str().unwrap().to_owned());
        }
        assert_eq!(kinds[0], "run", "{name}");
        assert!(kinds.iter().any(|k| k == "sample"), "{name}");
        assert!(kinds.iter().any(|k| k == "point"), "{name}");
        assert_eq!(kinds.last().map(String::as_str), Some("end"), "{name}");
    }
}

#[test]
fn golden_files_report_in_words_not_json() {
    for name in FILES {
        for f in [ReportFormat::Md, ReportFormat::Html, ReportFormat::Table] {
            let out = rendered(name, f);
            for raw in ["{\"", "\":", "rep(s)", "null", "[\""] {
                assert!(!out.contains(raw), "{name} {f:?} shows {raw:?}:\n{out}");
            }
        }
    }
    let md = rendered("sweep.jsonl", ReportFormat::Md);
    assert!(
        md.contains("contexts 1k, 2k, 2 reps (fixed), 32 output tokens"),
        "{md}"
    );
    let html = rendered("sweep.jsonl", ReportFormat::Html);
    assert!(
        html.contains("<dt>corpus</dt><dd>repeat (synthetic)</dd>"),
        "{html}"
    );
    // Files of this age recorded the first flush's answer where the choice now goes.
    assert!(
        html.contains("<dt>flush</dt><dd>llama.cpp slot erase (2 slot(s), 0 tokens erased)</dd>"),
        "{html}"
    );
    assert!(
        html.contains("<dt>repetitions</dt><dd>2 reps (fixed)</dd>"),
        "{html}"
    );
    // A null is said in words.
    assert!(
        html.contains("<dt>KV pool</dt><dd>not reported</dd>"),
        "{html}"
    );
    let tp = rendered("two-point.jsonl", ReportFormat::Md);
    assert!(tp.contains("two-point A 1 / B 17 output tokens"), "{tp}");
    assert!(tp.contains("method two-point"), "{tp}");
}

#[test]
fn decode_at_depth_is_reported_from_the_results_file_alone() {
    let r = read("sweep.jsonl");
    let warm = r.samples.iter().filter(|s| s.phase == Phase::Warm).count();
    assert_eq!(warm, 4, "--decode-samples 1 after each of 4 cold samples");
    let md = rendered("sweep.jsonl", ReportFormat::Md);
    assert!(md.contains("### Decode at depth"), "{md}");
    assert!(md.contains("| 2k | 2 |"), "{md}");
    assert!(!md.contains("not in this report"), "{md}");
    let html = rendered("sweep.jsonl", ReportFormat::Html);
    assert!(html.contains("<h3>Decode at depth</h3>"));
    let table = rendered("sweep.jsonl", ReportFormat::Table);
    assert!(table.contains("decode at depth (warm"), "{table}");
}

#[test]
fn needle_checks_and_fingerprints_are_reported_from_the_results_file_alone() {
    let r = read("needle.jsonl");
    let needles = r
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Needle)
        .count();
    assert_eq!(needles, 6, "3 default depths at each of 2 contexts");
    assert!(r.samples.iter().all(|s| s.output_fingerprint.is_some()));
    let md = rendered("needle.jsonl", ReportFormat::Md);
    assert!(md.contains("### Needle retrieval"), "{md}");
    assert!(md.contains("| 2k | 0/1 | 0/1 | 0/1 |"), "{md}");
    assert!(!md.contains("not in this report"), "{md}");
    // Needle samples stay out of the speed table: 2 cold usable samples per point.
    assert!(md.contains("| 2k | 2/2 |"), "{md}");
}

#[test]
fn a_precision_run_shows_why_each_point_stopped() {
    let r = read("precision.jsonl");
    assert!(r.header.config.reps.precision.is_some());
    assert_eq!(r.points.len(), r.header.config.contexts.len());
    let md = rendered("precision.jsonl", ReportFormat::Md);
    assert!(md.contains("| context | repetitions |"), "{md}");
    let reason = r.points[0].stop_reason.to_string();
    assert!(md.contains(&reason), "{reason} missing:\n{md}");
    // A fixed-repetition run has nothing to explain.
    assert!(!rendered("sweep.jsonl", ReportFormat::Md).contains("| context | repetitions |"));
}

#[test]
fn a_contaminated_run_is_explained_in_the_legend() {
    let r = read("contaminated.jsonl");
    assert!(r.samples.iter().any(|s| s.contaminated));
    let md = rendered("contaminated.jsonl", ReportFormat::Md);
    assert!(
        md.contains("Excluded: cached: the server reused a cached prefix"),
        "{md}"
    );
}

/// Every key of a JSON object, recursively (`metrics` holds counter names, not fields).
fn keys(v: &Value, out: &mut Vec<String>) {
    if let Value::Object(o) = v {
        for (k, x) in o {
            out.push(k.clone());
            if k != "metrics" {
                keys(x, out);
            }
        }
    }
}

#[test]
fn the_schema_document_names_every_field_the_sweep_writes() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results-schema.md"),
    )
    .unwrap();
    let mut all = Vec::new();
    for name in FILES {
        for line in std::fs::read_to_string(path(name)).unwrap().lines() {
            keys(&serde_json::from_str(line).unwrap(), &mut all);
        }
    }
    all.sort();
    all.dedup();
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !doc.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/results-schema.md: {missing:?}"
    );
}

/// The synthetic-corpus warning is about speculative acceptance: only a run with speculative
/// statistics gets it (readme-audit L1).
#[test]
fn the_synthetic_corpus_warning_appears_only_with_speculative_statistics() {
    let kinds = |r: &Results| -> Vec<&'static str> {
        report::build_run("r", "r.jsonl", r)
            .warnings
            .iter()
            .map(|w| w.kind)
            .collect()
    };
    let plain = read("sweep.jsonl");
    assert!(plain.header.corpus.label.contains("synthetic"));
    assert!(
        !kinds(&plain).contains(&"synthetic_corpus"),
        "{:?}",
        kinds(&plain)
    );
    let mut spec = plain.clone();
    for s in &mut spec.samples {
        s.spec_accept_length = Some(3.0);
    }
    assert!(
        kinds(&spec).contains(&"synthetic_corpus"),
        "{:?}",
        kinds(&spec)
    );
}

/// With one sample on a side there is no interval: compare prints none next to "too few
/// samples" (readme-audit L17), in every format that shows intervals.
#[test]
fn compare_prints_no_interval_for_too_few_samples() {
    let a = read("sweep.jsonl");
    let mut b = a.clone();
    // Keep one cold sample per context in B.
    let mut seen = std::collections::HashSet::new();
    b.samples
        .retain(|s| s.phase != Phase::Cold || seen.insert(s.context_tokens));
    let sides = [
        vec![("a".to_owned(), "a.jsonl".to_owned(), a)],
        vec![("b".to_owned(), "b.jsonl".to_owned(), b)],
    ];
    let settings = ctxbench_stats::stats::significance::Settings::default();
    let cmp = ctxbench_stats::compare::build(&sides, false, &settings).unwrap();
    let rows = &cmp.versus[0].rows;
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(
            r.verdict,
            ctxbench_stats::stats::significance::Verdict::TooFewSamples,
            "{r:?}"
        );
        assert_eq!(r.shown_interval(), None);
    }
    for f in [ReportFormat::Table, ReportFormat::Md, ReportFormat::Html] {
        let out = renderer(f).compare(&cmp).unwrap();
        assert!(out.contains("too few samples"), "{f:?}: {out}");
        assert!(!out.contains("1.000–1.000"), "{f:?}: {out}");
    }
}
