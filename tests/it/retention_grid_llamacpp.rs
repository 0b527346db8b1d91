//! The retention map's grid and its side-by-side (issue 44) against the real reference
//! llama-server: `--grid` measures a gap under pressure (the traffic at once, the append when
//! the gap is over, the plan saying what its gaps add), drawn as a gap × pressure heat map;
//! `compare` of a map with the host-memory prompt cache (llama-server's default) against one
//! without (`--cache-ram 0`) sets their edges side by side: A keeps the prefix under
//! pressure, B loses it at the first. Assertions on counts the server reported, none on speed.

use crate::common;

use common::{argv, run, serial, sweep_to, RefServer};
use ctxbench_schema::record::{Phase, Sample};
use serde_json::Value;

fn retention(s: &Sample) -> Option<&ctxbench_schema::warm::Retention> {
    s.warm.as_ref()?.retention.as_ref()
}

#[test]
fn the_grid_measures_a_gap_under_pressure_and_draws_it() {
    let _g = serial();
    let srv = RefServer::start(4096, &["-np", "2"]);
    let r = sweep_to(
        "grid.jsonl",
        &srv.url(),
        &argv("--mode retention --grid --contexts 256 --gaps 0,1 --pressure 0,0.25 --reps 1 --output-tokens 4"),
    )
    .ok();
    assert!(
        r.stderr.contains("their gaps add 1 s"),
        "the plan states the grid's cost: {}",
        r.stderr
    );
    let res = r.results();
    assert!(res.header.config.warm.as_ref().unwrap().grid);
    let mut cells: Vec<(f64, f64)> = res
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Append)
        .filter_map(|s| retention(s).map(|x| (x.gap_s, x.pressure)))
        .collect();
    cells.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
    assert_eq!(cells, [(0.0, 0.0), (1.0, 0.0), (0.0, 0.25), (1.0, 0.25)]);
    let both = res
        .samples
        .iter()
        .find(|s| retention(s).is_some_and(|x| x.gap_s == 1.0 && x.pressure == 0.25))
        .unwrap();
    let x = retention(both).unwrap();
    // The traffic went through (a quarter of 2 × 2048, counted), and the append waited the
    // whole gap from the prime.
    assert!(x.foreign_prompts >= 1 && x.foreign_tokens >= 1000, "{x:?}");
    assert!(x.idle_s >= 1.0, "{x:?}");
    assert!(both.cached_tokens.is_some(), "judged: {both:?}");
    let out = r.out.to_str().unwrap();
    let (code, html, err) = run(&["report", out, "--format", "html"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        html.contains("Retention at L = 256: idle gap × pressure"),
        "grid map"
    );
    assert!(html.contains("Retention by idle gap"), "gap map");
    assert!(
        html.contains("L = 256, gap 1 s, pressure 0.25: "),
        "its cell's title"
    );
}

fn map(file: &str, extra: &[&str]) -> common::SweepRun {
    let srv = RefServer::start(2048, extra);
    sweep_to(
        file,
        &srv.url(),
        &argv(
            "--mode retention --contexts 256 --gaps 0 --pressure 0,0.5 --reps 2 --output-tokens 4",
        ),
    )
    .ok()
}

#[test]
fn compare_sets_two_maps_edges_side_by_side() {
    let _g = serial();
    // One slot each: a foreign prompt takes it; only A's host-memory cache keeps the prefix.
    let a = map("ram.jsonl", &[]);
    let b = map("noram.jsonl", &["--cache-ram", "0"]);
    let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let (code, out, err) = run(&[
        "compare",
        &s(&a.out),
        &s(&b.out),
        "--format",
        "json",
        "--allow-mismatch",
    ]);
    assert_eq!(code, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let e = &j["versus"][0]["warm"]["edges"][0];
    assert_eq!(e["prefix_tokens"], 256, "{e}");
    assert_eq!(e["a"]["pressure"]["held"]["value"], 0.5, "A kept it: {e}");
    assert!(e["a"]["pressure"]["lost"].is_null(), "{e}");
    assert_eq!(e["b"]["pressure"]["held"]["value"], 0.0, "{e}");
    assert_eq!(e["b"]["pressure"]["lost"]["value"], 0.5, "B lost it: {e}");
    assert_eq!(e["b"]["pressure"]["lost"]["hits"], 0, "{e}");
    for side in ["a_cost", "b_cost"] {
        let c = &e[side];
        // Two cold and at least two warm samples: an interval around the mean.
        assert!(
            c["n_cold"] == 2 && c["n_warm"].as_u64().unwrap() >= 2,
            "{c}"
        );
        let (lo, m, hi) = (
            c["low_s"].as_f64().unwrap(),
            c["mean_s"].as_f64().unwrap(),
            c["high_s"].as_f64().unwrap(),
        );
        assert!(lo <= m && m <= hi, "{c}");
    }
    let (code, text, err) = run(&["compare", &s(&a.out), &s(&b.out), "--allow-mismatch"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("Retention edges, A beside B"), "{text}");
    assert!(text.contains("0.5 (0/2)"), "B's first loss, k/n: {text}");
}
