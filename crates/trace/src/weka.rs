//! Weka / kv-cache-tester JSON: one session per file (one JSON object), or a folder of them.
//! `block_size` tokens per hash id (64), `len(hash_ids) == floor(in / block_size)` (the tail
//! has no id); `hash_id_scope: "local"` ids are per file, so they are namespaced by file;
//! `requests[]` with `t` (s since the session's start), `in`, `out`, `hash_ids`,
//! `think_time`, `api_time`, `type`; `type: "subagent"` markers hold nested `requests[]` whose
//! `t` restarts at 0 (absolute time = marker `t` + inner `t`), in the parent file's id space.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::fields::{kind, At};
use crate::reader::Source;
use crate::request::{TraceError, TraceRequest};

/// Bits left for a file's own ids under `hash_id_scope: "local"`; the file's number is above.
const LOCAL_ID_BITS: u32 = 40;

/// The Weka reader. A session's requests interleave with its subagents' and, in a folder,
/// with every other session's (all start at time 0), so the folder is read whole (one file's
/// JSON at a time) and sorted by time: its memory grows with the folder, unlike the
/// line-by-line formats. It is kept compact: a session whose prompt grows turn by turn holds
/// its hash ids once ([`Runs`]), each request a length into them, and a request's ids are
/// copied out only when it is yielded; so the folder costs ~100 bytes per request plus 8 per
/// distinct id of each session, not 8 per id of every request.
pub(crate) struct WekaSource {
    requests: std::vec::IntoIter<Pending>,
    runs: Runs,
    files: usize,
    block_sizes: Vec<u32>,
    local: usize,
    subagents: u64,
}

impl WekaSource {
    /// Reads the file, or every `*.json` file of the folder (by name).
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let files = files(path)?;
        let mut all = Vec::new();
        let mut src = WekaSource {
            requests: Vec::new().into_iter(),
            runs: Runs::default(),
            files: files.len(),
            block_sizes: Vec::new(),
            local: 0,
            subagents: 0,
        };
        for (i, f) in files.iter().enumerate() {
            src.read_file(f, i as u64 + 1, &mut all)?;
        }
        // Stable: equal times keep file and array order.
        all.sort_by(|a: &Pending, b| {
            let t = |p: &Pending| p.request.at_ms.unwrap_or(0.0);
            t(a).total_cmp(&t(b))
        });
        src.requests = all.into_iter();
        Ok(src)
    }

    fn read_file(
        &mut self,
        path: &Path,
        file_no: u64,
        out: &mut Vec<Pending>,
    ) -> Result<(), TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
        let at = At {
            path,
            line: 1,
            prefix: "",
        };
        let value: Value =
            serde_json::from_str(text.trim_start_matches('\u{feff}')).map_err(|e| {
                let at = At {
                    path,
                    line: e.line() as u64,
                    prefix: "",
                };
                if e.is_eof() {
                    at.err(
                        "(file)",
                        format!("truncated: the file ends before its JSON does ({e})"),
                    )
                } else {
                    at.err("(file)", format!("not valid JSON ({e})"))
                }
            })?;
        let Value::Object(top) = value else {
            return Err(at.err("(file)", format!("not a JSON object ({})", kind(&value))));
        };
        let block = at.count(&top, "block_size")?;
        let block = match u32::try_from(block) {
            Ok(b) if b > 0 => b,
            _ => return Err(at.err("block_size", format!("{block}; must be 1 or more"))),
        };
        if !self.block_sizes.contains(&block) {
            self.block_sizes.push(block);
        }
        let scope = at.opt_name(&top, "hash_id_scope")?;
        let namespace = match scope.as_deref() {
            None | Some("local") => {
                self.local += 1;
                Some(file_no)
            }
            Some("global") => None,
            Some(other) => {
                return Err(at.err(
                    "hash_id_scope",
                    format!("`{other}`; expected local or global"),
                ))
            }
        };
        let session = at.opt_name(&top, "id")?.unwrap_or_else(|| {
            path.file_stem().map_or_else(
                || format!("file{file_no}"),
                |s| s.to_string_lossy().into_owned(),
            )
        });
        let mut walk = Walk {
            path,
            block,
            namespace,
            turns: HashMap::new(),
            out: Vec::new(),
            subagents: 0,
            runs: &mut self.runs,
            current: HashMap::new(),
        };
        let reqs = requests_of(at, &top)?;
        walk.requests(reqs, 0.0, &session, "requests")?;
        self.subagents += walk.subagents;
        // The session's own clock starts at its first request (traces may start anywhere).
        let origin = walk
            .out
            .iter()
            .filter_map(|r| r.request.at_ms)
            .fold(f64::INFINITY, f64::min);
        for r in &mut walk.out {
            if let Some(t) = r.request.at_ms.as_mut() {
                *t -= origin;
            }
        }
        out.append(&mut walk.out);
        Ok(())
    }
}

