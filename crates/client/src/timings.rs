//! llama.cpp's `timings` object and the JSON counters the families read: llama-server
//! returns `timings` on its native and OpenAI routes, and servers built on llama.cpp copy it,
//! so its parser is shared rather than owned by one family.

use ctxbench_schema::record::{ServerTimings, SpecStats};

/// Reads an optional unsigned count from a JSON object.
pub(crate) fn get_u64(v: &serde_json::Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| {
        x.as_u64()
            .or_else(|| x.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

/// Reads an optional float from a JSON object.
pub(crate) fn get_f64(v: &serde_json::Value, key: &str) -> Option<f64> {
    v.get(key).and_then(|x| x.as_f64())
}

/// Parses llama.cpp's `timings` object (also sent by its `/v1/completions`).
pub(crate) fn llamacpp_timings(t: &serde_json::Value) -> ServerTimings {
    ServerTimings {
        source: "llamacpp.timings".to_owned(),
        prompt_n: get_u64(t, "prompt_n"),
        cache_n: get_u64(t, "cache_n"),
        prompt_ms: get_f64(t, "prompt_ms"),
        prompt_per_second: get_f64(t, "prompt_per_second"),
        predicted_n: get_u64(t, "predicted_n"),
        predicted_ms: get_f64(t, "predicted_ms"),
        predicted_per_second: get_f64(t, "predicted_per_second"),
        predicted_per_token_ms: get_f64(t, "predicted_per_token_ms"),
        draft_n: get_u64(t, "draft_n"),
        draft_n_accepted: get_u64(t, "draft_n_accepted"),
        queue_ms: None,
        e2e_ms: None,
    }
}

/// Speculative counts from llama.cpp `timings` (present only when `draft_n > 0`). llama.cpp
/// does not count verify steps; every step after the first token yields its accepted drafts
/// plus one, so steps = (predicted − 1) − accepted.
pub(crate) fn llamacpp_spec(t: &ServerTimings) -> Option<SpecStats> {
    let draft = t.draft_n.filter(|d| *d > 0)?;
    let accepted = t.draft_n_accepted.unwrap_or(0);
    let steps = t
        .predicted_n
        .map(|n| n.saturating_sub(1).saturating_sub(accepted))
        .filter(|s| *s > 0);
    Some(
        SpecStats {
            source: "llamacpp.timings (verify steps derived)".to_owned(),
            verify_steps: steps,
            draft_tokens: Some(draft),
            accepted_tokens: Some(accepted),
            accept_length: None,
            accept_rate: None,
        }
        .derive(),
    )
}
