//! HTTP plumbing shared by all protocols: one pooled client, the API key, error mapping.

use std::time::Duration;

use serde_json::Value;

use crate::error::ClientError;

/// An HTTP client bound to one server. The API key is never printed (see `Debug`).
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("base", &self.base)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Http {
    /// Builds a client for `base_url`; `ca_cert_pem` adds a private CA for HTTPS.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        ca_cert_pem: Option<&[u8]>,
    ) -> Result<Self, String> {
        let mut b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Nagle would delay small request writes; measure the server, not the socket.
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30));
        if let Some(pem) = ca_cert_pem {
            // from_pem accepts bytes it cannot use; a bundle read finds the real certificates.
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("--ca-cert is not a PEM certificate: {e}"))?;
            if certs.is_empty() {
                return Err(
                    "--ca-cert holds no PEM certificate (no -----BEGIN CERTIFICATE----- block)"
                        .to_owned(),
                );
            }
            for cert in certs {
                b = b.add_root_certificate(cert);
            }
        }
        let client = b
            .build()
            .map_err(|e| format!("cannot build HTTP client: {e}"))?;
        Ok(Http {
            client,
            base: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
        })
    }

    /// The server's base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Starts a request to `path` with the API key attached.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self
            .client
            .request(method, format!("{}{}", self.base, path));
        match &self.api_key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    /// GET returning status and (if JSON) body; non-2xx is not an error here (probing).
    pub async fn get_probe(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, Option<Value>), ClientError> {
        let resp = self
            .request(reqwest::Method::GET, path)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.send_error(path, e, timeout))?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            let text = resp.text().await.unwrap_or_default();
            return Err(ClientError::Unauthorized {
                endpoint: path.to_owned(),
                status,
                message: error_message(&text),
            });
        }
        let text = resp.text().await.unwrap_or_default();
        Ok((status, serde_json::from_str(&text).ok()))
    }

    /// POST a JSON body and return the JSON answer; non-2xx becomes a typed error.
    pub async fn post_json(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        let resp = self
            .request(reqwest::Method::POST, path)
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| self.send_error(path, e, timeout))?;
        let resp = check_status(path, resp).await?;
        let text = resp.text().await.map_err(|e| ClientError::Transport {
            endpoint: path.to_owned(),
            detail: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| ClientError::Malformed {
            endpoint: path.to_owned(),
            detail: format!("not JSON ({e}): {}", snippet(&text)),
        })
    }

    /// Whether anything answers HTTP at the base URL (any status counts as alive).
    pub async fn reachable(&self) -> bool {
        self.request(reqwest::Method::GET, "/health")
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .is_ok()
    }

    /// POSTs JSON and reads the whole answer, timing from just before the write to the last
    /// byte (the two-point method's clock).
    pub async fn post_timed(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<(Duration, String, reqwest::header::HeaderMap), ClientError> {
        let rb = self
            .request(reqwest::Method::POST, path)
            .timeout(timeout)
            .json(body);
        let t0 = std::time::Instant::now();
        let resp = rb
            .send()
            .await
            .map_err(|e| self.send_error(path, e, timeout))?;
        let resp = check_status(path, resp).await?;
        let headers = resp.headers().clone();
        let text = resp
            .text()
            .await
            .map_err(|e| self.send_error(path, e, timeout))?;
        Ok((t0.elapsed(), text, headers))
    }

    /// POST without a body, for endpoints that answer plain text or nothing (flushes);
    /// non-2xx becomes a typed error, the body text is returned.
    pub async fn post_empty(&self, path: &str, timeout: Duration) -> Result<String, ClientError> {
        let resp = self
            .request(reqwest::Method::POST, path)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.send_error(path, e, timeout))?;
        let resp = check_status(path, resp).await?;
        resp.text().await.map_err(|e| ClientError::Transport {
            endpoint: path.to_owned(),
            detail: e.to_string(),
        })
    }

    /// GET returning the body text of a 2xx answer (Prometheus `/metrics`).
    pub async fn get_text(&self, path: &str, timeout: Duration) -> Result<String, ClientError> {
        let resp = self
            .request(reqwest::Method::GET, path)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.send_error(path, e, timeout))?;
        let resp = check_status(path, resp).await?;
        resp.text().await.map_err(|e| ClientError::Transport {
            endpoint: path.to_owned(),
            detail: e.to_string(),
        })
    }

    /// Maps a failure to send (before any response) to a typed error.
    pub fn send_error(&self, path: &str, e: reqwest::Error, timeout: Duration) -> ClientError {
        if e.is_timeout() {
            ClientError::TimedOut {
                endpoint: path.to_owned(),
                after: timeout,
            }
        } else if e.is_connect() {
            let mut detail = root_cause(&e);
            if detail.to_lowercase().contains("certificate") {
                detail.push_str(" (for a private certificate authority, pass --ca-cert FILE)");
            } else {
                detail.push_str(" (is the server running? check --url)");
            }
            ClientError::Connect {
                url: self.base.clone(),
                detail,
            }
        } else {
            ClientError::Transport {
                endpoint: path.to_owned(),
                detail: root_cause(&e),
            }
        }
    }
}

