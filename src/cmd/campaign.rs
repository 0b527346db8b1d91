//! `ctxbench sweep --server-cmd TEMPLATE [-L NAME VALUES]... [--runs N]`: an A/B campaign.
//! For each (variant, run), in interleaved order (A B A B …), start the server on a free
//! port, run the ordinary sweep against it into its own results file, stop the server; then
//! compare every variant with the baseline, the run as the unit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cmd::cli::{ReportFormat, SweepArgs};
use crate::cmd::sweep_options::SweepOptions;
use crate::cmd::{report, sweep, Ending};
use ctxbench::error::UsageError;
use ctxbench::launch::{
    self, LaunchOptions, ManagedServer, ParameterList, ServerTemplate, Variant,
};
use ctxbench::record;
use ctxbench::render;
use ctxbench::stats::significance::Settings;

/// How far a planned results file got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Not started.
    Missing,
    /// Started, not finished: `--resume` continues it.
    Unfinished,
    /// Its last session ended with every sample measured.
    Finished,
}

fn progress(path: &Path) -> Progress {
    if !path.exists() {
        return Progress::Missing;
    }
    match record::read_results(path, false) {
        Ok(r) => match r.ends.last() {
            Some(e) if !e.interrupted && e.failed == 0 => Progress::Finished,
            _ => Progress::Unfinished,
        },
        // A header torn or unreadable: the sweep's own resume says what is wrong.
        Err(_) => Progress::Unfinished,
    }
}

