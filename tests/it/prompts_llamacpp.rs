//! Distinct prompts per point, the natural corpus beside the repeated sentence, and
//! per-position acceptance, against the real reference llama-server.

use crate::common;

use common::{ctxbench, ref_paths, serial, sweep, RefServer};
use ctxbench_schema::record::{read_results, CorpusSpec, Sample};

/// (prompt index, corpus offset, rep) of each cold sample.
fn prompts_of(samples: &[Sample]) -> Vec<(Option<u32>, Option<u64>, u32)> {
    samples
        .iter()
        .map(|s| (s.prompt_index, s.corpus_offset, s.rep))
        .collect()
}

#[test]
fn distinct_prompts_are_repeated_by_index_and_resume_keeps_the_mapping() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let args = [
        "--contexts",
        "1k",
        "--prompts",
        "3",
        "--reps",
        "2",
        "--output-tokens",
        "8",
        "--corpus",
        "natural",
    ];
    let run = sweep(&srv.url(), &args).ok();
    let r = run.results();
    assert_eq!(r.header.config.prompts, Some(3));
    assert_eq!(
        r.header.config.reps.min_reps, 6,
        "reps count samples: 3 prompts × 2"
    );
    let got = prompts_of(&r.samples);
    assert_eq!(got.len(), 6, "{got:?}");
    for (i, (p, off, rep)) in got.iter().enumerate() {
        assert_eq!(
            *p,
            Some(*rep % 3),
            "repetition r sends prompt r mod 3: {got:?}"
        );
        assert_eq!(*rep, i as u32);
        // The same prompt is the same body window; different prompts read different text.
        let first = got[(*rep % 3) as usize].1;
        assert_eq!(*off, first, "{got:?}");
    }
    let offsets: std::collections::BTreeSet<_> = got.iter().map(|g| g.1).collect();
    assert_eq!(offsets.len(), 3, "three distinct windows: {got:?}");
    // Every prompt is cold and exact: same text, fresh nonce.
    // (An 8-token sample may lose its timing to a loaded host, never its cache verdict.)
    assert!(
        r.samples.iter().all(common::usable_but_for_the_host),
        "{:?}",
        r.samples
    );

    // Resume: drop the last three samples; the resumed run measures reps 3..5 with prompts
    // 0..2 again.
    let text = std::fs::read_to_string(&run.out).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.contains("\"rep\":3") && !l.contains("\"rep\":4") && !l.contains("\"rep\":5")
        })
        .filter(|l| !l.contains("\"type\":\"point\"") && !l.contains("\"type\":\"end\""))
        .collect();
    std::fs::write(&run.out, kept.join("\n") + "\n").unwrap();
    let out = run.out.to_str().unwrap();
    let resumed = ctxbench()
        .args(["sweep", "--url", &srv.url(), "--out", out, "--resume"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let again = prompts_of(&read_results(&run.out, false).unwrap().samples);
    assert_eq!(again.len(), 6, "{again:?}");
    assert_eq!(
        again, got,
        "same reps, same prompts, same windows after resume"
    );
}

#[test]
fn a_corpus_list_measures_repeat_and_natural_text_and_reports_the_inflation() {
    let _g = serial();
    let model = ref_paths().model.to_str().unwrap().to_owned();
    // The tiny model drafting for itself: acceptance depends on the text only through the
    // draft's own sampling, and llama-server counts accepted drafts per position.
    let srv = RefServer::start(
        4096,
        &[
            "-md",
            &model,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            "4",
        ],
    );
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k",
            "--prompts",
            "2",
            "--reps",
            "2",
            "--output-tokens",
            "24",
            "--corpus",
            "repeat,natural",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dir = run.out.parent().unwrap();
    let (rep, nat) = (dir.join("r.repeat.jsonl"), dir.join("r.natural.jsonl"));
    let (rep, nat) = (
        read_results(&rep, false).unwrap(),
        read_results(&nat, false).unwrap(),
    );
    assert_eq!(rep.header.config.corpus, CorpusSpec::Repeat);
    let CorpusSpec::Natural(path) = &nat.header.config.corpus else {
        panic!("natural corpus recorded: {:?}", nat.header.config.corpus)
    };
    assert!(
        path.exists(),
        "the resolved file is recorded: {}",
        path.display()
    );
    assert!(nat.header.corpus.tokens > 10_000, "{:?}", nat.header.corpus);
    for s in rep.samples.iter().chain(&nat.samples) {
        assert!(s.usable(), "{s:?}");
        let per = s
            .spec_accepted_per_position
            .as_ref()
            .expect("per-position counts");
        assert_eq!(
            per.iter().sum::<u64>(),
            s.spec_accepted_tokens.unwrap(),
            "{s:?}"
        );
        assert!(
            per.windows(2).all(|w| w[1] <= w[0]),
            "position k ≤ k−1: {per:?}"
        );
        assert!(s.spec_drafts.unwrap() >= per[0], "{s:?}");
    }
    // The combined report names both corpora and gives the ratio with its interval.
    assert!(run.stdout.contains("Synthetic-text trap"), "{}", run.stdout);
    let row = run
        .stdout
        .lines()
        .find(|l| l.contains("1k") && l.contains('×'))
        .unwrap_or_else(|| panic!("no inflation row: {}", run.stdout));
    assert!(row.contains("2 / 2"), "two prompts a side: {row}");
    assert!(dir.join("r.corpora.html").exists());
    // Acceptance per context, one series per corpus, as an SVG beside the report.
    let svg = std::fs::read_to_string(dir.join("r.corpora-plots/acceptance_length.svg"))
        .expect("acceptance plot of both corpora");
    assert!(
        svg.contains("r.repeat") && svg.contains("r.natural"),
        "one series per corpus"
    );
}
