//! `ctxbench compare`: reads the runs, builds the comparison, writes the chosen format and
//! plot, and applies the CI gate (`--fail-if-slower`).

use std::path::PathBuf;

use crate::cmd::cli::CompareArgs;
use crate::cmd::Ending;
use anyhow::Result;
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record::Results;
use ctxbench_stats::compare::{self, Comparison};
use ctxbench_stats::import::versus;
use ctxbench_stats::stats::significance::Settings;

use super::report;
use ctxbench_render::svg;

/// `ctxbench compare`. `Ending::Regressed` when the gate found a regression.
pub fn run(args: &CompareArgs) -> Result<Ending> {
    if args.format == ctxbench_render::ReportFormat::LlmdBr {
        return Err(UsageError::Invalid(
            "--format llmd-br: a comparison has no llm-d Benchmark Report form; use it with ctxbench report".into(),
        )
        .into());
    }
    if args.format == ctxbench_render::ReportFormat::Schedule {
        return Err(UsageError::Invalid(
            "--format schedule: the schedule is built from every variant of a campaign over K; use ctxbench report DIR/*.jsonl --format schedule".into(),
        )
        .into());
    }
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        return Err(UsageError::Invalid(format!(
            "--confidence {}: must be between 0 and 1, e.g. 0.95",
            args.confidence
        ))
        .into());
    }
    if !(args.noise >= 0.0 && args.noise < 1.0) {
        return Err(UsageError::Invalid(format!(
            "--noise {}: must be a fraction between 0 and 1, e.g. 0.05 for ±5%",
            args.noise
        ))
        .into());
    }
    let gate = args
        .fail_if_slower
        .as_deref()
        .map(parse_threshold)
        .transpose()?;
    let settings = Settings {
        level: args.confidence,
        noise: args.noise,
        min_runs: args.min_runs as usize,
        min_samples: args.min_samples as usize,
    };
    let sides: Vec<Vec<PathBuf>> = if args.a.is_empty() {
        args.files.iter().map(|f| vec![f.clone()]).collect()
    } else {
        vec![args.a.clone(), args.b.clone()]
    };
    let (limits, facts) = report::roofline_inputs(&args.roofline, true)?;
    let sides = sides
        .iter()
        .map(|s| report::load(s))
        .collect::<Result<Vec<_>>>()?;
    if sides
        .iter()
        .flatten()
        .any(|(_, _, r)| r.header.imported.is_some())
    {
        return cross_tool(args, &sides);
    }
    if compare::replay::any_replay(&sides) {
        return replay(args, &sides, &settings);
    }
    let cmp = compare::build_with(&sides, args.allow_mismatch, &settings, args.spec_side)?
        .with_roofline(&sides, limits.as_ref(), facts.as_ref());
    let text = ctxbench_render::renderer(args.format).compare(&cmp)?;
    match &args.out {
        Some(p) => super::report::write_creating_folders(p, text.as_bytes())?,
        None => {
            use std::io::Write;
            std::io::stdout().lock().write_all(text.as_bytes())?;
        }
    }
    if let Some(p) = &args.plot {
        super::report::write_creating_folders(p, svg::compare_plot(&cmp)?.as_bytes())?;
        eprintln!("plot: {}", p.display());
    }
    if let Some(dir) = &args.spec_plots {
        let plots = svg::speculation_plots(&cmp)?;
        if plots.is_empty() {
            eprintln!("no speculation plots: no pair of a speculative and a plain side");
        }
        for p in plots {
            let path = dir.join(format!("{}.svg", p.name));
            super::report::write_creating_folders(&path, p.svg.as_bytes())?;
            eprintln!("plot: {}", path.display());
        }
    }
    Ok(match gate {
        Some(t) => apply_gate(&cmp, t),
        None => Ending::Complete,
    })
}

