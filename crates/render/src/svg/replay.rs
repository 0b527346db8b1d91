//! The replay report's two plots, from the results file alone: a per-session timeline (each
//! request a bar from its send time as long as its TTFT, coloured by its proof) and TTFT
//! against the tokens the cache did not serve, coloured alike. A large replay is thinned to
//! what an SVG can hold, and the caption says how many requests are drawn.

use std::collections::BTreeMap;

use plotters::prelude::*;

use super::draw::{box_key, legend, perr, Chart, Plot, SIZE};
use crate::format::RenderError;
use ctxbench_stats::replay_report::{Proof, ReplayReport, RequestPoint};

/// Sessions the timeline draws (the earliest to start); the caption counts the rest.
pub const TIMELINE_SESSIONS: usize = 40;
/// Requests the scatter draws at most (every k-th, evenly); the caption says so.
pub const SCATTER_POINTS: usize = 4000;

const ORDER: [Proof; 4] = [Proof::Hit, Proof::Short, Proof::Unverified, Proof::Cold];

/// The proof's colour: green hit, vermilion short, yellow unverified, grey nothing to reuse
/// (Okabe & Ito, colour-blind safe).
fn colour(p: Proof) -> RGBColor {
    match p {
        Proof::Hit => RGBColor(0, 158, 115),
        Proof::Short => RGBColor(213, 94, 0),
        Proof::Unverified => RGBColor(230, 159, 0),
        Proof::Cold => RGBColor(120, 120, 120),
    }
}

/// Both plots of a replay report; none when no request was answered.
pub fn replay_plots(r: &ReplayReport) -> Result<Vec<Plot>, RenderError> {
    let mut out = Vec::new();
    out.extend(timeline(&r.points)?);
    out.extend(scatter(&r.points)?);
    Ok(out)
}

/// Sessions in the order they started, each with its requests.
fn sessions(points: &[RequestPoint]) -> Vec<(&str, Vec<&RequestPoint>)> {
    let mut by: BTreeMap<&str, Vec<&RequestPoint>> = BTreeMap::new();
    for p in points {
        by.entry(p.session.as_str()).or_default().push(p);
    }
    let mut v: Vec<(&str, Vec<&RequestPoint>)> = by.into_iter().collect();
    let start = |r: &[&RequestPoint]| r.iter().map(|p| p.sent_s).fold(f64::INFINITY, f64::min);
    v.sort_by(|a, b| start(&a.1).total_cmp(&start(&b.1)).then(a.0.cmp(b.0)));
    v
}

/// Adds one legend entry per proof present, drawn as a box of its colour.
fn proof_keys<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    present: &[Proof],
    count: impl Fn(Proof) -> usize,
) -> Result<(), RenderError> {
    for p in ORDER.iter().copied().filter(|p| present.contains(p)) {
        let c = colour(p);
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(perr)?
            .label(format!("{} ({})", p.label(), count(p)))
            .legend(box_key(c.filled()));
    }
    Ok(())
}