/// A file-name-safe form of a variant's short name (`t=2`, `model=a/b.gguf` → `model=a_b.gguf`).
fn file_stem(v: &Variant) -> String {
    v.short_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,.-_+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The template and its variants from the flags.
fn template(args: &SweepArgs) -> Result<ServerTemplate, UsageError> {
    let raw = args.server_cmd.as_deref().unwrap_or_default();
    let lists = args
        .parameter_list
        .chunks(2)
        .map(|p| match p {
            [name, values] => ParameterList::parse(name, values),
            // clap takes exactly two values per -L.
            _ => ParameterList::parse(&p[0], ""),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UsageError::Invalid(format!("-L: {e}")))?;
    ServerTemplate::new(raw, lists).map_err(|e| UsageError::Invalid(format!("--server-cmd: {e}")))
}

fn default_dir() -> PathBuf {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "");
    PathBuf::from(format!("ctxbench-campaign-{t}"))
}

/// Runs the campaign; the interrupt receiver turns true on Ctrl-C.
pub async fn run(
    mut args: SweepArgs,
    mut interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    // Everything is checked before a server starts. A URL from the environment
    // (CTXBENCH_URL) is a default for other sweeps, not a conflict.
    let from_env = std::env::var("CTXBENCH_URL").ok();
    match args.url.take() {
        Some(u) if from_env.as_deref() == Some(u.as_str()) => {}
        Some(_) => {
            return Err(UsageError::Invalid(
                "--url and --server-cmd: give one; with --server-cmd ctxbench starts the server and knows its URL".into(),
            )
            .into())
        }
        None => {}
    }
    if args.dry_run {
        return Err(UsageError::Invalid(
            "--dry-run with --server-cmd: start the server yourself and use --url for a dry run"
                .into(),
        )
        .into());
    }
    if args.label.is_some() {
        return Err(UsageError::Invalid(
            "--label with --server-cmd: each variant is labelled by its command line".into(),
        )
        .into());
    }
    if !(args.server_timeout.is_finite() && args.server_timeout > 0.0) {
        return Err(UsageError::Invalid(format!(
            "--server-timeout {}: give the seconds a server may take to start, e.g. 600",
            args.server_timeout
        ))
        .into());
    }
    let tpl = template(&args)?;
    let variants = tpl.variants();
    {
        let mut check = args.clone();
        check.url = Some("http://127.0.0.1:1".into());
        SweepOptions::from_args(&check)?;
    }
    let names: Vec<String> = variants.iter().map(Variant::short_name).collect();
    let baseline = match &args.baseline {
        None => 0,
        Some(b) => names.iter().position(|n| n == b).ok_or_else(|| {
            UsageError::Invalid(format!(
                "--baseline {b}: no such variant; the variants are: {}",
                names.join(", ")
            ))
        })?,
    };
    let dir = args.out.clone().unwrap_or_else(default_dir);
    if dir.is_file() {
        return Err(UsageError::Invalid(format!(
            "--out {}: with --server-cmd, --out is a folder (one results file per variant and run); this is a file",
            dir.display()
        ))
        .into());
    }
    let runs = args.runs as usize;
    let mut stems: Vec<String> = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let mut s = file_stem(v);
        // Two names that sanitise alike still get their own files.
        if stems.contains(&s) {
            s = format!("{s}-v{i}");
        }
        stems.push(s);
    }
    let path_of = |v: usize, r: usize| dir.join(format!("{}-run{r}.jsonl", stems[v]));
    let order = launch::schedule(variants.len(), runs);
    let existing: Vec<PathBuf> = order
        .iter()
        .map(|&(v, r)| path_of(v, r))
        .filter(|p| p.exists())
        .collect();
    if !args.resume && !existing.is_empty() {
        return Err(UsageError::Invalid(format!(
            "{} already holds results of this campaign ({}, …): add --resume to continue it, or choose another --out",
            dir.display(),
            existing[0].display()
        ))
        .into());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let opts = LaunchOptions {
        ready_timeout: Duration::from_secs_f64(args.server_timeout),
        ..LaunchOptions::default()
    };
    let resume_hint = format!(
        "continue the campaign with the same command plus --resume (results in {})",
        dir.display()
    );
    if !args.quiet {
        eprintln!(
            "campaign: {} variant(s) × {} run(s), interleaved; results in {}",
            variants.len(),
            runs,
            dir.display()
        );
        for (v, n) in variants.iter().zip(&names) {
            eprintln!("  {n}: {}", v.label());
        }
    }
    for (step, &(v, r)) in order.iter().enumerate() {
        let path = path_of(v, r);
        let state = progress(&path);
        if state == Progress::Finished {
            if !args.quiet {
                eprintln!("campaign: {} run {r}: already measured, skipped", names[v]);
            }
            continue;
        }
        if *interrupt.borrow() {
            return Ok(Ending::Interrupted);
        }
        let variant = &variants[v];
        let log = path.with_extension("server.log");
        eprintln!(
            "campaign [{}/{}]: {} run {r}: starting the server (log: {})",
            step + 1,
            order.len(),
            names[v],
            log.display()
        );
        let started = tokio::select! {
            s = ManagedServer::start(variant, &log, &opts) => s,
            // Dropping the start future kills the half-started server.
            _ = interrupt.changed() => {
                eprintln!("interrupted while the server was starting; it was stopped.\n{resume_hint}");
                return Ok(Ending::Interrupted);
            }
        };
        let mut server = started.with_context(|| {
            format!(
                "starting variant {} (run {r}); nothing is left running",
                names[v]
            )
        })?;
        if !args.quiet {
            eprintln!("server ready: {}", server.command_line());
        }
        let mut sub = args.clone();
        sub.server_cmd = None;
        sub.parameter_list.clear();
        sub.url = Some(server.base_url());
        sub.out = Some(path.clone());
        sub.resume = state == Progress::Unfinished;
        sub.label = Some(variant.label());
        sub.managed_cmd = Some(variant.label());
        let result = sweep::run(sub, interrupt.clone()).await;
        let alive = server.check_alive();
        let stopped = server.stop(opts.grace).await;
        if let Err(died) = alive {
            return Err(anyhow::Error::new(died).context(format!(
                "the server of {} died during run {r}; {resume_hint}",
                names[v]
            )));
        }
        match stopped {
            Ok(s) if s.forced && !args.quiet => eprintln!(
                "note: the server did not exit within {:?} of SIGTERM; it was killed",
                opts.grace
            ),
            Ok(_) => {}
            Err(e) => eprintln!("warning: stopping the server: {e}"),
        }
        match result.with_context(|| format!("{} run {r}; {resume_hint}", names[v]))? {
            Ending::Complete => {}
            Ending::Interrupted => {
                eprintln!("campaign interrupted; the server was stopped.\n{resume_hint}");
                return Ok(Ending::Interrupted);
            }
            other => {
                eprintln!(
                    "campaign stopped: {} run {r} is incomplete.\n{resume_hint}",
                    names[v]
                );
                return Ok(other);
            }
        }
    }
    summarise(&variants, &names, baseline, runs, &path_of, &dir)?;
    Ok(Ending::Complete)
}

/// The comparison of every variant with the baseline (the run as the unit) and the fits per
/// variant, from the results files alone; also written to `compare.md` in the folder.
fn summarise(
    variants: &[Variant],
    names: &[String],
    baseline: usize,
    runs: usize,
    path_of: &dyn Fn(usize, usize) -> PathBuf,
    dir: &Path,
) -> Result<()> {
    let mut order: Vec<usize> = (0..variants.len()).collect();
    order.retain(|&v| v != baseline);
    order.insert(0, baseline);
    let mut sides = Vec::new();
    for &v in &order {
        let files: Vec<PathBuf> = (0..runs).map(|r| path_of(v, r)).collect();
        sides.push(report::load(&files)?);
    }
    let mut out = String::new();
    // Fits per variant: every run's samples pooled under the variant's name.
    let pooled: Vec<(String, String, record::Results)> = order
        .iter()
        .zip(&sides)
        .map(|(&v, side)| {
            let mut r = side[0].2.clone();
            r.samples = side
                .iter()
                .flat_map(|(_, _, x)| x.samples.clone())
                .collect();
            r.points.clear();
            (
                names[v].clone(),
                format!("{} ({} runs)", side[0].1, side.len()),
                r,
            )
        })
        .collect();
    let rep = ctxbench::report::build(&pooled);
    out.push_str(&render::renderer(ReportFormat::Table).report(&rep)?);
    if sides.len() > 1 {
        let cmp = ctxbench::compare::build(&sides, false, &Settings::default())?;
        out.push('\n');
        out.push_str(&render::renderer(ReportFormat::Table).compare(&cmp)?);
        let md = render::renderer(ReportFormat::Md).compare(&cmp)?;
        let p = dir.join("compare.md");
        std::fs::write(&p, md).with_context(|| format!("writing {}", p.display()))?;
        out.push_str(&format!(
            "\ncomparison also in {}; recompute with: ctxbench compare --a {} --b {}\n",
            p.display(),
            side_glob(dir, &sides[0]),
            side_glob(dir, &sides[1])
        ));
    }
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(())
}

/// The files of a side as a shell glob, for the hint.
fn side_glob(dir: &Path, side: &[(String, String, record::Results)]) -> String {
    let first = Path::new(&side[0].1)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match first.rsplit_once("-run") {
        Some((stem, _)) if side.len() > 1 => {
            dir.join(format!("{stem}-run*.jsonl")).display().to_string()
        }
        _ => side[0].1.clone(),
    }
}
