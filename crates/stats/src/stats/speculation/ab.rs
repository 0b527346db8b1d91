//! The seed's A/B (issue 45, point 5): a campaign over one speculative setting with numeric
//! values (a drafter window, `-L w 1024,4096`; a draft length), every variant speculative.
//! Per length and value: acceptance and decode; per length and each step up in value, the
//! verdict on whether the larger value pays: its ms per token against the smaller value's,
//! by the ratio interval of [`significance::compare_cell`] (faster, slower, or no
//! measurable difference). One request at a time (cold, concurrency 1). Pure: no I/O.

use serde::Serialize;

use super::super::metric::Metric;
use super::super::significance::{self, RatioInterval, Settings};
use super::{mean_interval, MeanInterval};
use ctxbench_schema::record::{Phase, Results, Sample};
use ctxbench_schema::units::fmt_ctx;

/// One value of the setting: its number and its runs.
#[derive(Debug, Clone, Copy)]
pub struct ValueSide<'a> {
    /// The value (a window in tokens, a draft length).
    pub value: f64,
    /// Its runs.
    pub runs: &'a [&'a Results],
}

/// One value at one length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValueCell {
    /// The value.
    pub value: f64,
    /// Median ms per output token (median of run medians).
    pub ms_per_token: Option<f64>,
    /// Mean acceptance length (tokens per verify step, bonus included) with its interval.
    pub accept_length: Option<MeanInterval>,
    /// Mean acceptance rate with its interval.
    pub accept_rate: Option<MeanInterval>,
}

/// Does the larger value pay?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbVerdict {
    /// Its decode is faster: the ms ratio's whole interval below 1.
    Pays,
    /// Slower: the whole interval above 1.
    Costs,
    /// The interval contains 1.
    NoDifference,
    /// Too few units for an interval.
    TooFew,
}

/// One step up in value at one length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// The smaller value.
    pub from: f64,
    /// The larger value.
    pub to: f64,
    /// Larger ÷ smaller ms per token (below 1: the larger is faster).
    pub ratio: Option<f64>,
    /// Its interval.
    pub interval: Option<RatioInterval>,
    /// The verdict.
    pub verdict: AbVerdict,
}

/// Everything at one length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AbRow {
    /// Context length.
    pub context_tokens: u64,
    /// Each value, ascending.
    pub values: Vec<ValueCell>,
    /// Each step up in value.
    pub steps: Vec<Step>,
    /// The verdicts in one sentence.
    pub sentence: String,
}

fn usable(r: &Results, c: u64) -> impl Iterator<Item = &Sample> {
    r.samples.iter().filter(move |s| {
        s.usable()
            && s.phase == Phase::Cold
            && s.concurrency.unwrap_or(1) == 1
            && s.context_tokens == c
    })
}

fn per_run(side: &ValueSide, c: u64, f: impl Fn(&Sample) -> Option<f64>) -> Vec<Vec<f64>> {
    side.runs
        .iter()
        .map(|r| {
            usable(r, c)
                .filter_map(&f)
                .filter(|v| v.is_finite())
                .collect()
        })
        .collect()
}

fn center(runs: &[Vec<f64>]) -> Option<f64> {
    let med = |v: &[f64]| super::super::Spread::of(v.iter().copied()).map(|s| s.median);
    let meds: Vec<f64> = runs.iter().filter_map(|r| med(r)).collect();
    med(&meds)
}

