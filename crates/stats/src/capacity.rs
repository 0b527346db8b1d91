//! The capacity map (context × concurrency): what a concurrent wave measured (the window
//! where all its requests decoded at once, who waited), what the server's limits predict
//! before measuring, and per context the knee. Pure: no I/O.

use std::collections::BTreeMap;

use ctxbench_schema::record::CapacityFlags;
use ctxbench_schema::record::{Flag, Phase, Sample, ServerInfo, Status, WaveStats};

/// Fewest decode steps every request must take inside the common window for a concurrent
/// rate to be reported: below that, two or three token gaps (scheduler jitter) are the rate.
pub const MIN_WINDOW_STEPS: u64 = 5;

/// Output tokens per request in a concurrency grid unless `--wave-output-tokens` says
/// otherwise: long enough that every request is still decoding when the last one starts.
pub const WAVE_OUTPUT_TOKENS: u32 = 128;

/// The knee rule: going from concurrency c to c' the ideal aggregate gain is c'/c; the
/// knee is the last c whose step up gains less than this share of the ideal extra
/// (for a doubling: < 1.5×), or the last c before requests start to wait.
pub const KNEE_SHARE: f64 = 0.5;

/// One request of a wave, as the clock saw it: times in ms after the wave's t0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestTimes {
    /// When the request was written.
    pub sent_ms: f64,
    /// Arrival of each token-carrying event (empty: the request failed or sent no token).
    pub token_ms: Vec<f64>,
}

/// The analysis of one wave: per request, its [`WaveStats`] and whether it waited.
pub fn analyse_wave(context: u64, reqs: &[RequestTimes]) -> Vec<WaveStats> {
    let first = |r: &RequestTimes| r.token_ms.first().copied();
    let last = |r: &RequestTimes| r.token_ms.last().copied();
    let firsts: Vec<f64> = reqs.iter().filter_map(first).collect();
    let lasts: Vec<f64> = reqs.iter().filter_map(last).collect();
    let all_decoded = firsts.len() == reqs.len() && !reqs.is_empty();
    let fmax = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let fmin = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    // The window where every request of the wave was decoding: none if one failed.
    let window =
        (all_decoded && fmin(&lasts) > fmax(&firsts)).then(|| (fmax(&firsts), fmin(&lasts)));
    let in_window: Vec<Option<(u64, Option<f64>)>> = reqs
        .iter()
        .map(|r| {
            let (ws, we) = window?;
            let inside: Vec<f64> = r
                .token_ms
                .iter()
                .copied()
                .filter(|t| *t >= ws && *t <= we)
                .collect();
            let n = inside.len() as u64;
            let rate = match (inside.first(), inside.last()) {
                (Some(a), Some(b)) if n > MIN_WINDOW_STEPS && b > a => {
                    Some((n - 1) as f64 / ((b - a) / 1000.0))
                }
                _ => None,
            };
            Some((n, rate))
        })
        .collect();
    let rates: Vec<f64> = in_window
        .iter()
        .filter_map(|x| x.and_then(|(_, r)| r))
        .collect();
    let aggregate = (rates.len() == reqs.len() && !rates.is_empty()).then(|| rates.iter().sum());
    let prefill = (all_decoded && fmax(&firsts) > 0.0)
        .then(|| reqs.len() as f64 * context as f64 / (fmax(&firsts) / 1000.0));
    let spread = (!firsts.is_empty()).then(|| fmax(&firsts) - fmin(&firsts));
    let events: usize = reqs.iter().map(|r| r.token_ms.len()).sum();
    let span = fmax(&lasts) - fmin(&firsts);
    let wave_rate = (!firsts.is_empty() && span > 0.0 && events > reqs.len())
        .then(|| (events - reqs.len()) as f64 / (span / 1000.0));
    reqs.iter()
        .enumerate()
        .map(|(i, r)| {
            // It waited when another request had already finished before its first token.
            let waited_for = first(r).and_then(|f| {
                reqs.iter()
                    .enumerate()
                    .filter(|(j, o)| *j != i && last(o).is_some_and(|l| l < f))
                    .min_by(|a, b| {
                        last(a.1)
                            .unwrap_or(0.0)
                            .total_cmp(&last(b.1).unwrap_or(0.0))
                    })
                    .map(|(j, _)| j as u32)
            });
            let (n, rate) = in_window[i].map_or((None, None), |(n, r)| (Some(n), r));
            WaveStats {
                slot: i as u32,
                sent_ms: r.sent_ms,
                first_token_ms: first(r),
                last_token_ms: last(r),
                window_ms: window.map(|(a, b)| b - a),
                window_tokens: n,
                window_decode_tokens_per_s: rate,
                window_ms_per_step: rate.map(|r| 1000.0 / r),
                aggregate_decode_tokens_per_s: aggregate,
                aggregate_prefill_tokens_per_s: prefill,
                ttft_spread_ms: spread,
                wave_output_tokens_per_s: wave_rate,
                waited_for,
            }
        })
        .collect()
}

