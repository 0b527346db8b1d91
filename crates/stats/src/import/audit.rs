//! The audit of an imported file in words: what it proves, what it does not, and how many
//! samples stand behind each percentile.

use ctxbench_schema::imported::ImportSource;

/// The audit's lines, as `ctxbench import` prints them.
pub fn lines(src: &ImportSource) -> Vec<String> {
    let a = &src.audit;
    let mut out = vec![format!(
        "{} {} ({}){}: {}",
        src.tool,
        src.tool_version
            .as_deref()
            .unwrap_or("(version not stated)"),
        src.format,
        src.engine
            .as_deref()
            .map(|e| format!(", engine {e}"))
            .unwrap_or_default(),
        src.files.join(", ")
    )];
    let yes_no = |b: bool| if b { "yes" } else { "NO" };
    out.push(format!(
        "  cache state per request known: {} — {}",
        yes_no(a.cache_per_request),
        a.cache
    ));
    out.push(format!(
        "  prompt lengths exact: {} — {}",
        yes_no(a.lengths_exact),
        a.lengths
    ));
    out.push(format!(
        "  warmup separated: {} — {}",
        match a.warmup_separated {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "not stated",
        },
        a.warmup
    ));
    out.push(format!(
        "  per-request records: {}",
        if a.per_request {
            "read (one sample each)"
        } else {
            "none: only the tool's aggregates"
        }
    ));
    for p in &src.points {
        out.push(format!(
            "  point {} tokens{}{}: {} requests",
            p.context_tokens,
            p.concurrency
                .map(|c| format!(", concurrency {c}"))
                .unwrap_or_default(),
            p.name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            p.requests
        ));
        for m in p.metrics.iter().filter(|m| m.name == "ttft_ms") {
            for q in &m.percentiles {
                let n = q.n.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
                match &q.caveat {
                    Some(c) => out.push(format!(
                        "    TTFT {} {:.2} ms from n = {n}: {c}",
                        q.name, q.value
                    )),
                    None => out.push(format!(
                        "    TTFT {} {:.2} ms from n = {n}: enough for a 95% interval",
                        q.name, q.value
                    )),
                }
            }
        }
    }
    out.extend(a.notes.iter().map(|n| format!("  note: {n}")));
    out
}
