//! A speculative run's own report: the acceptance cliff and acceptance on a wrapped corpus
//! are warnings.

use super::build_run;
use ctxbench_schema::record::{CorpusSpec, Phase, Results, Sample, Status};

/// Four samples at each `(context, acceptance rate)`, with a ±2% wobble.
fn run(points: &[(u64, Option<f64>)]) -> Results {
    let mut r = ctxbench_schema::testdata::golden("sweep.jsonl");
    r.samples = points
        .iter()
        .flat_map(|&(c, rate)| {
            (0..4).map(move |i| Sample {
                context_tokens: c,
                status: Status::Ok,
                phase: Phase::Cold,
                length_ok: Some(true),
                ms_per_step: Some(10.0),
                ttft_ms: Some(100.0),
                spec_accept_rate: rate.map(|x| x * (1.0 + 0.02 * (i as f64 - 1.5))),
                spec_accept_length: rate.map(|x| 1.0 + 8.0 * x),
                ..Sample::default()
            })
        })
        .collect();
    r.header.corpus.spec = CorpusSpec::Natural("/usr/lib/python3/pydoc_data/topics.py".into());
    r.header.corpus.label = "natural text".into();
    r.header.corpus.tokens = 6000;
    r.header.corpus.wraps = true;
    r
}

fn kinds(r: &Results) -> Vec<&'static str> {
    build_run("x", "x.jsonl", r)
        .warnings
        .iter()
        .map(|w| w.kind)
        .collect()
}

#[test]
fn a_speculative_run_warns_of_an_acceptance_cliff_and_of_acceptance_on_a_wrapped_corpus() {
    let r = run(&[(2048, Some(0.72)), (4096, Some(0.71)), (8192, Some(0.08))]);
    let report = build_run("x", "x.jsonl", &r);
    let cliff = report
        .warnings
        .iter()
        .find(|w| w.kind == "acceptance_cliff")
        .expect("a cliff");
    assert!(
        cliff.message.starts_with("acceptance falls from 0.71")
            && cliff.message.contains("between 4k and 8k"),
        "{}",
        cliff.message
    );
    let wrapped = report
        .warnings
        .iter()
        .find(|w| w.kind == "wrapped_corpus")
        .expect("wrapped");
    assert!(
        wrapped.message.contains("(from 8k on)"),
        "{}",
        wrapped.message
    );
}

#[test]
fn flat_acceptance_an_unwrapped_corpus_or_a_plain_run_give_no_such_warning() {
    let mut r = run(&[(2048, Some(0.72)), (4096, Some(0.70))]);
    r.header.corpus.wraps = false;
    let k = kinds(&r);
    assert!(
        !k.contains(&"acceptance_cliff") && !k.contains(&"wrapped_corpus"),
        "{k:?}"
    );
    // A plain run on a wrapped corpus: no acceptance to inflate.
    let k = kinds(&run(&[(2048, None), (8192, None)]));
    assert!(!k.contains(&"wrapped_corpus"), "{k:?}");
}
