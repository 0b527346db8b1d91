//! Warm context at depth (issue 22) against the real reference llama-server: the append
//! grid, the growing conversation and the cache tiers, each sample's reuse proven from the
//! server's own counts (`timings.cache_n`, `prompt_n`), and the negative controls
//! (`cache_prompt: false`, `--cache-ram 0`) flagged. Nothing here depends on speed: every
//! assertion is on counts the server reported.

use crate::common;

use common::{run, serial, sweep, RefServer};
use ctxbench::record::{Flag, Phase, Results, Sample, Status};
use ctxbench::warm::Tier;
use serde_json::Value;

fn phase(r: &Results, p: Phase) -> Vec<&Sample> {
    r.samples.iter().filter(|s| s.phase == p).collect()
}

/// A server with the slot endpoints (flush before each prime, save/restore for tiers).
fn server(ctx: u32, extra: &[&str]) -> (RefServer, tempfile::TempDir) {
    let slots = tempfile::tempdir().unwrap();
    let dir = slots.path().to_str().unwrap().to_owned();
    let mut args = vec!["--slot-save-path", dir.as_str()];
    args.extend_from_slice(extra);
    (RefServer::start(ctx, &args), slots)
}

fn json_report(path: &std::path::Path) -> Value {
    let (code, out, err) = run(&["report", "--format", "json", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn append_at_depth_reuses_exactly_the_cached_prefix_beside_the_cold_prefill() {
    let _g = serial();
    let (srv, _slots) = server(4096, &[]);
    let r = sweep(
        &srv.url(),
        &[
            "--mode",
            "append",
            "--contexts",
            "512,1024",
            "--append",
            "64,256",
            "--reps",
            "1",
            "--output-tokens",
            "4",
            "--ttft-target",
            "60000",
        ],
    )
    .ok();
    let res = r.results();
    let appends = phase(&res, Phase::Append);
    assert_eq!(appends.len(), 4, "2 L × 2 N");
    for s in &appends {
        let w = s.warm.as_ref().unwrap();
        // The proof: the server reused exactly the prefix and computed only the new tokens.
        assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{s:?}");
        assert_eq!(s.prompt_tokens, Some(w.prefix_tokens + w.new_tokens));
        let computed = s.server.as_ref().and_then(|t| t.prompt_n);
        assert_eq!(computed, Some(w.new_tokens), "only N computed: {s:?}");
        assert!(!s.has(&Flag::CacheMiss) && ctxbench::warm::usable(s));
        assert_eq!(w.allowance, 1);
        assert!(
            w.allowance_rule.contains("llama.cpp"),
            "{}",
            w.allowance_rule
        );
    }
    // The prefix was new to the cache (its own nonce), and the cold column was cold.
    for s in phase(&res, Phase::Prime) {
        assert_eq!(s.cached_tokens, Some(0), "{s:?}");
    }
    let cold = phase(&res, Phase::Cold);
    assert_eq!(cold.len(), 4);
    assert!(cold
        .iter()
        .all(|s| s.usable() && s.cached_tokens == Some(0)));
    // The report: the grid with the cold column, the fit and the budget.
    assert!(r.stdout.contains("TTFT_inc"), "{}", r.stdout);
    assert!(r.stdout.contains("turn budget under"), "{}", r.stdout);
    let j = json_report(&r.out);
    let cells = j["runs"][0]["warm"]["append"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    for c in cells {
        assert_eq!(c["usable"], 1, "{c}");
        assert!(c["cold_ttft_ms"]["median"].as_f64().is_some(), "{c}");
        assert!(c["speedup"].as_f64().is_some(), "{c}");
    }
    assert!(j["runs"][0]["warm"]["fit"]["coef"].is_array());
    let md = std::fs::read_to_string(r.out.with_extension("md")).unwrap();
    assert!(md.contains("cold TTFT(L+N)"), "{md}");
}

#[test]
fn the_negative_control_recomputes_the_prefix_and_every_sample_is_flagged() {
    let _g = serial();
    let (srv, _slots) = server(4096, &[]);
    let r = sweep(
        &srv.url(),
        &[
            "--mode",
            "append",
            "--contexts",
            "512,1024",
            "--append",
            "64",
            "--reps",
            "1",
            "--output-tokens",
            "4",
            "--negative-control",
        ],
    )
    .ok();
    let res = r.results();
    let appends = phase(&res, Phase::Append);
    assert_eq!(appends.len(), 2);
    for s in &appends {
        let w = s.warm.as_ref().unwrap();
        assert!(w.bypass);
        // cache_prompt: false: nothing reused, the whole prompt computed again.
        assert_eq!(s.cached_tokens, Some(0), "{s:?}");
        let computed = s.server.as_ref().and_then(|t| t.prompt_n);
        assert_eq!(computed, Some(w.prefix_tokens + w.new_tokens));
        assert!(s.has(&Flag::CacheMiss), "{s:?}");
        assert!(!ctxbench::warm::usable(s));
    }
    let j = json_report(&r.out);
    for c in j["runs"][0]["warm"]["append"].as_array().unwrap() {
        assert_eq!(c["usable"], 0, "kept out of the summaries: {c}");
        assert_eq!(c["misses"], 1);
        assert!(c["ttft_ms"].is_null());
    }
    assert!(r.stdout.contains("negative control"), "{}", r.stdout);
}

#[test]
fn a_conversation_grows_to_the_servers_maximum_reusing_its_whole_history() {
    let _g = serial();
    let (srv, _slots) = server(1024, &[]);
    let r = sweep(
        &srv.url(),
        &[
            "--mode",
            "conversation",
            "--turn-tokens",
            "128",
            "--output-tokens",
            "8",
        ],
    )
    .ok();
    let res = r.results();
    let turns = phase(&res, Phase::Turn);
    assert!(turns.len() >= 6, "{} turns", turns.len());
    for (i, s) in turns.iter().enumerate() {
        let w = s.warm.as_ref().unwrap();
        assert_eq!(w.turn, Some(i as u32));
        assert_eq!(s.status, Status::Ok);
        if i == 0 {
            continue;
        }
        // The previous prompt and its answer, less the answer's last token (never fed back).
        let prev = turns[i - 1];
        let expected = prev.prompt_tokens.unwrap() + prev.output_tokens.unwrap() - 1;
        assert_eq!(w.expected_cached, expected);
        assert_eq!(s.cached_tokens, Some(expected), "turn {i}: {s:?}");
        assert!(!s.has(&Flag::CacheMiss));
    }
    // Up to the maximum: one more turn would not fit in 1024.
    let last = turns.last().unwrap().prompt_tokens.unwrap();
    assert!(last + 8 + 128 + 8 > 1024, "stopped early at {last}");
    assert!(r.stdout.contains("no turn lost its cache"), "{}", r.stdout);
}

#[test]
fn a_conversation_whose_cache_is_refused_names_each_lost_turn_and_its_length() {
    let _g = serial();
    let (srv, _slots) = server(1024, &[]);
    let r = sweep(
        &srv.url(),
        &[
            "--mode",
            "conversation",
            "--turn-tokens",
            "256",
            "--output-tokens",
            "4",
            "--negative-control",
        ],
    )
    .ok();
    let res = r.results();
    let turns = phase(&res, Phase::Turn);
    assert!(turns.len() >= 3);
    for s in &turns[1..] {
        assert!(s.has(&Flag::CacheMiss), "{s:?}");
        let t = s.warm.as_ref().unwrap().turn.unwrap();
        let named = format!(
            "turn {t} at {} tokens: cached 0 of",
            s.prompt_tokens.unwrap()
        );
        assert!(r.stdout.contains(&named), "{named} in {}", r.stdout);
    }
}

/// The tiers' samples by tier.
fn tier(r: &Results, t: Tier) -> Vec<&Sample> {
    r.samples
        .iter()
        .filter(|s| s.phase == Phase::Tier && s.warm.as_ref().and_then(|w| w.tier) == Some(t))
        .collect()
}

#[test]
fn each_cache_tier_is_proven_from_the_servers_answers() {
    let _g = serial();
    let (srv, _slots) = server(4096, &[]);
    let r = sweep(
        &srv.url(),
        &[
            "--mode",
            "tiers",
            "--contexts",
            "512,1024",
            "--append",
            "64",
            "--reps",
            "1",
            "--output-tokens",
            "4",
        ],
    )
    .ok();
    let res = r.results();
    for t in [Tier::Live, Tier::Ram, Tier::Disk] {
        let ss = tier(&res, t);
        assert_eq!(ss.len(), 2, "{t:?}");
        for s in ss {
            let w = s.warm.as_ref().unwrap();
            assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{t:?}: {s:?}");
            assert!(w.evidence.is_some());
            assert_eq!(w.restore_ms.is_some(), t == Tier::Disk);
        }
    }
    // The ram tier's proof: the only slot held another prompt just before.
    let ev = tier(&res, Tier::Ram)[0]
        .warm
        .as_ref()
        .unwrap()
        .evidence
        .clone();
    assert!(ev.unwrap().contains("the only slot held another prompt"));
    let disk = tier(&res, Tier::Disk)[0]
        .warm
        .as_ref()
        .unwrap()
        .evidence
        .clone();
    assert!(disk.unwrap().contains("restored ("));
    assert!(phase(&res, Phase::Cold)
        .iter()
        .all(|s| s.cached_tokens == Some(0)));
    assert!(r.stdout.contains("Cache tiers"), "{}", r.stdout);
}

#[test]
fn without_a_host_memory_cache_the_ram_tier_is_a_flagged_miss() {
    let _g = serial();
    let (srv, _slots) = server(4096, &["--cache-ram", "0"]);
    let r = sweep(
        &srv.url(),
        &[
            "--mode",
            "tiers",
            "--contexts",
            "512",
            "--append",
            "64",
            "--reps",
            "1",
            "--output-tokens",
            "4",
        ],
    )
    .ok();
    let res = r.results();
    let ram = tier(&res, Tier::Ram);
    assert_eq!(ram.len(), 1);
    assert!(ram[0].has(&Flag::CacheMiss), "{:?}", ram[0]);
    assert!(ram[0].cached_tokens.unwrap() < 512);
    // The other tiers do not depend on it.
    for t in [Tier::Live, Tier::Disk] {
        assert!(!tier(&res, t)[0].has(&Flag::CacheMiss), "{t:?}");
    }
    let j = json_report(&r.out);
    let row = &j["runs"][0]["warm"]["tiers"][0];
    assert!(row["ram_ms"].is_null(), "{row}");
    assert_eq!(row["misses"][0][0], "ram");
}
