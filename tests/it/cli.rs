//! Command-line behaviour that needs no server.

use crate::common;

use common::{run, sweep, unreachable_url};

/// Runs ctxbench with `args`, asserts it exits 2 (a usage error) and returns its stderr.
fn usage_error(args: &[&str]) -> String {
    let (code, _, stderr) = run(args);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    stderr
}

#[test]
fn malformed_contexts_are_a_usage_error() {
    for bad in ["abc", "0", "-4k", "1k,,x"] {
        let stderr = usage_error(&["sweep", "--url", "http://127.0.0.1:9", "--contexts", bad]);
        assert!(stderr.contains("context"), "{bad}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one-line message expected: {stderr}"
        );
    }
}

#[test]
fn zero_and_negative_values_are_usage_errors() {
    for args in [
        &["--reps", "0"][..],
        &["--output-tokens", "0"],
        &["--timeout", "-1"],
        &["--stall-timeout", "0"],
        &["--reps", "-3"],
    ] {
        let mut a = vec!["sweep", "--url", "http://127.0.0.1:9", "--contexts", "1k"];
        a.extend_from_slice(args);
        let stderr = usage_error(&a);
        assert!(
            stderr.contains(args[0]) || stderr.contains(&args[0][2..]),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn unknown_backend_is_a_usage_error() {
    let stderr = usage_error(&["sweep", "--url", "http://127.0.0.1:9", "--backend", "nope"]);
    assert!(stderr.contains("nope"), "{stderr}");
}

#[test]
fn an_unreachable_server_is_named_and_leaves_no_file() {
    let url = unreachable_url();
    let run = sweep(&url, &["--contexts", "1k", "--wait-ready", "0"]);
    let stderr = &run.stderr;
    assert_eq!(run.code, 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect") && stderr.contains(&url),
        "{stderr}"
    );
    assert!(!run.out.exists());
}

#[test]
fn an_unwritable_results_path_fails_before_contacting_the_server() {
    // The URL is unreachable: if ctxbench got as far as probing, the message would say so.
    let url = unreachable_url();
    let (code, _, stderr) = run(&[
        "sweep",
        "--url",
        &url,
        "--contexts",
        "1k",
        "--out",
        "/proc/ctxbench/r.jsonl",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("/proc/ctxbench"), "{stderr}");
    assert!(!stderr.contains("cannot connect"), "{stderr}");
}

#[test]
fn conflicting_options_are_refused_before_the_server_is_contacted() {
    // The URL is unreachable: had ctxbench probed, it would wait and then say so.
    let url = unreachable_url();
    for (args, needle) in [
        (
            &["--two-point-tokens", "1,9"][..],
            "needs --method two-point",
        ),
        (
            &["--precision", "0.05", "--min-reps", "9", "--max-reps", "3"],
            "--min-reps 9 is larger than --max-reps 3",
        ),
        (
            &["--method", "two-point", "--decode-samples", "1"],
            "--decode-samples needs --method stream",
        ),
        (&["--ca-cert", "/nonexistent/ca.pem"], "--ca-cert"),
        // The design chooses the repetitions, and measures cold requests one at a time.
        (
            &["--precision", "0.05", "--design", "auto", "--min-reps", "3"],
            "--min-reps",
        ),
        (
            &["--precision", "0.05", "--design", "auto", "--prompts", "2"],
            "--prompts",
        ),
        (
            &[
                "--precision",
                "0.05",
                "--design",
                "auto",
                "--concurrency",
                "1,4",
            ],
            "no --concurrency",
        ),
        (
            &[
                "--precision",
                "0.05",
                "--design",
                "auto",
                "--method",
                "two-point",
            ],
            "no --method two-point",
        ),
    ] {
        let mut a = vec!["sweep", "--url", &url, "--contexts", "1k"];
        a.extend_from_slice(args);
        let stderr = usage_error(&a);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("cannot connect") && !stderr.contains("waiting"),
            "{stderr}"
        );
    }
}

#[test]
fn an_existing_results_file_without_resume_is_refused_before_probing() {
    let url = unreachable_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exist.jsonl");
    std::fs::write(&out, "kept\n").unwrap();
    let out_arg = out.to_str().unwrap();
    let stderr = usage_error(&["sweep", "--url", &url, "--contexts", "1k", "--out", out_arg]);
    assert!(
        stderr.contains("exists") && stderr.contains("--resume"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot connect"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "kept\n");
}

#[test]
fn resume_on_a_missing_file_says_it_starts_a_new_run() {
    let url = unreachable_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new.jsonl");
    let out_arg = out.to_str().unwrap();
    let (code, _, stderr) = run(&[
        "sweep",
        "--url",
        &url,
        "--contexts",
        "1k",
        "--out",
        out_arg,
        "--resume",
        "--wait-ready",
        "0",
    ]);
    assert_eq!(code, 1, "the server is down: {stderr}");
    assert!(
        stderr.contains("nothing to resume, starting a new run"),
        "{stderr}"
    );
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

#[test]
fn help_explains_the_sweep() {
    let (code, stdout, _) = run(&["sweep", "--help"]);
    assert_eq!(code, 0);
    for word in ["--contexts", "--corpus", "--resume", "--reps", "Examples"] {
        assert!(stdout.contains(word), "{word} missing from help");
    }
}

#[test]
fn compare_needs_two_files_and_report_one() {
    usage_error(&["compare", "a.jsonl"]);
    usage_error(&["report"]);
    let (code, stdout, _) = run(&["report", "--help"]);
    assert_eq!(code, 0);
    for word in ["--format", "--plots", "html"] {
        assert!(stdout.contains(word), "{word} missing from report help");
    }
}

#[test]
fn a_file_that_is_not_results_is_refused_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.jsonl");
    std::fs::write(&p, "{\"type\":\"sample\"}\n").unwrap();
    let (code, _, stderr) = run(&["report", p.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("notes.jsonl"), "{stderr}");
}

#[test]
fn overhead_with_zero_runs_is_a_usage_error() {
    let stderr = usage_error(&["overhead", "--runs", "0"]);
    assert!(stderr.contains("--runs"), "{stderr}");
}

#[test]
fn a_named_api_key_variable_that_is_unset_is_refused_before_any_request() {
    // The URL is unreachable: had ctxbench sent anything, the message would say so.
    let url = unreachable_url();
    let name = "CTXBENCH_TEST_UNSET_KEY_VARIABLE";
    let stderr = usage_error(&[
        "sweep",
        "--url",
        &url,
        "--contexts",
        "1k",
        "--api-key-env",
        name,
    ]);
    assert!(
        stderr.contains(name) && stderr.contains("unset or empty"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot connect"), "{stderr}");
}

#[test]
fn a_closed_stdout_or_stderr_is_not_an_error() {
    // `ctxbench ... | head`: the reader is gone before ctxbench writes a byte.
    for args in [
        &["--help"][..],
        &["sweep", "--help"],
        &["overhead", "--help"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = common::ctxbench()
            .args(args)
            .stdout(writer)
            .status()
            .unwrap();
        assert_ne!(status.code(), Some(101), "{args:?}: panicked");
    }
    // A sweep whose stderr and stdout are closed (`2>&1 | head -2`) exits with its own
    // code (1: the server is unreachable), never a panic (101).
    let url = unreachable_url();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = common::ctxbench()
        .args(["sweep", "--url", &url, "--contexts", "1k", "--dry-run"])
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "a closed stderr panicked the sweep");
}

/// Copies of the golden results file with every TTFT times `factor` (prefill rates divided).
fn scaled_golden(dir: &std::path::Path, name: &str, factor: f64) -> String {
    let golden = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/schema/testdata/golden/sweep.jsonl"),
    )
    .unwrap();
    let mut out = String::new();
    for line in golden.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(t) = v.get("ttft_ms").and_then(|t| t.as_f64()) {
            v["ttft_ms"] = (t * factor).into();
            if let Some(p) = v.get("prefill_tokens_per_s").and_then(|p| p.as_f64()) {
                v["prefill_tokens_per_s"] = (p / factor).into();
            }
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let p = dir.join(name);
    std::fs::write(&p, out).unwrap();
    p.display().to_string()
}

#[test]
fn gate_fail_if_slower_exits_3_on_a_significant_regression_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Three runs per side, each a little off the others; B's TTFT 30% longer.
    let a: Vec<String> = [1.0, 1.02, 0.99]
        .iter()
        .enumerate()
        .map(|(k, &f)| scaled_golden(d, &format!("a{k}.jsonl"), f))
        .collect();
    let b: Vec<String> = [1.3, 1.31, 1.29]
        .iter()
        .enumerate()
        .map(|(k, &f)| scaled_golden(d, &format!("b{k}.jsonl"), f))
        .collect();
    let args = |gate: &'static str| {
        let mut v = vec!["compare", "--a"];
        v.extend(a.iter().map(String::as_str));
        v.push("--b");
        v.extend(b.iter().map(String::as_str));
        v.extend(["--fail-if-slower", gate]);
        v
    };
    let (code, stdout, stderr) = run(&args("5%"));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("gate FAILED"), "{stderr}");
    assert!(stderr.contains("TTFT at 1k: 29.6% worse"), "{stderr}");
    assert!(stderr.contains("prefill at 2k"), "{stderr}");
    assert!(stdout.contains("slower"), "{stdout}");
    // Decode did not change: not named.
    assert!(!stderr.contains("decode at"), "{stderr}");
    // A threshold above the change passes.
    let (code, _, stderr) = run(&args("40%"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("no metric is significantly slower"),
        "{stderr}"
    );
    // One run of 2 samples per side: no verdict, so nothing fails, and it says so.
    let (code, _, stderr) = run(&["compare", &a[0], &b[0], "--fail-if-slower", "5%"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("cannot fail the gate"), "{stderr}");
    usage_error(&["compare", &a[0], &b[0], "--fail-if-slower", "fast"]);
}

#[test]
fn a_ca_cert_that_holds_no_certificate_is_a_usage_error_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("garbage.pem");
    std::fs::write(&pem, "this is not a certificate\n").unwrap();
    let url = unreachable_url();
    let stderr = usage_error(&[
        "sweep",
        "--url",
        &url,
        "--contexts",
        "1k",
        "--ca-cert",
        pem.to_str().unwrap(),
    ]);
    assert!(
        stderr.contains("--ca-cert holds no PEM certificate"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot connect"), "{stderr}");
}

/// A run keeps its --label when no other run shares it, even if other runs' labels collide
/// (readme-audit L14: `report a b b` used to drop every label).
#[test]
fn a_unique_label_names_its_run_when_other_labels_collide() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/schema/testdata/golden/sweep.jsonl");
    let text = std::fs::read_to_string(golden).unwrap();
    let (head, rest) = text.split_once('\n').unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, label: &str| {
        let mut h: serde_json::Value = serde_json::from_str(head).unwrap();
        h["label"] = label.into();
        let p = dir.path().join(name);
        std::fs::write(&p, format!("{h}\n{rest}")).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let a = write("a.jsonl", "baseline");
    let b = write("b.jsonl", "tuned");
    let c = write("c.jsonl", "tuned");
    let (code, out, err) = run(&["report", &a, &b, &c, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["baseline", "b", "c"]);
}

#[test]
fn url_and_server_cmd_exclude_each_other_and_bad_templates_are_usage_errors() {
    let stderr = usage_error(&[
        "sweep",
        "--url",
        "http://127.0.0.1:9",
        "--server-cmd",
        "llama-server --port {port}",
    ]);
    assert!(stderr.contains("--url and --server-cmd"), "{stderr}");
    let stderr = usage_error(&[
        "sweep",
        "--server-cmd",
        "llama-server -t {t}",
        "-L",
        "t",
        "1,2",
    ]);
    assert!(stderr.contains("{port}"), "{stderr}");
    let stderr = usage_error(&[
        "sweep",
        "--server-cmd",
        "llama-server --port {port} -t {t}",
        "-L",
        "t",
        "1,2",
        "--baseline",
        "t=3",
    ]);
    assert!(stderr.contains("t=1, t=2"), "{stderr}");
    usage_error(&["sweep", "--url", "http://127.0.0.1:9", "-L", "t", "1"]);
}

#[test]
fn min_runs_and_min_samples_set_how_much_a_verdict_needs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a: Vec<String> = [1.0, 1.01]
        .iter()
        .enumerate()
        .map(|(k, &f)| scaled_golden(d, &format!("a{k}.jsonl"), f))
        .collect();
    let b: Vec<String> = [1.3, 1.31]
        .iter()
        .enumerate()
        .map(|(k, &f)| scaled_golden(d, &format!("b{k}.jsonl"), f))
        .collect();
    let runs = |extra: &[&'static str]| {
        let mut v = vec!["compare", "--a", &a[0], &a[1], "--b", &b[0], &b[1]];
        v.extend_from_slice(extra);
        let (code, stdout, stderr) = run(&v);
        assert_eq!(code, 0, "{stderr}");
        stdout
    };
    // Two runs a side: below the default of 3, no verdict; with --min-runs 2, TTFT is slower.
    // The verdict is each table row's last column.
    let verdicts = |out: &str, v: &str| out.lines().filter(|l| l.trim_end().ends_with(v)).count();
    let out = runs(&[]);
    assert!(
        verdicts(&out, "too few runs") == 8 && verdicts(&out, "slower") == 0,
        "{out}"
    );
    let out = runs(&["--min-runs", "2"]);
    assert!(verdicts(&out, "too few runs") == 0, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("TTFT") && l.trim_end().ends_with("slower")),
        "{out}"
    );
    // One file a side: the golden run has 2 cold samples per point, below the default 6.
    let one = |extra: &[&'static str]| {
        let mut v = vec!["compare", &a[0], &b[0]];
        v.extend_from_slice(extra);
        let (code, stdout, stderr) = run(&v);
        assert_eq!(code, 0, "{stderr}");
        stdout
    };
    let out = one(&[]);
    assert!(out.contains("too few samples"), "{out}");
    let out = one(&["--min-samples", "2"]);
    assert!(!out.contains("too few samples"), "{out}");
}

#[test]
fn a_server_that_never_gets_ready_fails_at_the_server_timeout_and_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("campaign");
    let t0 = std::time::Instant::now();
    // `sleep` takes the port as more seconds: it runs, listens nowhere, never gets ready.
    let (code, _, stderr) = run(&[
        "sweep",
        "--server-cmd",
        "sleep 600 {port}",
        "--server-timeout",
        "2",
        "--contexts",
        "1k",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("ready"), "{stderr}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(120),
        "{stderr}"
    );
    // Nothing left running: no `sleep 600 <port>` process survives.
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(!ps.lines().any(|l| l.starts_with("sleep 600 ")), "{ps}");
}

#[test]
fn resume_without_out_is_a_usage_error_that_says_what_to_do() {
    // The URL is unreachable: had ctxbench probed, the message would say so.
    let url = unreachable_url();
    for args in [
        &["sweep", "--url", &url, "--contexts", "1k", "--resume"][..],
        &[
            "sweep",
            "--server-cmd",
            "llama-server --port {port}",
            "--resume",
        ],
    ] {
        let stderr = usage_error(args);
        assert_eq!(
            stderr.trim(),
            "error: --resume needs --out: name the results file (or, with --server-cmd, the folder) to continue, e.g. --out run.jsonl --resume",
            "{args:?}"
        );
    }
}

/// clap's own usage line lists the options an error involved (`--url <URL> --corpus <…>` for
/// an unknown flag), which reads as if they were required: the sweep's is written out.
#[test]
fn usage_errors_show_the_sweeps_short_usage_line() {
    let url = unreachable_url();
    let usage = "Usage: ctxbench sweep --url URL [OPTIONS]\n       ctxbench sweep --server-cmd TEMPLATE [-L NAME VALUES]... [-F NAME FLAGS]... [OPTIONS]\n";
    for args in [
        &["sweep", "--url", &url, "--bogus"][..],
        &["sweep", "--bogus"],
        &["sweep", "--url", &url, "--min-reps", "3"],
        &["sweep", "--url", &url, "--runs", "2"],
    ] {
        let stderr = usage_error(args);
        assert!(stderr.contains(usage), "{args:?}: {stderr}");
        // No other option is presented as part of the usage.
        let usage_at = stderr.find("Usage:").unwrap();
        let after = &stderr[usage_at + usage.len()..];
        assert_eq!(
            after.trim(),
            "For more information, try '--help'.",
            "{args:?}"
        );
    }
    let (code, stdout, _) = run(&["sweep", "--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains(usage), "{stdout}");
}

#[test]
fn a_corpus_without_text_is_a_usage_error_before_any_request() {
    // The URL is unreachable: had ctxbench probed, the message would say so.
    let url = unreachable_url();
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "  \n").unwrap();
    let folder = dir.path().join("binary");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("blob.bin"), [0xff, 0xfe, 0x00, 0x80]).unwrap();
    for corpus in [&empty, &folder] {
        let c = corpus.to_str().unwrap();
        let stderr = usage_error(&["sweep", "--url", &url, "--contexts", "1k", "--corpus", c]);
        assert!(
            stderr.contains(&format!(
                "--corpus {c}: no non-empty UTF-8 text files found"
            )),
            "{stderr}"
        );
        assert!(!stderr.contains("cannot connect"), "{stderr}");
    }
}

/// `abc1234` or `abc1234-dirty`: a short git commit, as build.rs records it.
fn commit_looking(token: &str) -> bool {
    let hex = token.strip_suffix("-dirty").unwrap_or(token);
    hex.len() >= 7 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

#[test]
fn version_says_the_version_and_the_commit_it_was_built_from() {
    let (code, stdout, stderr) = run(&["--version"]);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.trim();
    let commit = line
        .strip_prefix(&format!("ctxbench {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not 'ctxbench VERSION (COMMIT)': {line}"));
    assert!(commit_looking(commit), "{commit} in {line}");
    assert_eq!(commit, ctxbench_session::COMMIT);
    // The tests run in a git checkout: the commit must be its HEAD's.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git");
    let head = String::from_utf8_lossy(&head.stdout);
    assert!(
        head.starts_with(commit.trim_end_matches("-dirty")),
        "{commit} is not HEAD {head}"
    );
    assert!(!commit_looking("unknown") && commit_looking("8b42e1c-dirty"));
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish_come_from_the_command_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, stdout, stderr) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        // Every shell's script knows the subcommands and sweep's flags.
        for word in ["sweep", "compare", "contexts", "output-tokens"] {
            assert!(stdout.contains(word), "{shell} script lacks {word}");
        }
    }
    let (_, bash, _) = run(&["completions", "bash"]);
    assert!(
        bash.contains("--contexts") && bash.contains("complete "),
        "{bash}"
    );
    let stderr = usage_error(&["completions", "tcsh"]);
    assert!(stderr.contains("tcsh"), "{stderr}");
}

#[test]
fn man_pages_are_written_for_ctxbench_and_each_subcommand() {
    let (code, page, stderr) = run(&["man", "sweep"]);
    assert_eq!(code, 0, "{stderr}");
    // roff escapes every '-' as '\-'.
    let plain = page.replace("\\-", "-");
    assert!(page.contains(".TH ctxbench-sweep 1"), "{page}");
    assert!(plain.contains("--contexts") && plain.contains("--output-tokens"));
    assert!(plain.contains(&format!("ctxbench {}", ctxbench_session::VERSION)));

    let (code, top, _) = run(&["man"]);
    assert_eq!(code, 0);
    assert!(top.contains(".TH ctxbench 1") && top.contains("sweep"));

    let dir = tempfile::tempdir().unwrap();
    let into = dir.path().join("man1");
    let (code, _, stderr) = run(&["man", "--dir", into.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    for name in [
        "ctxbench",
        "ctxbench-sweep",
        "ctxbench-report",
        "ctxbench-compare",
    ] {
        let text = std::fs::read_to_string(into.join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"));
        assert!(text.contains(&format!(".TH {name} 1")), "{name}.1: {text}");
    }

    let stderr = usage_error(&["man", "nope"]);
    assert!(
        stderr.contains("nope") && stderr.contains("sweep"),
        "{stderr}"
    );
}

#[test]
fn price_per_hour_gives_the_cost_per_million_input_and_output_tokens_at_each_context() {
    let golden = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/schema/testdata/golden/sweep.jsonl"
    );
    let (code, json, stderr) = run(&[
        "report",
        golden,
        "--format",
        "json",
        "--price-per-hour",
        "3.6",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let run0 = &v["runs"][0];
    let costs = run0["cost"]["points"].as_array().expect("cost points");
    let points = run0["points"].as_array().unwrap();
    assert_eq!(costs.len(), points.len());
    assert!(!costs.is_empty());
    for (c, p) in costs.iter().zip(points) {
        let ctx = p["context_tokens"].as_f64().unwrap();
        let ttft_s = p["ttft_ms"]["median"].as_f64().unwrap() / 1000.0;
        let decode = p["decode_tokens_per_s"]["median"].as_f64().unwrap();
        // $3.60/hour is $0.001 per second.
        let input = 0.001 * ttft_s / ctx * 1e6;
        let output = 0.001 / decode * 1e6;
        let got_in = c["usd_per_m_input"].as_f64().unwrap();
        let got_out = c["usd_per_m_output"].as_f64().unwrap();
        assert!((got_in - input).abs() < 1e-9 * input, "{got_in} vs {input}");
        assert!(
            (got_out - output).abs() < 1e-9 * output,
            "{got_out} vs {output}"
        );
    }

    let (code, table, _) = run(&["report", golden, "--price-per-hour", "$3.60"]);
    assert_eq!(code, 0);
    let title = table
        .lines()
        .find(|l| l.starts_with("price of a token at $3.60/hour"))
        .unwrap_or_else(|| panic!("no cost table: {table}"));
    assert!(
        title.contains("TTFT") && title.contains("decode tok/s"),
        "how it is computed: {title}"
    );
    assert!(table.contains("USD / M input tokens"));
    let (_, md, _) = run(&["report", golden, "--format", "md", "--price-per-hour", "2"]);
    assert!(md.contains("### Price of a token") && md.contains("| USD / M output tokens |"));
    // Without the flag, no price.
    let (_, plain, _) = run(&["report", golden]);
    assert!(!plain.contains("price of a token"));

    for bad in ["0", "-1", "abc", "inf"] {
        let stderr = usage_error(&["report", golden, &format!("--price-per-hour={bad}")]);
        assert!(stderr.contains("price"), "{bad}: {stderr}");
    }
}

#[test]
fn warm_modes_refuse_what_they_cannot_do_yet_before_any_request() {
    let url = unreachable_url();
    for (args, named) in [
        (
            &["--mode", "conversation", "--concurrency", "1,2"][..],
            "is for --mode append",
        ),
        (
            &["--mode", "append", "--method", "two-point"][..],
            "two-point",
        ),
        (&["--mode", "conversation", "--resume"][..], "--resume"),
        (
            &["--mode", "tiers", "--negative-control"][..],
            "--negative-control",
        ),
        (
            &["--mode", "conversation", "--ttft-target", "100"][..],
            "--ttft-target",
        ),
        (&["--negative-control"][..], "--mode append"),
        (&["--mode", "append", "--append", "0"][..], "--append"),
    ] {
        let stderr = usage_error(
            &[
                &["sweep", "--url", &url, "--out", "/nonexistent/x.jsonl"][..],
                args,
            ]
            .concat(),
        );
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

#[test]
fn every_flag_that_needs_a_mode_or_another_flag_is_a_usage_error_naming_what_it_needs() {
    // One row per such flag: given alone (with --url), it must be refused with exit 2
    // before any request, naming what it needs. None may be silently ignored.
    let url = unreachable_url();
    for (args, needs) in [
        (&["--append", "128"][..], "--mode append"),
        (&["--turn-tokens", "64"][..], "--mode conversation"),
        (
            &["--mode", "conversation", "--append", "64"][..],
            "--turn-tokens",
        ),
        (
            &["--mode", "append", "--turn-tokens", "64"][..],
            "--mode conversation",
        ),
        (&["--ttft-target", "100"][..], "--mode append"),
        (&["--negative-control"][..], "--mode append"),
        (&["--gaps", "0,1"][..], "--mode retention"),
        (&["--pressure", "0,1"][..], "--mode retention"),
        (&["--grid"][..], "--mode retention"),
        (
            &["--mode", "append", "--gaps", "0,1"][..],
            "--mode retention",
        ),
        (
            &["--mode", "retention", "--gaps", "0,x"][..],
            "not a number",
        ),
        (&["--wave-output-tokens", "64"][..], "--concurrency"),
        (&["--min-reps", "3"][..], "--precision"),
        (&["--max-reps", "9"][..], "--precision"),
        (&["--point-budget", "60"][..], "--precision"),
        (&["--run-budget", "60"][..], "--precision"),
        (&["--design", "auto"][..], "--precision"),
        (&["--precision-of", "p90"][..], "--precision"),
        (&["--two-point-tokens", "1,9"][..], "--method two-point"),
        (&["--needle-depths", "50"][..], "--needle"),
        (&["--runs", "2"][..], "--server-cmd"),
        (&["--baseline", "a"][..], "--server-cmd"),
        (&["--server-timeout", "60"][..], "--server-cmd"),
        (&["-L", "t", "1,2"][..], "--server-cmd"),
        (&["-F", "spec", ",-x"][..], "--server-cmd"),
    ] {
        let stderr = usage_error(&[&["sweep", "--url", &url][..], args].concat());
        assert!(
            stderr.contains(needs),
            "{args:?} must name {needs}: {stderr}"
        );
    }
}

/// One argument of a help page: its name line and the paragraphs of its text.
struct HelpEntry {
    name: String,
    paragraphs: Vec<String>,
}

/// The arguments of a `ctxbench <cmd> --help` (or `-h`) page, in both of clap's layouts:
/// the text on the name's line after two spaces, or indented below it in paragraphs.
fn help_entries(page: &str) -> Vec<HelpEntry> {
    let mut entries: Vec<HelpEntry> = Vec::new();
    // The examples and notes after the options are free text, not arguments.
    for line in page.lines().take_while(|l| !l.starts_with("Examples:")) {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        if (2..=6).contains(&indent) && text.starts_with(['-', '<', '[']) {
            entries.push(entry(text));
        } else if indent == 0 && !text.is_empty() {
            // A heading (`Server:`): clap puts a blank line before it.
        } else if let Some(last) = entries.last_mut() {
            if text.is_empty() {
                last.paragraphs.push(String::new());
            } else if let Some(p) = last.paragraphs.last_mut() {
                if !p.is_empty() {
                    p.push(' ');
                }
                p.push_str(text);
            }
        }
    }
    for e in &mut entries {
        e.paragraphs.retain(|p| !p.is_empty());
    }
    entries
}

/// An entry from its name line (`  -o, --out <FILE>  Results file ...`).
fn entry(line: &str) -> HelpEntry {
    let (name, text) = line.split_once("  ").unwrap_or((line, ""));
    HelpEntry {
        name: name.to_owned(),
        paragraphs: vec![text.trim().to_owned()],
    }
}

/// The first `n` words of `text`, lowercase, without the punctuation around them.
fn first_words(text: &str, n: usize) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .take(n)
        .collect()
}

/// The sentences of `text`: split after a full stop that a capital letter follows, so that
/// "e.g. `1k`" stays inside its sentence.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices(". ") {
        if text[i + 2..].starts_with(char::is_uppercase) {
            out.push(&text[start..i]);
            start = i + 2;
        }
    }
    out.push(text[start..].trim_end_matches('.'));
    out
}

#[test]
fn every_flags_long_help_continues_its_summary_and_states_a_default_once() {
    // Every subcommand `ctxbench --help` lists, so that a new one is checked too.
    let (code, top, stderr) = run(&["--help"]);
    assert_eq!(code, 0, "{stderr}");
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    for expected in [
        "sweep",
        "report",
        "compare",
        "overhead",
        "completions",
        "man",
    ] {
        assert!(commands.contains(&expected), "{expected} not in\n{top}");
    }
    let mut problems = Vec::new();
    for cmd in commands {
        for flag in ["-h", "--help"] {
            let (code, page, stderr) = run(&[cmd, flag]);
            assert_eq!(code, 0, "{cmd} {flag}: {stderr}");
            let entries = help_entries(&page);
            assert!(
                entries.iter().any(|e| e.name.contains("--help")),
                "{cmd} {flag}: no arguments read from\n{page}"
            );
            for e in entries {
                let text = e.paragraphs.join("\n");
                if text.matches("[default:").count() > 1 {
                    problems.push(format!("{cmd} {flag}: {} states its default twice", e.name));
                }
                let [summary, rest @ ..] = &e.paragraphs[..] else {
                    continue;
                };
                if let Some(second) = rest.first() {
                    let head = first_words(summary, 4);
                    if head.len() == 4 && head == first_words(second, 4) {
                        problems.push(format!(
                            "{cmd} {flag}: {} opens its long help with its summary again",
                            e.name
                        ));
                    }
                }
                // A sentence of the summary said again anywhere below it.
                for sentence in sentences(summary) {
                    if sentence.split_whitespace().count() >= 4
                        && rest.iter().any(|p| p.contains(sentence))
                    {
                        problems.push(format!("{cmd} {flag}: {} repeats \"{sentence}\"", e.name));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
