//! SVG plots (plotters' SVG backend): each metric against context length on a log-scaled x
//! axis, medians with min–max whiskers, fits overlaid (dashed where extrapolated), one colour
//! per run; and the B/A ratio plot of a comparison.

mod draw;
mod replay;
mod retention;
mod speculation;
mod warm;
pub use draw::Plot;
pub use replay::replay_plots;
pub use retention::retention_plots;
pub use speculation::{
    acceptance_plot as spec_acceptance_plot, speculation_plots, speculation_plots_of, speedup_plot,
    AcceptanceSeries,
};
pub use warm::warm_plots;

use draw::{
    color, dot_key, dotted_line, frame, legend, line_key, lx, perr, series, title, Chart, Series,
    SIZE,
};
use plotters::coord::Shift;
use plotters::prelude::*;

use ctxbench_schema::units::fmt_ctx;

use crate::format::RenderError;
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::report::{Report, RunReport};
use ctxbench_stats::stats::metric::Metric;

fn metric_plot(report: &Report, metric: Metric) -> Result<Option<Plot>, RenderError> {
    let all: Vec<Series> = report.runs.iter().map(|r| series(r, metric)).collect();
    let Some((x, y)) = metric_bounds(&all) else {
        return Ok(None);
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let caption = title(metric);
        let mut chart = frame(&root, &caption, x, y, metric.unit(), false)?;
        for (i, s) in all.iter().enumerate() {
            draw_series(&mut chart, s, color(i))?;
        }
        // One legend entry for the extrapolation style, whatever the number of runs: a
        // label beside each band overlapped when runs share a maximum (readme-audit L15).
        if all.iter().any(|s| s.band.is_some()) {
            let grey = RGBColor(90, 90, 90);
            chart
                .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
                .map_err(perr)?
                .label("extrapolated (dashed; bar: 90% band)")
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new([(0, 0), (5, 0)], grey.stroke_width(2))
                        + PathElement::new([(8, 0), (12, 0)], grey.stroke_width(2))
                        + PathElement::new([(16, -6), (16, 6)], grey.stroke_width(3))
                });
        }
        let at = match metric {
            Metric::TtftMs | Metric::MsPerStep => SeriesLabelPosition::UpperLeft,
            _ => SeriesLabelPosition::UpperRight,
        };
        legend(&mut chart, at)?;
        root.present().map_err(perr)?;
    }
    Ok(Some(Plot {
        name: metric.key().to_owned(),
        title: title(metric),
        caption: format!(
            "{}: median and min–max per context; lines: fits (dashed: extrapolated)",
            title(metric)
        ),
        svg,
    }))
}

/// The x and y ranges that hold every point, curve and band, with a margin; `None` when
/// there is nothing to plot.
fn metric_bounds(all: &[Series]) -> Option<((f64, f64), (f64, f64))> {
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
        return None;
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
    Some(((xmin, xmax), (0.0, ymax)))
}

/// One run on a metric's plot: its fit (dashed where extrapolated), the extrapolation
/// band, and its medians with min–max whiskers.
fn draw_series(chart: &mut Chart, s: &Series, c: RGBColor) -> Result<(), RenderError> {
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
            .legend(line_key(c.stroke_width(2)));
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
        .legend(dot_key(c));
    Ok(())
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
            dotted_line(&mut chart, &pts, r.label.clone(), c)?;
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
        root.present().map_err(perr)?;
    }
    Ok(Some(Plot {
        name: "acceptance_length".into(),
        title: t.into(),
        caption: format!("{t}: median and min–max per context; lines: fits (dashed: extrapolated)"),
        svg,
    }))
}

/// Every plot of a report: the four metrics, acceptance length when measured, and the
/// capacity map's four metrics for a run with `--concurrency` beyond 1, and the warm
/// append plot (TTFT_inc vs L per N, cold L + N beside) for a `--mode append` run, and the
/// retention heat maps for a `--mode retention` run.
pub fn report_plots(report: &Report) -> Result<Vec<Plot>, RenderError> {
    let mut out = Vec::new();
    for m in Metric::ALL {
        out.extend(metric_plot(report, m)?);
    }
    out.extend(acceptance_plot(report)?);
    out.extend(capacity_plots(report)?);
    out.extend(warm_plots(report)?);
    out.extend(retention_plots(report)?);
    Ok(out)
}

/// The x range of the compared contexts and the y range (log2 of B/A) of the intervals.
fn compare_bounds(cmp: &Comparison) -> ((f64, f64), (f64, f64)) {
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
    ((xmin, xmax), (ymin, ymax))
}