/// The `requests` list of an object.
fn requests_of<'v>(at: At<'_>, obj: &'v Map<String, Value>) -> Result<&'v [Value], TraceError> {
    match at.get(obj, "requests")? {
        Value::Array(a) => Ok(a),
        v => Err(at.err("requests", format!("not a list ({})", kind(v)))),
    }
}

/// Hash ids held once per session: a run is one session's ids as its prompt grew; a request
/// whose ids extend (or repeat a prefix of) its session's run is a length into it, and one
/// that departs from it (a compaction, a rewrite) starts a new run.
#[derive(Default)]
struct Runs {
    ids: Vec<Vec<u64>>,
}

impl Runs {
    /// Stores `blocks` into `run` (a session's current run, if any), returning the run and
    /// the length that is this request's ids.
    fn store(&mut self, run: Option<usize>, blocks: Vec<u64>) -> (usize, usize) {
        let len = blocks.len();
        if let Some(r) = run {
            let have = &mut self.ids[r];
            let common = have.iter().zip(&blocks).take_while(|(a, b)| a == b).count();
            if common == len.min(have.len()) {
                // The same prefix: extend the run with what is new.
                have.extend_from_slice(&blocks[common..]);
                return (r, len);
            }
        }
        self.ids.push(blocks);
        (self.ids.len() - 1, len)
    }
}

/// A request read and waiting to be yielded: its ids are `len` ids of `run`.
pub(crate) struct Pending {
    request: TraceRequest,
    run: usize,
    len: usize,
}

/// One file's walk through its requests and subagents.
struct Walk<'p> {
    path: &'p Path,
    block: u32,
    namespace: Option<u64>,
    turns: HashMap<String, u32>,
    out: Vec<Pending>,
    subagents: u64,
    runs: &'p mut Runs,
    /// Each session's current run.
    current: HashMap<String, usize>,
}

