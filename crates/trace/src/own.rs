//! ctxbench's own trace format (docs/trace-format.md): JSONL, one request per line with
//! `session`, `turn`, `at_ms` and/or `think_ms`, `input_tokens`, `output_tokens`,
//! `block_tokens` and `blocks` (at most `ceil(input_tokens / block_tokens)` ids).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::fields::{ceil_div, object_line, At};
use crate::reader::{Clock, Lines, Source};
use crate::request::{TraceError, TraceRequest};

/// The reader of ctxbench's own format.
pub(crate) struct OwnSource {
    path: PathBuf,
    lines: Lines,
    clock: Clock,
    turns: HashMap<String, u32>,
}

impl OwnSource {
    /// Opens the file.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        Ok(Self {
            path: path.to_owned(),
            lines: Lines::open(path)?,
            clock: Clock::default(),
            turns: HashMap::new(),
        })
    }
}

impl Source for OwnSource {
    fn next_request(&mut self) -> Option<Result<TraceRequest, TraceError>> {
        let (line, text, nl) = match self.lines.next_line()? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let at = At {
            path: &self.path,
            line,
            prefix: "",
        };
        Some(parse(at, text, nl, &mut self.clock, &mut self.turns))
    }

    fn notes(&self) -> Vec<String> {
        let mut n = vec!["blocks checked: at most ceil(input_tokens/block_tokens) ids, the last block may be partial".to_owned()];
        n.extend(self.clock.note("at_ms times"));
        n.push("at_ms checked non-decreasing; turn checked against each session's count".into());
        n
    }
}

fn parse(
    at: At<'_>,
    text: &str,
    had_newline: bool,
    clock: &mut Clock,
    turns: &mut HashMap<String, u32>,
) -> Result<TraceRequest, TraceError> {
    let obj = object_line(at, text, !had_newline)?;
    for key in obj.keys() {
        if !FIELDS.contains(&key.as_str()) {
            return Err(at.err(
                key,
                format!(
                    "not a field of ctxbench's trace format (fields: {})",
                    FIELDS.join(", ")
                ),
            ));
        }
    }
    let session = at.opt_name(&obj, "session")?;
    let turn = at.opt_count(&obj, "turn")?;
    let at_ms = at.opt_time(&obj, "at_ms")?;
    let think_ms = at.opt_time(&obj, "think_ms")?;
    let input = at.count(&obj, "input_tokens")?;
    let output = at.count(&obj, "output_tokens")?;
    let blocks = at.opt_ids(&obj, "blocks")?.unwrap_or_default();
    let block_tokens = at.opt_count(&obj, "block_tokens")?;
    if at_ms.is_none() && think_ms.is_none() {
        return Err(at.err("at_ms", "missing (a request needs at_ms, think_ms or both)"));
    }
    let block_tokens = match block_tokens {
        Some(0) => return Err(at.err("block_tokens", "0; a block has at least one token")),
        Some(b) => {
            u32::try_from(b).map_err(|_| at.err("block_tokens", format!("{b} is too large")))?
        }
        None if blocks.is_empty() => crate::request::DEFAULT_BLOCK,
        None => return Err(at.err("block_tokens", "missing (needed with blocks)")),
    };
    let most = ceil_div(input, u64::from(block_tokens));
    if blocks.len() as u64 > most {
        return Err(at.err("blocks", format!(
            "{} blocks of {block_tokens} tokens for input_tokens {input}: at most ceil({input}/{block_tokens}) = {most}",
            blocks.len()
        )));
    }
    let counted = match &session {
        Some(s) => {
            let n = turns.entry(s.clone()).or_insert(0);
            *n += 1;
            *n - 1
        }
        None => 0,
    };
    if let Some(t) = turn {
        if t != u64::from(counted) {
            return Err(at.err(
                "turn",
                format!("{t}, but this is request {counted} (0-based) of its session"),
            ));
        }
    }
    let at_ms = match at_ms {
        Some(t) => Some(clock.at(t).map_err(|prev| {
            at.err(
                "at_ms",
                format!("{t} is before the previous request's {prev}: at_ms never goes back"),
            )
        })?),
        None => None,
    };
    Ok(TraceRequest {
        index: 0,
        session,
        turn: counted,
        at_ms,
        think_ms,
        input_tokens: input,
        output_tokens: output,
        blocks,
        block_tokens,
    })
}

/// The fields of the format, all it allows.
pub const FIELDS: [&str; 8] = [
    "session",
    "turn",
    "at_ms",
    "think_ms",
    "input_tokens",
    "output_tokens",
    "block_tokens",
    "blocks",
];