/// B/A ratio per context and metric with interval whiskers, a line at 1 (no change).
pub fn compare_plot(cmp: &Comparison) -> Result<String, RenderError> {
    let ((xmin, xmax), (ymin, ymax)) = compare_bounds(cmp);
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
                let pts: Vec<(f64, f64, ctxbench_stats::stats::significance::RatioInterval)> = v
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
                    .legend(dot_key(c));
            }
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
        root.present().map_err(perr)?;
    }
    Ok(svg)
}

/// One metric of the capacity map, plotted against concurrency with one line per context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CapMetric {
    Aggregate,
    MsPerStep,
    TtftMedian,
    TtftWorst,
}

impl CapMetric {
    const ALL: [CapMetric; 4] = [
        CapMetric::Aggregate,
        CapMetric::MsPerStep,
        CapMetric::TtftMedian,
        CapMetric::TtftWorst,
    ];

    fn key(self) -> &'static str {
        match self {
            CapMetric::Aggregate => "capacity_aggregate_decode_tokens_per_s",
            CapMetric::MsPerStep => "capacity_ms_per_step",
            CapMetric::TtftMedian => "capacity_ttft_median_ms",
            CapMetric::TtftWorst => "capacity_ttft_worst_ms",
        }
    }

    fn title(self) -> &'static str {
        match self {
            CapMetric::Aggregate => "Capacity: aggregate decode rate (tokens/s, all requests)",
            CapMetric::MsPerStep => "Capacity: time per decode step, per request (ms)",
            CapMetric::TtftMedian => "Capacity: median time to first token (ms)",
            CapMetric::TtftWorst => "Capacity: worst time to first token (ms)",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            CapMetric::Aggregate => "tokens/s",
            CapMetric::MsPerStep => "ms (log scale)",
            CapMetric::TtftMedian | CapMetric::TtftWorst => "ms (log scale)",
        }
    }

    /// Times span orders of magnitude from the shortest context to the longest: a log
    /// axis keeps the short contexts' lines readable. Throughput stays linear, so that
    /// "doubling c doubles the total" reads as a straight rise.
    fn log_y(self) -> bool {
        self != CapMetric::Aggregate
    }

    /// The cell's value; for the aggregate of a cell without a common window, the
    /// whole-wave output rate (drawn hollow, like every cell that did not run together).
    fn value(self, c: &ctxbench_stats::capacity::Cell) -> Option<f64> {
        match self {
            CapMetric::Aggregate => c
                .aggregate_decode_tokens_per_s
                .or(c.wave_output_tokens_per_s),
            CapMetric::MsPerStep => c.ms_per_step,
            CapMetric::TtftMedian => c.ttft_median_ms,
            CapMetric::TtftWorst => c.ttft_worst_ms,
        }
        .filter(|v| v.is_finite() && *v > 0.0)
    }
}

/// How a cell ran, as its marker shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CellMark {
    /// All c requests decoded together: filled circle.
    Together,
    /// Some requests waited for a slot or were preempted (recomputed): hollow circle.
    Queued,
    /// No common decode window (too short to time): hollow square.
    NoOverlap,
    /// Requests failed and none was seen waiting: a cross (the cell is incomplete).
    Failed,
}

fn cell_mark(c: &ctxbench_stats::capacity::Cell) -> CellMark {
    if c.queued > 0 || c.preempted > 0 {
        CellMark::Queued
    } else if c.failed > 0 {
        CellMark::Failed
    } else if c.no_overlap_waves > 0 {
        CellMark::NoOverlap
    } else {
        CellMark::Together
    }
}

/// What a row of the capacity legend shows.
enum LegendGlyph {
    /// A context's line.
    Line(RGBColor),
    /// A cell marker.
    Mark(CellMark),
    /// The knee ring.
    Knee,
}

/// Draws the marker of a cell at `p` in `col` (on the plot, or in the legend's pixels).
fn draw_mark<DB: DrawingBackend, CT: plotters::coord::CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    p: CT::From,
    mark: CellMark,
    col: RGBColor,
) -> Result<(), RenderError>
where
    CT::From: Clone,
{
    match mark {
        CellMark::Together => area.draw(&Circle::new(p, 5, col.filled())),
        CellMark::Queued => area.draw(&Circle::new(p, 5, col.stroke_width(2))),
        CellMark::NoOverlap => area
            .draw(&(EmptyElement::at(p) + Rectangle::new([(-5, -5), (5, 5)], col.stroke_width(2)))),
        CellMark::Failed => area.draw(&Cross::new(p, 5, col.stroke_width(2))),
    }
    .map_err(perr)
}

