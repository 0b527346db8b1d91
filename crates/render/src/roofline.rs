//! The roofline (how far from the hardware's limit) as a table and its lines: shared by the
//! terminal, Markdown and HTML; the JSON report carries the model itself.

use std::fmt::Write;

use super::doc::{
    Align, Block, Callout, Cell, Item, List, ListKind, Para, Span, Table, Text, Tone,
};
use super::text::{self, Layout};
use ctxbench_schema::model::ModelFacts;
use ctxbench_schema::units::fmt_ctx;
use ctxbench_stats::roofline::versus::{Fraction, RooflineComparison};
use ctxbench_stats::roofline::{bytes, flops, ms, pct, Roofline};

/// The section's heading.
pub const HEADING: &str = "Roofline: how far from the hardware's limit";

/// What the model's size says, in one line: `15.0 GB of weights a step reads, 131 kB of KV
/// cache per token, 14.0 GFLOPs per token (config.json)`.
pub fn facts_line(f: &ModelFacts) -> String {
    let mut parts = Vec::new();
    if let Some(w) = f.step_weight_bytes() {
        parts.push(format!("{} of weights a step reads", bytes(w as f64)));
    }
    if let Some(k) = f.kv_bytes_per_token {
        parts.push(format!("{} of KV cache per token", bytes(k as f64)));
    }
    if let Some(x) = f.flops_per_token {
        parts.push(format!("{} per prompt token", flops(x)));
    }
    if let Some(a) = f.attention_flops_per_token2 {
        parts.push(format!("+ {a:.0} × L² attention FLOPs"));
    }
    if parts.is_empty() {
        parts.push("no sizes".to_owned());
    }
    format!("{} ({})", parts.join(", "), f.source)
}

/// Per context length: the decode step against its bound and the prefill's MFU; `None`
/// when there is neither.
pub fn table(r: &Roofline) -> Option<Table> {
    let mut contexts: Vec<u64> = r
        .decode
        .iter()
        .map(|d| d.context_tokens)
        .chain(r.prefill.iter().map(|p| p.context_tokens))
        .collect();
    contexts.sort_unstable();
    contexts.dedup();
    if contexts.is_empty() {
        return None;
    }
    let (dec, pre) = (!r.decode.is_empty(), !r.prefill.is_empty());
    let mut head = vec![("context", Align::Left)];
    if dec {
        head.extend([
            match r.per_verify_step {
                true => ("ms/verify step", Align::Right),
                false => ("ms/step", Align::Right),
            },
            ("bound ms", Align::Right),
            ("bandwidth used", Align::Right),
        ]);
    }
    if pre {
        head.extend([("TTFT ms", Align::Right), ("MFU", Align::Right)]);
    }
    let mut t = Table::new(head);
    let fraction = |v: f64, impossible: bool| match impossible {
        true => Cell {
            tone: Tone::Bad,
            strong: true,
            ..Cell::from("impossible")
        },
        false => Cell::from(pct(v)),
    };
    for c in contexts {
        let mut row: Vec<Cell> = vec![fmt_ctx(c).into()];
        if dec {
            match r.decode.iter().find(|d| d.context_tokens == c) {
                Some(d) => row.extend([
                    ms(d.measured_ms).into(),
                    ms(d.bound_ms).into(),
                    fraction(d.utilisation, d.impossible),
                ]),
                None => row.extend(["–", "–", "–"].map(Cell::from)),
            }
        }
        if pre {
            match r.prefill.iter().find(|p| p.context_tokens == c) {
                Some(p) => row.extend([ms(p.ttft_ms).into(), fraction(p.mfu, p.impossible)]),
                None => row.extend(["–", "–"].map(Cell::from)),
            }
        }
        t.rows.push(row);
    }
    Some(t)
}

/// The headroom lines (decode, then prefill), when there are figures to draw them from.
pub fn headroom(r: &Roofline) -> Vec<String> {
    r.decode_headroom
        .iter()
        .map(|h| h.decode_line())
        .chain(r.prefill_headroom.iter().map(|h| h.prefill_line()))
        .collect()
}

/// Where the limits and the facts came from.
fn inputs(r: &Roofline) -> String {
    match &r.facts {
        Some(f) => format!("limits: {}; model: {}", r.limits.source, facts_line(f)),
        None => format!("limits: {}", r.limits.source),
    }
}

