//! `ctxbench replay TRACE --url URL`: the trace read and validated whole, the server probed
//! and prepared as for a sweep (the same session: probe, corpus, flush decision, warmup),
//! requests beyond its context skipped and counted, then the replay driver
//! (`ctxbench_session::replay`) sends every request at its time and records each with the
//! proof of its reuse; the report is built from the results file alone.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd::progress::Terminal;
use crate::cmd::replay_args::{ReplayArgs, TimingArg};
use crate::cmd::Ending;
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record::replay::{ReplayConfig, ReplayTiming};
use ctxbench_schema::record::{self, RunHeader};
use ctxbench_session::replay::{self, proof, BlockPrompts, Capacity, Driver, Timing};
use ctxbench_session::session::{Output, Session, SweepPlan};
use ctxbench_trace::TraceRequest;

/// A trace as the replay needs it: its requests in order, what format it was and the
/// lengths' scale.
pub struct Loaded {
    /// The requests, in trace order.
    pub requests: Vec<TraceRequest>,
    /// The format's name (recorded in the header).
    pub format: String,
    /// What the trace is called in the header (its path, or the synthetic workload).
    pub name: String,
}

/// Runs a replay against `--url`.
pub async fn run(
    args: ReplayArgs,
    mut interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    let started = std::time::Instant::now();
    let trace = load(&args)?;
    let slo = parse_slo(args.slo.as_deref())?;
    let plan = sweep_plan(&args)?;
    let mut observer = Terminal::new(false);
    let out_path = args.output.clone().unwrap_or_else(default_out);
    let mut output =
        Output::open(&out_path, args.resume, &mut observer).map_err(|e| anyhow::anyhow!(e))?;
    let mut session = Session::open(plan, &mut observer)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    if ctxbench_client::openai::calibrated(&session.profile) {
        // Calibrated text aims at a length, not at tokens: blocks would not be shared
        // token for token, and no reuse could be proven.
        bail!(UsageError::Invalid(
            "replay needs prompts whose blocks are exact tokens, and this server takes no token ids and has no tokenizer endpoint (a router such as sglang-router): --tokenizer-url URL lends the tokenizer of a server of the same model (one of its workers), and prompts become text of exact length".into()
        ));
    }
    let requests_read = trace.requests.len() as u64;
    let limit = args.context_limit.or(session.profile.max_context);
    let (requests, skipped, longest) =
        fit_to_context(trace.requests, &trace.name, args.scale, limit)?;
    // The corpus is tokenized once for the longest prompt; the warmup uses the shortest
    // context of the plan.
    session.plan.contexts = Some(vec![longest]);
    session.plan.output_tokens = requests
        .iter()
        .map(|r| u32::try_from(r.output_tokens).unwrap_or(u32::MAX))
        .max()
        .unwrap_or(1)
        .max(1);
    let run_id = output.run_id.clone();
    session
        .prepare(&run_id, &mut observer)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    // A resumed run keeps its salt: the prompts it continues are the ones it began.
    let salt = match output.prior_header().and_then(|h| h.config.replay.as_ref()) {
        Some(r) => r.salt,
        None => args.prompt_seed.unwrap_or_else(replay::prompts::fresh_salt),
    };
    let timing = timing(&args, &requests);
    let family = session.profile.detected.and_then(ctxbench_client::family);
    let allowance = move |l: u64| family.map_or(1, |f| f.reuse_allowance(l).0);
    let rule = family.map_or(
        "the last token of the prefix may be recomputed for the next logits",
        |f| f.reuse_allowance(1).1,
    );
    let config = ReplayConfig {
        trace: trace.name.clone(),
        format: trace.format.clone(),
        requests: requests_read,
        planned: requests.len() as u64,
        skipped_beyond_context: skipped,
        sessions: replay::session_count(&requests),
        block_tokens: requests.first().map_or(0, |r| r.block_tokens),
        salt,
        timing: timing.mode,
        speed: timing.speed,
        max_gap_s: args.max_gap,
        scale: args.scale,
        span_ms: span(&requests, &timing),
        input_tokens: requests.iter().map(|r| r.input_tokens).sum(),
        ideal_reuse_tokens: proof::ideal_reuse(&requests).iter().sum(),
        slo_ttft_ms: slo.0,
        slo_tpot_ms: slo.1,
        allowance_rule: rule.to_owned(),
    };
    let mut header: RunHeader = session.header(&run_id).map_err(|e| anyhow::anyhow!(e))?;
    header.config.replay = Some(config);
    let (mut writer, prior) = output.start(&header)?;
    eprintln!(
        "replay: {} request(s) of {} ({}), {} timing; results: {}",
        requests.len(),
        trace.name,
        trace.format,
        timing.mode.as_str(),
        out_path.display()
    );
    let (backend, corpus, settings, added) =
        session.replay_parts().map_err(|e| anyhow::anyhow!(e))?;
    let driver = Driver {
        backend,
        prompts: BlockPrompts::new(corpus, salt, added),
        settings,
        allowance: &allowance,
        capacity: Capacity {
            kv_pool_tokens: session.profile.kv_pool_tokens,
            slots: session.profile.total_slots,
        },
        timing,
    };
    let done = replay::recorded(&prior);
    let span_ms = header.config.replay.as_ref().map_or(0.0, |c| c.span_ms);
    let driven = std::time::Instant::now();
    let tally = replay::run(
        &driver,
        &requests,
        &done,
        &writer,
        &mut observer,
        &mut interrupt,
    )
    .await?;
    pace(driven.elapsed().as_secs_f64(), span_ms, done.len());
    let finished = session
        .finish(&mut writer, &run_id, tally, started)
        .map_err(|e| anyhow::anyhow!(e))?;
    summarize(&out_path, &finished.tally, &args)
}

