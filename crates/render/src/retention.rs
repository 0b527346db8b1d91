//! The retention map's part of the warm section (`--mode retention`): per L, k of n hits at
//! each gap and each pressure (the map, a heat map in table form), the edges with what a miss
//! costs, and the cells with their cached counts, TTFT beside the cold TTFT and named causes.

use crate::describe::med_range;
use crate::doc::{Align, Cell, Table, Text, Tone};
use crate::warm::Part;
use ctxbench_schema::units::{fmt_ctx, num};
use ctxbench_stats::compare::retention::{EdgeRow, MissCost};
use ctxbench_stats::stats::retention::{Edge, RetentionCell, RetentionRow};
use ctxbench_stats::stats::warm::WarmReport;

/// `k/n` of a cell, with a mark where the prefix did not always come back.
fn kn(c: &RetentionCell) -> String {
    match (c.judged, c.hits == c.judged) {
        (0, _) => "–".to_owned(),
        (n, true) => format!("{}/{n}", c.hits),
        (n, false) => format!("{}/{n} ✗", c.hits),
    }
}

/// A gap or a pressure as the user set it (`0`, `0.5`, `30`), not as a measurement
/// (`0.00`): the same words in the tables, the heat maps and the side-by-side.
pub(crate) fn setting(v: f64) -> String {
    v.to_string()
}

/// The map along one axis: a row per L, a column per value.
pub(crate) fn map(retention: &[RetentionCell], gap: bool) -> Option<Table> {
    let on_axis = |c: &&RetentionCell| match gap {
        true => c.pressure == 0.0,
        false => c.gap_s == 0.0,
    };
    let value = |c: &RetentionCell| if gap { c.gap_s } else { c.pressure };
    let mut values: Vec<f64> = retention.iter().filter(on_axis).map(value).collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    if values.len() < 2 && (gap || values.iter().all(|v| *v == 0.0)) {
        return None;
    }
    let head: Vec<(String, Align)> = std::iter::once(("L (cached)".to_owned(), Align::Left))
        .chain(values.iter().map(|v| {
            let h = match gap {
                true => format!("gap {} s", setting(*v)),
                false => format!("pressure {}", setting(*v)),
            };
            (h, Align::Right)
        }))
        .collect();
    let mut t = Table::new(head);
    let mut ls: Vec<u64> = retention.iter().map(|c| c.prefix_tokens).collect();
    ls.dedup();
    for l in ls {
        let mut row = vec![Cell::from(fmt_ctx(l))];
        for v in &values {
            let cell = retention
                .iter()
                .filter(on_axis)
                .find(|c| c.prefix_tokens == l && value(c) == *v);
            // The heat map's colour: every repetition came back, or not.
            let tone = match cell {
                Some(c) if c.judged > 0 && c.hits == c.judged => Tone::Good,
                Some(c) if c.judged > 0 => Tone::Bad,
                _ => Tone::Muted,
            };
            row.push(Cell {
                text: Text::from(cell.map_or("–".to_owned(), kn)),
                tone,
                strong: false,
            });
        }
        t.row(row);
    }
    Some(t)
}

fn edge_words(e: &Edge, unit: &str) -> String {
    let at = |v: f64| match unit {
        "s" => format!("{} s", setting(v)),
        _ => format!("{} of the pool", setting(v)),
    };
    let held = e.held.map_or("never came back".to_owned(), |p| {
        format!("came back up to {} ({}/{})", at(p.value), p.hits, p.judged)
    });
    let lost = e.lost.map_or("never lost".to_owned(), |p| {
        format!(
            "lost at {} ({}/{} came back)",
            at(p.value),
            p.hits,
            p.judged
        )
    });
    let sharp = match e.recovered_after {
        true => "; a larger value came back again: not a sharp edge",
        false => "",
    };
    format!("{held}, {lost}{sharp}")
}

/// The warm section's parts of any warm report: the retention map's for `--mode retention`,
/// the `warm` module's otherwise.
pub fn warm_parts(w: &WarmReport) -> Vec<Part> {
    match w.config.mode {
        ctxbench_schema::warm::WarmMode::Retention => parts(w, crate::warm::proof(w)),
        _ => crate::warm::parts(w),
    }
}

/// The retention map's parts: the two maps, then the cells.
pub fn parts(w: &WarmReport, mut notes: Vec<String>) -> Vec<Part> {
    let pool = w.retention.iter().find_map(|c| c.pool_tokens);
    for r in &w.retention_edges {
        let cost = match (r.miss_cost_s, r.cold_ms, r.warm_ms) {
            (Some(c), Some(cold), Some(warm)) => format!(
                "; a miss costs {} s (cold {} ms − warm {} ms)",
                num(c),
                num(cold),
                num(warm)
            ),
            _ => "; miss cost unknown (no cold or no warm TTFT)".to_owned(),
        };
        notes.push(format!(
            "L = {}: by idle gap, {}; by pressure, {}{cost}",
            fmt_ctx(r.prefix_tokens),
            edge_words(&r.gap, "s"),
            edge_words(&r.pressure, "pool"),
        ));
    }
    notes.push(match pool {
        Some(p) => format!(
            "pressure = foreign prompt tokens (each with its own prefix, each counted by the server) as a fraction of the pool of {p} tokens (each sample's warm.retention.pool_source says where it comes from)"
        ),
        None => "pressure: the server reported no KV pool and no context; no foreign traffic was sent".to_owned(),
    });
    let mut out = Vec::new();
    let heads = [
        (true, "Retention by idle gap", "k of n appends whose prefix came back after the idle gap (pressure 0; ✗: not every repetition)"),
        (false, "Retention by pressure", "k of n appends whose prefix came back after foreign traffic of that fraction of the KV pool (gap 0)"),
    ];
    for (gap, heading, title) in heads {
        if let Some(t) = map(&w.retention, gap) {
            out.push(Part {
                heading,
                title: title.to_owned(),
                table: Some(t),
                notes: Vec::new(),
            });
        }
    }
    out.push(cells(w, notes));
    out
}

