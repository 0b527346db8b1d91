//! Warm context at depth (issue 22) against the real reference llama-server: the append
//! grid, the growing conversation and the cache tiers, each sample's reuse proven from the
//! server's own counts (`timings.cache_n`, `prompt_n`), and the negative controls
//! (`cache_prompt: false`, `--cache-ram 0`) flagged. Nothing here depends on speed: every
//! assertion is on counts the server reported.

use crate::common;

use common::{argv, run, serial, sweep, RefServer};
use ctxbench_schema::record::{Flag, Phase, Results, Sample, Status};
use ctxbench_schema::warm::Tier;
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
        &argv("--mode append --contexts 512,1024 --append 64,256 --reps 1 --output-tokens 16 --ttft-target 60000"),
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
        assert!(!s.has(&Flag::CacheMiss) && ctxbench_schema::warm::usable(s));
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
    // 16 output tokens, not 4: on a loaded host a client descheduled through a 4-token decode
    // reads every token at once, which is a held-back stream to the client (flagged, kept out).
    for s in &cold {
        assert!(s.usable() && s.cached_tokens == Some(0), "{s:?}");
    }
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
    assert!(j["runs"][0]["warm"]["fits"][0]["coef"].is_array());
    let md = std::fs::read_to_string(r.out.with_extension("md")).unwrap();
    assert!(md.contains("cold TTFT(L+N)"), "{md}");
}

/// The append samples of the waves of `c` sessions, by (length, wave).
fn waves(r: &Results, c: u32) -> std::collections::BTreeMap<(u64, u32), Vec<&Sample>> {
    let mut by: std::collections::BTreeMap<(u64, u32), Vec<&Sample>> = Default::default();
    for s in phase(r, Phase::Append) {
        if s.concurrency == Some(c) {
            by.entry((s.context_tokens, s.wave.unwrap()))
                .or_default()
                .push(s);
        }
    }
    by
}

#[test]
fn two_sessions_appending_at_once_each_reuse_their_own_prefix() {
    let _g = serial();
    // Two slots of 4096: each session's prefix has a slot of its own.
    let (srv, _slots) = server(8192, &["-np", "2"]);
    let r = sweep(
        &srv.url(),
        &argv("--mode append --contexts 512,1024 --append 64 --concurrency 1,2 --reps 1 --wave-output-tokens 8 --ttft-target 60000"),
    )
    .ok();
    let res = r.results();
    let two = waves(&res, 2);
    assert_eq!(two.len(), 2, "one wave per L: {two:?}");
    let mut prefixes = Vec::new();
    for wave in two.values() {
        assert_eq!(wave.len(), 2, "both sessions of the wave");
        for s in wave {
            let w = s.warm.as_ref().unwrap();
            // Each session found its own prefix whole and computed only its N new tokens.
            assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{s:?}");
            let computed = s.server.as_ref().and_then(|t| t.prompt_n);
            assert_eq!(computed, Some(w.new_tokens), "{s:?}");
            assert!(ctxbench_schema::warm::usable(s), "{s:?}");
            assert!(s.wave_stats.is_some(), "timed as a wave: {s:?}");
            prefixes.push(s.prompt_tokens);
        }
    }
    // The primes of the two sessions were each new to the cache (their own nonces).
    let primes: Vec<&Sample> = phase(&res, Phase::Prime)
        .into_iter()
        .filter(|s| s.concurrency == Some(2))
        .collect();
    assert_eq!(primes.len(), 4);
    assert!(
        primes.iter().all(|s| s.cached_tokens == Some(0)),
        "{primes:?}"
    );
    // The cold column at two sessions is a cold wave of two prompts of L + N.
    let cold: Vec<&Sample> = phase(&res, Phase::Cold)
        .into_iter()
        .filter(|s| s.concurrency == Some(2))
        .collect();
    assert_eq!(cold.len(), 4);
    // An 8-token wave sample may lose its timing to a loaded host, never its cache verdict.
    assert!(
        cold.iter()
            .all(|s| common::usable_but_for_the_host(s) && s.cached_tokens == Some(0)),
        "{cold:?}"
    );
    // One session at a time is measured as before, beside.
    assert_eq!(waves(&res, 1).len(), 0);
    assert_eq!(
        phase(&res, Phase::Append)
            .iter()
            .filter(|s| s.concurrency.is_none())
            .count(),
        2
    );
    let j = json_report(&r.out);
    let w = &j["runs"][0]["warm"];
    let cells = w["append"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "{w}");
    for c in cells.iter().filter(|c| c["concurrency"] == 2) {
        assert_eq!(
            (c["usable"].as_u64(), c["samples"].as_u64()),
            (Some(2), Some(2)),
            "{c}"
        );
        assert!(c["cold_ttft_ms"]["median"].as_f64().is_some(), "{c}");
    }
    let budgets = w["budget"].as_array().unwrap();
    assert!(budgets.iter().any(|b| b["concurrency"] == 2), "{w}");
    assert!(r.stdout.contains("sessions"), "{}", r.stdout);
    assert!(r.stdout.contains("at 2 session(s)"), "{}", r.stdout);
}

#[test]
fn sessions_sharing_one_slot_evict_each_other_and_their_appends_are_flagged_misses() {
    let _g = serial();
    // One slot and no host-memory cache: a session's prime evicts the other's prefix.
    let (srv, _slots) = server(4096, &["--cache-ram", "0"]);
    let r = sweep(
        &srv.url(),
        &argv("--mode append --contexts 512 --append 64 --concurrency 2 --reps 2 --wave-output-tokens 8"),
    )
    .ok();
    assert!(
        r.stderr.contains("1 slot(s)") && r.stderr.contains("-np 2"),
        "{}",
        r.stderr
    );
    let res = r.results();
    let two = waves(&res, 2);
    assert_eq!(two.len(), 2);
    for wave in two.values() {
        // Whichever append the slot serves first recomputes its prefix: at least one miss.
        let misses: Vec<&&Sample> = wave.iter().filter(|s| s.has(&Flag::CacheMiss)).collect();
        assert!(!misses.is_empty(), "{wave:?}");
        for s in misses {
            let w = s.warm.as_ref().unwrap();
            assert!(s.cached_tokens.unwrap() < w.least_cached(), "{s:?}");
            assert!(!ctxbench_schema::warm::usable(s));
        }
    }
    let j = json_report(&r.out);
    let c = &j["runs"][0]["warm"]["append"][0];
    assert!(c["misses"].as_u64().unwrap() >= 2, "{c}");
    assert!(c["usable"].as_u64() < c["samples"].as_u64(), "{c}");
}

#[test]
fn the_negative_control_recomputes_the_prefix_and_every_sample_is_flagged() {
    let _g = serial();
    let (srv, _slots) = server(4096, &[]);
    let r = sweep(
        &srv.url(),
        &argv("--mode append --contexts 512,1024 --append 64 --reps 1 --output-tokens 4 --negative-control"),
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
        assert!(!ctxbench_schema::warm::usable(s));
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
        &argv("--mode conversation --turn-tokens 128 --output-tokens 8"),
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
        &argv("--mode conversation --turn-tokens 256 --output-tokens 4 --negative-control"),
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
        &argv("--mode tiers --contexts 512,1024 --append 64 --reps 1 --output-tokens 4"),
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
        &argv("--mode tiers --contexts 512 --append 64 --reps 1 --output-tokens 4"),
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
