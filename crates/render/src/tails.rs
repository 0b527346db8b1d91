//! The tails of a run (p90, p95, p99 per context length, TTFT and ms/step) in words and as a
//! table, shared by the terminal and the documents. A percentile the samples cannot bound is
//! not shown: its place says how many samples it needs.

use crate::doc::{Align, Table};
use ctxbench_schema::units::{fmt_ctx, num};
use ctxbench_stats::stats::tail::{Tail, Tails, CONFIDENCE, LEVELS};
use ctxbench_stats::stats::PointSummary;

/// The metrics whose tails are shown, with their column names.
fn metrics(p: &PointSummary) -> [(&'static str, Option<&Tails>); 2] {
    [
        ("TTFT ms", p.ttft_tails.as_ref()),
        ("ms/step", p.step_tails.as_ref()),
    ]
}

/// The title over the table.
pub fn title() -> String {
    format!(
        "Tails: percentile [{:.0}% interval between order statistics, no distribution assumed]",
        CONFIDENCE * 100.0
    )
}

/// One cell: `812.4 [790.1–860.0]`, or the samples a missing percentile needs.
fn cell(t: &Tail) -> String {
    match (t.value, t.interval) {
        (Some(v), Some((lo, hi))) => format!("{} [{}–{}]", num(v), num(lo), num(hi)),
        _ => format!("needs n ≥ {}", t.needed),
    }
}

/// The tails table, when at least one percentile of the run can be bounded.
pub fn table(points: &[PointSummary]) -> Option<Table> {
    let any = points.iter().any(|p| {
        metrics(p)
            .iter()
            .filter_map(|m| m.1)
            .any(|t| t.levels.iter().any(|l| l.value.is_some()))
    });
    if !any {
        return None;
    }
    let head = [
        ("context".to_owned(), Align::Left),
        ("metric".to_owned(), Align::Left),
        ("n".to_owned(), Align::Right),
    ]
    .into_iter()
    .chain(LEVELS.iter().map(|l| (l.1.to_owned(), Align::Right)));
    let mut t = Table::new(head);
    t.compact = true;
    for p in points {
        for (name, tails) in metrics(p) {
            let Some(tails) = tails else { continue };
            let n = tails.levels.first().map_or(0, |l| l.n);
            let row = [fmt_ctx(p.context_tokens), name.to_owned(), n.to_string()]
                .into_iter()
                .chain(tails.levels.iter().map(cell));
            t.row(row);
        }
    }
    Some(t)
}

/// The sentence that stands for the table when no percentile can be bounded, or under it
/// saying what each one needs: `p99 needs n ≥ 299 for a 95% interval; 6 measured`.
pub fn note(points: &[PointSummary]) -> Option<String> {
    let most = points
        .iter()
        .flat_map(metrics)
        .filter_map(|m| m.1)
        .filter_map(|t| t.levels.first().map(|l| l.n))
        .max()?;
    // The percentiles no length can bound, each with the samples it needs.
    let missing: Vec<Tail> = (0..LEVELS.len())
        .filter_map(|i| {
            let all = points.iter().flat_map(metrics).filter_map(|m| m.1);
            let mut at = all.filter_map(|t| t.levels.get(i).copied());
            let first = at.next()?;
            (first.value.is_none() && at.all(|l| l.value.is_none())).then_some(first)
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    let needs: Vec<String> = missing
        .iter()
        .map(|t| format!("{} needs n ≥ {}", t.name, t.needed))
        .collect();
    Some(format!(
        "Tails: {} for a {:.0}% interval; {most} measured at most per length, so {} shown (a percentile of fewer samples would only be the slowest request).",
        needs.join(", "),
        CONFIDENCE * 100.0,
        if missing.len() == LEVELS.len() { "none is" } else { "those are not" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(c: u64, n: usize) -> PointSummary {
        let v: Vec<f64> = (1..=n).map(|i| i as f64).collect();
        PointSummary {
            context_tokens: c,
            ttft_tails: Tails::of(v.iter().copied()),
            ..Default::default()
        }
    }

    #[test]
    fn few_samples_give_a_sentence_with_the_n_needed_and_no_table() {
        let p = [point(1024, 6)];
        assert!(table(&p).is_none());
        assert_eq!(
            note(&p).unwrap(),
            "Tails: p90 needs n ≥ 29, p95 needs n ≥ 59, p99 needs n ≥ 299 for a 95% interval; 6 measured at most per length, so none is shown (a percentile of fewer samples would only be the slowest request)."
        );
    }

    #[test]
    fn enough_samples_for_p90_show_it_with_its_interval() {
        let p = [point(1024, 40), point(2048, 6)];
        let t = table(&p).unwrap();
        assert_eq!(t.rows.len(), 2);
        let cells: Vec<String> = t.rows[0].iter().map(|c| c.text.to_plain()).collect();
        assert!(cells[3].starts_with("36.10 ["), "{cells:?}");
        assert_eq!(cells[5], "needs n ≥ 299");
        assert!(note(&p)
            .unwrap()
            .contains("p95 needs n ≥ 59, p99 needs n ≥ 299"));
        assert!(note(&p).unwrap().contains("those are not"));
    }
}
