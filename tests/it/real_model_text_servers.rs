//! The two text-only servers on the real model (issue 29, item 4): llama-cpp-python loading
//! SmolLM2-135M-Instruct's GGUF, and Hugging Face `transformers serve` loading the same weights
//! through transformers' own GGUF loader (`scripts/reference-server FAMILY start --real-model`).
//! Both take text only (token ids are refused), so every length rests on the real 49,152-token
//! BPE: exact through llama-cpp-python's `/extras/tokenize`, calibrated against
//! `transformers serve`'s `usage.prompt_tokens`. Through `--endpoint chat` the real ChatML
//! template (`<|im_start|>user\n … <|im_end|>\n<|im_start|>assistant\n`, and the default system
//! prompt it inserts) is inside every length. Neither server stops at `max_tokens` when the
//! instruct model has its answer: llama-cpp-python takes `ignore_eos` and ignores it,
//! `transformers serve` refuses it (HTTP 422), so a short answer is a `short_output` sample
//! whose decode rate is not counted.
//!
//! Prefill of this model is slow on a shared 2-core host (`transformers serve` in float32 took
//! 36 s for a 1k prompt with the host loaded ~6× over its cores), so each test sends a handful
//! of 1k requests and the request-timeout floor is raised.

use crate::common;

use common::real::{Family, RealServer};
use common::{argv, sweep, SweepRun};
use ctxbench_schema::record::{Flag, Results, Sample, Status};

/// Text prompts: natural English (the BPE on real prose), one cold sample at 1k.
const TEXT: &str =
    "--contexts 1k --reps 1 --output-tokens 16 --corpus natural --prompt-seed 29 --timeout 600";

/// A user message of the same question asked over and over, through the chat template: the
/// instruct model answers it in a few tokens ("The capital of France is Paris.") and stops
/// at its EOS, far short of the 256 asked for.
const QUESTION: &str = "What is the capital of France? Answer in one word.\n";

/// The chat run on the question: two cold samples at 1k, 256 output tokens asked for.
const CHAT: &str = "--contexts 1k --reps 2 --output-tokens 256 --endpoint chat --prompt-seed 29 \
                    --timeout 600";

/// The stated tolerance of a target length: `max(length_tolerance, ⌈pct × target⌉)`, from the
/// run's header.
fn tolerance(r: &Results, target: u64) -> u64 {
    let c = &r.header.config;
    c.length_tolerance
        .max((c.length_tolerance_pct * target as f64).ceil() as u64)
}

/// Asserts every sample's server count is within the stated tolerance of its target and
/// prints one line per sample; returns the worst error (server count − target).
fn assert_lengths_within_tolerance(what: &str, r: &Results) -> i64 {
    let mut worst = 0i64;
    eprintln!("{what}: target  prompt_tokens  error  tolerance  output_tokens  flags");
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        let got = s.prompt_tokens.expect("the server's prompt count");
        let tol = tolerance(r, s.context_tokens);
        let err = got as i64 - s.context_tokens as i64;
        eprintln!(
            "{what}: {:>6}  {got:>13}  {err:>5}  {tol:>9}  {:>13}  {:?}",
            s.context_tokens,
            s.output_tokens.unwrap_or(0),
            s.flags
        );
        assert!(
            err.unsigned_abs() <= tol,
            "{what}: the server counted {got} tokens for a target of {} (tolerance {tol}): {s:?}",
            s.context_tokens
        );
        assert_eq!(s.length_ok, Some(true), "{s:?}");
        if err.abs() > worst.abs() {
            worst = err;
        }
    }
    eprintln!("{what}: worst length error {worst:+}");
    worst
}

/// A corpus file holding [`QUESTION`] (ctxbench repeats a short file to any length).
fn question_corpus() -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".txt").tempfile().unwrap();
    std::fs::write(f.path(), QUESTION).unwrap();
    f
}

/// The chat run on the question corpus.
fn chat_on_the_question(srv: &RealServer) -> SweepRun {
    let corpus = question_corpus();
    let mut args = argv(CHAT);
    args.extend(["--corpus", corpus.path().to_str().unwrap()]);
    sweep(&srv.url(), &args)
}

