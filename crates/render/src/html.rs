//! One self-contained HTML file: the report document with its plots as inline SVG. No
//! scripts, no external fetches, so it opens anywhere, offline, and can be mailed as one
//! file. Syntax only; what is said is in `sections`.

use std::fmt::Write;

use super::doc::Target;
use super::doc::{
    Callout, Card, Document, Figure, Item, List, ListKind, Markup, Para, Span, Table, Text, Tone,
};

/// The HTML format.
pub struct HtmlRenderer;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1120px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:26px;margin:8px 0 4px}h2{font-size:20px;margin:32px 0 10px;border-bottom:2px solid #dde1e8;padding-bottom:4px}
h3{font-size:16px;margin:22px 0 8px}
.sub{color:#5b6475;margin:0 0 14px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:14px}
.card{background:#fff;border:1px solid #e1e5eb;border-radius:8px;padding:12px 16px}
.card h3{margin:0 0 8px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0;font-size:14px}
dt{color:#5b6475}dd{margin:0;word-break:break-all}
table{border-collapse:collapse;background:#fff;font-size:14px;border:1px solid #e1e5eb}
th,td{padding:5px 10px;border-bottom:1px solid #eceff3;text-align:right;white-space:nowrap}
th{background:#eef1f5;font-weight:600}
td:first-child,th:first-child{text-align:left}
.warn{background:#fff6e0;border:1px solid #f0c36d;border-radius:8px;padding:8px 16px;margin:10px 0}
.warn li{margin:3px 0}
.ok{color:#0a7a3f}.bad{color:#b3261e;font-weight:600}.muted{color:#7a8294}
.fits li{margin:6px 0}.fits code{font-size:14px;background:#eef1f5;padding:1px 5px;border-radius:4px}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:14px}
figure{margin:0;background:#fff;border:1px solid #e1e5eb;border-radius:8px;padding:8px}
figure svg{width:100%;height:auto;display:block}
figcaption{font-size:13px;color:#5b6475;padding:4px 6px}
.extra{font-weight:600;color:#8a4b00}
footer{margin-top:36px;color:#7a8294;font-size:13px}
";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n",
        esc(title)
    )
}

/// The class attribute of a tone, or nothing.
fn class(tone: Tone) -> &'static str {
    match tone {
        Tone::Normal => "",
        Tone::Good => " class=\"ok\"",
        Tone::Bad => " class=\"bad\"",
        Tone::Muted => " class=\"muted\"",
        Tone::Caution => " class=\"extra\"",
    }
}

/// Inline text, escaped.
fn inline(t: &Text) -> String {
    t.0.iter()
        .map(|s| match s {
            Span::Plain(x) | Span::Toned(Tone::Normal, x) => esc(x),
            Span::Strong(x) => format!("<strong>{}</strong>", esc(x)),
            Span::Code(x) => format!("<code>{}</code>", esc(x)),
            Span::Toned(t, x) => format!("<span{}>{}</span>", class(*t), esc(x)),
            Span::Break => "<br>".to_owned(),
        })
        .collect()
}

fn items(out: &mut String, items: &[Item]) {
    for i in items {
        let _ = write!(out, "<li{}>{}", class(i.tone), inline(&i.text));
        if !i.children.is_empty() {
            out.push_str("<ul>");
            self::items(out, &i.children);
            out.push_str("</ul>");
        }
        out.push_str("</li>");
    }
}

impl Markup for HtmlRenderer {
    const TARGET: Target = Target::Html;

    fn heading(&self, out: &mut String, level: u8, text: &Text) {
        let _ = writeln!(out, "<h{level}>{}</h{level}>", inline(text));
    }

    fn paragraph(&self, out: &mut String, text: &Text, kind: Para) {
        let class = match kind {
            Para::Plain => "",
            Para::Subtitle => " class=\"sub\"",
            Para::Note => " class=\"muted\"",
        };
        let _ = writeln!(out, "<p{class}>{}</p>", inline(text));
    }

    fn list(&self, out: &mut String, list: &List) {
        out.push_str(match list.kind {
            ListKind::Bullets => "<ul>",
            ListKind::Legend => "<ul class=\"muted\">",
            ListKind::Fits => "<ul class=\"fits\">",
        });
        items(out, &list.items);
        out.push_str("</ul>\n");
    }

    fn callout(&self, out: &mut String, c: &Callout) {
        out.push_str("<div class=\"warn\">");
        if let Some(t) = &c.title {
            let _ = write!(out, "<strong>{}</strong>", esc(t));
        }
        out.push_str("<ul>");
        items(out, &c.items);
        out.push_str("</ul></div>");
        // The comparison's untitled callout has always run into the table after it; the
        // snapshots pin that byte for byte.
        if c.title.is_some() {
            out.push('\n');
        }
    }

    fn cards(&self, out: &mut String, cards: &[Card]) {
        out.push_str("<div class=\"cards\">\n");
        for c in cards {
            let _ = write!(out, "<div class=\"card\"><h3>{}</h3>", esc(&c.title));
            for g in &c.groups {
                out.push_str("<dl>");
                for (k, v) in g {
                    let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
                }
                out.push_str("</dl>");
            }
            out.push_str("</div>\n");
        }
        out.push_str("</div>\n");
    }

    fn table(&self, out: &mut String, t: &Table) {
        if let Some(title) = &t.title {
            let _ = writeln!(out, "<p>{}</p>", esc(title));
        }
        let nl = if t.compact { "" } else { "\n" };
        out.push_str("<table><thead><tr>");
        for h in &t.head {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        let _ = write!(out, "</tr></thead><tbody>{nl}");
        for row in &t.rows {
            out.push_str("<tr>");
            for c in row {
                let _ = write!(out, "<td{}>{}</td>", class(c.tone), inline(&c.text));
            }
            let _ = write!(out, "</tr>{nl}");
        }
        out.push_str("</tbody></table>\n");
    }

    fn figure(&self, out: &mut String, f: &Figure) {
        // plotters writes a bare <svg> element; drop any XML prolog so it can sit inline.
        let svg = f.svg.trim_start_matches(|c: char| c != '<');
        let svg = match svg.strip_prefix("<?xml") {
            Some(rest) => rest.split_once("?>").map(|x| x.1).unwrap_or(rest),
            None => svg,
        };
        let _ = writeln!(
            out,
            "<figure>{}<figcaption>{}</figcaption></figure>",
            svg.trim(),
            esc(&f.caption)
        );
    }

    fn gallery(&self, out: &mut String, figures: &[Figure]) {
        out.push_str("<div class=\"plots\">\n");
        for f in figures {
            self.figure(out, f);
        }
        out.push_str("</div>\n");
    }

    fn preformatted(&self, out: &mut String, text: &str) {
        let _ = writeln!(out, "<pre>{}</pre>", esc(text));
    }

    fn footer(&self, out: &mut String, text: &Text) {
        let _ = writeln!(out, "<footer>{}</footer>", inline(text));
    }

    fn finish(&self, doc: &Document, body: String) -> String {
        page(&doc.title, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::doc::{self, Align, Block, Cell};
    use super::*;

    #[test]
    fn cells_are_escaped_toned_and_compact_tables_take_one_line() {
        let mut t = Table::new([("context", Align::Left), ("note", Align::Left)]);
        t.compact = true;
        t.rows.push(vec![
            "1k".into(),
            Cell {
                tone: Tone::Bad,
                ..Cell::from("a < b")
            },
        ]);
        let d = Document {
            title: "t".into(),
            blocks: vec![Block::Table(t)],
        };
        let page = doc::write(&d, &HtmlRenderer);
        assert!(page.contains(
            "<table><thead><tr><th>context</th><th>note</th></tr></thead><tbody><tr><td>1k</td><td class=\"bad\">a &lt; b</td></tr></tbody></table>\n"
        ), "{page}");
    }
}
