//! Documented options that no other test exercised, each against the real reference
//! llama-server (docs/promises.md lists them). Kept cheap: 1k–2k contexts, 1–3 reps,
//! 4–8 output tokens.

use crate::common;

use std::path::Path;

use common::{argv, ctxbench, run, serial, sweep, sweep_to, RefServer};
use ctxbench_schema::record::{CorpusSpec, Status, StopReason};
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Prose long enough for a 1k prompt, in words the tiny model's tokenizer splits normally.
fn prose(words: usize, salt: &str) -> String {
    let vocab = [
        "river", "stone", "morning", "letter", "garden", "window", "quiet", "market", "winter",
        "harbour", "lantern", "meadow", "thread", "copper", "orchard", "signal",
    ];
    (0..words)
        .map(|i| vocab[(i * 7 + i / 5) % vocab.len()])
        .collect::<Vec<_>>()
        .join(" ")
        + salt
}

#[test]
fn corpus_random_and_seed_are_recorded_and_give_exact_lengths() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--corpus",
            "random",
            "--seed",
            "7",
            "--contexts",
            "1k",
            "--reps",
            "1",
            "--output-tokens",
            "4",
        ],
    )
    .ok();
    let r = run.results();
    assert_eq!(r.header.config.corpus, CorpusSpec::Random);
    assert_eq!(r.header.config.seed, 7);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert_eq!(s.prompt_tokens, Some(1024), "{s:?}");
    }
}

#[test]
fn corpus_path_reads_a_file_and_every_file_of_a_folder() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.txt");
    std::fs::write(&file, prose(1500, " end of one.")).unwrap();
    let folder = dir.path().join("texts");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("a.txt"), prose(400, " end of a.")).unwrap();
    std::fs::write(folder.join("b.md"), prose(400, " end of b.")).unwrap();
    let mut tokens = Vec::new();
    for path in [&file, &folder] {
        let run = sweep(
            &srv.url(),
            &[
                "--corpus",
                s(path),
                "--contexts",
                "1k",
                "--reps",
                "1",
                "--output-tokens",
                "4",
            ],
        )
        .ok();
        let r = run.results();
        assert_eq!(r.header.config.corpus, CorpusSpec::Path(path.to_path_buf()));
        assert!(r.header.corpus.tokens > 500, "{:?}", r.header.corpus);
        assert_eq!(r.samples[0].status, Status::Ok, "{:?}", r.samples[0]);
        assert_eq!(r.samples[0].prompt_tokens, Some(1024));
        tokens.push(r.header.corpus.tokens);
    }
    // The folder's two files are 800 words, the single file 1500: both were read whole.
    assert!(
        tokens[0] > tokens[1],
        "file {} vs folder {}",
        tokens[0],
        tokens[1]
    );
    let (code, _, stderr) = run(&[
        "sweep",
        "--url",
        &srv.url(),
        "--corpus",
        s(&dir.path().join("missing.txt")),
        "--contexts",
        "1k",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("missing.txt"), "{stderr}");
}

#[test]
fn the_results_header_and_report_name_the_version_and_commit_that_measured_and_price_tokens() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let swept = sweep(
        &srv.url(),
        &argv("--contexts 1k --reps 1 --output-tokens 16"),
    )
    .ok();
    let h = swept.results().header;
    assert_eq!(h.ctxbench_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(h.ctxbench_commit.as_deref(), Some(ctxbench_session::COMMIT));
    assert_ne!(
        ctxbench_session::COMMIT,
        "unknown",
        "the tests run in a git checkout"
    );
    let (code, report, stderr) = run(&["report", swept.out.to_str().unwrap(), "--format", "md"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        report.contains(&format!("ctxbench {}", ctxbench_session::VERSION)),
        "{report}"
    );
}

#[test]
fn model_name_is_recorded_as_given() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--backend",
            "openai",
            "--model",
            "my-model",
            "--contexts",
            "1k",
            "--reps",
            "1",
            "--output-tokens",
            "4",
        ],
    )
    .ok();
    assert_eq!(
        run.results().header.config.model.as_deref(),
        Some("my-model")
    );
}