/// The trace scaled and fitted to the server's context: the requests to send, how many were
/// skipped (beyond the context: never truncated), and the longest prompt.
fn fit_to_context(
    requests: Vec<TraceRequest>,
    name: &str,
    scale: Option<f64>,
    limit: Option<u64>,
) -> Result<(Vec<TraceRequest>, u64, u64)> {
    let requests_read = requests.len() as u64;
    let (requests, skipped) = shape(requests, scale, limit);
    if skipped > 0 {
        eprintln!(
            "{skipped} of {requests_read} request(s) skipped: prompt + output exceed the server's context of {} tokens (never truncated)",
            limit.unwrap_or(0)
        );
    }
    let Some(longest) = requests.iter().map(|r| r.input_tokens).max() else {
        bail!(UsageError::Invalid(format!(
            "no request of {} fits the server's context ({} tokens)",
            name,
            limit.unwrap_or(0)
        )));
    };
    Ok((requests, skipped, longest))
}

/// The report from the results file alone, on the terminal and as Markdown beside it.
fn summarize(
    path: &Path,
    tally: &ctxbench_session::bench::Tally,
    args: &ReplayArgs,
) -> Result<Ending> {
    let results = record::read_results(path, false)?;
    if let Some(r) = ctxbench_stats::replay_report::build(&results) {
        println!("{}", ctxbench_render::replay::text(&r));
        let md = path.with_extension("md");
        if md != path {
            std::fs::write(&md, ctxbench_render::replay::markdown(&r))
                .with_context(|| format!("writing {}", md.display()))?;
            eprintln!("report: {}", md.display());
        }
    }
    let hint = format!(
        "resume with: ctxbench replay {} --url {} --output {} --resume",
        args.trace
            .as_ref()
            .map_or("--synthetic agent".to_owned(), |p| p.display().to_string()),
        args.url.as_deref().unwrap_or(""),
        path.display()
    );
    if tally.interrupted {
        eprintln!(
            "interrupted: {} request(s) recorded this session are kept.\n{hint}",
            tally.recorded
        );
        return Ok(Ending::Interrupted);
    }
    if let Some(why) = &tally.stopped {
        eprintln!("the replay stopped early: {why}\n{hint}");
        return Ok(Ending::Incomplete);
    }
    if tally.failed > 0 {
        eprintln!("{} request(s) failed; {hint}", tally.failed);
        return Ok(Ending::Incomplete);
    }
    Ok(Ending::Complete)
}

/// Says at the end how long the replay took against the trace's span (1.00: the replay
/// kept the trace's duration; more: the server, or the client, could not keep up).
fn pace(wall_s: f64, span_ms: f64, resumed: usize) {
    if span_ms <= 0.0 {
        return;
    }
    let span_s = span_ms / 1000.0;
    eprintln!(
        "wall ÷ trace span: {wall_s:.2} s from the start's flush to the last answer over a span of {span_s:.2} s = {:.2}{}",
        wall_s / span_s,
        if resumed > 0 {
            " (a resumed run: the requests recorded before were not sent again)"
        } else {
            ""
        }
    );
}

