//! A llama.cpp-derived server that answers like llama-server but is not it
//! (`scripted::fork`): its impossible timings are flagged, never printed as figures, and its
//! web UI's 404 pages are "not here", never a refused key.

use std::time::Duration;

use crate::common;
use crate::scripted::fork::{openai_answer, stale_progress_stream, WEB_UI, WEB_UI_WITHOUT_PROPS};

use common::scripted::{good, Scripted};
use ctxbench_schema::record::{Check, Status};

/// The fork's prefill, reported truly in `timings.prompt_ms`: long enough that a client
/// reading the stale event at once could only miss the bound by stalling over a second.
const PREFILL: Duration = Duration::from_millis(1500);

#[test]
fn scripted_fork_whose_stream_starts_with_a_stale_progress_event_has_no_ttft_figure() {
    let srv = Scripted::start(4096, |_, body| stale_progress_stream(body, PREFILL));
    let run = common::sweep(
        &srv.url(),
        &common::argv("--contexts 64 --reps 2 --output-tokens 8"),
    );
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    // Nothing usable was measured: the run says so and does not exit 0.
    assert_eq!(run.code, 1, "{stderr}");
    assert!(
        stderr.contains("no usable sample at 64") && stderr.contains("impossible_timing"),
        "{stderr}"
    );
    let r = run.results();
    assert_eq!(r.samples.len(), 2, "{:?}", r.samples);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        assert!(s.flags.iter().any(|f| f == "impossible_timing"), "{s:?}");
        assert!(
            s.ttft_ms.is_none() && s.decode_tokens_per_s.is_none(),
            "{s:?}"
        );
        let ev = s.impossible.as_ref().expect("the evidence");
        let c = ev.get(&Check::Ttft).expect("the TTFT bound");
        assert!(
            c.server >= 1500.0 && c.client < c.server - c.tolerance,
            "{c:?}"
        );
        assert!(
            ev.first_event
                .as_deref()
                .is_some_and(|e| e.contains("prompt_progress")),
            "{ev:?}"
        );
    }
    // No TTFT figure in the summary: the row has no median, and no "client vs server" line
    // prints an impossible difference.
    let report =
        ctxbench_stats::report::build(&[("r".to_owned(), run.out.display().to_string(), r)]);
    let p = &report.runs[0].points[0];
    assert!(
        p.ttft_ms.is_none() && p.prefill_tokens_per_s.is_none(),
        "{p:?}"
    );
    assert_eq!((p.usable, p.impossible), (0, 2), "{p:?}");
    assert!(report.runs[0].ttft_fit.is_none());
    assert!(stdout.contains("2 impossible"), "{stdout}");
    assert!(!stdout.contains("TTFT − server prompt_ms"), "{stdout}");
    // One line says it is the norm and names what the server sent.
    let note: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("first token arrived before the server finished reading the prompt"))
        .collect();
    assert_eq!(note.len(), 1, "one line: {stderr}");
    assert!(
        note[0].starts_with("WARNING: every sample's")
            && note[0].contains("the stream starts with a stale progress event"),
        "{}",
        note[0]
    );
}

#[test]
fn scripted_fork_whose_unknown_paths_answer_404_with_its_web_ui_is_measured_not_refused() {
    // /metrics, /slots, /health and the slot erase all meet the web UI's page, whose
    // settings mention an API key.
    let srv = Scripted::start_with(4096, WEB_UI, |_, body| good(body));
    let run = common::sweep(
        &srv.url(),
        &common::argv("--contexts 64 --reps 2 --output-tokens 8"),
    );
    let stderr = &run.stderr;
    assert!(!stderr.contains("API key"), "no key is involved: {stderr}");
    assert_eq!(run.code, 0, "{stderr}");
    let r = run.results();
    assert_eq!(r.samples.len(), 2);
    assert!(r.samples.iter().all(|s| s.usable()), "{:?}", r.samples);
    // The probe did meet the page: the fork's 404s were asked and read as "not here".
    let asked = srv.requests.lock().unwrap();
    assert!(
        asked
            .iter()
            .any(|(line, _)| line.starts_with("GET /metrics")),
        "{asked:?}"
    );
    assert!(!r.header.server.metrics, "a 404 page is no /metrics");
}

#[test]
fn scripted_fork_without_props_meets_its_web_ui_at_server_info_and_is_measured_as_openai() {
    // Not llama.cpp (no /props): the probe asks SGLang's /server_info and the other
    // families' paths, all answered by the web UI's page with 404.
    let srv = Scripted::start_with(4096, WEB_UI_WITHOUT_PROPS, |_, body| openai_answer(body));
    let run = common::sweep(
        &srv.url(),
        &common::argv("--contexts 64 --reps 2 --output-tokens 8"),
    );
    let stderr = &run.stderr;
    assert!(!stderr.contains("API key"), "no key is involved: {stderr}");
    assert_eq!(run.code, 0, "{stderr}");
    // It takes token ids, but has no detokenizer: text is calibrated. The header says so
    // once, in the capabilities, and nowhere says the ids were refused.
    assert!(
        stderr.contains("token-id prompts no: the server takes them (4 token ids sent"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("token ids refused")
            && !stderr.contains("the server takes token-id prompts"),
        "{stderr}"
    );
    let asked = srv.requests.lock().unwrap();
    assert!(
        asked
            .iter()
            .any(|(line, _)| line.starts_with("GET /server_info")),
        "the probe tried /server_info: {asked:?}"
    );
    drop(asked);
    let r = run.results();
    assert_eq!(r.header.server.backend, "openai", "{:?}", r.header.server);
    // Measured: every sample completed (its text prompt's length is the fork's business).
    assert_eq!(r.samples.len(), 2);
    assert!(
        r.samples
            .iter()
            .all(|s| s.status == Status::Ok && s.ttft_ms.is_some()),
        "{:?}",
        r.samples
    );
}