/// Stores a wave's analysis on its samples and flags them: `queued` for a request that
/// waited, `no_overlap` on every sample of a wave whose common window was too short.
pub fn apply_wave(samples: &mut [Sample], stats: Vec<WaveStats>, concurrency: u32, wave: u32) {
    let overlap = stats.iter().all(|w| w.window_decode_tokens_per_s.is_some());
    for (s, w) in samples.iter_mut().zip(stats) {
        s.concurrency = Some(concurrency);
        s.wave = Some(wave);
        if w.waited_for.is_some() {
            s.flags.push(Flag::Queued);
        }
        if !overlap && s.status == Status::Ok {
            s.flags.push(Flag::NoOverlap);
        }
        s.wave_stats = Some(w);
    }
}

/// What the server's limits say about one cell before it is measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Fit {
    /// All requests fit in the server's slots and KV pool at once.
    Fits,
    /// Some must wait: the limit, and the server flag that raises it.
    Queues(String),
    /// The server reports no limit to predict from.
    Unknown,
}

impl Fit {
    /// One word for tables.
    pub fn word(&self) -> &'static str {
        match self {
            Fit::Fits => "fits",
            Fit::Queues(_) => "queues",
            Fit::Unknown => "?",
        }
    }
}

/// The server limits that decide how many requests run at once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    /// Server software (`llama.cpp`, `sglang`, `vllm`, …).
    pub server_kind: String,
    /// Parallel slots (llama.cpp `total_slots`).
    pub slots: Option<u64>,
    /// KV pool in tokens (SGLang `max_total_num_tokens`, vLLM blocks × block size).
    pub kv_pool_tokens: Option<u64>,
    /// The server flags that raise the limits, as the server's family named them in the
    /// header (none for a server no family names, or a file from before they were recorded).
    pub flags: CapacityFlags,
}

impl Limits {
    /// The limits a results header (or the probe, serialized the same way) records.
    pub fn of(server: &ServerInfo) -> Limits {
        Limits {
            server_kind: server.server_kind.clone(),
            slots: server.total_slots,
            kv_pool_tokens: server.kv_pool_tokens,
            flags: server.capacity_flags.clone().unwrap_or_default(),
        }
    }

    /// The server flags that raise the limits, as the server's family names them (none
    /// for a server no family names).
    fn flags(&self) -> &CapacityFlags {
        &self.flags
    }

    /// Whether `c` requests of `context` prompt + `output` tokens fit at once.
    pub fn predict(&self, context: u64, output: u32, c: u32) -> Fit {
        if self.slots.is_none() && self.kv_pool_tokens.is_none() {
            return Fit::Unknown;
        }
        if let Some(slots) = self.slots.filter(|s| u64::from(c) > *s) {
            return Fit::Queues(format!(
                "the server has {slots} slot(s) for {c} requests{}",
                raise_with(self.flags().slots.as_deref())
            ));
        }
        if let Some(pool) = self.kv_pool_tokens {
            let need = u64::from(c) * (context + u64::from(output));
            if need > pool {
                return Fit::Queues(format!(
                    "{c} × {} tokens = {need} exceed the KV pool of {pool} tokens (it holds {} at once){}",
                    context + u64::from(output),
                    pool / (context + u64::from(output)).max(1),
                    raise_with(self.flags().kv_pool.as_deref())
                ));
            }
        }
        Fit::Fits
    }
}

