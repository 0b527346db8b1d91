//! `ctxbench sweep`: the command line validated into a [`SweepPlan`], a library
//! [`Session`] driven through probe → prepare → header → run → finish, then the summary
//! and the report files, built from the results file alone.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Result};

use crate::cmd::cli::SweepArgs;
use ctxbench_client::ServerProfile;
use ctxbench_schema::record;
use ctxbench_schema::units;
use ctxbench_session::bench;
use ctxbench_session::corpus::Corpus;
use ctxbench_session::session::{Finished, Output, OutputError, Session, SessionError, SweepPlan};
use ctxbench_stats::stats;

use crate::cmd::progress::Terminal;
use crate::cmd::Ending;

/// Runs a sweep of one corpus (several are `cmd::corpora`'s); the interrupt receiver turns
/// true on Ctrl-C.
pub async fn run(args: SweepArgs, interrupt: tokio::sync::watch::Receiver<bool>) -> Result<Ending> {
    // Every option is checked before anything is read, written or sent.
    let plan = crate::cmd::sweep_options::plan(&args)?;
    run_plan(plan, interrupt).await
}

/// Runs one validated sweep (also each run of a campaign): the session, then the summary.
pub async fn run_plan(
    plan: SweepPlan,
    mut interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    let mut observer = Terminal::new(plan.quiet);
    let started = std::time::Instant::now();
    // The results file is opened before any request, so an unwritable path costs nothing.
    let mut output = match (&plan.out, plan.dry_run) {
        (Some(p), false) => Some(Output::open(p, plan.resume, &mut observer).map_err(lift_output)?),
        _ => None,
    };
    let result = measure(
        plan,
        output.as_mut(),
        &mut observer,
        &mut interrupt,
        started,
    )
    .await;
    if let (Err(_), Some(o)) = (&result, output.as_mut()) {
        o.discard_if_empty();
    }
    result
}

/// The session's phases in order; the dry run branches off once the server is prepared.
async fn measure(
    plan: SweepPlan,
    output: Option<&mut Output>,
    observer: &mut Terminal,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    started: std::time::Instant,
) -> Result<Ending> {
    let (quiet, dry_run) = (plan.quiet, plan.dry_run);
    let mut session = Session::open(plan, observer).await.map_err(lift)?;
    if !quiet {
        print_probe(&session.profile);
    }
    let run_id = output
        .as_ref()
        .map_or_else(|| "dry-run".to_owned(), |o| o.run_id.clone());
    session.prepare(&run_id, observer).await.map_err(lift)?;
    let (contexts, levels) = (
        session.contexts().to_vec(),
        session.plan.concurrency.clone(),
    );
    // A dry run prints the prediction in its own plan (stdout); once is enough.
    if session.plan.grid() && !quiet && !dry_run {
        let p = crate::cmd::dryrun::prediction(
            &contexts,
            &levels,
            session.plan.output_tokens,
            &session.limits(),
        );
        eprint!("{p}");
    }
    if dry_run {
        return crate::cmd::dryrun::run(&mut session).await;
    }
    let Some(output) = output else {
        bail!("internal: no results file outside --dry-run");
    };
    let header = session.header(&run_id).map_err(lift)?;
    let (mut writer, prior) = output.start(&header)?;
    if !quiet {
        if let Some(corpus) = session.corpus() {
            eprintln!(
                "{}",
                plan_line(&contexts, &session.plan, session.plan.output_tokens, corpus)
            );
        }
        eprintln!("results: {}", output.path.display());
    }
    // Worded once, in the report model: the same lines end every report of this file.
    for w in ctxbench_stats::report::config_warnings(&header.config, &header.server) {
        bench::Observer::warn(observer, &w.message);
    }
    let tally = session
        .run(&mut writer, &prior, observer, interrupt)
        .await
        .map_err(lift)?;
    let finished = session
        .finish(&mut writer, &run_id, tally, started)
        .map_err(lift)?;
    summarize(&session, &output.path, &contexts, finished)
}

/// The end of a sweep, from the results file alone through the same report model as
/// `ctxbench report`: the table, details and warnings, the report files beside the results,
/// and how the sweep ended.
fn summarize(session: &Session, path: &Path, contexts: &[u64], f: Finished) -> Result<Ending> {
    // Built first and written once: a closed stdout (`| head`) must not cost the report
    // files written below.
    let loaded = crate::cmd::report::load(&[path.to_owned()])?;
    let report = ctxbench_stats::report::build(&loaded)
        .with_price(session.plan.price_per_hour)
        .with_roofline(session.plan.roofline.as_ref(), None);
    let results = &loaded[0].2;
    let summary = summary_text(
        &report,
        &session.plan.corpus.label(),
        path,
        f.wall_s,
        f.busy_s,
        &f.efficiency,
    )?;
    let _ = std::io::stdout().lock().write_all(summary.as_bytes());
    for w in report.runs.iter().flat_map(|r| &r.warnings) {
        eprintln!("WARNING: {w}");
    }
    if let Err(e) = crate::cmd::report::after_sweep(&report, path) {
        eprintln!("warning: could not write the report: {e:#}");
    }
    let resume_hint = format!(
        "resume with: ctxbench sweep --url {} --out {} --resume (plus the same options)",
        session.profile.url,
        path.display()
    );
    Ok(ending(&f.tally, &results.samples, contexts, &resume_hint))
}