/// The innermost cause of an error, which is what a user can act on.
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Turns a non-2xx response into a typed error; passes 2xx through.
pub async fn check_status(
    endpoint: &str,
    resp: reqwest::Response,
) -> Result<reqwest::Response, ClientError> {
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    Err(status_error(endpoint, status, &text))
}

/// Classifies an error body by status and content.
pub fn status_error(endpoint: &str, status: u16, body: &str) -> ClientError {
    let message = error_message(body);
    let endpoint = endpoint.to_owned();
    if status == 401 || status == 403 {
        return ClientError::Unauthorized {
            endpoint,
            status,
            message,
        };
    }
    if is_context_error(body) {
        return ClientError::ContextExceeded {
            endpoint,
            status,
            message,
        };
    }
    ClientError::Http {
        endpoint,
        status,
        message,
    }
}

/// True when an error body says the prompt is too long, in any server's wording.
pub fn is_context_error(body: &str) -> bool {
    const MARKERS: [&str; 8] = [
        "`max_new_tokens` must be <=",
        "exceed_context_size_error",
        "context_length_exceeded",
        "maximum context length",
        "exceeds the available context size",
        "longer than the model's context length",
        "must have less than",
        "longer than the context length",
    ];
    let lower = body.to_lowercase();
    MARKERS.iter().any(|m| lower.contains(m))
}

/// The human message in an error body: `{"error":{"message"}}`, `{"message"}`,
/// `{"error":"..."}`, or the raw text.
pub fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("error").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("message").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("detail").and_then(Value::as_str) {
            return m.to_owned();
        }
    }
    let s = snippet(body);
    if s.is_empty() {
        "(empty body)".to_owned()
    } else {
        s
    }
}

/// The first 300 characters of a body, for messages.
pub fn snippet(body: &str) -> String {
    let t = body.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_from_every_shape() {
        assert_eq!(error_message(r#"{"error":{"message":"a"}}"#), "a");
        assert_eq!(
            error_message(r#"{"error":"b","error_type":"validation"}"#),
            "b"
        );
        assert_eq!(error_message(r#"{"object":"error","message":"c"}"#), "c");
        assert_eq!(error_message("plain"), "plain");
        assert_eq!(error_message(""), "(empty body)");
    }

    #[test]
    fn context_errors_are_recognised() {
        let llama = r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error"}}"#;
        assert!(matches!(
            status_error("/completion", 400, llama),
            ClientError::ContextExceeded { status: 400, .. }
        ));
        assert!(matches!(
            status_error("/completion", 500, "internal"),
            ClientError::Http { status: 500, .. }
        ));
        assert!(matches!(
            status_error("/x", 401, "{}"),
            ClientError::Unauthorized { .. }
        ));
    }
}
