//! `ctxbench compare IMPORTED RUN`: another tool's figures beside a ctxbench run of the same
//! server, TTFT per prompt length, with the import audit's caveats in the verdict: a figure
//! the other file cannot prove (cold requests, exact lengths) is shown without a verdict.

use ctxbench_schema::imported::ImportSource;
use ctxbench_schema::record::Results;

use crate::stats::tail::{n_needed, Tails, CONFIDENCE};

/// One prompt length on both sides.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// ctxbench's length (tokens, exact).
    pub context: u64,
    /// The imported point's length (its target or mean).
    pub imported_context: u64,
    /// ctxbench's kept cold samples, their median TTFT (ms) and p90 (where n allows).
    pub ours: Side,
    /// The imported figures.
    pub theirs: Side,
    /// imported median / ctxbench median.
    pub ratio: Option<f64>,
    /// The verdict, or why there is none.
    pub verdict: String,
}

/// One side's TTFT at one length.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Side {
    /// Samples behind it.
    pub n: u64,
    /// Median TTFT, ms.
    pub median_ms: Option<f64>,
    /// p90 TTFT, ms, where n reaches what a 95% interval needs.
    pub p90_ms: Option<f64>,
    /// Where the figure came from (`per-request samples`, `the tool's aggregate`).
    pub from: String,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Versus {
    /// The imported run's name (`aiperf 0.13.0`).
    pub imported: String,
    /// The ctxbench run's name.
    pub run: String,
    /// Rows at the lengths both have.
    pub rows: Vec<Row>,
    /// The audit's caveats that withhold verdicts.
    pub caveats: Vec<String>,
}

/// Compares `imported` (a `ctxbench import` output) with `run` (a ctxbench sweep). `None`
/// when `imported` was not imported.
pub fn build(imported: &Results, run: &Results) -> Option<Versus> {
    let src: &ImportSource = imported.header.imported.as_deref()?;
    let a = &src.audit;
    let mut caveats = Vec::new();
    if !a.cache_per_request {
        caveats.push(format!(
            "{} cannot show its requests were cold: {}",
            src.tool, a.cache
        ));
    }
    if !a.lengths_exact {
        caveats.push(format!(
            "{}'s prompt lengths are not the server's exact count per request: {}",
            src.tool, a.lengths
        ));
    }
    let mut rows = Vec::new();
    for &context in &run.header.config.contexts {
        let ours_vals: Vec<f64> = run
            .samples
            .iter()
            .filter(|s| s.context_tokens == context && s.usable())
            .filter_map(|s| s.ttft_ms)
            .collect();
        let Some(p) = src
            .points
            .iter()
            .find(|p| p.context_tokens.abs_diff(context) <= (context / 50).max(2))
        else {
            continue;
        };
        let at_len: Vec<_> = imported
            .samples
            .iter()
            .filter(|s| s.context_tokens == p.context_tokens)
            .collect();
        let cached = at_len.iter().filter(|s| s.contaminated).count();
        let theirs_vals: Vec<f64> = at_len
            .iter()
            .filter(|s| s.usable())
            .filter_map(|s| s.ttft_ms)
            .collect();
        let ours = side(&ours_vals, "ctxbench's kept cold samples");
        // The tool's own aggregate stands in only where no request's TTFT is in the file;
        // if any request read from the cache, that aggregate mixes them in.
        let mixed = theirs_vals.is_empty() && cached > 0;
        let theirs = if theirs_vals.is_empty() {
            let m = p.metrics.iter().find(|m| m.name == "ttft_ms");
            let pct =
                |q: f64| m.and_then(|m| m.percentiles.iter().find(|x| (x.q - q).abs() < 1e-9));
            Side {
                n: p.requests,
                median_ms: pct(0.5).map(|x| x.value),
                p90_ms: pct(0.9).filter(|x| x.caveat.is_none()).map(|x| x.value),
                from: "the tool's aggregate".into(),
            }
        } else {
            side(
                &theirs_vals,
                "per-request samples, those read from the cache left out",
            )
        };
        let ratio = match (theirs.median_ms, ours.median_ms) {
            (Some(t), Some(o)) if o > 0.0 => Some(t / o),
            _ => None,
        };
        let verdict = if mixed {
            format!("no verdict: the tool's figure mixes in {cached} request(s) its own file shows were served from the cache")
        } else {
            verdict(ratio, &ours, &theirs, &caveats)
        };
        rows.push(Row {
            context,
            imported_context: p.context_tokens,
            ours,
            theirs,
            ratio,
            verdict,
        });
    }
    Some(Versus {
        imported: imported
            .header
            .label
            .clone()
            .unwrap_or_else(|| src.tool.clone()),
        run: run
            .header
            .label
            .clone()
            .unwrap_or_else(|| "ctxbench".into()),
        rows,
        caveats,
    })
}

