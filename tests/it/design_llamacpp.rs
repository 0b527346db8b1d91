//! The designed sweep (`--precision P --design auto`) against the reference llama-server.
//! Small (≤ 4k, a few dozen short requests) and asserting only what host speed cannot
//! move: every length measured, the design's decision on every `point` line, the end
//! report's time to answer, and how each figure was obtained in the JSON report.

use crate::common::*;

#[test]
fn a_designed_sweep_measures_every_length_and_states_how_each_figure_was_obtained() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k,4k",
            "--output-tokens",
            "8",
            "--precision",
            "0.1",
            "--design",
            "auto",
            "--max-reps",
            "6",
        ],
    )
    .ok();
    let r = run.results();
    assert_eq!(
        r.header.config.reps.design,
        Some(ctxbench_schema::record::DesignMode::Auto)
    );
    // The cheap length, then the longest; 2k (which may be predicted) waits for the cheap
    // length; the longest's check sample waits for the cheap length to be done and for 2k to
    // start, then the two alternate (issue 47: a length between no longer takes its samples
    // in one block).
    let sent: Vec<u64> = r
        .samples
        .iter()
        .filter(|s| s.phase == ctxbench_schema::record::Phase::Cold)
        .map(|s| s.context_tokens)
        .collect();
    assert_eq!(sent[..3], [1024, 4096, 1024], "{sent:?}");
    let second_4k = (0..sent.len()).filter(|&i| sent[i] == 4096).nth(1);
    let first_2k = (0..sent.len()).find(|&i| sent[i] == 2048);
    let last_1k = (0..sent.len()).rfind(|&i| sent[i] == 1024);
    assert!(
        second_4k > first_2k && first_2k > last_1k && last_1k.is_some(),
        "{sent:?}"
    );
    // Neither 2k nor 4k takes two samples in a row while the other is still open.
    let last_4k = (0..sent.len()).rfind(|&i| sent[i] == 4096).unwrap_or(0);
    let last_2k = (0..sent.len()).rfind(|&i| sent[i] == 2048).unwrap_or(0);
    let both_open = last_4k.min(last_2k);
    assert!(
        (first_2k.unwrap_or(0)..both_open).all(|i| sent[i] != sent[i + 1]),
        "{sent:?}"
    );
    for c in [1024u64, 2048, 4096] {
        let at: Vec<_> = r.samples.iter().filter(|s| s.context_tokens == c).collect();
        assert!(
            at.iter().any(|s| s.usable()),
            "{c}: no measured sample\n{}",
            run.stderr
        );
        let p = r.point(c).expect("a point line per length");
        let d = p
            .design
            .as_ref()
            .expect("the design's decision is recorded");
        // The floor: one sample to answer, one to check the spread.
        assert!(p.reps >= 2 && p.reps <= 6, "{p:?}");
        assert_eq!(p.reps as usize, at.len(), "{p:?}");
        assert!(!d.why.is_empty() && d.target == 0.1, "{d:?}");
        let spent: f64 = at.iter().map(|s| s.server_s()).sum();
        assert!(
            spent > 0.0 && (d.server_s - spent).abs() < 1e-9,
            "{d:?} vs {spent}"
        );
    }
    // The end report states the time to answer, beside the fixed sweeps a user would run.
    assert!(
        run.stdout.contains("designed sweep (--design auto")
            && run.stdout.contains("server time:")
            && run.stdout.contains("--reps 3: ")
            && run.stdout.contains("--reps 6: "),
        "{}",
        run.stdout
    );
    // One interval per figure: the last line the progress printed for a length (its point
    // line, or the end of the run's correction of it) and the end table state the same TTFT
    // interval.
    for c in ["1k", "2k", "4k"] {
        let printed = progress_ttft(&run.stderr, c);
        let table = table_ttft(&run.stdout, c);
        assert!(
            printed.is_some() && printed == table,
            "{c}: progress {printed:?}, end table {table:?}\n{}\n{}",
            run.stderr,
            run.stdout
        );
    }
    // The JSON report says how each figure was obtained.
    let (code, out, err) =
        crate::common::run(&["report", run.out.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let design = &v["runs"][0]["design"];
    let points = design["points"].as_array().expect("design.points");
    assert_eq!(points.len(), 3, "{design}");
    for p in points {
        assert_eq!(p["obtained"], "measured", "{p}");
        assert!(p["n"].as_u64().unwrap() >= 1, "{p}");
        assert!(p["server_s"].as_f64().unwrap() > 0.0, "{p}");
        for key in ["ttft_ms", "prefill_tokens_per_s", "decode_tokens_per_s"] {
            let f = &p[key];
            if f.is_null() {
                // No interval is stated as none, never as the target.
                assert_eq!(p["basis"], "none", "{p}");
                continue;
            }
            let (lo, m, hi) = (
                f["low"].as_f64().unwrap(),
                f["median"].as_f64().unwrap(),
                f["high"].as_f64().unwrap(),
            );
            assert!(lo <= m && m <= hi, "{p}");
            let within = f["half_width"].as_f64().unwrap() <= 0.1;
            assert_eq!(f["within_target"].as_bool().unwrap(), within, "{p}");
        }
    }
    assert!(design["server_s"].as_f64().unwrap() > 0.0, "{design}");
    let fixed: Vec<u64> = design["fixed"]
        .as_array()
        .expect("design.fixed")
        .iter()
        .map(|f| f["reps"].as_u64().unwrap())
        .collect();
    assert_eq!(fixed, [3, 6], "{design}");
}

/// The TTFT half-width (`±4.1%`) the progress printed last for length `c`: its `point` line,
/// or the end of the run's correction ("TTFT ±4.1% during the run, ±14.3% …").
fn progress_ttft(stderr: &str, c: &str) -> Option<String> {
    let line = stderr.lines().rev().find(|l| {
        let t = l.trim_start();
        t.starts_with(&format!("{c} done:")) || t.starts_with(&format!("{c} corrected:"))
    })?;
    let from = match line.find("during the run, ") {
        Some(k) if line.trim_start().starts_with(&format!("{c} corrected:")) => k + 16,
        _ => line.find("TTFT ±")? + 5,
    };
    let rest = &line[from..];
    Some(rest[..rest.find('%')? + 1].to_owned())
}

/// The TTFT half-width the end table ("Designed sweep") states for length `c`.
fn table_ttft(stdout: &str, c: &str) -> Option<String> {
    let row = stdout.lines().find(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some(c) && w.next() == Some("measured")
    })?;
    // context, obtained, n, then the TTFT median and its `±x%`.
    let w = row.split_whitespace().nth(4)?;
    Some(w.to_owned())
}
