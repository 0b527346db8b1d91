//! SVG plots (plotters' SVG backend): each metric against context length on a log-scaled x
//! axis, medians with min–max whiskers, fits overlaid (dashed where extrapolated), one colour
//! per run; and the B/A ratio plot of a comparison.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{fmt_ctx, RenderError};
use crate::compare::Comparison;
use crate::report::{Report, RunReport};
use crate::stats::metric::Metric;
use crate::stats::Spread;

/// One rendered plot.
#[derive(Debug, Clone)]
pub struct Plot {
    /// File-name stem, e.g. `ttft_ms`.
    pub name: String,
    /// Title shown above the plot.
    pub title: String,
    /// The SVG document.
    pub svg: String,
}

const SIZE: (u32, u32) = (760, 430);

/// Colour-blind-safe palette (Okabe & Ito).
const COLORS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn perr<E: std::fmt::Display>(e: E) -> RenderError {
    RenderError::Plot(e.to_string())
}

/// A context length for an axis label: 1024 → 1k, 1536 → 1.5k.
fn axis_tokens(x: f64) -> String {
    if x >= 1024.0 {
        let k = x / 1024.0;
        if (k - k.round()).abs() < 0.05 {
            fmt_ctx((k.round() as u64) * 1024)
        } else {
            format!("{k:.1}k")
        }
    } else {
        format!("{x:.0}")
    }
}

/// What one run contributes to one metric's plot.
struct Series {
    label: String,
    /// (L, spread) per measured point.
    points: Vec<(f64, Spread)>,
    /// Fit curve: (L, value, extrapolated).
    curve: Vec<(f64, f64, bool)>,
    /// Extrapolation band at the server maximum: (L, low, high).
    band: Option<(f64, f64, f64)>,
}

fn log_grid(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..=n)
        .map(|i| (lo.ln() + (hi.ln() - lo.ln()) * i as f64 / n as f64).exp())
        .collect()
}

fn series(run: &RunReport, metric: Metric) -> Series {
    let points: Vec<(f64, Spread)> = run
        .points
        .iter()
        .filter_map(|p| Some((p.context_tokens as f64, metric.spread(p)?)))
        .collect();
    // Prefill and decode rates are derived from the TTFT and step fits: L / TTFT(L), 1 / step(L).
    let base = match metric {
        Metric::TtftMs | Metric::PrefillTokensPerS => run.ttft_fit.as_ref(),
        Metric::DecodeTokensPerS | Metric::MsPerStep => run.step_fit.as_ref(),
    };
    let transform = |l: f64, v: f64| -> f64 {
        match metric {
            Metric::TtftMs | Metric::MsPerStep => v,
            Metric::PrefillTokensPerS => l / (v / 1000.0),
            Metric::DecodeTokensPerS => 1000.0 / v,
        }
    };
    let mut curve = Vec::new();
    let mut band = None;
    if let (Some(f), Some(first), Some(last)) = (base, points.first(), points.last()) {
        let end = f
            .extrapolation
            .map(|e| e.context_tokens as f64)
            .unwrap_or(last.0)
            .max(last.0);
        for l in log_grid(first.0, end, 80) {
            let v = transform(l, f.fit.predict(l));
            if v.is_finite() && v > 0.0 {
                curve.push((l, v, l > last.0 * 1.0001));
            }
        }
        if let Some(e) = f.extrapolation {
            let l = e.context_tokens as f64;
            let (a, b) = (transform(l, e.low), transform(l, e.high));
            if a.is_finite() && b.is_finite() {
                band = Some((l, a.min(b), a.max(b)));
            }
        }
    }
    Series {
        label: run.label.clone(),
        points,
        curve,
        band,
    }
}

