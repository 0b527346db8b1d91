//! The retention heat maps (`--mode retention`): a row per L, a column per idle gap (at
//! pressure 0) and per pressure (at gap 0), each cell `k/n` coloured by the fraction of
//! repetitions whose prefix came back, the edge (last held | first lost) a black bar, and a
//! miss's cost in the cell's title (a tooltip); with `--grid`, one gap × pressure map per L.
//! From the report alone (the results file), drawn with plotters on pixel coordinates.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::draw::{perr, Plot, COLORS};
use crate::format::RenderError;
use crate::retention::setting;
use ctxbench_schema::units::{fmt_ctx, num};
use ctxbench_stats::report::Report;
use ctxbench_stats::stats::retention::{Edge, RetentionCell, RetentionRow};

/// One drawn cell: k of n and its tooltip.
#[derive(Debug, Clone)]
pub(crate) struct HeatCell {
    hits: usize,
    judged: usize,
    tip: String,
}

/// A heat map to draw: row and column labels, the cells (row-major; `None`: not measured),
/// and per row the column of the first loss (the edge is drawn on its left side).
#[derive(Debug, Clone)]
pub(crate) struct Heat {
    title: String,
    corner: String,
    rows: Vec<String>,
    cols: Vec<String>,
    cells: Vec<Vec<Option<HeatCell>>>,
    edge: Vec<Option<usize>>,
}

const LEFT: i32 = 130;
const TOP: i32 = 64;
const CELL_H: i32 = 44;
const WIDTH: i32 = 760;

/// The colour of a fraction held: Okabe–Ito vermillion (nothing came back) to bluish green
/// (everything did), linear in between; grey without a verdict.
pub(crate) fn shade(held: Option<f64>) -> RGBColor {
    let Some(f) = held else {
        return RGBColor(225, 225, 225);
    };
    let f = f.clamp(0.0, 1.0);
    let (a, b) = (COLORS[1], COLORS[2]);
    let mix = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draws a heat map; the cells' tooltips are `<title>`s of transparent rectangles laid over
/// the drawing (plotters draws no titles).
pub(crate) fn draw(h: &Heat) -> Result<String, RenderError> {
    let ncol = h.cols.len().max(1) as i32;
    let cw = (WIDTH - LEFT - 20) / ncol;
    let height = TOP + CELL_H * h.rows.len() as i32 + 50;
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (WIDTH as u32, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(perr)?;
        let font = |size: i32| ("sans-serif", size).into_font();
        let centred = |size: i32, c: RGBColor| {
            font(size)
                .color(&c)
                .pos(Pos::new(HPos::Center, VPos::Center))
        };
        root.draw(&Text::new(h.title.clone(), (12, 8), font(20)))
            .map_err(perr)?;
        root.draw(&Text::new(h.corner.clone(), (12, TOP - 22), font(13)))
            .map_err(perr)?;
        for (j, c) in h.cols.iter().enumerate() {
            let x = LEFT + cw * j as i32 + cw / 2;
            root.draw(&Text::new(c.clone(), (x, TOP - 14), centred(13, BLACK)))
                .map_err(perr)?;
        }
        for (i, r) in h.rows.iter().enumerate() {
            let y0 = TOP + CELL_H * i as i32;
            root.draw(&Text::new(r.clone(), (12, y0 + CELL_H / 2 - 7), font(14)))
                .map_err(perr)?;
            for j in 0..h.cols.len() {
                let x0 = LEFT + cw * j as i32;
                let cell = h.cells[i].get(j).and_then(Option::as_ref);
                let held = cell
                    .filter(|c| c.judged > 0)
                    .map(|c| c.hits as f64 / c.judged as f64);
                root.draw(&Rectangle::new(
                    [(x0 + 1, y0 + 1), (x0 + cw - 1, y0 + CELL_H - 1)],
                    shade(held).filled(),
                ))
                .map_err(perr)?;
                let text = match cell {
                    Some(c) if c.judged > 0 => format!("{}/{}", c.hits, c.judged),
                    _ => "–".to_owned(),
                };
                let ink = if held.is_some() { WHITE } else { BLACK };
                root.draw(&Text::new(
                    text,
                    (x0 + cw / 2, y0 + CELL_H / 2),
                    centred(15, ink),
                ))
                .map_err(perr)?;
            }
            if let Some(j) = h.edge.get(i).copied().flatten() {
                let x = LEFT + cw * j as i32;
                root.draw(&PathElement::new(
                    [(x, y0 - 2), (x, y0 + CELL_H + 2)],
                    BLACK.stroke_width(4),
                ))
                .map_err(perr)?;
            }
        }
        let y = TOP + CELL_H * h.rows.len() as i32 + 14;
        root.draw(&Text::new(
            "k/n: repetitions whose prefix came back; colour: green all, vermillion none; black bar: the edge (last held | first lost); hover a cell for its miss cost".to_owned(),
            (12, y),
            font(11).color(&RGBColor(90, 90, 90)),
        ))
        .map_err(perr)?;
        root.present().map_err(perr)?;
    }
    let mut tips = String::from("<g fill-opacity=\"0\">");
    for (i, row) in h.cells.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            if let Some(c) = c {
                let (x, y) = (LEFT + cw * j as i32, TOP + CELL_H * i as i32);
                tips.push_str(&format!(
                    "<rect x=\"{x}\" y=\"{y}\" width=\"{cw}\" height=\"{CELL_H}\"><title>{}</title></rect>",
                    esc(&c.tip)
                ));
            }
        }
    }
    tips.push_str("</g>\n</svg>");
    match svg.rfind("</svg>") {
        Some(at) => svg.replace_range(at.., &tips),
        None => return Err(RenderError::Plot("plotters wrote no </svg>".into())),
    }
    Ok(svg)
}

