//! The warm modes' section, shared by every format: the append grid with the cold column
//! beside it, the fit and the turn budget; the conversation's trajectory; the tier table.

use super::doc::{Align, Table, Text};
use crate::describe::med_range;
use ctxbench_schema::units::fmt_ctx;
use ctxbench_schema::units::num;
use ctxbench_schema::warm::WarmMode;
use ctxbench_stats::stats::warm::WarmReport;

/// A titled part of the warm section: a table, or only lines.
pub struct Part {
    /// The part's name (a heading).
    pub heading: &'static str,
    /// What the table shows, said above it.
    pub title: String,
    /// The table, if any.
    pub table: Option<Table>,
    /// Lines after it: the fit, the budget, the lost turns, the legend.
    pub notes: Vec<String>,
}

fn opt(x: Option<u64>) -> String {
    x.map_or("–".to_owned(), |v| v.to_string())
}

/// The warm section's parts, in reading order (`retention`: none here, its own module
/// renders them from [`proof`]).
pub fn parts(w: &WarmReport) -> Vec<Part> {
    let mut out = Vec::new();
    let proof = proof(w);
    match w.config.mode {
        WarmMode::Append => out.push(append(w, proof)),
        WarmMode::Conversation => out.push(conversation(w, proof)),
        WarmMode::Tiers => out.push(tiers(w, proof)),
        WarmMode::Retention => {}
    }
    out
}

/// The lines every warm part opens its notes with: the hit rule, the misses, the unproven
/// and the bypassed samples.
pub fn proof(w: &WarmReport) -> Vec<String> {
    let mut proof = vec![format!(
        "reuse proven per sample from the server's cached-token count: cached ≥ expected − allowance ({})",
        if w.allowance_rules.is_empty() {
            "no rule recorded".to_owned()
        } else {
            w.allowance_rules.join("; ")
        }
    )];
    if w.misses > 0 {
        proof.push(format!(
            "{} warm sample(s) flagged cache_miss (the cache did not serve the prefix): kept out of every median below",
            w.misses
        ));
    }
    if w.unverified > 0 {
        proof.push(format!(
            "{} warm sample(s) without a cached-token count: reuse not proven, kept out",
            w.unverified
        ));
    }
    if w.bypassed > 0 {
        proof.push(format!(
            "negative control: {} warm request(s) sent with the cache switch off (cache_prompt: false); every one should be a cache_miss",
            w.bypassed
        ));
    }
    proof
}