/// The end of a prediction's reason that names the flag raising the limit, when known.
fn raise_with(flag: Option<&str>) -> String {
    flag.map_or_else(String::new, |f| format!("; raise with {f}"))
}

/// One cell of the map, summarised over its usable samples.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cell {
    /// Context length.
    pub context_tokens: u64,
    /// Requests sent together.
    pub concurrency: u32,
    /// Waves measured (usable or not).
    pub waves: usize,
    /// Median over waves of the aggregate in-window decode rate (tok/s).
    pub aggregate_decode_tokens_per_s: Option<f64>,
    /// Median over waves of output tokens per second over the wave (also when requests queued).
    pub wave_output_tokens_per_s: Option<f64>,
    /// Median over waves of c × context ÷ latest first token.
    pub aggregate_prefill_tokens_per_s: Option<f64>,
    /// Median per-request time per step inside the window (ms).
    pub ms_per_step: Option<f64>,
    /// Median TTFT over the requests (ms).
    pub ttft_median_ms: Option<f64>,
    /// Worst TTFT (ms).
    pub ttft_worst_ms: Option<f64>,
    /// Requests flagged `queued`.
    pub queued: usize,
    /// Requests flagged `preempted` (the server evicted and recomputed them).
    pub preempted: usize,
    /// Waves without a measurable common window.
    pub no_overlap_waves: usize,
    /// Requests of this cell that failed (a failed request hides whether others waited).
    pub failed: usize,
    /// Requests sent in this cell (all waves).
    pub requests: usize,
    /// What the server's limits predicted (`fits`, `queues`, `?`), from the run header.
    pub predicted: String,
    /// What was measured: `ran together`, `queued`, `preempted`, `no overlap`, or `failed` (requests
    /// failed and none was seen waiting: the cell cannot say).
    pub measured: String,
}

fn median(v: &mut [f64]) -> Option<f64> {
    crate::stats::Spread::of(v.iter().copied()).map(|s| s.median)
}

/// The map's cells, context then concurrency ascending, from a run's samples. A sample
/// without `concurrency` is a one-at-a-time cell (concurrency 1).
pub fn cells(samples: &[Sample], limits: &Limits, output: u32) -> Vec<Cell> {
    let mut by: BTreeMap<(u64, u32), Vec<&Sample>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.phase == Phase::Cold) {
        by.entry((s.context_tokens, s.concurrency.unwrap_or(1)))
            .or_default()
            .push(s);
    }
    by.into_iter()
        .map(|((context, c), ss)| {
            let usable: Vec<&&Sample> = ss.iter().filter(|s| s.usable()).collect();
            // Wave-level numbers are the same on every sample of a wave: one per wave.
            let mut per_wave: BTreeMap<u32, &WaveStats> = BTreeMap::new();
            for s in &usable {
                if let (Some(w), Some(ws)) = (s.wave.or(Some(s.rep)), s.wave_stats.as_ref()) {
                    per_wave.entry(w).or_insert(ws);
                }
            }
            let waves = ss
                .iter()
                .map(|s| s.wave.unwrap_or(s.rep))
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let wave_med = |f: fn(&WaveStats) -> Option<f64>| {
                median(&mut per_wave.values().filter_map(|w| f(w)).collect::<Vec<_>>())
            };
            let one = ss.iter().all(|s| s.wave_stats.is_none());
            let mut agg = wave_med(|w| w.aggregate_decode_tokens_per_s);
            let mut steps: Vec<f64> = usable
                .iter()
                .filter_map(|s| s.wave_stats.as_ref().and_then(|w| w.window_ms_per_step))
                .collect();
            if one {
                // A one-at-a-time run: its decode rate is the whole "window".
                agg = median(
                    &mut usable
                        .iter()
                        .filter_map(|s| s.decode_tokens_per_s)
                        .collect::<Vec<_>>(),
                );
                steps = usable.iter().filter_map(|s| s.ms_per_step).collect();
            }
            let mut ttft: Vec<f64> = usable.iter().filter_map(|s| s.ttft_ms).collect();
            let queued = ss.iter().filter(|s| s.has(&Flag::Queued)).count();
            let no_overlap_waves = ss
                .iter()
                .filter(|s| s.has(&Flag::NoOverlap))
                .map(|s| s.wave.unwrap_or(s.rep))
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let preempted = ss.iter().filter(|s| s.has(&Flag::Preempted)).count();
            let failed = ss.iter().filter(|s| s.status != Status::Ok).count();
            let measured = if preempted > 0 {
                "preempted"
            } else if queued > 0 {
                "queued"
            } else if failed > 0 {
                "failed"
            } else if no_overlap_waves > 0 {
                "no overlap"
            } else {
                "ran together"
            };
            Cell {
                context_tokens: context,
                concurrency: c,
                waves,
                aggregate_decode_tokens_per_s: agg,
                wave_output_tokens_per_s: wave_med(|w| w.wave_output_tokens_per_s),
                aggregate_prefill_tokens_per_s: wave_med(|w| w.aggregate_prefill_tokens_per_s),
                ms_per_step: median(&mut steps),
                ttft_median_ms: median(&mut ttft),
                ttft_worst_ms: ttft.iter().copied().reduce(f64::max),
                queued,
                preempted,
                no_overlap_waves,
                failed,
                requests: ss.len(),
                predicted: limits.predict(context, output, c).word().to_owned(),
                measured: measured.to_owned(),
            }
        })
        .collect()
}

