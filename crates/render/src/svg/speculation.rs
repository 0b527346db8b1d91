//! The speculation plots: net decode speedup against context length with its interval band,
//! the line at 1 and L* marked; acceptance against context length, one labelled series each.

use plotters::prelude::*;

use super::draw::{
    box_key, color, dot_key, dotted_line, frame, legend, line_key, log_grid, lx, perr, Plot, SIZE,
};
use crate::format::RenderError;
use ctxbench_stats::compare::Comparison;
use ctxbench_stats::stats::speculation::{LStar, MeanInterval, SpecAnalysis, Speculation};

/// One labelled acceptance series (a run, a variant, a corpus): (context, mean with interval).
#[derive(Debug, Clone)]
pub struct AcceptanceSeries {
    /// Legend label.
    pub label: String,
    /// Per context length, the mean acceptance length and its interval.
    pub points: Vec<(u64, MeanInterval)>,
}

/// Both speculation plots of every analysed pair of a comparison (names suffixed by the
/// pair's number when there are several).
pub fn speculation_plots(cmp: &Comparison) -> Result<Vec<Plot>, RenderError> {
    let analysed: Vec<&SpecAnalysis> = cmp
        .versus
        .iter()
        .filter_map(|v| match &v.speculation {
            Some(Speculation::Analysed(a)) => Some(a.as_ref()),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (i, a) in analysed.iter().enumerate() {
        for mut p in speculation_plots_of(a)? {
            if analysed.len() > 1 {
                p.name.push_str(&format!("-{}", i + 1));
            }
            out.push(p);
        }
    }
    Ok(out)
}

/// The speedup plot of one analysis, and its acceptance plot when the speculative side
/// reported acceptance.
pub fn speculation_plots_of(a: &SpecAnalysis) -> Result<Vec<Plot>, RenderError> {
    let mut out = vec![speedup_plot(a)?];
    let series = AcceptanceSeries {
        label: a.speculative.clone(),
        points: a
            .points
            .iter()
            .filter_map(|p| Some((p.context_tokens, p.accept_length?)))
            .collect(),
    };
    if !series.points.is_empty() {
        out.push(acceptance_plot(&[series])?);
    }
    Ok(out)
}

/// (context, speedup, interval) of one measured length.
type SpeedupPoint = (f64, f64, Option<(f64, f64)>);

/// The speedup plot's data.
struct SpeedupData {
    /// The measured points.
    pts: Vec<SpeedupPoint>,
    /// The fitted curve: (context, speedup, extrapolated?).
    curve: Vec<(f64, f64, bool)>,
    /// The x range (tokens) and the y range (log2 of the speedup).
    x: (f64, f64),
    y: (f64, f64),
}

/// The speedup plot's points, fitted curve and ranges.
fn speedup_data(a: &SpecAnalysis) -> SpeedupData {
    let pts: Vec<SpeedupPoint> = a
        .points
        .iter()
        .filter_map(|p| {
            Some((
                p.context_tokens as f64,
                p.speedup?,
                p.speedup_interval.map(|i| (i.low, i.high)),
            ))
        })
        .filter(|p| p.1.is_finite() && p.1 > 0.0)
        .collect();
    let first = pts.first().map_or(1024.0, |p| p.0);
    let last = pts.last().map_or(2048.0, |p| p.0).max(first);
    // The fit is drawn past the data up to its crossing (or twice the longest length), never
    // past the server's maximum.
    let fit_end = a.fit.as_ref().map(|f| {
        let want = f
            .crossing
            .filter(|c| *c > last)
            .map_or(last * 2.0, |c| c * 1.3);
        let cap = f.max_context.map_or(f64::INFINITY, |m| m as f64);
        want.min(cap).max(last)
    });
    let curve: Vec<(f64, f64, bool)> = match (&a.fit, fit_end) {
        (Some(f), Some(end)) => log_grid(first, end, 80)
            .into_iter()
            .map(|l| (l, f.speedup(l), l > last * 1.0001))
            .filter(|p| p.1.is_finite() && p.1 > 0.0)
            .collect(),
        _ => Vec::new(),
    };
    let ys = pts
        .iter()
        .flat_map(|p| [Some(p.1), p.2.map(|i| i.0), p.2.map(|i| i.1)])
        .flatten()
        .chain(curve.iter().map(|c| c.1))
        .filter(|v| v.is_finite() && *v > 0.0);
    let (ylo, yhi) = ys.fold((1.0f64, 1.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let y = ((ylo / 1.2).log2(), (yhi * 1.2).log2());
    let x = (first / 1.3, fit_end.unwrap_or(last).max(last) * 1.3);
    SpeedupData { pts, curve, x, y }
}

/// Speedup (plain ÷ speculative ms per token) per context: points with interval whiskers, the
/// band between the intervals, the dashed line at 1, the fit (dashed beyond the measured
/// lengths, up to the fitted crossing or the server's maximum) and L* shaded.
pub fn speedup_plot(a: &SpecAnalysis) -> Result<Plot, RenderError> {
    let SpeedupData { pts, curve, x, y } = speedup_data(a);
    let title = "Net decode speedup of speculation (plain ÷ speculative ms per token)";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = frame(&root, title, x, y, "speedup (log scale)", true)?;
        let blue = color(0);
        // L*: the span between the last paying and the first losing length.
        if let LStar::StopsPaying {
            last_paying,
            first_losing,
            ..
        } = &a.l_star
        {
            let from = last_paying.map_or(x.0, |p| p.context_tokens as f64);
            let to = first_losing.context_tokens as f64;
            let red = RGBColor(213, 94, 0);
            chart
                .draw_series([Rectangle::new(
                    [(lx(from), y.0), (lx(to), y.1)],
                    red.mix(0.12).filled(),
                )])
                .map_err(perr)?
                .label("L*: stops paying in this span")
                .legend(box_key(red.mix(0.3).filled()));
        }
        chart
            .draw_series(DashedLineSeries::new(
                [(lx(x.0), 0.0), (lx(x.1), 0.0)],
                5,
                4,
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(perr)?
            .label("×1: no change")
            .legend(line_key(BLACK.mix(0.6)));
        // The interval band: lows forward, highs back.
        let band: Vec<(f64, f64)> = pts
            .iter()
            .filter_map(|p| Some((lx(p.0), p.2?.0.log2())))
            .chain(
                pts.iter()
                    .rev()
                    .filter_map(|p| Some((lx(p.0), p.2?.1.log2()))),
            )
            .collect();
        if band.len() >= 4 {
            chart
                .draw_series([Polygon::new(band, blue.mix(0.15).filled())])
                .map_err(perr)?
                .label(format!("{:.0}% interval", a.level * 100.0))
                .legend(box_key(blue.mix(0.3).filled()));
        }
        let measured: Vec<(f64, f64)> = curve
            .iter()
            .filter(|c| !c.2)
            .map(|c| (lx(c.0), c.1.log2()))
            .collect();
        let grey = RGBColor(90, 90, 90);
        if measured.len() > 1 {
            chart
                .draw_series(LineSeries::new(measured.clone(), grey.stroke_width(1)))
                .map_err(perr)?
                .label("fit: linear ms/token per side")
                .legend(line_key(grey));
        }
        let extrap: Vec<(f64, f64)> = curve
            .iter()
            .skip(measured.len().saturating_sub(1))
            .map(|c| (lx(c.0), c.1.log2()))
            .collect();
        if extrap.len() > 1 && curve.iter().any(|c| c.2) {
            chart
                .draw_series(DashedLineSeries::new(extrap, 6, 5, grey.stroke_width(1)))
                .map_err(perr)?
                .label("fit, extrapolated")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 6, y)], grey));
        }
        chart
            .draw_series(pts.iter().filter_map(|p| {
                let (lo, hi) = p.2?;
                Some(PathElement::new(
                    [(lx(p.0), lo.log2()), (lx(p.0), hi.log2())],
                    blue.stroke_width(2),
                ))
            }))
            .map_err(perr)?;
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new((lx(p.0), p.1.log2()), 4, blue.filled())),
            )
            .map_err(perr)?
            .label(format!("{} vs {}", a.speculative, a.plain))
            .legend(dot_key(blue));
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(perr)?;
    }
    Ok(Plot {
        name: "speedup".into(),
        title: title.into(),
        caption: format!(
            "{title}: per context length, with its {:.0}% interval (band); dashed: ×1; shaded: where L* lies; grey: the fit (dashed where extrapolated)",
            a.level * 100.0
        ),
        svg,
    })
}