/// An axis tick: whole numbers without decimals (`800`, not `800.0`).
fn tick(v: f64) -> String {
    if v.abs() >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        ctxbench_schema::units::num(v)
    }
}

/// A cell on a capacity plot: x (log2 c), y (the metric, log10 on a log axis), marker.
type CapPoint = (f64, f64, CellMark);

/// Width of the legend column right of a capacity plot.
const CAP_LEGEND_W: u32 = 210;

/// One plot per capacity-map metric for every run with a map (`--concurrency` beyond 1):
/// concurrency on x (log scale), one line per context, the knee ringed, cells that queued
/// or had no common window drawn hollow, all explained in a legend beside the plot.
pub fn capacity_plots(report: &Report) -> Result<Vec<Plot>, RenderError> {
    let with: Vec<&RunReport> = report
        .runs
        .iter()
        .filter(|r| r.capacity.as_ref().is_some_and(|m| !m.cells.is_empty()))
        .collect();
    let mut out = Vec::new();
    for (i, run) in with.iter().enumerate() {
        let Some(map) = &run.capacity else { continue };
        // With several grids, each gets its own set, named after the run.
        let (suffix, of) = if with.len() > 1 {
            (format!("_{}", i + 1), format!(" — {}", run.label))
        } else {
            (String::new(), String::new())
        };
        for m in CapMetric::ALL {
            out.extend(capacity_plot(map, m, &suffix, &of)?);
        }
    }
    Ok(out)
}

/// One capacity-map metric: concurrency across, one line per context, the legend beside.
fn capacity_plot(
    map: &ctxbench_stats::capacity::CapacityMap,
    metric: CapMetric,
    suffix: &str,
    of: &str,
) -> Result<Option<Plot>, RenderError> {
    let rows = capacity_rows(map, metric);
    let Some(y) = capacity_y_range(&rows, metric) else {
        return Ok(None);
    };
    let cmin = map.levels.iter().copied().min().unwrap_or(1);
    let cmax = map.levels.iter().copied().max().unwrap_or(1).max(cmin + 1);
    let x = (lx(f64::from(cmin)) - 0.3, lx(f64::from(cmax)) + 0.3);
    let title = format!("{}{of}", metric.title());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let (left, right) = root.split_horizontally(SIZE.0 - CAP_LEGEND_W);
        let mut chart = capacity_frame(&left, &title, metric, x, y)?;
        let mut knees = 0usize;
        for (i, (ctx, pts)) in rows.iter().enumerate() {
            if draw_capacity_line(&mut chart, map, *ctx, pts, color(i))? {
                knees += 1;
            }
        }
        draw_capacity_legend(&right, &rows, knees > 0)?;
        root.present().map_err(perr)?;
    }
    let mut caption = format!(
        "{}: x = concurrent requests c, one line per context; filled = all c requests decoded together, hollow circle = some requests waited for a slot or were preempted, hollow square = no common decode window, cross = requests failed (incomplete cell); ringed = the knee",
        metric.title()
    );
    if metric == CapMetric::Aggregate {
        caption.push_str(
            "; where there was no common window the value is output tokens over the whole wave",
        );
    }
    Ok(Some(Plot {
        name: format!("{}{suffix}", metric.key()),
        title,
        caption,
        svg,
    }))
}

/// Per context: (x, y, mark) of each cell that has this metric.
fn capacity_rows(
    map: &ctxbench_stats::capacity::CapacityMap,
    metric: CapMetric,
) -> Vec<(u64, Vec<CapPoint>)> {
    let mut contexts: Vec<u64> = map.cells.iter().map(|c| c.context_tokens).collect();
    contexts.dedup();
    let y = |v: f64| if metric.log_y() { v.log10() } else { v };
    contexts
        .iter()
        .map(|&ctx| {
            let pts = map
                .cells
                .iter()
                .filter(|c| c.context_tokens == ctx)
                .filter_map(|c| {
                    let v = metric.value(c)?;
                    Some((lx(f64::from(c.concurrency)), y(v), cell_mark(c)))
                })
                .collect();
            (ctx, pts)
        })
        .collect()
}

