//! The replay report's model, from the results file alone: ideal vs proven reuse overall, by
//! turn depth, by input length and by worker; the prefill tokens and server seconds the cache
//! saved; TTFT by input length and by uncached tokens (each quantile only where the bucket
//! has the samples its distribution-free interval needs, the rule of [`crate::stats::tail`]
//! that `ctxbench compare` of replays follows too); goodput under an SLO; how late the client sent; wall time over
//! the trace's span. Pure: no I/O.

use std::collections::BTreeMap;

use serde::Serialize;

use ctxbench_schema::record::replay::ReplayConfig;
use ctxbench_schema::record::{Flag, Results, Sample, Status};

use crate::stats::tail;

/// Reuse of a group of requests.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReuseRow {
    /// What the group is (`all`, `turn 2–3`, `4k–8k`, a worker).
    pub label: String,
    /// Requests answered.
    pub requests: u64,
    /// Their prompt tokens (the server's count where it gave one).
    pub input_tokens: u64,
    /// Tokens their leading blocks shared with requests answered before (the run's ideal).
    pub shared_tokens: u64,
    /// Tokens the server said it reused, each request counted up to its shared prefix.
    pub proven_tokens: u64,
    /// Requests flagged `reuse_short`.
    pub short: u64,
    /// Requests flagged `reuse_unverified`.
    pub unverified: u64,
}

impl ReuseRow {
    fn add(&mut self, s: &Sample) {
        let Some(r) = &s.replay else { return };
        self.requests += 1;
        self.input_tokens += s.prompt_tokens.unwrap_or(r.input_tokens);
        self.shared_tokens += r.shared_prefix_tokens;
        self.proven_tokens += s.cached_tokens.unwrap_or(0).min(r.shared_prefix_tokens);
        self.short += u64::from(s.has(&Flag::ReuseShort));
        self.unverified += u64::from(s.has(&Flag::ReuseUnverified));
    }

    /// Shared over input tokens.
    pub fn ideal_ratio(&self) -> Option<f64> {
        (self.input_tokens > 0).then(|| self.shared_tokens as f64 / self.input_tokens as f64)
    }

    /// Proven reuse over input tokens.
    pub fn proven_ratio(&self) -> Option<f64> {
        (self.input_tokens > 0).then(|| self.proven_tokens as f64 / self.input_tokens as f64)
    }
}

/// A quantile, or why it is not given.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Quantile {
    /// The value, ms.
    Value(f64),
    /// The bucket has fewer samples than this quantile's interval needs (`n < need`).
    TooFew {
        /// Samples in the bucket.
        n: usize,
        /// Samples the quantile needs ([`tail::n_needed`] at [`tail::CONFIDENCE`]).
        need: usize,
    },
}

/// TTFT of a bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TtftRow {
    /// The bucket (`1k–2k` tokens).
    pub label: String,
    /// Requests with a TTFT.
    pub n: usize,
    /// p50, p90, p99.
    pub p50: Quantile,
    /// p90.
    pub p90: Quantile,
    /// p99.
    pub p99: Quantile,
}

/// A shortfall's cause and how many requests it named.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CauseRow {
    /// `eviction`, `other_worker`, `boundary`, `idle`, or `unnamed`.
    pub cause: String,
    /// Requests.
    pub requests: u64,
    /// Their shortfall, tokens.
    pub shortfall_tokens: u64,
    /// One request's evidence, as an example.
    pub example: String,
}

/// Goodput under an SLO.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Goodput {
    /// The TTFT goal, ms.
    pub ttft_ms: Option<f64>,
    /// The time-per-output-token goal, ms.
    pub tpot_ms: Option<f64>,
    /// Requests that met every goal.
    pub met: u64,
    /// Requests answered.
    pub of: u64,
    /// Requests meeting the SLO per second of replay.
    pub per_s: Option<f64>,
}

/// Decode rate of a bucket of contexts.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DecodeRow {
    /// The bucket (`1k–2k` prompt tokens).
    pub label: String,
    /// Requests with a decode rate (two or more tokens generated, not overlapped).
    pub n: usize,
    /// Median decode rate, tokens/s.
    pub median_tokens_per_s: f64,
    /// Slowest and fastest, tokens/s.
    pub min_tokens_per_s: f64,
    /// See `min_tokens_per_s`.
    pub max_tokens_per_s: f64,
}