/// The per-session timeline: sessions down, time across.
fn timeline(points: &[RequestPoint]) -> Result<Option<Plot>, RenderError> {
    let all = sessions(points);
    if all.is_empty() {
        return Ok(None);
    }
    let shown = &all[..all.len().min(TIMELINE_SESSIONS)];
    let reqs = || shown.iter().flat_map(|(_, r)| r.iter().copied());
    let end = reqs()
        .map(|p| p.sent_s + p.ttft_ms.unwrap_or(0.0) / 1000.0)
        .fold(0.0f64, f64::max)
        .max(1e-3)
        // Room on the right for the legend.
        * 1.3;
    let rows = shown.len() as f64;
    let title = "Replay timeline: each request from its send time, as long as its TTFT";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(110)
            .build_cartesian_2d(0.0..end, -0.5..rows - 0.5)
            .map_err(perr)?;
        let names: Vec<String> = shown.iter().map(|(s, _)| s.to_string()).collect();
        chart
            .configure_mesh()
            .x_desc("time since the replay started (s)")
            .y_desc("session")
            .y_labels(shown.len().min(20))
            .y_label_formatter(&|v| {
                let i = v.round();
                // The first session to start is the top row.
                match (v - i).abs() < 1e-6 && i >= 0.0 && i < rows {
                    true => names
                        .get(rows as usize - 1 - i as usize)
                        .cloned()
                        .unwrap_or_default(),
                    false => String::new(),
                }
            })
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(perr)?;
        for (row, (_, rs)) in shown.iter().enumerate() {
            let y = rows - 1.0 - row as f64;
            chart
                .draw_series(rs.iter().map(|p| {
                    let c = colour(p.proof);
                    let to = p.sent_s + p.ttft_ms.unwrap_or(0.0) / 1000.0;
                    Rectangle::new([(p.sent_s, y - 0.3), (to, y + 0.3)], c.filled())
                }))
                .map_err(perr)?;
            // The send instant, visible however short the TTFT.
            chart
                .draw_series(rs.iter().map(|p| {
                    PathElement::new(
                        [(p.sent_s, y - 0.38), (p.sent_s, y + 0.38)],
                        colour(p.proof).stroke_width(2),
                    )
                }))
                .map_err(perr)?;
        }
        let present: Vec<Proof> = reqs().map(|p| p.proof).collect();
        proof_keys(&mut chart, &present, |k| {
            reqs().filter(|p| p.proof == k).count()
        })?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        root.present().map_err(perr)?;
    }
    let drawn: usize = shown.iter().map(|(_, r)| r.len()).sum();
    let mut caption = format!(
        "Per-session timeline: each of {drawn} request(s) a bar from its send time, its length the TTFT; colour: proven hit, reuse_short, reuse_unverified, or nothing to reuse (a first turn)"
    );
    if all.len() > shown.len() {
        caption.push_str(&format!(
            "; the first {} of {} sessions to start are drawn",
            shown.len(),
            all.len()
        ));
    }
    Ok(Some(Plot {
        name: "replay_timeline".into(),
        title: title.into(),
        caption,
        svg,
    }))
}

