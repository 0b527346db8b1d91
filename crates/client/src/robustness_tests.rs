//! Property tests: every framing parser and every protocol reader takes arbitrary input —
//! random bytes, and JSON objects with every field a server may send set to hostile values
//! (u64::MAX, negatives, floats, strings, nulls, nesting) — without panicking. Debug builds
//! also catch integer overflow here.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::ndjson::NdjsonParser;
use super::stream::{EventReader, StreamEvent};

/// Every key the readers look at, across all protocols.
const KEYS: &[&str] = &[
    "content",
    "tokens",
    "stop",
    "tokens_predicted",
    "tokens_evaluated",
    "tokens_cached",
    "stop_type",
    "timings",
    "prompt_n",
    "cache_n",
    "prompt_ms",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
    "prompt_progress",
    "error",
    "message",
    "choices",
    "text",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "object",
    "meta_info",
    "output_ids",
    "e2e_latency",
    "queue_time",
    "forward_entry_time",
    "prefill_finished_time",
    "request_finished_ts",
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_accept_token_num",
    "spec_draft_token_num",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "token",
    "details",
    "generated_tokens",
    "input_length",
    "generated_text",
    "response",
    "done",
    "done_reason",
    "prompt_eval_count",
    "eval_count",
    "prompt_eval_duration",
    "eval_duration",
    "total_duration",
    "load_duration",
    "metrics",
    "time_to_first_token_ms",
    "generation_time_ms",
    "tokens_per_second",
    "mean_itl_ms",
    "queue_time_ms",
    "prompt_per_second",
    "completion_tokens_details",
    "accepted_prediction_tokens",
    "rejected_prediction_tokens",
    "spec_accepted_drafts",
    "spec_proposed_drafts",
    "processed",
    "total",
    "time_ms",
    "delta",
    "reasoning_content",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1e308)),
        Just(json!(-0.5)),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u32>().prop_map(|n| json!(n)),
        ".{0,8}".prop_map(Value::String),
        Just(json!("[DONE]")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(
                |kv| Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>()
                )
            ),
        ]
    })
}

fn object() -> impl Strategy<Value = String> {
    proptest::collection::vec((proptest::sample::select(KEYS), value()), 0..10).prop_map(|kv| {
        Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()).to_string()
    })
}

/// Feeds the same events to every reader; results are ignored, panics are the failure.
fn feed_all(events: &[StreamEvent]) {
    let mut a = super::llamacpp::CompletionReader::default();
    let mut b = super::openai::CompletionsReader::default();
    let mut c = super::sglang::GenerateReader::default();
    let mut d = super::tgi::StreamReader::default();
    let mut e = super::ollama::GenerateReader::default();
    for ev in events {
        let _ = a.on_event(ev);
        let _ = b.on_event(ev);
        let _ = c.on_event(ev);
        let _ = d.on_event(ev);
        let _ = e.on_event(ev);
    }
}

proptest! {
    #[test]
    fn ndjson_takes_any_bytes_and_chunking_does_not_matter(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        cut in 0usize..512,
    ) {
        let cut = cut.min(bytes.len());
        let run = |parts: &[&[u8]]| {
            let mut p = NdjsonParser::default();
            let mut out = Vec::new();
            for part in parts {
                p.push(part, &mut out);
            }
            p.finish(&mut out);
            out
        };
        prop_assert_eq!(run(&[&bytes]), run(&[&bytes[..cut], &bytes[cut..]]));
    }

    #[test]
    fn every_reader_survives_hostile_json_events(events in proptest::collection::vec(object(), 1..6)) {
        let evs: Vec<StreamEvent> = events.into_iter().map(StreamEvent::data).collect();
        feed_all(&evs);
    }

    #[test]
    fn every_reader_survives_arbitrary_text(events in proptest::collection::vec(".{0,64}", 1..6)) {
        let evs: Vec<StreamEvent> = events.into_iter().map(StreamEvent::data).collect();
        feed_all(&evs);
    }
}

#[test]
fn extreme_counts_in_final_records_do_not_overflow() {
    let max = u64::MAX;
    let events = [
        format!(
            r#"{{"stop":true,"timings":{{"prompt_n":{max},"cache_n":{max},"predicted_n":{max},"draft_n":{max},"draft_n_accepted":{max}}}}}"#
        ),
        format!(
            r#"{{"choices":[],"usage":{{"prompt_tokens":{max},"completion_tokens":{max},"prompt_tokens_details":{{"cached_tokens":{max}}}}},"timings":{{"prompt_n":{max},"cache_n":{max}}}}}"#
        ),
        format!(
            r#"{{"text":"a","meta_info":{{"prompt_tokens":{max},"completion_tokens":{max},"cached_tokens":{max},"finish_reason":{{"type":"length"}},"spec_verify_ct":0,"spec_accept_token_num":{max},"spec_draft_token_num":0,"e2e_latency":1e308,"forward_entry_time":-1e308,"prefill_finished_time":1e308,"request_finished_ts":-1e308}}}}"#
        ),
        format!(
            r#"{{"token":{{"id":1,"text":"a"}},"generated_text":"a","details":{{"generated_tokens":{max},"input_length":{max},"finish_reason":"length"}}}}"#
        ),
        format!(
            r#"{{"response":"","done":true,"prompt_eval_count":{max},"eval_count":{max},"prompt_eval_duration":{max},"eval_duration":{max},"total_duration":{max}}}"#
        ),
    ];
    let evs: Vec<StreamEvent> = events
        .iter()
        .map(|e| StreamEvent::data(e.as_str()))
        .collect();
    for ev in &evs {
        feed_all(std::slice::from_ref(ev));
    }
    feed_all(&evs);
}
