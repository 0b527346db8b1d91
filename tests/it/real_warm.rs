//! Warm context at depth (issue 22) on real SGLang and vLLM (CPU, tiny model): the append
//! grid's reuse proven from each server's own cached-token count, with each family's stated
//! allowance (SGLang's radix cache per token; vLLM whole blocks of 128 on CPU), one session
//! and two at once (each its own prefix, both in the shared prefix cache). Counts only:
//! nothing here depends on speed.

use crate::common;

use common::real::{Family, RealServer};
use common::{argv, sweep};
use ctxbench_schema::record::{Flag, Phase, Results, Sample};
use ctxbench_schema::warm::Tier;

/// Every append sample's cached count, checked against `expect(L)`; returns how many.
fn check_appends(r: &Results, expect: impl Fn(u64) -> u64) -> usize {
    let appends: Vec<_> = r
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Append)
        .collect();
    for s in &appends {
        let w = s.warm.as_ref().unwrap();
        assert_eq!(s.cached_tokens, Some(expect(w.prefix_tokens)), "{s:?}");
        assert!(
            !s.has(&Flag::CacheMiss) && ctxbench_schema::warm::usable(s),
            "{s:?}"
        );
    }
    // The prefix was new to the cache: at most the nonce's start matched (the cold rule).
    for s in r.samples.iter().filter(|s| s.phase == Phase::Prime) {
        assert!(s.cache_verified && !s.contaminated, "{s:?}");
    }
    let two = appends.iter().filter(|s| s.concurrency == Some(2)).count();
    assert_eq!(two, 2 * appends.len() / 3, "two sessions at once at each L");
    appends.len()
}

#[test]
fn real_sglang_radix_cache_serves_the_whole_prefix_of_an_append() {
    let srv = RealServer::start(Family::Sglang, &[]);
    let r = sweep(
        &srv.url(),
        &argv("--mode append --contexts 1000,2000 --append 100 --concurrency 1,2 --reps 1 --wave-output-tokens 8"),
    )
    .ok();
    let res = r.results();
    // 2 L × (one session + two at once), every session its own prefix.
    assert_eq!(check_appends(&res, |l| l), 6);
    let rule = &res
        .samples
        .iter()
        .find_map(|s| s.warm.clone())
        .unwrap()
        .allowance_rule;
    assert!(rule.contains("SGLang"), "{rule}");
}

#[test]
fn real_vllm_prefix_cache_serves_whole_blocks_of_an_append() {
    let srv = RealServer::start(
        Family::Vllm,
        &["--enable-prefix-caching", "--enable-prompt-tokens-details"],
    );
    // vLLM's CPU backend keeps KV blocks of 128 tokens: of 1000, 7 whole blocks (896) are
    // reused (recorded on vLLM 0.32.0), within the stated allowance of L mod 128.
    let r = sweep(
        &srv.url(),
        &argv("--mode append --contexts 1000,2000 --append 100 --concurrency 1,2 --reps 1 --wave-output-tokens 8"),
    )
    .ok();
    let res = r.results();
    assert_eq!(check_appends(&res, |l| l / 128 * 128), 6);
    let w = res.samples.iter().find_map(|s| s.warm.clone()).unwrap();
    assert!(w.allowance_rule.contains("128"), "{}", w.allowance_rule);
}

#[test]
fn real_sglang_tiers_evict_the_prefix_from_device_memory_and_without_hicache_recompute_it() {
    // A device pool of 4096 tokens, so the filler that evicts a prefix is small. HiCache
    // itself does not run on CPU (its host pool calls CUDA's cudaHostRegister), so the ram
    // tier is the negative control here: evicted, recomputed, flagged.
    let srv = RealServer::start(Family::Sglang, &["--max-total-tokens", "4096"]);
    let r = sweep(
        &srv.url(),
        &argv("--mode tiers --contexts 1000,2000 --append 100 --reps 1 --output-tokens 4"),
    )
    .ok();
    let res = r.results();
    // The pool, not the model's 65536, caps the prompt: SGLang takes at most 4090 tokens.
    assert_eq!(
        res.header.server.max_context,
        Some(4090),
        "{:?}",
        res.header.server
    );
    let tier = |t: Tier| -> Vec<&Sample> {
        res.samples
            .iter()
            .filter(|s| s.phase == Phase::Tier)
            .filter(|s| s.warm.as_ref().and_then(|w| w.tier) == Some(t))
            .collect()
    };
    let (live, ram) = (tier(Tier::Live), tier(Tier::Ram));
    assert_eq!((live.len(), ram.len()), (2, 2), "{:?}", res.samples);
    for s in &live {
        // SGLang's own split: every cached token on the device, none from host memory.
        let w = s.warm.as_ref().unwrap();
        assert_eq!(s.cached_tokens, Some(w.prefix_tokens), "{s:?}");
        assert_eq!(s.cached_host_tokens, Some(0), "{s:?}");
        assert!(ctxbench_schema::warm::usable(s));
    }
    for s in &ram {
        let w = s.warm.as_ref().unwrap();
        let ev = w.evidence.as_deref().unwrap();
        assert!(ev.contains("device KV pool of 4096 tokens"), "{ev}");
        // Evicted from the device and no host tier: recomputed from scratch.
        assert!(s.cached_tokens.unwrap() < w.least_cached(), "{s:?}");
        assert!(s.has(&Flag::CacheMiss), "{s:?}");
        assert!(ev.contains("--enable-hierarchical-cache"), "{ev}");
    }
    assert!(r.stdout.contains("Cache tiers"), "{}", r.stdout);
}
