//! The speculation schedule to deploy (issue 45, point 4): the K × L × batch measurements,
//! K* per cell, a neutral table (Markdown, JSON) and the same schedule in each unmerged
//! proposal's dialect: vLLM #48944 `speculative_token_schedule` 5-tuples, vLLM #54801
//! `num_speculative_tokens_per_seq_len`, SGLang #31716 `ctx_buckets`. The dialects follow
//! the proposals as of September 2026 (docs/speculation.md); none is merged, so each is
//! marked with the proposal it follows.

use serde_json::{json, Value};

use ctxbench_schema::units::fmt_ctx;
use ctxbench_stats::stats::speculation::schedule::{buckets, Bucket, KSchedule};

/// How the dialects write an open upper end (no such end in a list of integers): 2³¹ − 1.
pub const OPEN_END: u64 = 2_147_483_647;

/// What each dialect follows, and what it cannot say.
const VLLM_48944: &str = "vllm-project/vllm#48944 (open, unmerged; the format may change): `speculative_token_schedule` inside --speculative-config, entries [bs_lo, bs_hi, ctx_lo, ctx_hi, K], inclusive";
const VLLM_54801: &str = "vllm-project/vllm#54801 (open, unmerged; the format may change): `num_speculative_tokens_per_seq_len`, entries [len_lo, len_hi, K] inclusive, after the 3-tuples of `num_speculative_tokens_per_batch_size`; it has no batch axis";
const SGLANG_31716: &str = "sgl-project/sglang#31716 (open, unmerged; the format may change): `ctx_buckets` {\"lo-hi\": {\"candidate_steps\": [K]}} per batch-size entry of --speculative-adaptive-config, covering [1, inf); entries keyed by the batch range's lower end, as #24055's bs_params";

/// The rows a dialect writes: adjacent lengths of one batch range with the same K merged.
/// The neutral schedule keeps them apart where one was decided and the next undecided or
/// short of samples; a dialect carries only K, and two rows of one K would read as a change.
fn dialect_rows(b: &[Bucket]) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    for x in b {
        match out.last_mut() {
            Some(p) if p.batch_lo == x.batch_lo && p.k == x.k => {
                p.ctx_hi = x.ctx_hi;
                p.measured_contexts.extend(&x.measured_contexts);
            }
            _ => out.push(x.clone()),
        }
    }
    out
}

fn hi(x: Option<u64>, open: u64) -> u64 {
    x.unwrap_or(open)
}

/// vLLM #48944: `{"speculative_token_schedule": [[bs_lo, bs_hi, ctx_lo, ctx_hi, K], …]}`;
/// the context axis starts at 0 (the RFC's 3-tuples mean ctx 0 to max_model_len) and ends at
/// the server's maximum context when recorded.
pub fn vllm_48944(b: &[Bucket], max_context: Option<u64>) -> Value {
    let ctx_end = max_context.unwrap_or(OPEN_END);
    let rows: Vec<Value> = b
        .iter()
        .map(|x| {
            let lo = if x.ctx_lo == 1 { 0 } else { x.ctx_lo };
            json!([
                x.batch_lo,
                hi(x.batch_hi.map(u64::from), OPEN_END),
                lo,
                hi(x.ctx_hi, ctx_end),
                x.k
            ])
        })
        .collect();
    json!({ "speculative_token_schedule": rows })
}

/// vLLM #54801: `{"num_speculative_tokens_per_seq_len": [[lo, hi, K], …]}` for the rows of
/// one batch range (the proposal keys on length alone).
pub fn vllm_54801(b: &[Bucket], batch_lo: u32, max_context: Option<u64>) -> Value {
    let ctx_end = max_context.unwrap_or(OPEN_END);
    let rows: Vec<Value> = b
        .iter()
        .filter(|x| x.batch_lo == batch_lo)
        .map(|x| json!([x.ctx_lo, hi(x.ctx_hi, ctx_end), x.k]))
        .collect();
    json!({ "num_speculative_tokens_per_seq_len": rows })
}

