//! `ctxbench compare` on two replay runs (two router policies, two servers on the same
//! `--prompt-seed`): per input-length bucket and per uncached-tokens bucket, each side's
//! TTFT p50 and p90 with their order-statistic intervals (only where the bucket has the
//! samples an interval needs, [`crate::stats::tail`]), B/A with the same interval and
//! verdict as the cold cells ([`crate::stats::significance::compare_cell`]), and the proven
//! reuse ratio of each side overall, by turn depth and by input length. Refuses two replays
//! that did not send the same trace with the same prompts, saying what differs. Pure.

use serde::Serialize;

use super::loaded::Loaded;
use crate::replay_report::{self, ReplayReport, ReuseRow};
use crate::stats::metric::Metric;
use crate::stats::significance::{self, RatioInterval, Settings, Verdict};
use crate::stats::tail::{self, Tail, CONFIDENCE};
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record::replay::ReplayConfig;
use ctxbench_schema::record::{Results, Sample, Status};

/// B against A, two replays of the same trace.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayComparison {
    /// Side A's name.
    pub a: String,
    /// Side B's name.
    pub b: String,
    /// The trace both replayed.
    pub trace: String,
    /// The salt both drew their prompts from.
    pub salt: u64,
    /// Confidence of the intervals.
    pub level: f64,
    /// The noise band (a change within it is never called).
    pub noise: f64,
    /// TTFT per input-length bucket.
    pub by_input: Vec<TtftRow>,
    /// TTFT per uncached-tokens bucket (prompt − cached, each side its own).
    pub by_uncached: Vec<TtftRow>,
    /// Proven reuse side by side: overall, then by turn depth, then by input length.
    pub reuse: Vec<ReuseSide>,
    /// What differs between the two runs' configurations and servers (the thing compared).
    pub differences: Vec<String>,
    /// What `--allow-mismatch` let through.
    pub mismatches: Vec<String>,
}

/// One side's quantile with its interval, or the n it needs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Side {
    /// Samples in the bucket.
    pub n: usize,
    /// The median and its interval (given from 6 samples at 95%).
    pub p50: Option<Tail>,
    /// The p90 and its interval (given from 29 samples at 95%).
    pub p90: Option<Tail>,
}

/// B/A of TTFT in one bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TtftRow {
    /// The bucket (`1k–2k`).
    pub label: String,
    /// A's TTFTs.
    pub a: Side,
    /// B's TTFTs.
    pub b: Side,
    /// B/A of the geometric means.
    pub ratio: Option<f64>,
    /// Its interval; `None` with too few samples.
    pub interval: Option<RatioInterval>,
    /// What it means.
    pub verdict: Verdict,
}

/// A group's proven reuse on each side.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReuseSide {
    /// The group (`all`, `turn 2–3`, `4k–8k`).
    pub label: String,
    /// A's row (`None`: A had no request in it).
    pub a: Option<ReuseRow>,
    /// B's row.
    pub b: Option<ReuseRow>,
}

/// Whether either side is a replay (then both must be, and this comparison applies).
pub fn any_replay(sides: &[Vec<Loaded>]) -> bool {
    sides
        .iter()
        .flatten()
        .any(|(_, _, r)| replay_report::is_replay(r))
}

/// Why two replays did not send the same requests with the same prompts; empty when they
/// did. The trace's path may differ (another machine), its content may not.
pub fn mismatches(a: &Results, b: &Results) -> Vec<String> {
    let (Some(x), Some(y)) = (&a.header.config.replay, &b.header.config.replay) else {
        return vec!["one run is a replay and the other a sweep".into()];
    };
    let mut out = Vec::new();
    // Each field as both runs' words: the same function of each side's configuration.
    type Words = fn(&ReplayConfig) -> String;
    let fields: [(&str, Words); 10] = [
        ("trace format", |c| c.format.clone()),
        ("requests in the trace", |c| c.requests.to_string()),
        ("requests planned", |c| c.planned.to_string()),
        ("sessions", |c| c.sessions.to_string()),
        ("prompt tokens of the plan", |c| c.input_tokens.to_string()),
        ("the trace's ideal reuse (tokens)", |c| {
            c.ideal_reuse_tokens.to_string()
        }),
        ("block size", |c| c.block_tokens.to_string()),
        ("--scale", |c| format!("{:?}", c.scale)),
        ("timing", |c| {
            format!("{} at {}×", c.timing.as_str(), c.speed)
        }),
        ("--max-gap", |c| format!("{:?}", c.max_gap_s)),
    ];
    for (what, words) in fields {
        let (p, q) = (words(x), words(y));
        if p != q {
            out.push(format!("{what} differs: {p} vs {q}"));
        }
    }
    if x.salt != y.salt {
        out.push(format!(
            "prompt salt differs: {} vs {} (the same trace with other tokens; rerun one side with --prompt-seed {})",
            x.salt, y.salt, x.salt
        ));
    }
    let (ca, cb) = (&a.header.config.corpus, &b.header.config.corpus);
    if ca != cb {
        out.push(format!("corpus differs: {} vs {}", ca.label(), cb.label()));
    }
    out
}

