//! The Azure LLM inference CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`, the timestamp an
//! absolute wall-clock time with 7 fractional digits and no zone. Lengths and arrival times
//! only: no sessions, no reuse (every request's tokens are its own).

use std::path::{Path, PathBuf};

use crate::fields::At;
use crate::reader::{Clock, Lines, Source};
use crate::request::{TraceError, TraceRequest};

/// The header the file must start with.
pub const HEADER: &str = "TIMESTAMP,ContextTokens,GeneratedTokens";

/// The Azure CSV reader.
pub(crate) struct AzureSource {
    path: PathBuf,
    lines: Lines,
    clock: Clock,
    header_seen: bool,
    first_wall: Option<String>,
}

impl AzureSource {
    /// Opens the file (its header is checked on the first read).
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        Ok(Self {
            path: path.to_owned(),
            lines: Lines::open(path)?,
            clock: Clock::default(),
            header_seen: false,
            first_wall: None,
        })
    }
}

impl Source for AzureSource {
    fn next_request(&mut self) -> Option<Result<TraceRequest, TraceError>> {
        let (line, text) = match self.lines.next_line()? {
            Ok((l, t, _)) => (l, t),
            Err(e) => return Some(Err(e)),
        };
        let at = At {
            path: &self.path,
            line,
            prefix: "",
        };
        if !self.header_seen {
            self.header_seen = true;
            if text.trim() != HEADER {
                return Some(Err(at.err(
                    "(header)",
                    format!("expected `{HEADER}`, found `{}`", text.trim()),
                )));
            }
            return self.next_request();
        }
        Some(row(at, text, &mut self.clock, &mut self.first_wall))
    }

    fn notes(&self) -> Vec<String> {
        let mut n = vec![
            "no sessions and no prefix hashes: every request's tokens are its own (no reuse)"
                .to_owned(),
        ];
        if let Some(w) = &self.first_wall {
            n.push(format!("TIMESTAMP is wall-clock time without a zone: the first row's {w} is time 0, rows checked in time order"));
        }
        n
    }
}

/// One data row.
fn row(
    at: At<'_>,
    text: &str,
    clock: &mut Clock,
    first: &mut Option<String>,
) -> Result<TraceRequest, TraceError> {
    let cols: Vec<&str> = text.split(',').map(str::trim).collect();
    if cols.len() != 3 {
        return Err(at.err(
            "(line)",
            format!(
                "{} columns, expected 3 ({HEADER}); a line cut short is truncated",
                cols.len()
            ),
        ));
    }
    let wall = crate::clock::parse_ms(cols[0]).ok_or_else(|| {
        at.err(
            "TIMESTAMP",
            format!(
                "`{}` is not a time like 2023-11-16 18:15:46.6805900",
                cols[0]
            ),
        )
    })?;
    let input = count(at, "ContextTokens", cols[1])?;
    let output = count(at, "GeneratedTokens", cols[2])?;
    if first.is_none() {
        *first = Some(cols[0].to_owned());
    }
    let at_ms = clock.at(wall).map_err(|_| {
        at.err("TIMESTAMP", format!("{} is before the previous row's time: rows must be in time order (sort the file by TIMESTAMP)", cols[0]))
    })?;
    Ok(TraceRequest {
        index: 0,
        session: None,
        turn: 0,
        at_ms: Some(at_ms),
        think_ms: None,
        input_tokens: input,
        output_tokens: output,
        blocks: Vec::new(),
        block_tokens: crate::request::DEFAULT_BLOCK,
    })
}

/// A token count column: a whole number, 0 or more.
fn count(at: At<'_>, field: &str, s: &str) -> Result<u64, TraceError> {
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    match s.parse::<f64>() {
        Ok(x) if x < 0.0 => Err(at.err(field, format!("negative ({s}); must be 0 or more"))),
        Ok(x) if x.fract() == 0.0 && x.is_finite() => Ok(x as u64),
        Ok(_) => Err(at.err(field, format!("not a whole number ({s})"))),
        Err(_) => Err(at.err(field, format!("not a number (`{s}`)"))),
    }
}