fn append(w: &WarmReport, mut notes: Vec<String>) -> Part {
    // The sessions column appears only when several sessions appended at once.
    let several = w.append.iter().any(|c| c.concurrency > 1);
    let mut cols = vec![("L (cached)", Align::Left), ("N (new)", Align::Right)];
    if several {
        cols.push(("sessions", Align::Right));
    }
    cols.extend([
        ("n", Align::Right),
        ("miss", Align::Right),
        ("TTFT_inc ms", Align::Right),
        ("cold TTFT(L+N) ms", Align::Right),
        ("speedup", Align::Right),
        ("decode tok/s", Align::Right),
    ]);
    let mut t = Table::new(cols);
    for c in &w.append {
        let mut row = vec![
            Text::from(fmt_ctx(c.prefix_tokens)),
            Text::from(fmt_ctx(c.new_tokens)),
        ];
        if several {
            row.push(Text::from(c.concurrency.to_string()));
        }
        row.extend([
            Text::from(format!("{}/{}", c.usable, c.samples)),
            Text::from(c.misses.to_string()),
            Text::from(med_range(&c.ttft_ms)),
            Text::from(med_range(&c.cold_ttft_ms)),
            Text::from(c.speedup.map_or("–".to_owned(), |s| format!("{s:.1}×"))),
            Text::from(med_range(&c.decode_tokens_per_s)),
        ]);
        t.row(row);
    }
    let at = |c: u32| match several {
        true => format!(" at {c} session(s)"),
        false => String::new(),
    };
    for f in &w.fits {
        notes.push(format!(
            "fit{}: TTFT_inc(L, N) ≈ {} + {}·N + {}·L·N ms   R² {:.3}   {} cells (a: fixed cost; b: per new token; c: a new token's attention over the cached prefix)",
            at(f.concurrency),
            num(f.coef[0]),
            sci(f.coef[1]),
            sci(f.coef[2]),
            f.r2,
            f.cells
        ));
    }
    if w.fits.is_empty() {
        notes.push("fit: needs at least three cells with usable samples".to_owned());
    }
    if let Some(target) = w.config.ttft_target_ms {
        for c in ctxbench_stats::stats::warm::levels(&w.append) {
            let items: Vec<String> = w
                .budget
                .iter()
                .filter(|b| b.concurrency == c)
                .map(|b| {
                    format!(
                        "L {}: {}, {} by the fit",
                        fmt_ctx(b.prefix_tokens),
                        b.measured_n.map_or("no measured N".to_owned(), |n| format!(
                            "N ≤ {} measured",
                            fmt_ctx(n)
                        )),
                        b.fit_n
                            .map_or("none".to_owned(), |n| format!("N ≤ {:.0}", n.floor()))
                    )
                })
                .collect();
            notes.push(format!(
                "turn budget under {} ms TTFT{} (largest N at each L): {}",
                num(target),
                at(c),
                items.join("; ")
            ));
        }
    }
    let title = match several {
        true => "Append N new tokens to a cached prefix of L, with that many sessions appending at once, each to its own prefix (medians (min–max) of every session's proven hits; the cold column is this run's cold wave of as many prompts of L + N)",
        false => "Append N new tokens to a cached prefix of L (medians (min–max) of proven hits; the cold column is this run's cold prefill of L + N)",
    };
    Part {
        heading: "Warm context at depth: append",
        title: title.to_owned(),
        table: Some(t),
        notes,
    }
}

fn sci(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.01 {
        format!("{x:.3e}")
    } else {
        num(x)
    }
}

fn conversation(w: &WarmReport, mut notes: Vec<String>) -> Part {
    let mut t = Table::new([
        ("turn", Align::Right),
        ("context", Align::Right),
        ("cached", Align::Right),
        ("expected", Align::Right),
        ("computed", Align::Right),
        ("TTFT ms", Align::Right),
        ("decode tok/s", Align::Right),
        ("", Align::Left),
    ]);
    for r in &w.turns {
        t.row([
            Text::from(r.turn.to_string()),
            Text::from(r.context_tokens.to_string()),
            Text::from(opt(r.cached_tokens)),
            Text::from(r.expected_cached.to_string()),
            Text::from(opt(r.computed_tokens)),
            Text::from(r.ttft_ms.map_or("–".to_owned(), num)),
            Text::from(r.decode_tokens_per_s.map_or("–".to_owned(), num)),
            Text::from(match (r.failed, r.lost) {
                (true, _) => "failed",
                (_, true) => "CACHE LOST",
                _ => "",
            }),
        ]);
    }
    let lost: Vec<String> = w
        .turns
        .iter()
        .filter(|r| r.lost)
        .map(|r| {
            format!(
                "turn {} at {} tokens: cached {} of {} expected",
                r.turn,
                r.context_tokens,
                opt(r.cached_tokens),
                r.expected_cached
            )
        })
        .collect();
    notes.push(match lost.is_empty() {
        true => format!(
            "no turn lost its cache: every turn reused the whole history (within the allowance); {} turns up to {} tokens",
            w.turns.len(),
            w.turns.last().map_or(0, |r| r.context_tokens)
        ),
        false => format!("cache evicted or partly lost: {}", lost.join("; ")),
    });
    Part {
        heading: "Growing conversation",
        title: "Each turn resends the history (the answers as generated) plus a new user turn; expected = the previous prompt + its answer − 1 (the answer's last token is never fed back)".to_owned(),
        table: Some(t),
        notes,
    }
}

