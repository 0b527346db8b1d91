//! The "does speculation pay" section of a comparison: the answer line, the speedup table
//! (speedup, its interval, pays or not, TTFT cost), the acceptance table, L* and the fit; as
//! document blocks (Markdown, HTML) and as terminal text.

use std::fmt::Write;

use super::doc::Target;
use super::doc::{Align, Block, Callout, Cell, Figure, Item, Para, Span, Table, Text, Tone};
use super::fitwords::{coef, tokens};
use crate::format::RenderError;
use crate::svg;
use crate::text;
use ctxbench_schema::units::fmt_ctx;
use ctxbench_schema::units::num;
use ctxbench_stats::stats::significance::{Basis, RatioInterval};
use ctxbench_stats::stats::speculation::effects::{Effects, Mover};
use ctxbench_stats::stats::speculation::{
    LStar, MeanInterval, Payoff, SpecAnalysis, Speculation, SpeedupFit,
};

fn ratio(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), |x| format!("{x:.2}×"))
}

fn interval(i: Option<RatioInterval>) -> String {
    i.map_or("–".to_owned(), |i| format!("{:.2}–{:.2}", i.low, i.high))
}

fn ms(x: Option<f64>) -> String {
    x.map_or("–".to_owned(), num)
}

/// A mean with its interval where it has one, `1.23 (1.10–1.40)`, each number by `f`.
fn with_interval(m: Option<MeanInterval>, f: impl Fn(f64) -> String) -> String {
    match m {
        None => "–".to_owned(),
        Some(MeanInterval {
            mean,
            low: Some(lo),
            high: Some(hi),
            ..
        }) => format!("{} ({}–{})", f(mean), f(lo), f(hi)),
        Some(m) => f(m.mean),
    }
}

fn mean(m: Option<MeanInterval>, pct: bool) -> String {
    with_interval(m, |x| match pct {
        true => format!("{:.0}%", 100.0 * x),
        false => format!("{x:.2}"),
    })
}

/// Per context: ms per token on each side, the speedup with its interval and what it says,
/// and the TTFT cost with its interval.
pub fn speedup_table(a: &SpecAnalysis) -> Table {
    let r = |h: &str| (h.to_owned(), Align::Right);
    let mut t = Table::new([
        ("context".to_owned(), Align::Left),
        r("plain ms/tok"),
        r("spec ms/tok"),
        r("speedup"),
        r(&format!("{:.0}% interval", a.level * 100.0)),
        ("pays?".to_owned(), Align::Left),
        r("TTFT cost"),
        r("interval"),
        r("n plain/spec"),
    ]);
    for p in &a.points {
        let verdict = Cell {
            tone: match p.pays {
                Payoff::Pays => Tone::Good,
                Payoff::Slower => Tone::Bad,
                _ => Tone::Muted,
            },
            strong: matches!(p.pays, Payoff::Pays | Payoff::Slower),
            ..Cell::from(p.pays.text())
        };
        t.rows.push(vec![
            fmt_ctx(p.context_tokens).into(),
            ms(p.plain_ms_per_token).into(),
            ms(p.spec_ms_per_token).into(),
            ratio(p.speedup).into(),
            interval(p.speedup_interval).into(),
            verdict,
            ratio(p.ttft_cost).into(),
            interval(p.ttft_cost_interval).into(),
            format!("{}/{}", p.n_plain, p.n_spec).into(),
        ]);
    }
    t
}

/// Per context: acceptance length and rate with intervals, drafted and accepted tokens,
/// verify steps per request, ms per verify step beside ms per token.
pub fn acceptance_table(a: &SpecAnalysis) -> Table {
    let r = |h: &str| (h.to_owned(), Align::Right);
    let mut t = Table::new([
        ("context".to_owned(), Align::Left),
        r("accept length"),
        r("accept rate"),
        r("drafted"),
        r("accepted"),
        r("verify steps/req"),
        r("ms/verify step"),
        r("ms/token"),
    ]);
    let count = |x: Option<u64>| x.map_or("–".to_owned(), |x| x.to_string());
    for p in &a.points {
        t.row([
            fmt_ctx(p.context_tokens),
            mean(p.accept_length, false),
            mean(p.accept_rate, true),
            count(p.draft_tokens),
            count(p.accepted_tokens),
            ms(p.verify_steps),
            ms(p.ms_per_verify_step),
            ms(p.spec_ms_per_token),
        ]);
    }
    t
}

/// A step's cost in ms with its interval, the lower end no less than 0.
fn ms_interval(m: Option<MeanInterval>) -> String {
    let floored = m.map(|m| MeanInterval {
        low: m.low.map(|lo| lo.max(0.0)),
        ..m
    });
    with_interval(floored, num)
}

