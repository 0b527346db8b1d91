//! TraceLab round JSONL: one LLM round per line with `session_id`, `round_index`,
//! `input_tokens_total = prefix_tokens + newly_append_tokens`, `output_tokens` and
//! `timing_events[]`. It has no hash ids: blocks are synthesised as AIPerf's loader does, the
//! round's `prefix_tokens / 64` leading blocks reused from the session's previous round and
//! fresh ids for the rest. Sessions may be months apart, so it has no absolute time: each
//! round's think time is its latest input event after the previous round's latest output event.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::fields::{kind, object_line, At};
use crate::reader::{Lines, Source};
use crate::request::{TraceError, TraceRequest};

/// Tokens per synthesised block (AIPerf's TraceLab default).
pub const TRACELAB_BLOCK: u32 = 64;
/// Event types that are the round's input (the request is sent after the latest).
const INPUT_EVENTS: [&str; 2] = ["user_message", "tool_result"];
/// Event types that are the round's answer.
const OUTPUT_EVENTS: [&str; 4] = ["reasoning", "text", "tool_call", "usage_report"];

/// What a session's next round needs from its previous one.
struct Session {
    round: u64,
    turns: u32,
    blocks: Vec<u64>,
    answer_end_ms: Option<f64>,
}

/// The TraceLab reader.
pub(crate) struct TraceLabSource {
    path: PathBuf,
    lines: Lines,
    state: State,
}

/// What the reader keeps between lines: each session's last round, the next fresh id.
#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    next_id: u64,
    capped: u64,
    without_time: u64,
}

impl TraceLabSource {
    /// Opens the file.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        Ok(Self {
            path: path.to_owned(),
            lines: Lines::open(path)?,
            state: State::default(),
        })
    }
}

impl Source for TraceLabSource {
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
        let round = match parse_round(at, text, nl) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        Some(self.state.request(at, round))
    }

    fn notes(&self) -> Vec<String> {
        let mut n = vec![
            format!("no hash ids: blocks of {TRACELAB_BLOCK} tokens synthesised, each round reusing floor(prefix_tokens/{TRACELAB_BLOCK}) leading blocks of its session's previous round, fresh ids for the rest (floor(input_tokens_total/{TRACELAB_BLOCK}) blocks; the tail is the round's own)"),
            "input_tokens_total == prefix_tokens + newly_append_tokens checked; round_index checked increasing within each session".into(),
            "no absolute time (sessions may be days apart): replayed per session, think time = the round's latest input event after the previous round's latest output event; a session's first round at once".into(),
        ];
        let s = &self.state;
        if s.capped > 0 {
            n.push(format!("rounds whose prefix_tokens exceed their session's previous round, reuse capped at that round's blocks: {}", s.capped));
        }
        if s.without_time > 0 {
            n.push(format!(
                "rounds without the events to time them, so without a think time: {}",
                s.without_time
            ));
        }
        n
    }
}

/// One round's fields.
struct Round {
    session: String,
    index: u64,
    input: u64,
    prefix: u64,
    output: u64,
    submit_ms: Option<f64>,
    end_ms: Option<f64>,
}

fn parse_round(at: At<'_>, text: &str, nl: bool) -> Result<Round, TraceError> {
    let obj = object_line(at, text, !nl)?;
    let session = at
        .opt_name(&obj, "session_id")?
        .ok_or_else(|| at.err("session_id", "missing"))?;
    let index = at.count(&obj, "round_index")?;
    let input = at.count(&obj, "input_tokens_total")?;
    let prefix = at.count(&obj, "prefix_tokens")?;
    let append = at.count(&obj, "newly_append_tokens")?;
    let output = at.count(&obj, "output_tokens")?;
    if prefix.checked_add(append) != Some(input) {
        return Err(at.err(
            "input_tokens_total",
            format!(
                "{input}, but prefix_tokens {prefix} + newly_append_tokens {append} = {}",
                prefix.saturating_add(append)
            ),
        ));
    }
    let (submit_ms, end_ms) = event_times(at, &obj)?;
    Ok(Round {
        session,
        index,
        input,
        prefix,
        output,
        submit_ms,
        end_ms,
    })
}

/// The latest input event and the latest output event of the round, ms since 1970.
fn event_times(
    at: At<'_>,
    obj: &Map<String, Value>,
) -> Result<(Option<f64>, Option<f64>), TraceError> {
    let events = match obj.get("timing_events") {
        None | Some(Value::Null) => return Ok((None, None)),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(at.err("timing_events", format!("not a list ({})", kind(v)))),
    };
    let (mut submit, mut end) = (None::<f64>, None::<f64>);
    for (i, e) in events.iter().enumerate() {
        let Some(e) = e.as_object() else {
            return Err(at.err(
                &format!("timing_events[{i}]"),
                format!("not an object ({})", kind(e)),
            ));
        };
        let ty = e.get("event_type").and_then(Value::as_str).unwrap_or("");
        let Some(ts) = e.get("timestamp").and_then(Value::as_str) else {
            continue;
        };
        let ms = crate::clock::parse_ms(ts).ok_or_else(|| {
            at.err(
                &format!("timing_events[{i}].timestamp"),
                format!("`{ts}` is not an ISO-8601 time"),
            )
        })?;
        if INPUT_EVENTS.contains(&ty) {
            submit = Some(submit.map_or(ms, |s| s.max(ms)));
        } else if OUTPUT_EVENTS.contains(&ty) {
            end = Some(end.map_or(ms, |s| s.max(ms)));
        }
    }
    Ok((submit, end))
}

impl State {
    fn request(&mut self, at: At<'_>, r: Round) -> Result<TraceRequest, TraceError> {
        let b = u64::from(TRACELAB_BLOCK);
        let total = (r.input / b) as usize;
        let prev = self.sessions.get(&r.session);
        if let Some(p) = prev {
            if r.index <= p.round {
                return Err(at.err(
                    "round_index",
                    format!(
                        "{} is not after this session's previous round {}",
                        r.index, p.round
                    ),
                ));
            }
        }
        let mut blocks = Vec::with_capacity(total);
        let want = (r.prefix / b) as usize;
        let reused = prev.map_or(0, |p| want.min(p.blocks.len()));
        if let Some(p) = prev {
            blocks.extend_from_slice(&p.blocks[..reused]);
        }
        if want > reused && prev.is_some() {
            self.capped += 1;
        }
        while blocks.len() < total {
            blocks.push(self.next_id);
            self.next_id += 1;
        }
        let think_ms = match prev {
            None => Some(0.0),
            Some(p) => match (r.submit_ms, p.answer_end_ms) {
                (Some(s), Some(e)) => Some((s - e).max(0.0)),
                _ => None,
            },
        };
        if think_ms.is_none() {
            self.without_time += 1;
        }
        let turn = prev.map_or(0, |p| p.turns);
        let req = TraceRequest {
            index: 0,
            session: Some(r.session.clone()),
            turn,
            at_ms: None,
            think_ms,
            input_tokens: r.input,
            output_tokens: r.output,
            blocks,
            block_tokens: TRACELAB_BLOCK,
        };
        self.sessions.insert(
            r.session,
            Session {
                round: r.index,
                turns: turn + 1,
                blocks: req.blocks.clone(),
                answer_end_ms: r.end_ms,
            },
        );
        Ok(req)
    }
}