fn cells(w: &WarmReport, mut notes: Vec<String>) -> Part {
    let mut t = Table::new([
        ("L (cached)", Align::Left),
        ("gap s", Align::Right),
        ("pressure", Align::Right),
        ("hits", Align::Right),
        ("cached", Align::Right),
        ("warm TTFT ms", Align::Right),
        ("miss TTFT ms", Align::Right),
        ("cold TTFT(L+N) ms", Align::Right),
        ("causes", Align::Left),
    ]);
    for c in &w.retention {
        t.row([
            Text::from(fmt_ctx(c.prefix_tokens)),
            Text::from(setting(c.gap_s)),
            Text::from(setting(c.pressure)),
            Text::from(kn(c)),
            Text::from(c.cached_tokens.map_or("–".to_owned(), |x| x.to_string())),
            Text::from(med_range(&c.ttft_ms)),
            Text::from(med_range(&c.miss_ttft_ms)),
            Text::from(med_range(&c.cold_ttft_ms)),
            Text::from(
                c.causes
                    .iter()
                    .map(|(n, k)| format!("{n} {k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        ]);
    }
    if let Some(ev) = w.retention.iter().find_map(|c| c.evidence.clone()) {
        notes.push(format!("first miss's evidence: {ev}"));
    }
    Part {
        heading: "Retention cells",
        title: "Each cell: hits (k/n) by the warm hit rule, the median cached count, the TTFT of the hits and of the misses beside the cold TTFT of L + N, the misses' causes".to_owned(),
        table: Some(t),
        notes,
    }
}

/// A side's edge along one axis for the side-by-side: held, then first lost.
fn edge_pair(e: Option<&Edge>, unit: &str) -> (String, String) {
    let at = |v: f64| match unit {
        "s" => format!("{} s", setting(v)),
        _ => setting(v),
    };
    match e {
        None => ("–".to_owned(), "–".to_owned()),
        Some(e) => (
            e.held.map_or("none".to_owned(), |p| {
                format!("{} ({}/{})", at(p.value), p.hits, p.judged)
            }),
            e.lost.map_or("never".to_owned(), |p| {
                let sharp = if e.recovered_after { ", not sharp" } else { "" };
                format!("{} ({}/{}{sharp})", at(p.value), p.hits, p.judged)
            }),
        ),
    }
}

fn cost_words(c: Option<&MissCost>) -> String {
    match c {
        None => "–".to_owned(),
        Some(c) => match (c.low_s, c.high_s) {
            (Some(lo), Some(hi)) => format!("{} ({}–{})", num(c.mean_s), num(lo), num(hi)),
            _ => format!("{} (n too small)", num(c.mean_s)),
        },
    }
}

/// A miss cost's cell on a length's first axis row; the second row leaves it blank.
fn cost(first: bool, c: Option<&MissCost>) -> String {
    match first {
        true => cost_words(c),
        false => String::new(),
    }
}

/// Two retention maps side by side by their edges (`compare`): per L and axis, the largest
/// value held and the first lost in A and in B, and each side's miss cost with its interval
/// (a length's, so on its first row only).
pub fn compare_edges_table(edges: &[EdgeRow]) -> Table {
    let mut t = Table::new([
        ("L (cached)", Align::Left),
        ("axis", Align::Left),
        ("A held to", Align::Right),
        ("A first lost", Align::Right),
        ("B held to", Align::Right),
        ("B first lost", Align::Right),
        ("A miss costs s", Align::Right),
        ("B miss costs s", Align::Right),
    ]);
    t.title = Some(
        "Retention edges, A beside B: largest value at which every repetition came back (k/n) and the first at which one did not; a miss's cost = mean cold TTFT(L + N) − mean warm TTFT at L (95% Welch interval)"
            .into(),
    );
    for e in edges {
        for (first, axis, unit) in [(true, "idle gap", "s"), (false, "pressure", "pool")] {
            let pick = |r: Option<&RetentionRow>| {
                r.map(|r| match unit {
                    "s" => r.gap.clone(),
                    _ => r.pressure.clone(),
                })
            };
            let (ah, al) = edge_pair(pick(e.a.as_ref()).as_ref(), unit);
            let (bh, bl) = edge_pair(pick(e.b.as_ref()).as_ref(), unit);
            let tone = |lost: &str| match lost {
                "never" | "–" => Tone::Good,
                _ => Tone::Bad,
            };
            let (ta, tb) = (tone(&al), tone(&bl));
            t.row(vec![
                Cell::from(fmt_ctx(e.prefix_tokens)),
                Cell::from(axis),
                Cell::from(ah),
                Cell {
                    tone: ta,
                    ..Cell::from(al)
                },
                Cell::from(bh),
                Cell {
                    tone: tb,
                    ..Cell::from(bl)
                },
                Cell::from(cost(first, e.a_cost.as_ref())),
                Cell::from(cost(first, e.b_cost.as_ref())),
            ]);
        }
    }
    t
}

/// The side-by-side as plain text (terminal); empty without edges.
pub fn compare_edges_text(edges: &[EdgeRow]) -> String {
    if edges.is_empty() {
        return String::new();
    }
    let t = compare_edges_table(edges);
    format!(
        "{}:\n{}",
        t.title.clone().unwrap_or_default(),
        crate::text::render(&t, &crate::text::Layout::default())
    )
}