/// Each request scaled by `--scale`, and those beyond `limit` (input + output) left out and
/// counted: skipped, never truncated.
fn shape(
    requests: Vec<TraceRequest>,
    scale: Option<f64>,
    limit: Option<u64>,
) -> (Vec<TraceRequest>, u64) {
    let shaping = ctxbench_trace::shape::Shaping {
        scale,
        context_limit: limit,
    };
    let mut kept = Vec::with_capacity(requests.len());
    let mut skipped = 0;
    for r in requests {
        match shaping.apply(r) {
            ctxbench_trace::shape::Shaped::Keep { request, .. } => kept.push(request),
            ctxbench_trace::shape::Shaped::Skip { .. } => skipped += 1,
        }
    }
    (kept, skipped)
}

/// Open loop where every request has a timestamp (unless `--timing session`), else per
/// session.
fn timing(args: &ReplayArgs, requests: &[TraceRequest]) -> Timing {
    let mode = match args.timing {
        Some(TimingArg::Trace) => ReplayTiming::OpenLoop,
        Some(TimingArg::Session) => ReplayTiming::PerSession,
        None if requests.iter().all(|r| r.at_ms.is_some()) => ReplayTiming::OpenLoop,
        None => ReplayTiming::PerSession,
    };
    Timing {
        mode,
        speed: args.speed,
        max_gap_ms: args.max_gap.map(|s| s * 1000.0),
    }
}

/// The open-loop span of the planned requests, ms.
fn span(requests: &[TraceRequest], t: &Timing) -> f64 {
    let refs: Vec<&TraceRequest> = requests.iter().collect();
    replay::schedule::span_ms(&replay::schedule::open_loop_offsets(&refs, t))
}

/// `--slo ttft=2s,tpot=50ms`: the goals in ms.
pub fn parse_slo(s: Option<&str>) -> Result<(Option<f64>, Option<f64>), UsageError> {
    let Some(s) = s else { return Ok((None, None)) };
    let (mut ttft, mut tpot) = (None, None);
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            UsageError::Invalid(format!(
                "--slo '{s}': expected ttft=DURATION,tpot=DURATION (e.g. ttft=2s,tpot=50ms)"
            ))
        };
        let (k, v) = part.split_once('=').ok_or_else(bad)?;
        let ms = humantime::parse_duration(v.trim())
            .map_err(|_| bad())?
            .as_secs_f64()
            * 1000.0;
        match k.trim() {
            "ttft" => ttft = Some(ms),
            "tpot" => tpot = Some(ms),
            _ => return Err(bad()),
        }
    }
    Ok((ttft, tpot))
}

/// The sweep's own plan for this server, through the sweep's own option checks: the same
/// probe, corpus, flush decision and warmup as every sweep.
fn sweep_plan(args: &ReplayArgs) -> Result<SweepPlan> {
    let Some(url) = args.url.as_deref() else {
        bail!(UsageError::Invalid(
            "replay needs --url (or --dry-run)".into()
        ));
    };
    let mut argv: Vec<String> = [
        "ctxbench",
        "sweep",
        "--url",
        url,
        "--corpus",
        &args.corpus,
        "--api-key-env",
        &args.api_key_env,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(m) = &args.model {
        argv.extend(["--model".into(), m.clone()]);
    }
    if let Some(t) = &args.tokenizer_url {
        argv.extend(["--tokenizer-url".into(), t.clone()]);
    }
    if let Some(seed) = args.prompt_seed {
        argv.extend(["--prompt-seed".into(), seed.to_string()]);
    }
    let cli = <crate::cmd::cli::Cli as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| UsageError::Invalid(format!("replay: {e}")))?;
    let crate::cmd::cli::Command::Sweep(sweep) = cli.command else {
        bail!("internal: the sweep's options did not parse as a sweep");
    };
    let mut plan = crate::cmd::sweep_options::plan(&sweep)?;
    plan.out = None;
    // Reuse is what a replay measures: no request asks the server to skip its cache.
    plan.cache_bypass = false;
    Ok(plan)
}

/// `ctxbench-replay-<UTC time>.jsonl`.
fn default_out() -> PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = now
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    PathBuf::from(format!(
        "ctxbench-replay-{}-{}.jsonl",
        &stamp[..8],
        &stamp[8..]
    ))
}

/// The trace, read and validated whole before anything is sent (by the trace crate's
/// reader: every format, or the synthetic workload), up to `--max-requests`.
fn load(args: &ReplayArgs) -> Result<Loaded> {
    let (name, reader) = crate::cmd::replay_dry::open(args)?;
    let format = reader
        .format()
        .map_or("synthetic agent", |f| f.name())
        .to_owned();
    let take = args.max_requests.map_or(usize::MAX, |n| n as usize);
    let requests = reader
        .take(take)
        .collect::<Result<Vec<_>, _>>()
        .context("the trace is invalid: nothing was sent")?;
    Ok(Loaded {
        requests,
        format,
        name,
    })
}
