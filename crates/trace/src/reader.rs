//! The streaming reader every format goes through: requests one at a time, numbered in
//! order, stopping at the first error.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::request::{TraceError, TraceFormat, TraceRequest};

/// One format's reader, as the streaming reader drives it.
pub(crate) trait Source: Send {
    /// The next request (its `index` is set by the caller), `None` at the end.
    fn next_request(&mut self) -> Option<Result<TraceRequest, TraceError>>;
    /// How the format's rules were applied, complete once the stream has ended.
    fn notes(&self) -> Vec<String>;
}

/// A trace read one request at a time: whole-trace validation and the replay are each a
/// pass over it. Yields requests in time order (`at_ms` non-decreasing where requests have
/// it); the first error ends the stream.
pub struct TraceReader {
    format: Option<TraceFormat>,
    source: Box<dyn Source>,
    next_index: u64,
    done: bool,
}

impl std::fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("format", &self.format)
            .field("next_index", &self.next_index)
            .finish()
    }
}

impl TraceReader {
    pub(crate) fn new(format: Option<TraceFormat>, source: Box<dyn Source>) -> Self {
        Self {
            format,
            source,
            next_index: 0,
            done: false,
        }
    }

    /// The format read; `None` for a generated workload (`--synthetic`).
    pub fn format(&self) -> Option<TraceFormat> {
        self.format
    }

    /// How the format's rules were applied (block size, rounding checked, time origin, ...),
    /// one sentence each; complete once the stream has ended.
    pub fn notes(&self) -> Vec<String> {
        self.source.notes()
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceRequest, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.source.next_request() {
            Some(Ok(mut r)) => {
                r.index = self.next_index;
                self.next_index += 1;
                Some(Ok(r))
            }
            Some(Err(e)) => {
                self.done = true;
                Some(Err(e))
            }
            None => {
                self.done = true;
                None
            }
        }
    }
}

/// The lines of a text trace, numbered from 1, blank lines skipped; one buffer reused.
pub(crate) struct Lines {
    path: PathBuf,
    reader: BufReader<File>,
    line: u64,
    buf: String,
}

impl Lines {
    /// Opens `path` for reading line by line.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            path: path.to_owned(),
            reader: BufReader::with_capacity(1 << 16, file),
            line: 0,
            buf: String::new(),
        })
    }

    /// The next non-blank line: (its number, its text without the newline, whether it had
    /// one); `None` at the end.
    pub fn next_line(&mut self) -> Option<Result<(u64, &str, bool), TraceError>> {
        loop {
            self.buf.clear();
            match self.reader.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(source) => {
                    return Some(Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    }))
                }
            }
            self.line += 1;
            if !self.buf.trim().is_empty() {
                break;
            }
        }
        let had_newline = self.buf.ends_with('\n');
        let text = self.buf.trim_end_matches(['\n', '\r']);
        // A UTF-8 byte-order mark on the first line is not part of the data.
        let text = if self.line == 1 {
            text.trim_start_matches('\u{feff}')
        } else {
            text
        };
        Some(Ok((self.line, text, had_newline)))
    }
}

/// Keeps times non-decreasing where a format promises it, and moves the origin to the first
/// request (traces may start anywhere).
#[derive(Debug, Default)]
pub(crate) struct Clock {
    origin: Option<f64>,
    last: Option<f64>,
}

impl Clock {
    /// `t` (ms, the trace's own origin) as ms after the first request; `Err` with the
    /// previous time when `t` goes back.
    pub fn at(&mut self, t: f64) -> Result<f64, f64> {
        if let Some(last) = self.last {
            if t < last {
                return Err(last);
            }
        }
        self.last = Some(t);
        let origin = *self.origin.get_or_insert(t);
        Ok(t - origin)
    }

    /// The note saying where time 0 is.
    pub fn note(&self, what: &str) -> Option<String> {
        match self.origin {
            Some(o) if o != 0.0 => Some(format!(
                "{what} start at {o} ms: normalised so the first request is at time 0"
            )),
            Some(_) => Some(format!("{what} start at 0 (the first request is time 0)")),
            None => None,
        }
    }
}