/// A cell's tooltip: where it is, k of n, the idle time and foreign traffic, and what a
/// miss cost (the misses' TTFT against the hits' at L) or would cost (cold − warm).
fn tip(c: &RetentionCell, row: Option<&RetentionRow>, at: &str) -> String {
    let mut s = format!(
        "L = {}, {at}: {}/{} came back",
        fmt_ctx(c.prefix_tokens),
        c.hits,
        c.judged
    );
    if let Some(t) = c.foreign_tokens.filter(|t| *t > 0) {
        s.push_str(&format!("; {t} foreign tokens counted"));
    }
    let warm = row.and_then(|r| r.warm_ms);
    match (c.miss_ttft_ms.map(|m| m.median), warm) {
        (Some(m), Some(w)) => s.push_str(&format!(
            "; a miss cost {} s (miss TTFT {} ms vs warm {} ms)",
            num((m - w) / 1000.0),
            num(m),
            num(w)
        )),
        _ => match row.and_then(|r| r.miss_cost_s) {
            Some(cost) => s.push_str(&format!(
                "; a miss would cost {} s (cold − warm TTFT)",
                num(cost)
            )),
            None => s.push_str("; miss cost unknown"),
        },
    }
    for (cause, k) in &c.causes {
        s.push_str(&format!("; {cause} ×{k}"));
    }
    s
}

