//! `--precision P --precision-of p90` against the reference llama-server: each point takes
//! at least the samples a p90's distribution-free interval needs (29 at 95%), stops within
//! `--max-reps`, and records the percentile and the half-widths it reached; with
//! `--design auto`, every length is measured to that floor. Short lengths, three output
//! tokens (eight for the design, whose p90 step time needs them): 29 to 36 small requests a
//! length.

use crate::common::*;

#[test]
fn a_p90_targeted_sweep_takes_at_least_the_samples_its_interval_needs_and_records_the_p90() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "256",
            "--output-tokens",
            "3",
            "--precision",
            "0.5",
            "--precision-of",
            "p90",
            "--max-reps",
            "36",
        ],
    )
    .ok();
    let r = run.results();
    let pol = &r.header.config.reps;
    assert_eq!(
        (pol.quantile, pol.min_reps, pol.max_reps),
        (Some(0.9), 29, 36)
    );
    // The plan line, printed before measuring, names the percentile and the floor.
    assert!(
        run.stderr
            .contains("29–36 reps until the p90's 95% interval"),
        "{}",
        run.stderr
    );
    assert_eq!(r.points.len(), 1, "{:?}", r.points);
    for p in &r.points {
        let n = r
            .samples
            .iter()
            .filter(|s| s.context_tokens == p.context_tokens)
            .count();
        assert_eq!(p.reps as usize, n, "{p:?}");
        assert!((29..=36).contains(&p.reps), "{p:?}");
        let q = p.quantile.expect("the point records its percentile target");
        assert_eq!((q.q, q.needed), (0.9, 29), "{p:?}");
        use ctxbench_schema::record::StopReason;
        match p.stop_reason {
            StopReason::PrecisionReached => assert!(
                q.ttft_half_width.is_some_and(|w| w <= 0.5)
                    && q.step_half_width.is_some_and(|w| w <= 0.5),
                "{p:?}"
            ),
            StopReason::MaxReps => assert_eq!(p.reps, 36, "{p:?}"),
            other => panic!("{other:?}: {p:?}"),
        }
        // Enough usable samples for an interval: the half-widths exist.
        if p.usable >= 29 {
            assert!(q.ttft_half_width.is_some(), "{p:?}");
        }
    }
    // Each point's progress line states the p90's intervals, not the median's.
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(" done: "))
        .collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines
            .iter()
            .all(|l| l.contains("p90 95% interval (order statistics) TTFT")),
        "{lines:?}"
    );
}

#[test]
fn a_cap_below_the_samples_a_percentile_needs_is_refused_before_measuring() {
    // No server: the options are refused before any request.
    let url = unreachable_url();
    let (code, _, err) = run(&[
        "sweep",
        "--url",
        &url,
        "--contexts",
        "1k",
        "--precision",
        "0.1",
        "--precision-of",
        "p95",
        "--max-reps",
        "30",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("needs at least 59 samples") && err.contains("--max-reps 59"),
        "{err}"
    );
}

#[test]
fn a_designed_p90_sweep_measures_every_length_to_the_p90s_floor_and_says_so() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    // Three lengths: with a median target the middle one could be predicted; a p90 is not.
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "64,128,512",
            "--output-tokens",
            "8",
            "--precision",
            "0.5",
            "--precision-of",
            "p90",
            "--design",
            "auto",
            "--max-reps",
            "32",
        ],
    )
    .ok();
    let r = run.results();
    // A length's last point line is its word (the end of the run may correct an earlier one).
    let mut last = std::collections::BTreeMap::new();
    for p in &r.points {
        last.insert(p.context_tokens, p);
    }
    assert_eq!(last.len(), 3, "{:?}", r.points);
    use ctxbench_schema::record::StopReason;
    for p in last.values() {
        let n = r
            .samples
            .iter()
            .filter(|s| s.context_tokens == p.context_tokens)
            .count();
        assert_eq!(p.reps as usize, n, "{p:?}");
        let d = p.design.as_ref().expect("a designed point line");
        assert!(d.why.contains("p90 TTFT"), "{}", d.why);
        match p.stop_reason {
            // Precise only from the p90's floor on; out of reach is judged from it too.
            StopReason::PrecisionReached | StopReason::OutOfReach => {
                assert!((29..=32).contains(&p.reps), "{p:?}")
            }
            StopReason::MaxReps => assert_eq!(p.reps, 32, "{p:?}"),
            other => panic!("{other:?}: {p:?}"),
        }
        let q = p.quantile.expect("the point records its percentile target");
        assert_eq!((q.q, q.needed), (0.9, 29), "{p:?}");
    }
}
