//! The designed sweep's account (`--design auto`) as document blocks: how each figure was
//! obtained, where the server time went and what a fixed sweep would have needed. Shared by
//! the terminal details and the Markdown and HTML sections.

use super::doc::{Align, Block, Item, List, ListKind, Para, Table};
use ctxbench_schema::record::IntervalBasis;
use ctxbench_schema::units::fmt_ctx;
use ctxbench_schema::units::num;
use ctxbench_stats::report::design::{DesignPoint, DesignReport, Figure, Obtained};

/// What the account is, said above its table.
pub fn title(d: &DesignReport) -> String {
    let how = if d.points.iter().any(|p| p.obtained == Obtained::Predicted) {
        "lengths marked predicted were not measured: their figures are the fits' values with an interval that adds the fits' model error to the noise; every other figure is its samples' median with its 95% interval"
    } else {
        "every requested length was measured; each figure is its samples' median with its 95% interval"
    };
    format!(
        "designed sweep (--design auto, target ±{:.1}% at 95%): {how}",
        d.target * 100.0
    )
}

/// `1k, 2k, 16k`.
fn ctx_list(v: &[u64]) -> String {
    v.iter().map(|&c| fmt_ctx(c)).collect::<Vec<_>>().join(", ")
}

/// A half-width in percent, rounded *up* to 0.1% (5.04% is not shown as ±5.0%); a zero one
/// (a fit with no miss) is 0.0, not −0.0.
pub fn pct_up(w: f64) -> f64 {
    // The ceiling of a tiny negative is −0.0; `+ 0.0` makes it 0.0 (`max` may keep −0.0).
    ((w * 1000.0 - 1e-9).ceil() / 10.0).max(0.0) + 0.0
}

/// `45.1 ±2.4%`, marked when wider than the target.
fn figure(f: &Option<Figure>, target: f64) -> String {
    match f {
        None => "– (no interval)".to_owned(),
        Some(f) if f.within_target => format!("{} ±{:.1}%", num(f.median), pct_up(f.half_width)),
        Some(f) => format!(
            "{} ±{:.1}% (over ±{:.1}%)",
            num(f.median),
            pct_up(f.half_width),
            target * 100.0
        ),
    }
}

/// One row per length: how its figures were obtained, each with its interval, and the
/// server time it took.
pub fn table(d: &DesignReport) -> Table {
    let right = |h| (h, Align::Right);
    let mut t = Table::new([
        ("context", Align::Left),
        ("obtained", Align::Left),
        right("n"),
        right("TTFT ms"),
        right("prefill tok/s"),
        right("decode tok/s"),
        ("interval from", Align::Left),
        right("server s"),
        right("share"),
    ]);
    for p in &d.points {
        t.row([
            fmt_ctx(p.context_tokens),
            match (&p.obtained, &p.prediction) {
                (Obtained::Predicted, Some(pr)) => {
                    format!("PREDICTED from {}", ctx_list(&pr.from_contexts))
                }
                (Obtained::Predicted, None) => "PREDICTED".to_owned(),
                (Obtained::Measured, _) => "measured".to_owned(),
            },
            format!("{}/{}", p.n, p.samples),
            figure(&p.ttft_ms, d.target),
            figure(&p.prefill_tokens_per_s, d.target),
            figure(&p.decode_tokens_per_s, d.target),
            match p.basis {
                IntervalBasis::Shared => "shared noise model".to_owned(),
                IntervalBasis::Own => "own spread".to_owned(),
                IntervalBasis::Fit => "fits: noise + model error".to_owned(),
                _ => "–".to_owned(),
            },
            format!("{:.1}", p.server_s),
            format!("{:.0}%", p.share * 100.0),
        ]);
    }
    t
}

