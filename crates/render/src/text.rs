//! Aligned plain-text tables for the terminal. The one place that pads cells: widths are
//! display widths (`unicode-width`), not `char` counts, so that a wide label (CJK, emoji)
//! does not push the columns after it out of line.

use unicode_width::UnicodeWidthStr;

use super::doc::{Align, Table};

/// How a text table is laid out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Layout<'a> {
    /// Written before every line.
    pub indent: &'a str,
    /// A `─` rule under the head.
    pub rule: bool,
    /// Least width per column, by position; columns not named fit their cells.
    pub min_widths: &'a [usize],
}

/// The columns of one table: their widths and alignment.
#[derive(Debug, Clone)]
pub struct Columns {
    widths: Vec<usize>,
    align: Vec<Align>,
    indent: String,
}

/// Display width: the terminal columns a string takes.
pub fn width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

impl Columns {
    /// Columns wide enough for the table's head and every row.
    pub fn fit(table: &Table, layout: &Layout) -> Self {
        let mut widths: Vec<usize> = table
            .head
            .iter()
            .enumerate()
            .map(|(i, h)| width(h).max(layout.min_widths.get(i).copied().unwrap_or(0)))
            .collect();
        for row in &table.rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(&c.text.to_plain()));
            }
        }
        Columns {
            widths,
            align: table.align.clone(),
            indent: layout.indent.to_owned(),
        }
    }

    /// One line: each cell padded to its column, two spaces apart, no trailing blanks.
    pub fn line<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&self.widths)
            .zip(&self.align)
            .map(|((c, w), a)| {
                let c = c.as_ref();
                let pad = " ".repeat(w.saturating_sub(width(c)));
                match a {
                    Align::Left => format!("{c}{pad}"),
                    Align::Right => format!("{pad}{c}"),
                }
            })
            .collect();
        format!("{}{}", self.indent, parts.join("  "))
            .trim_end()
            .to_owned()
    }

    /// The rule under the head: `─` across each column.
    pub fn rule(&self) -> String {
        let parts: Vec<String> = self.widths.iter().map(|w| "─".repeat(*w)).collect();
        format!("{}{}", self.indent, parts.join("  "))
    }
}

/// The table as aligned text: the head, a rule if asked, then the rows; the title is the
/// caller's to place.
pub fn render(table: &Table, layout: &Layout) -> String {
    let cols = Columns::fit(table, layout);
    let mut out = cols.line(&table.head);
    out.push('\n');
    if layout.rule {
        out.push_str(&cols.rule());
        out.push('\n');
    }
    for row in &table.rows {
        let cells: Vec<String> = row.iter().map(|c| c.text.to_plain()).collect();
        out.push_str(&cols.line(&cells));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[[&str; 2]]) -> Table {
        let mut t = Table::new([("name", Align::Left), ("value", Align::Right)]);
        for r in rows {
            t.row(*r);
        }
        t
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_numbers_align_right() {
        let t = table(&[["a", "1"], ["longer name", "12345"]]);
        let out = render(&t, &Layout::default());
        assert_eq!(
            out,
            "name         value\na                1\nlonger name  12345\n"
        );
    }

    #[test]
    fn wide_characters_count_by_display_width_not_chars() {
        // Three CJK characters are three chars but six terminal columns.
        let t = table(&[["日本語", "1"], ["abc", "2"]]);
        let out = render(&t, &Layout::default());
        assert_eq!(out, "name    value\n日本語      1\nabc         2\n");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.iter().all(|l| width(l) == width(lines[0])), "{out}");
        // The symbols the reports use are one column each, as their char count said.
        for s in ["–", "×", "±", "µ", "→", "≤", "─", "·", "²", "≈", "⚠"] {
            assert_eq!(width(s), 1, "{s}");
        }
    }

    #[test]
    fn indent_rule_and_least_widths() {
        let t = table(&[["x", "1"]]);
        let layout = Layout {
            indent: "  ",
            rule: true,
            min_widths: &[0, 7],
        };
        assert_eq!(
            render(&t, &layout),
            "  name    value\n  ────  ───────\n  x           1\n"
        );
    }
}
