//! The capacity map (context × concurrency) as document blocks: shared by the terminal
//! table and the Markdown and HTML sections.

use super::doc::{Align, Block, Item, List, ListKind, Para, Span, Table, Target, Text};
use ctxbench_stats::capacity as ctxbench_capacity;

/// The capacity map: what it is, one table per metric, and its legend.
pub fn capacity(m: &ctxbench_capacity::CapacityMap, target: Target) -> Vec<Block> {
    let lowest = m.levels.first().copied().unwrap_or(1);
    let mut b = match target {
        Target::Markdown => vec![Block::Paragraph(
            Text::default()
                .and(Span::Strong("Capacity map".into()))
                .plain(format!(
                    " (context × concurrency; the table below is c = {lowest})"
                )),
            Para::Plain,
        )],
        Target::Html => vec![
            Block::Heading(3, "Capacity map".into()),
            Block::Paragraph(
                format!("context × concurrency; the results table below is c = {lowest}").into(),
                Para::Note,
            ),
        ],
    };
    b.extend(capacity_tables(m).into_iter().map(Block::Table));
    b.push(Block::List(List {
        kind: ListKind::Legend,
        items: ctxbench_capacity::map_legend(m)
            .into_iter()
            .map(Item::new)
            .collect(),
    }));
    b
}

/// The capacity map's tables, titled: contexts down, concurrency levels across.
pub fn capacity_tables(m: &ctxbench_capacity::CapacityMap) -> Vec<Table> {
    ctxbench_capacity::map_tables(m)
        .into_iter()
        .map(|t| {
            // Contexts left, cells right-aligned so that the numbers line up.
            let align = (0..t.head.len()).map(|i| match i {
                0 => Align::Left,
                _ => Align::Right,
            });
            let mut table = Table::new(t.head.into_iter().zip(align));
            table.title = Some(t.title);
            for r in t.rows {
                table.row(r);
            }
            table
        })
        .collect()
}
