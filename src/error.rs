//! Typed errors of the library; the binary adds context with `anyhow`.

use std::time::Duration;

/// What went wrong talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No TCP/TLS connection could be made.
    #[error("cannot connect to {url}: {detail}")]
    Connect { url: String, detail: String },
    /// The server answered 401/403.
    #[error(
        "{endpoint} refused the request with HTTP {status}: {message} (check the API key: --api-key-env NAME or CTXBENCH_API_KEY)"
    )]
    Unauthorized {
        endpoint: String,
        status: u16,
        message: String,
    },
    /// The prompt is longer than the server accepts.
    #[error("{endpoint}: the server refused the prompt as too long (HTTP {status}): {message}")]
    ContextExceeded {
        endpoint: String,
        status: u16,
        message: String,
    },
    /// Any other non-2xx answer.
    #[error("{endpoint} answered HTTP {status}: {message}")]
    Http {
        endpoint: String,
        status: u16,
        message: String,
    },
    /// An error object inside a 200 stream.
    #[error("{endpoint}: the server reported an error mid-stream: {message}")]
    InStream { endpoint: String, message: String },
    /// A response we could not understand.
    #[error("{endpoint}: malformed response: {detail}")]
    Malformed { endpoint: String, detail: String },
    /// The stream ended before the record that carries counts and timings.
    #[error(
        "{endpoint}: the stream ended without its final usage/timings record after {tokens} token chunk(s)"
    )]
    Truncated { endpoint: String, tokens: usize },
    /// No bytes arrived for too long.
    #[error("{endpoint}: no data for {0:?} (stall timeout); the server may be hung", .after)]
    Stalled { endpoint: String, after: Duration },
    /// The whole request took longer than allowed.
    #[error("{endpoint}: request exceeded its timeout of {0:?}", .after)]
    TimedOut { endpoint: String, after: Duration },
    /// The connection broke mid-request.
    #[error("{endpoint}: connection lost: {detail} (did the server die?)")]
    Transport { endpoint: String, detail: String },
    /// The server cannot do this (e.g. flush), with what would enable it.
    #[error("{what} is not available: {hint}")]
    Unsupported { what: String, hint: String },
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
        context: u64,
        output: u64,
        limit: u64,
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
        path: String,
        // Not `source`: the message already says it, and a source would be printed twice.
        cause: std::io::Error,
    },
    /// A line could not be written (disk full, size limit); `line` is what was lost.
    #[error("cannot write to results file {path}: {cause}; the earlier lines are intact. The unwritten sample was:\n{line}")]
    WriteFailed {
        path: String,
        cause: std::io::Error,
        line: String,
    },
    /// A line that is not valid JSON (other than a torn last line).
    #[error("results file {path}, line {line}: {detail}")]
    Corrupt {
        path: String,
        line: usize,
        detail: String,
    },
    /// `--resume` with a configuration that differs from the file's.
    #[error(
        "results file {path} was recorded with a different configuration; refusing to mix runs:\n{diff}\nuse another --out, or repeat the original options"
    )]
    ConfigMismatch { path: String, diff: String },
    /// `--resume` on a file that has no header.
    #[error("results file {path} has no run header line; it is not a ctxbench results file")]
    NoHeader { path: String },
}
