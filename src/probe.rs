//! Probing a server: which family it is (a loop over the families' detectors), its limits,
//! and what the chosen protocol can do there.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::family::{Answers, Server};
use crate::client::{family, get_u64, BackendKind, Family, ServerProfile, FAMILIES};
use crate::error::{ClientError, UsageError};

/// Why probing failed: the server could not be read, or the options do not fit it.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Talking to the server failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// `--backend` does not fit the server (a usage error).
    #[error(transparent)]
    Usage(#[from] UsageError),
}

/// Probes the server behind `answers` (whose base URL is `url`) and picks a backend:
/// `requested`, unless it is `auto`. Waits up to `wait_ready` for a server that is not
/// listening yet or still loading its model; `on_wait` is told once when waiting starts.
pub async fn probe(
    answers: &dyn Answers,
    url: &str,
    requested: BackendKind,
    model_override: Option<&str>,
    wait_ready: Duration,
    on_wait: &mut (dyn FnMut(&str) + Send),
) -> Result<ServerProfile, ProbeError> {
    let s = Server::new(answers);
    wait_until_ready(&s, wait_ready, on_wait).await?;
    let mut detected = None;
    for f in FAMILIES {
        if let Some(evidence) = f.detect(&s).await? {
            detected = Some((*f, evidence));
            break;
        }
    }
    let chosen: &dyn Family = match (requested, &detected) {
        (BackendKind::Auto, Some((f, _))) => *f,
        (BackendKind::Auto, None) => {
            let status = s.get("/v1/models").await?.0;
            return Err(ClientError::Http {
                endpoint: "/props, /v1/models".into(),
                status,
                message: "the server answered neither llama.cpp's /props nor OpenAI's /v1/models; is --url the server's base URL (without /v1)? Otherwise pick --backend explicitly".into(),
            }
            .into());
        }
        (k, _) => family(k).ok_or_else(|| {
            UsageError::Invalid(format!("--backend {}: no such protocol", k.as_str()))
        })?,
    };
    let detected_kind = detected.as_ref().map(|(f, _)| f.kind());
    if !chosen.speaks_to(detected_kind) {
        return Err(wrong_backend(chosen, detected.as_ref()).into());
    }

    let mut p = ServerProfile::new(redact_url(url), chosen.kind());
    p.detected = detected_kind;
    p.model = model_override.map(str::to_owned);
    p.metrics = s.get("/metrics").await?.0 == 200;
    if let Some(m) = s.first_model().await? {
        if p.model.is_none() {
            p.model = m.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        p.n_vocab = m.pointer("/meta/n_vocab").and_then(Value::as_u64);
        if let Some(n) = get_u64(&m, "max_model_len") {
            p.max_context = Some(n);
            p.max_context_source = Some("/v1/models max_model_len".into());
        }
    }
    if let Some((f, evidence)) = &detected {
        p.server_kind = f.server_name().to_owned();
        f.describe(&s, &mut p).await?;
        p.backend_reason = if requested == BackendKind::Auto {
            f.reason(evidence)
        } else {
            format!("--backend {} given", requested.as_str())
        };
    } else {
        p.backend_reason = format!("--backend {} given", requested.as_str());
    }
    chosen.capabilities(&s, &mut p).await?;
    Ok(p)
}

/// The usage error of a `--backend` that does not fit the server, naming what it looks like.
fn wrong_backend(chosen: &dyn Family, detected: Option<&(&dyn Family, String)>) -> UsageError {
    let requested = chosen.kind().as_str();
    UsageError::Invalid(match detected {
        Some((f, evidence)) => format!(
            "--backend {requested} does not fit this server: it looks like {} ({evidence}); use --backend {} or auto",
            f.server_name(),
            f.kind().as_str()
        ),
        None => format!(
            "--backend {requested} does not fit this server: no server family recognised its answers (not even /v1/models); check --url, or use --backend auto"
        ),
    })
}

/// Waits while the server is not listening yet (connection refused) or answers `/props`
/// with 503 (model loading), up to `wait_ready`; the last `/props` answer is remembered.
async fn wait_until_ready(
    s: &Server<'_>,
    wait_ready: Duration,
    on_wait: &mut (dyn FnMut(&str) + Send),
) -> Result<(), ClientError> {
    let start = Instant::now();
    let mut told = false;
    loop {
        let (why, last) = match s.get_fresh("/props").await {
            Ok((503, _)) => ("is loading its model (HTTP 503)", None),
            Ok(answer) => {
                s.remember("/props", answer);
                return Ok(());
            }
            Err(e @ ClientError::Connect { .. }) => ("is not accepting connections yet", Some(e)),
            Err(e) => return Err(e),
        };
        if start.elapsed() >= wait_ready {
            // Out of patience: a loading server is probed as it is, a silent one is an error.
            if let Some(e) = last {
                return Err(e);
            }
            s.remember("/props", (503, None));
            return Ok(());
        }
        if !told {
            on_wait(&format!(
                "the server {why}; waiting up to {:.0} s (--wait-ready)",
                wait_ready.as_secs_f64()
            ));
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Removes `user:password@` from a URL before it is recorded anywhere.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials() {
        assert_eq!(redact_url("http://u:secret@h:80/x"), "http://h:80/x");
        assert_eq!(redact_url("https://h"), "https://h");
    }
}
