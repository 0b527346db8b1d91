//! `ctxbench sweep --server-cmd TEMPLATE [-L NAME VALUES]... [--runs N]`: an A/B campaign.
//! For each (variant, run), in interleaved order (A B A B …), start the server on a free
//! port, run the ordinary sweep against it into its own results file, stop the server; then
//! compare every variant with the baseline, the run as the unit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cmd::cli::{ReportFormat, SweepArgs};
use crate::cmd::{report, sweep, Ending};
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record;
use ctxbench_session::launch::{
    self, LaunchOptions, ManagedServer, ParameterList, ServerTemplate, Variant,
};
use ctxbench_session::session::SweepPlan;
use ctxbench_stats::stats::significance::Settings;

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
    let flags = args
        .flag_list
        .chunks(2)
        .map(|p| match p {
            [name, values] => ParameterList::parse_flags(name, values),
            _ => ParameterList::parse_flags(&p[0], ""),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UsageError::Invalid(format!("-F: {e}")))?;
    let lists = lists.into_iter().chain(flags).collect();
    ServerTemplate::with_spec_flags(raw, lists, args.spec_flags.as_deref())
        .map_err(|e| UsageError::Invalid(format!("--server-cmd: {e}")))
}

fn default_dir() -> PathBuf {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "");
    PathBuf::from(format!("ctxbench-campaign-{t}"))
}

/// A campaign's options, validated before any server starts: the template and its
/// variants, the baseline, the folder, and the sweep plan each run starts from.
struct CampaignOptions {
    variants: Vec<Variant>,
    /// Each variant's short name.
    names: Vec<String>,
    /// Each variant's file stem (unique, file-name safe).
    stems: Vec<String>,
    baseline: usize,
    dir: PathBuf,
    runs: usize,
    launch: LaunchOptions,
    /// The sweep of every run; its URL, results file and label are set per run.
    plan: SweepPlan,
    /// A designed campaign: the precision asked for and the one each run is designed for.
    designed_for: Option<(f64, f64)>,
}

impl CampaignOptions {
    fn from_args(args: &SweepArgs) -> Result<CampaignOptions, UsageError> {
        let bad = |m: &str| Err(UsageError::Invalid(m.to_owned()));
        // A URL from the environment (CTXBENCH_URL) is a default for other sweeps, not a
        // conflict.
        let from_env = std::env::var("CTXBENCH_URL").ok();
        if args.url.is_some() && args.url != from_env {
            return bad("--url and --server-cmd: give one; with --server-cmd ctxbench starts the server and knows its URL");
        }
        if args.dry_run {
            return bad("--dry-run with --server-cmd: start the server yourself and use --url for a dry run");
        }
        if args.label.is_some() {
            return bad("--label with --server-cmd: each variant is labelled by its command line");
        }
        if !(args.server_timeout.is_finite() && args.server_timeout > 0.0) {
            return Err(UsageError::Invalid(format!(
                "--server-timeout {}: give the seconds a server may take to start, e.g. 600",
                args.server_timeout
            )));
        }
        let variants = template(args)?.variants();
        let mut managed = args.clone();
        managed.url = None;
        let mut plan = crate::cmd::sweep_options::plan(&managed)?;
        let variants_n = variants.len();
        // A designed campaign is designed for the comparison: each variant for ±P/√2.
        let designed_for = plan.policy.design.and(plan.policy.precision).map(|p| {
            (
                p,
                ctxbench_session::design::variant_precision(p, variants_n),
            )
        });
        if let Some((_, each)) = designed_for {
            plan.policy.precision = Some(each);
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
            )));
        }
        let mut stems: Vec<String> = Vec::new();
        for (i, v) in variants.iter().enumerate() {
            let mut s = file_stem(v);
            // Two names that sanitise alike still get their own files.
            if stems.contains(&s) {
                s = format!("{s}-v{i}");
            }
            stems.push(s);
        }
        Ok(CampaignOptions {
            variants,
            names,
            stems,
            baseline,
            dir,
            runs: args.runs as usize,
            launch: LaunchOptions {
                ready_timeout: Duration::from_secs_f64(args.server_timeout),
                ..LaunchOptions::default()
            },
            plan,
            designed_for,
        })
    }

    /// The results file of variant `v`, run `r`.
    fn path_of(&self, v: usize, r: usize) -> PathBuf {
        self.dir.join(format!("{}-run{r}.jsonl", self.stems[v]))
    }

    fn resume_hint(&self) -> String {
        format!(
            "continue the campaign with the same command plus --resume (results in {})",
            self.dir.display()
        )
    }
}

