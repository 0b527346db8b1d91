//! What a report and a comparison say, built once from the report model as a
//! [`Document`]; the syntax layers (Markdown, HTML) only write it. The tables are shared
//! with the terminal.
//!
//! The Markdown and HTML reports do not say quite the same things: the page has cards,
//! plots and a few sentences of its own, Markdown a compact summary list. Those places
//! test `target` below; the writers never choose what to say.

use super::capacity::capacity;
use super::doc::Target;
use super::doc::{
    Align, Block, Callout, Card, Cell, Document, Figure, Item, List, ListKind, Para, Span, Table,
    Text, Tone,
};
use super::fitwords::{equation, fit_notes};
use crate::format::RenderError;
use crate::svg;
use ctxbench_schema::units::fmt_ctx;
use ctxbench_schema::units::num;
use ctxbench_stats::compare::{Comparison, Verdict, Versus};
use ctxbench_stats::report::{Report, RunReport, ScalingFit};
use ctxbench_stats::stats::Spread;

/// The document of a report of one or more runs.
pub fn report(report: &Report, target: Target) -> Result<Document, RenderError> {
    let names: Vec<&str> = report.runs.iter().map(|r| r.label.as_str()).collect();
    let mut blocks = vec![Block::Heading(1, "ctxbench report".into())];
    if target == Target::Html {
        blocks.push(Block::Paragraph(
            format!("{} · {}", names.join(" · "), report.generated_by).into(),
            Para::Subtitle,
        ));
        // Plots only where they can be shown: drawing them is the slow part.
        let plots = svg::report_plots(report)?;
        if !plots.is_empty() {
            blocks.push(Block::Heading(2, "Plots".into()));
            blocks.push(Block::Gallery(
                plots
                    .into_iter()
                    .map(|p| Figure {
                        svg: p.svg,
                        caption: p.caption,
                    })
                    .collect(),
            ));
        }
    }
    for run in &report.runs {
        blocks.extend(run_blocks(run, target));
    }
    blocks.extend(super::prompts::blocks(&report.prompts));
    let by = &report.generated_by;
    blocks.push(Block::Footer(
        match target {
            Target::Markdown => format!("{by}; built from the results files alone."),
            Target::Html => format!(
                "Built by {by} from the results files alone. Self-contained: no scripts, no network."
            ),
        }
        .into(),
    ));
    Ok(Document {
        title: format!("ctxbench report: {}", names.join(", ")),
        blocks,
    })
}