/// The knee of one context's row (cells sorted by concurrency): the concurrency beyond
/// which the aggregate decode rate grows by less than [`KNEE_SHARE`] of the ideal, or
/// requests start to wait; `None` when neither happens within the measured levels.
pub fn knee(row: &[&Cell]) -> Option<(u32, String)> {
    for pair in row.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.queued > 0 {
            return Some((
                a.concurrency,
                format!("requests wait for a slot at {}", b.concurrency),
            ));
        }
        if b.preempted > 0 {
            return Some((
                a.concurrency,
                format!("requests are preempted at {}", b.concurrency),
            ));
        }
        let rate = |c: &Cell| {
            c.aggregate_decode_tokens_per_s
                .or(c.wave_output_tokens_per_s)
        };
        if let (Some(ra), Some(rb)) = (rate(a), rate(b)) {
            let ideal = f64::from(b.concurrency) / f64::from(a.concurrency);
            let want = 1.0 + KNEE_SHARE * (ideal - 1.0);
            if rb / ra < want {
                return Some((
                    a.concurrency,
                    format!(
                        "{}→{}: aggregate ×{:.2} < ×{want:.2}",
                        a.concurrency,
                        b.concurrency,
                        rb / ra
                    ),
                ));
            }
        }
    }
    None
}

/// The map of a concurrency grid, for reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CapacityMap {
    /// Concurrency levels (columns).
    pub levels: Vec<u32>,
    /// Cells, context then concurrency ascending.
    pub cells: Vec<Cell>,
    /// Per context, the knee.
    pub knees: Vec<Knee>,
    /// The knee rule, in words.
    pub knee_rule: String,
    /// Cells where the server did not do what its limits predicted.
    pub mispredicted: Vec<String>,
}

/// The knee of one context.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Knee {
    /// Context length.
    pub context_tokens: u64,
    /// The concurrency beyond which more requests stop paying (`null`: not within the grid).
    pub concurrency: Option<u32>,
    /// Why.
    pub why: String,
}

/// The knee rule as stated in reports.
pub fn knee_rule() -> String {
    format!(
        "the knee is the last concurrency c whose step up to the next level c' gains less than {:.0}% of the ideal extra aggregate decode rate (×(1 + {KNEE_SHARE}·(c'/c − 1)): ×1.5 for a doubling), or after which requests wait for a slot",
        KNEE_SHARE * 100.0
    )
}

