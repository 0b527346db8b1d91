//! One event of a streamed answer, shared by the framing parsers (`sse`, `ndjson`) and the
//! streaming driver that feeds them, so that neither has to import the other for it.

/// One complete event of a streamed answer: an SSE event, or one NDJSON line (Ollama).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// The SSE `event:` field, if any (always `None` for NDJSON).
    pub event: Option<String>,
    /// The SSE `data:` lines joined with `\n`, or the NDJSON line.
    pub data: String,
}

impl StreamEvent {
    /// An event with only data, as a non-streamed body read like a stream record.
    pub fn data(data: impl Into<String>) -> Self {
        StreamEvent {
            event: None,
            data: data.into(),
        }
    }
}
