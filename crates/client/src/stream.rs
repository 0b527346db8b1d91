//! The streaming driver: reads the response body chunk by chunk, takes `Instant::now()` the
//! moment each chunk comes off the socket (before any parsing), and lets the protocol module
//! say what each event meant.

use std::time::{Duration, Instant};

use futures_util::StreamExt;

pub use super::event::StreamEvent;
use super::ndjson::NdjsonParser;
use super::sse::SseParser;
use crate::backend::OnceOutcome;
use crate::backend::Timeouts;
use crate::backend::{GenOutcome, StreamStats, MAX_TOKEN_TIMES};
use crate::http::Http;
use ctxbench_schema::error::ClientError;
use ctxbench_schema::fingerprint::Generated;
use ctxbench_schema::record::Counts;
use ctxbench_schema::record::ServerTimings;
use ctxbench_schema::record::SpecStats;

/// What a protocol's reader gathered from a stream or from a single answer.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// Server-reported counts.
    pub counts: Counts,
    /// Server-reported timings.
    pub timings: Option<ServerTimings>,
    /// Why generation stopped, as the server said.
    pub finish_reason: Option<String>,
    /// Speculative-decoding counts.
    pub spec: Option<SpecStats>,
    /// What was generated, as far as the protocol shows it.
    pub output: Generated,
    /// Sample flags the stream itself shows (e.g. SGLang's retractions).
    pub flags: Vec<ctxbench_schema::record::Flag>,
}

/// One protocol's reading of its answers. Every API gives its non-streamed answer the shape
/// of its stream's final event, so one reader serves `generate` and `generate_once`.
pub trait EventReader: Send {
    /// Interprets one event: does it carry a token, is it the final record, does the
    /// stream end here.
    fn on_event(&mut self, ev: &StreamEvent) -> Result<EventInfo, ClientError>;
    /// What the events said, once the answer is over.
    fn gathered(self) -> Gathered;
    /// The body ended (EOF) without a final record: whether what arrived is nonetheless a
    /// complete answer (a server that ends its stream after the finish reason with no
    /// `[DONE]` and no usage). By default, no.
    fn complete_at_eof(&self) -> bool {
        false
    }
}

/// POSTs `body` to `endpoint`, drives the streamed answer through `reader` and times it.
pub async fn generate_streamed<R: EventReader>(
    http: &Http,
    framing: Framing,
    endpoint: &str,
    body: &serde_json::Value,
    timeouts: Timeouts,
    mut reader: R,
) -> Result<GenOutcome, ClientError> {
    let rb = http.request(reqwest::Method::POST, endpoint).json(body);
    let stream = drive_stream(framing, endpoint, http, rb, timeouts, &mut reader).await?;
    let g = reader.gathered();
    Ok(GenOutcome {
        stream,
        counts: g.counts,
        timings: g.timings,
        finish_reason: g.finish_reason,
        spec: g.spec,
        flags: g.flags,
        output: g.output,
    })
}

/// POSTs `body` (a non-streamed request) and reads the answer as the final record, timed
/// from just before the write to the last byte.
pub async fn generate_unstreamed<R: EventReader>(
    http: &Http,
    endpoint: &str,
    body: &serde_json::Value,
    timeout: Duration,
    mut reader: R,
) -> Result<OnceOutcome, ClientError> {
    let (elapsed, text, _) = http.post_timed(endpoint, body, timeout).await?;
    read_final(endpoint, text, |ev| reader.on_event(ev))?;
    let g = reader.gathered();
    Ok(OnceOutcome {
        elapsed,
        counts: g.counts,
        timings: g.timings,
        spec: g.spec,
        finish_reason: g.finish_reason,
    })
}

/// What one event carried, as the protocol module reads it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EventInfo {
    /// The event carries at least one generated token.
    pub has_token: bool,
    /// This is the stream's final record (counts/timings present).
    pub is_final: bool,
    /// The stream is over (`[DONE]` or a final record on APIs without `[DONE]`).
    pub ends_stream: bool,
}

/// How a streamed body is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-Sent Events.
    Sse,
    /// One JSON object per line (Ollama).
    Ndjson,
}

enum Parser {
    Sse(SseParser),
    Ndjson(NdjsonParser),
}

impl Parser {
    /// Feeds a chunk; an event still incomplete past [`super::http::MAX_BODY_BYTES`] (a
    /// server that never ends a line) is [`ClientError::TooLarge`], so memory stays bounded.
    fn push(
        &mut self,
        endpoint: &str,
        bytes: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ClientError> {
        let held = match self {
            Parser::Sse(p) => {
                p.push(bytes, out);
                p.pending()
            }
            Parser::Ndjson(p) => {
                p.push(bytes, out);
                p.pending()
            }
        };
        match held > super::http::MAX_BODY_BYTES {
            true => Err(super::http::too_large(endpoint)),
            false => Ok(()),
        }
    }
    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        match self {
            Parser::Sse(p) => p.finish(out),
            Parser::Ndjson(p) => p.finish(out),
        }
    }
}