/// The noise model, the time to answer, and what the reader must know about single
/// lengths.
pub fn notes(d: &DesignReport) -> Vec<String> {
    let mut v = Vec::new();
    if let (Some(t), Some(dc)) = (d.model_ttft, d.model_decode) {
        v.push(format!(
            "noise model: relative spread (σ of the log) of TTFT {:.1}%, of the decode rate {:.1}%, {:.0} degrees of freedom over {} length(s) whose own spread agreed with the shorter lengths'",
            t.sd * 100.0,
            dc.sd * 100.0,
            t.df.min(dc.df),
            t.points
        ));
        if t.slope < 0.0 || dc.slope < 0.0 {
            v.push(format!(
                "the relative spread falls with length among the cheap lengths here (σ ∝ L^{:.2} for TTFT, L^{:.2} for the decode rate): only the lengths noisier than the pool are judged with more; no length is judged quieter than the pooled level",
                t.slope, dc.slope
            ));
        }
    }
    v.push(fixed_note(d));
    let reach: Vec<(u64, f64)> = d
        .points
        .iter()
        .filter_map(|p| Some((p.context_tokens, p.host_precision?)))
        .collect();
    // The longest such length was judged with the most samples behind the noise model.
    if let Some(&(_, last)) = reach.last() {
        let each: Vec<String> = reach
            .iter()
            .map(|&(c, h)| format!("{} ±{:.1}%", fmt_ctx(c), pct_up(h)))
            .collect();
        v.push(format!(
            "±{:.1}% was out of reach on this host within --max-reps; the best --max-reps samples allow: {}; so each took no more than a --reps 6 sweep's samples and states what they reached; ask for --precision {:.2} or wider to have the design plan for this host",
            d.target * 100.0,
            each.join(", "),
            (last * 100.0).ceil() / 100.0
        ));
    }
    for e in &d.extrapolation {
        v.push(format!(
            "{} extrapolated to {} (server maximum; measured up to {}): {} ms [{}–{}], ±{:.1}% (90% bootstrap band: the samples' noise only, model error beyond the measured range is not known){}",
            e.metric,
            fmt_ctx(e.band.context_tokens),
            fmt_ctx(e.band.measured_up_to),
            num(e.band.predicted),
            num(e.band.low),
            num(e.band.high),
            pct_up(e.half_width),
            if e.within_target {
                String::new()
            } else {
                format!(" — over ±{:.1}%", d.target * 100.0)
            }
        ));
    }
    for p in &d.points {
        if let Some(pr) = &p.prediction {
            v.push(format!(
                "{}: predicted, not measured — from the fits of {}; model error TTFT ±{:.1}%, decode ±{:.1}% (the fits' worst leave-one-out miss at {}), added to the neighbours' noise; compare and the CI gate do not gate on it",
                fmt_ctx(p.context_tokens),
                ctx_list(&pr.from_contexts),
                pct_up(pr.ttft_model_error),
                pct_up(pr.decode_model_error),
                ctx_list(&pr.checked_at)
            ));
        }
        if let Some(r) = &p.regime_change {
            v.push(format!("{}: {r}", fmt_ctx(p.context_tokens)));
        }
        if let Some(dn) = &p.drift {
            v.push(format!("{}: {}", fmt_ctx(p.context_tokens), dn.text));
        }
        if let Some(r) = &p.revised {
            let w = |f: Option<f64>| f.map_or("n/a".to_owned(), |w| format!("±{:.1}%", pct_up(w)));
            v.push(format!(
                "{}: corrected at the end of the run: TTFT {} during the run, {} here; decode {} during the run, {} here (the run's progress printed the earlier figure; this one is judged with every sample)",
                fmt_ctx(p.context_tokens),
                w(r.ttft_half_width),
                w(p.ttft_ms.map(|f| f.half_width)),
                w(r.decode_half_width),
                w(p.decode_tokens_per_s.map(|f| f.half_width)),
            ));
        }
    }
    if !d.all_within_target {
        v.push(format!(
            "not every figure reached ±{:.1}%: the marked ones are stated with the interval they reached (a budget or --max-reps stopped them, or a length's own spread was too wide)",
            d.target * 100.0
        ));
    }
    v
}

/// The run's server time beside the fixed `--reps 3` and `--reps 6` sweeps of the same lengths
/// (their server time from this run's cost per sample, and the widest interval they would
/// state at this run's spreads).
fn fixed_note(d: &DesignReport) -> String {
    let each: Vec<String> = d
        .fixed
        .iter()
        .map(|f| {
            format!(
                "--reps {}: {:.1} s{}{}",
                f.reps,
                f.server_s,
                f.ratio
                    .map_or(String::new(), |r| format!(" (this run {r:.2}×)")),
                f.widest_half_width.map_or(String::new(), |w| format!(
                    ", stating at widest ±{:.1}%",
                    pct_up(w)
                ))
            )
        })
        .collect();
    format!(
        "server time: {:.1} s spent; the fixed sweeps of the same lengths, at this run's cost per sample and spreads (each length on its own samples): {}",
        d.server_s,
        each.join("; ")
    )
}

/// The account as document blocks: heading, title, table, notes.
pub fn blocks(d: &DesignReport) -> Vec<Block> {
    vec![
        Block::Heading(3, "Designed sweep".into()),
        Block::Paragraph(title(d).into(), Para::Note),
        Block::Table(table(d)),
        Block::List(List {
            kind: ListKind::Bullets,
            items: notes(d).into_iter().map(Item::new).collect(),
        }),
    ]
}

/// The lengths the design predicted instead of measuring, shortest first: the main tables
/// list them among the measured lengths, marked, so a gap in the ladder is never read as a
/// failure and a fit's value never as a measurement.
pub fn predicted(d: Option<&DesignReport>) -> Vec<&DesignPoint> {
    d.map_or_else(Vec::new, |d| {
        d.points
            .iter()
            .filter(|p| p.obtained == Obtained::Predicted)
            .collect()
    })
}

/// A predicted figure in a main table: `2363 ±3.1%` (no min–max: there are no samples).
pub fn predicted_cell(f: &Option<Figure>) -> String {
    f.as_ref().map_or("–".to_owned(), |f| {
        format!("{} ±{:.1}%", num(f.median), pct_up(f.half_width))
    })
}

/// The ms/step a predicted decode rate stands for (1000 ÷ tok/s).
pub fn predicted_step(p: &DesignPoint) -> String {
    p.decode_tokens_per_s
        .as_ref()
        .filter(|f| f.median > 0.0)
        .map_or("–".to_owned(), |f| num(1000.0 / f.median))
}

/// What a predicted row says in place of exclusions: where it came from.
pub fn predicted_source(p: &DesignPoint) -> String {
    match &p.prediction {
        Some(pr) => format!(
            "PREDICTED, not measured (fits of {})",
            ctx_list(&pr.from_contexts)
        ),
        None => "PREDICTED, not measured".to_owned(),
    }
}
