//! Held-back streams (issue 24): a server that buffers the whole stream and releases it at
//! the end. No server here does it on demand (a default vLLM did it on two samples at 2k, by
//! chance), so a scripted llama.cpp-shaped server does it on every request.

use std::time::Duration;

use crate::common::real::{f, has_flag, read_lines};
use crate::common::scripted::{good_events, Reply, Scripted};
use crate::common::{run, sweep};

#[test]
fn scripted_held_back_stream_has_no_ttft_only_its_end_to_end_time_and_is_flagged() {
    // 300 ms of silence, then every event of the stream in one write.
    let srv = Scripted::start(4096, |_, body| {
        Reply::Stream(vec![(
            Duration::from_millis(300),
            good_events(body, None, 0).concat(),
        )])
    });
    let out = sweep(
        &srv.url(),
        &["--contexts", "256", "--reps", "2", "--output-tokens", "16"],
    );
    // No TTFT anywhere: the sweep says so and fails, keeping every sample.
    assert_ne!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("no usable sample at 256 (2 sample(s): 2 held_back_stream)"),
        "{}",
        out.stderr
    );
    let l = read_lines(&out.out);
    assert!(!l.samples.is_empty());
    for s in &l.samples {
        assert!(has_flag(s, "held_back_stream"), "{s}");
        assert!(!has_flag(s, "no_tokens"), "tokens did arrive: {s}");
        for k in [
            "ttft_ms",
            "prefill_tokens_per_s",
            "decode_tokens_per_s",
            "ms_per_step",
        ] {
            assert!(s[k].is_null(), "{k} of a held-back stream: {s}");
        }
        assert!(f(s, "e2e_ms") >= 300.0, "{s}");
    }
    // Nothing of them in the table; the report says why.
    let (code, stdout, stderr) = run(&["report", out.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("held back"), "{stdout}");
    assert!(stdout.contains("only the end-to-end time"), "{stdout}");
}
