//! A designed run (`--design auto`) held against another run of the same lengths: per
//! length and metric, whether the other run's median lies within the designed run's stated
//! interval ("covered"), or else how far the two runs' medians are apart ("drift of X%").
//! What issue 47 asks of a designed run's intervals, answered from the results files alone.
//! Pure: no I/O.

use serde::Serialize;

use super::loaded::Loaded;
use crate::report::design::{self, Figure, Obtained};
use crate::stats::metric::Metric;

/// One length and metric of a designed run against another run's median.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coverage {
    /// Context length.
    pub context_tokens: u64,
    /// `TTFT` or `decode`.
    pub metric: &'static str,
    /// Label of the designed side.
    pub designed: String,
    /// Label of the other side.
    pub other: String,
    /// The designed run's figure: median and its stated 95% interval.
    pub figure: Figure,
    /// The other run's median of its usable cold samples.
    pub other_median: f64,
    /// The other median within the designed interval.
    pub covered: bool,
    /// other ÷ designed median − 1: the drift between the two runs at this length.
    pub drift: f64,
    /// How far the other median lies beyond the interval's nearer end, relative to that end
    /// (0 when covered).
    pub beyond: f64,
}

impl Coverage {
    /// The line `compare` prints.
    pub fn text(&self) -> String {
        let unit = if self.metric == "TTFT" {
            " ms"
        } else {
            " tok/s"
        };
        let f = &self.figure;
        let head = format!(
            "{} {}: {}'s median {}{unit} against {}'s designed {}{unit} ±{:.1}% [{}–{}]",
            kilo(self.context_tokens),
            self.metric,
            self.other,
            num(self.other_median),
            self.designed,
            num(f.median),
            f.half_width * 100.0,
            num(f.low),
            num(f.high),
        );
        if self.covered {
            format!("{head}: covered")
        } else {
            format!(
                "{head}: drift of {:+.1}% ({:.1}% beyond the interval)",
                self.drift * 100.0,
                self.beyond * 100.0
            )
        }
    }
}

/// 1024-multiples as "Nk".
fn kilo(c: u64) -> String {
    match c % 1024 {
        0 => format!("{}k", c / 1024),
        _ => c.to_string(),
    }
}

/// Four significant figures, as the report tables.
fn num(x: f64) -> String {
    let digits = (3 - x.abs().log10().floor() as i32).clamp(0, 3) as usize;
    format!("{x:.digits$}")
}

/// The median of a side's usable cold samples of `m` at `context` (its first run's).
fn median_of(side: &Loaded, m: Metric, context: u64) -> Option<f64> {
    let v: Vec<f64> = side
        .2
        .samples
        .iter()
        .filter(|s| {
            s.context_tokens == context
                && s.phase == ctxbench_schema::record::Phase::Cold
                && s.concurrency.unwrap_or(1) == 1
                && s.usable()
        })
        .filter_map(|s| m.of(s))
        .collect();
    crate::stats::Spread::of(v).map(|s| s.median)
}

/// One figure against the other median.
fn check(
    context: u64,
    name: &'static str,
    labels: (&str, &str),
    figure: Figure,
    other: f64,
) -> Coverage {
    let covered = other >= figure.low && other <= figure.high;
    let beyond = if covered {
        0.0
    } else if other > figure.high {
        other / figure.high - 1.0
    } else {
        1.0 - other / figure.low
    };
    Coverage {
        context_tokens: context,
        metric: name,
        designed: labels.0.to_owned(),
        other: labels.1.to_owned(),
        figure,
        other_median: other,
        covered,
        drift: other / figure.median - 1.0,
        beyond,
    }
}

/// Every measured length of `designed` (one run) against `other`'s medians (one run):
/// TTFT and decode rate. Empty when `designed` is not a designed run.
fn one_way(designed: &Loaded, other: &Loaded) -> Vec<Coverage> {
    let Some(d) = design::build(&designed.2) else {
        return Vec::new();
    };
    let labels = (designed.0.as_str(), other.0.as_str());
    let mut out = Vec::new();
    for p in d.points.iter().filter(|p| p.obtained == Obtained::Measured) {
        let c = p.context_tokens;
        for (name, fig, m) in [
            ("TTFT", p.ttft_ms, Metric::TtftMs),
            ("decode", p.decode_tokens_per_s, Metric::DecodeTokensPerS),
        ] {
            if let (Some(f), Some(o)) = (fig, median_of(other, m, c)) {
                out.push(check(c, name, labels, f, o));
            }
        }
    }
    out
}

/// A designed side against the other, each of one run: the designed run's intervals held
/// against the other's medians (both ways when both are designed). Empty when neither side
/// is a single designed run.
pub fn coverage(a: &[Loaded], b: &[Loaded]) -> Vec<Coverage> {
    let ([a], [b]) = (a, b) else {
        return Vec::new();
    };
    let mut out = one_way(a, b);
    out.extend(one_way(b, a));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(median: f64, w: f64) -> Figure {
        Figure {
            median,
            low: median / (1.0 + w),
            high: median * (1.0 + w),
            half_width: w,
            within_target: w <= 0.05,
        }
    }

    #[test]
    fn a_median_inside_the_designed_interval_is_covered_and_one_outside_is_named_with_its_drift() {
        let c = check(8192, "TTFT", ("A", "B"), fig(2148.0, 0.099), 2300.0);
        assert!(c.covered && c.beyond == 0.0, "{c:?}");
        assert!(c.text().ends_with(": covered"), "{}", c.text());
        let c = check(8192, "TTFT", ("A", "B"), fig(2148.0, 0.099), 3114.0);
        assert!(!c.covered);
        assert!((c.drift - (3114.0 / 2148.0 - 1.0)).abs() < 1e-12);
        assert!(
            c.text().contains("drift of +45.0%") && c.text().contains("beyond the interval"),
            "{}",
            c.text()
        );
        assert!(
            c.text()
                .starts_with("8k TTFT: B's median 3114 ms against A's designed 2148 ms ±9.9%"),
            "{}",
            c.text()
        );
        let low = check(1024, "decode", ("A", "B"), fig(200.0, 0.05), 150.0);
        assert!(
            !low.covered && low.drift < 0.0 && low.beyond > 0.0,
            "{low:?}"
        );
        assert!(low.text().contains("drift of -25.0%"), "{}", low.text());
    }
}