impl Walk<'_> {
    fn requests(
        &mut self,
        list: &[Value],
        offset_s: f64,
        session: &str,
        field: &str,
    ) -> Result<(), TraceError> {
        for (i, v) in list.iter().enumerate() {
            let prefix = format!("{field}[{i}].");
            let at = At {
                path: self.path,
                line: 1,
                prefix: &prefix,
            };
            let Value::Object(obj) = v else {
                return Err(at.err("", format!("not an object ({})", kind(v))));
            };
            let t = at
                .opt_time(obj, "t")?
                .ok_or_else(|| at.err("t", "missing"))?;
            if obj.get("type").and_then(Value::as_str) == Some("subagent") {
                self.subagents += 1;
                let agent = at
                    .opt_name(obj, "agent_id")?
                    .unwrap_or_else(|| format!("subagent{i}"));
                let inner = requests_of(at, obj)?;
                self.requests(
                    inner,
                    offset_s + t,
                    &format!("{session}/{agent}"),
                    &format!("{prefix}requests"),
                )?;
                continue;
            }
            let input = at.count(obj, "in")?;
            let output = at.count(obj, "out")?;
            let ids = at
                .opt_ids(obj, "hash_ids")?
                .ok_or_else(|| at.err("hash_ids", "missing"))?;
            let want = input / u64::from(self.block);
            if ids.len() as u64 != want {
                return Err(at.err("hash_ids", format!(
                    "{} ids for in {input}: one id per whole block of {} tokens, so floor({input}/{}) = {want} ids",
                    ids.len(), self.block, self.block
                )));
            }
            let blocks = match self.namespace {
                Some(file) => ids.iter().map(|&id| {
                    if id >> LOCAL_ID_BITS != 0 {
                        Err(at.err("hash_ids", format!("id {id} is too large for a local scope (below 2^{LOCAL_ID_BITS})")))
                    } else {
                        Ok(file << LOCAL_ID_BITS | id)
                    }
                }).collect::<Result<Vec<_>, _>>()?,
                None => ids,
            };
            let think = at.opt_time(obj, "think_time")?;
            at.opt_time(obj, "api_time")?;
            let n = self.turns.entry(session.to_owned()).or_insert(0);
            let turn = *n;
            *n += 1;
            let (run, len) = self.runs.store(self.current.get(session).copied(), blocks);
            self.current.insert(session.to_owned(), run);
            self.out.push(Pending {
                request: TraceRequest {
                    index: 0,
                    session: Some(session.to_owned()),
                    turn,
                    at_ms: Some((offset_s + t) * 1000.0),
                    think_ms: think.map(|s| s * 1000.0),
                    input_tokens: input,
                    output_tokens: output,
                    blocks: Vec::new(),
                    block_tokens: self.block,
                },
                run,
                len,
            });
        }
        Ok(())
    }
}

/// The trace's files: the file itself, or the folder's `*.json` files by name.
fn files(path: &Path) -> Result<Vec<PathBuf>, TraceError> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let io = |source| TraceError::Io {
        path: path.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for e in std::fs::read_dir(path).map_err(io)? {
        let p = e.map_err(io)?.path();
        if p.extension().is_some_and(|x| x == "json") && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(TraceError::UnknownFormat {
            path: path.to_owned(),
            reason: "a folder without .json files (a folder trace is Weka sessions, one .json file each)".into(),
        });
    }
    Ok(files)
}

impl Source for WekaSource {
    fn next_request(&mut self) -> Option<Result<TraceRequest, TraceError>> {
        let p = self.requests.next()?;
        let mut r = p.request;
        r.blocks = self.runs.ids[p.run][..p.len].to_vec();
        Some(Ok(r))
    }

    fn notes(&self) -> Vec<String> {
        let sizes: Vec<String> = self.block_sizes.iter().map(u32::to_string).collect();
        let mut n = vec![
            format!("session files: {}; block_size {}: every request's len(hash_ids) == floor(in/block_size) checked, the tail beyond whole blocks its own", self.files, sizes.join(", ")),
            "t is seconds since the session's start: each file's first request is time 0 (a folder's sessions start together)".into(),
        ];
        if self.local > 0 {
            n.push(format!("files with hash_id_scope local, their ids namespaced per file (subagents share their file's ids): {}", self.local));
        }
        if self.subagents > 0 {
            n.push(format!(
                "subagent markers, each a session of its own at marker t + inner t: {}",
                self.subagents
            ));
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::Runs;

    #[test]
    fn a_growing_session_holds_its_ids_once_and_a_departure_starts_a_new_run() {
        let mut runs = Runs::default();
        let (a, n) = runs.store(None, vec![1, 2]);
        assert_eq!((a, n), (0, 2));
        // Grows: the same run, extended.
        assert_eq!(runs.store(Some(a), vec![1, 2, 3, 4]), (0, 4));
        // A prefix of it (a shorter retry): a length into the same run.
        assert_eq!(runs.store(Some(a), vec![1, 2, 3]), (0, 3));
        assert_eq!(runs.ids[0], vec![1, 2, 3, 4]);
        // Departs (a compaction): a new run; the old one is untouched.
        assert_eq!(runs.store(Some(a), vec![1, 9]), (1, 2));
        assert_eq!(runs.ids, vec![vec![1, 2, 3, 4], vec![1, 9]]);
    }
}