/// One run: where it came from, warnings, the capacity map, the results and what
/// follows from them.
fn run_blocks(run: &RunReport, target: Target) -> Vec<Block> {
    let mut b = vec![Block::Heading(2, run.label.as_str().into())];
    b.push(facts(run, target));
    if !run.warnings.is_empty() {
        b.push(Block::Callout(Callout {
            title: Some("Warnings".into()),
            items: run
                .warnings
                .iter()
                .map(|w| Item::new(w.message.as_str()))
                .collect(),
        }));
    }
    if target == Target::Html {
        b.push(Block::Cards(cards(run)));
    }
    if let Some(m) = &run.capacity {
        b.extend(capacity(m, target));
    }
    b.extend(results(run, target));
    let stops = crate::describe::shown_stops(run);
    if !stops.is_empty() {
        b.push(Block::Table(stops_table(stops)));
    }
    if let Some(t) = crate::tails::table(&run.points) {
        b.push(Block::Heading(3, "Tails".into()));
        b.push(Block::Paragraph(crate::tails::title().into(), Para::Note));
        b.push(Block::Table(t));
    }
    if let Some(n) = crate::tails::note(&run.points) {
        b.push(Block::Paragraph(n.into(), Para::Note));
    }
    if let Some(d) = &run.design {
        b.extend(super::design::blocks(d));
    }
    if let Some(w) = &run.warm {
        for part in super::retention::warm_parts(w) {
            b.push(Block::Heading(3, part.heading.into()));
            b.push(Block::Paragraph(part.title.into(), Para::Note));
            if let Some(t) = part.table {
                b.push(Block::Table(t));
            }
            b.push(Block::List(List {
                kind: ListKind::Bullets,
                items: part.notes.into_iter().map(Item::new).collect(),
            }));
        }
    }
    if run.points.iter().any(|p| p.warm > 0) {
        b.push(Block::Heading(3, "Decode at depth".into()));
        b.push(Block::Paragraph("Warm samples: after each cold prefill, decode again with the prefix reused on purpose (not in the table above or the fits).".into(), Para::Note));
        b.push(Block::Table(warm_table(run)));
    }
    if !run.needle.is_empty() {
        b.push(Block::Heading(3, "Needle retrieval".into()));
        b.push(Block::Paragraph("A fact with a random value at each depth of a cold, exact-length prompt, asked for at the end (plain completions prompt, no chat template); cells are value found / answered, failed requests apart. Not in the speed numbers.".into(), Para::Note));
        b.push(Block::Table(needle_table(&run.needle)));
    }
    if !run.acceptance.is_empty() {
        b.push(Block::Table(acceptance_table(run)));
    }
    if let Some(c) = &run.cost {
        b.push(Block::Heading(3, "Price of a token".into()));
        b.push(Block::Paragraph(
            crate::describe::cost_title(c).into(),
            Para::Note,
        ));
        b.push(Block::Table(crate::describe::cost_table(c)));
        if let Some(t) = crate::describe::cell_cost_table(c) {
            b.push(Block::Paragraph(
                crate::describe::CELL_COST_TITLE.into(),
                Para::Note,
            ));
            b.push(Block::Table(t));
        }
    }
    b.extend(fits(run, target));
    if let Some(r) = &run.roofline {
        b.extend(super::roofline::blocks(r));
    }
    b
}

/// Where the run came from: Markdown lists server, workload and client; the page says
/// file and run, and shows the rest in cards.
fn facts(run: &RunReport, target: Target) -> Block {
    let srv = &run.server;
    match target {
        Target::Markdown => {
            let max_context = srv.max_context.map_or("not reported".to_owned(), |n| {
                match &srv.max_context_source {
                    Some(src) => format!("{n} ({src})"),
                    None => n.to_string(),
                }
            });
            let items = vec![
                Text::default()
                    .plain("results: ")
                    .code(&run.path)
                    .plain(" (run ")
                    .code(&run.run_id)
                    .plain(format!(", started {})", run.started_at)),
                Text::default()
                    .plain(format!(
                        "server: {} at {}, model ",
                        crate::describe::server_name(srv),
                        srv.url
                    ))
                    .code(srv.model.as_deref().unwrap_or("–"))
                    .plain(format!(", max context {max_context}")),
                format!(
                    "measured: {}, corpus: {}",
                    crate::describe::measured_text(&run.config),
                    run.corpus.label
                )
                .into(),
                format!(
                    "client: {} ({} {}, {} CPUs), ctxbench {}",
                    run.host.hostname,
                    run.host.os,
                    run.host.arch,
                    run.host.cpus,
                    run.ctxbench_version
                )
                .into(),
            ];
            Block::List(List {
                kind: ListKind::Bullets,
                items: items.into_iter().map(Item::new).collect(),
            })
        }
        Target::Html => Block::Paragraph(
            Text::default()
                .plain(format!("{} · run ", run.path))
                .code(&run.run_id)
                .plain(format!(
                    " · started {} · ctxbench {}",
                    run.started_at, run.ctxbench_version
                )),
            Para::Subtitle,
        ),
    }
}

