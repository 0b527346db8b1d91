//! Ollama cannot run here: these tests drive ctxbench against a scripted in-process server
//! that follows Ollama's documented API (/api/version, /api/tags, /api/show, /api/generate with
//! raw text, NDJSON lines, nanosecond durations, no tokenizer) and, as Ollama is reported to do
//! (ollama/ollama#10368, #17427), silently cuts an over-long prompt to `num_ctx`.

use crate::common;
use crate::scripted;

use common::sweep;
use ctxbench_schema::record::Status;
use scripted::{tgi_words, Config, Flavor, Scripted};

#[test]
fn protocol_ollama_calibrated_lengths_ndjson_and_nanoseconds() {
    let srv = Scripted::start(Config::new(Flavor::Ollama));
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k",
            "--reps",
            "2",
            "--output-tokens",
            "16",
        ],
    )
    .ok();
    let stderr = &run.stderr;
    assert!(stderr.contains("backend: ollama"), "{stderr}");
    assert!(
        stderr.contains("calibrated against the server's prompt_eval_count"),
        "{stderr}"
    );
    let r = run.results();
    assert_eq!(r.header.server.backend, "ollama");
    assert_eq!(r.header.server.max_context, Some(8192), "from /api/show");
    assert_eq!(r.header.config.length_tolerance_pct, 0.01);
    assert_eq!(r.samples.len(), 4);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        let p = s.prompt_tokens.unwrap();
        // The server's count is within the stated 1% of the target.
        assert!(
            p.abs_diff(s.context_tokens) * 100 <= s.context_tokens,
            "{p} vs {}",
            s.context_tokens
        );
        assert_eq!(s.length_ok, Some(true));
        assert_eq!(s.cached_tokens, None);
        assert_eq!(s.output_tokens, Some(16));
        assert_eq!(s.token_chunks, Some(16), "one NDJSON line per token");
        let server = s.server.as_ref().unwrap();
        assert_eq!(server.prompt_n, Some(p));
        // 15 intervals of 3 ms = 45 ms, sent as 45_000_000 ns.
        assert!(
            (server.predicted_ms.unwrap() - 45.0).abs() < 1e-6,
            "{server:?}"
        );
    }
    let reqs = srv.requests("/api/generate");
    let measured: Vec<_> = reqs.iter().filter(|q| q["stream"] == true).collect();
    let calib: Vec<_> = reqs.iter().filter(|q| q["stream"] == false).collect();
    assert_eq!(measured.len(), 5, "warmup + 4");
    assert!(
        !calib.is_empty() && calib.len() <= 3 * 5,
        "{} calibration requests",
        calib.len()
    );
    let num_ctx = &reqs[0]["options"]["num_ctx"];
    for q in &reqs {
        assert_eq!(q["raw"], true);
        assert_eq!(q["options"]["temperature"], 0);
        assert_eq!(
            &q["options"]["num_ctx"], num_ctx,
            "one num_ctx: no model reloads"
        );
    }
    for q in &calib {
        assert_eq!(q["options"]["num_predict"], 1);
    }
    // No measured prompt shares its first words with a calibration prompt (the nonce).
    let head = |q: &serde_json::Value| {
        let t = q["prompt"].as_str().unwrap();
        tgi_words(t)
            .into_iter()
            .take(6)
            .map(|w| w.1)
            .collect::<String>()
    };
    for m in &measured {
        assert!(
            calib.iter().all(|c| head(c) != head(m)),
            "calibration shares the nonce"
        );
    }
}

/// Ollama does not refuse an over-long prompt: it cuts it to `num_ctx` and reports the cut
/// `prompt_eval_count`. No sample may pass as a measurement of the length asked for.
#[test]
fn scripted_ollama_silently_truncated_prompt_is_never_an_ok_sample_of_the_asked_length() {
    let mut c = Config::new(Flavor::Ollama);
    c.advertised_context = 32768;
    c.real_context = 4096;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &["--contexts", "8k", "--reps", "1", "--output-tokens", "8"],
    );
    let r = run.results();
    assert_eq!(r.samples.len(), 1);
    let s = &r.samples[0];
    assert_eq!(
        s.prompt_tokens,
        Some(4096),
        "the cut length is recorded: {s:?}"
    );
    assert!(s.flags.iter().any(|f| f == "length_mismatch"), "{s:?}");
    assert!(
        run.stderr
            .contains("prompt length different from the target: excluded"),
        "{}",
        run.stderr
    );
}

/// `--length-tolerance N` accepts a server count up to N tokens off the target: the same
/// cut prompt as above (4096 of 8192) is then a usable sample.
#[test]
fn scripted_ollama_length_tolerance_accepts_a_count_within_it() {
    let mut c = Config::new(Flavor::Ollama);
    c.advertised_context = 32768;
    c.real_context = 4096;
    let srv = Scripted::start(c);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "8k",
            "--reps",
            "1",
            "--output-tokens",
            "8",
            "--length-tolerance",
            "4096",
        ],
    )
    .ok();
    let r = run.results();
    assert_eq!(r.header.config.length_tolerance, 4096);
    let s = &r.samples[0];
    assert_eq!(s.prompt_tokens, Some(4096));
    assert!(!s.flags.iter().any(|f| f == "length_mismatch"), "{s:?}");
}
