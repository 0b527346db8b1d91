//! The retention map (issue 44) against the real reference llama-server: a prefix that
//! survives a short idle gap when every session has a slot, and one evicted by foreign
//! traffic when the only slot is taken and no host-memory cache keeps it (the cause named
//! slot reuse, with `GET /slots` as its evidence); a map stopped before its end continues
//! with `--resume`. Every assertion is on counts the server reported, none on speed.

use crate::common;

use common::{argv, run, serial, sweep, RefServer};
use ctxbench_schema::record::{Flag, Phase, Results, Sample};
use ctxbench_schema::warm::MissCause;
use serde_json::Value;

fn appends(r: &Results) -> Vec<&Sample> {
    r.samples
        .iter()
        .filter(|s| s.phase == Phase::Append)
        .filter(|s| s.warm.as_ref().is_some_and(|w| w.retention.is_some()))
        .collect()
}

fn json_report(path: &std::path::Path) -> Value {
    let (code, out, err) = run(&["report", "--format", "json", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn with_a_slot_per_session_a_prefix_survives_a_short_gap() {
    let _g = serial();
    // Two slots of 2048: the gaps of two sessions may overlap, each on its own slot.
    let srv = RefServer::start(4096, &["-np", "2"]);
    let r = sweep(
        &srv.url(),
        &argv("--mode retention --contexts 256 --gaps 0,1 --pressure 0 --reps 2 --output-tokens 4"),
    )
    .ok();
    assert!(r.stderr.contains("retention plan"), "{}", r.stderr);
    let res = r.results();
    let a = appends(&res);
    assert_eq!(a.len(), 4, "2 gaps × 2 reps");
    for s in &a {
        let w = s.warm.as_ref().unwrap();
        let ret = w.retention.as_ref().unwrap();
        // The proof: the prefix came back whole after the gap.
        assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{s:?}");
        assert!(!s.has(&Flag::CacheMiss) && ret.cause.is_none(), "{s:?}");
        assert!(ret.idle_s >= ret.gap_s, "{ret:?}");
        assert_eq!(ret.pool_tokens, Some(4096), "{ret:?}");
        assert!(ret.pool_source.contains("slots × context"), "{ret:?}");
        assert!(w.evidence.as_ref().unwrap().contains("GET /slots"), "{w:?}");
    }
    // Each prime was new to the cache (its own nonce); the cold column beside it.
    let primes: Vec<&Sample> = res
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Prime)
        .collect();
    assert_eq!(primes.len(), 4);
    assert!(
        primes.iter().all(|s| s.cached_tokens == Some(0)),
        "{primes:?}"
    );
    let cold = res
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Cold)
        .count();
    assert_eq!(cold, 2);
    let j = json_report(&r.out);
    let e = &j["runs"][0]["warm"]["retention_edges"][0];
    assert_eq!(e["gap"]["held"]["value"], 1.0, "{e}");
    assert_eq!(e["gap"]["held"]["hits"], 2, "{e}");
    assert!(e["gap"]["lost"].is_null(), "{e}");
    assert!(r.stdout.contains("Retention by idle gap"), "{}", r.stdout);
}

#[test]
fn pressure_past_the_only_slot_evicts_the_prefix_named_slot_reuse_and_resume_continues() {
    let _g = serial();
    // One slot, no host-memory prompt cache: a foreign prompt takes the slot.
    let srv = RefServer::start(2048, &["--cache-ram", "0"]);
    let args =
        "--mode retention --contexts 256 --gaps 0 --pressure 0,0.5 --reps 1 --output-tokens 4";
    let r = sweep(&srv.url(), &argv(args)).ok();
    let res = r.results();
    let a = appends(&res);
    assert_eq!(a.len(), 2, "pressure 0 and 0.5");
    let at = |p: f64| {
        *a.iter()
            .find(|s| {
                s.warm
                    .as_ref()
                    .unwrap()
                    .retention
                    .as_ref()
                    .unwrap()
                    .pressure
                    == p
            })
            .unwrap()
    };
    let kept = at(0.0);
    assert!(!kept.has(&Flag::CacheMiss), "{kept:?}");
    let lost = at(0.5);
    let w = lost.warm.as_ref().unwrap();
    let ret = w.retention.as_ref().unwrap();
    assert!(lost.has(&Flag::CacheMiss), "{lost:?}");
    assert!(lost.cached_tokens.unwrap() < w.least_cached());
    // Half the pool of 1 × 2048 went through, counted by the server.
    assert!(
        ret.foreign_prompts >= 1 && ret.foreign_tokens >= 1000,
        "{ret:?}"
    );
    assert_eq!(ret.cause, Some(MissCause::SlotReuse), "{ret:?}");
    let ev = w.evidence.as_ref().unwrap();
    assert!(
        ev.contains("GET /slots before the append: slot 0 held"),
        "{ev}"
    );
    assert!(ev.contains("prompts for 1 slot(s)"), "{ev}");
    let j = json_report(&r.out);
    let e = &j["runs"][0]["warm"]["retention_edges"][0];
    assert_eq!(e["pressure"]["held"]["value"], 0.0, "{e}");
    assert_eq!(e["pressure"]["lost"]["value"], 0.5, "{e}");
    assert_eq!(e["pressure"]["lost"]["hits"], 0, "{e}");
    assert!(e["miss_cost_s"].is_number(), "{e}");
    let cell = &j["runs"][0]["warm"]["retention"];
    assert!(
        cell.as_array()
            .unwrap()
            .iter()
            .any(|c| c["causes"][0][0] == "slot_reuse"),
        "{cell}"
    );
    // Stopped before its last append: the file loses it (and the end), --resume measures
    // only that cell again.
    let text = std::fs::read_to_string(&r.out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last = lines
        .iter()
        .rposition(|l| l.contains("\"phase\":\"append\""))
        .unwrap();
    std::fs::write(&r.out, lines[..last].join("\n") + "\n").unwrap();
    let out = r.out.to_str().unwrap();
    let mut again = vec!["sweep", "--url"];
    let url = srv.url();
    again.push(&url);
    again.extend(argv(args));
    again.extend(["--out", out, "--resume"]);
    let (code, _, err) = run(&again);
    assert_eq!(code, 0, "{err}");
    let res = ctxbench_schema::record::read_results(&r.out, false).unwrap();
    assert_eq!(
        appends(&res).len(),
        2,
        "the missing cell measured again, no other"
    );
    assert_eq!(
        res.samples
            .iter()
            .filter(|s| s.phase == Phase::Cold)
            .count(),
        1,
        "the cold column kept"
    );
}