/// The server, the configuration, the corpus and the client, as named values.
fn cards(run: &RunReport) -> Vec<Card> {
    let owned = |v: Vec<(&'static str, String)>| -> Vec<(String, String)> {
        v.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    };
    let host = format!(
        "{} ({} {}, {} CPUs)",
        run.host.hostname, run.host.os, run.host.arch, run.host.cpus
    );
    vec![
        Card {
            title: "Server".into(),
            groups: vec![owned(crate::describe::server_items(&run.server))],
        },
        Card {
            title: "Configuration".into(),
            groups: vec![owned(crate::describe::config_items(&run.config))],
        },
        Card {
            title: "Corpus and client".into(),
            groups: vec![
                owned(crate::describe::corpus_items(&run.corpus)),
                vec![("host".to_owned(), host)],
            ],
        },
    ]
}

/// A median with its range when there are several samples: `79.59 (78.00–81.98)`, the
/// range muted.
fn spread(s: &Option<Spread>) -> Text {
    match s {
        Some(s) if s.n > 1 => {
            Text::default()
                .plain(format!("{} ", num(s.median)))
                .and(Span::Toned(
                    Tone::Muted,
                    format!("({}–{})", num(s.min), num(s.max)),
                ))
        }
        Some(s) => num(s.median).into(),
        None => "–".into(),
    }
}

/// The results table and how to read it.
fn results(run: &RunReport, target: Target) -> Vec<Block> {
    let mut t = Table::new([
        ("context", Align::Left),
        ("usable/n", Align::Right),
        ("TTFT ms", Align::Right),
        ("prefill tok/s", Align::Right),
        ("decode tok/s", Align::Right),
        ("ms/step", Align::Right),
        ("server prompt ms", Align::Right),
        ("server decode tok/s", Align::Right),
        ("excluded", Align::Left),
    ]);
    // Measured and predicted lengths in one ladder, shortest first.
    let mut rows: Vec<(u64, Vec<Cell>)> = Vec::new();
    for p in &run.points {
        let ex = p.exclusions();
        let mut row: Vec<Cell> = vec![
            fmt_ctx(p.context_tokens).into(),
            format!("{}/{}", p.usable, p.samples).into(),
        ];
        row.extend(crate::describe::metric_cells(p, spread).map(Cell::from));
        row.push(match ex.is_empty() {
            true => "–".into(),
            false => Cell {
                tone: Tone::Bad,
                ..Cell::from(ex.join(", "))
            },
        });
        rows.push((p.context_tokens, row));
    }
    for p in super::design::predicted(run.design.as_ref()) {
        let caution = |s: String| Cell {
            tone: Tone::Caution,
            ..Cell::from(s)
        };
        let row: Vec<Cell> = vec![
            fmt_ctx(p.context_tokens).into(),
            caution("pred.".to_owned()),
            caution(super::design::predicted_cell(&p.ttft_ms)),
            caution(super::design::predicted_cell(&p.prefill_tokens_per_s)),
            caution(super::design::predicted_cell(&p.decode_tokens_per_s)),
            caution(super::design::predicted_step(p)),
            "–".into(),
            "–".into(),
            caution(super::design::predicted_source(p)),
        ];
        rows.push((p.context_tokens, row));
    }
    rows.sort_by_key(|r| r.0);
    t.rows.extend(rows.into_iter().map(|r| r.1));
    let legend = crate::describe::exclusion_legend(&run.points);
    let note = match target {
        Target::Markdown => {
            let t = Text::from(
                "Medians (min–max) over usable samples, client-side unless marked server.",
            );
            match legend {
                Some(l) => t.and(Span::Break).plain(l),
                None => t,
            }
        }
        Target::Html => {
            let mut s = "Medians (min–max) over usable samples; client-side unless marked server."
                .to_owned();
            if let Some(l) = legend {
                s = format!("{s} {l}");
            }
            s.into()
        }
    };
    let mut b = Vec::new();
    if target == Target::Html {
        b.push(Block::Heading(3, "Results".into()));
    }
    b.push(Block::Table(t));
    b.push(Block::Paragraph(note, Para::Note));
    b
}

/// Why each point stopped taking repetitions.
fn stops_table(stops: &[ctxbench_schema::record::PointRecord]) -> Table {
    let mut t = Table::new([("context", Align::Left), ("repetitions", Align::Left)]);
    t.compact = true;
    for p in stops {
        t.row([fmt_ctx(p.context_tokens), crate::describe::stop_text(p)]);
    }
    t
}