/// SGLang #31716: per batch range, `ctx_buckets` `{"lo-hi": {"candidate_steps": [K]}}`, the
/// last bucket `"lo-inf"`.
pub fn sglang_31716(b: &[Bucket]) -> Value {
    let mut out = serde_json::Map::new();
    for x in b {
        let key = x.batch_lo.to_string();
        let entry = out
            .entry(key)
            .or_insert_with(|| json!({ "ctx_buckets": {} }));
        let range = match x.ctx_hi {
            Some(h) => format!("{}-{h}", x.ctx_lo),
            None => format!("{}-inf", x.ctx_lo),
        };
        entry["ctx_buckets"][range] = json!({ "candidate_steps": [x.k] });
    }
    Value::Object(out)
}

/// Whether every batch range has the same length schedule (then #54801 loses nothing).
fn same_for_every_batch(b: &[Bucket]) -> bool {
    let rows = |lo: u32| -> Vec<(u64, Option<u64>, u32)> {
        b.iter()
            .filter(|x| x.batch_lo == lo)
            .map(|x| (x.ctx_lo, x.ctx_hi, x.k))
            .collect()
    };
    let first = b.first().map(|x| rows(x.batch_lo)).unwrap_or_default();
    b.iter().all(|x| rows(x.batch_lo) == first)
}

/// The whole schedule as one JSON document: the measurements, the neutral schedule, and
/// each dialect with what it follows.
pub fn json_document(s: &KSchedule) -> Value {
    let schedule = buckets(s);
    let first_batch = schedule.first().map_or(1, |x| x.batch_lo);
    let b = dialect_rows(&schedule);
    json!({
        "measured": s,
        "schedule": schedule,
        "dialects": {
            "vllm_48944": { "follows": VLLM_48944, "config": vllm_48944(&b, s.max_context) },
            "vllm_54801": {
                "follows": VLLM_54801,
                "batch_from": first_batch,
                "same_for_every_batch": same_for_every_batch(&b),
                "config": vllm_54801(&b, first_batch, s.max_context)
            },
            "sglang_31716": { "follows": SGLANG_31716, "config": sglang_31716(&b) },
        }
    })
}

fn range(lo: u64, hi: Option<u64>) -> String {
    match hi {
        Some(h) => format!("{}–{}", fmt_ctx(lo), fmt_ctx(h)),
        None => format!("{} and up", fmt_ctx(lo)),
    }
}

fn measurements_md(s: &KSchedule, out: &mut String) {
    let head: Vec<String> = s.ks.iter().map(|k| format!("K={k} ms/tok")).collect();
    let gains: Vec<String> =
        s.ks.iter()
            .filter(|k| **k > 0)
            .map(|k| format!("K={k} vs plain"))
            .collect();
    out.push_str(&format!(
        "| batch | context | {} | {} | K* | deploy |\n|---|---|{}{}---|---|\n",
        head.join(" | "),
        gains.join(" | "),
        "---|".repeat(head.len()),
        "---|".repeat(gains.len())
    ));
    for c in &s.cells {
        let ms: Vec<String> =
            c.ks.iter()
                .map(|k| {
                    k.ms_per_token
                        .map_or("–".into(), |v| format!("{v:.2} (n={})", k.n))
                })
                .collect();
        let g: Vec<String> =
            c.ks.iter()
                .filter(|k| k.k > 0)
                .map(|k| match (k.speedup, k.speedup_interval) {
                    (Some(x), Some(i)) => format!(
                        "{x:.2}× ({:.2}–{:.2}){}",
                        i.low,
                        i.high,
                        if k.pays { " pays" } else { "" }
                    ),
                    (Some(x), None) => format!("{x:.2}× (too few)"),
                    _ => "–".into(),
                })
                .collect();
        let star = match (c.k_star, c.undecided.as_slice()) {
            (Some(k), _) => k.to_string(),
            (None, []) => "–".into(),
            (None, _) if c.too_few => "too few".into(),
            (None, u) => format!(
                "undecided: {}",
                u.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {star} | {} |\n",
            c.batch,
            fmt_ctx(c.context_tokens),
            ms.join(" | "),
            g.join(" | "),
            c.deploy
        ));
    }
}