/// Per context: α, the verify and the plain step's cost with intervals, the cost ratio, the
/// speedup as their product beside the measured one, and the term that moved it.
pub fn effects_table(a: &SpecAnalysis) -> Table {
    let r = |h: &str| (h.to_owned(), Align::Right);
    let mut t = Table::new([
        ("context".to_owned(), Align::Left),
        r("α accept length"),
        r("ms/verify step"),
        r("plain ms/step"),
        r("verify ÷ plain"),
        r("α·plain÷verify"),
        r("measured"),
        ("moved by".to_owned(), Align::Left),
    ]);
    for e in &a.effects {
        let predicted = match (e.predicted_speedup, e.predicted_interval) {
            (Some(s), Some((lo, hi))) => format!("{s:.2}× ({lo:.2}–{hi:.2})"),
            (s, _) => ratio(s),
        };
        let measured = match e.agrees {
            Some(false) => format!("{} (differs)", ratio(e.measured_speedup)),
            _ => ratio(e.measured_speedup),
        };
        t.row([
            fmt_ctx(e.context_tokens),
            mean(e.accept_length, false),
            ms_interval(e.verify_ms),
            ms_interval(e.plain_ms),
            ratio(e.cost_ratio),
            predicted,
            measured,
            mover_text(e).to_owned(),
        ]);
    }
    t
}

fn mover_text(e: &Effects) -> &'static str {
    match e.mover {
        Mover::Reference => "(reference)",
        Mover::Cost => "cost",
        Mover::Acceptance => "acceptance",
        Mover::Neither => "holds",
        Mover::Unknown => "–",
    }
}

/// The note under the effects table: what the columns are and where the product and the
/// measurement part.
pub fn effects_note(a: &SpecAnalysis) -> String {
    let differs: Vec<String> = a
        .effects
        .iter()
        .filter(|e| e.agrees == Some(false))
        .map(|e| fmt_ctx(e.context_tokens))
        .collect();
    let mut n = "The two effects: a speculative token costs t_verify ÷ α, a plain one t_plain, so speedup ≈ α · t_plain ÷ t_verify (means with t-intervals; the product's interval adds the three relative widths in quadrature). \"moved by\" names, where the speedup moved by more than 10% since the first length, the term that moved it: the verify step's cost in plain steps, or acceptance (\"holds\" otherwise).".to_owned();
    if !differs.is_empty() {
        n.push_str(&format!(
            " At {} the product is more than 15% from the measured ratio: the server's acceptance length and the tokens per verify step disagree, or a step's time is not the decode's (read the measured column).",
            differs.join(", ")
        ));
    }
    n
}

/// Where L* lies, by the rule, in one sentence.
pub fn l_star_text(l: &LStar) -> String {
    match l {
        LStar::PaysEverywhere { .. } => "L*: pays at every measured length".to_owned(),
        LStar::StopsPaying {
            last_paying: Some(p),
            first_losing: q,
            ..
        } => format!(
            "L*: between {} (last length that pays) and {} (first length that is slower)",
            fmt_ctx(p.context_tokens),
            fmt_ctx(q.context_tokens)
        ),
        LStar::StopsPaying {
            last_paying: None,
            first_losing: q,
            longest_not_slower: Some((n, pays)),
            ..
        } => format!(
            "L*: none — slower from {}, but the speedup rises with context ({} at {}): it may start paying beyond the measured lengths",
            fmt_ctx(q.context_tokens),
            pays.text(),
            fmt_ctx(n.context_tokens)
        ),
        LStar::StopsPaying {
            last_paying: None,
            first_losing: q,
            ..
        } => format!(
            "L*: not within the measured lengths — no length pays, and from {} on speculation is slower",
            fmt_ctx(q.context_tokens)
        ),
        LStar::NeverSlower { .. } => {
            "L*: not reached — no measured length is slower, but not every one pays".to_owned()
        }
        LStar::Unknown => "L*: unknown — too few runs or samples per length".to_owned(),
    }
}

/// The fit in words: both lines, R², and the crossing (marked when extrapolated).
pub fn fit_lines(f: &SpeedupFit) -> Vec<String> {
    let line = |name: &str, x: &ctxbench_stats::stats::fit::Fit| {
        format!(
            "{name} ms/token ≈ {} + {}·L (R² {:.3})",
            coef(x.coef[0]),
            coef(x.coef[1]),
            x.r2
        )
    };
    let mut out = vec![line("plain", &f.plain), line("speculative", &f.spec)];
    let max = f.max_context.map(fmt_ctx);
    out.push(match f.crossing {
        Some(l) if f.crossing_beyond_max => format!(
            "fitted speedup crosses 1 at ≈{} tokens, beyond the server's maximum {} — EXTRAPOLATED",
            tokens(l),
            max.clone().unwrap_or_default()
        ),
        Some(l) => format!(
            "fitted speedup {} 1 at ≈{} tokens{}",
            if f.falling {
                "falls below"
            } else {
                "rises above"
            },
            tokens(l),
            if f.crossing_extrapolated {
                " — EXTRAPOLATED outside the measured lengths"
            } else {
                " (within the measured lengths)"
            }
        ),
        None => "fitted speedup does not cross 1 at any length".to_owned(),
    });
    if let (Some(s), Some(m)) = (f.speedup_at_max, max) {
        out.push(format!(
            "fitted speedup at the server's maximum {m}: {s:.2}× — EXTRAPOLATED"
        ));
    }
    if f.poor {
        out.push("poor fit: read the measured points, not the curve".to_owned());
    }
    out
}

