//! The replay report (`ctxbench report` on a replay's results, and the end of `ctxbench
//! replay`): one document, written for the terminal, Markdown, HTML and JSON.

use ctxbench_stats::replay_report::{DecodeRow, Quantile, ReplayReport, ReuseRow, TtftRow};
use ctxbench_stats::stats::tail::{n_needed, CONFIDENCE};

use crate::doc::{self, Align, Block, Document, Figure, Item, List, ListKind, Para, Table, Target};
use crate::RenderError;

fn pct(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

/// The cell of a quantile a bucket has too few samples for: `n = 9, needs 29` (here and in
/// `ctxbench compare` of two replays).
pub(crate) fn too_few(n: usize, need: usize) -> String {
    format!("n = {n}, needs {need}")
}

/// The note under a replay's TTFT tables: which quantiles are given, and from how many
/// samples (the counts of `stats::tail`, one rule for the report and the comparison).
pub(crate) fn quantile_note(levels: &[(f64, &str)]) -> String {
    let counts: Vec<String> = levels
        .iter()
        .map(|&(q, name)| format!("{name}: {}", n_needed(q, CONFIDENCE)))
        .collect();
    format!(
        "given where the bucket has the samples their {:.0}% distribution-free interval needs ({}), else \"n = K, needs N\"",
        CONFIDENCE * 100.0,
        counts.join(", ")
    )
}

fn q(x: &Quantile) -> String {
    match x {
        Quantile::Value(v) => format!("{v:.1}"),
        Quantile::TooFew { n, need } => too_few(*n, *need),
    }
}

fn reuse_table(title: &str, rows: &[ReuseRow]) -> Table {
    let r = |h| (h, Align::Right);
    let mut t = Table::new([
        (title, Align::Left),
        r("requests"),
        r("input tok"),
        r("ideal reuse"),
        r("proven reuse"),
        r("reuse_short"),
        r("unverified"),
    ]);
    for row in rows {
        t.row([
            row.label.clone(),
            row.requests.to_string(),
            row.input_tokens.to_string(),
            pct(row.ideal_ratio()),
            pct(row.proven_ratio()),
            row.short.to_string(),
            row.unverified.to_string(),
        ]);
    }
    t
}

fn ttft_table(title: &str, rows: &[TtftRow]) -> Table {
    let r = |h| (h, Align::Right);
    let mut t = Table::new([
        (title, Align::Left),
        r("n"),
        r("TTFT p50 ms"),
        r("p90 ms"),
        r("p99 ms"),
    ]);
    for row in rows {
        t.row([
            row.label.clone(),
            row.n.to_string(),
            q(&row.p50),
            q(&row.p90),
            q(&row.p99),
        ]);
    }
    t
}

fn decode_table(rows: &[DecodeRow]) -> Table {
    let r = |h| (h, Align::Right);
    let mut t = Table::new([
        ("input tokens", Align::Left),
        r("n"),
        r("decode tok/s median"),
        r("min"),
        r("max"),
    ]);
    for row in rows {
        t.row([
            row.label.clone(),
            row.n.to_string(),
            format!("{:.1}", row.median_tokens_per_s),
            format!("{:.1}", row.min_tokens_per_s),
            format!("{:.1}", row.max_tokens_per_s),
        ]);
    }
    t
}

fn bullets(lines: Vec<String>) -> Block {
    Block::List(List {
        kind: ListKind::Bullets,
        items: lines.into_iter().map(Item::new).collect(),
    })
}

/// The lines that head the report: the trace, the plan, reuse overall, time.
fn summary(r: &ReplayReport) -> Vec<String> {
    let c = &r.config;
    let mut v = vec![
        format!(
            "trace: {} ({}), {} request(s) in {} session(s); {} planned, {} skipped beyond the server's context{}",
            c.trace,
            c.format,
            c.requests,
            c.sessions,
            c.planned,
            c.skipped_beyond_context,
            c.scale.map_or(String::new(), |s| format!(", every length scaled by {s}"))
        ),
        format!(
            "timing: {}, speed {}×, gaps {}; salt {}",
            c.timing.as_str(),
            c.speed,
            c.max_gap_s
                .map_or("replayed whole".to_owned(), |g| format!("capped at {g} s")),
            c.salt
        ),
        format!(
            "recorded {} request(s), {} failed",
            r.recorded, r.failed
        ),
        format!(
            "reuse: the trace's ideal {}, this run's ideal (blocks answered before each request) {}, proven by the server's cached counts {}",
            pct(r.trace_ideal_ratio),
            pct(r.overall.ideal_ratio()),
            pct(r.overall.proven_ratio())
        ),
        format!(
            "requests short of their proven reuse: {} (reuse_short); without a cached count: {} (reuse_unverified)",
            r.overall.short, r.overall.unverified
        ),
        format!(
            "cold start: {} request(s) with nothing to reuse had cached counts of at most {} token(s)",
            r.cold_start.0, r.cold_start.1
        ),
        format!(
            "the cache saved {} prefill tokens{}",
            r.saved_tokens,
            r.saved_server_s.map_or(String::new(), |s| format!(
                ", about {s:.2} server seconds at this run's cold prefill rate"
            ))
        ),
    ];
    if let Some((p50, p99, max)) = r.lateness_ms {
        v.push(format!(
            "lateness (sent − due): p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms"
        ));
    }
    if r.last_due_s > 0.0 {
        v.push(format!(
            "wall / trace span: last request sent at {:.2} s, due at {:.2} s = {:.2}",
            r.last_sent_s,
            r.last_due_s,
            r.last_sent_s / r.last_due_s
        ));
    }
    if let Some(g) = &r.goodput {
        v.push(format!(
            "goodput under the SLO ({}{}): {} of {} request(s){}",
            g.ttft_ms
                .map_or(String::new(), |t| format!("TTFT ≤ {t} ms")),
            g.tpot_ms
                .map_or(String::new(), |t| format!(" TPOT ≤ {t} ms")),
            g.met,
            g.of,
            g.per_s
                .map_or(String::new(), |p| format!(", {p:.2} per second"))
        ));
    }
    v
}

/// The report as a document for `target` (HTML adds the timeline and the TTFT scatter; a
/// plot that cannot be drawn is left out and said so).
pub fn document(r: &ReplayReport, target: Target) -> Document {
    let mut blocks = vec![
        Block::Heading(1, "ctxbench replay report".into()),
        bullets(summary(r)),
    ];
    if !r.causes.is_empty() {
        blocks.push(Block::Heading(
            2,
            "Why requests reused less than proven possible".into(),
        ));
        let mut t = Table::new([
            ("cause", Align::Left),
            ("requests", Align::Right),
            ("shortfall tok", Align::Right),
            ("evidence (one request)", Align::Left),
        ]);
        for c in &r.causes {
            t.row([
                c.cause.clone(),
                c.requests.to_string(),
                c.shortfall_tokens.to_string(),
                c.example.clone(),
            ]);
        }
        blocks.push(Block::Table(t));
    }
    blocks.push(Block::Heading(2, "Reuse".into()));
    blocks.push(Block::Table(reuse_table(
        "overall",
        std::slice::from_ref(&r.overall),
    )));
    blocks.push(Block::Table(reuse_table("turn depth", &r.by_turn)));
    blocks.push(Block::Table(reuse_table("input tokens", &r.by_input)));
    if !r.by_worker.is_empty() {
        blocks.push(Block::Table(reuse_table("worker", &r.by_worker)));
    }
    blocks.push(Block::Heading(2, "TTFT".into()));
    blocks.push(Block::Table(ttft_table("input tokens", &r.ttft_by_input)));
    blocks.push(Block::Table(ttft_table(
        "uncached tokens",
        &r.ttft_by_uncached,
    )));
    blocks.push(Block::Paragraph(
        format!(
            "p50, p90 and p99 are {}.",
            quantile_note(&[(0.5, "p50"), (0.9, "p90"), (0.99, "p99")])
        )
        .into(),
        Para::Note,
    ));
    blocks.push(Block::Heading(2, "Decode rate by context".into()));
    if r.decode_by_input.is_empty() {
        blocks.push(Block::Paragraph(
            "no request generated two or more tokens outside an overlap: no decode rate".into(),
            Para::Note,
        ));
    } else {
        blocks.push(Block::Table(decode_table(&r.decode_by_input)));
    }
    if target == Target::Html {
        blocks.extend(plots(r));
    }
    Document {
        title: format!("ctxbench replay report: {}", r.config.trace),
        blocks,
    }
}

/// The HTML report's figures: the per-session timeline and TTFT vs uncached tokens.
fn plots(r: &ReplayReport) -> Vec<Block> {
    match crate::svg::replay_plots(r) {
        Ok(p) if p.is_empty() => Vec::new(),
        Ok(p) => vec![
            Block::Heading(2, "Timeline and TTFT vs uncached tokens".into()),
            Block::Gallery(
                p.into_iter()
                    .map(|p| Figure {
                        svg: p.svg,
                        caption: p.caption,
                    })
                    .collect(),
            ),
        ],
        Err(e) => vec![Block::Paragraph(
            format!("the plots could not be drawn: {e}").into(),
            Para::Note,
        )],
    }
}

/// The report for the terminal: the summary lines, then aligned tables.
pub fn text(r: &ReplayReport) -> String {
    plain(document(r, Target::Markdown))
}

/// A replay document for the terminal: headings, bullet lines, aligned tables, notes.
pub(crate) fn plain(d: Document) -> String {
    let layout = crate::text::Layout {
        indent: "  ",
        rule: true,
        min_widths: &[],
    };
    let mut out = String::new();
    for b in d.blocks {
        match b {
            Block::Heading(_, t) => out.push_str(&format!("\n{}\n", t.to_plain())),
            Block::List(l) => {
                for i in &l.items {
                    out.push_str(&format!("  {}\n", i.text.to_plain()));
                }
            }
            Block::Table(t) => {
                out.push_str(&crate::text::render(&t, &layout));
                out.push('\n');
            }
            Block::Paragraph(t, _) => out.push_str(&format!("{}\n", t.to_plain())),
            _ => {}
        }
    }
    out
}

/// The report as Markdown.
pub fn markdown(r: &ReplayReport) -> String {
    doc::write(
        &document(r, Target::Markdown),
        &crate::markdown::MarkdownRenderer,
    )
}

/// The report as a self-contained HTML page.
pub fn html(r: &ReplayReport) -> String {
    doc::write(&document(r, Target::Html), &crate::html::HtmlRenderer)
}

/// The report model as JSON.
pub fn json(r: &ReplayReport) -> Result<String, RenderError> {
    Ok(serde_json::to_string_pretty(r)? + "\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ctxbench_schema::record::replay::{ReplayConfig, ReplayInfo};
    use ctxbench_schema::record::{Flag, Results, Sample, ServerTimings, Status};

    /// A replay of 12 requests over two workers: 4 first turns (nothing to reuse), 6 proven
    /// hits, 1 `reuse_short`, 1 `reuse_unverified`; an SLO of TTFT ≤ 100 ms.
    pub(crate) fn results() -> Results {
        let mut r: Results = ctxbench_schema::testdata::golden("sweep.jsonl");
        r.header.config.replay = Some(ReplayConfig {
            trace: "trace.jsonl".into(),
            format: "Mooncake / timed-trace JSONL".into(),
            requests: 12,
            planned: 12,
            sessions: 4,
            block_tokens: 512,
            salt: 7,
            speed: 1.0,
            input_tokens: 12 * 1500,
            ideal_reuse_tokens: 8 * 1024,
            slo_ttft_ms: Some(100.0),
            ..Default::default()
        });
        r.samples = (0..12u64)
            .map(|i| {
                let turn = (i / 4) as u32;
                let shared = if turn == 0 { 0 } else { 1024 };
                let cached = match i {
                    0..=3 => 0,
                    8 => 12,
                    _ => 1024,
                };
                let mut s = Sample {
                    status: Status::Ok,
                    prompt_tokens: Some(1500 + 600 * u64::from(turn)),
                    cached_tokens: (i != 9).then_some(cached),
                    ttft_ms: Some(if cached > 100 { 60.0 } else { 300.0 } + i as f64),
                    decode_tokens_per_s: Some(50.0 - i as f64),
                    ms_per_step: Some(20.0),
                    server: Some(ServerTimings {
                        prompt_n: Some(1500),
                        prompt_ms: Some(300.0),
                        ..Default::default()
                    }),
                    replay: Some(ReplayInfo {
                        index: i,
                        session: Some(format!("s{}", i % 4)),
                        turn,
                        sent_ms: 100.0 * i as f64,
                        scheduled_ms: 100.0 * i as f64,
                        input_tokens: 1500,
                        shared_prefix_tokens: shared,
                        expected_reuse: shared.saturating_sub(1),
                        worker: Some(format!("w{}", i % 2)),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                if i == 8 {
                    s.flags.push(Flag::ReuseShort);
                }
                if i == 9 {
                    s.flags.push(Flag::ReuseUnverified);
                }
                s
            })
            .collect();
        r
    }

    /// Every item of the report section, by the words each format shows it with.
    #[test]
    fn every_report_item_is_in_the_terminal_markdown_html_and_json() {
        let r = ctxbench_stats::replay_report::build(&results()).unwrap();
        let words = [
            "turn depth",
            "input tokens",
            "worker",
            "w0",
            "w1",
            "prefill tokens",
            "server seconds",
            "uncached tokens",
            "TTFT p50 ms",
            "p90 ms",
            "p99 ms",
            "n = 4, needs 29",
            "n = 8, needs 299",
            "p50: 6, p90: 29, p99: 299",
            "Decode rate by context",
            "goodput under the SLO",
        ];
        // HTML escapes `<`: read it back as text.
        let page = html(&r).replace("&lt;", "<");
        for (name, text) in [
            ("terminal", text(&r)),
            ("markdown", markdown(&r)),
            ("html", page),
        ] {
            for w in words {
                assert!(text.contains(w), "{name} lacks `{w}`:\n{text}");
            }
        }
        let h = html(&r);
        assert_eq!(h.matches("<svg").count(), 2, "timeline and scatter inline");
        assert!(h.contains("Per-session timeline") && h.contains("TTFT against the prompt tokens"));
        assert!(!markdown(&r).contains("<svg"), "no plots in Markdown");
        let j: serde_json::Value = serde_json::from_str(&json(&r).unwrap()).unwrap();
        for k in [
            "by_turn",
            "by_input",
            "by_worker",
            "saved_tokens",
            "saved_server_s",
            "ttft_by_input",
            "ttft_by_uncached",
            "decode_by_input",
            "goodput",
        ] {
            assert!(!j[k].is_null(), "json lacks {k}");
        }
        assert_eq!(j["by_worker"].as_array().unwrap().len(), 2);
        // A quantile without the samples it needs is marked with the n it needs.
        assert_eq!(
            j["ttft_by_input"][0]["p90"],
            serde_json::json!({"n": 4, "need": 29})
        );
        assert_eq!(
            j["goodput"]["met"], 7,
            "the 6 hits and the unverified one (its prefix served, uncounted) meet TTFT ≤ 100 ms"
        );
        assert!(j["saved_server_s"].as_f64().unwrap() > 0.0);
        assert!(
            j.get("points").is_none(),
            "per-request points stay in the results file"
        );
    }
}