/// Decode at depth: warm samples beside the cold decode rate.
fn warm_table(run: &RunReport) -> Table {
    let mut t = Table::new([
        ("context", Align::Left),
        ("warm n", Align::Right),
        ("decode tok/s", Align::Right),
        ("ms/step", Align::Right),
        ("cold decode tok/s", Align::Right),
    ]);
    for p in run.points.iter().filter(|p| p.warm > 0) {
        t.row([
            Text::from(fmt_ctx(p.context_tokens)),
            Text::from(p.warm.to_string()),
            spread(&p.warm_decode_tokens_per_s),
            spread(&p.warm_ms_per_step),
            spread(&p.decode_tokens_per_s),
        ]);
    }
    t
}

/// Needle retrieval per context (down) and depth (across): `pass/answered`.
pub fn needle_table(cells: &[ctxbench_stats::integrity::NeedleCell]) -> Table {
    let mut depths: Vec<u32> = cells.iter().map(|c| c.depth_pct).collect();
    depths.sort_unstable();
    depths.dedup();
    let mut contexts: Vec<u64> = cells.iter().map(|c| c.context_tokens).collect();
    contexts.dedup();
    let head = std::iter::once(("context".to_owned(), Align::Left))
        .chain(depths.iter().map(|d| (format!("{d}%"), Align::Right)));
    let mut t = Table::new(head);
    for c in contexts {
        let found = depths.iter().map(|d| {
            cells
                .iter()
                .find(|x| x.context_tokens == c && x.depth_pct == *d)
                .map_or("–".to_owned(), crate::describe::needle_cell)
        });
        t.row(std::iter::once(fmt_ctx(c)).chain(found));
    }
    t
}

/// Speculative acceptance length per context.
fn acceptance_table(run: &RunReport) -> Table {
    let mut t = Table::new([
        ("context", Align::Left),
        ("acceptance length", Align::Right),
    ]);
    t.compact = true;
    for a in &run.acceptance {
        t.row([
            Text::from(fmt_ctx(a.context_tokens)),
            spread(&Some(a.accept_length)),
        ]);
    }
    t
}

/// The scaling fits, each with its notes.
fn fits(run: &RunReport, target: Target) -> Vec<Block> {
    let fits: Vec<&ScalingFit> = run.ttft_fit.iter().chain(&run.step_fit).collect();
    if fits.is_empty() {
        return Vec::new();
    }
    let intro = match target {
        Target::Markdown => "Fitted to the per-length medians of cold usable samples by least squares on relative error, coefficients ≥ 0; L in tokens.",
        Target::Html => "Per-length medians of cold usable samples; least squares on relative error with coefficients ≥ 0; L in tokens.",
    };
    let items = fits
        .into_iter()
        .map(|f| Item {
            text: fit_line(f, target),
            tone: Tone::Normal,
            children: fit_notes(f)
                .into_iter()
                .map(|n| Item {
                    tone: match n.starts_with("EXTRAPOLATED") {
                        true => Tone::Caution,
                        false => Tone::Normal,
                    },
                    ..Item::new(n)
                })
                .collect(),
        })
        .collect();
    vec![
        Block::Heading(3, "Scaling fits".into()),
        Block::Paragraph(intro.into(), Para::Note),
        Block::List(List {
            kind: ListKind::Fits,
            items,
        }),
    ]
}

/// A fit in one line: the equation, R² and what it was fitted to.
fn fit_line(f: &ScalingFit, target: Target) -> Text {
    let (eq, sep, poor) = match target {
        Target::Markdown => (
            Span::Strong(equation(f)),
            " — ",
            Span::Strong("poor fit".into()),
        ),
        Target::Html => (
            Span::Code(equation(f)),
            " · ",
            Span::Toned(Tone::Bad, "poor fit".into()),
        ),
    };
    let comma = match target {
        Target::Markdown => ",",
        Target::Html => " ·",
    };
    let t = Text(vec![eq]).plain(format!(
        "{sep}R² {:.3}{comma} {} medians of {} samples",
        f.fit.r2, f.fit.points, f.fit.n
    ));
    match f.poor {
        true => t.plain(sep).and(poor),
        false => t,
    }
}