/// The section as document blocks.
pub fn blocks(r: &Roofline) -> Vec<Block> {
    let mut b = vec![
        Block::Heading(3, HEADING.into()),
        Block::Paragraph(inputs(r).into(), Para::Note),
    ];
    let lines = headroom(r);
    if !lines.is_empty() {
        b.push(Block::List(List {
            kind: ListKind::Bullets,
            items: lines
                .into_iter()
                .map(|l| Item::new(Text::default().and(Span::Strong(l))))
                .collect(),
        }));
    }
    if let Some(t) = table(r) {
        b.push(Block::Table(t));
        b.push(Block::Paragraph(
            "bound = (weight bytes a step reads + L × KV bytes per token) ÷ memory bandwidth; bandwidth used = bound ÷ median measured step; MFU = prefill FLOPs ÷ (median TTFT × peak).".into(),
            Para::Note,
        ));
    }
    if !r.defects.is_empty() {
        b.push(Block::Callout(Callout {
            title: None,
            items: r
                .defects
                .iter()
                .map(|d| Item {
                    tone: Tone::Bad,
                    ..Item::new(d.as_str())
                })
                .collect(),
        }));
    }
    let mut notes: Vec<String> = r.step_fit.iter().flat_map(|f| f.lines()).collect();
    notes.extend(r.notes.iter().cloned());
    if !notes.is_empty() {
        b.push(Block::List(List {
            kind: ListKind::Legend,
            items: notes.into_iter().map(Item::new).collect(),
        }));
    }
    b
}

/// The section as terminal text.
pub fn text(r: &Roofline) -> String {
    let mut out = format!(
        "roofline (how far from the hardware's limit): {}\n",
        inputs(r)
    );
    for l in headroom(r) {
        let _ = writeln!(out, "  {l}");
    }
    if let Some(t) = table(r) {
        let layout = Layout {
            indent: "  ",
            ..Default::default()
        };
        out.push_str(&text::render(&t, &layout));
    }
    for d in &r.defects {
        let _ = writeln!(out, "  IMPOSSIBLE: {d}");
    }
    for n in r
        .step_fit
        .iter()
        .flat_map(|f| f.lines())
        .chain(r.notes.iter().cloned())
    {
        let _ = writeln!(out, "  {n}");
    }
    out
}

/// A and B side by side: the decode bound, each side's share of the bandwidth and the
/// headroom B took, and each side's MFU.
pub fn versus_table(c: &RooflineComparison) -> Table {
    let mut t = Table::new([
        ("context", Align::Left),
        ("bound ms", Align::Right),
        ("A bandwidth used", Align::Right),
        ("B bandwidth used", Align::Right),
        ("headroom B took", Align::Right),
        ("A MFU", Align::Right),
        ("B MFU", Align::Right),
    ]);
    let cell = |f: Option<Fraction>| Cell {
        tone: match f {
            Some(f) if f.impossible => Tone::Bad,
            _ => Tone::Normal,
        },
        ..Cell::from(Fraction::text(f))
    };
    for r in &c.rows {
        let bound = match (r.a_bound_ms, r.b_bound_ms) {
            (Some(a), Some(b)) if (a - b).abs() > 1e-9 * a => format!("{} / {}", ms(a), ms(b)),
            (Some(a), _) | (None, Some(a)) => ms(a),
            (None, None) => "–".to_owned(),
        };
        t.rows.push(vec![
            fmt_ctx(r.context_tokens).into(),
            bound.into(),
            cell(r.a_decode),
            cell(r.b_decode),
            r.headroom_taken
                .map_or("–".to_owned(), |x| format!("{:+.0}%", x * 100.0))
                .into(),
            cell(r.a_mfu),
            cell(r.b_mfu),
        ]);
    }
    t
}

/// The comparison's roofline as document blocks.
pub fn versus_blocks(c: &RooflineComparison) -> Vec<Block> {
    let mut b = vec![
        Block::Heading(3, HEADING.into()),
        Block::Paragraph(format!("limits: {}", c.limits.source).into(), Para::Note),
    ];
    if let Some(l) = c.headroom_line() {
        b.push(Block::Paragraph(
            Text::default().and(Span::Strong(l)),
            Para::Plain,
        ));
    }
    b.push(Block::Table(versus_table(c)));
    let items: Vec<Item> = c
        .defects
        .iter()
        .map(|d| Item {
            tone: Tone::Bad,
            ..Item::new(d.as_str())
        })
        .chain(c.notes.iter().map(|n| Item::new(n.as_str())))
        .collect();
    if !items.is_empty() {
        b.push(Block::List(List {
            kind: ListKind::Legend,
            items,
        }));
    }
    b
}

/// The comparison's roofline as terminal text.
pub fn versus_text(c: &RooflineComparison) -> String {
    let mut out = format!(
        "roofline (how far from the hardware's limit): limits: {}\n",
        c.limits.source
    );
    if let Some(l) = c.headroom_line() {
        let _ = writeln!(out, "  {l}");
    }
    let layout = Layout {
        indent: "  ",
        ..Default::default()
    };
    out.push_str(&text::render(&versus_table(c), &layout));
    for d in &c.defects {
        let _ = writeln!(out, "  IMPOSSIBLE: {d}");
    }
    for n in &c.notes {
        let _ = writeln!(out, "  {n}");
    }
    out
}