/// The map of a run whose header lists concurrency levels beyond 1; `None` otherwise.
pub fn map(
    samples: &[Sample],
    config: &ctxbench_schema::record::RunConfig,
    server: &ServerInfo,
) -> Option<CapacityMap> {
    let levels = config.concurrency_levels();
    if levels == [1] {
        return None;
    }
    let limits = Limits::of(server);
    let cells = cells(samples, &limits, config.output_tokens);
    let mut knees = Vec::new();
    let mut contexts: Vec<u64> = cells.iter().map(|c| c.context_tokens).collect();
    contexts.dedup();
    for ctx in contexts {
        let row: Vec<&Cell> = cells.iter().filter(|c| c.context_tokens == ctx).collect();
        let k = knee(&row);
        knees.push(Knee {
            context_tokens: ctx,
            concurrency: k.as_ref().map(|k| k.0),
            why: k.map_or_else(
                || {
                    "none within the measured levels: throughput kept growing and nobody waited"
                        .to_owned()
                },
                |k| k.1,
            ),
        });
    }
    let mispredicted = cells
        .iter()
        .filter_map(|c| {
            let waited = c.queued > 0 || c.preempted > 0;
            // A request that failed cannot show whether it (or one after it) waited.
            let miss = match c.predicted.as_str() {
                "fits" => waited,
                "queues" => !waited && c.failed == 0,
                _ => false,
            };
            miss.then(|| {
                format!(
                    "{} × {}: predicted {}, measured {}",
                    ctxbench_schema::units::fmt_ctx(c.context_tokens),
                    c.concurrency,
                    c.predicted,
                    if waited {
                        c.measured.as_str()
                    } else {
                        "no request waited"
                    }
                )
            })
        })
        .collect();
    Some(CapacityMap {
        levels,
        cells,
        knees,
        knee_rule: knee_rule(),
        mispredicted,
    })
}

/// One table of the map: context down, concurrency across.
#[derive(Debug, Clone, PartialEq)]
pub struct MapTable {
    /// What the cells are.
    pub title: String,
    /// `context`, `c=1`, `c=2`, …
    pub head: Vec<String>,
    /// One row per context.
    pub rows: Vec<Vec<String>>,
}

/// The map as small tables, one per metric (aggregate decode tok/s, per-request ms/step,
/// TTFT median / worst) and one of predicted → measured: one number per cell reads down
/// a column, where one long cell of everything did not.
pub fn map_tables(m: &CapacityMap) -> Vec<MapTable> {
    let mut head = vec!["context".to_owned()];
    head.extend(m.levels.iter().map(|c| format!("c={c}")));
    let mut contexts: Vec<u64> = m.cells.iter().map(|c| c.context_tokens).collect();
    contexts.dedup();
    let num = |x: Option<f64>| x.map_or("–".to_owned(), ctxbench_schema::units::num);
    let table = |title: &str, f: &dyn Fn(&Cell) -> String| MapTable {
        title: title.to_owned(),
        head: head.clone(),
        rows: contexts
            .iter()
            .map(|&ctx| {
                let mut row = vec![ctxbench_schema::units::fmt_ctx(ctx)];
                row.extend(m.levels.iter().map(|&c| {
                    m.cells
                        .iter()
                        .find(|x| x.context_tokens == ctx && x.concurrency == c)
                        .map_or("not measured".to_owned(), f)
                }));
                row
            })
            .collect(),
    };
    vec![
        table(
            "aggregate decode tok/s (all c requests, in the window where all decoded at once; * = output tokens over the whole wave, where there was no such window)",
            &|x| match (x.aggregate_decode_tokens_per_s, x.wave_output_tokens_per_s) {
                (Some(a), _) => num(Some(a)),
                (None, Some(w)) => format!("{}*", num(Some(w))),
                (None, None) => "–".to_owned(),
            },
        ),
        table("ms per decode step, per request (in that window)", &|x| {
            num(x.ms_per_step)
        }),
        table("TTFT median / worst (ms)", &|x| {
            format!("{} / {}", num(x.ttft_median_ms), num(x.ttft_worst_ms))
        }),
        table(
            "predicted → measured (from the server's slots / KV pool; queued: requests that waited for another to finish)",
            &|x| {
                let detail = if x.preempted > 0 {
                    format!(" ({} of {})", x.preempted, x.requests)
                } else if x.queued > 0 {
                    format!(" ({} of {})", x.queued, x.requests)
                } else if x.failed > 0 {
                    format!(" ({} of {})", x.failed, x.requests)
                } else {
                    String::new()
                };
                format!("{}→{}{detail}", x.predicted, x.measured)
            },
        ),
    ]
}

