//! A/B campaigns (`sweep --server-cmd ... -L ...`) against the real reference llama-server:
//! ctxbench starts every variant itself, records its command line, compares with the run as
//! the unit, and leaves no server behind however it ends.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{ref_paths, serial};

/// A marker no other process has (given to llama-server as its model alias), so "nothing
/// left running" can be checked in /proc.
fn marker(tag: &str) -> String {
    format!("ctxbench-campaign-{tag}-{}", std::process::id())
}

/// The reference server's command template, with `extra` flags and the marker.
fn template(mark: &str, extra: &str) -> String {
    template_of(&ref_paths().model.display().to_string(), mark, extra)
}

/// Like [`template`], serving `model` (a path, or a placeholder in one).
fn template_of(model: &str, mark: &str, extra: &str) -> String {
    format!(
        "{} -m {model} --host 127.0.0.1 --port {{port}} -c 20480 -np 1 --alias {mark} {extra}",
        ref_paths().server.display(),
    )
}

/// The same command twice (`-L copy a,b`): the two values only change a directory under
/// `dir` that nothing is saved in (`--slot-save-path`, used for slot erase, never for saving
/// here). Makes both directories.
fn twin_template(dir: &Path, mark: &str) -> String {
    for copy in ["a", "b"] {
        std::fs::create_dir_all(dir.join(copy)).unwrap();
    }
    template(
        mark,
        &format!("-t 1 --slot-save-path {}/{{copy}}", dir.display()),
    )
}

/// Live (not zombie) processes whose command line contains `needle`.
fn live_with(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        // Only servers: ctxbench's own command line holds the marker too.
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.contains(needle) || !cmd.contains("llama-server") || cmd.contains("ctxbench sweep")
        {
            continue;
        }
        if cmd.contains(env!("CARGO_BIN_EXE_ctxbench")) {
            continue;
        }
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next().map(str::to_owned))
            })
            .is_some_and(|st| st != "Z" && st != "X");
        if alive {
            out.push(pid);
        }
    }
    out
}