/// Runs the campaign; the interrupt receiver turns true on Ctrl-C.
pub async fn run(
    args: SweepArgs,
    mut interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    // Everything is checked before a server starts.
    let c = CampaignOptions::from_args(&args)?;
    let order = launch::schedule(c.variants.len(), c.runs);
    let existing: Vec<PathBuf> = order
        .iter()
        .map(|&(v, r)| c.path_of(v, r))
        .filter(|p| p.exists())
        .collect();
    if !c.plan.resume && !existing.is_empty() {
        return Err(UsageError::Invalid(format!(
            "{} already holds results of this campaign ({}, …): add --resume to continue it, or choose another --out",
            c.dir.display(),
            existing[0].display()
        ))
        .into());
    }
    std::fs::create_dir_all(&c.dir).with_context(|| format!("creating {}", c.dir.display()))?;
    if !c.plan.quiet {
        eprintln!(
            "campaign: {} variant(s) × {} run(s), interleaved; results in {}",
            c.variants.len(),
            c.runs,
            c.dir.display()
        );
        for (v, n) in c.variants.iter().zip(&c.names) {
            eprintln!("  {n}: {}", v.label());
        }
        if let Some((asked, each)) = c.designed_for.filter(|(a, e)| a != e) {
            eprintln!(
                "designed for the comparison: each run to ±{:.1}% at 95% (±{:.1}% ÷ √2), so a ratio of two variants' medians is known to about ±{:.1}%",
                each * 100.0,
                asked * 100.0,
                asked * 100.0
            );
        }
    }
    for (step, &(v, r)) in order.iter().enumerate() {
        let path = c.path_of(v, r);
        let state = progress(&path);
        if state == Progress::Finished {
            if !c.plan.quiet {
                eprintln!(
                    "campaign: {} run {r}: already measured, skipped",
                    c.names[v]
                );
            }
            continue;
        }
        if *interrupt.borrow() {
            return Ok(Ending::Interrupted);
        }
        eprintln!(
            "campaign [{}/{}]: {} run {r}: starting the server (log: {})",
            step + 1,
            order.len(),
            c.names[v],
            path.with_extension("server.log").display()
        );
        match run_variant(&c, (v, r), state, &mut interrupt).await? {
            Ending::Complete => {}
            other => return Ok(other),
        }
    }
    summarise(
        &c.variants,
        &c.names,
        (c.baseline, c.runs),
        &|v, r| c.path_of(v, r),
        &c.dir,
        c.plan.roofline.as_ref(),
    )?;
    Ok(Ending::Complete)
}