/// Mean acceptance length per context with interval whiskers, one colour per series.
pub fn acceptance_plot(series: &[AcceptanceSeries]) -> Result<Plot, RenderError> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let xs: Vec<f64> = all.clone().map(|p| p.0 as f64).collect();
    let ymax = all
        .flat_map(|p| [Some(p.1.mean), p.1.high])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.15;
    let xmin = xs.iter().copied().fold(f64::INFINITY, f64::min).min(1024.0) / 1.3;
    let xmax = xs.iter().copied().fold(0.0, f64::max).max(2048.0) * 1.3;
    let title = "Acceptance length (tokens per verify step, bonus included)";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = frame(
            &root,
            title,
            (xmin, xmax),
            (0.0, ymax),
            "tokens/step",
            false,
        )?;
        for (i, s) in series.iter().enumerate() {
            let c = color(i);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|(l, m)| (lx(*l as f64), m.mean))
                .collect();
            chart
                .draw_series(s.points.iter().filter_map(|(l, m)| {
                    Some(PathElement::new(
                        [(lx(*l as f64), m.low?), (lx(*l as f64), m.high?)],
                        c.stroke_width(2),
                    ))
                }))
                .map_err(perr)?;
            dotted_line(&mut chart, &pts, s.label.clone(), c)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        root.present().map_err(perr)?;
    }
    Ok(Plot {
        name: "acceptance".into(),
        title: title.into(),
        caption: format!("{title}: mean per context length with its interval, per series"),
        svg,
    })
}