fn tiers(w: &WarmReport, mut notes: Vec<String>) -> Part {
    let mut t = Table::new([
        ("L (cached)", Align::Left),
        ("N", Align::Right),
        ("cold ms", Align::Right),
        ("live ms", Align::Right),
        ("ram ms", Align::Right),
        ("disk ms", Align::Right),
        ("misses", Align::Left),
    ]);
    for r in &w.tiers {
        t.row([
            Text::from(fmt_ctx(r.prefix_tokens)),
            Text::from(fmt_ctx(r.new_tokens)),
            Text::from(med_range(&r.cold_ms)),
            Text::from(med_range(&r.live_ms)),
            Text::from(med_range(&r.ram_ms)),
            Text::from(med_range(&r.disk_ms)),
            Text::from(
                r.misses
                    .iter()
                    .map(|(t, n)| format!("{t} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        ]);
    }
    notes.push("tiers: cold = recompute of L + N; live = the server's live cache (the prime was its last request); ram = host memory (llama.cpp --cache-ram: the only slot held another prompt, GET /slots; SGLang HiCache: filler evicted the prefix from the device pool and the append's cached_tokens_details counted host tokens); disk = llama.cpp slot saved, erased, restored (the restore request's time is included); each sample's evidence is in its warm.evidence".to_owned());
    let disk_measured = w.tiers.iter().any(|r| r.disk_ms.is_some());
    notes.push(match w.restore_beats_cold_from {
        Some(l) => format!(
            "restoring from disk beats recomputing from L = {} on (at every measured L from there)",
            fmt_ctx(l)
        ),
        None if disk_measured => {
            "restoring from disk never beat recomputing at the measured lengths".to_owned()
        }
        None => "no disk tier measured (llama-server with --slot-save-path has one)".to_owned(),
    });
    Part {
        heading: "Cache tiers",
        title: "TTFT of L + N by where the prefix came from (medians (min–max) of proven samples)"
            .to_owned(),
        table: Some(t),
        notes,
    }
}

/// The warm cells of a comparison: TTFT_inc of B against A per (L, N) (and tier), each
/// side's hits and misses, ratio, interval and verdict.
pub fn compare_table(w: &ctxbench_stats::compare::warm::WarmComparison) -> Table {
    use super::doc::{Cell, Tone};
    use ctxbench_stats::compare::Verdict;
    let mut t = Table::new([
        ("L + N", Align::Left),
        ("A ms", Align::Right),
        ("B ms", Align::Right),
        ("A hit/miss", Align::Right),
        ("B hit/miss", Align::Right),
        ("B/A", Align::Right),
        ("interval", Align::Right),
        ("verdict", Align::Left),
    ]);
    t.title = Some("Warm TTFT_inc per cell (every completed warm sample, hit or miss)".into());
    for r in &w.rows {
        let verdict = Cell {
            tone: match r.verdict {
                Verdict::Faster => Tone::Good,
                Verdict::Slower => Tone::Bad,
                _ => Tone::Muted,
            },
            strong: matches!(r.verdict, Verdict::Faster | Verdict::Slower),
            ..Cell::from(r.verdict.to_string())
        };
        let val = |x: Option<f64>| x.map_or("–".to_owned(), num);
        t.rows.push(vec![
            Cell::from(r.label()),
            Cell::from(val(r.a)),
            Cell::from(val(r.b)),
            Cell::from(format!("{}/{}", r.a_hits, r.a_misses)),
            Cell::from(format!("{}/{}", r.b_hits, r.b_misses)),
            Cell::from(r.ratio.map_or("–".to_owned(), |x| format!("{x:.3}"))),
            Cell::from(
                r.shown_interval()
                    .map_or("–".to_owned(), |c| format!("{:.3}–{:.3}", c.low, c.high)),
            ),
            verdict,
        ]);
    }
    t
}

/// The warm part of a comparison as plain text (table and notes); empty when not warm.
pub fn compare_text(w: &ctxbench_stats::compare::warm::WarmComparison) -> String {
    let mut out = String::new();
    if !w.rows.is_empty() {
        let t = compare_table(w);
        out.push_str(&format!(
            "{}:\n{}",
            t.title.clone().unwrap_or_default(),
            super::text::render(&t, &super::text::Layout::default())
        ));
    }
    for n in ctxbench_stats::compare::warm::notes(w) {
        out.push_str(&format!("{n}\n"));
    }
    out
}