/// TTFT against the tokens the cache did not serve.
fn scatter(points: &[RequestPoint]) -> Result<Option<Plot>, RenderError> {
    let all: Vec<(f64, f64, Proof)> = points
        .iter()
        .filter_map(|p| Some((p.uncached_tokens? as f64, p.ttft_ms?, p.proof)))
        .collect();
    if all.is_empty() {
        return Ok(None);
    }
    let step = all.len().div_ceil(SCATTER_POINTS).max(1);
    let drawn: Vec<&(f64, f64, Proof)> = all.iter().step_by(step).collect();
    let xmax = drawn.iter().map(|p| p.0).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let ymax = drawn.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-3) * 1.08;
    let title = "TTFT vs uncached tokens (prompt − cached)";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("uncached tokens")
            .y_desc("TTFT (ms)")
            .x_label_formatter(&|v| ctxbench_schema::units::num(*v))
            .y_label_formatter(&|v| ctxbench_schema::units::num(*v))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(RGBColor(238, 238, 238))
            .draw()
            .map_err(perr)?;
        // Misses are drawn last, so that no hit hides one.
        for p in [Proof::Cold, Proof::Unverified, Proof::Hit, Proof::Short] {
            let c = colour(p);
            chart
                .draw_series(
                    drawn
                        .iter()
                        .filter(|x| x.2 == p)
                        .map(|x| Circle::new((x.0, x.1), 3, c.mix(0.8).filled())),
                )
                .map_err(perr)?;
        }
        let present: Vec<Proof> = drawn.iter().map(|p| p.2).collect();
        proof_keys(&mut chart, &present, |k| {
            drawn.iter().filter(|p| p.2 == k).count()
        })?;
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(perr)?;
    }
    let mut caption = format!(
        "TTFT against the prompt tokens the cache did not serve, one dot per request ({} drawn); colour: proven hit or reuse_short (miss), reuse_unverified, nothing to reuse",
        drawn.len()
    );
    if step > 1 {
        caption.push_str(&format!(
            "; one in {step} of the {} requests with a TTFT and a cached count",
            all.len()
        ));
    }
    Ok(Some(Plot {
        name: "replay_ttft_vs_uncached".into(),
        title: title.into(),
        caption,
        svg,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(session: &str, i: u64, sent: f64, ttft: f64, unc: u64, proof: Proof) -> RequestPoint {
        RequestPoint {
            session: session.into(),
            index: i,
            sent_s: sent,
            ttft_ms: Some(ttft),
            uncached_tokens: Some(unc),
            proof,
        }
    }

    fn fixture() -> Vec<RequestPoint> {
        vec![
            point("a", 0, 0.0, 400.0, 1024, Proof::Cold),
            point("b", 1, 0.1, 420.0, 1024, Proof::Cold),
            point("a", 2, 1.0, 60.0, 276, Proof::Hit),
            point("b", 3, 1.2, 380.0, 1300, Proof::Short),
            RequestPoint {
                uncached_tokens: None,
                ..point("a", 4, 2.0, 90.0, 0, Proof::Unverified)
            },
        ]
    }

    /// Counts of `<rect` and `<circle` elements: plotters writes one per drawn mark.
    fn count(svg: &str, tag: &str) -> usize {
        svg.matches(tag).count()
    }

    #[test]
    fn the_timeline_draws_one_bar_per_request_in_its_proofs_colour() {
        let p = timeline(&fixture()).unwrap().unwrap();
        assert_eq!(p.name, "replay_timeline");
        // Sessions in the order they started, as the y labels.
        // The first session to start is the top row: its label is higher (smaller y).
        let label_y = |name: &str| {
            let end = p.svg.find(&format!("\n{name}\n</text>")).unwrap();
            let start = p.svg[..end].rfind("<text x=").unwrap();
            let tag = &p.svg[start..end];
            let y = tag
                .split(" y=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            y.parse::<f64>().unwrap()
        };
        assert!(label_y("a") < label_y("b"), "{}", p.svg);
        for l in [
            "proven hit (1)",
            "reuse_short (1)",
            "reuse_unverified (1)",
            "nothing to reuse (2)",
        ] {
            assert!(p.svg.contains(l), "{l}");
        }
        // Each proof's colour fills bars: vermilion for the one short request.
        assert!(p.svg.contains("#D55E00"), "short colour");
        assert!(p.svg.contains("#009E73"), "hit colour");
        // 5 bars + 4 legend keys + the legend box and background.
        assert!(
            count(&p.svg, "<rect") >= 5 + 4,
            "{}",
            count(&p.svg, "<rect")
        );
        assert!(p.caption.contains("each of 5 request(s)"), "{}", p.caption);
    }

    #[test]
    fn the_scatter_draws_requests_with_a_cached_count_and_thins_a_large_replay() {
        let p = scatter(&fixture()).unwrap().unwrap();
        assert_eq!(p.name, "replay_ttft_vs_uncached");
        // The unverified request has no cached count: 4 dots.
        assert_eq!(count(&p.svg, "<circle"), 4, "{}", p.svg);
        assert!(p.svg.contains("reuse_short (1)") && !p.svg.contains("reuse_unverified"));
        let many: Vec<RequestPoint> = (0..10_000)
            .map(|i| point("s", i, i as f64, 10.0, i, Proof::Hit))
            .collect();
        let p = scatter(&many).unwrap().unwrap();
        assert_eq!(count(&p.svg, "<circle"), 3334, "every 3rd of 10000");
        assert!(
            p.caption.contains("one in 3 of the 10000 requests"),
            "{}",
            p.caption
        );
        assert!(scatter(&[]).unwrap().is_none() && timeline(&[]).unwrap().is_none());
    }

    #[test]
    fn the_timeline_draws_the_first_sessions_to_start_and_says_how_many() {
        let many: Vec<RequestPoint> = (0..50)
            .map(|i| point(&format!("s{i:02}"), i, i as f64, 10.0, 5, Proof::Cold))
            .collect();
        let p = timeline(&many).unwrap().unwrap();
        assert!(
            p.caption.contains("the first 40 of 50 sessions"),
            "{}",
            p.caption
        );
    }
}