/// Waits (generously) until `cond` holds; the bound only stops a hung test.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "still not true after 120 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn campaign(args: &[&str]) -> (i32, String, String) {
    let out = common::ctxbench()
        .args(["sweep"])
        .args(args)
        .env_remove("CTXBENCH_URL")
        .env_remove("CTXBENCH_API_KEY")
        .output()
        .expect("run ctxbench");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(p: &Path) -> ctxbench_schema::record::Results {
    ctxbench_schema::record::read_results(p, false)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `compare --a ... --b ... --format json` of a campaign's two variants, plus `extra` flags.
fn compare_json(a: &[PathBuf], b: &[PathBuf], extra: &[&str]) -> serde_json::Value {
    let mut cmd = common::ctxbench();
    cmd.arg("compare")
        .arg("--a")
        .args(a)
        .arg("--b")
        .args(b)
        .args(extra);
    let out = cmd.args(["--format", "json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("compare JSON")
}

fn runs(dir: &Path, name: &str, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|r| dir.join(format!("{name}-run{r}.jsonl")))
        .collect()
}

/// The A/B needs a speed difference that no host can erase (`-t 1` against `-t 2` measured
/// 7236 vs 7772 ms on a busy 2-core machine: "no significant difference"). B serves the
/// deep identity model: 10 layers that add exactly 0 in front of the base model's 2, so the
/// same output at 6× the layers. Load slows both alike; it cannot make 12 layers as fast
/// as 2. One thread each: a pool that spins at every step stalls when another process takes
/// a core (on a busy host, 2k TTFTs of one run spread 119–1305 ms with two threads, 159–266
/// ms with one).
#[test]
fn ab_of_the_base_model_against_its_deep_identity_twin_calls_the_deep_one_slower() {
    let _g = serial();
    let mark = marker("ab");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ab");
    // Short names for the two files, so the variants read `model=base` and `model=deep`.
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    let p = ref_paths();
    std::os::unix::fs::symlink(&p.model, models.join("base.gguf")).unwrap();
    std::os::unix::fs::symlink(&p.deep_model, models.join("deep.gguf")).unwrap();
    let served = format!("{}/{{model}}.gguf", models.display());
    let tpl = template_of(&served, &mark, "-t 1");
    let (code, stdout, stderr) = campaign(&[
        "--server-cmd",
        &tpl,
        "-L",
        "model",
        "base,deep",
        "--runs",
        "4",
        "--reps",
        "2",
        "--contexts",
        "2k",
        "--output-tokens",
        "8",
        "--prompt-seed",
        "7",
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Two variants measured, four runs each, each header holding its command line.
    for name in ["base", "deep"] {
        for p in runs(&out, &format!("model={name}"), 4) {
            let r = read(&p);
            let cmd = r
                .header
                .config
                .server_cmd
                .clone()
                .expect("server_cmd recorded");
            assert!(
                cmd.contains(&format!("-m {}/{name}.gguf ", models.display())),
                "{cmd}"
            );
            assert!(
                cmd.contains("--port {port}") && cmd.contains("llama-server"),
                "{cmd}"
            );
            assert_eq!(r.header.label.as_deref(), Some(cmd.as_str()));
            // Both samples measured. A sample may lose its TTFT to the host, never silently:
            // an 8-token decode takes a few ms here, so a client descheduled that long reads
            // the first token with the last (held_back_stream). In one suite run under two
            // busy loops one run had a sample without TTFT (its flags were not kept; 15
            // reruns under three busy loops did not repeat it); only a sample flagged for
            // its timing may lack one.
            use ctxbench_schema::record::Flag;
            assert_eq!(r.samples.len(), 2, "{}", p.display());
            let timed = r.samples.iter().filter(|s| s.ttft_ms.is_some()).count();
            let explained = r.samples.iter().all(|s| {
                s.ttft_ms.is_some()
                    || s.has(&Flag::HeldBackStream)
                    || s.has(&Flag::ImpossibleTiming)
            });
            let flags: Vec<_> = r.samples.iter().map(|s| (&s.flags, s.ttft_ms)).collect();
            assert!(timed >= 1 && explained, "{}: {flags:?}", p.display());
            // The server of the run loaded that model, in its own words.
            let log = std::fs::read_to_string(p.with_extension("server.log")).unwrap();
            let model = models.join(format!("{name}.gguf"));
            assert!(
                log.contains(&format!("loading model '{}'", model.display())),
                "{}",
                p.display()
            );
        }
    }
    // The comparison at the end, the run as the unit.
    assert!(
        stdout.contains("run as the unit (4 run(s) of A, 4 of B"),
        "{stdout}"
    );
    let j = compare_json(
        &runs(&out, "model=base", 4),
        &runs(&out, "model=deep", 4),
        &[],
    );
    let versus = &j["versus"][0];
    let row = versus["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["context_tokens"] == 2048 && r["metric"] == "ttft_ms")
        .expect("a 2k TTFT row")
        .clone();
    let (a, b) = (row["a"].as_f64().unwrap(), row["b"].as_f64().unwrap());
    eprintln!(
        "2k TTFT: base {a:.0} ms, deep {b:.0} ms: {}",
        row["verdict"]
    );
    assert_eq!(row["verdict"], "slower", "{row}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("2k") && l.contains("TTFT"))
        .expect("2k TTFT line in the campaign's table");
    assert!(line.ends_with("slower"), "{line}");
    // Slower, and computing the same thing: every greedy output of B is A's.
    let agree = versus["agreement"].as_array().expect("output agreement");
    assert_eq!(agree.len(), 1, "{versus}");
    assert!(
        agree[0]["pairs"].as_u64() > Some(0) && agree[0]["identical"] == agree[0]["pairs"],
        "{versus}"
    );
    assert!(live_with(&mark).is_empty());
}

#[test]
fn aa_of_the_same_command_finds_no_significant_difference() {
    let _g = serial();
    let mark = marker("aa");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("aa");
    let tpl = twin_template(dir.path(), &mark);
    let (code, stdout, stderr) = campaign(&[
        "--server-cmd",
        &tpl,
        "-L",
        "copy",
        "a,b",
        "--runs",
        "3",
        "--reps",
        "2",
        "--contexts",
        "1k,2k",
        "--output-tokens",
        "8",
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // 99.9%, not 95%: with the 10–40% run scatter of a loaded host, 95% calls about 2% of A/A
    // cells by chance (the method's own simulation), so 8 cells failed about 1 run in 10.
    // A systematic difference (a warm cache, an order effect) still shows.
    let j = compare_json(
        &runs(&out, "copy=a", 3),
        &runs(&out, "copy=b", 3),
        &["--confidence", "0.999"],
    );
    assert_eq!(j["level"], 0.999);
    let rows = j["versus"][0]["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 8, "2 contexts × 4 metrics");
    for r in &rows {
        assert_eq!(r["verdict"], "no_significant_difference", "{r}\n{stdout}");
        assert_eq!((r["n_a"].as_u64(), r["n_b"].as_u64()), (Some(3), Some(3)));
    }
    assert!(live_with(&mark).is_empty());
}

#[test]
fn a_server_command_with_a_bad_flag_fails_with_its_log_tail_and_leaves_nothing() {
    let _g = serial();
    let mark = marker("bad");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad");
    let tpl = template(&mark, "--no-such-flag-{v}");
    let (code, _, stderr) = campaign(&[
        "--server-cmd",
        &tpl,
        "-L",
        "v",
        "x,y",
        "--contexts",
        "1k",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("before it was ready"), "{stderr}");
    // llama-server's own words, from the log tail.
    assert!(stderr.contains("no-such-flag-x"), "{stderr}");
    assert!(stderr.contains("last lines of"), "{stderr}");
    assert!(out.join("v=x-run0.server.log").exists());
    // The campaign stopped at the first failure: the second variant never started.
    assert!(!out.join("v=y-run0.server.log").exists());
    assert!(live_with(&mark).is_empty());
}

/// Starts a two-variant campaign in the background.
fn spawn_campaign(mark: &str, out: &Path, contexts: &str) -> std::process::Child {
    let tpl = template(mark, "-t {t}");
    common::ctxbench()
        .args(["sweep", "--server-cmd", &tpl, "-L", "t", "1,2"])
        .args([
            "--contexts",
            contexts,
            "--reps",
            "2",
            "--output-tokens",
            "4",
            "-q",
        ])
        .arg("--out")
        .arg(out)
        .env_remove("CTXBENCH_URL")
        .stdout(Stdio::null())
        // -q keeps it short: a pipe nobody reads until the end cannot fill up.
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn sigkill_of_ctxbench_mid_campaign_leaves_no_server() {
    let _g = serial();
    let mark = marker("kill");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("k");
    let mut child = spawn_campaign(&mark, &out, "8k");
    common::wait_for_samples(&out.join("t=1-run0.jsonl"), 1, Duration::from_secs(120));
    assert_eq!(live_with(&mark).len(), 1, "one server runs mid-campaign");
    common::signal(child.id(), "-KILL");
    let _ = child.wait();
    eventually("the server is gone after SIGKILL of ctxbench", || {
        live_with(&mark).is_empty()
    });
}

#[test]
fn ctrl_c_mid_campaign_stops_the_server_and_resume_measures_only_what_is_missing() {
    let _g = serial();
    let mark = marker("int");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("i");
    let mut child = spawn_campaign(&mark, &out, "1k,4k");
    // The first variant's run finished, the second's is under way.
    common::wait_for_samples(&out.join("t=2-run0.jsonl"), 1, Duration::from_secs(120));
    let first = std::fs::read(out.join("t=1-run0.jsonl")).unwrap();
    common::signal(child.id(), "-INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(live_with(&mark).is_empty(), "no server after Ctrl-C");
    let tpl = template(&mark, "-t {t}");
    let (code, stdout, stderr) = campaign(&[
        "--server-cmd",
        &tpl,
        "-L",
        "t",
        "1,2",
        "--contexts",
        "1k,4k",
        "--reps",
        "2",
        "--output-tokens",
        "4",
        "--out",
        out.to_str().unwrap(),
        "--resume",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("t=1 run 0: already measured, skipped"),
        "{stderr}"
    );
    // The finished run was not measured again; the interrupted one was completed.
    assert_eq!(std::fs::read(out.join("t=1-run0.jsonl")).unwrap(), first);
    let b = read(&out.join("t=2-run0.jsonl"));
    assert_eq!(b.resumes.len(), 1);
    // Counted by (context, rep) of the completed cold samples, not by TTFT: a 4-token sample
    // may lose its TTFT to a loaded host (held_back_stream) and still be measured once.
    let mut cold: Vec<(u64, u32)> = b
        .samples
        .iter()
        .filter(|s| {
            s.phase == ctxbench_schema::record::Phase::Cold
                && s.status == ctxbench_schema::record::Status::Ok
        })
        .map(|s| (s.context_tokens, s.rep))
        .collect();
    cold.sort_unstable();
    assert_eq!(
        cold,
        [(1024, 0), (1024, 1), (4096, 0), (4096, 1)],
        "2 contexts × 2 reps, none twice"
    );
    // One run per side: the fallback on samples says it has too few of them.
    assert!(stdout.contains("too few samples"), "{stdout}");
    assert!(live_with(&mark).is_empty());
}

#[test]
fn a_server_that_dies_mid_run_is_reported_with_its_log_tail() {
    let _g = serial();
    let mark = marker("dies");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d");
    let child = spawn_campaign(&mark, &out, "4k,8k");
    common::wait_for_samples(&out.join("t=1-run0.jsonl"), 1, Duration::from_secs(120));
    let servers = live_with(&mark);
    assert_eq!(servers.len(), 1, "one server runs mid-campaign");
    common::signal(servers[0], "-KILL");
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the server of t=1 died during run 0"),
        "{stderr}"
    );
    assert!(stderr.contains("signal: 9"), "{stderr}");
    assert!(stderr.contains("last lines of"), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    assert!(live_with(&mark).is_empty());
    assert!(out.join("t=1-run0.server.log").exists());
    assert!(!out.join("t=2-run0.jsonl").exists(), "the campaign stopped");
}

/// A designed campaign (`--precision P --design auto` with two variants) is designed for the
/// comparison: a ratio B/A's log half-width is the two medians' in quadrature, so each
/// variant is designed for ±P/√2 (ctxbench_session::design::variant_precision), not ±P. The two
/// variants are the same command (only a directory nothing is saved in differs), and each
/// length's reps are capped, so the test asserts what the design records, never a speed.
#[test]
fn a_designed_campaign_designs_each_of_two_variants_for_precision_over_root_two() {
    use ctxbench_schema::record::{DesignMode, Phase, StopReason};
    let _g = serial();
    let mark = marker("design");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dz");
    let tpl = twin_template(dir.path(), &mark);
    let (code, stdout, stderr) = campaign(&[
        "--server-cmd",
        &tpl,
        "-L",
        "copy",
        "a,b",
        "--runs",
        "1",
        "--contexts",
        "1k,2k,4k",
        "--output-tokens",
        "4",
        "--precision",
        "0.05",
        "--design",
        "auto",
        "--max-reps",
        "4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let each = 0.05 / std::f64::consts::SQRT_2;
    for name in ["a", "b"] {
        let p = out.join(format!("copy={name}-run0.jsonl"));
        let r = read(&p);
        let reps = &r.header.config.reps;
        let precision = reps.precision.expect("a precision recorded");
        assert!(
            (precision - each).abs() < 1e-6,
            "{}: precision {precision}, not 0.05/√2 = {each}",
            p.display()
        );
        assert_eq!(reps.design, Some(DesignMode::Auto), "{}", p.display());
        // Every requested length has a point line with the design's decision, made for
        // the same ±P/√2: measured (cold samples, usable ones among them), or predicted.
        for c in [1024u64, 2048, 4096] {
            let point = r
                .point(c)
                .unwrap_or_else(|| panic!("{}: no point line at {c}", p.display()));
            let d = point
                .design
                .as_ref()
                .unwrap_or_else(|| panic!("{}: no design record at {c}", p.display()));
            assert!((d.target - each).abs() < 1e-6, "{c}: {d:?}");
            assert!(!d.why.is_empty(), "{c}: {d:?}");
            let at: Vec<_> = r.samples.iter().filter(|s| s.context_tokens == c).collect();
            let usable = at
                .iter()
                .filter(|s| s.phase == Phase::Cold && s.usable())
                .count();
            if point.stop_reason == StopReason::Predicted {
                assert!(at.is_empty() && d.predicted.is_some(), "{c}: {point:?}");
            } else {
                assert!(usable >= 1, "{c}: no usable sample\n{stderr}");
                assert_eq!(point.usable, usable, "{c}: {point:?}");
                assert!(point.reps >= 1 && point.reps <= 4, "{c}: {point:?}");
                assert!(d.predicted.is_none(), "{c}: {d:?}");
            }
        }
        // The longest length is always measured.
        assert_ne!(
            r.point(4096).unwrap().stop_reason,
            StopReason::Predicted,
            "{}",
            p.display()
        );
    }
    // What is printed states each variant's ±P/√2 (rounded: ±3.5%), never ±P (±5.0%) as a
    // run's target; the campaign's head says once where ±3.5% comes from and why. stderr: that
    // line and each run's plan line. stdout: each run's end report, then the campaign's report
    // of each variant (its measured line and its designed-sweep account) before the comparison.
    let why = "designed for the comparison: each run to ±3.5% at 95% (±5.0% ÷ √2), so a ratio of two variants' medians is known to about ±5.0%";
    assert_eq!(stderr.matches(why).count(), 1, "{stderr}");
    let planned =
        "× designed (--design auto): each length's median TTFT and decode rate to ±3.5% at 95%";
    assert_eq!(stderr.matches(planned).count(), 2, "{stderr}");
    let measured = "measured: contexts 1k, 2k, 4k, designed (--design auto): each length's median TTFT and decode rate to ±3.5% at 95%";
    assert_eq!(stdout.matches(measured).count(), 2, "{stdout}");
    let account = "designed sweep (--design auto, target ±3.5% at 95%)";
    assert_eq!(stdout.matches(account).count(), 4, "{stdout}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains("±5.0% at 95%"), "{text}");
    }
    // The comparison over the two variants names both: A is copy=a, B is copy=b.
    let j = compare_json(&runs(&out, "copy=a", 1), &runs(&out, "copy=b", 1), &[]);
    for (side, name) in [(&j["baseline"], "a"), (&j["versus"][0]["run"], "b")] {
        let path = side["paths"][0].as_str().unwrap_or_default();
        assert!(path.ends_with(&format!("copy={name}-run0.jsonl")), "{side}");
        let label = side["label"].as_str().unwrap_or_default();
        let slot = format!("--slot-save-path {}/{name}", dir.path().display());
        assert!(label.ends_with(&slot), "{side}");
    }
    // The longest length is measured on both sides, so it is compared.
    let rows = j["versus"][0]["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["context_tokens"] == 4096 && r["metric"] == "ttft_ms"),
        "{}",
        j["versus"][0]
    );
    assert!(live_with(&mark).is_empty());
}