/// The document of a comparison of runs against a baseline.
pub fn compare(cmp: &Comparison, target: Target) -> Result<Document, RenderError> {
    let mut blocks = vec![Block::Heading(1, "ctxbench compare".into())];
    if target == Target::Html {
        blocks.push(Block::Paragraph(
            format!("baseline A = {} · cold usable samples", cmp.baseline.label).into(),
            Para::Subtitle,
        ));
        blocks.push(Block::Figure(Figure {
            svg: svg::compare_plot(cmp)?,
            caption: "B/A per context and metric; whiskers: confidence interval; dashed: no change"
                .into(),
        }));
    }
    for v in &cmp.versus {
        blocks.extend(versus_blocks(cmp, v, target));
        if let Some(s) = &v.speculation {
            blocks.extend(super::speculation::blocks(s, target)?);
        }
        if let Some(w) = &v.warm {
            blocks.extend(warm_compare_blocks(w));
        }
        if let Some(r) = &v.roofline {
            blocks.extend(super::roofline::versus_blocks(r));
        }
    }
    Ok(Document {
        title: "ctxbench compare".into(),
        blocks,
    })
}

/// The warm cells of one comparison: a heading, the table (when any cell was on both
/// sides) and the notes (what counts, which side the cache served, why nothing was compared).
fn warm_compare_blocks(w: &ctxbench_stats::compare::warm::WarmComparison) -> Vec<Block> {
    let mut b = vec![Block::Heading(3, "Warm cells".into())];
    if !w.edges.is_empty() {
        b.push(Block::Table(super::retention::compare_edges_table(
            &w.edges,
        )));
    }
    if !w.rows.is_empty() {
        b.push(Block::Table(super::warm::compare_table(w)));
    }
    for n in ctxbench_stats::compare::warm::notes(w) {
        b.push(Block::Paragraph(n.into(), Para::Note));
    }
    b
}

/// One run B against the baseline: what differs, the table, output agreement.
fn versus_blocks(cmp: &Comparison, v: &Versus, target: Target) -> Vec<Block> {
    let note = ctxbench_stats::compare::method_note(cmp, v);
    let mut b = match target {
        Target::Markdown => markdown_differences(cmp, v, &note),
        Target::Html => html_differences(v, &note),
    };
    b.push(Block::Table(compare_table(v)));
    let agreement = crate::describe::agreement_section(cmp, v);
    if !agreement.is_empty() {
        if target == Target::Html {
            b.push(Block::Heading(3, "Output agreement".into()));
        }
        b.push(Block::Preformatted(agreement));
    }
    b
}

/// Markdown's head of a comparison: the pair, the method, the recorded differences and
/// what was compared despite a mismatch.
fn markdown_differences(cmp: &Comparison, v: &Versus, note: &str) -> Vec<Block> {
    let mut b = vec![
        Block::Heading(
            2,
            format!("B = {} vs A = {}", v.run.label, cmp.baseline.label).into(),
        ),
        Block::Paragraph(format!("Cold usable samples. {note}.").into(), Para::Plain),
    ];
    if !v.differences.is_empty() {
        b.push(Block::Paragraph(
            "Recorded differences:".into(),
            Para::Plain,
        ));
        b.push(Block::List(List {
            kind: ListKind::Bullets,
            items: v
                .differences
                .iter()
                .map(|d| Item::new(Text::default().code(d)))
                .collect(),
        }));
    }
    if !v.mismatches.is_empty() {
        b.push(Block::Callout(Callout {
            title: None,
            items: v
                .mismatches
                .iter()
                .map(|m| Item::new(format!("compared anyway (--allow-mismatch): {m}")))
                .collect(),
        }));
    }
    b.extend(predicted_callout(v));
    b.extend(coverage_callout(v));
    b
}