fn title(metric: Metric) -> String {
    match metric {
        Metric::TtftMs => "Time to first token (ms)".into(),
        Metric::PrefillTokensPerS => "Prefill speed (tokens/s)".into(),
        Metric::DecodeTokensPerS => "Decode speed (tokens/s)".into(),
        Metric::MsPerStep => "Time per decode step (ms)".into(),
    }
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The x axis is log2(L) on a linear coordinate, so that ticks fall on 1k, 2k, 4k, … (a
/// plotters log axis puts them at 2.9k, 4.9k, …). Callers pass L through this.
fn lx(l: f64) -> f64 {
    l.max(1.0).log2()
}

fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    x: (f64, f64),
    y: (f64, f64),
    y_desc: &str,
    log2_y: bool,
) -> Result<Chart<'a, 'b>, RenderError> {
    root.fill(&WHITE).map_err(perr)?;
    let (x0, x1) = (lx(x.0), lx(x.1));
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y.0..y.1)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("context length (tokens, log scale)")
        .y_desc(y_desc)
        .x_labels(((x1 - x0).ceil() as usize + 1).max(2))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .x_label_formatter(&|v| {
            // Only powers of two get a label; plotters may add half steps.
            if (v - v.round()).abs() < 1e-6 {
                axis_tokens(v.round().exp2())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| {
            if log2_y {
                format!("×{}", super::num(v.exp2()))
            } else {
                super::num(*v)
            }
        })
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(perr)?;
    Ok(chart)
}

fn metric_plot(report: &Report, metric: Metric) -> Result<Option<Plot>, RenderError> {
    let all: Vec<Series> = report.runs.iter().map(|r| series(r, metric)).collect();
    let xs: Vec<f64> = all
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.0)
                .chain(s.curve.iter().map(|c| c.0))
        })
        .collect();
    if xs.is_empty() {
        return Ok(None);
    }
    let ys = all.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1.max)
            .chain(s.curve.iter().map(|c| c.1))
            .chain(s.band.map(|b| b.2))
    });
    let ymax = ys.fold(0.0f64, f64::max).max(1e-9) * 1.08;
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min) / 1.25;
    let xmax = xs.iter().copied().fold(0.0, f64::max) * 1.25;
    let label_octaves = 140.0 * (lx(xmax) - lx(xmin)) / (SIZE.0 as f64 - 100.0) + 0.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let caption = title(metric);
        let mut chart = frame(
            &root,
            &caption,
            (xmin, xmax),
            (0.0, ymax),
            metric.unit(),
            false,
        )?;
        for (i, s) in all.iter().enumerate() {
            let c = color(i);
            let measured: Vec<(f64, f64)> = s
                .curve
                .iter()
                .filter(|p| !p.2)
                .map(|p| (lx(p.0), p.1))
                .collect();
            let extrap: Vec<(f64, f64)> = s
                .curve
                .iter()
                .skip(measured.len().saturating_sub(1))
                .map(|p| (lx(p.0), p.1))
                .collect();
            if measured.len() > 1 {
                chart
                    .draw_series(LineSeries::new(measured, c.mix(0.7).stroke_width(2)))
                    .map_err(perr)?
                    .label(format!("{} fit", s.label))
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 18, y)], c.stroke_width(2))
                    });
            }
            if extrap.len() > 1 && s.curve.iter().any(|p| p.2) {
                chart
                    .draw_series(DashedLineSeries::new(
                        extrap,
                        6,
                        5,
                        c.mix(0.7).stroke_width(2),
                    ))
                    .map_err(perr)?;
            }
            if let Some((l, lo, hi)) = s.band {
                let l = lx(l);
                chart
                    .draw_series([
                        PathElement::new([(l, lo), (l, hi)], c.stroke_width(3)),
                        PathElement::new([(l - 0.06, lo), (l + 0.06, lo)], c.stroke_width(2)),
                        PathElement::new([(l - 0.06, hi), (l + 0.06, hi)], c.stroke_width(2)),
                    ])
                    .map_err(perr)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        "extrapolated (90% band)",
                        // The label must end left of the band: ~140 px of text, in octaves.
                        (l - label_octaves, hi),
                        ("sans-serif", 13).into_font().color(&c),
                    )))
                    .map_err(perr)?;
            }
            chart
                .draw_series(s.points.iter().map(|(l, sp)| {
                    PathElement::new([(lx(*l), sp.min), (lx(*l), sp.max)], c.stroke_width(1))
                }))
                .map_err(perr)?;
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|(l, sp)| Circle::new((lx(*l), sp.median), 4, c.filled())),
                )
                .map_err(perr)?
                .label(format!("{} median (min–max)", s.label))
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
        }
        chart
            .configure_series_labels()
            .position(match metric {
                Metric::TtftMs | Metric::MsPerStep => SeriesLabelPosition::UpperLeft,
                _ => SeriesLabelPosition::UpperRight,
            })
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(perr)?;
        root.present().map_err(perr)?;
    }
    Ok(Some(Plot {
        name: metric.key().to_owned(),
        title: title(metric),
        svg,
    }))
}