/// A session's error for `anyhow`, so the exit code sees the typed error inside.
fn lift(e: SessionError) -> anyhow::Error {
    match e {
        SessionError::Usage(u) => u.into(),
        SessionError::Record(r) => r.into(),
        other => other.into(),
    }
}

/// The results file's error for `anyhow`, likewise.
fn lift_output(e: OutputError) -> anyhow::Error {
    match e {
        OutputError::Usage(u) => u.into(),
        OutputError::Record(r) => r.into(),
        other => other.into(),
    }
}

/// The plan line printed before measuring: points, concurrency levels, repetitions, output
/// length and corpus.
fn plan_line(contexts: &[u64], opts: &SweepPlan, out_tokens: u32, corpus: &Corpus) -> String {
    format!(
        "plan: {} context(s) [{}]{} × {}{}, {}, corpus: {}{}",
        contexts.len(),
        contexts
            .iter()
            .map(|&c| units::fmt_ctx(c))
            .collect::<Vec<_>>()
            .join(", "),
        match opts.grid() {
            true => format!(
                " × concurrency [{}] (waves of c requests released together)",
                opts.concurrency
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            false => String::new(),
        },
        opts.policy,
        opts.prompts
            .map(|k| format!(" over {k} distinct prompts"))
            .unwrap_or_default(),
        output_label(opts.two_point, out_tokens),
        opts.corpus.label(),
        if corpus.wraps { " (wraps around)" } else { "" },
    )
}

/// The end-of-sweep summary: the report's table and details, then the sweep's own lines.
fn summary_text(
    report: &ctxbench_stats::report::Report,
    corpus_label: &str,
    path: &Path,
    wall_s: f64,
    busy_s: f64,
    efficiency: &std::result::Result<f64, String>,
) -> Result<String> {
    let mut summary = String::new();
    if let Some(run) = report.runs.first() {
        // A conversation measures no cold point: no empty table.
        if !run.points.is_empty() {
            writeln!(
                summary,
                "\n{}",
                ctxbench_render::summary_table(&run.points, run.design.as_ref())
            )?;
        }
        write!(summary, "{}", ctxbench_render::table::details(run))?;
    }
    writeln!(
        summary,
        "TTFT and decode are client-side medians (min–max) over usable samples; server columns are the server's own timings.\ncorpus: {}; results: {}",
        corpus_label,
        path.display()
    )?;
    match efficiency {
        Ok(e) => writeln!(
            summary,
            "sweep efficiency: {wall_s:.1} s wall / {busy_s:.1} s server busy (prompt + generation) = {e:.2}× (1.00 = no time lost outside the server)"
        )?,
        Err(why) => writeln!(summary, "sweep efficiency: not computed: {why}")?,
    }
    if let Some(line) = report
        .runs
        .first()
        .and_then(|r| client_vs_server(&r.points))
    {
        writeln!(summary, "{line}")?;
    }
    Ok(summary)
}

/// How the sweep ended, said on the terminal: interrupted, stopped, failed samples, or a
/// point with nothing usable all exit non-zero with what to do.
fn ending(
    tally: &bench::Tally,
    samples: &[record::Sample],
    contexts: &[u64],
    resume_hint: &str,
) -> Ending {
    if tally.interrupted {
        eprintln!(
            "interrupted: {} sample(s) recorded this session are kept.\n{resume_hint}",
            tally.recorded
        );
        return Ending::Interrupted;
    }
    if let Some(reason) = &tally.stopped {
        eprintln!("the sweep stopped early: {reason}\n{resume_hint}");
        return Ending::Incomplete;
    }
    if tally.failed > 0 {
        eprintln!("{} sample(s) failed; {resume_hint}", tally.failed);
        return Ending::Incomplete;
    }
    let empty = points_without_usable_samples(samples, contexts);
    if !empty.is_empty() {
        eprintln!(
            "error: no usable sample at {}: nothing was measured there",
            empty.join("; ")
        );
        return Ending::Incomplete;
    }
    Ending::Complete
}

/// Context points whose cold samples are all excluded, each with why (the flags that
/// excluded them, counted): a run that measured nothing usable somewhere must not exit 0.
fn points_without_usable_samples(samples: &[record::Sample], contexts: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    for &c in contexts {
        let cold: Vec<&record::Sample> = samples
            .iter()
            .filter(|s| s.context_tokens == c && s.phase == record::Phase::Cold)
            .collect();
        if cold.is_empty() || cold.iter().any(|s| s.usable()) {
            continue;
        }
        let mut why: std::collections::BTreeMap<String, usize> = Default::default();
        for s in &cold {
            if s.status != record::Status::Ok {
                *why.entry("failed".into()).or_default() += 1;
            }
            for f in &s.flags {
                *why.entry(f.to_string()).or_default() += 1;
            }
        }
        let why: Vec<String> = why.iter().map(|(k, n)| format!("{n} {k}")).collect();
        out.push(format!(
            "{} ({} sample(s): {})",
            units::fmt_ctx(c),
            cold.len(),
            why.join(", ")
        ));
    }
    out
}

/// "client vs server" per context length, from the report model: median TTFT − server
/// prompt ms (the server's request handling, which grows with length) and median client ÷
/// server decode rate, with the samples flagged `client_server_disagree`.
pub fn client_vs_server(points: &[stats::PointSummary]) -> Option<String> {
    let lines: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let overhead = p.ttft_overhead_ms.as_ref()?;
            let ratio = p
                .decode_client_over_server
                .as_ref()
                .map_or("n/a".to_owned(), |r| format!("{:.3}", r.median));
            let flagged = match p.client_server_disagree {
                0 => String::new(),
                n => format!(
                    ", {n} sample(s) off by more than {:.0}%",
                    ctxbench_session::sample::DISAGREE_MARGIN * 100.0
                ),
            };
            Some(format!(
                "  {:>6}: TTFT − server prompt_ms = {:.2} ms; decode client/server = {ratio}{flagged}",
                units::fmt_ctx(p.context_tokens),
                overhead.median
            ))
        })
        .collect();
    (!lines.is_empty()).then(|| {
        format!(
            "client vs server (medians per context):\n{}",
            lines.join("\n")
        )
    })
}