/// How a request's reuse was judged, as the HTML plots colour it.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Proof {
    /// The server's cached count reached what the trace lets it reuse.
    Hit,
    /// Flagged `reuse_short`: it reused less.
    Short,
    /// Flagged `reuse_unverified`: the server gave no cached count.
    Unverified,
    /// Nothing of it was shared with requests answered before (a first turn).
    Cold,
}

impl Proof {
    /// The name in legends.
    pub fn label(self) -> &'static str {
        match self {
            Proof::Hit => "proven hit",
            Proof::Short => "reuse_short",
            Proof::Unverified => "reuse_unverified",
            Proof::Cold => "nothing to reuse",
        }
    }

    fn of(s: &Sample, shared: u64) -> Proof {
        if s.has(&Flag::ReuseShort) {
            Proof::Short
        } else if s.has(&Flag::ReuseUnverified) {
            Proof::Unverified
        } else if shared == 0 {
            Proof::Cold
        } else {
            Proof::Hit
        }
    }
}

/// One answered request, as the HTML plots draw it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RequestPoint {
    /// Its session (`-` where the trace has none).
    pub session: String,
    /// Its index in the trace.
    pub index: u64,
    /// When it was sent, s after the replay started.
    pub sent_s: f64,
    /// Its TTFT, ms (`None`: overlapped or not measured).
    pub ttft_ms: Option<f64>,
    /// Prompt tokens the cache did not serve (`None` without a cached count).
    pub uncached_tokens: Option<u64>,
    /// Its proof.
    pub proof: Proof,
}

/// The whole replay report of one run.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The replay's plan as recorded.
    pub config: ReplayConfig,
    /// Requests recorded, and of them failed.
    pub recorded: u64,
    /// Failed requests.
    pub failed: u64,
    /// The trace's ideal reuse ratio (every earlier request's blocks cached forever).
    pub trace_ideal_ratio: Option<f64>,
    /// Reuse overall.
    pub overall: ReuseRow,
    /// By turn depth.
    pub by_turn: Vec<ReuseRow>,
    /// By input length.
    pub by_input: Vec<ReuseRow>,
    /// By worker (behind a router; empty otherwise).
    pub by_worker: Vec<ReuseRow>,
    /// The causes of the shortfalls.
    pub causes: Vec<CauseRow>,
    /// The first requests (nothing shared yet) whose cached counts prove a cold start:
    /// how many, and the largest cached count among them.
    pub cold_start: (u64, u64),
    /// Prefill tokens the cache saved (proven reuse).
    pub saved_tokens: u64,
    /// Server seconds those would have cost at the run's own cold prefill rate (median
    /// tokens per server prompt second of requests that reused nothing).
    pub saved_server_s: Option<f64>,
    /// TTFT by input length.
    pub ttft_by_input: Vec<TtftRow>,
    /// TTFT by uncached tokens (prompt − cached).
    pub ttft_by_uncached: Vec<TtftRow>,
    /// Decode rate by input length (the context each request decoded at).
    pub decode_by_input: Vec<DecodeRow>,
    /// Goodput under the SLO, when one was given.
    pub goodput: Option<Goodput>,
    /// Lateness p50, p99 and max, ms.
    pub lateness_ms: Option<(f64, f64, f64)>,
    /// The last request's send and due instants, s after the start: their ratio is wall
    /// over trace span (1.00: the client kept the trace's pace).
    pub last_sent_s: f64,
    /// See `last_sent_s`.
    pub last_due_s: f64,
    /// Every answered request, in trace order, for the HTML plots (not in the JSON report:
    /// the results file holds them).
    #[serde(skip)]
    pub points: Vec<RequestPoint>,
}