/// The schedule in Markdown: the measurements, K* per cell, where speculation still pays,
/// the neutral schedule and the three dialects.
pub fn markdown(s: &KSchedule) -> String {
    let mut out = String::from("# Speculation schedule\n\n");
    out.push_str(&format!(
        "Measured: K = {} × lengths {} × batch {}; intervals at {:.0}%. K = 0 is the server without speculation.\n\n",
        s.ks.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
        s.contexts.iter().map(|&c| fmt_ctx(c)).collect::<Vec<_>>().join(", "),
        s.batches.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
        s.level * 100.0
    ));
    out.push_str("## Decode per (K, length, batch)\n\n");
    measurements_md(s, &mut out);
    out.push('\n');
    for c in &s.cells {
        out.push_str(&format!("- {}\n", c.sentence));
    }
    out.push_str("\n## Where speculation still pays\n\n");
    for (b, l) in &s.last_paying {
        let short: Vec<String> = s
            .cells
            .iter()
            .filter(|c| c.batch == *b && c.too_few)
            .map(|c| fmt_ctx(c.context_tokens))
            .collect();
        let unknown = match short.as_slice() {
            [] => String::new(),
            _ => format!("; too few measurements to tell at {}", short.join(", ")),
        };
        out.push_str(&match l {
            Some(l) => format!("- batch {b}: some K > 0 pays up to {} (the longest measured length where one does){unknown}\n", fmt_ctx(*l)),
            None if short.len() == s.contexts.len() => format!("- batch {b}: not known: too few measurements at every length\n"),
            None => format!("- batch {b}: no K > 0 pays at any measured length{unknown}\n"),
        });
    }
    for n in &s.notes {
        out.push_str(&format!("- note: {n}\n"));
    }
    let b = buckets(s);
    out.push_str("\n## The schedule to deploy\n\nEach row is carried from the lengths measured in it (the first row down to 1, the last up to any length); K changes only at a measured length or batch.\n\n| batch | context | K | measured at | |\n|---|---|---|---|---|\n");
    for x in &b {
        let batch = match x.batch_hi {
            Some(h) if h == x.batch_lo => h.to_string(),
            Some(h) => format!("{}–{h}", x.batch_lo),
            None => format!("{} and up", x.batch_lo),
        };
        out.push_str(&format!(
            "| {batch} | {} | {} | batch {}, {} | {} |\n",
            range(x.ctx_lo, x.ctx_hi),
            x.k,
            x.measured_batch,
            x.measured_contexts
                .iter()
                .map(|&c| fmt_ctx(c))
                .collect::<Vec<_>>()
                .join(", "),
            if x.too_few {
                "too few measurements: K = 0 kept, not a finding"
            } else if x.undecided {
                "undecided (the rule's choice)"
            } else {
                ""
            }
        ));
    }
    let doc = json_document(s);
    out.push_str("\n## In each proposal's dialect\n\nNone of these is merged: each follows the proposal named, which may still change. An open upper end is written 2147483647 where the dialect needs an integer; the context axis ends at the server's maximum context where the results recorded it.\n");
    for (key, title) in [
        ("vllm_48944", "vLLM #48944"),
        ("vllm_54801", "vLLM #54801"),
        ("sglang_31716", "SGLang #31716"),
    ] {
        let d = &doc["dialects"][key];
        out.push_str(&format!(
            "\n### {title}\n\nFollows {}.\n",
            d["follows"].as_str().unwrap_or_default()
        ));
        if key == "vllm_54801" && d["same_for_every_batch"] == json!(false) {
            out.push_str(&format!(
                "The schedule differs by batch and this proposal has no batch axis: this is the row of batch {} and up to the next measured batch.\n",
                d["batch_from"]
            ));
        }
        out.push_str(&format!(
            "\n```json\n{}\n```\n",
            serde_json::to_string(&d["config"]).unwrap_or_default()
        ));
    }
    out
}

/// The schedule is built from the results files of a K campaign, not from a report model.
pub struct ScheduleRenderer;

