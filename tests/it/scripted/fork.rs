//! A llama.cpp-derived server (a fork that answers like llama-server), as scripted answers
//! for the llama.cpp-shaped server of `common::scripted`: what two forks measured by users
//! did that llama-server does not.
//!
//! - Its `/completion` stream starts, as soon as the request is accepted, with a stale
//!   progress event that already claims a token (`tokens_predicted: 1` and the slot's token
//!   from its previous task) before the prompt is read. Its `timings` are true: `prompt_ms`
//!   is the prefill it then takes. (Seen: a client TTFT of 5–76 ms against the server's
//!   own prompt time of 5.4–47.6 s.)
//! - Every path it does not serve answers HTTP 404 with its web UI's page, whose settings
//!   speak of an API key.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::scripted::{Reply, Site};

/// A fork that serves llama-server's paths and its web UI's page, with status 404, on every
/// path it does not know.
pub const WEB_UI: Site = Site {
    not_found: ("text/html; charset=utf-8", WEB_UI_PAGE),
    missing: &[],
    slots: false,
};

/// A fork without llama-server's `/props` (so not taken for llama.cpp): the probe tries the
/// other families' paths (`/server_info`, `/info`, `/api/version`…) and meets its web UI's
/// page on each, then measures it through its OpenAI-compatible `/v1/completions`.
pub const WEB_UI_WITHOUT_PROPS: Site = Site {
    not_found: ("text/html; charset=utf-8", WEB_UI_PAGE),
    missing: &["/props"],
    slots: false,
};

/// The web UI's page: HTML that mentions an API key (the UI's own setting), although no key
/// is involved.
pub const WEB_UI_PAGE: &str = r#"<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>llama.cpp - chat</title>
<script type="module" crossorigin>const DEFAULTS={apiKey:"",systemMessage:"",temperature:0.8};</script>
</head>
<body>
<div id="app"><dialog id="settings"><label for="api-key">API Key</label>
<input id="api-key" type="password" placeholder="Set the API key if the server requires one"></dialog></div>
</body>
</html>
"#;

/// The time between two generated tokens of the fork's stream.
pub const STEP: Duration = Duration::from_millis(2);

/// The fork's `/completion` stream for `body`: the stale progress event at once, then the
/// prefill (`prefill` long: what `timings.prompt_ms` says), then one event per token
/// ([`STEP`] apart; the counter restarts at 1, so the first real token does not raise it),
/// then the final event with true `timings`.
pub fn stale_progress_stream(body: &Value, prefill: Duration) -> Reply {
    let prompt = body["prompt"].as_array().map_or(0, |a| a.len() as u64);
    let n = body["n_predict"].as_u64().unwrap_or(4).max(1);
    let prefill_ms = prefill.as_secs_f64() * 1000.0;
    let step_ms = STEP.as_secs_f64() * 1000.0;
    let event = |v: Value| format!("data: {v}\n\n");
    let mut pieces = vec![(
        Duration::ZERO,
        event(
            json!({"content":" the","tokens":[278],"stop":false,"tokens_predicted":1,"tokens_evaluated":0,
            "prompt_progress":{"total":prompt,"cache":0,"processed":0,"time_ms":0.0}}),
        ),
    )];
    pieces.push((
        prefill,
        event(json!({"content":"","tokens":[],"stop":false,"tokens_predicted":1,"tokens_evaluated":prompt,
            "prompt_progress":{"total":prompt,"cache":0,"processed":prompt,"time_ms":prefill_ms}})),
    ));
    for i in 1..=n {
        let pause = if i == 1 { Duration::ZERO } else { STEP };
        pieces.push((
            pause,
            event(json!({"content":"x","tokens":[42],"stop":false,"tokens_predicted":i,"tokens_evaluated":prompt})),
        ));
    }
    let predicted_ms = (n - 1) as f64 * step_ms;
    pieces.push((
        Duration::ZERO,
        event(json!({"content":"","tokens":[],"stop":true,"tokens_predicted":n,"tokens_evaluated":prompt,"stop_type":"limit",
            "timings":{"cache_n":0,"prompt_n":prompt,"prompt_ms":prefill_ms,"prompt_per_second":prompt as f64 / prefill.as_secs_f64(),
                "predicted_n":n,"predicted_ms":predicted_ms,"predicted_per_second":if n > 1 { (n - 1) as f64 / (predicted_ms / 1000.0) } else { 0.0 }}})),
    ));
    Reply::Stream(pieces)
}

/// The fork's OpenAI-compatible `/v1/completions` answer for `body`: one chunk per token
/// then a usage chunk and `[DONE]` when streamed, else one JSON answer; `prompt_tokens` is
/// the ids sent (or the words of a text prompt, as its `/tokenize` counts them).
pub fn openai_answer(body: &Value) -> Reply {
    let prompt = match &body["prompt"] {
        Value::Array(ids) => ids.len() as u64,
        Value::String(t) => t.split_whitespace().count() as u64,
        _ => 0,
    };
    let n = body["max_tokens"].as_u64().unwrap_or(16).max(1);
    let usage =
        json!({"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n});
    if body["stream"].as_bool() != Some(true) {
        return crate::common::scripted::json_reply(
            200,
            json!({"object":"text_completion","model":"scripted","choices":[{"index":0,"text":"x".repeat(n as usize),"finish_reason":"length"}],"usage":usage}),
        );
    }
    let event = |v: Value| format!("data: {v}\n\n");
    let mut pieces: Vec<(Duration, String)> = (1..=n)
        .map(|i| {
            let finish = if i == n { json!("length") } else { Value::Null };
            (
                STEP,
                event(json!({"object":"text_completion","model":"scripted","choices":[{"index":0,"text":"x","finish_reason":finish}]})),
            )
        })
        .collect();
    pieces.push((
        Duration::ZERO,
        event(json!({"object":"text_completion","model":"scripted","choices":[],"usage":usage})),
    ));
    pieces.push((Duration::ZERO, "data: [DONE]\n\n".to_owned()));
    Reply::Stream(pieces)
}