/// The `q` quantile (0 < q < 1) of sorted values, given where its distribution-free
/// interval exists ([`tail::tail`], p50: 6, p90: 29, p99: 299 samples at 95%), else the n it
/// needs: the rule `ctxbench compare` of two replays shows its quantiles by.
pub fn quantile(sorted: &[f64], q: f64) -> Quantile {
    let t = tail::tail(sorted, q, "", tail::CONFIDENCE);
    match t.value {
        Some(v) => Quantile::Value(v),
        None => Quantile::TooFew {
            n: t.n,
            need: t.needed,
        },
    }
}

/// A power-of-two bucket of tokens: `[lo, 2·lo)`, labelled.
pub fn bucket(tokens: u64) -> (u64, String) {
    if tokens < 1024 {
        return (0, "<1k".to_owned());
    }
    let lo = 1u64 << (63 - tokens.leading_zeros());
    let k = |t: u64| match t >= 1024 {
        true => format!("{}k", t / 1024),
        false => t.to_string(),
    };
    (lo, format!("{}–{}", k(lo), k(lo * 2)))
}

/// Turn depth buckets: 0, 1, 2–3, 4–7, …
fn turn_bucket(turn: u32) -> (u32, String) {
    if turn < 2 {
        return (turn, format!("turn {turn}"));
    }
    let lo = 1u32 << (31 - turn.leading_zeros());
    (lo, format!("turn {}–{}", lo, lo * 2 - 1))
}

fn decode_rows(v: Vec<(u64, f64)>) -> Vec<DecodeRow> {
    let mut by: BTreeMap<u64, (String, Vec<f64>)> = BTreeMap::new();
    for (tokens, r) in v.into_iter().filter(|x| x.1.is_finite() && x.1 > 0.0) {
        let (k, label) = bucket(tokens);
        by.entry(k).or_insert_with(|| (label, Vec::new())).1.push(r);
    }
    by.into_values()
        .filter_map(|(label, r)| {
            let s = crate::stats::Spread::of(r.iter().copied())?;
            Some(DecodeRow {
                label,
                n: r.len(),
                median_tokens_per_s: s.median,
                min_tokens_per_s: s.min,
                max_tokens_per_s: s.max,
            })
        })
        .collect()
}

/// The answered requests as the plots draw them.
fn points(ok: &[&Sample]) -> Vec<RequestPoint> {
    ok.iter()
        .filter_map(|s| {
            let r = s.replay.as_ref()?;
            Some(RequestPoint {
                session: r.session.clone().unwrap_or_else(|| "-".to_owned()),
                index: r.index,
                sent_s: r.sent_ms / 1000.0,
                ttft_ms: s.ttft_ms.filter(|_| s.clean()),
                uncached_tokens: s
                    .prompt_tokens
                    .zip(s.cached_tokens)
                    .map(|(p, c)| p.saturating_sub(c)),
                proof: Proof::of(s, r.shared_prefix_tokens),
            })
        })
        .collect()
}

/// Values keyed by tokens, gathered into their [`bucket`]s: each bucket's label and values,
/// in the order given.
pub fn bucketed(v: &[(u64, f64)]) -> BTreeMap<u64, (String, Vec<f64>)> {
    let mut by: BTreeMap<u64, (String, Vec<f64>)> = BTreeMap::new();
    for &(tokens, x) in v {
        let (k, label) = bucket(tokens);
        by.entry(k).or_insert_with(|| (label, Vec::new())).1.push(x);
    }
    by
}

fn ttft_rows(mut v: Vec<(u64, f64)>) -> Vec<TtftRow> {
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    bucketed(&v)
        .into_values()
        .map(|(label, t)| TtftRow {
            label,
            n: t.len(),
            p50: quantile(&t, 0.5),
            p90: quantile(&t, 0.9),
            p99: quantile(&t, 0.99),
        })
        .collect()
}

/// Whether a file is a replay run.
pub fn is_replay(r: &Results) -> bool {
    r.header.config.replay.is_some()
}

