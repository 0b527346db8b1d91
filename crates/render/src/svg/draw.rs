//! The drawing primitives every plot shares: the canvas size, colours, legends and their keys,
//! the log-scaled frame, and the series a metric plot draws.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::format::RenderError;
use ctxbench_schema::units::fmt_ctx;
use ctxbench_stats::report::RunReport;
use ctxbench_stats::stats::metric::Metric;
use ctxbench_stats::stats::Spread;

/// One rendered plot.
#[derive(Debug, Clone)]
pub struct Plot {
    /// File-name stem, e.g. `ttft_ms`.
    pub name: String,
    /// Title shown above the plot.
    pub title: String,
    /// What the plot shows, in a sentence (the HTML report's figure caption).
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

pub(crate) const SIZE: (u32, u32) = (760, 430);

/// Colour-blind-safe palette (Okabe & Ito).
pub(crate) const COLORS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

pub(crate) fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

pub(crate) fn perr<E: std::fmt::Display>(e: E) -> RenderError {
    RenderError::Plot(e.to_string())
}

/// A context length for an axis label: 1024 → 1k, 1536 → 1.5k.
pub(crate) fn axis_tokens(x: f64) -> String {
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
pub(crate) struct Series {
    pub(crate) label: String,
    /// (L, spread) per measured point.
    pub(crate) points: Vec<(f64, Spread)>,
    /// Fit curve: (L, value, extrapolated).
    pub(crate) curve: Vec<(f64, f64, bool)>,
    /// Extrapolation band at the server maximum: (L, low, high).
    pub(crate) band: Option<(f64, f64, f64)>,
}

pub(crate) fn log_grid(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..=n)
        .map(|i| (lo.ln() + (hi.ln() - lo.ln()) * i as f64 / n as f64).exp())
        .collect()
}

pub(crate) fn series(run: &RunReport, metric: Metric) -> Series {
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

pub(crate) fn title(metric: Metric) -> String {
    match metric {
        Metric::TtftMs => "Time to first token (ms)".into(),
        Metric::PrefillTokensPerS => "Prefill speed (tokens/s)".into(),
        Metric::DecodeTokensPerS => "Decode speed (tokens/s)".into(),
        Metric::MsPerStep => "Time per decode step (ms)".into(),
    }
}

pub(crate) type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draws the chart's legend (its `.label`/`.legend` entries) at `at`, boxed alike on every
/// plot: a light background and border, 13 px labels.
pub(crate) fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    at: SeriesLabelPosition,
) -> Result<(), RenderError> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(perr)
}

/// A legend key for a series of points: one dot of `c`.
pub(crate) fn dot_key(c: RGBColor) -> impl Fn((i32, i32)) -> Circle<(i32, i32), i32> {
    move |(x, y)| Circle::new((x + 9, y), 4, c.filled())
}

/// A line through `pts` in `c` with a dot on each point, in the legend as `label` with a dot.
pub(crate) fn dotted_line<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    pts: &[(f64, f64)],
    label: String,
    c: RGBColor,
) -> Result<(), RenderError> {
    chart
        .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
        .map_err(perr)?;
    chart
        .draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))
        .map_err(perr)?
        .label(label)
        .legend(dot_key(c));
    Ok(())
}

/// A legend key for a line: 18 px of it, drawn in `style`.
pub(crate) fn line_key(
    style: impl Into<ShapeStyle>,
) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    let style = style.into();
    move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style)
}

/// A legend key for a band or a span: a 14 × 10 px box in `style`.
pub(crate) fn box_key(style: ShapeStyle) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], style)
}

/// The x axis is log2(L) on a linear coordinate, so that ticks fall on 1k, 2k, 4k, … (a
/// plotters log axis puts them at 2.9k, 4.9k, …). Callers pass L through this.
pub(crate) fn lx(l: f64) -> f64 {
    l.max(1.0).log2()
}

pub(crate) fn frame<'a, 'b>(
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
                format!("×{}", ctxbench_schema::units::num(v.exp2()))
            } else {
                ctxbench_schema::units::num(*v)
            }
        })
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(perr)?;
    Ok(chart)
}
