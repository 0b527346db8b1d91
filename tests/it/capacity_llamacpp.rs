//! The capacity map against the real reference llama-server with 4 slots (`-np 4`):
//! continuous batching, requests that wait for a slot, a window too short to time, and
//! resume in the middle of a grid.

use crate::common;

use common::{argv, run, serial, sweep, RefServer};
use ctxbench_schema::record::{read_results, Flag, Sample, Status};

/// 4 slots of 2048 tokens each: a 1k prompt and its output fit in one slot.
fn four_slots() -> RefServer {
    RefServer::start(8192, &["-np", "4"])
}

fn at(samples: &[Sample], c: u32) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|s| s.concurrency == Some(c))
        .collect()
}

#[test]
fn four_slots_batch_four_requests_and_make_the_fifth_to_eighth_wait() {
    let _g = serial();
    let srv = four_slots();
    let r = sweep(
        &srv.url(),
        &["--contexts", "1k", "--concurrency", "1,4,8", "--reps", "2"],
    )
    .ok();
    let res = r.results();
    assert_eq!(res.header.server.total_slots, Some(4));
    assert_eq!(res.header.config.concurrency, vec![1, 4, 8]);
    assert_eq!(
        res.header.config.output_tokens, 128,
        "grid default output length"
    );
    // Every request: completed, cold (the server counted 0 cached tokens), exact length.
    assert_eq!(res.samples.len(), 2 * (1 + 4 + 8));
    for s in &res.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert_eq!(s.cached_tokens, Some(0), "not cold: {s:?}");
        assert_eq!(s.prompt_tokens, Some(1024), "{s:?}");
        assert_eq!(s.output_tokens, Some(128), "{s:?}");
    }
    // Each wave of 4 ran together and its requests each have an in-window rate.
    let four = at(&res.samples, 4);
    assert!(four
        .iter()
        .all(|s| !s.has(&Flag::Queued) && !s.has(&Flag::NoOverlap)));
    // Continuous batching: the four requests of a wave decoded together, each producing at
    // least a quarter of its output inside the window where all four were decoding (a
    // server serving them one at a time has no such window), and the cell's aggregate is
    // the sum of the four in-window rates. Whether batching also raises the aggregate is the
    // hardware's: on 2 CPU cores this 2-layer model's step cost grows with the number of
    // sequences (attention over each one's KV dominates), so c=4 delivered ×1.05 of c=1 on a
    // quiet machine (938.5 vs 894.6 tok/s) and ×0.55 under load; asserting "more" was flaky.
    for wave in 0..2 {
        let w: Vec<_> = four
            .iter()
            .filter(|s| s.wave == Some(wave))
            .filter_map(|s| s.wave_stats.as_ref())
            .collect();
        assert_eq!(w.len(), 4, "wave {wave}: {w:?}");
        for ws in &w {
            let inside = ws.window_tokens.unwrap_or(0);
            assert!(
                inside >= 128 / 4,
                "wave {wave}: {inside} tokens in the window: {ws:?}"
            );
        }
        let sum: f64 = w
            .iter()
            .filter_map(|ws| ws.window_decode_tokens_per_s)
            .sum();
        let agg = w[0].aggregate_decode_tokens_per_s.unwrap_or(f64::NAN);
        assert!(
            (agg - sum).abs() <= 1e-6 * sum && sum > 0.0,
            "wave {wave}: aggregate {agg} is not the sum of in-window rates {sum}"
        );
    }
    // Eight requests on four slots: in each wave at least four waited for a slot, flagged.
    for wave in 0..2 {
        let queued = at(&res.samples, 8)
            .into_iter()
            .filter(|s| s.wave == Some(wave) && s.has(&Flag::Queued))
            .count();
        assert!(queued >= 4, "wave {wave}: {queued} queued");
    }
    // The report shows the map with the prediction it met.
    let (code, out, err) = run(&["report", r.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("capacity map"), "{out}");
    assert!(out.contains("fits→ran together"), "{out}");
    assert!(out.contains("queues→queued"), "{out}");
    // Where throughput stops paying depends on the host; waiting at 8 bounds the knee at 4.
    assert!(
        out.contains("knee at 1k: c = 4") || out.contains("knee at 1k: c = 1"),
        "{out}"
    );
    assert!(!out.contains("prediction missed"), "{out}");
}

#[test]
fn a_window_too_short_to_time_is_flagged_not_reported_as_a_rate() {
    let _g = serial();
    let srv = four_slots();
    let r = sweep(
        &srv.url(),
        &argv("--contexts 1k --concurrency 4 --wave-output-tokens 2 --reps 1"),
    )
    .ok();
    let res = r.results();
    assert_eq!(res.samples.len(), 4);
    for s in &res.samples {
        assert_eq!(s.status, Status::Ok);
        assert!(s.has(&Flag::NoOverlap), "{s:?}");
        let w = s.wave_stats.as_ref().unwrap();
        assert_eq!(w.aggregate_decode_tokens_per_s, None);
        assert_eq!(w.window_decode_tokens_per_s, None);
    }
    assert!(r.stdout.contains("no overlap"), "{}", r.stdout);
}

#[test]
fn resume_in_the_middle_of_a_grid_measures_only_what_is_missing() {
    let _g = serial();
    let srv = four_slots();
    let args = argv("--contexts 1k --concurrency 1,2 --wave-output-tokens 16 --reps 1");
    let r = sweep(&srv.url(), &args).ok();
    // Cut the file after the c=1 cell: header, its sample and its point line.
    let text = std::fs::read_to_string(&r.out).unwrap();
    let kept: Vec<&str> = text.lines().take(3).collect();
    assert!(kept[1].contains("\"type\":\"sample\"") && kept[2].contains("\"type\":\"point\""));
    std::fs::write(&r.out, kept.join("\n") + "\n").unwrap();
    let out = r.out.to_str().unwrap();
    let url = srv.url();
    let resume = [
        &["sweep", "--url", &url][..],
        &args,
        &["--out", out, "--resume"],
    ]
    .concat();
    let (code, _, err) = run(&resume);
    assert_eq!(code, 0, "{err}");
    let after = read_results(&r.out, false).unwrap().samples;
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(
        at(&after, 1).len(),
        1,
        "the recorded c=1 wave was measured again"
    );
    assert_eq!(at(&after, 2).len(), 2);
    assert!(after
        .iter()
        .all(|s| s.status == Status::Ok && s.cached_tokens == Some(0)));
}

#[test]
fn a_dry_run_of_a_grid_prints_the_prediction_once() {
    let _g = serial();
    let srv = four_slots();
    let r = sweep(
        &srv.url(),
        &argv("--contexts 512,1k --concurrency 1,4,8 --dry-run"),
    )
    .ok();
    let both = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(
        both.matches("prediction from the server's limits (4 slot(s))")
            .count(),
        1,
        "{both}"
    );
    assert!(
        r.stdout
            .contains("queues: the server has 4 slot(s) for 8 requests"),
        "{}",
        r.stdout
    );
    assert!(!r.out.exists(), "a dry run must not write results");
}
