//! After a client-side timeout the server may still be computing the request it gave up
//! on. A server that keeps computing after its client is gone (as the slow server of issue
//! 42 did) is scripted here: real llama-server cancels a request whose client hung up, so it
//! cannot show what the next sample must do. Where the server exposes its busy state
//! (llama.cpp `/slots`), the next sample waits until it reads idle; where it exposes none,
//! the run says it cannot know (`first_contact_scripted`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common;
use crate::common::scripted::{good_events, Reply, Scripted, LLAMA_SERVER_WITH_SLOTS};

#[test]
fn scripted_after_a_client_side_timeout_the_next_sample_waits_for_the_server_to_be_idle() {
    // The first request of 100 tokens or more (the first measured one: the warmup has 64)
    // is held 3 s before its first byte, its slot busy all along; the client gives up at
    // 0.5 s.
    let held = AtomicBool::new(false);
    let srv = Scripted::start_with(4096, LLAMA_SERVER_WITH_SLOTS, move |_, body| {
        let long = body["prompt"].as_array().is_some_and(|p| p.len() >= 100);
        let pause = match long && !held.swap(true, Ordering::SeqCst) {
            true => Duration::from_secs(3),
            false => Duration::from_millis(1),
        };
        let ev = good_events(body, None, 0);
        Reply::Stream(
            std::iter::once((pause, String::new()))
                .chain(ev.into_iter().map(|e| (Duration::from_millis(1), e)))
                .collect(),
        )
    });
    let run = common::sweep(
        &srv.url(),
        &common::argv("--contexts 128 --reps 2 --output-tokens 4 --timeout 0.5 --timeout-per-1k 0"),
    );
    let r = run.results();
    let timed_out: Vec<_> = r
        .samples
        .iter()
        .filter(|s| {
            s.error
                .as_ref()
                .is_some_and(|e| e.kind.as_str() == "timeout")
        })
        .collect();
    assert_eq!(timed_out.len(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("timed out on the client's side")
            && run
                .stderr
                .contains("each next sample waits (up to --idle-wait"),
        "{}",
        run.stderr
    );
    // Server side: every generation call after the held one arrived once it was over.
    let spans = srv.spans.lock().unwrap().clone();
    let long: Vec<usize> = srv
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|(line, _)| line.contains("/completion"))
        .enumerate()
        .filter(|(_, (_, body))| {
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["prompt"].as_array().map(Vec::len))
                .is_some_and(|n| n >= 100)
        })
        .map(|(i, _)| i)
        .collect();
    let first = long[0];
    let over = spans[first].1.expect("the held call never ended");
    let after: Vec<_> = spans[first + 1..].iter().map(|s| s.0).collect();
    assert!(
        !after.is_empty(),
        "no sample after the timeout: {}",
        run.stderr
    );
    for t in after {
        assert!(
            t >= over,
            "a call arrived {:?} before the held one was over",
            over - t
        );
    }
    // The sample after the timeout says it waited.
    let next = r
        .samples
        .iter()
        .find(|s| s.error.is_none())
        .expect("no measured sample");
    assert!(
        next.idle_wait_ms.is_some_and(|w| w > 0.0),
        "{next:?}\n{}",
        run.stderr
    );
}