/// What the intervals are over, in one line.
pub fn method_text(a: &SpecAnalysis) -> String {
    let over = match a.basis {
        Basis::Runs => "the run as the unit (median per run)",
        Basis::SamplesOfOneRun => "the samples of one run per side (run-to-run drift not measured)",
    };
    format!(
        "speculative = {}, plain = {} ({}). Speedup = plain ÷ speculative ms per output token (draft and verify included); {:.0}% Welch interval on logs over {over}; a length pays when the whole interval is above 1 and is slower when it is wholly below 1. TTFT cost = speculative ÷ plain TTFT (the draft's prefill).",
        a.speculative,
        a.plain,
        match a.detection {
            ctxbench_stats::stats::speculation::Detection::Samples => "found from which side's samples report acceptance",
            ctxbench_stats::stats::speculation::Detection::Given => "as --spec-side said",
        },
        a.level * 100.0
    )
}

/// The section as document blocks.
pub fn blocks(s: &Speculation, target: Target) -> Result<Vec<Block>, RenderError> {
    let mut b = vec![Block::Heading(3, "Does speculation pay?".into())];
    let a = match s {
        Speculation::NotAnalysed { message, .. } => {
            b.push(Block::Callout(Callout {
                title: None,
                items: vec![Item::new(message.as_str())],
            }));
            return Ok(b);
        }
        Speculation::Analysed(a) => a,
    };
    b.push(Block::Paragraph(
        Text(vec![Span::Strong(a.answer.clone())]),
        Para::Plain,
    ));
    b.push(Block::Paragraph(method_text(a).into(), Para::Note));
    if !a.notes.is_empty() {
        b.push(Block::Callout(Callout {
            title: None,
            items: a.notes.iter().map(|n| Item::new(n.as_str())).collect(),
        }));
    }
    if target == Target::Html {
        let mut figs = vec![];
        for p in svg::speculation_plots_of(a)? {
            figs.push(Figure {
                svg: p.svg,
                caption: p.caption,
            });
        }
        b.push(Block::Gallery(figs));
    }
    b.push(Block::Table(speedup_table(a)));
    b.push(Block::Paragraph(l_star_text(&a.l_star).into(), Para::Plain));
    if let Some(f) = &a.fit {
        b.push(Block::List(super::doc::List {
            kind: super::doc::ListKind::Fits,
            items: fit_lines(f)
                .into_iter()
                .map(|l| Item {
                    tone: if l.contains("EXTRAPOLATED") {
                        Tone::Caution
                    } else {
                        Tone::Normal
                    },
                    ..Item::new(l)
                })
                .collect(),
        }));
    }
    b.push(Block::Paragraph(
        "Acceptance (speculative side): mean with its interval; drafted and accepted tokens summed over the samples."
            .into(),
        Para::Note,
    ));
    b.push(Block::Table(acceptance_table(a)));
    if let Some(c) = &a.cliff {
        b.push(Block::Callout(Callout {
            title: Some("Acceptance cliff".into()),
            items: vec![Item {
                tone: Tone::Caution,
                ..Item::new(c.message.as_str())
            }],
        }));
    }
    if !a.effects.is_empty() {
        b.push(Block::Paragraph(effects_note(a).into(), Para::Note));
        b.push(Block::Table(effects_table(a)));
        b.push(Block::List(super::doc::List {
            kind: super::doc::ListKind::Bullets,
            items: a
                .effects
                .iter()
                .map(|e| Item::new(e.sentence.as_str()))
                .collect(),
        }));
    }
    Ok(b)
}

/// The section as terminal text.
pub fn text(s: &Speculation) -> String {
    let mut out = String::from("does speculation pay?\n");
    let a = match s {
        Speculation::NotAnalysed { message, .. } => {
            let _ = writeln!(out, "  {message}");
            return out;
        }
        Speculation::Analysed(a) => a,
    };
    let _ = writeln!(out, "{}\n", method_text(a));
    for n in &a.notes {
        let _ = writeln!(out, "NOTE: {n}");
    }
    let layout = text::Layout::default();
    out.push_str(&text::render(&speedup_table(a), &layout));
    let _ = writeln!(out, "\n{}", l_star_text(&a.l_star));
    if let Some(f) = &a.fit {
        for l in fit_lines(f) {
            let _ = writeln!(out, "  {l}");
        }
    }
    out.push('\n');
    out.push_str(&text::render(&acceptance_table(a), &layout));
    if let Some(c) = &a.cliff {
        let _ = writeln!(out, "\nACCEPTANCE CLIFF: {}", c.message);
    }
    if !a.effects.is_empty() {
        let _ = writeln!(out, "\n{}\n", effects_note(a));
        out.push_str(&text::render(&effects_table(a), &layout));
        for e in &a.effects {
            let _ = writeln!(out, "  {}", e.sentence);
        }
    }
    let _ = writeln!(out, "\nANSWER: {}", a.answer);
    out
}
