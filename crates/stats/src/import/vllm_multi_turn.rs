//! vLLM's multi-turn benchmark (`benchmarks/multi_turn/benchmark_serving_multi_turn.py`,
//! in vLLM's source distribution, not its wheel): the `--stats-json-output` file, a JSON
//! array with one object per request (`ttft_ms`, `tpot_ms`, `latency_ms`, `start_time_ms`,
//! `input_num_turns`, `input_num_tokens`, `output_num_tokens`, `approx_cached_percent`,
//! `conversation_id`, `client_id`). Each request becomes a sample carrying its conversation
//! and turn; the points are the turns (turn 0 of every conversation, turn 1, …). A later turn
//! re-sends the earlier ones, and the file has no cached-token count from the server: those
//! samples are suspected cache hits, kept out of the cold summaries.

use std::collections::BTreeMap;

use ctxbench_schema::imported::{Audit, ImportedMetric, ImportedPoint, ImportedTurn};
use ctxbench_schema::record::Flag;
use serde_json::Value;

use super::common::{self, field_err, percentile, sample_of, ImportError, Request, SourceFile};
use super::findings::{Findings, LengthRange, TurnFacts};
use super::source::{assemble, Imported, Parts};

/// The fields every request object of the file carries (how the file is recognised).
pub const KEYS: [&str; 4] = [
    "ttft_ms",
    "conversation_id",
    "input_num_turns",
    "approx_cached_percent",
];

/// Whether `v` is a `--stats-json-output` file: an array whose first object has [`KEYS`].
pub fn is_stats_file(v: &Value) -> bool {
    v.as_array()
        .and_then(|a| a.first())
        .is_some_and(|r| KEYS.iter().all(|k| r.get(*k).is_some()))
}

/// One request of the file.
struct Row {
    conversation: String,
    messages: u32,
    start_ms: f64,
    approx_cached_percent: f64,
    request: Request,
}

/// Reads every file's requests into one imported run, one point per turn.
pub fn import(files: &[SourceFile], ctxbench_version: &str) -> Result<Imported, ImportError> {
    let mut parts = Parts::new(
        "vllm-multi-turn",
        "vLLM benchmark_serving_multi_turn.py --stats-json-output JSON",
    );
    let mut rows = Vec::new();
    for f in files {
        let v = common::json(f)?;
        let arr = v.as_array().ok_or_else(|| {
            field_err(&f.name, &["(top level)"], "not an array of request objects")
        })?;
        for (i, r) in arr.iter().enumerate() {
            rows.push(row(&f.name, i, r)?);
        }
    }
    // The order a conversation's requests were sent in (the file lists them as they ended).
    rows.sort_by(|a, b| {
        a.conversation
            .cmp(&b.conversation)
            .then(a.start_ms.total_cmp(&b.start_ms))
    });
    let mut by_turn: BTreeMap<u32, Vec<(ImportedTurn, &Row)>> = BTreeMap::new();
    let mut turn = 0u32;
    for (k, r) in rows.iter().enumerate() {
        let same = k > 0
            && rows
                .get(k - 1)
                .is_some_and(|p| p.conversation == r.conversation);
        turn = if same { turn + 1 } else { 0 };
        let t = ImportedTurn {
            conversation: r.conversation.clone(),
            turn,
            messages: r.messages,
        };
        by_turn.entry(turn).or_default().push((t, r));
    }
    let mut turns = Vec::new();
    for (turn, reqs) in &by_turn {
        let lens: Vec<u64> = reqs
            .iter()
            .filter_map(|(_, r)| r.request.prompt_tokens)
            .collect();
        let context = lens.iter().sum::<u64>() / (lens.len().max(1) as u64);
        let cached: Vec<f64> = reqs.iter().map(|(_, r)| r.approx_cached_percent).collect();
        turns.push(TurnFacts {
            turn: *turn,
            requests: reqs.len(),
            lengths: LengthRange {
                min: lens.iter().min().copied().unwrap_or(0) as f64,
                max: lens.iter().max().copied().unwrap_or(0) as f64,
                mean: context,
            },
            approx_cached_percent: (
                cached.iter().copied().fold(f64::INFINITY, f64::min),
                cached.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ),
        });
        for (rep, (t, r)) in reqs.iter().enumerate() {
            let mut s = sample_of("", context, rep as u32, &r.request, false);
            if *turn > 0 {
                // It re-sent the earlier turns the server had just seen: a prefix cache
                // likely served them, and nothing in the file says otherwise.
                s.flags.push(Flag::SuspectedCacheHit);
            }
            s.turn = Some(t.clone());
            parts.samples.push(s);
        }
        let ttfts: Vec<f64> = reqs.iter().filter_map(|(_, r)| r.request.ttft_ms).collect();
        parts.points.push(ImportedPoint {
            context_tokens: context,
            concurrency: None,
            requests: reqs.len() as u64,
            name: Some(format!("turn {turn}")),
            metrics: vec![ttft_metric(&ttfts)],
        });
    }
    parts.output_tokens = mean_output(&rows);
    parts.audit = Audit {
        cache_per_request: false,
        lengths_exact: false,
        warmup_separated: None,
        per_request: true,
        ..Audit::default()
    };
    parts.findings = Findings::VllmMultiTurn {
        conversations: by_turn.get(&0).map_or(0, Vec::len),
        turns,
    };
    Ok(assemble(parts, files, ctxbench_version))
}