/// The y range of the cells, or `None` when no cell has this metric.
fn capacity_y_range(rows: &[(u64, Vec<CapPoint>)], metric: CapMetric) -> Option<(f64, f64)> {
    let ys: Vec<f64> = rows.iter().flat_map(|r| r.1.iter().map(|p| p.1)).collect();
    if ys.is_empty() {
        return None;
    }
    let (ylo, yhi) = (
        ys.iter().copied().fold(f64::INFINITY, f64::min),
        ys.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    // Log axes span whole decades, so that the labelled ticks (1, 10, 100, …) are in view.
    Some(if metric.log_y() {
        (ylo.floor(), yhi.ceil().max(ylo.floor() + 1.0))
    } else {
        (0.0, yhi.max(1e-9) * 1.1)
    })
}

/// The capacity plot's axes: powers of two across, decades (or linear) up.
fn capacity_frame<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    metric: CapMetric,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Result<Chart<'a, 'b>, RenderError> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(perr)?;
    let decades = (y1 - y0).round() as usize;
    chart
        .configure_mesh()
        .x_desc("concurrent requests c (log scale)")
        .y_desc(metric.unit())
        .x_labels(((x1 - x0).ceil() as usize + 1).max(2))
        .y_labels(if metric.log_y() { decades + 1 } else { 8 })
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
                format!("{}", v.round().exp2() as u64)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| {
            if !metric.log_y() {
                tick(*v)
            } else if (v - v.round()).abs() < 1e-6 {
                tick(10f64.powf(v.round()))
            } else {
                String::new()
            }
        })
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(perr)?;
    Ok(chart)
}

/// One context's line and cell markers; rings its knee and says whether it did.
fn draw_capacity_line(
    chart: &mut Chart,
    map: &ctxbench_stats::capacity::CapacityMap,
    ctx: u64,
    pts: &[CapPoint],
    col: RGBColor,
) -> Result<bool, RenderError> {
    if pts.len() > 1 {
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                col.stroke_width(2),
            ))
            .map_err(perr)?;
    }
    for p in pts {
        draw_mark(chart.plotting_area(), (p.0, p.1), p.2, col)?;
    }
    // The knee: ringed, at this context's knee cell when this metric has a value there.
    let knee = map
        .knees
        .iter()
        .find(|k| k.context_tokens == ctx)
        .and_then(|k| k.concurrency)
        .and_then(|c| {
            let x = lx(f64::from(c));
            pts.iter().find(|p| (p.0 - x).abs() < 1e-9)
        });
    if let Some(p) = knee {
        chart
            .draw_series(std::iter::once(Circle::new(
                (p.0, p.1),
                10,
                BLACK.stroke_width(2),
            )))
            .map_err(perr)?;
    }
    Ok(knee.is_some())
}

/// The legend beside a capacity plot: each context's line, each marker drawn, the knee.
fn draw_capacity_legend(
    area: &DrawingArea<SVGBackend, Shift>,
    rows: &[(u64, Vec<CapPoint>)],
    knee: bool,
) -> Result<(), RenderError> {
    let mut marks: Vec<CellMark> = rows.iter().flat_map(|r| r.1.iter().map(|p| p.2)).collect();
    marks.sort_by_key(|m| *m as u8);
    marks.dedup();
    let mut entries: Vec<(LegendGlyph, String)> = rows
        .iter()
        .enumerate()
        .map(|(i, (ctx, _))| (LegendGlyph::Line(color(i)), fmt_ctx(*ctx)))
        .collect();
    for m in &marks {
        let text = match m {
            CellMark::Together => "all c ran together",
            CellMark::Queued => "queued: some waited (or were preempted)",
            CellMark::NoOverlap => "no common window",
            CellMark::Failed => "requests failed",
        };
        entries.push((LegendGlyph::Mark(*m), text.to_owned()));
    }
    if knee {
        entries.push((LegendGlyph::Knee, "knee (last c that pays)".to_owned()));
    }
    area.draw(&Text::new(
        "context".to_owned(),
        (8, 40),
        ("sans-serif", 14).into_font(),
    ))
    .map_err(perr)?;
    let grey = RGBColor(90, 90, 90);
    let mut yy = 72i32;
    for (i, (glyph, text)) in entries.iter().enumerate() {
        // A gap between the contexts and the marker explanations.
        if i == rows.len() {
            yy += 10;
        }
        match glyph {
            LegendGlyph::Line(col) => {
                area.draw(&PathElement::new([(8, yy), (30, yy)], col.stroke_width(2)))
                    .map_err(perr)?;
                area.draw(&Circle::new((19, yy), 4, col.filled()))
                    .map_err(perr)?;
            }
            LegendGlyph::Mark(m) => draw_mark(area, (19, yy), *m, grey)?,
            LegendGlyph::Knee => area
                .draw(&Circle::new((19, yy), 10, BLACK.stroke_width(2)))
                .map_err(perr)?,
        }
        area.draw(&Text::new(
            text.clone(),
            (38, yy - 7),
            ("sans-serif", 13).into_font(),
        ))
        .map_err(perr)?;
        yy += 24;
    }
    Ok(())
}