/// What each request generates: two-point sends A and B tokens, not --output-tokens.
pub fn output_label(two_point: Option<(u32, u32)>, output_tokens: u32) -> String {
    match two_point {
        Some((a, b)) => format!("{a} and {b} output tokens (two-point)"),
        None => format!("{output_tokens} output tokens"),
    }
}

/// The probe's first line: one server, or a router with the workers it fronts (never a
/// router named as the worker whose answers it forwards).
fn server_line(p: &ServerProfile) -> String {
    let version = p.server_version.as_deref().unwrap_or("");
    match &p.router {
        None => format!("{} {version} at {}", p.server_kind, p.url),
        Some(r) => format!(
            "{} at {} (a router: {}), fronting {} worker(s){}; workers: {}\nrouter: {}",
            r.kind,
            p.url,
            r.evidence,
            r.workers.len(),
            match r.workers.is_empty() {
                true => String::new(),
                false => format!(" ({})", r.workers.join(", ")),
            },
            r.worker_family.clone().unwrap_or_else(|| format!(
                "their family is not known (the answers the router forwards look like {} {version})",
                p.server_kind
            )),
            r.meaning
        ),
    }
}

fn print_probe(p: &ServerProfile) {
    let yn = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    eprintln!(
        "server: {}\nbackend: {} ({})\nmax context: {}\nmodel: {}\ncapabilities: tokenize {}, token-id prompts {}, per-request cache bypass {}, /metrics {}{}",
        server_line(p),
        p.backend.as_str(),
        p.backend_reason,
        match (p.max_context, &p.max_context_source) {
            (Some(n), Some(src)) => format!("{n} tokens ({src})"),
            _ => "not reported".into(),
        },
        p.model.as_deref().unwrap_or("unknown"),
        match &p.tokenizer {
            Some(t) => format!("yes ({} + {})", t.tokenize_path, t.detokenize_path),
            None => yn(Some(p.tokenize.is_some())).to_owned(),
        },
        p.token_ids_stated(),
        yn(Some(p.cache_bypass)),
        yn(Some(p.metrics)),
        p.endpoint
            .as_deref()
            .map_or(String::new(), |e| format!("; generations: POST {e}")),
    );
    // The flush is not named here: whether it works is known only once it is tried (the
    // next lines say what it did), and an endpoint listed here that then fails read as a
    // contradiction.
    eprintln!(
        "prompts: {}; limits: KV pool {}; speculative stats: {}",
        p.prompt_method,
        p.kv_pool_tokens
            .map_or("not reported".to_owned(), |n| format!("{n} tokens")),
        p.spec_stats.as_deref().unwrap_or("not exposed"),
    );
    for n in &p.notes {
        eprintln!("note: {n}");
    }
}

#[cfg(test)]
mod two_point_tests {
    use super::output_label;

    #[test]
    fn the_plan_names_both_two_point_lengths() {
        assert_eq!(
            output_label(Some((1, 17)), 32),
            "1 and 17 output tokens (two-point)"
        );
        assert_eq!(output_label(None, 32), "32 output tokens");
    }
}