/// One request object, its fields checked.
fn row(file: &str, i: usize, r: &Value) -> Result<Row, ImportError> {
    let num = |k: &str| {
        r.get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| field_err(file, &[&format!("[{i}]"), k], "missing or not a number"))
    };
    let conversation = r
        .get("conversation_id")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            field_err(
                file,
                &[&format!("[{i}]"), "conversation_id"],
                "missing or not a string",
            )
        })?
        .to_owned();
    let tpot = num("tpot_ms")?;
    Ok(Row {
        conversation,
        messages: num("input_num_turns")? as u32,
        start_ms: num("start_time_ms")?,
        approx_cached_percent: num("approx_cached_percent")?,
        request: Request {
            prompt_tokens: Some(num("input_num_tokens")? as u64),
            output_tokens: r.get("output_num_tokens").and_then(Value::as_u64),
            ttft_ms: Some(num("ttft_ms")?),
            // 0.0: a one-chunk answer, no decode time measured.
            itl_ms: (tpot > 0.0).then_some(tpot),
            e2e_ms: Some(num("latency_ms")?),
            cached_tokens: None,
            // start_time_ms is a monotonic clock's, not a wall time.
            at: None,
            failed: false,
        },
    })
}

/// The file holds no aggregates: TTFT's mean, range and median over the turn's requests.
fn ttft_metric(xs: &[f64]) -> ImportedMetric {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as u64;
    let median = match s.len() {
        0 => None,
        k if k % 2 == 1 => s.get(k / 2).copied(),
        k => Some((s[k / 2 - 1] + s[k / 2]) / 2.0),
    };
    ImportedMetric {
        name: "ttft_ms".into(),
        source:
            "ttft_ms per request [ms] (aggregated by ctxbench import: the file has no aggregates)"
                .into(),
        count: Some(n),
        mean: (!s.is_empty()).then(|| s.iter().sum::<f64>() / n as f64),
        std: None,
        min: s.first().copied(),
        max: s.last().copied(),
        percentiles: median
            .map(|m| vec![percentile(0.5, m, Some(n))])
            .unwrap_or_default(),
    }
}

fn mean_output(rows: &[Row]) -> u32 {
    let outs: Vec<u64> = rows
        .iter()
        .filter_map(|r| r.request.output_tokens)
        .collect();
    (outs.iter().sum::<u64>() as f64 / outs.len().max(1) as f64).round() as u32
}
