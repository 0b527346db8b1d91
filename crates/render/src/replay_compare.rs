//! `ctxbench compare` on two replays: TTFT per input-length and per uncached-tokens bucket
//! (each side's p50 and p90 with intervals, B/A with its interval and verdict) and the proven
//! reuse side by side, for the terminal, Markdown, HTML and JSON.

use ctxbench_stats::compare::replay::{ReplayComparison, ReuseSide, Side, TtftRow};
use ctxbench_stats::stats::tail::Tail;

use crate::doc::{self, Align, Block, Document, Item, List, ListKind, Para, Table};
use crate::RenderError;

/// A quantile with its interval, or the n it needs: `412.0 [398.1–430.2]`,
/// `n = 4, needs 29`.
fn tail(t: &Option<Tail>) -> String {
    match t {
        Some(Tail {
            value: Some(v),
            interval: Some((lo, hi)),
            ..
        }) => format!("{v:.1} [{lo:.1}–{hi:.1}]"),
        Some(t) => crate::replay::too_few(t.n, t.needed),
        None => "–".into(),
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

fn ttft_table(title: &str, c: &ReplayComparison, rows: &[TtftRow]) -> Table {
    let r = |h: String| (h, Align::Right);
    let mut t = Table::new([
        (title.to_owned(), Align::Left),
        r("n A".into()),
        r("n B".into()),
        r("A p50 ms".into()),
        r("B p50 ms".into()),
        r("A p90 ms".into()),
        r("B p90 ms".into()),
        r(format!("B/A [{:.0}% CI]", c.level * 100.0)),
        ("verdict".to_owned(), Align::Left),
    ]);
    for row in rows {
        let (a, b): (&Side, &Side) = (&row.a, &row.b);
        let ratio = match (row.ratio, row.interval) {
            (Some(x), Some(i)) => format!("{x:.2} [{:.2}–{:.2}]", i.low, i.high),
            (Some(x), None) => format!("{x:.2}"),
            _ => "–".into(),
        };
        t.row([
            row.label.clone(),
            a.n.to_string(),
            b.n.to_string(),
            tail(&a.p50),
            tail(&b.p50),
            tail(&a.p90),
            tail(&b.p90),
            ratio,
            row.verdict.to_string(),
        ]);
    }
    t
}

fn reuse_table(rows: &[ReuseSide]) -> Table {
    let r = |h| (h, Align::Right);
    let mut t = Table::new([
        ("group", Align::Left),
        r("A requests"),
        r("A ideal"),
        r("A proven"),
        r("A short"),
        r("B requests"),
        r("B ideal"),
        r("B proven"),
        r("B short"),
    ]);
    for row in rows {
        let cells = |x: &Option<ctxbench_stats::replay_report::ReuseRow>| match x {
            Some(x) => [
                x.requests.to_string(),
                pct(x.ideal_ratio()),
                pct(x.proven_ratio()),
                x.short.to_string(),
            ],
            None => ["–".into(), "–".into(), "–".into(), "–".into()],
        };
        let [a1, a2, a3, a4] = cells(&row.a);
        let [b1, b2, b3, b4] = cells(&row.b);
        t.row([row.label.clone(), a1, a2, a3, a4, b1, b2, b3, b4]);
    }
    t
}

/// The comparison as a document.
pub fn document(c: &ReplayComparison) -> Document {
    let mut lines = vec![
        format!("A: {}; B: {}", c.a, c.b),
        format!(
            "both replayed {} with prompt salt {} (identical prompts)",
            c.trace, c.salt
        ),
    ];
    lines.extend(
        c.mismatches
            .iter()
            .map(|m| format!("allowed mismatch: {m}")),
    );
    lines.extend(c.differences.iter().map(|d| format!("differs: {d}")));
    let mut blocks = vec![
        Block::Heading(1, "ctxbench compare: two replays".into()),
        Block::List(List {
            kind: ListKind::Bullets,
            items: lines.into_iter().map(Item::new).collect(),
        }),
        Block::Heading(2, "Proven reuse".into()),
        Block::Table(reuse_table(&c.reuse)),
        Block::Heading(2, "TTFT by input length".into()),
        Block::Table(ttft_table("input tokens", c, &c.by_input)),
        Block::Heading(2, "TTFT by uncached tokens".into()),
        Block::Table(ttft_table("uncached tokens", c, &c.by_uncached)),
    ];
    blocks.push(Block::Paragraph(
        format!(
            "p50 and p90 with their order-statistic intervals, {}; B/A is the ratio of geometric means with Welch's {:.0}% interval on log TTFT, the samples of one run per side (run-to-run drift not measured); a verdict needs its whole interval beyond ±{:.0}%.",
            crate::replay::quantile_note(&[(0.5, "p50"), (0.9, "p90")]),
            c.level * 100.0,
            c.noise * 100.0
        )
        .into(),
        Para::Note,
    ));
    Document {
        title: format!("ctxbench compare: {} vs {}", c.a, c.b),
        blocks,
    }
}

/// For the terminal.
pub fn text(c: &ReplayComparison) -> String {
    crate::replay::plain(document(c))
}

/// As Markdown.
pub fn markdown(c: &ReplayComparison) -> String {
    doc::write(&document(c), &crate::markdown::MarkdownRenderer)
}

/// As a self-contained HTML page.
pub fn html(c: &ReplayComparison) -> String {
    doc::write(&document(c), &crate::html::HtmlRenderer)
}

/// As JSON.
pub fn json(c: &ReplayComparison) -> Result<String, RenderError> {
    Ok(serde_json::to_string_pretty(c)? + "\n")
}

/// The comparison in `format`: table, md, html or json (the caller refuses csv and llmd-br,
/// which a replay comparison has no form in; they get the table).
pub fn render(c: &ReplayComparison, format: crate::ReportFormat) -> Result<String, RenderError> {
    use crate::ReportFormat as F;
    match format {
        F::Md => Ok(markdown(c)),
        F::Html => Ok(html(c)),
        F::Json => json(c),
        _ => Ok(text(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_stats::stats::significance::Settings;

    #[test]
    fn a_replay_comparison_shows_both_sides_quantiles_reuse_and_verdict_in_every_format() {
        let a = crate::replay::tests::results();
        let mut b = a.clone();
        for s in &mut b.samples {
            s.ttft_ms = s.ttft_ms.map(|t| t * 3.0);
        }
        let sides = vec![
            vec![("A".to_owned(), "a.jsonl".to_owned(), a)],
            vec![("B".to_owned(), "b.jsonl".to_owned(), b)],
        ];
        let c =
            ctxbench_stats::compare::replay::compare(&sides, false, &Settings::default()).unwrap();
        let page = html(&c).replace("&lt;", "<");
        for (name, t) in [
            ("terminal", text(&c)),
            ("markdown", markdown(&c)),
            ("html", page),
        ] {
            for w in [
                "Proven reuse",
                "TTFT by input length",
                "TTFT by uncached tokens",
                "A p50 ms",
                "B p90 ms",
                "n = 4, needs 29",
                "p50: 6, p90: 29)",
                "slower",
                "turn 1",
                "prompt salt 7",
            ] {
                assert!(t.contains(w), "{name} lacks `{w}`:\n{t}");
            }
        }
        let j: serde_json::Value = serde_json::from_str(&json(&c).unwrap()).unwrap();
        assert_eq!(
            j["by_input"][0]["verdict"], "too_few_samples",
            "4 first turns"
        );
        assert_eq!(j["by_input"][1]["verdict"], "slower", "8 later turns");
        assert_eq!(j["reuse"][0]["label"], "all");
    }
}