/// One run of one variant: its server started, the sweep's plan pointed at it, the server
/// stopped; a server that died or a run that did not complete ends the campaign.
async fn run_variant(
    c: &CampaignOptions,
    (v, r): (usize, usize),
    state: Progress,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    let (variant, name, path) = (&c.variants[v], &c.names[v], c.path_of(v, r));
    let resume_hint = c.resume_hint();
    let log = path.with_extension("server.log");
    let started = tokio::select! {
        s = ManagedServer::start(variant, &log, &c.launch) => s,
        // Dropping the start future kills the half-started server.
        _ = interrupt.changed() => {
            eprintln!("interrupted while the server was starting; it was stopped.\n{resume_hint}");
            return Ok(Ending::Interrupted);
        }
    };
    let mut server = started
        .with_context(|| format!("starting variant {name} (run {r}); nothing is left running"))?;
    if !c.plan.quiet {
        eprintln!("server ready: {}", server.command_line());
    }
    let mut plan = c.plan.clone();
    plan.url = server.base_url();
    plan.out = Some(path.clone());
    plan.resume = state == Progress::Unfinished;
    plan.label = Some(variant.label());
    plan.managed_cmd = Some(variant.label());
    plan.spec_k = variant.spec_k;
    let result = sweep::run_plan(plan, interrupt.clone()).await;
    let alive = server.check_alive();
    let stopped = server.stop(c.launch.grace).await;
    if let Err(died) = alive {
        return Err(anyhow::Error::new(died).context(format!(
            "the server of {name} died during run {r}; {resume_hint}"
        )));
    }
    match stopped {
        Ok(s) if s.forced && !c.plan.quiet => eprintln!(
            "note: the server did not exit within {:?} of SIGTERM; it was killed",
            c.launch.grace
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: stopping the server: {e}"),
    }
    let ending = result.with_context(|| format!("{name} run {r}; {resume_hint}"))?;
    match ending {
        Ending::Complete => {}
        Ending::Interrupted => {
            eprintln!("campaign interrupted; the server was stopped.\n{resume_hint}")
        }
        _ => eprintln!("campaign stopped: {name} run {r} is incomplete.\n{resume_hint}"),
    }
    Ok(ending)
}

/// The comparison of every variant with the baseline (the run as the unit) and the fits per
/// variant, from the results files alone; also written to `compare.md` in the folder.
fn summarise(
    variants: &[Variant],
    names: &[String],
    (baseline, runs): (usize, usize),
    path_of: &dyn Fn(usize, usize) -> PathBuf,
    dir: &Path,
    limits: Option<&ctxbench_stats::roofline::Limits>,
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
    // Each run's model facts are in its header: only the limits are needed here.
    let rep = ctxbench_stats::report::build(&pooled).with_roofline(limits, None);
    out.push_str(&ctxbench_render::renderer(ReportFormat::Table).report(&rep)?);
    if sides.len() > 1 {
        let cmp = ctxbench_stats::compare::build(&sides, false, &Settings::default())?
            .with_roofline(&sides, limits, None);
        out.push('\n');
        out.push_str(&ctxbench_render::renderer(ReportFormat::Table).compare(&cmp)?);
        let md = ctxbench_render::renderer(ReportFormat::Md).compare(&cmp)?;
        let p = dir.join("compare.md");
        std::fs::write(&p, md).with_context(|| format!("writing {}", p.display()))?;
        // Speculation against no speculation: the speedup and acceptance plots beside it.
        for plot in ctxbench_render::svg::speculation_plots(&cmp)? {
            let p = dir.join(format!("{}.svg", plot.name));
            std::fs::write(&p, plot.svg).with_context(|| format!("writing {}", p.display()))?;
            out.push_str(&format!("plot: {}\n", p.display()));
        }
        out.push_str(&format!(
            "\ncomparison also in {}; recompute with: ctxbench compare --a {} --b {}\n",
            p.display(),
            side_glob(dir, &sides[0]),
            side_glob(dir, &sides[1])
        ));
    }
    out.push_str(&speculation_axes(variants, &order, &sides, dir)?);
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(())
}

/// A campaign over the draft length K (`--spec-flags`): the schedule, written to
/// `DIR/schedule/`. A campaign over one numeric list whose variants all speculate (a drafter
/// window, `-L w 1024,4096`): the A/B per length, written to `DIR/ab.md`. Else nothing.
fn speculation_axes(
    variants: &[Variant],
    order: &[usize],
    sides: &[Vec<(String, String, record::Results)>],
    dir: &Path,
) -> Result<String> {
    if variants.iter().all(|v| v.spec_k.is_some()) && !variants.is_empty() {
        let flat: Vec<(String, String, record::Results)> = sides.concat();
        let s = crate::cmd::schedule::build(&flat)?;
        let files = crate::cmd::schedule::write(&dir.join("schedule"), &s)?;
        let mut out = format!("\n{}", ctxbench_render::spec_schedule::markdown(&s));
        out.push_str(&format!(
            "\nschedule also in {}; recompute with: ctxbench report {}/*.jsonl --format schedule\n",
            files
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            dir.display()
        ));
        return Ok(out);
    }
    let [(name, _)] = variants[0].params.as_slice() else {
        return Ok(String::new());
    };
    let numeric: Option<Vec<(f64, Vec<&record::Results>)>> = order
        .iter()
        .zip(sides)
        .map(|(&v, side)| {
            let value = variants[v].params[0].1.parse::<f64>().ok()?;
            let runs: Vec<&record::Results> = side.iter().map(|(_, _, r)| r).collect();
            let spec = ctxbench_stats::stats::speculation::side_is_speculative(
                &ctxbench_stats::stats::speculation::Side {
                    label: "",
                    runs: &runs,
                },
            );
            spec.then_some((value, runs))
        })
        .collect();
    let Some(md) = numeric.and_then(|n| crate::cmd::schedule::ab_markdown(name, &n)) else {
        return Ok(String::new());
    };
    let p = dir.join("ab.md");
    std::fs::write(&p, &md).with_context(|| format!("writing {}", p.display()))?;
    Ok(format!("\n{md}\nA/B also in {}\n", p.display()))
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