/// A value as written on the command line (`4096`, `0.5`).
pub fn value_text(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn step_words(name: &str, st: &Step, cells: &[ValueCell]) -> String {
    let acc = |v: f64| {
        cells
            .iter()
            .find(|c| c.value == v)
            .and_then(|c| {
                c.accept_rate
                    .map(|m| format!("{:.2}", m.mean))
                    .or(c.accept_length.map(|m| format!("α {:.2}", m.mean)))
            })
            .unwrap_or_else(|| "–".into())
    };
    let (a, b) = (value_text(st.from), value_text(st.to));
    let iv = match (st.ratio, st.interval) {
        (Some(r), Some(i)) => format!("{r:.2}× the ms per token, {:.2}–{:.2}", i.low, i.high),
        (Some(r), None) => format!("{r:.2}× the ms per token, too few for an interval"),
        _ => "no decode measured".into(),
    };
    let verdict = match st.verdict {
        AbVerdict::Pays => format!("{name}={b} pays over {name}={a}"),
        AbVerdict::Costs => format!("{name}={b} costs against {name}={a}"),
        AbVerdict::NoDifference => {
            format!("no measurable difference between {name}={a} and {name}={b}")
        }
        AbVerdict::TooFew => {
            format!("too few samples to say whether {name}={b} pays over {name}={a}")
        }
    };
    format!(
        "{verdict} ({iv}; acceptance {} → {})",
        acc(st.from),
        acc(st.to)
    )
}

/// Per length (every length all values measured), acceptance and decode per value and a
/// verdict per step up in value. `name` is the setting's name for the sentences.
pub fn build(name: &str, sides: &[ValueSide], s: &Settings) -> Vec<AbRow> {
    let mut sides = sides.to_vec();
    sides.sort_by(|a, b| a.value.total_cmp(&b.value));
    let lengths = |side: &ValueSide| -> Vec<u64> {
        let mut c: Vec<u64> = side
            .runs
            .iter()
            .flat_map(|r| {
                r.samples
                    .iter()
                    .filter(|x| {
                        x.usable() && x.phase == Phase::Cold && x.concurrency.unwrap_or(1) == 1
                    })
                    .map(|x| x.context_tokens)
            })
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let mut common = sides.first().map(lengths).unwrap_or_default();
    for side in &sides[1.min(sides.len())..] {
        let l = lengths(side);
        common.retain(|c| l.contains(c));
    }
    let by_runs = sides.iter().any(|x| x.runs.len() > 1);
    common
        .into_iter()
        .map(|c| {
            let ms: Vec<Vec<Vec<f64>>> = sides
                .iter()
                .map(|x| per_run(x, c, |y| Metric::MsPerStep.of(y)))
                .collect();
            let values: Vec<ValueCell> = sides
                .iter()
                .zip(&ms)
                .map(|(x, m)| ValueCell {
                    value: x.value,
                    ms_per_token: center(m),
                    accept_length: mean_interval(
                        &per_run(x, c, |y| y.spec_accept_length),
                        by_runs,
                        s.level,
                    )
                    .map(|m| m.within(1.0, f64::INFINITY)),
                    accept_rate: mean_interval(
                        &per_run(x, c, |y| y.spec_accept_rate),
                        by_runs,
                        s.level,
                    )
                    .map(|m| m.within(0.0, 1.0)),
                })
                .collect();
            let steps: Vec<Step> = (1..sides.len())
                .map(|i| {
                    let cell = significance::compare_cell(Metric::MsPerStep, &ms[i - 1], &ms[i], s);
                    let verdict = match cell.interval {
                        None => AbVerdict::TooFew,
                        Some(iv) if iv.high < 1.0 => AbVerdict::Pays,
                        Some(iv) if iv.low > 1.0 => AbVerdict::Costs,
                        Some(_) => AbVerdict::NoDifference,
                    };
                    Step {
                        from: sides[i - 1].value,
                        to: sides[i].value,
                        ratio: cell.ratio,
                        interval: cell.interval,
                        verdict,
                    }
                })
                .collect();
            let sentence = format!(
                "{}: {}",
                fmt_ctx(c),
                steps
                    .iter()
                    .map(|st| step_words(name, st, &values))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            AbRow {
                context_tokens: c,
                values,
                steps,
                sentence,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::Status;

    fn run(points: &[(u64, f64, f64)]) -> Results {
        let mut r = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.samples = points
            .iter()
            .flat_map(|&(c, ms, rate)| {
                (0..6).map(move |i| Sample {
                    context_tokens: c,
                    status: Status::Ok,
                    phase: Phase::Cold,
                    length_ok: Some(true),
                    ms_per_step: Some(ms * (1.0 + 0.01 * (i as f64 - 2.5))),
                    spec_accept_rate: Some(rate * (1.0 + 0.02 * (i as f64 - 2.5))),
                    spec_accept_length: Some(1.0 + 8.0 * rate),
                    ..Sample::default()
                })
            })
            .collect();
        r
    }

    #[test]
    fn a_larger_drafter_window_pays_past_the_smaller_window_and_not_before() {
        // Window 1024: acceptance collapses at 4k; 4096 holds it, at a small cost at 1k.
        let small = run(&[(1024, 10.0, 0.7), (4096, 30.0, 0.05)]);
        let large = run(&[(1024, 11.0, 0.7), (4096, 15.0, 0.68)]);
        let (a, b) = ([&small], [&large]);
        let rows = build(
            "w",
            &[
                ValueSide {
                    value: 4096.0,
                    runs: &b,
                },
                ValueSide {
                    value: 1024.0,
                    runs: &a,
                },
            ],
            &Settings::default(),
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].values[0].value, 1024.0);
        assert_eq!(rows[0].steps[0].verdict, AbVerdict::Costs);
        assert_eq!(rows[1].steps[0].verdict, AbVerdict::Pays);
        assert!(
            rows[1]
                .sentence
                .starts_with("4k: w=4096 pays over w=1024 (0.50× the ms per token"),
            "{}",
            rows[1].sentence
        );
        assert!(
            rows[1].sentence.contains("acceptance 0.05 → 0.68"),
            "{}",
            rows[1].sentence
        );
        let acc = rows[1].values[1].accept_rate.unwrap();
        assert!(acc.low.unwrap() < 0.68 && acc.high.unwrap() > 0.68);
    }
}