/// Two replays compared per bucket (`compare::replay`); the plots, the gate and the CSV of
/// a sweep comparison have no replay form yet and are refused, saying so.
fn replay(
    args: &CompareArgs,
    sides: &[Vec<compare::Loaded>],
    settings: &Settings,
) -> Result<Ending> {
    use ctxbench_render::ReportFormat as F;
    let refuse = |what: &str| -> Result<Ending> {
        Err(UsageError::Invalid(format!(
            "{what}: not available when comparing replays (use --format table, md, html or json)"
        ))
        .into())
    };
    if matches!(args.format, F::Csv) {
        return refuse("--format csv");
    }
    if args.plot.is_some() || args.spec_plots.is_some() {
        return refuse("--plot / --spec-plots");
    }
    if args.fail_if_slower.is_some() {
        return refuse("--fail-if-slower");
    }
    let cmp = compare::replay::compare(sides, args.allow_mismatch, settings)?;
    let text = ctxbench_render::replay_compare::render(&cmp, args.format)?;
    match &args.out {
        Some(p) => super::report::write_creating_folders(p, text.as_bytes())?,
        None => {
            use std::io::Write;
            std::io::stdout().lock().write_all(text.as_bytes())?;
        }
    }
    Ok(Ending::Complete)
}

/// An imported file (`ctxbench import`) beside a ctxbench run: TTFT per length side by side,
/// the verdicts withheld where the imported file cannot prove its figure.
fn cross_tool(args: &CompareArgs, sides: &[Vec<(String, String, Results)>]) -> Result<Ending> {
    let runs: Vec<&Results> = sides.iter().flatten().map(|(_, _, r)| r).collect();
    let (imported, ours) = match runs.as_slice() {
        [a, b] if a.header.imported.is_some() && b.header.imported.is_none() => (*a, *b),
        [a, b] if b.header.imported.is_some() && a.header.imported.is_none() => (*b, *a),
        _ => {
            return Err(UsageError::Invalid(
                "compare with an imported file takes exactly two files: one imported (ctxbench import) and one ctxbench run".into(),
            )
            .into())
        }
    };
    if args.fail_if_slower.is_some() {
        return Err(UsageError::Invalid(
            "--fail-if-slower: an imported file's figures are not gated (they cannot prove cold requests)".into(),
        )
        .into());
    }
    let v = versus::build(imported, ours)
        .ok_or_else(|| anyhow::anyhow!("internal: the imported file lost its source"))?;
    let text = versus::lines(&v).join("\n") + "\n";
    match &args.out {
        Some(p) => super::report::write_creating_folders(p, text.as_bytes())?,
        None => {
            use std::io::Write;
            std::io::stdout().lock().write_all(text.as_bytes())?;
        }
    }
    Ok(Ending::Complete)
}

/// `5%`, `5` (percent) or `0.05` (fraction) → 0.05.
pub fn parse_threshold(s: &str) -> Result<f64, UsageError> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t
            .parse::<f64>()
            .map(|x| if x >= 1.0 { x / 100.0 } else { x }),
    };
    match v {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(UsageError::Invalid(format!(
            "--fail-if-slower {s}: give a threshold like 5% (or 0.05)"
        ))),
    }
}

/// Prints the gate's outcome on stderr; `Regressed` when a cell, cold or warm, is
/// significantly worse by more than `threshold`.
pub fn apply_gate(cmp: &Comparison, threshold: f64) -> Ending {
    let gate = compare::gate::apply(cmp, threshold);
    for line in gate.lines(&cmp.baseline.label) {
        eprintln!("{line}");
    }
    if gate.failed() {
        Ending::Regressed
    } else {
        Ending::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::parse_threshold;

    #[test]
    fn thresholds_read_as_percent_or_fraction() {
        assert_eq!(parse_threshold("5%").unwrap(), 0.05);
        assert_eq!(parse_threshold("0.05").unwrap(), 0.05);
        assert_eq!(parse_threshold("10").unwrap(), 0.1);
        assert!(parse_threshold("fast").is_err());
        assert!(parse_threshold("-5%").is_err());
    }
}