/// Every measured sample ended early at the model's EOS: flagged `short_output`, its TTFT
/// kept, its decode rate left out of the point's summary.
fn assert_early_eos_is_short_output(r: &Results, stderr: &str) {
    assert_eq!(r.samples.len(), 2, "{stderr}");
    for s in &r.samples {
        let n = s.output_tokens.expect("output tokens counted");
        eprintln!(
            "short output: {n} of 256 tokens, finish_reason {:?}, flags {:?}",
            s.finish_reason, s.flags
        );
        assert!(n > 0 && n < 64, "the model answers in a few tokens: {s:?}");
        assert!(s.has(&Flag::ShortOutput), "{s:?}");
        assert!(s.ttft_ms.is_some(), "{s:?}");
    }
    let points = ctxbench_stats::stats::summarize(&r.samples);
    assert_eq!(points.len(), 1);
    assert!(points[0].ttft_ms.is_some(), "TTFT still counts");
    assert!(
        points[0].decode_tokens_per_s.is_none(),
        "an early EOS's decode is not counted: {:?}",
        points[0].decode_tokens_per_s
    );
}

/// The chat template is counted: the run's header says how (llama-cpp-python: its tokens
/// measured by the warmup against usage.prompt_tokens; transformers serve: calibration aims the
/// server's count, template included), and the server's own count is what the lengths are
/// checked against ([`assert_lengths_within_tolerance`]).
fn assert_template_counted(r: &Results) {
    let h = &r.header.server;
    assert_eq!(h.endpoint.as_deref(), Some("/v1/chat/completions"));
    assert!(
        h.prompt_method.contains("chat template"),
        "{}",
        h.prompt_method
    );
    for n in h.notes.iter().filter(|n| n.contains("template")) {
        eprintln!("note: {n}");
    }
}

fn sample_count(r: &Results) -> usize {
    r.samples.iter().filter(|s: &&Sample| s.usable()).count()
}

#[test]
fn real_llama_cpp_python_on_the_real_model_has_exact_text_lengths_with_its_49k_bpe() {
    let srv = RealServer::start_real_model(Family::LlamaCppPython, &[]);
    let run = sweep(&srv.url(), &argv(TEXT)).ok();
    let r = run.results();
    assert_eq!(r.header.server.n_vocab.unwrap_or(49152), 49152);
    assert!(!r.header.server.token_id_prompts, "{:?}", r.header.server);
    assert!(
        r.header.server.prompt_method.contains("exact"),
        "{}",
        r.header.server.prompt_method
    );
    assert_eq!(r.samples.len(), 1, "{}", run.stderr);
    assert_eq!(sample_count(&r), 1, "{:?}", r.samples);
    assert_lengths_within_tolerance("llama-cpp-python text", &r);
}

#[test]
fn real_llama_cpp_python_on_the_real_model_counts_the_chatml_template_and_flags_an_early_eos_as_short_output(
) {
    let srv = RealServer::start_real_model(Family::LlamaCppPython, &[]);
    let run = chat_on_the_question(&srv);
    assert!(run.out.exists(), "{}", run.stderr);
    let r = run.results();
    assert_template_counted(&r);
    assert_lengths_within_tolerance("llama-cpp-python chat", &r);
    assert_early_eos_is_short_output(&r, &run.stderr);
}

#[test]
fn real_transformers_serve_on_the_real_model_has_calibrated_text_lengths_within_tolerance() {
    let srv = RealServer::start_real_model(Family::Transformers, &[]);
    let run = sweep(&srv.url(), &argv(TEXT)).ok();
    let r = run.results();
    assert!(!r.header.server.token_id_prompts);
    assert!(
        r.header.server.prompt_method.contains("calibrated"),
        "{}",
        r.header.server.prompt_method
    );
    assert!(r.header.config.length_tolerance_pct > 0.0);
    assert_eq!(r.samples.len(), 1, "{}", run.stderr);
    assert_eq!(sample_count(&r), 1, "{:?}", r.samples);
    assert_lengths_within_tolerance("transformers text", &r);
}

#[test]
fn real_transformers_serve_on_the_real_model_counts_the_chatml_template_and_flags_an_early_eos_as_short_output(
) {
    let srv = RealServer::start_real_model(Family::Transformers, &[]);
    let run = chat_on_the_question(&srv);
    assert!(run.out.exists(), "{}", run.stderr);
    let r = run.results();
    // The server refuses ignore_eos; the run says what that costs.
    assert!(
        r.header
            .server
            .dropped_fields
            .iter()
            .any(|f| f == "ignore_eos"),
        "{:?}",
        r.header.server.dropped_fields
    );
    assert_template_counted(&r);
    assert_lengths_within_tolerance("transformers chat", &r);
    assert_early_eos_is_short_output(&r, &run.stderr);
}