fn side(vals: &[f64], from: &str) -> Side {
    let mut v = vals.to_vec();
    v.sort_by(f64::total_cmp);
    let median = (!v.is_empty()).then(|| {
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    });
    let p90 = Tails::of(v.iter().copied()).and_then(|t| {
        t.levels
            .iter()
            .find(|x| x.name == "p90")
            .and_then(|x| x.value)
    });
    Side {
        n: v.len() as u64,
        median_ms: median,
        p90_ms: p90,
        from: from.into(),
    }
}

/// The verdict on the medians: withheld when the imported file cannot prove its figure, or
/// either side has too few samples; else whether they agree within 10%.
fn verdict(ratio: Option<f64>, ours: &Side, theirs: &Side, caveats: &[String]) -> String {
    let Some(r) = ratio else {
        return "no verdict: a side has no TTFT at this length".into();
    };
    if !caveats.is_empty() {
        return "no verdict: the imported figure is not proven cold at an exact length (see caveats)".into();
    }
    if ours.n < 5 || theirs.n < 5 {
        return format!(
            "no verdict: too few samples (n = {} and {})",
            ours.n, theirs.n
        );
    }
    if (r - 1.0).abs() <= 0.10 {
        "agree within 10%".into()
    } else if r > 1.0 {
        format!("the imported TTFT is {:.0}% slower", (r - 1.0) * 100.0)
    } else {
        format!("the imported TTFT is {:.0}% faster", (1.0 - r) * 100.0)
    }
}

/// The comparison in words, one table row per length.
pub fn lines(v: &Versus) -> Vec<String> {
    let f = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into());
    let mut out = vec![
        format!(
            "TTFT per prompt length: {} (imported) beside {} (ctxbench)",
            v.imported, v.run
        ),
        format!(
            "{:>8} {:>8} | {:>5} {:>10} {:>10} | {:>5} {:>10} {:>10} | {:>6} | verdict",
            "tokens", "theirs", "n", "median ms", "p90 ms", "n", "median ms", "p90 ms", "ratio"
        ),
    ];
    for r in &v.rows {
        out.push(format!(
            "{:>8} {:>8} | {:>5} {:>10} {:>10} | {:>5} {:>10} {:>10} | {:>6} | {}",
            r.context,
            r.imported_context,
            r.ours.n,
            f(r.ours.median_ms),
            f(r.ours.p90_ms),
            r.theirs.n,
            f(r.theirs.median_ms),
            f(r.theirs.p90_ms),
            r.ratio
                .map(|x| format!("{x:.2}"))
                .unwrap_or_else(|| "—".into()),
            r.verdict
        ));
    }
    if v.rows.is_empty() {
        out.push("no prompt length in common (within 2%)".into());
    }
    out.push(format!(
        "left: ctxbench; right: imported ({}). p90 shown only where n ≥ {} (a distribution-free {:.0}% interval).",
        v.rows.first().map(|r| r.theirs.from.as_str()).unwrap_or("—"),
        n_needed(0.9, CONFIDENCE),
        CONFIDENCE * 100.0
    ));
    out.extend(v.caveats.iter().map(|c| format!("caveat: {c}")));
    out
}