/// The TTFTs of one side's answered, clean requests, keyed by `key`.
fn ttfts(r: &Results, key: &dyn Fn(&Sample) -> Option<u64>) -> Vec<(u64, f64)> {
    // A resumed request may appear twice: its last line counts, as in the report.
    let mut last = std::collections::BTreeMap::new();
    for s in &r.samples {
        if let Some(i) = s.replay.as_ref().map(|x| x.index) {
            last.insert(i, s);
        }
    }
    last.into_values()
        .filter(|s| s.status == Status::Ok && s.clean())
        .filter_map(|s| Some((key(s)?, s.ttft_ms?)))
        .collect()
}

fn side(v: &[f64]) -> Side {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let at = |q, name| (!v.is_empty()).then(|| tail::tail(&v, q, name, CONFIDENCE));
    Side {
        n: v.len(),
        p50: at(0.5, "p50"),
        p90: at(0.9, "p90"),
    }
}

fn rows(a: &[(u64, f64)], b: &[(u64, f64)], s: &Settings) -> Vec<TtftRow> {
    let (ba, bb) = (replay_report::bucketed(a), replay_report::bucketed(b));
    let mut keys: Vec<u64> = ba.keys().chain(bb.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let empty = (String::new(), Vec::new());
            let (la, va) = ba.get(&k).unwrap_or(&empty);
            let (lb, vb) = bb.get(&k).unwrap_or(&empty);
            let cell = significance::compare_cell(
                Metric::TtftMs,
                std::slice::from_ref(va),
                std::slice::from_ref(vb),
                s,
            );
            TtftRow {
                label: if la.is_empty() {
                    lb.clone()
                } else {
                    la.clone()
                },
                a: side(va),
                b: side(vb),
                ratio: cell.ratio,
                interval: cell.interval,
                verdict: cell.verdict,
            }
        })
        .collect()
}

/// The reuse rows of both reports, side by side by label, in A's order then B's.
fn reuse(a: &ReplayReport, b: &ReplayReport) -> Vec<ReuseSide> {
    let groups = |r: &ReplayReport| -> Vec<ReuseRow> {
        std::iter::once(r.overall.clone())
            .chain(r.by_turn.iter().cloned())
            .chain(r.by_input.iter().map(|x| ReuseRow {
                label: format!("{} tokens", x.label),
                ..x.clone()
            }))
            .collect()
    };
    let (ga, gb) = (groups(a), groups(b));
    let mut out: Vec<ReuseSide> = ga
        .iter()
        .map(|x| ReuseSide {
            label: x.label.clone(),
            a: Some(x.clone()),
            b: gb.iter().find(|y| y.label == x.label).cloned(),
        })
        .collect();
    out.extend(
        gb.iter()
            .filter(|y| ga.iter().all(|x| x.label != y.label))
            .map(|y| ReuseSide {
                label: y.label.clone(),
                a: None,
                b: Some(y.clone()),
            }),
    );
    out
}