/// The replay report of a results file, `None` for a sweep's.
pub fn build(r: &Results) -> Option<ReplayReport> {
    let config = r.header.config.replay.clone()?;
    // A resumed request may appear twice (failed, then measured): the last line counts.
    let mut last: BTreeMap<u64, &Sample> = BTreeMap::new();
    for s in &r.samples {
        if let Some(i) = s.replay.as_ref().map(|x| x.index) {
            last.insert(i, s);
        }
    }
    let samples: Vec<&Sample> = last.into_values().collect();
    let ok: Vec<&Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.status == Status::Ok)
        .collect();
    let rows = |key: &dyn Fn(&Sample) -> Option<(u64, String)>| {
        let mut by: BTreeMap<u64, ReuseRow> = BTreeMap::new();
        for s in &ok {
            if let Some((k, label)) = key(s) {
                by.entry(k)
                    .or_insert_with(|| ReuseRow {
                        label,
                        ..Default::default()
                    })
                    .add(s);
            }
        }
        by.into_values().collect::<Vec<_>>()
    };
    let mut overall = ReuseRow {
        label: "all".into(),
        ..Default::default()
    };
    ok.iter().for_each(|s| overall.add(s));
    let by_turn = rows(&|s| {
        let (k, l) = turn_bucket(s.replay.as_ref()?.turn);
        Some((u64::from(k), l))
    });
    let by_input = rows(&|s| Some(bucket(s.prompt_tokens.unwrap_or(s.context_tokens))));
    let mut workers: Vec<String> = ok
        .iter()
        .filter_map(|s| s.replay.as_ref()?.worker.clone())
        .collect();
    workers.sort();
    workers.dedup();
    let by_worker = rows(&|s| {
        let w = s.replay.as_ref()?.worker.as_ref()?;
        let k = workers.iter().position(|x| x == w)? as u64;
        Some((k, w.clone()))
    });
    let timed: Vec<&Sample> = ok.iter().copied().filter(|s| s.clean()).collect();
    let ttft_by_input = ttft_rows(
        timed
            .iter()
            .filter_map(|s| Some((s.prompt_tokens.unwrap_or(s.context_tokens), s.ttft_ms?)))
            .collect(),
    );
    let ttft_by_uncached = ttft_rows(
        timed
            .iter()
            .filter_map(|s| {
                let p = s.prompt_tokens?;
                Some((p.saturating_sub(s.cached_tokens?), s.ttft_ms?))
            })
            .collect(),
    );
    let decode_by_input = decode_rows(
        timed
            .iter()
            .filter_map(|s| {
                Some((
                    s.prompt_tokens.unwrap_or(s.context_tokens),
                    s.decode_tokens_per_s?,
                ))
            })
            .collect(),
    );
    let mut late: Vec<f64> = samples
        .iter()
        .filter_map(|s| Some(s.replay.as_ref()?.lateness_ms))
        .collect();
    late.sort_by(f64::total_cmp);
    let max = late.last().copied().unwrap_or(0.0);
    let pick = |q: f64| match quantile(&late, q) {
        Quantile::Value(v) => v,
        // Fewer than the quantile needs: the largest seen.
        Quantile::TooFew { .. } => max,
    };
    let lateness_ms = (!late.is_empty()).then(|| (pick(0.5), pick(0.99), max));
    let (last_sent_s, last_due_s) = samples
        .iter()
        .filter_map(|s| s.replay.as_ref())
        .fold((0.0f64, 0.0f64), |(a, b), r| {
            (a.max(r.sent_ms / 1000.0), b.max(r.scheduled_ms / 1000.0))
        });
    let goodput = goodput(&config, &ok, last_sent_s);
    Some(ReplayReport {
        recorded: samples.len() as u64,
        failed: (samples.len() - ok.len()) as u64,
        trace_ideal_ratio: (config.input_tokens > 0)
            .then(|| config.ideal_reuse_tokens as f64 / config.input_tokens as f64),
        causes: causes(&ok),
        cold_start: cold_start(&ok),
        saved_tokens: overall.proven_tokens,
        saved_server_s: saved_server_s(&ok, overall.proven_tokens),
        config,
        overall,
        by_turn,
        by_input,
        by_worker,
        ttft_by_input,
        ttft_by_uncached,
        decode_by_input,
        goodput,
        lateness_ms,
        last_sent_s,
        last_due_s,
        points: points(&ok),
    })
}