/// One callout naming the lengths B's designed run predicted instead of measuring, if any.
fn predicted_callout(v: &Versus) -> Option<Block> {
    (!v.predicted.is_empty()).then(|| {
        Block::Callout(Callout {
            title: None,
            items: v
                .predicted
                .iter()
                .map(|n| Item::new(format!("predicted, not measured: {n}")))
                .collect(),
        })
    })
}

/// One callout holding a designed run's intervals against the other run's medians: per
/// length and metric, covered or the drift between the runs (`compare::coverage`).
fn coverage_callout(v: &Versus) -> Option<Block> {
    (!v.coverage.is_empty()).then(|| {
        Block::Callout(Callout {
            title: Some("designed intervals against the other run".into()),
            items: v
                .coverage
                .iter()
                .map(|c| Item {
                    tone: if c.covered { Tone::Good } else { Tone::Bad },
                    ..Item::new(c.text())
                })
                .collect(),
        })
    })
}

/// The page's head of a comparison: B, the method, and one callout of differences and
/// mismatches.
fn html_differences(v: &Versus, note: &str) -> Vec<Block> {
    let mut b = vec![
        Block::Heading(2, format!("B = {}", v.run.label).into()),
        Block::Paragraph(note.into(), Para::Subtitle),
    ];
    if !v.differences.is_empty() || !v.mismatches.is_empty() {
        let differs = v
            .differences
            .iter()
            .map(|d| Item::new(Text::default().plain("differs: ").code(d)));
        let mismatches = v.mismatches.iter().map(|m| Item {
            tone: Tone::Bad,
            ..Item::new(format!("compared anyway: {m}"))
        });
        b.push(Block::Callout(Callout {
            title: None,
            items: differs.chain(mismatches).collect(),
        }));
    }
    b.extend(predicted_callout(v));
    b.extend(coverage_callout(v));
    b
}

/// B against A per context and metric: values, ratio, interval and verdict.
pub fn compare_table(v: &Versus) -> Table {
    let mut t = Table::new([
        ("context", Align::Left),
        ("metric", Align::Left),
        ("A", Align::Right),
        ("B", Align::Right),
        ("B/A", Align::Right),
        ("interval", Align::Right),
        ("verdict", Align::Left),
    ]);
    for r in &v.rows {
        let val = |x: Option<f64>| {
            x.map(|x| format!("{} {}", num(x), r.metric.unit()))
                .unwrap_or("–".into())
        };
        let verdict = Cell {
            tone: match r.verdict {
                Verdict::Faster => Tone::Good,
                Verdict::Slower => Tone::Bad,
                _ => Tone::Muted,
            },
            strong: matches!(r.verdict, Verdict::Faster | Verdict::Slower),
            ..Cell::from(crate::describe::verdict_text(v, r))
        };
        t.rows.push(vec![
            r.label().into(),
            r.metric.label().into(),
            val(r.a).into(),
            val(r.b).into(),
            r.ratio
                .map(|x| format!("{x:.3}"))
                .unwrap_or("–".into())
                .into(),
            r.shown_interval()
                .map(|c| format!("{:.3}–{:.3}", c.low, c.high))
                .unwrap_or("–".into())
                .into(),
            verdict,
        ]);
    }
    t
}

// A syntax writes the document of its target (hyperfine's blanket `MarkupExporter`).
impl<M: crate::doc::Markup> crate::format::Renderer for M {
    fn report(
        &self,
        report: &ctxbench_stats::report::Report,
    ) -> Result<String, crate::format::RenderError> {
        Ok(crate::doc::write(&self::report(report, M::TARGET)?, self))
    }

    fn compare(
        &self,
        cmp: &ctxbench_stats::compare::Comparison,
    ) -> Result<String, crate::format::RenderError> {
        Ok(crate::doc::write(&self::compare(cmp, M::TARGET)?, self))
    }
}
