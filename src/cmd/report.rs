//! `ctxbench report`: reads results files, builds the report model, writes the chosen format
//! (and SVG plots); also the report a sweep writes beside its results.

use std::path::{Path, PathBuf};

use crate::cmd::cli::{ReportArgs, RooflineArgs};
use anyhow::{Context, Result};
use ctxbench_render::svg;
use ctxbench_render::ReportFormat;
use ctxbench_schema::error::UsageError;
use ctxbench_schema::model::ModelFacts;
use ctxbench_schema::record::{self, Results};
use ctxbench_stats::report::{build, labels, Report};
use ctxbench_stats::roofline::Limits;

/// Reads results files (the only input of a report).
pub fn load(paths: &[PathBuf]) -> Result<Vec<(String, String, Results)>> {
    let labels = labels(paths);
    let loaded: Vec<(String, String, Results)> = paths
        .iter()
        .zip(labels)
        .map(|(p, l)| {
            // The error names the file already.
            let r = record::read_results(p, false)?;
            Ok((l, p.display().to_string(), r))
        })
        .collect::<Result<_>>()?;
    // A run's --label names it, when the labels tell the runs apart.
    let given: Vec<Option<&String>> = loaded
        .iter()
        .map(|(_, _, r)| r.header.label.as_ref())
        .collect();
    // Each run whose label is its own (no other run has it, as a label or a file name)
    // is named by it; the others keep their file names (readme-audit L14).
    let names: Vec<String> = loaded
        .iter()
        .enumerate()
        .map(|(i, (stem, _, _))| match given[i] {
            Some(l)
                if given.iter().filter(|g| *g == &Some(l)).count() == 1
                    && loaded
                        .iter()
                        .enumerate()
                        .all(|(j, (s, _, _))| j == i || s != l) =>
            {
                l.clone()
            }
            _ => stem.clone(),
        })
        .collect();
    Ok(loaded
        .into_iter()
        .zip(names)
        .map(|((_, p, r), name)| (name, p, r))
        .collect())
}

/// Writes `bytes` to `path`, creating missing parent folders first (as `sweep --out` does).
pub fn write_creating_folders(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Writes one SVG per plot into `dir`; returns the files written.
pub fn write_plots(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = Vec::new();
    for plot in svg::report_plots(report)? {
        let p = dir.join(format!("{}.svg", plot.name));
        std::fs::write(&p, plot.svg).with_context(|| format!("writing {}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// A `--model-config` file read as a model's size. A file that cannot be read, is not
/// JSON or lacks a key the shape needs is a usage error naming the file (and the key).
pub fn model_config(path: &Path) -> Result<ModelFacts, UsageError> {
    let name = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError::Invalid(format!("--model-config {name}: {e}")))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| UsageError::Invalid(format!("--model-config {name}: not JSON: {e}")))?;
    ModelFacts::from_hf_config(&format!("--model-config {name}"), &json)
        .map_err(|e| UsageError::Invalid(format!("--model-config {name}: {e}")))
}

/// The roofline's inputs on the command line: the machine's limits and `--model-config`.
/// With `needs_limits` (a report, a comparison), a config without any limit is refused:
/// it would change nothing.
pub fn roofline_inputs(
    a: &RooflineArgs,
    needs_limits: bool,
) -> Result<(Option<Limits>, Option<ModelFacts>), UsageError> {
    let limits = Limits::resolve(a.hardware.as_deref(), a.memory_bandwidth, a.peak_tflops)
        .map_err(|e| UsageError::Invalid(e.to_string()))?;
    if needs_limits && limits.is_none() && a.model_config.is_some() {
        return Err(UsageError::Invalid(
            "--model-config needs --hardware, --memory-bandwidth or --peak-tflops: the model's size is held against the machine's limits".into(),
        ));
    }
    let facts = a.model_config.as_deref().map(model_config).transpose()?;
    Ok((limits, facts))
}

/// `--format llmd-br`: llm-d Benchmark Report documents, one per measured point of every
/// file. With `--out DIR`, one `<run_id>_<context>_c<concurrency>.json` file each in that
/// folder; otherwise one document per line on standard output.
fn export_llmd(args: &ReportArgs, loaded: &[(String, String, Results)]) -> Result<()> {
    let docs: Vec<serde_json::Value> = loaded
        .iter()
        .flat_map(|(_, path, r)| ctxbench_render::llmd::documents(r, path))
        .collect();
    if docs.is_empty() {
        return Err(UsageError::Invalid(
            "--format llmd-br: no cold measured point in these results (a replay or a warm-only run has none to export)".into(),
        )
        .into());
    }
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for d in &docs {
                let uid = d["run"]["uid"].as_str().unwrap_or("point");
                let name = format!("{}.json", uid.replace(['/', '\\'], "_"));
                let text = serde_json::to_string_pretty(d)?;
                write_creating_folders(&dir.join(name), text.as_bytes())?;
            }
            eprintln!(
                "{} llm-d Benchmark Report document(s) in {}",
                docs.len(),
                dir.display()
            );
        }
        None => {
            use std::io::Write;
            let mut o = std::io::stdout().lock();
            for d in &docs {
                writeln!(o, "{}", serde_json::to_string(d)?)?;
            }
        }
    }
    Ok(())
}

/// `ctxbench report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let (limits, facts) = roofline_inputs(&args.roofline, true)?;
    let loaded = load(&args.files)?;
    if args.format == ReportFormat::LlmdBr {
        if args.plots.is_some() {
            return Err(UsageError::Invalid(
                "--plots: --format llmd-br writes documents, not plots".into(),
            )
            .into());
        }
        return export_llmd(args, &loaded);
    }
    if args.format == ReportFormat::Schedule {
        if args.plots.is_some() {
            return Err(UsageError::Invalid(
                "--plots: --format schedule writes the schedule, not plots".into(),
            )
            .into());
        }
        return crate::cmd::schedule::report(args.out.as_deref(), &loaded);
    }
    if let [(_, _, results)] = loaded.as_slice() {
        if let Some(r) = ctxbench_stats::replay_report::build(results) {
            return write_out(args, &replay_text(&r, args.format)?);
        }
    }
    let report = build(&loaded)
        .with_price(args.price_per_hour)
        .with_roofline(limits.as_ref(), facts.as_ref());
    let text = ctxbench_render::renderer(args.format).report(&report)?;
    write_out(args, &text)?;
    if let Some(dir) = &args.plots {
        for p in write_plots(&report, dir)? {
            eprintln!("plot: {}", p.display());
        }
    }
    Ok(())
}