/// The legend under the map, in words.
pub fn map_legend(m: &CapacityMap) -> Vec<String> {
    let mut v = vec![
        "measured: ran together (all c decoded at once), queued (some waited for a slot), preempted (the server evicted some and recomputed them: SGLang retractions, vLLM preemptions), no overlap (no common window long enough to time), failed (requests failed, so waiting cannot be told)".to_owned(),
        m.knee_rule.clone(),
    ];
    for k in &m.knees {
        v.push(format!(
            "knee at {}: {}",
            ctxbench_schema::units::fmt_ctx(k.context_tokens),
            match k.concurrency {
                Some(c) => format!("c = {c} ({})", k.why),
                None => k.why.clone(),
            }
        ));
    }
    for x in &m.mispredicted {
        v.push(format!("prediction missed: {x}"));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(sent: f64, first: f64, step: f64, n: usize) -> RequestTimes {
        RequestTimes {
            sent_ms: sent,
            token_ms: (0..n).map(|i| first + step * i as f64).collect(),
        }
    }

    #[test]
    fn the_window_is_where_all_decoded_and_rates_add_up() {
        // Two requests, 10 ms steps; the second starts 100 ms later.
        let w = analyse_wave(
            1000,
            &[req(0.0, 100.0, 10.0, 101), req(0.0, 200.0, 10.0, 101)],
        );
        assert_eq!(w[0].window_ms, Some(900.0)); // [200, 1100]
        assert_eq!(w[0].window_tokens, Some(91));
        let r = w[0].window_decode_tokens_per_s.unwrap();
        assert!((r - 100.0).abs() < 1e-9, "{r}");
        assert!((w[1].aggregate_decode_tokens_per_s.unwrap() - 200.0).abs() < 1e-9);
        assert_eq!(w[1].ttft_spread_ms, Some(100.0));
        // 2 × 1000 prompt tokens by the latest first token (200 ms).
        assert!((w[0].aggregate_prefill_tokens_per_s.unwrap() - 10_000.0).abs() < 1e-6);
        assert!(w.iter().all(|x| x.waited_for.is_none()));
    }

    #[test]
    fn a_request_that_starts_after_another_finished_waited_and_there_is_no_window() {
        let w = analyse_wave(
            1000,
            &[req(0.0, 100.0, 10.0, 11), req(0.0, 500.0, 10.0, 11)],
        );
        assert_eq!(w[1].waited_for, Some(0));
        assert_eq!(w[0].waited_for, None);
        assert_eq!(w[0].window_ms, None);
        assert_eq!(w[0].aggregate_decode_tokens_per_s, None);
        // The wave's throughput is still known: 20 steps over 100..600 ms.
        assert!((w[0].wave_output_tokens_per_s.unwrap() - 40.0).abs() < 1e-9);
        let mut samples = vec![Sample::default(), Sample::default()];
        apply_wave(&mut samples, w, 2, 0);
        assert!(samples[1].has(&Flag::Queued) && !samples[0].has(&Flag::Queued));
        assert!(samples.iter().all(|s| s.has(&Flag::NoOverlap)));
    }

    #[test]
    fn a_preempted_request_makes_its_cell_preempted_and_the_knee_stops_before_it() {
        let sample = |c: u32, wave: u32, preempted: bool| {
            let mut s = Sample {
                context_tokens: 1024,
                concurrency: Some(c),
                wave: Some(wave),
                ..Sample::default()
            };
            if preempted {
                s.flags.push(Flag::Preempted);
            }
            s
        };
        let samples = vec![sample(1, 0, false), sample(2, 1, false), sample(2, 1, true)];
        let limits = Limits {
            slots: Some(4),
            ..Limits::default()
        };
        let cells = cells(&samples, &limits, 128);
        assert_eq!(cells.len(), 2);
        assert_eq!(
            (cells[0].preempted, cells[0].measured.as_str()),
            (0, "ran together")
        );
        assert_eq!(
            (cells[1].preempted, cells[1].measured.as_str()),
            (1, "preempted")
        );
        assert_eq!(cells[1].predicted, "fits");
        let refs: Vec<&Cell> = cells.iter().collect();
        let k = knee(&refs).expect("a preemption ends the row");
        assert_eq!(k.0, 1);
        assert!(k.1.contains("preempted at 2"), "{}", k.1);
    }

    #[test]
    fn a_window_of_fewer_than_the_minimum_steps_reports_no_rate() {
        let w = analyse_wave(1000, &[req(0.0, 100.0, 10.0, 5), req(0.0, 110.0, 10.0, 5)]);
        assert!(w[0].window_ms.is_some());
        assert!(w.iter().all(|x| x.window_decode_tokens_per_s.is_none()));
        assert_eq!(w[0].aggregate_decode_tokens_per_s, None);
    }

    #[test]
    fn predictions_name_the_limit_and_the_flag_that_raises_it() {
        let llama = Limits {
            server_kind: "llama.cpp".into(),
            slots: Some(4),
            kv_pool_tokens: None,
            flags: flags(Some("-np (--parallel)"), None),
        };
        assert_eq!(llama.predict(1024, 128, 4), Fit::Fits);
        let Fit::Queues(why) = llama.predict(1024, 128, 8) else {
            panic!()
        };
        assert!(why.contains("4 slot(s)") && why.contains("-np"), "{why}");
        let sglang = Limits {
            server_kind: "sglang".into(),
            slots: None,
            kv_pool_tokens: Some(10_000),
            flags: flags(None, Some("--max-total-tokens")),
        };
        assert_eq!(sglang.predict(2000, 0, 5), Fit::Fits);
        let Fit::Queues(why) = sglang.predict(2000, 1, 5) else {
            panic!()
        };
        assert!(
            why.contains("holds 4") && why.contains("--max-total-tokens"),
            "{why}"
        );
        assert_eq!(Limits::default().predict(1, 1, 1), Fit::Unknown);
    }

    fn flags(slots: Option<&str>, kv_pool: Option<&str>) -> CapacityFlags {
        CapacityFlags {
            slots: slots.map(str::to_owned),
            kv_pool: kv_pool.map(str::to_owned),
        }
    }

    #[test]
    fn the_flags_named_are_the_headers_and_none_for_a_server_without_advice() {
        let vllm = Limits {
            server_kind: "vllm".into(),
            slots: None,
            kv_pool_tokens: Some(1000),
            flags: flags(None, Some("--gpu-memory-utilization")),
        };
        let Fit::Queues(why) = vllm.predict(1000, 0, 2) else {
            panic!()
        };
        assert!(
            why.ends_with("raise with --gpu-memory-utilization"),
            "{why}"
        );
        let limits = Limits {
            server_kind: "tgi".into(),
            slots: Some(1),
            kv_pool_tokens: None,
            flags: CapacityFlags::default(),
        };
        let Fit::Queues(why) = limits.predict(1024, 128, 2) else {
            panic!()
        };
        assert_eq!(why, "the server has 1 slot(s) for 2 requests");
    }

    fn cell(c: u32, agg: f64, queued: usize) -> Cell {
        Cell {
            context_tokens: 1024,
            concurrency: c,
            waves: 1,
            aggregate_decode_tokens_per_s: Some(agg),
            wave_output_tokens_per_s: None,
            aggregate_prefill_tokens_per_s: None,
            ms_per_step: None,
            ttft_median_ms: None,
            ttft_worst_ms: None,
            queued,
            preempted: 0,
            no_overlap_waves: 0,
            failed: 0,
            requests: c as usize,
            predicted: "fits".into(),
            measured: String::new(),
        }
    }

    #[test]
    fn the_knee_is_where_doubling_gains_less_than_half_or_requests_wait() {
        let row = [
            cell(1, 10.0, 0),
            cell(2, 19.0, 0),
            cell(4, 27.0, 0),
            cell(8, 30.0, 0),
        ];
        let refs: Vec<&Cell> = row.iter().collect();
        assert_eq!(knee(&refs).map(|k| k.0), Some(2)); // 27/19 = 1.42 < 1.5
        let row = [
            cell(1, 10.0, 0),
            cell(2, 19.0, 0),
            cell(4, 38.0, 0),
            cell(8, 60.0, 3),
        ];
        let refs: Vec<&Cell> = row.iter().collect();
        assert_eq!(knee(&refs).map(|k| k.0), Some(4));
        let refs: Vec<&Cell> = row[..3].iter().collect();
        assert_eq!(knee(&refs), None);
    }
}
