//! Mooncake / vLLM `timed-trace` JSONL: one request per line, `timestamp` (ms),
//! `input_length`, `output_length`, `hash_ids` (blocks of 512 tokens, the last partial:
//! `len == ceil(input_length / 512)`), optional `session_id` and `delay` (AIPerf's).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::fields::{ceil_div, object_line, At};
use crate::reader::{Clock, Lines, Source};
use crate::request::{TraceError, TraceRequest};

/// Mooncake's block size in tokens.
pub const MOONCAKE_BLOCK: u32 = 512;
/// Alibaba Bailian's block size, in traces written in Mooncake's format.
pub const BAILIAN_BLOCK: u32 = 16;
/// Lines read to decide between 512- and 16-token blocks.
const SNIFF_LINES: usize = 1000;

/// The Mooncake reader.
pub(crate) struct MooncakeSource {
    path: PathBuf,
    lines: Lines,
    state: State,
}

/// What the reader keeps between lines: the time origin and each session's turn count.
struct State {
    block: u32,
    clock: Clock,
    turns: HashMap<String, u32>,
    without_ids: u64,
    with_delay: u64,
}

impl MooncakeSource {
    /// Opens the file, first deciding the block size from its first lines.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let block = sniff_block(path)?;
        Ok(Self {
            path: path.to_owned(),
            lines: Lines::open(path)?,
            state: State {
                block,
                clock: Clock::default(),
                turns: HashMap::new(),
                without_ids: 0,
                with_delay: 0,
            },
        })
    }
}

impl State {
    fn parse(
        &mut self,
        path: &Path,
        line: u64,
        text: &str,
        had_newline: bool,
    ) -> Result<TraceRequest, TraceError> {
        let at = At {
            path,
            line,
            prefix: "",
        };
        let obj = object_line(at, text, !had_newline)?;
        let input = at.count(&obj, "input_length")?;
        let output = at.count(&obj, "output_length")?;
        let ts = at.opt_time(&obj, "timestamp")?;
        let delay = at.opt_time(&obj, "delay")?;
        let blocks = at.opt_ids(&obj, "hash_ids")?;
        let session = at.opt_name(&obj, "session_id")?;
        if ts.is_none() && delay.is_none() {
            return Err(at.err("timestamp", "missing (a request needs a timestamp, or a delay after its session's previous answer)"));
        }
        let blocks = match blocks {
            Some(ids) => {
                let want = ceil_div(input, u64::from(self.block));
                if ids.len() as u64 != want {
                    return Err(at.err("hash_ids", format!(
                        "{} ids for input_length {input}: blocks are {} tokens, the last partial, so ceil({input}/{}) = {want} ids",
                        ids.len(), self.block, self.block
                    )));
                }
                ids
            }
            None => {
                self.without_ids += 1;
                Vec::new()
            }
        };
        let at_ms = match ts {
            Some(t) => Some(self.clock.at(t).map_err(|prev| {
                at.err("timestamp", format!("{t} is before the previous request's {prev}: Mooncake timestamps never go back"))
            })?),
            None => None,
        };
        if delay.is_some() {
            self.with_delay += 1;
        }
        let turn = match &session {
            Some(s) => {
                let n = self.turns.entry(s.clone()).or_insert(0);
                *n += 1;
                *n - 1
            }
            None => 0,
        };
        Ok(TraceRequest {
            index: 0,
            session,
            turn,
            at_ms,
            think_ms: delay,
            input_tokens: input,
            output_tokens: output,
            blocks,
            block_tokens: self.block,
        })
    }
}

impl Source for MooncakeSource {
    fn next_request(&mut self) -> Option<Result<TraceRequest, TraceError>> {
        match self.lines.next_line()? {
            Ok((line, text, nl)) => Some(self.state.parse(&self.path, line, text, nl)),
            Err(e) => Some(Err(e)),
        }
    }

    fn notes(&self) -> Vec<String> {
        self.state.notes()
    }
}

impl State {
    fn notes(&self) -> Vec<String> {
        let mut n = vec![if self.block == MOONCAKE_BLOCK {
            format!("hash_ids are blocks of {MOONCAKE_BLOCK} tokens, the last one partial: every line's len(hash_ids) == ceil(input_length/{MOONCAKE_BLOCK}) checked")
        } else {
            format!("hash_ids are blocks of {BAILIAN_BLOCK} tokens (Alibaba Bailian, told from the first lines' lengths): every line's len(hash_ids) == ceil(input_length/{BAILIAN_BLOCK}) checked")
        }];
        n.extend(self.clock.note("timestamps (ms)"));
        n.push("timestamps checked non-decreasing".into());
        if self.without_ids > 0 {
            n.push(format!(
                "requests without hash_ids, no reuse (their tokens are their own): {}",
                self.without_ids
            ));
        }
        if self.with_delay > 0 {
            n.push(format!("requests with a delay (ms after their session's previous answer), their think time: {}", self.with_delay));
        }
        n
    }
}

/// 512 (Mooncake) unless the first line whose lengths tell the two apart has
/// `ceil(input/16)` ids (Bailian).
fn sniff_block(path: &Path) -> Result<u32, TraceError> {
    let mut lines = Lines::open(path)?;
    for _ in 0..SNIFF_LINES {
        let Some(Ok((_, text, _))) = lines.next_line() else {
            break;
        };
        let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(text)
        else {
            continue;
        };
        let (Some(input), Some(ids)) = (
            obj.get("input_length").and_then(|v| v.as_u64()),
            obj.get("hash_ids").and_then(|v| v.as_array()),
        ) else {
            continue;
        };
        let (big, small) = (ceil_div(input, 512), ceil_div(input, 16));
        if big == small {
            continue;
        }
        return Ok(if ids.len() as u64 == small {
            BAILIAN_BLOCK
        } else {
            MOONCAKE_BLOCK
        });
    }
    Ok(MOONCAKE_BLOCK)
}