fn acceptance_plot(report: &Report) -> Result<Option<Plot>, RenderError> {
    let runs: Vec<&RunReport> = report
        .runs
        .iter()
        .filter(|r| !r.acceptance.is_empty())
        .collect();
    if runs.is_empty() {
        return Ok(None);
    }
    let xs: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.acceptance.iter().map(|a| a.context_tokens as f64))
        .collect();
    let ymax = runs
        .iter()
        .flat_map(|r| r.acceptance.iter().map(|a| a.accept_length.max))
        .fold(1.0f64, f64::max)
        * 1.1;
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min) / 1.25;
    let xmax = xs.iter().copied().fold(0.0, f64::max) * 1.25;
    let mut svg = String::new();
    let t = "Speculative acceptance length (tokens per verify step)";
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = frame(&root, t, (xmin, xmax), (0.0, ymax), "tokens/step", false)?;
        for (i, r) in report.runs.iter().enumerate() {
            if r.acceptance.is_empty() {
                continue;
            }
            let c = color(i);
            let pts: Vec<(f64, f64)> = r
                .acceptance
                .iter()
                .map(|a| (lx(a.context_tokens as f64), a.accept_length.median))
                .collect();
            chart
                .draw_series(r.acceptance.iter().map(|a| {
                    let l = lx(a.context_tokens as f64);
                    PathElement::new([(l, a.accept_length.min), (l, a.accept_length.max)], c)
                }))
                .map_err(perr)?;
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(perr)?;
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))
                .map_err(perr)?
                .label(r.label.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(perr)?;
        root.present().map_err(perr)?;
    }
    Ok(Some(Plot {
        name: "acceptance_length".into(),
        title: t.into(),
        svg,
    }))
}

/// Every plot of a report: the four metrics, and acceptance length when measured.
pub fn report_plots(report: &Report) -> Result<Vec<Plot>, RenderError> {
    let mut out = Vec::new();
    for m in Metric::ALL {
        out.extend(metric_plot(report, m)?);
    }
    out.extend(acceptance_plot(report)?);
    Ok(out)
}

/// B/A ratio per context and metric with interval whiskers, a line at 1 (no change).
pub fn compare_plot(cmp: &Comparison) -> Result<String, RenderError> {
    let rows = cmp.versus.iter().flat_map(|v| v.rows.iter());
    let xs: Vec<f64> = rows.clone().map(|r| r.context_tokens as f64).collect();
    let ys: Vec<f64> = rows
        .filter_map(|r| r.interval)
        .flat_map(|c| [c.low, c.high])
        .filter(|v| v.is_finite())
        .collect();
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min).min(1024.0) / 1.3;
    let xmax = xs.iter().copied().fold(0.0, f64::max).max(2048.0) * 1.3;
    // Ratios are drawn on a log2 scale, so that ×2 and ×0.5 are equally far from ×1.
    let ymax = (ys.iter().copied().fold(1.0f64, f64::max) * 1.15).log2();
    let ymin = (ys
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(1.0f64, f64::min)
        / 1.15)
        .log2();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let caption = match cmp.versus.as_slice() {
            [v] => format!(
                "{} / {} (B/A, {:.0}% CI)",
                v.run.label,
                cmp.baseline.label,
                cmp.level * 100.0
            ),
            _ => format!(
                "runs / {} (B/A, {:.0}% CI)",
                cmp.baseline.label,
                cmp.level * 100.0
            ),
        };
        let mut chart = frame(
            &root,
            &caption,
            (xmin, xmax),
            (ymin, ymax),
            "B / A (log scale)",
            true,
        )?;
        chart
            .draw_series(DashedLineSeries::new(
                [(lx(xmin), 0.0), (lx(xmax), 0.0)],
                5,
                4,
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(perr)?;
        for (vi, v) in cmp.versus.iter().enumerate() {
            for (mi, m) in Metric::ALL.into_iter().enumerate() {
                let c = color(mi);
                // Spread the metrics a little along x so that their whiskers do not overlap.
                let shift = 0.06 * (mi as f64 - 1.5) + 0.03 * vi as f64;
                // Only cells with an interval: a ratio without one is not a result.
                let pts: Vec<(f64, f64, crate::stats::significance::RatioInterval)> = v
                    .rows
                    .iter()
                    .filter(|r| r.metric == m)
                    .filter_map(|r| {
                        Some((lx(r.context_tokens as f64) + shift, r.ratio?, r.interval?))
                    })
                    .collect();
                chart
                    .draw_series(pts.iter().map(|(x, _, ci)| {
                        PathElement::new(
                            [
                                (*x, ci.low.max(1e-9).log2()),
                                (*x, ci.high.max(1e-9).log2()),
                            ],
                            c.stroke_width(2),
                        )
                    }))
                    .map_err(perr)?;
                let label = if cmp.versus.len() > 1 {
                    format!("{} ({})", m.label(), v.run.label)
                } else {
                    m.label().to_owned()
                };
                chart
                    .draw_series(pts.iter().map(|(x, ratio, _)| {
                        Circle::new((*x, ratio.max(1e-9).log2()), 4, c.filled())
                    }))
                    .map_err(perr)?
                    .label(label)
                    .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(perr)?;
        root.present().map_err(perr)?;
    }
    Ok(svg)
}