#[test]
fn metrics_url_takes_a_url_a_path_or_off_and_one_that_does_not_answer_is_flagged() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let base = ["--contexts", "1k", "--reps", "2", "--output-tokens", "4"];
    let metrics_of = |choice: &str| {
        let run = sweep(
            &srv.url(),
            &[&base[..], &["--metrics-url", choice]].concat(),
        )
        .ok();
        let r = run.results();
        (r, run.stderr)
    };
    let url = format!("{}/metrics", srv.url());
    for choice in [url.as_str(), "/metrics"] {
        let (r, _) = metrics_of(choice);
        for s in &r.samples {
            let m = s
                .metrics
                .as_ref()
                .unwrap_or_else(|| panic!("{choice}: {s:?}"));
            assert!(
                m.keys()
                    .any(|k| k.starts_with("llamacpp:prompt_tokens_total")),
                "{choice}: {m:?}"
            );
        }
    }
    let (r, _) = metrics_of("off");
    assert!(r.samples.iter().all(|s| s.metrics.is_none()));
    let (r, stderr) = metrics_of("/nope");
    assert!(
        r.samples
            .iter()
            .all(|s| s.flags.iter().any(|f| f == "metrics_unavailable")),
        "{:?}",
        r.samples
    );
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not answer"))
        .collect();
    assert_eq!(warned.len(), 1, "one warning: {stderr}");
    assert!(
        warned[0].contains("--metrics-url") && warned[0].contains("/nope"),
        "{stderr}"
    );
}

#[test]
fn ctxbench_url_short_out_and_quiet_run_a_sweep_without_url_flag() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env.jsonl");
    let o = ctxbench()
        .args([
            "sweep",
            "--contexts",
            "1k",
            "--reps",
            "1",
            "--output-tokens",
            "4",
            "-q",
            "-o",
        ])
        .arg(&out)
        .env("CTXBENCH_URL", srv.url())
        .env_remove("CTXBENCH_API_KEY")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let r = ctxbench_schema::record::read_results(&out, false).unwrap();
    assert_eq!(r.header.config.url, srv.url());
    assert_eq!(r.samples.len(), 1);
    assert!(stdout.contains("1k"), "the final table: {stdout}");
    // -q: no plan line and no per-sample progress lines.
    assert!(!stderr.contains("plan:"), "{stderr}");
}

#[test]
fn without_contexts_the_plan_is_the_default_ladder_under_the_servers_context() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let run = sweep(&srv.url(), &["--dry-run", "--output-tokens", "4"]).ok();
    // 8192 − output − margin: 1k, 2k, 4k, then the top near 7k.
    let all = format!("{}{}", run.stdout, run.stderr);
    let rows: Vec<&str> = all
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.ends_with('k') && w[..w.len() - 1].parse::<u32>().is_ok())
        .collect();
    assert_eq!(rows, ["1k", "2k", "4k", "7k"], "{all}");
}

#[test]
fn point_and_run_budgets_from_the_command_line_stop_precision_points() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let precise = [
        "--precision",
        "0.0001",
        "--min-reps",
        "2",
        "--max-reps",
        "10000",
        "--output-tokens",
        "4",
    ];
    // A budget of several requests beyond --min-reps (a 1k request takes 0.1–2 s on a
    // loaded 2-core machine); the point stops when the next request would overrun it. The
    // cap (the largest allowed) is out of reach in 8 s: that takes a 1k request in 0.8 ms,
    // where a cap of 1000 stops a host that answers in 8 ms first.
    let run = sweep(
        &srv.url(),
        &[&precise[..], &["--contexts", "1k", "--point-budget", "8"]].concat(),
    )
    .ok();
    let r = run.results();
    assert_eq!(r.points.len(), 1);
    for p in &r.points {
        assert_eq!(p.stop_reason, StopReason::PointBudget, "{p:?}");
        assert!(p.reps > 2, "the budget is spent beyond --min-reps: {p:?}");
        assert!(p.reps < 10000, "{p:?}");
    }
    let run = sweep(
        &srv.url(),
        &[
            &precise[..],
            &["--contexts", "1k,2k", "--run-budget", "0.3"],
        ]
        .concat(),
    )
    .ok();
    let r = run.results();
    let last = r.points.last().unwrap();
    assert_eq!(last.stop_reason, StopReason::RunBudget, "{:?}", r.points);
    assert_eq!(
        last.reps, 2,
        "after the run budget, points get --min-reps only"
    );
}

/// `report --out` into a folder that does not exist yet creates it; `--format md` is Markdown.
#[test]
fn report_out_creates_missing_folders_and_format_md_writes_markdown() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let sw = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k",
            "--reps",
            "1",
            "--output-tokens",
            "4",
            "-q",
        ],
    )
    .ok();
    let out = sw.dir.path().join("new/sub/r.md");
    let (code, _, stderr) = run_report(&sw.out, &["--format", "md", "--out", s(&out)]);
    assert_eq!(code, 0, "{stderr}");
    let md = std::fs::read_to_string(&out).unwrap();
    assert!(md.starts_with("# "), "{md}");
    assert!(md.contains("| 2k |"), "{md}");
    let plot = sw.dir.path().join("other/ab.svg");
    let (code, _, stderr) = run(&[
        "compare",
        s(&sw.out),
        s(&sw.out),
        "--plot",
        s(&plot),
        "--out",
        s(&sw.dir.path().join("other/c.csv")),
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("</svg>"));
}