/// Writes a report to `--out`, or to stdout.
fn write_out(args: &ReportArgs, text: &str) -> Result<()> {
    match &args.out {
        Some(p) => write_creating_folders(p, text.as_bytes()),
        None => {
            use std::io::Write;
            let mut o = std::io::stdout().lock();
            o.write_all(text.as_bytes())?;
            Ok(())
        }
    }
}

/// A replay run's report in `format` (a replay has no CSV: its rows are its results file).
pub fn replay_text(
    r: &ctxbench_stats::replay_report::ReplayReport,
    format: ReportFormat,
) -> Result<String> {
    use ctxbench_render::replay;
    Ok(match format {
        ReportFormat::Table => replay::text(r),
        ReportFormat::Md => replay::markdown(r),
        ReportFormat::Html => replay::html(r),
        ReportFormat::Json => replay::json(r)?,
        ReportFormat::LlmdBr | ReportFormat::Schedule => {
            return Err(UsageError::Invalid(
                "--format llmd-br and schedule: a replay run has no measured points (context × concurrency) to export".into(),
            )
            .into())
        }
        ReportFormat::Csv => {
            return Err(UsageError::Invalid(
                "--format csv: a replay run's rows are its results file (one JSON line per request); use table, md, html or json".into(),
            )
            .into())
        }
    })
}

/// The report a sweep writes when it ends: `<results>.md`, `<results>.html` and
/// `<results>-plots/` beside the results file, and the fits on the terminal.
pub fn after_sweep(report: &Report, results_path: &Path) -> Result<()> {
    let fits = ctxbench_render::table::fits_text(report);
    if !fits.is_empty() {
        println!("\n{fits}");
    }
    // Never overwrite the results file itself (`--out run.html` would otherwise be clobbered).
    let beside = |ext: &str| {
        let p = results_path.with_extension(ext);
        if p == results_path {
            results_path.with_extension(format!("report.{ext}"))
        } else {
            p
        }
    };
    let md = beside("md");
    let html = beside("html");
    let stem = results_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".into());
    let plots = results_path.with_file_name(format!("{stem}-plots"));
    std::fs::write(
        &md,
        ctxbench_render::renderer(ReportFormat::Md).report(report)?,
    )
    .with_context(|| format!("writing {}", md.display()))?;
    std::fs::write(
        &html,
        ctxbench_render::renderer(ReportFormat::Html).report(report)?,
    )
    .with_context(|| format!("writing {}", html.display()))?;
    write_plots(report, &plots)?;
    eprintln!(
        "report: {} · {} · {}/",
        md.display(),
        html.display(),
        plots.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::{Host, ResultsWriter, RunConfig, RunHeader, SCHEMA_VERSION};

    #[test]
    fn the_sweep_report_never_overwrites_the_results_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.html");
        let header = RunHeader {
            schema: SCHEMA_VERSION,
            run_id: "r".into(),
            ctxbench_version: "0".into(),
            ctxbench_commit: None,
            started_at: "t".into(),
            host: Host::current(),
            config: RunConfig {
                contexts: vec![1024],
                ..RunConfig::default()
            },
            server: Default::default(),
            corpus: Default::default(),
            label: None,
            model_facts: None,
            imported: None,
        };
        drop(ResultsWriter::create(&path, &header).unwrap());
        let before = std::fs::read(&path).unwrap();
        let report = build(&load(std::slice::from_ref(&path)).unwrap());
        after_sweep(&report, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(dir.path().join("run.report.html").exists());
        assert!(dir.path().join("run.md").exists());
        assert!(dir.path().join("run-plots").is_dir());
        // And the rebuilt report of that file still reads it as results.
        assert_eq!(load(&[path]).unwrap()[0].2.header.run_id, "r");
    }
}