fn heat_cell(c: &RetentionCell, row: Option<&RetentionRow>, at: &str) -> HeatCell {
    HeatCell {
        hits: c.hits,
        judged: c.judged,
        tip: tip(c, row, at),
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The map along one axis (`gap`: idle gap at pressure 0; else pressure at gap 0); `None`
/// with fewer than two values.
pub(crate) fn axis_heat(cells: &[RetentionCell], rows: &[RetentionRow], gap: bool) -> Option<Heat> {
    let on = |c: &&RetentionCell| match gap {
        true => c.pressure == 0.0,
        false => c.gap_s == 0.0,
    };
    let value = |c: &RetentionCell| if gap { c.gap_s } else { c.pressure };
    let values = sorted(cells.iter().filter(on).map(value).collect());
    if values.len() < 2 {
        return None;
    }
    let mut ls: Vec<u64> = cells.iter().map(|c| c.prefix_tokens).collect();
    ls.sort_unstable();
    ls.dedup();
    let word = |v: f64| match gap {
        true => format!("gap {} s", setting(v)),
        false => format!("pressure {}", setting(v)),
    };
    let mut h = Heat {
        title: match gap {
            true => "Retention by idle gap".into(),
            false => "Retention by pressure (fraction of the KV pool)".into(),
        },
        corner: "L (cached)".into(),
        rows: ls.iter().map(|l| fmt_ctx(*l)).collect(),
        cols: values.iter().map(|v| word(*v)).collect(),
        cells: Vec::new(),
        edge: Vec::new(),
    };
    for &l in &ls {
        let row = rows.iter().find(|r| r.prefix_tokens == l);
        h.cells.push(
            values
                .iter()
                .map(|v| {
                    cells
                        .iter()
                        .filter(on)
                        .find(|c| c.prefix_tokens == l && value(c) == *v)
                        .map(|c| heat_cell(c, row, &word(*v)))
                })
                .collect(),
        );
        let e: Option<&Edge> = row.map(|r| if gap { &r.gap } else { &r.pressure });
        h.edge.push(
            e.and_then(|e| e.lost)
                .and_then(|p| values.iter().position(|v| *v == p.value)),
        );
    }
    Some(h)
}

/// The gap × pressure grid of one L (`--grid`): a row per pressure, a column per gap; the
/// edge in each row is its first loss. `None` without a cell off both axes.
pub(crate) fn grid_heat(cells: &[RetentionCell], rows: &[RetentionRow], l: u64) -> Option<Heat> {
    let here: Vec<&RetentionCell> = cells.iter().filter(|c| c.prefix_tokens == l).collect();
    if !here.iter().any(|c| c.gap_s > 0.0 && c.pressure > 0.0) {
        return None;
    }
    let gaps = sorted(here.iter().map(|c| c.gap_s).collect());
    let pressures = sorted(here.iter().map(|c| c.pressure).collect());
    let row = rows.iter().find(|r| r.prefix_tokens == l);
    let mut h = Heat {
        title: format!("Retention at L = {}: idle gap × pressure", fmt_ctx(l)),
        corner: "pressure \\ gap".into(),
        rows: pressures.iter().map(|p| setting(*p)).collect(),
        cols: gaps.iter().map(|g| format!("{} s", setting(*g))).collect(),
        cells: Vec::new(),
        edge: Vec::new(),
    };
    for &p in &pressures {
        let line: Vec<Option<&RetentionCell>> = gaps
            .iter()
            .map(|g| {
                here.iter()
                    .copied()
                    .find(|c| c.pressure == p && c.gap_s == *g)
            })
            .collect();
        h.edge.push(
            line.iter()
                .position(|c| c.is_some_and(|c| c.judged > 0 && c.hits < c.judged)),
        );
        h.cells.push(
            line.iter()
                .zip(&gaps)
                .map(|(c, g)| {
                    let at = format!("gap {} s, pressure {}", setting(*g), setting(p));
                    c.map(|c| heat_cell(c, row, &at))
                })
                .collect(),
        );
    }
    Some(h)
}

/// The heat maps of every run with a retention map: by gap, by pressure, and the grid per L
/// (suffixed by the run's number when several runs have maps).
pub fn retention_plots(report: &Report) -> Result<Vec<Plot>, RenderError> {
    let runs: Vec<_> = report
        .runs
        .iter()
        .filter_map(|r| {
            let w = r.warm.as_ref()?;
            (!w.retention.is_empty()).then_some((r.label.as_str(), w))
        })
        .collect();
    let mut out = Vec::new();
    for (i, (label, w)) in runs.iter().enumerate() {
        let suffix = match runs.len() {
            1 => String::new(),
            _ => format!("-{}", i + 1),
        };
        let mut maps: Vec<(String, Heat)> = Vec::new();
        for (gap, name) in [(true, "retention_gap"), (false, "retention_pressure")] {
            if let Some(h) = axis_heat(&w.retention, &w.retention_edges, gap) {
                maps.push((name.to_owned(), h));
            }
        }
        for r in &w.retention_edges {
            if let Some(h) = grid_heat(&w.retention, &w.retention_edges, r.prefix_tokens) {
                maps.push((format!("retention_grid_{}", r.prefix_tokens), h));
            }
        }
        for (name, h) in maps {
            out.push(Plot {
                name: format!("{name}{suffix}"),
                title: h.title.clone(),
                caption: format!(
                    "{label}: {}: k of n appends whose prefix came back by the warm hit rule, coloured by the fraction; black bar: the edge; each cell's title: what a miss cost",
                    h.title
                ),
                svg: draw(&h)?,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_stats::stats::retention::edge;
    use ctxbench_stats::stats::Spread;

    fn cell(l: u64, gap: f64, pressure: f64, hits: usize, judged: usize) -> RetentionCell {
        RetentionCell {
            prefix_tokens: l,
            new_tokens: 64,
            gap_s: gap,
            pressure,
            samples: judged,
            judged,
            hits,
            misses: judged - hits,
            cached_tokens: None,
            idle_s: Some(gap),
            foreign_tokens: None,
            pool_tokens: Some(4096),
            ttft_ms: Spread::of([20.0]),
            miss_ttft_ms: (hits < judged).then(|| Spread::of([1020.0])).flatten(),
            cold_ttft_ms: Spread::of([1100.0]),
            causes: match hits < judged {
                true => vec![("slot_reuse".into(), judged - hits)],
                false => Vec::new(),
            },
            evidence: None,
        }
    }

    fn row(l: u64, cells: &[RetentionCell]) -> RetentionRow {
        let pts = |gap: bool| -> Vec<(f64, usize, usize)> {
            cells
                .iter()
                .filter(|c| {
                    c.prefix_tokens == l
                        && if gap {
                            c.pressure == 0.0
                        } else {
                            c.gap_s == 0.0
                        }
                })
                .map(|c| (if gap { c.gap_s } else { c.pressure }, c.hits, c.judged))
                .collect()
        };
        RetentionRow {
            prefix_tokens: l,
            gap: edge(&pts(true)),
            pressure: edge(&pts(false)),
            warm_ms: Some(20.0),
            cold_ms: Some(1100.0),
            miss_cost_s: Some(1.08),
        }
    }

    fn map() -> (Vec<RetentionCell>, Vec<RetentionRow>) {
        let cells = vec![
            cell(1024, 0.0, 0.0, 2, 2),
            cell(1024, 10.0, 0.0, 2, 2),
            cell(1024, 60.0, 0.0, 1, 2),
            cell(1024, 0.0, 0.5, 0, 2),
            cell(4096, 0.0, 0.0, 2, 2),
            cell(4096, 10.0, 0.0, 2, 2),
            cell(4096, 60.0, 0.0, 2, 2),
            cell(4096, 0.0, 0.5, 2, 2),
        ];
        let rows = vec![row(1024, &cells), row(4096, &cells)];
        (cells, rows)
    }

    #[test]
    fn a_cell_is_green_when_all_came_back_and_vermillion_when_none() {
        assert_eq!(shade(Some(1.0)), COLORS[2]);
        assert_eq!(shade(Some(0.0)), COLORS[1]);
        let half = shade(Some(0.5));
        assert!(half != COLORS[1] && half != COLORS[2]);
        assert_eq!(shade(None), RGBColor(225, 225, 225));
    }

    #[test]
    fn the_gap_map_has_a_row_per_l_an_edge_where_it_was_lost_and_miss_costs_in_titles() {
        let (cells, rows) = map();
        let h = axis_heat(&cells, &rows, true).unwrap();
        assert_eq!(h.rows, ["1k", "4k"]);
        assert_eq!(h.cols, ["gap 0 s", "gap 10 s", "gap 60 s"]);
        // 1k lost at 60 s (column 2); 4k never lost: no edge.
        assert_eq!(h.edge, [Some(2), None]);
        let svg = draw(&h).unwrap();
        assert!(svg.contains("Retention by idle gap"), "{svg}");
        assert!(svg.contains("1/2") && svg.contains("2/2"));
        // The lost cell's title: k/n and the miss's cost (1020 − 20 ms).
        assert!(
            svg.contains("<title>L = 1k, gap 60 s: 1/2 came back; a miss cost 1.00 s (miss TTFT 1020 ms vs warm 20.00 ms); slot_reuse ×1</title>"),
            "{svg}"
        );
        // A held cell says what a miss would cost.
        assert!(
            svg.contains("a miss would cost 1.08 s (cold − warm TTFT)"),
            "{svg}"
        );
        // Held in green, lost in vermillion, half in between, the edge in black.
        let hex = |c: RGBColor| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
        assert!(svg.contains(&hex(COLORS[2])), "{svg}");
        assert!(svg.contains(&hex(shade(Some(0.5)))), "{svg}");
        assert!(svg.contains("stroke-width=\"4\""), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        let p = axis_heat(&cells, &rows, false).unwrap();
        assert_eq!(p.edge, [Some(1), None]);
        assert!(draw(&p).unwrap().contains(&hex(COLORS[1])));
    }

    #[test]
    fn a_grid_is_drawn_per_l_only_when_cells_lie_off_both_axes() {
        let (mut cells, rows) = map();
        assert!(grid_heat(&cells, &rows, 1024).is_none());
        cells.push(cell(1024, 10.0, 0.5, 0, 1));
        let h = grid_heat(&cells, &rows, 1024).unwrap();
        assert_eq!(h.rows, ["0", "0.5"]);
        assert_eq!(h.cols, ["0 s", "10 s", "60 s"]);
        // Pressure 0: lost at 60 s; pressure 0.5: lost at once; 60 s × 0.5 not measured.
        assert_eq!(h.edge, [Some(2), Some(0)]);
        assert!(h.cells[1][2].is_none());
        let svg = draw(&h).unwrap();
        assert!(
            svg.contains("L = 1k, gap 10 s, pressure 0.5: 0/1 came back"),
            "{svg}"
        );
        assert!(grid_heat(&cells, &rows, 4096).is_none());
    }

    #[test]
    fn the_tables_write_a_gap_as_the_maps_do_and_a_miss_cost_once_per_length() {
        use crate::retention::{compare_edges_table, map as table};
        use ctxbench_stats::compare::retention::{EdgeRow, MissCost};
        let (cells, rows) = map();
        // The report's table (Markdown, HTML, terminal) heads its columns as the heat map does.
        let t = table(&cells, true).unwrap();
        let h = axis_heat(&cells, &rows, true).unwrap();
        assert_eq!(t.head[1..], h.cols[..]);
        assert_eq!(t.head[1], "gap 0 s");
        let p = table(&cells, false).unwrap();
        assert_eq!(p.head[1..], ["pressure 0", "pressure 0.5"]);
        let cost = MissCost {
            mean_s: 1.08,
            low_s: Some(1.0),
            high_s: Some(1.2),
            n_cold: 2,
            n_warm: 2,
        };
        let e = EdgeRow {
            prefix_tokens: 1024,
            a: Some(rows[0].clone()),
            b: Some(rows[1].clone()),
            a_cost: Some(cost),
            b_cost: None,
        };
        let t = compare_edges_table(&[e]);
        let cell = |r: usize, c: usize| t.rows[r][c].text.to_plain();
        assert_eq!(t.rows.len(), 2, "an idle-gap row and a pressure row");
        assert_eq!(
            (cell(0, 1), cell(1, 1)),
            ("idle gap".into(), "pressure".into())
        );
        assert_eq!(cell(0, 2), "10 s (2/2)");
        assert_eq!(cell(1, 2), "0 (2/2)");
        // The miss cost is the length's: said on its first row, not again on the second.
        assert_eq!(
            (cell(0, 6), cell(0, 7)),
            ("1.08 (1.00–1.20)".into(), "–".into())
        );
        assert_eq!((cell(1, 6), cell(1, 7)), (String::new(), String::new()));
    }

    #[test]
    fn titles_escape_what_the_svg_would_read_as_markup() {
        let h = Heat {
            title: "t".into(),
            corner: String::new(),
            rows: vec!["1k".into()],
            cols: vec!["a".into(), "b".into()],
            cells: vec![vec![
                Some(HeatCell {
                    hits: 1,
                    judged: 1,
                    tip: "<b>&".into(),
                }),
                None,
            ]],
            edge: vec![None],
        };
        let svg = draw(&h).unwrap();
        assert!(svg.contains("<title>&lt;b&gt;&amp;</title>"), "{svg}");
    }
}
