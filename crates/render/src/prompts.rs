//! The report's "Prompts, corpora and draft positions" section (see `stats::prompts`):
//! acceptance per corpus with the inflation ratio, the spread between prompts against the
//! noise between repetitions, and acceptance per draft position.

use super::doc::{Align, Block, Para, Table, Text};
use ctxbench_schema::units::fmt_ctx;
use ctxbench_schema::units::num;
use ctxbench_stats::stats::prompts::{Components, PromptsReport};

/// The section's tables (empty when the runs have nothing to show).
pub fn tables(p: &PromptsReport) -> Vec<(String, Table)> {
    [inflation(p), spread(p), positions(p)]
        .into_iter()
        .flatten()
        .collect()
}

/// Right-aligned column header.
fn r(h: &'static str) -> (&'static str, Align) {
    (h, Align::Right)
}

/// The synthetic-text trap: acceptance with the repeated sentence against real text.
fn inflation(p: &PromptsReport) -> Option<(String, Table)> {
    if !p.inflation.is_empty() {
        let mut t = Table::new([
            ("run", Align::Left),
            ("context", Align::Left),
            ("against", Align::Left),
            r("accept len, repeat"),
            r("accept len, real text"),
            r("inflation (95% CI)"),
            r("accept rate repeat / real"),
            r("units"),
        ]);
        for i in &p.inflation {
            let rate = |x: Option<f64>| x.map_or("–".to_owned(), |v| format!("{v:.2}"));
            t.row([
                i.run.clone(),
                fmt_ctx(i.context_tokens),
                i.natural_corpus.clone(),
                num(i.repeat.0),
                num(i.natural.0),
                match i.interval {
                    Some((lo, hi)) => format!("{:.2}× ({lo:.2}–{hi:.2})", i.ratio),
                    None => format!("{:.2}× (n/a: one unit)", i.ratio),
                },
                format!("{} / {}", rate(i.rates.0), rate(i.rates.1)),
                format!("{} / {}", i.repeat.1, i.natural.1),
            ]);
        }
        // Rows may hold different real texts (natural prose and code): name one only when
        // every row shares it, else each row's "against" column does.
        let first = p.inflation.first().map(|i| i.natural_corpus.as_str());
        let natural = match first {
            Some(c) if p.inflation.iter().all(|i| i.natural_corpus == c) => c.to_owned(),
            _ => "the real text named in each row".to_owned(),
        };
        return Some((
            format!("Synthetic-text trap: acceptance length with the repeated sentence vs {natural}; inflation = repeat ÷ real text (units: prompts, or samples without --prompts)"),
            t,
        ));
    }
    None
}

/// Between prompts against between repetitions, per point.
fn spread(p: &PromptsReport) -> Option<(String, Table)> {
    if !p.spread.is_empty() {
        let mut t = Table::new([
            ("run", Align::Left),
            ("corpus", Align::Left),
            ("context", Align::Left),
            r("prompts × samples"),
            r("ms/token between SD"),
            r("within SD"),
            r("accept len between SD"),
            r("within SD"),
            r("share between"),
        ]);
        let sd = |c: &Option<Components>, between: bool| {
            c.map_or("–".to_owned(), |c| {
                num(if between { c.between_sd } else { c.within_sd })
            })
        };
        for s in &p.spread {
            let shape = s.ms_per_token.or(s.accept_length);
            t.row([
                s.run.clone(),
                s.corpus.clone(),
                fmt_ctx(s.context_tokens),
                shape.map_or("–".to_owned(), |c| format!("{} × {}", c.prompts, c.n)),
                sd(&s.ms_per_token, true),
                sd(&s.ms_per_token, false),
                sd(&s.accept_length, true),
                sd(&s.accept_length, false),
                s.accept_length
                    .or(s.ms_per_token)
                    .map_or("–".to_owned(), |c| format!("{:.0}%", 100.0 * c.icc)),
            ]);
        }
        return Some((
            "Between prompts vs between repetitions (one-way random-effects ANOVA per point; share between = σ²between ÷ total, of acceptance length where speculative, else of ms/token)".to_owned(),
            t,
        ));
    }
    None
}

