//! The retention map (issue 44) on real SGLang and vLLM (CPU, tiny model), each with a small
//! KV pool so that pressure is cheap: the pool read from the server (SGLang
//! `max_total_num_tokens`, vLLM `num_gpu_blocks × block_size`), a prefix that comes back
//! after a short gap with nothing else sent, and one lost past a pressure of the whole pool,
//! named capacity eviction. Counts only: nothing here depends on speed.

use crate::common;

use common::real::{Family, RealServer};
use common::{argv, run, sweep};
use ctxbench_schema::record::{Flag, Phase, Results, Sample};
use ctxbench_schema::warm::{MissCause, Retention};
use serde_json::Value;

const MAP: &str = "--mode retention --contexts 1000,2000 --gaps 0,2 --pressure 0,0.5,1,2 --reps 1 --output-tokens 4";

fn cell(r: &Results, l: u64, gap: f64, pressure: f64) -> &Sample {
    r.samples
        .iter()
        .filter(|s| s.phase == Phase::Append)
        .find(|s| {
            let w = s.warm.as_ref().unwrap();
            let x = w.retention.as_ref().unwrap();
            w.prefix_tokens.abs_diff(l) < 8 && x.gap_s == gap && x.pressure == pressure
        })
        .unwrap_or_else(|| panic!("no cell {l} {gap} {pressure}: {:?}", r.samples))
}

fn ret(s: &Sample) -> &Retention {
    s.warm.as_ref().unwrap().retention.as_ref().unwrap()
}

/// The map's common checks: the pool as read, every cell at pressure 0 held, the whole
/// pool's traffic twice over lost the prefix, named capacity eviction with the traffic as
/// its evidence; the JSON edges say so.
fn check_map(r: &common::SweepRun, pool: u64, source: &str) {
    let res = r.results();
    assert!(r.stderr.contains("retention plan"), "{}", r.stderr);
    for l in [1000, 2000] {
        for gap in [0.0, 2.0] {
            let s = cell(&res, l, gap, 0.0);
            assert!(!s.has(&Flag::CacheMiss), "held with nothing sent: {s:?}");
            assert_eq!(ret(s).pool_tokens, Some(pool), "{s:?}");
            assert!(ret(s).pool_source.contains(source), "{s:?}");
        }
        let lost = cell(&res, l, 0.0, 2.0);
        let x = ret(lost);
        assert!(
            lost.has(&Flag::CacheMiss),
            "2× the pool went through: {lost:?}"
        );
        assert_eq!(x.cause, Some(MissCause::CapacityEviction), "{x:?}");
        // The traffic was counted by the server: at least twice the pool (less the rounding).
        assert!(x.foreign_tokens + 64 >= 2 * pool, "{x:?}");
        let ev = lost.warm.as_ref().unwrap().evidence.as_deref().unwrap();
        assert!(ev.contains("foreign prompt(s)"), "{ev}");
    }
    let (code, out, err) = run(&["report", "--format", "json", r.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    for e in j["runs"][0]["warm"]["retention_edges"].as_array().unwrap() {
        let lost = e["pressure"]["lost"]["value"].as_f64().unwrap();
        assert!(lost <= 2.0 && lost > 0.0, "{e}");
        assert!(e["gap"]["lost"].is_null(), "{e}");
    }
}

#[test]
fn real_sglang_retention_map_loses_the_prefix_to_capacity_past_the_pool() {
    // A device pool of 4096 tokens: twice the pool is 8192 foreign tokens.
    let srv = RealServer::start(Family::Sglang, &["--max-total-tokens", "4096"]);
    let r = sweep(&srv.url(), &argv(MAP)).ok();
    check_map(&r, 4096, "SGLang max_total_num_tokens");
}

#[test]
fn real_vllm_retention_map_loses_the_prefix_to_capacity_past_the_pool() {
    // 40 blocks of 128 tokens (the CPU backend's block): a pool of 5120 tokens.
    let srv = RealServer::start(
        Family::Vllm,
        &[
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--num-gpu-blocks-override",
            "40",
            "--max-model-len",
            "4096",
        ],
    );
    let r = sweep(&srv.url(), &argv(MAP)).ok();
    check_map(&r, 40 * 128, "vLLM num_gpu_blocks");
}