/// B against A, one replay each; refuses runs that did not replay the same trace with the
/// same prompts unless `allow_mismatch`, and several runs per side (not yet pooled).
pub fn compare(
    sides: &[Vec<Loaded>],
    allow_mismatch: bool,
    s: &Settings,
) -> Result<ReplayComparison, UsageError> {
    fn one(g: &[Loaded]) -> Option<&Loaded> {
        match g {
            [x] => Some(x),
            _ => None,
        }
    }
    let (Some((la, _, ra)), Some((lb, _, rb)), 2) = (
        sides.first().and_then(|g| one(g)),
        sides.get(1).and_then(|g| one(g)),
        sides.len(),
    ) else {
        return Err(UsageError::Invalid(
            "compare on replays takes exactly two results files, one replay each (A and B)".into(),
        ));
    };
    let mism = mismatches(ra, rb);
    let both = replay_report::is_replay(ra) && replay_report::is_replay(rb);
    if !mism.is_empty() && (!allow_mismatch || !both) {
        let hint = match both {
            true => "\n(--allow-mismatch compares them anyway)",
            false => "",
        };
        return Err(UsageError::Invalid(format!(
            "refusing to compare {la} with {lb}: they did not replay the same trace with the same prompts:\n  {}{hint}",
            mism.join("\n  ")
        )));
    }
    let (Some(rep_a), Some(rep_b)) = (replay_report::build(ra), replay_report::build(rb)) else {
        return Err(UsageError::Invalid(
            "compare on replays: a side is not a replay".into(),
        ));
    };
    let input = |s: &Sample| Some(s.prompt_tokens.unwrap_or(s.context_tokens));
    let uncached = |s: &Sample| Some(s.prompt_tokens?.saturating_sub(s.cached_tokens?));
    Ok(ReplayComparison {
        a: la.clone(),
        b: lb.clone(),
        trace: rep_a.config.trace.clone(),
        salt: rep_a.config.salt,
        level: s.level,
        noise: s.noise,
        by_input: rows(&ttfts(ra, &input), &ttfts(rb, &input), s),
        by_uncached: rows(&ttfts(ra, &uncached), &ttfts(rb, &uncached), s),
        reuse: reuse(&rep_a, &rep_b),
        differences: super::differences(ra, rb),
        mismatches: mism,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::replay::{ReplayConfig, ReplayInfo};
    use ctxbench_schema::record::Flag;

    /// A replay of 40 requests of 1500 tokens, the odd ones reusing 1024 of them; `slow`
    /// multiplies the TTFTs, `hit` says whether the reuse was proven.
    fn run(salt: u64, slow: f64, hit: bool) -> Loaded {
        let mut r: Results = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.header.config.replay = Some(ReplayConfig {
            trace: "t.jsonl".into(),
            format: "Mooncake / timed-trace JSONL".into(),
            requests: 40,
            planned: 40,
            sessions: 20,
            block_tokens: 512,
            salt,
            speed: 1.0,
            input_tokens: 40 * 1500,
            ideal_reuse_tokens: 20 * 1024,
            ..Default::default()
        });
        r.samples = (0..40u64)
            .map(|i| {
                let shared = if i % 2 == 1 { 1024 } else { 0 };
                let cached = if hit { shared } else { 0 };
                let mut s = Sample {
                    status: Status::Ok,
                    prompt_tokens: Some(1500),
                    cached_tokens: Some(cached),
                    ttft_ms: Some(slow * (100.0 + (i % 7) as f64)),
                    replay: Some(ReplayInfo {
                        index: i,
                        turn: (i % 2) as u32,
                        shared_prefix_tokens: shared,
                        expected_reuse: shared.saturating_sub(1),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                if shared > 0 && !hit {
                    s.flags.push(Flag::ReuseShort);
                }
                s
            })
            .collect();
        (format!("salt{salt}"), "x.jsonl".into(), r)
    }

    #[test]
    fn a_slower_side_without_reuse_is_called_slower_with_its_reuse_beside() {
        let (a, b) = (run(1, 1.0, true), run(1, 3.0, false));
        let c = compare(&[vec![a], vec![b]], false, &Settings::default()).unwrap();
        let row = &c.by_input[0];
        assert_eq!(row.label, "1k–2k");
        assert_eq!((row.a.n, row.b.n), (40, 40));
        assert_eq!(row.verdict, Verdict::Slower);
        assert!(row.ratio.is_some_and(|r| (r - 3.0).abs() < 1e-9), "{row:?}");
        // p50 from 6 samples, p90 from 29: both given with their intervals at n = 40.
        let p90 = row.a.p90.unwrap();
        assert!(p90.value.is_some() && p90.interval.is_some(), "{p90:?}");
        // Uncached: A's hits are one bucket (476 tokens), its misses and all of B another.
        assert_eq!(c.by_uncached.len(), 2, "{:?}", c.by_uncached);
        assert_eq!(c.by_uncached[0].b.n, 0);
        assert_eq!(c.by_uncached[0].verdict, Verdict::TooFewSamples);
        let all = &c.reuse[0];
        assert_eq!(all.label, "all");
        assert_eq!(all.a.as_ref().unwrap().proven_tokens, 20 * 1024);
        assert_eq!(all.b.as_ref().unwrap().proven_tokens, 0);
        assert_eq!(all.b.as_ref().unwrap().short, 20);
    }

    #[test]
    fn replays_of_other_prompts_or_another_trace_are_refused_saying_what_differs() {
        let (a, b) = (run(1, 1.0, true), run(2, 1.0, true));
        let e = compare(
            &[vec![a.clone()], vec![b.clone()]],
            false,
            &Settings::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("prompt salt differs: 1 vs 2"), "{e}");
        assert!(e.contains("--prompt-seed 1"), "{e}");
        let ok = compare(&[vec![a.clone()], vec![b]], true, &Settings::default()).unwrap();
        assert_eq!(ok.mismatches.len(), 1);
        let mut c = run(1, 1.0, true);
        if let Some(x) = c.2.header.config.replay.as_mut() {
            x.planned = 39;
        }
        let e = compare(&[vec![a.clone()], vec![c]], false, &Settings::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("requests planned differs: 40 vs 39"), "{e}");
        let mut sweep = run(1, 1.0, true);
        sweep.2.header.config.replay = None;
        let e = compare(&[vec![a], vec![sweep]], true, &Settings::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("one run is a replay and the other a sweep"),
            "{e}"
        );
    }
}
