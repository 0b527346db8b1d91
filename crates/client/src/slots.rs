//! llama-server's slot endpoints beyond the flush: save and restore a slot's KV cache to
//! and from a file (`POST /slots/{id}?action=save|restore`, needs `--slot-save-path`) and
//! the slots' state (`GET /slots`): what `--mode tiers` proves each tier with.

use std::time::Duration;

use serde_json::{json, Value};

use crate::timings::get_u64;

use crate::http::Http;
use ctxbench_schema::error::ClientError;

/// What a slot save or restore answered.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotFile {
    /// Tokens written (`n_saved`) or read back (`n_restored`).
    pub tokens: u64,
    /// The server's own time for it (`timings.save_ms` / `timings.restore_ms`).
    pub server_ms: Option<f64>,
    /// The whole request as the client timed it.
    pub client_ms: f64,
}

/// One slot as `GET /slots` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotState {
    /// The slot's id.
    pub id: u64,
    /// Tokens of the prompt the slot last held.
    pub n_prompt_tokens: Option<u64>,
    /// The task it last ran.
    pub id_task: Option<u64>,
}

fn unsupported(e: ClientError, what: &str) -> ClientError {
    match e {
        ClientError::Http { status: 501, .. } => ClientError::Unsupported {
            what: format!("llama.cpp slot {what}"),
            hint: "restart llama-server with --slot-save-path DIR to enable it".to_owned(),
        },
        other => other,
    }
}

async fn action(
    http: &Http,
    id: u64,
    act: &str,
    filename: &str,
    count: &str,
    ms: &str,
) -> Result<SlotFile, ClientError> {
    let path = format!("/slots/{id}?action={act}");
    let t0 = std::time::Instant::now();
    let v = http
        .post_json(
            &path,
            &json!({ "filename": filename }),
            Duration::from_secs(300),
        )
        .await
        .map_err(|e| unsupported(e, act))?;
    Ok(SlotFile {
        tokens: get_u64(&v, count).unwrap_or(0),
        server_ms: v
            .get("timings")
            .and_then(|t| t.get(ms))
            .and_then(Value::as_f64),
        client_ms: t0.elapsed().as_secs_f64() * 1000.0,
    })
}

/// Saves slot `id` to `filename` in the server's `--slot-save-path`.
pub async fn save(http: &Http, id: u64, filename: &str) -> Result<SlotFile, ClientError> {
    action(http, id, "save", filename, "n_saved", "save_ms").await
}

/// Restores slot `id` from `filename`.
pub async fn restore(http: &Http, id: u64, filename: &str) -> Result<SlotFile, ClientError> {
    action(http, id, "restore", filename, "n_restored", "restore_ms").await
}

/// The slots' state.
pub async fn state(http: &Http) -> Result<Vec<SlotState>, ClientError> {
    let text = http.get_text("/slots", Duration::from_secs(30)).await?;
    let v: Value = serde_json::from_str(&text).map_err(|e| ClientError::Malformed {
        endpoint: "/slots".to_owned(),
        detail: e.to_string(),
    })?;
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| SlotState {
                    id: get_u64(s, "id").unwrap_or(0),
                    n_prompt_tokens: get_u64(s, "n_prompt_tokens"),
                    id_task: get_u64(s, "id_task"),
                })
                .collect()
        })
        .unwrap_or_default())
}
