//! Markdown: the report document as GitHub-flavoured Markdown. Syntax only; what is said
//! is in `sections`.

use super::doc::Target;
use super::doc::{Align, Callout, Card, Figure, Item, List, Markup, Para, Span, Table, Text};

/// The Markdown format.
pub struct MarkdownRenderer;

/// Escapes what would break a table row or a line: `|` and line breaks.
fn escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Inline text. No colour in Markdown: toned words are plain.
fn inline(t: &Text) -> String {
    t.0.iter()
        .map(|s| match s {
            Span::Plain(x) | Span::Toned(_, x) => escape(x),
            Span::Strong(x) => format!("**{}**", escape(x)),
            // A backtick would end the code span early.
            Span::Code(x) => format!("`{}`", x.replace('`', "'")),
            Span::Break => "\n".to_owned(),
        })
        .collect()
}

fn items(out: &mut String, items: &[Item], depth: usize, mark: &str) {
    for i in items {
        out.push_str(&"  ".repeat(depth));
        out.push_str("- ");
        out.push_str(mark);
        out.push_str(&inline(&i.text));
        out.push('\n');
        self::items(out, &i.children, depth + 1, "");
    }
}

impl Markup for MarkdownRenderer {
    const TARGET: Target = Target::Markdown;

    fn heading(&self, out: &mut String, level: u8, text: &Text) {
        out.push_str(&format!(
            "{} {}\n\n",
            "#".repeat(level.into()),
            inline(text)
        ));
    }

    fn paragraph(&self, out: &mut String, text: &Text, _kind: Para) {
        out.push_str(&inline(text));
        out.push_str("\n\n");
    }

    fn list(&self, out: &mut String, list: &List) {
        items(out, &list.items, 0, "");
        out.push('\n');
    }

    fn callout(&self, out: &mut String, c: &Callout) {
        if let Some(t) = &c.title {
            out.push_str(&format!("**{}**\n\n", escape(t)));
        }
        items(out, &c.items, 0, "⚠ ");
        out.push('\n');
    }

    fn cards(&self, out: &mut String, cards: &[Card]) {
        for c in cards {
            out.push_str(&format!("**{}**\n\n", escape(&c.title)));
            for (k, v) in c.groups.iter().flatten() {
                out.push_str(&format!("- {}: {}\n", escape(k), escape(v)));
            }
            out.push('\n');
        }
    }

    fn table(&self, out: &mut String, t: &Table) {
        if let Some(title) = &t.title {
            out.push_str(&format!("{}\n\n", escape(title)));
        }
        let head: Vec<String> = t.head.iter().map(|h| escape(h)).collect();
        out.push_str(&format!("| {} |\n|", head.join(" | ")));
        for a in &t.align {
            out.push_str(match a {
                Align::Left => "---|",
                Align::Right => "--:|",
            });
        }
        out.push('\n');
        for row in &t.rows {
            let cells: Vec<String> = row
                .iter()
                .map(|c| match c.strong {
                    // No colour here: a cell meant to stand out is bold instead.
                    true => format!("**{}**", inline(&c.text)),
                    false => inline(&c.text),
                })
                .collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out.push('\n');
    }

    // Markdown cannot carry an inline SVG; `ctxbench report` writes the plots beside it.
    fn figure(&self, _out: &mut String, _figure: &Figure) {}

    fn gallery(&self, _out: &mut String, _figures: &[Figure]) {}

    fn preformatted(&self, out: &mut String, text: &str) {
        out.push_str("```text\n");
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("```\n\n");
    }

    fn footer(&self, out: &mut String, text: &Text) {
        out.push_str(&format!("_{}_\n", inline(text)));
    }
}

#[cfg(test)]
mod tests {
    use super::super::doc::{self, Block, Cell, Document, Tone};
    use super::*;

    fn write(blocks: Vec<Block>) -> String {
        let d = Document {
            title: String::new(),
            blocks,
        };
        doc::write(&d, &MarkdownRenderer)
    }

    #[test]
    fn a_table_escapes_pipes_and_bolds_only_cells_meant_to_stand_out() {
        let mut t = Table::new([("context", Align::Left), ("verdict", Align::Left)]);
        t.row(["1k", "a|b"]);
        t.rows.push(vec![
            "2k".into(),
            Cell {
                tone: Tone::Bad,
                strong: true,
                ..Cell::from("slower")
            },
        ]);
        t.rows.push(vec![
            "4k".into(),
            Cell {
                tone: Tone::Bad,
                ..Cell::from("1 cached")
            },
        ]);
        assert_eq!(
            write(vec![Block::Table(t)]),
            "| context | verdict |\n|---|---|\n| 1k | a\\|b |\n| 2k | **slower** |\n| 4k | 1 cached |\n\n"
        );
    }

    #[test]
    fn a_list_of_mismatches_ends_before_the_compare_table_starts() {
        // A table right under a list item was read as part of the item.
        let loaded = |n: &str| {
            let r = ctxbench_schema::testdata::golden(&format!("{n}.jsonl"));
            vec![(n.to_owned(), format!("{n}.jsonl"), r)]
        };
        let cmp = ctxbench_stats::compare::build(
            &[loaded("sweep"), loaded("two-point")],
            true,
            &Default::default(),
        )
        .unwrap();
        assert!(!cmp.versus[0].mismatches.is_empty());
        let md = crate::format::Renderer::compare(&MarkdownRenderer, &cmp).unwrap();
        assert!(
            md.contains("stream vs two-point\n\n| context | metric |"),
            "{md}"
        );
    }
}