/// The speculative counters per point.
fn positions(p: &PromptsReport) -> Option<(String, Table)> {
    if !p.positions.is_empty() {
        let mut t = Table::new([
            ("run", Align::Left),
            ("corpus", Align::Left),
            ("context", Align::Left),
            r("verify steps"),
            r("drafts"),
            r("proposed"),
            r("accepted"),
            ("accept rate by position 0, 1, …", Align::Left),
            r("ms/token"),
            r("ms/verify step"),
        ]);
        let opt = |x: Option<u64>| x.map_or("–".to_owned(), |v| v.to_string());
        let ms = |x: Option<f64>| x.map_or("–".to_owned(), num);
        for q in &p.positions {
            t.row([
                q.run.clone(),
                q.corpus.clone(),
                fmt_ctx(q.context_tokens),
                q.verify_steps.to_string(),
                opt(q.drafts),
                opt(q.draft_tokens),
                q.accepted_tokens.to_string(),
                if q.position_rates.is_empty() {
                    "not counted by the server".to_owned()
                } else {
                    q.position_rates
                        .iter()
                        .map(|r| format!("{r:.2}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                },
                ms(q.ms_per_token),
                ms(q.ms_per_verify_step),
            ]);
        }
        return Some((
            "Speculative counters per point (sums over cold samples; rate at position k = drafts accepted at k ÷ drafts)".to_owned(),
            t,
        ));
    }
    None
}

/// The section as report blocks.
pub fn blocks(p: &PromptsReport) -> Vec<Block> {
    let t = tables(p);
    if t.is_empty() {
        return Vec::new();
    }
    let mut b = vec![Block::Heading(
        2,
        "Prompts, corpora and draft positions".into(),
    )];
    for (title, table) in t {
        b.push(Block::Paragraph(Text::from(title.as_str()), Para::Note));
        b.push(Block::Table(table));
    }
    b
}

/// The section as terminal text.
pub fn text(p: &PromptsReport) -> String {
    let layout = super::text::Layout {
        indent: "  ",
        rule: true,
        min_widths: &[],
    };
    tables(p)
        .into_iter()
        .map(|(title, t)| format!("{title}:\n{}", super::text::render(&t, &layout)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_stats::stats::prompts::Inflation;

    fn row(corpus: &str, natural: f64) -> Inflation {
        Inflation {
            run: "ngram".into(),
            natural_corpus: corpus.into(),
            context_tokens: 512,
            repeat: (9.0, 4),
            natural: (natural, 4),
            rates: (Some(1.0), Some(0.5)),
            ratio: 9.0 / natural,
            interval: Some((2.0, 10.0)),
        }
    }

    #[test]
    fn the_inflation_table_names_each_rows_real_text_when_natural_and_code_are_mixed() {
        // The real pair's per-corpus run: code rows were headed "vs natural text from …".
        let p = PromptsReport {
            inflation: vec![
                row("natural text from topics.py", 2.2),
                row("code from /usr/lib/python3.11", 1.9),
            ],
            ..PromptsReport::default()
        };
        let t = tables(&p);
        let (title, table) = &t[0];
        assert!(
            title.contains("vs the real text named in each row"),
            "{title}"
        );
        assert!(!title.contains("topics.py"), "{title}");
        let text = format!("{table:?}");
        assert!(
            text.contains("code from /usr/lib/python3.11") && text.contains("against"),
            "{text}"
        );
        // One real text: the title names it.
        let one = PromptsReport {
            inflation: vec![row("natural text from topics.py", 2.2)],
            ..PromptsReport::default()
        };
        assert!(tables(&one)[0].0.contains("vs natural text from topics.py"));
    }
}