fn run_report(file: &Path, args: &[&str]) -> (i32, String, String) {
    run(&[&["report", s(file)][..], args].concat())
}

/// Two real runs that differ in one real way: B serves the deep identity model (the same
/// output from 12 layers instead of 2), so its TTFT is several times A's on any host, where a
/// thread or batch-size change is not (one loaded machine measured `-t 1` and `-t 2` alike).
/// compare calls B slower on TTFT, and --confidence, --min-samples and --noise change what
/// it reports.
#[test]
fn compare_finds_a_real_slowdown_and_its_confidence_min_samples_and_noise_apply() {
    let _g = serial();
    let args = [
        "--contexts",
        "1k",
        "--reps",
        "6",
        // 16, not 4: under load a 4-token decode can be held back and excluded, and 5 samples
        // of 6 leave the default --min-samples unmet (seen twice on a loaded 2-core host).
        "--output-tokens",
        "16",
        "-q",
    ];
    let deep = common::ref_paths().deep_model.to_str().unwrap();
    // Both runs at once, so load that comes or goes falls on both (one after the other, a
    // busy host once measured A at 762 ms and B at 890 ms), each server on one thread: a
    // thread pool that spins at every step stalls whenever another process takes a core.
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            let srv = RefServer::start(4096, &["-t", "1"]);
            sweep_to("a.jsonl", &srv.url(), &args).ok()
        });
        let b = scope.spawn(|| {
            let srv = RefServer::start(4096, &["-t", "1", "-m", deep]);
            sweep_to("b.jsonl", &srv.url(), &args).ok()
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    let json = |extra: &[&str]| -> Value {
        let (code, out, err) = run(&[
            &["compare", s(&a.out), s(&b.out), "--format", "json"][..],
            extra,
        ]
        .concat());
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let ttft = |v: &Value| -> Value {
        v["versus"][0]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == "ttft_ms")
            .unwrap()
            .clone()
    };
    // One run a side with 6 samples: asking for 7 leaves no verdict.
    let few = ttft(&json(&["--min-samples", "7"]));
    assert_eq!(few["verdict"], "too_few_samples", "{few}");
    let d = json(&[]);
    let row = ttft(&d);
    eprintln!("1k TTFT: B/A {}", row["ratio"]);
    assert_eq!(row["verdict"], "slower", "{row}");
    assert!(row["ratio"].as_f64().unwrap() > 2.0, "{row}");
    // A narrower interval at 50% confidence, with the noise band asked for.
    let n = json(&["--noise", "0", "--confidence", "0.5"]);
    assert_eq!(n["level"], 0.5);
    assert_eq!(n["min_samples"], 6);
    assert_eq!(n["noise"], 0.0);
    let width = |r: &Value| {
        r["interval"]["high"].as_f64().unwrap() - r["interval"]["low"].as_f64().unwrap()
    };
    assert!(
        width(&ttft(&n)) < width(&row),
        "50% interval narrower than 95%"
    );
    // The noise band is the verdict's edge: a slowdown whose interval starts above 2 stays
    // one under the widest band, and the band is echoed as given.
    let wide = json(&["--noise", "0.999"]);
    assert_eq!(wide["noise"], 0.999);
    let w = ttft(&wide);
    let slower = w["interval"]["low"].as_f64().unwrap() > 1.999;
    assert_eq!(w["verdict"] == "slower", slower, "{w}");
}

/// compare refuses runs whose corpus, seed, output length or method differ, naming which.
#[test]
fn compare_refuses_a_different_corpus_seed_output_length_or_method() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let a = sweep_to(
        "a.jsonl",
        &srv.url(),
        &[
            "--contexts",
            "1k",
            "--reps",
            "2",
            "--output-tokens",
            "4",
            "-q",
        ],
    )
    .ok();
    let text = std::fs::read_to_string(&a.out).unwrap();
    let (head, rest) = text.split_once('\n').unwrap();
    let header: Value = serde_json::from_str(head).unwrap();
    let cases: [(&str, Value, &str); 4] = [
        (
            "corpus",
            serde_json::json!({"kind": "random"}),
            "corpus differs",
        ),
        ("seed", Value::from(9), "seed differs: 0 vs 9"),
        (
            "output_tokens",
            Value::from(8),
            "output tokens differ: 4 vs 8",
        ),
        ("method", Value::from("two-point"), "method differs"),
    ];
    for (key, value, want) in cases {
        let mut h = header.clone();
        h["config"][key] = value;
        let b = a.dir.path().join(format!("b-{key}.jsonl"));
        std::fs::write(&b, format!("{h}\n{rest}")).unwrap();
        let (code, _, stderr) = run(&["compare", s(&a.out), s(&b)]);
        assert_eq!(code, 2, "{key}: {stderr}");
        assert!(stderr.contains(want), "{key}: {stderr}");
    }
}