impl crate::format::Renderer for ScheduleRenderer {
    fn report(
        &self,
        _: &ctxbench_stats::report::Report,
    ) -> Result<String, crate::format::RenderError> {
        Err(crate::format::RenderError::Unsupported(
            "--format schedule is written from the results files of a campaign over K (ctxbench report DIR/*.jsonl --format schedule)".into(),
        ))
    }
    fn compare(
        &self,
        _: &ctxbench_stats::compare::Comparison,
    ) -> Result<String, crate::format::RenderError> {
        Err(crate::format::RenderError::Unsupported(
            "--format schedule: use it with ctxbench report on the results files of a campaign over K".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(b: (u32, Option<u32>), c: (u64, Option<u64>), k: u32) -> Bucket {
        Bucket {
            batch_lo: b.0,
            batch_hi: b.1,
            ctx_lo: c.0,
            ctx_hi: c.1,
            k,
            measured_batch: b.0,
            measured_contexts: vec![c.0.max(512)],
            undecided: false,
            too_few: false,
        }
    }

    fn sample() -> Vec<Bucket> {
        vec![
            bucket((1, Some(3)), (1, Some(16383)), 4),
            bucket((1, Some(3)), (16384, None), 0),
            bucket((4, None), (1, Some(4095)), 2),
            bucket((4, None), (4096, None), 0),
        ]
    }

    #[test]
    fn dialects_merge_rows_of_one_k_the_neutral_schedule_keeps_apart() {
        // As measured on the real pair (docs/speculation.md): batch 1 K = 0 decided at both
        // lengths; batch 2 K = 0 undecided at 512 and short of samples at 1536. Every K is
        // 0: the dialects must say so in one row per batch and not claim a batch difference.
        let mut b = vec![
            bucket((1, Some(1)), (1, None), 0),
            bucket((2, None), (1, Some(1535)), 0),
            bucket((2, None), (1536, None), 0),
        ];
        b[1].undecided = true;
        (b[2].undecided, b[2].too_few) = (true, true);
        let rows = dialect_rows(&b);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[1].ctx_lo, rows[1].ctx_hi), (1, None));
        assert!(same_for_every_batch(&rows));
        assert_eq!(
            vllm_48944(&rows, Some(4096)),
            json!({"speculative_token_schedule": [[1, 1, 0, 4096, 0], [2, OPEN_END, 0, 4096, 0]]})
        );
        assert_eq!(
            sglang_31716(&rows)["2"],
            json!({"ctx_buckets": {"1-inf": {"candidate_steps": [0]}}})
        );
    }

    #[test]
    fn vllm_48944_writes_5_tuples_covering_batch_from_1_and_context_from_0() {
        let v = vllm_48944(&sample(), Some(131072));
        let rows: Vec<Vec<u64>> = v["speculative_token_schedule"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            [
                [1, 3, 0, 16383, 4],
                [1, 3, 16384, 131072, 0],
                [4, OPEN_END, 0, 4095, 2],
                [4, OPEN_END, 4096, 131072, 0],
            ]
        );
        // Per batch range, the context ranges tile [0, max] with no gap or overlap.
        for bs in [1, 4] {
            let mut next = 0;
            for r in rows.iter().filter(|r| r[0] == bs) {
                assert_eq!(r[2], next);
                next = r[3] + 1;
            }
            assert_eq!(next, 131073);
        }
    }

    #[test]
    fn vllm_54801_has_one_length_list_and_sglang_buckets_cover_1_to_inf() {
        let v = vllm_54801(&sample(), 1, None);
        assert_eq!(
            v,
            json!({"num_speculative_tokens_per_seq_len": [[1, 16383, 4], [16384, OPEN_END, 0]]})
        );
        let s = sglang_31716(&sample());
        assert_eq!(
            s,
            json!({
                "1": {"ctx_buckets": {"1-16383": {"candidate_steps": [4]}, "16384-inf": {"candidate_steps": [0]}}},
                "4": {"ctx_buckets": {"1-4095": {"candidate_steps": [2]}, "4096-inf": {"candidate_steps": [0]}}}
            })
        );
        // Coverage of [1, inf) per batch entry: ranges chain from 1 and end in inf.
        for entry in s.as_object().unwrap().values() {
            let mut keys: Vec<(u64, String)> = entry["ctx_buckets"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| {
                    let (lo, hi) = k.split_once('-').unwrap();
                    (lo.parse().unwrap(), hi.to_owned())
                })
                .collect();
            keys.sort();
            let mut next = 1;
            for (lo, hi) in &keys {
                assert_eq!(*lo, next);
                next = hi.parse::<u64>().map_or(u64::MAX, |h| h + 1);
            }
            assert_eq!(next, u64::MAX, "the last bucket is open: {keys:?}");
        }
        assert!(!same_for_every_batch(&sample()));
    }
}
