//! Typed errors of the library; the binary adds context with `anyhow`.

use std::time::Duration;

/// What went wrong talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No TCP/TLS connection could be made.
    #[error("cannot connect to {url}: {detail}")]
    Connect {
        /// The server's base URL.
        url: String,
        /// What went wrong, as the transport or parser reported it.
        detail: String,
    },
    /// The server answered 401/403.
    #[error("{endpoint} refused the request with HTTP {status}: {message} ({hint})")]
    Unauthorized {
        /// The endpoint path.
        endpoint: String,
        /// HTTP status.
        status: u16,
        /// The server's own message.
        message: String,
        /// What to change: the variable the key came from, or where to put one.
        hint: String,
    },
    /// The prompt is longer than the server accepts.
    #[error("{endpoint}: the server refused the prompt as too long (HTTP {status}): {message}")]
    ContextExceeded {
        /// The endpoint path.
        endpoint: String,
        /// HTTP status.
        status: u16,
        /// The server's own message.
        message: String,
    },
    /// Any other non-2xx answer.
    #[error("{endpoint} answered HTTP {status}: {message}")]
    Http {
        /// The endpoint path.
        endpoint: String,
        /// HTTP status.
        status: u16,
        /// The server's own message.
        message: String,
    },
    /// An error object inside a 200 stream.
    #[error("{endpoint}: the server reported an error mid-stream: {message}")]
    InStream {
        /// The endpoint path.
        endpoint: String,
        /// The server's own message.
        message: String,
    },
    /// A response we could not understand.
    #[error("{endpoint}: malformed response: {detail}")]
    Malformed {
        /// The endpoint path.
        endpoint: String,
        /// What went wrong, as the transport or parser reported it.
        detail: String,
    },
    /// The stream ended before the record that carries counts and timings.
    #[error(
        "{endpoint}: the stream ended without its final usage/timings record after {tokens} token chunk(s) (some servers end a running stream when another request arrives: llama-cpp-python does by default, start it with --interrupt_requests false; or measure one request at a time)"
    )]
    Truncated {
        /// The endpoint path.
        endpoint: String,
        /// Token-carrying events received before the end.
        tokens: usize,
    },
    /// No bytes arrived for too long.
    #[error("{endpoint}: no data for {0:?} (stall timeout); the server may be hung", .after)]
    Stalled {
        /// The endpoint path.
        endpoint: String,
        /// How long it waited.
        after: Duration,
    },
    /// The whole request took longer than allowed.
    #[error("{endpoint}: request exceeded its timeout of {0:?}", .after)]
    TimedOut {
        /// The endpoint path.
        endpoint: String,
        /// How long it waited.
        after: Duration,
    },
    /// The connection broke mid-request.
    #[error("{endpoint}: connection lost: {detail} (did the server die?)")]
    Transport {
        /// The endpoint path.
        endpoint: String,
        /// What went wrong, as the transport or parser reported it.
        detail: String,
    },
    /// The server refused because it is busy with other requests (SGLang `/flush_cache`
    /// HTTP 400, vLLM `/reset_prefix_cache` `{"success": false}`): worth retrying once idle.
    #[error("{endpoint} refused while the server is busy: {message}")]
    Busy {
        /// The endpoint path.
        endpoint: String,
        /// The server's own answer.
        message: String,
    },
    /// An answer (or one streamed event) larger than ctxbench reads: cut off at the limit.
    #[error(
        "{endpoint}: the answer exceeded {limit_mib} MiB, the most ctxbench reads of one answer (or one streamed event); it was cut off there, unread (a server sending without end, or not the API ctxbench expects at --url)"
    )]
    TooLarge {
        /// The endpoint path.
        endpoint: String,
        /// The limit, in MiB.
        limit_mib: u64,
    },
    /// The server cannot do this (e.g. flush), with what would enable it.
    #[error("{what} is not available: {hint}")]
    Unsupported {
        /// What was asked for.
        what: String,
        /// What would enable it.
        hint: String,
    },
}

impl ClientError {
    /// A short machine-readable name, stored in failed sample records.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Connect { .. } => "connect",
            ClientError::Unauthorized { .. } => "unauthorized",
            ClientError::ContextExceeded { .. } => "context_exceeded",
            ClientError::Http { .. } => "http",
            ClientError::InStream { .. } => "in_stream",
            ClientError::Malformed { .. } => "malformed",
            ClientError::Truncated { .. } => "truncated",
            ClientError::Stalled { .. } => "stalled",
            ClientError::TimedOut { .. } => "timeout",
            ClientError::Transport { .. } => "transport",
            ClientError::Unsupported { .. } => "unsupported",
            ClientError::Busy { .. } => "busy",
            ClientError::TooLarge { .. } => "too_large",
        }
    }
}

/// Errors a user can fix by changing the command line.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// A `--contexts` entry that is not a positive token count.
    #[error("invalid context length '{0}': use positive token counts such as 1024, 4k, 32k")]
    BadContext(String),
    /// A point the server cannot hold.
    #[error(
        "context {context} + {output} output tokens exceeds the server's maximum context of {limit} tokens ({source_of_limit}); drop that point from --contexts or restart the server with a larger context"
    )]
    OverLimit {
        /// The requested context length (tokens).
        context: u64,
        /// Output tokens per request.
        output: u64,
        /// The server's maximum context (tokens).
        limit: u64,
        /// Where the limit was read.
        source_of_limit: String,
    },
    /// Anything else wrong with the options.
    #[error("{0}")]
    Invalid(String),
}

/// Errors of the results file.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Underlying I/O failure, with the path.
    #[error("results file {path}: {cause}")]
    Io {
        /// The file or folder.
        path: String,
        /// The I/O error.
        // Not `source`: the message already says it, and a source would be printed twice.
        cause: std::io::Error,
    },
    /// A line could not be written (disk full, size limit); `line` is what was lost.
    #[error("cannot write to results file {path}: {cause}; the earlier lines are intact. The unwritten sample was:\n{line}")]
    WriteFailed {
        /// The file or folder.
        path: String,
        /// The I/O error.
        cause: std::io::Error,
        /// The line that could not be written.
        line: String,
    },
    /// A line that is not valid JSON (other than a torn last line).
    #[error("results file {path}, line {line}: {detail}")]
    Corrupt {
        /// The file or folder.
        path: String,
        /// The line that could not be written.
        line: usize,
        /// What went wrong, as the transport or parser reported it.
        detail: String,
    },
    /// `--resume` with a configuration that differs from the file's.
    #[error(
        "results file {path} was recorded with a different configuration; refusing to mix runs:\n{diff}\nuse another --out, or repeat the original options"
    )]
    ConfigMismatch {
        /// The file or folder.
        path: String,
        /// What changed, one `key: old -> new` per line.
        diff: String,
    },
    /// `--resume` on a file that has no header.
    #[error("results file {path} has no run header line; it is not a ctxbench results file")]
    NoHeader {
        /// The file or folder.
        path: String,
    },
}
