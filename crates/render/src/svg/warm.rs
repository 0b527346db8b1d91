//! The warm append plot: TTFT_inc against the cached prefix L, one line per appended N
//! (medians of proven hits with min–max whiskers), and beside each the same run's cold TTFT
//! of L + N (dashed, same colour) at the same L, so the gap between them is what the cache
//! saved.

use plotters::prelude::*;

use super::draw::{color, frame, legend, line_key, lx, perr, Plot, SIZE};
use crate::format::RenderError;
use ctxbench_stats::report::Report;
use ctxbench_stats::stats::warm::AppendCell;
use ctxbench_stats::stats::Spread;

/// One plot per run with append cells (named `warm_ttft_inc`, suffixed by the run's number
/// when several runs have them).
pub fn warm_plots(report: &Report) -> Result<Vec<Plot>, RenderError> {
    let runs: Vec<(&str, &[AppendCell])> = report
        .runs
        .iter()
        .filter_map(|r| {
            let w = r.warm.as_ref()?;
            w.append
                .iter()
                .any(|c| c.ttft_ms.is_some() || c.cold_ttft_ms.is_some())
                .then_some((r.label.as_str(), w.append.as_slice()))
        })
        .collect();
    let mut out = Vec::new();
    for (i, (label, cells)) in runs.iter().enumerate() {
        let mut p = append_plot(label, cells)?;
        if runs.len() > 1 {
            p.name.push_str(&format!("-{}", i + 1));
        }
        out.push(p);
    }
    Ok(out)
}

type Line = Vec<(f64, Spread)>;

/// Per N (and sessions at once, when several): the legend's name for it, the warm line and
/// the cold line, (L, spread) in L order.
fn lines(cells: &[AppendCell]) -> Vec<(String, Line, Line)> {
    let mut ns: Vec<(u32, u64)> = cells
        .iter()
        .map(|c| (c.concurrency, c.new_tokens))
        .collect();
    ns.sort_unstable();
    ns.dedup();
    ns.into_iter()
        .map(|(k, n)| {
            let here = cells
                .iter()
                .filter(move |c| (c.concurrency, c.new_tokens) == (k, n));
            let name = match k {
                1 => format!("N = {}", ctxbench_schema::units::fmt_ctx(n)),
                k => format!("N = {} ×{k} sessions", ctxbench_schema::units::fmt_ctx(n)),
            };
            let warm = here
                .clone()
                .filter_map(|c| Some((c.prefix_tokens as f64, c.ttft_ms?)))
                .collect();
            let cold = here
                .filter_map(|c| Some((c.prefix_tokens as f64, c.cold_ttft_ms?)))
                .collect();
            (name, warm, cold)
        })
        .collect()
}

fn append_plot(label: &str, cells: &[AppendCell]) -> Result<Plot, RenderError> {
    let all = lines(cells);
    let pts = || {
        all.iter()
            .flat_map(|(_, w, c)| w.iter().chain(c.iter()))
            .copied()
    };
    let xmin = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let xmax = pts().map(|p| p.0).fold(0.0, f64::max);
    let ymax = pts().map(|p| p.1.max).fold(0.0, f64::max).max(1e-9) * 1.08;
    let (xmin, xmax) = if xmin.is_finite() {
        (xmin / 1.25, xmax * 1.25)
    } else {
        (512.0, 2048.0)
    };
    let title = "Warm TTFT_inc vs cached prefix L";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = frame(&root, title, (xmin, xmax), (0.0, ymax), "ms", false)?;
        for (i, (n, warm, cold)) in all.iter().enumerate() {
            let c = color(i);
            if !warm.is_empty() {
                chart
                    .draw_series(LineSeries::new(
                        warm.iter().map(|(l, s)| (lx(*l), s.median)),
                        c.stroke_width(2),
                    ))
                    .map_err(perr)?
                    .label(format!("{n}: append to cached L"))
                    .legend(line_key(c.stroke_width(2)));
                chart
                    .draw_series(warm.iter().map(|(l, s)| {
                        PathElement::new([(lx(*l), s.min), (lx(*l), s.max)], c.stroke_width(1))
                    }))
                    .map_err(perr)?;
                chart
                    .draw_series(
                        warm.iter()
                            .map(|(l, s)| Circle::new((lx(*l), s.median), 4, c.filled())),
                    )
                    .map_err(perr)?;
            }
            if !cold.is_empty() {
                chart
                    .draw_series(DashedLineSeries::new(
                        cold.iter().map(|(l, s)| (lx(*l), s.median)),
                        6,
                        5,
                        c.mix(0.8).stroke_width(2),
                    ))
                    .map_err(perr)?
                    .label(format!("{n}: cold L + N"))
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new([(0, 0), (7, 0)], c.stroke_width(2))
                            + PathElement::new([(11, 0), (18, 0)], c.stroke_width(2))
                    });
                chart
                    .draw_series(
                        cold.iter()
                            .map(|(l, s)| Circle::new((lx(*l), s.median), 3, c.stroke_width(1))),
                    )
                    .map_err(perr)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(perr)?;
    }
    Ok(Plot {
        name: "warm_ttft_inc".to_owned(),
        title: title.to_owned(),
        caption: format!(
            "{label}: TTFT of appending N tokens to a cached prefix of L (solid: medians of proven hits, min–max whiskers) beside the cold TTFT of L + N at the same L (dashed)"
        ),
        svg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(m: f64) -> Option<Spread> {
        Spread::of([m * 0.9, m, m * 1.1])
    }

    fn cell(l: u64, n: u64, warm: f64, cold: f64) -> AppendCell {
        AppendCell {
            prefix_tokens: l,
            new_tokens: n,
            concurrency: 1,
            samples: 3,
            usable: 3,
            misses: 0,
            unverified: 0,
            ttft_ms: spread(warm),
            decode_tokens_per_s: None,
            cold_ttft_ms: spread(cold),
            speedup: Some(cold / warm),
        }
    }

    #[test]
    fn the_append_plot_draws_a_warm_and_a_cold_line_per_n() {
        let cells = [
            cell(1024, 64, 10.0, 50.0),
            cell(4096, 64, 12.0, 200.0),
            cell(1024, 256, 20.0, 60.0),
            cell(4096, 256, 30.0, 230.0),
        ];
        let p = append_plot("run", &cells).unwrap();
        assert_eq!(p.name, "warm_ttft_inc");
        for l in [
            "N = 64: append to cached L",
            "N = 64: cold L + N",
            "N = 256: append to cached L",
            "N = 256: cold L + N",
        ] {
            assert!(p.svg.contains(l), "{l}");
        }
        assert!(p.svg.contains("Warm TTFT_inc vs cached prefix L"));
    }
}