fn causes(ok: &[&Sample]) -> Vec<CauseRow> {
    let mut by: BTreeMap<String, CauseRow> = BTreeMap::new();
    for s in ok.iter().filter(|s| s.has(&Flag::ReuseShort)) {
        let Some(r) = &s.replay else { continue };
        let name = r.cause.map_or("unnamed", |c| c.as_str()).to_owned();
        let row = by.entry(name.clone()).or_insert_with(|| CauseRow {
            cause: name,
            requests: 0,
            shortfall_tokens: 0,
            example: r.cause_evidence.clone().unwrap_or_default(),
        });
        row.requests += 1;
        row.shortfall_tokens += r.shortfall.unwrap_or(0);
    }
    by.into_values().collect()
}

/// Requests with nothing shared yet and a cached count: how many, and their largest count.
fn cold_start(ok: &[&Sample]) -> (u64, u64) {
    ok.iter()
        .filter(|s| {
            s.replay
                .as_ref()
                .is_some_and(|r| r.shared_prefix_tokens == 0)
        })
        .filter_map(|s| s.cached_tokens)
        .fold((0, 0), |(n, m), c| (n + 1, m.max(c)))
}

/// Server seconds the proven reuse saved, at the median cold prefill rate of this run.
fn saved_server_s(ok: &[&Sample], saved: u64) -> Option<f64> {
    let mut rates: Vec<f64> = ok
        .iter()
        .filter(|s| s.cached_tokens.is_some_and(|c| c <= 1))
        .filter_map(|s| {
            let t = s.server.as_ref()?;
            let (n, ms) = (t.prompt_n?, t.prompt_ms?);
            (ms > 0.0 && n > 0).then(|| n as f64 / (ms / 1000.0))
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    let median = *rates.get(rates.len() / 2)?;
    Some(saved as f64 / median)
}

fn goodput(c: &ReplayConfig, ok: &[&Sample], wall_s: f64) -> Option<Goodput> {
    if c.slo_ttft_ms.is_none() && c.slo_tpot_ms.is_none() {
        return None;
    }
    let meets = |s: &Sample| {
        let ttft = c
            .slo_ttft_ms
            .is_none_or(|g| s.ttft_ms.is_some_and(|t| t <= g));
        let tpot = c
            .slo_tpot_ms
            .is_none_or(|g| s.ms_per_step.is_some_and(|t| t <= g));
        ttft && tpot && s.clean()
    };
    let met = ok.iter().filter(|s| meets(s)).count() as u64;
    Some(Goodput {
        ttft_ms: c.slo_ttft_ms,
        tpot_ms: c.slo_tpot_ms,
        met,
        of: ok.len() as u64,
        per_s: (wall_s > 0.0).then(|| met as f64 / wall_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_is_given_only_with_the_samples_its_interval_needs() {
        // The counts of stats::tail, as `compare` of two replays uses: p50 6, p90 29, p99 299.
        let v: Vec<f64> = (1..=9).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Quantile::Value(5.0));
        assert_eq!(quantile(&v, 0.9), Quantile::TooFew { n: 9, need: 29 });
        assert_eq!(quantile(&v[..5], 0.5), Quantile::TooFew { n: 5, need: 6 });
        assert_eq!(quantile(&[], 0.5), Quantile::TooFew { n: 0, need: 6 });
        let w: Vec<f64> = (1..=299).map(f64::from).collect();
        assert_eq!(
            quantile(&w[..298], 0.99),
            Quantile::TooFew { n: 298, need: 299 }
        );
        // Given, it is the tail's own value (interpolated), not a nearest rank.
        for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
            for n in [5, 6, 28, 29, 58, 298, 299] {
                let t = tail::tail(&w[..n], q, name, tail::CONFIDENCE);
                let got = match quantile(&w[..n], q) {
                    Quantile::Value(v) => Some(v),
                    Quantile::TooFew { .. } => None,
                };
                assert_eq!(got, t.value, "{name} at n = {n}");
            }
        }
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket(900).1, "<1k");
        assert_eq!(bucket(1024).1, "1k–2k");
        assert_eq!(bucket(5000).1, "4k–8k");
        assert_eq!(turn_bucket(0).1, "turn 0");
        assert_eq!(turn_bucket(5).1, "turn 4–7");
    }
}