/// Sends `rb` and drives its streamed body, cut by `framing`, to the end.
// The timing loop stays whole: each chunk's arrival instant is taken before any parsing,
// and the deadline, stall and end rules act on the same state.
pub async fn drive_stream<R: EventReader>(
    framing: Framing,
    endpoint: &str,
    http: &Http,
    rb: reqwest::RequestBuilder,
    timeouts: Timeouts,
    reader: &mut R,
) -> Result<StreamStats, ClientError> {
    let t_sent = Instant::now();
    let deadline = t_sent + timeouts.request;
    let resp = match tokio::time::timeout_at(deadline.into(), rb.send()).await {
        Err(_) => {
            return Err(ClientError::TimedOut {
                endpoint: endpoint.to_owned(),
                after: timeouts.request,
            })
        }
        Ok(Err(e)) => return Err(http.send_error(endpoint, e, timeouts.request)),
        Ok(Ok(r)) => r,
    };
    let resp = http.check(endpoint, resp).await?;
    let mut stats = StreamStats {
        t_sent,
        t_first_byte: None,
        t_first_token: None,
        t_last_token: None,
        t_end: t_sent,
        events: 0,
        token_events: 0,
        first_read_token_events: 0,
        bytes: 0,
        saw_final: false,
        token_times: Vec::new(),
        first_token_event: None,
    };
    let mut body = resp.bytes_stream();
    let mut parser = match framing {
        Framing::Sse => Parser::Sse(SseParser::new()),
        Framing::Ndjson => Parser::Ndjson(NdjsonParser::default()),
    };
    let mut events = Vec::new();
    let mut ended = false;
    while !ended {
        // Before the first byte the whole-request deadline governs (a long prefill sends
        // nothing); afterwards silence longer than the stall timeout is a hang.
        let wait_until = match stats.t_first_byte {
            None => deadline,
            Some(_) => deadline.min(Instant::now() + timeouts.stall),
        };
        let next = match tokio::time::timeout_at(wait_until.into(), body.next()).await {
            Ok(n) => n,
            Err(_) if Instant::now() >= deadline => {
                return Err(ClientError::TimedOut {
                    endpoint: endpoint.to_owned(),
                    after: timeouts.request,
                })
            }
            Err(_) => {
                return Err(ClientError::Stalled {
                    endpoint: endpoint.to_owned(),
                    after: timeouts.stall,
                })
            }
        };
        let arrived = Instant::now();
        let chunk = match next {
            None => {
                parser.finish(&mut events);
                ended = true;
                None
            }
            Some(Err(e)) => return Err(http.body_error(endpoint, e)),
            Some(Ok(c)) => Some(c),
        };
        if let Some(c) = &chunk {
            stats.t_first_byte.get_or_insert(arrived);
            stats.bytes += c.len();
            parser.push(endpoint, c, &mut events)?;
        }
        let first_read = stats.t_first_token.is_none();
        for ev in events.drain(..) {
            stats.events += 1;
            let info = reader.on_event(&ev)?;
            if info.has_token {
                stats.token_events += 1;
                if stats.t_first_token.is_none() {
                    stats.first_token_event = Some(super::http::snippet(&ev.data));
                }
                stats.t_first_token.get_or_insert(arrived);
                stats.t_last_token = Some(arrived);
                if stats.token_times.len() < MAX_TOKEN_TIMES {
                    stats.token_times.push(arrived);
                }
                if first_read {
                    stats.first_read_token_events += 1;
                }
            }
            stats.saw_final |= info.is_final;
            if info.ends_stream {
                ended = true;
            }
        }
        stats.t_end = arrived;
    }
    if !stats.saw_final && !reader.complete_at_eof() {
        return Err(ClientError::Truncated {
            endpoint: endpoint.to_owned(),
            tokens: stats.token_events,
        });
    }
    Ok(stats)
}

/// Parses an event's data as JSON, or names the problem.
pub fn event_json(endpoint: &str, ev: &StreamEvent) -> Result<serde_json::Value, ClientError> {
    serde_json::from_str(&ev.data).map_err(|e| ClientError::Malformed {
        endpoint: endpoint.to_owned(),
        detail: format!(
            "stream event is not JSON ({e}): {}",
            super::http::snippet(&ev.data)
        ),
    })
}

/// Returns an in-stream error if the event is one (`event: error` or an `error` field).
pub fn in_stream_error(
    endpoint: &str,
    ev: &StreamEvent,
    v: Option<&serde_json::Value>,
) -> Option<ClientError> {
    let from_value = v.and_then(|v| v.get("error")).map(|e| {
        e.get("message")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .or_else(|| e.as_str().map(str::to_owned))
            .unwrap_or_else(|| e.to_string())
    });
    let message = match (ev.event.as_deref(), from_value) {
        (_, Some(m)) => m,
        (Some("error"), None) => super::http::error_message(&ev.data),
        _ => return None,
    };
    Some(ClientError::InStream {
        endpoint: endpoint.to_owned(),
        message,
    })
}

/// Reads a non-streamed answer as the stream's final record (the APIs give both the same
/// shape); an answer that is not a final record is named as truncated.
pub fn read_final(
    endpoint: &str,
    body: String,
    on_event: impl FnOnce(&StreamEvent) -> Result<EventInfo, ClientError>,
) -> Result<(), ClientError> {
    if on_event(&StreamEvent::data(body))?.is_final {
        Ok(())
    } else {
        Err(ClientError::Truncated {
            endpoint: endpoint.to_owned(),
            tokens: 0,
        })
    }
}

/// The `[DONE]` sentinel that ends OpenAI-style streams (and SGLang's, and llama.cpp's
/// `/v1`), as an event that only ends the stream.
pub fn done_sentinel(ev: &StreamEvent) -> Option<EventInfo> {
    (ev.data.trim() == "[DONE]").then(|| EventInfo {
        ends_stream: true,
        ..Default::default()
    })
}
