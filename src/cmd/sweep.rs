//! `ctxbench sweep`: config → probe → plan → bench → record → stats → render.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd::cli::{FlushMode, Method, SweepArgs};
use ctxbench::bench::{self, BenchSettings, Observer};
use ctxbench::capacity;
use ctxbench::client::family::ConnectOptions;
use ctxbench::client::Scraper;
use ctxbench::client::{family, Backend, Http, ServerProfile};
use ctxbench::corpus::Corpus;
use ctxbench::error::{ClientError, RecordError, UsageError};
use ctxbench::plan;
use ctxbench::probe::{self, ProbeError};
use ctxbench::prompt::{PromptBuilder, NONCE_TOKENS};
use ctxbench::record::{
    self, CorpusInfo, EndRecord, FlushChoice, Host, Line, ResultsWriter, ResumeRecord, RunConfig,
    RunHeader, ServerInfo, SCHEMA_VERSION,
};
use ctxbench::render;
use ctxbench::stats;
use ctxbench::units;

use crate::cmd::sweep_options::SweepOptions;

use crate::cmd::progress::Terminal;
use crate::cmd::Ending;

/// Runs a sweep; the interrupt receiver turns true on Ctrl-C.
pub async fn run(
    args: SweepArgs,
    mut interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    // Every option is checked before anything is read, written or sent.
    let opts = SweepOptions::from_args(&args)?;
    let api_key = api_key(&args.api_key_env)?;
    let ca = args
        .ca_cert
        .as_ref()
        .map(|p| {
            std::fs::read(p)
                .map_err(|e| UsageError::Invalid(format!("--ca-cert {}: {e}", p.display())))
        })
        .transpose()?;
    let url = args.url.as_deref().unwrap_or_default();
    let http = Http::new(url, api_key, ca.as_deref()).map_err(UsageError::Invalid)?;

    // The results file is opened before any request, so an unwritable path costs nothing.
    let out_path = args.out.clone().unwrap_or_else(default_out);
    let mut output = if args.dry_run {
        None
    } else {
        Some(Output::open(&out_path, args.resume)?)
    };
    let started = std::time::Instant::now();

    let quiet = args.quiet;
    let probe_result = probe::probe(
        &http,
        http.base(),
        args.backend,
        args.model.as_deref(),
        opts.wait_ready,
        &mut |m: &str| {
            if !quiet {
                eprintln!("{m}");
            }
        },
    )
    .await;
    let probe_result = probe_result.and_then(|mut p| {
        ctxbench::client::openai::choose_endpoint(&mut p, args.endpoint)?;
        Ok(p)
    });
    let probe_result = match (probe_result, args.tokenizer_url.as_deref()) {
        (Ok(mut p), Some(u)) => adopt_tokenizer(&mut p, u).await.map(|()| p),
        (r, _) => r,
    };
    let mut probe = match probe_result {
        Ok(p) => p,
        Err(e) => {
            if let Some(o) = output.as_mut() {
                o.discard_if_empty();
            }
            return Err(match e {
                ProbeError::Usage(u) => u.into(),
                ProbeError::Client(c) => anyhow::Error::new(c).context("probing the server"),
            });
        }
    };
    if !args.quiet {
        print_probe(&probe);
    }

    let result = measure(
        &args,
        opts,
        &http,
        &mut probe,
        output.as_mut(),
        &mut interrupt,
        started,
    )
    .await;
    if let (Err(_), Some(o)) = (&result, output.as_mut()) {
        o.discard_if_empty();
    }
    result
}

async fn measure(
    args: &SweepArgs,
    opts: SweepOptions,
    http: &Http,
    probe: &mut ServerProfile,
    output: Option<&mut Output>,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    started: std::time::Instant,
) -> Result<Ending> {
    let SweepOptions {
        contexts: contexts_arg,
        corpus: corpus_spec,
        two_point,
        policy,
        ..
    } = opts.clone();
    // Per request: --wave-output-tokens in a concurrency grid.
    let out_tokens = opts.output_tokens(args);
    let levels = opts.concurrency.clone();
    // The longest generation a point must hold.
    let output_tokens = opts.longest_output(out_tokens);
    let contexts = resolve_contexts(contexts_arg.clone(), probe, output_tokens)?;

    let fam = family(probe.backend).context("internal: the probe chose no protocol")?;
    let nonce_tokens = if args.nonce.is_on() { NONCE_TOKENS } else { 0 };
    let backend = fam.connect(
        http.clone(),
        probe,
        &ConnectOptions {
            nonce_tokens,
            largest_context: contexts.last().copied().unwrap_or(0),
            output_tokens: output_tokens.max(u64::from(out_tokens)),
        },
    )?;
    let length = fam.length_policy(probe);
    let cache_bypass = args.cache_bypass.is_on() && probe.cache_bypass;
    // Before anything else is sent: fields the server refuses are left out from here on.
    let negotiated = backend.negotiate().await.context(
        "settling the request's optional fields with the server (a test request of two tokens)",
    )?;
    for n in &negotiated.notes {
        if !args.quiet {
            eprintln!("note: {n}");
        }
        probe.notes.push(n.clone());
    }
    probe.dropped_fields = negotiated.dropped;

    let corpus = prepare_corpus(
        &corpus_spec,
        backend.as_ref(),
        &contexts,
        probe.n_vocab,
        args.seed,
        length.text_prompts,
    )
    .await?;
    let run_id = output
        .as_ref()
        .map_or_else(|| "dry-run".to_owned(), |o| o.run_id.clone());
    // A dry run measures nothing, so it must not erase the server's cache either.
    let flush = match args.dry_run {
        true => None,
        false => {
            decide_flush(
                args.flush,
                opts.flush_wait,
                backend.as_ref(),
                probe,
                args.quiet,
            )
            .await?
        }
    };
    let metrics = metrics_scraper(args, http, probe)?;
    if let (Some(m), Some(_), false) = (&metrics, &args.metrics_url, args.dry_run) {
        // A user-given endpoint is tried once up front, so a wrong one is said once, not
        // only as a flag on every sample.
        if let Err(e) = m.scrape().await {
            let note = format!(
                "--metrics-url {} does not answer ({e}); every sample will be flagged metrics_unavailable",
                probe::redact_url(&m.url())
            );
            eprintln!("warning: {note}");
            probe.notes.push(note);
        }
    }
    let mut settings = BenchSettings {
        run_id: run_id.clone(),
        output_tokens: out_tokens,
        policy,
        cache_bypass,
        length_tolerance: args.length_tolerance,
        length_tolerance_pct: length.tolerance_pct,
        timeout_base: opts.timeout,
        timeout_per_1k: opts.timeout_per_1k,
        stall_timeout: opts.stall_timeout,
        on_error: args.on_error,
        flush: flush.is_some(),
        flush_wait: opts.flush_wait,
        metrics: metrics.clone(),
        two_point,
        decode_samples: args.decode_samples,
        needle: opts
            .needle_depths
            .clone()
            .map(|depths| bench::NeedleSettings {
                depths,
                seed: args.prompt_seed,
                nonce_tokens,
            }),
        nonce_end: None,
    };
    let mut builder = PromptBuilder::new(&corpus, args.nonce.is_on());
    // First tokens earlier runs sent to this server: a prefix cache that is not flushed
    // (SGLang's radix cache matches even one token) still holds those prompts.
    let nonce_history = NonceHistory::open(&probe.url, probe.model.as_deref());
    if let Some(seed) = args.prompt_seed {
        // A reproducible run sends what its twin sent: no history avoidance here; the
        // flush and the cached-token check still catch a replay that hits a cache.
        builder = builder.seeded(seed);
    } else if args.nonce.is_on() && !length.text_prompts {
        let mut recent = nonce_history.load();
        recent.reverse();
        builder.avoid_first(recent);
    }
    let warm = warm_up(
        backend.as_ref(),
        &mut builder,
        &settings,
        probe,
        metrics.as_ref(),
        length.server_adds_bos,
        args.quiet,
    )
    .await?;
    // The server's own tokens in front (BOS, a chat template's prefix), then the nonce.
    settings.nonce_end = args
        .nonce
        .is_on()
        .then_some(warm.server_added + nonce_tokens as u64);
    if contexts_arg.is_some() && probe.max_context.is_none() {
        let note = "the server does not report its maximum context; a --contexts point beyond it will fail when sent";
        if !args.quiet {
            eprintln!("warning: {note}");
        }
        probe.notes.push(note.to_owned());
    }

    let limits = capacity::Limits {
        server_kind: probe.server_kind.clone(),
        slots: probe.total_slots,
        kv_pool_tokens: probe.kv_pool_tokens,
    };
    // A dry run prints the prediction in its own plan (stdout); once is enough.
    if opts.grid() && !args.quiet && !args.dry_run {
        eprint!(
            "{}",
            crate::cmd::dryrun::prediction(&contexts, &levels, out_tokens, &limits)
        );
    }
    if args.dry_run {
        return crate::cmd::dryrun::run(
            backend.as_ref(),
            &mut builder,
            &contexts,
            &levels,
            &limits,
            &settings,
            &corpus_spec,
            &corpus,
        )
        .await;
    }
    let Some(output) = output else {
        bail!("internal: no results file outside --dry-run");
    };

    let config = run_config(args, &opts, probe, &contexts, &settings, metrics.as_ref());
    let mut server = ServerInfo::from(&*probe);
    server.flush_check = flush.clone();
    // Tried (auto or always) and either working or not; `--flush never` tries nothing.
    server.flush_available = (args.flush != FlushMode::Never).then_some(flush.is_some());
    // The flag belongs to the server, whichever protocol is spoken to it.
    server.cached_tokens_hint = probe
        .detected
        .and_then(family)
        .and_then(|f| f.cached_tokens_hint())
        .map(str::to_owned);
    let header = RunHeader {
        schema: SCHEMA_VERSION,
        run_id: output.run_id.clone(),
        ctxbench_version: env!("CARGO_PKG_VERSION").into(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        host: Host::current(),
        config,
        server,
        corpus: CorpusInfo {
            spec: corpus_spec.clone(),
            label: corpus_spec.label(),
            tokens: corpus.tokens.len() as u64,
            wraps: corpus.wraps,
            tokenize_requests: corpus.tokenize_requests as u64,
        },
        label: args.label.clone(),
    };
    let (header_config, header_server) = (header.config.clone(), header.server.clone());
    let (mut writer, prior) = output.start(header)?;

    let mut observer = Terminal::new(args.quiet);
    if !args.quiet {
        eprintln!("{}", plan_line(&contexts, &opts, out_tokens, &corpus));
        eprintln!("results: {}", output.path.display());
    }
    // Worded once, in the report model: the same lines end every report of this file.
    for w in ctxbench::report::config_warnings(&header_config, &header_server) {
        observer.warn(&w.message);
    }

    let mut tally = match opts.grid() {
        false => {
            bench::run(
                backend.as_ref(),
                &mut builder,
                &contexts,
                &prior,
                &settings,
                &mut writer,
                &mut observer,
                interrupt,
            )
            .await?
        }
        true => {
            bench::wave::run_grid(
                backend.as_ref(),
                &mut builder,
                &contexts,
                &levels,
                &limits,
                &prior,
                &settings,
                &mut writer,
                &mut observer,
                interrupt,
            )
            .await?
        }
    };
    tally.server_busy_ms += warm.server_busy_ms;
    if args.nonce.is_on() && !length.text_prompts {
        nonce_history.save(builder.used_first(), corpus.nonce_pool.len());
    }
    let wall_s = started.elapsed().as_secs_f64();
    let busy_s = tally.server_busy_ms / 1000.0;
    let efficiency = tally.efficiency(wall_s);
    writer.append(&Line::End(EndRecord {
        run_id: run_id.clone(),
        wall_s,
        server_busy_s: busy_s,
        efficiency: efficiency.as_ref().ok().copied(),
        recorded: tally.recorded,
        failed: tally.failed,
        interrupted: tally.interrupted,
    }))?;

    // The summary is built from the results file alone, through the same report model as
    // `ctxbench report`: the same table, details and warnings, worded once. It is built
    // first and written once: a closed stdout (`| head`) must not cost the report files
    // written below.
    let loaded = crate::cmd::report::load(std::slice::from_ref(&output.path))?;
    let report = ctxbench::report::build(&loaded);
    let results = &loaded[0].2;
    let summary = summary_text(
        &report,
        &corpus_spec.label(),
        &output.path,
        wall_s,
        busy_s,
        &efficiency,
    )?;
    let _ = std::io::stdout().lock().write_all(summary.as_bytes());
    for w in report.runs.iter().flat_map(|r| &r.warnings) {
        eprintln!("WARNING: {w}");
    }
    // The report beside the results file (md, html, plots) and the fits on the terminal.
    if let Err(e) = crate::cmd::report::after_sweep(&report, &output.path) {
        eprintln!("warning: could not write the report: {e:#}");
    }
    let resume_hint = format!(
        "resume with: ctxbench sweep --url {} --out {} --resume (plus the same options)",
        probe.url,
        output.path.display()
    );
    Ok(ending(&tally, &results.samples, &contexts, &resume_hint))
}

/// The warmup request (never measured, never sharing a prefix with a measured one), and
/// what it teaches about the server: tokens it adds (BOS, a chat template), whether it
/// reports cached tokens (in usage or in /metrics deltas) and timings. Recorded in `probe`.
async fn warm_up(
    backend: &dyn Backend,
    builder: &mut PromptBuilder<'_>,
    settings: &BenchSettings,
    probe: &mut ServerProfile,
    metrics: Option<&Scraper>,
    server_adds_bos: bool,
    quiet: bool,
) -> Result<bench::Warmup> {
    let mut warm = bench::warmup(backend, builder, settings)
        .await
        .context("warmup request")?;
    if !server_adds_bos {
        warm.server_added = 0;
    }
    let chat = probe.endpoint.as_deref() == Some(ctxbench::client::openai::CHAT);
    let template_note = match (chat, server_adds_bos) {
        (true, false) => Some("chat template: its tokens are inside every length (calibration aims usage.prompt_tokens, template included, at the target)".to_owned()),
        (true, true) => Some(format!(
            "chat template: {} tokens around the user message (usage.prompt_tokens − content tokens of the warmup), counted in every context length",
            warm.server_added
        )),
        (false, _) => None,
    };
    if let Some(note) = template_note {
        if !quiet {
            eprintln!("note: {note}");
        }
        probe.notes.push(note);
    } else if warm.server_added > 1 {
        bail!(
            "the server counted {} prompt tokens for {} token ids sent; it rewrites token-id prompts (a template?), so lengths cannot be exact",
            warm.reported.unwrap_or(0),
            warm.sent
        );
    }
    builder.set_server_added(warm.server_added);
    probe.server_added_tokens = Some(warm.server_added);
    probe.reports_cached_tokens = Some(warm.reports_cached_tokens);
    if !warm.reports_cached_tokens {
        // A default `vllm serve` (or SGLang behind the OpenAI protocol) leaves the count out
        // of usage but counts prefix-cache hits in /metrics: each sample's deltas verify it.
        if let Some(m) = metrics {
            if let Ok(snap) = m.scrape().await {
                let d = ctxbench::metrics::deltas(&Default::default(), &snap);
                if ctxbench::sample::metrics_cache_evidence(&d).is_some() {
                    probe.reports_cached_tokens = Some(true);
                    let n = format!(
                        "cached tokens: from each sample's {} prefix-cache counter deltas (usage carries no count)",
                        probe::redact_url(&m.url())
                    );
                    if !quiet {
                        eprintln!("note: {n}");
                    }
                    probe.notes.push(n);
                }
            }
        }
    }
    probe.reports_timings = Some(warm.reports_timings);
    for n in backend.notes() {
        if !quiet {
            eprintln!("note: {n}");
        }
        probe.notes.push(n);
    }
    Ok(warm)
}

/// The plan line printed before measuring: points, concurrency levels, repetitions, output
/// length and corpus.
fn plan_line(contexts: &[u64], opts: &SweepOptions, out_tokens: u32, corpus: &Corpus) -> String {
    format!(
        "plan: {} context(s) [{}]{} × {}, {}, corpus: {}{}",
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
        output_label(opts.two_point, out_tokens),
        opts.corpus.label(),
        if corpus.wraps { " (wraps around)" } else { "" },
    )
}

/// What the user chose: the run's identity for `--resume` and `compare`. What the server
/// answered (the flush's freed tokens, capabilities) goes to the header's `server`.
fn run_config(
    args: &SweepArgs,
    opts: &SweepOptions,
    probe: &ServerProfile,
    contexts: &[u64],
    settings: &BenchSettings,
    metrics: Option<&Scraper>,
) -> RunConfig {
    RunConfig {
        backend_requested: args.backend.as_str().to_owned(),
        backend: probe.backend.as_str().to_owned(),
        url: probe.url.clone(),
        model: probe.model.clone(),
        contexts: contexts.to_vec(),
        output_tokens: settings.output_tokens,
        reps: settings.policy,
        corpus: opts.corpus.clone(),
        seed: args.seed,
        cache_bypass: settings.cache_bypass,
        nonce: args.nonce.is_on(),
        nonce_tokens: if args.nonce.is_on() {
            NONCE_TOKENS as u32
        } else {
            0
        },
        length_tolerance: args.length_tolerance,
        length_tolerance_pct: settings.length_tolerance_pct,
        method: match args.method {
            Method::Stream => record::Method::Stream,
            Method::TwoPoint => record::Method::TwoPoint,
        },
        two_point_tokens: settings.two_point,
        decode_samples: args.decode_samples,
        flush: Some(match args.flush {
            FlushMode::Auto => FlushChoice::Auto,
            FlushMode::Always => FlushChoice::Always,
            FlushMode::Never => FlushChoice::Never,
        }),
        metrics_url: metrics.map(|m| probe::redact_url(&m.url())),
        server_cmd: args.managed_cmd.clone(),
        prompt_seed: args.prompt_seed,
        needle_depths: opts.needle_depths.clone(),
        concurrency: opts.concurrency.clone(),
    }
}

/// The points to measure: the user's list checked against the server's limit, or the
/// default ladder up to that limit.
fn resolve_contexts(
    given: Option<Vec<u64>>,
    probe: &ServerProfile,
    output_tokens: u64,
) -> Result<Vec<u64>> {
    Ok(match (given, probe.max_context) {
        (Some(c), Some(limit)) => {
            plan::check_limit(&c, output_tokens, limit, probe.max_context_source.as_deref().unwrap_or("server"))?;
            c
        }
        // Warned about once the run can go ahead (after connecting and the warmup).
        (Some(c), None) => c,
        (None, Some(limit)) => {
            let l = plan::default_ladder(limit, output_tokens);
            if l.is_empty() {
                return Err(UsageError::Invalid(format!("the server's context ({limit} tokens) is too small for a sweep")).into());
            }
            l
        }
        (None, None) => {
            return Err(UsageError::Invalid(
                "the server does not report its maximum context, so no default ladder can be built: give --contexts".into(),
            )
            .into())
        }
    })
}

/// The corpus, tokenized once, with a nonce pool wide enough that no two prompts of this
/// or an earlier run share their first token.
async fn prepare_corpus(
    spec: &ctxbench::corpus::CorpusSpec,
    backend: &dyn Backend,
    contexts: &[u64],
    n_vocab: Option<u64>,
    seed: u64,
    text_prompts: bool,
) -> Result<Corpus> {
    let needed = contexts.last().copied().unwrap_or(0) as usize;
    let mut corpus = Corpus::load(spec, backend, needed, n_vocab, seed)
        .await
        .context("preparing the corpus")?;
    if !text_prompts {
        // Token-id prompts can start with any ordinary id: a vocabulary-wide nonce pool
        // makes a first-token match with an earlier run's cached prompt unlikely.
        match n_vocab {
            Some(v) => corpus.widen_nonce_pool(v),
            // SGLang and vLLM do not report it: learn a few thousand valid ids from the
            // server's tokenizer instead (a small pool made first tokens collide).
            None => {
                let ids = ctxbench::corpus::learn_ids(backend)
                    .await
                    .context("learning token ids for the nonce")?;
                corpus.add_nonce_ids(&ids);
            }
        }
    }
    Ok(corpus)
}

/// The end-of-sweep summary: the report's table and details, then the sweep's own lines.
fn summary_text(
    report: &ctxbench::report::Report,
    corpus_label: &str,
    path: &Path,
    wall_s: f64,
    busy_s: f64,
    efficiency: &std::result::Result<f64, String>,
) -> Result<String> {
    let mut summary = String::new();
    if let Some(run) = report.runs.first() {
        writeln!(summary, "\n{}", render::summary_table(&run.points))?;
        write!(summary, "{}", render::table::details(run))?;
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

/// The results file, opened early so an unwritable path fails before any request.
struct Output {
    path: PathBuf,
    run_id: String,
    resume: Option<record::Results>,
    fresh: Option<std::fs::File>,
}

impl Output {
    fn open(path: &Path, resume: bool) -> Result<Output> {
        if !resume && path.exists() {
            return Err(UsageError::Invalid(format!(
                "results file {} exists: use --resume to continue it, or another --out",
                path.display()
            ))
            .into());
        }
        if resume && !path.exists() {
            // A script that always passes --resume works from its first run.
            eprintln!(
                "note: --resume: {} does not exist; nothing to resume, starting a new run",
                path.display()
            );
        }
        if resume && path.exists() {
            let results = record::read_results(path, true)?;
            if results.torn_bytes > 0 {
                eprintln!(
                    "note: {} ended with a torn line ({} bytes, the writer was killed mid-line); it was discarded",
                    path.display(),
                    results.torn_bytes
                );
            }
            return Ok(Output {
                path: path.to_owned(),
                run_id: results.header.run_id.clone(),
                resume: Some(results),
                fresh: None,
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| RecordError::Io {
                path: dir.display().to_string(),
                cause: e,
            })?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| {
                let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
                    " (use --resume to continue it, or another --out)"
                } else {
                    ""
                };
                anyhow::Error::new(RecordError::Io {
                    path: path.display().to_string(),
                    cause: e,
                })
                .context(format!("cannot create the results file{hint}"))
            })?;
        Ok(Output {
            path: path.to_owned(),
            run_id: new_run_id(),
            resume: None,
            fresh: Some(file),
        })
    }

    /// Writes the header (new run) or checks it (resume); returns the writer and the
    /// (context, rep) pairs already measured.
    fn start(&mut self, header: RunHeader) -> Result<(ResultsWriter, Vec<record::Sample>)> {
        match &self.resume {
            Some(r) => {
                let diff = record::config_diff(
                    &record::identity(&r.header.config),
                    &record::identity(&header.config),
                );
                if !diff.is_empty() {
                    return Err(RecordError::ConfigMismatch {
                        path: self.path.display().to_string(),
                        diff: diff.join("\n"),
                    }
                    .into());
                }
                let prior = r.samples.clone();
                let mut w = ResultsWriter::append_to(&self.path)?;
                w.append(&Line::Resume(ResumeRecord {
                    run_id: self.run_id.clone(),
                    at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                }))?;
                Ok((w, prior))
            }
            None => {
                self.fresh = None;
                std::fs::remove_file(&self.path).ok();
                let w = ResultsWriter::create(&self.path, &header)?;
                Ok((w, Vec::new()))
            }
        }
    }

    /// Removes a results file this invocation created but never wrote to.
    fn discard_if_empty(&mut self) {
        if self.fresh.take().is_some() {
            let empty = std::fs::metadata(&self.path)
                .map(|m| m.len() == 0)
                .unwrap_or(false);
            if empty {
                std::fs::remove_file(&self.path).ok();
            }
        }
    }
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
                    ctxbench::sample::DISAGREE_MARGIN * 100.0
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
fn output_label(two_point: Option<(u32, u32)>, output_tokens: u32) -> String {
    match two_point {
        Some((a, b)) => format!("{a} and {b} output tokens (two-point)"),
        None => format!("{output_tokens} output tokens"),
    }
}

/// The API key from the variable `--api-key-env` names. A variable the user named
/// explicitly must hold a key: unset or empty is refused before any request (an unset
/// default just means no key).
fn api_key(name: &str) -> Result<Option<String>, UsageError> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty());
    if value.is_none() && name != DEFAULT_API_KEY_ENV {
        return Err(UsageError::Invalid(format!(
            "--api-key-env {name}: the environment variable {name} is unset or empty; export the key in it, or drop --api-key-env to use {DEFAULT_API_KEY_ENV}"
        )));
    }
    Ok(value)
}

/// The variable the API key is read from when `--api-key-env` is not given.
const DEFAULT_API_KEY_ENV: &str = "CTXBENCH_API_KEY";

fn default_out() -> PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = now
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    PathBuf::from(format!("ctxbench-{}-{}.jsonl", &stamp[..8], &stamp[8..]))
}

fn new_run_id() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    (0..12)
        .map(|_| char::from_digit(rng.random_range(0..36), 36).unwrap_or('0'))
        .collect()
}

/// Tries one flush up front and decides whether to flush before every sample; the
/// profile records what happened, so the header says what the terminal said.
async fn decide_flush(
    mode: FlushMode,
    wait: std::time::Duration,
    backend: &dyn Backend,
    probe: &mut ServerProfile,
    quiet: bool,
) -> Result<Option<String>> {
    if mode == FlushMode::Never {
        if !quiet {
            eprintln!(
                "flush: never (--flush never){}",
                probe
                    .flush
                    .as_deref()
                    .map_or(String::new(), |f| format!("; this server's would be: {f}"))
            );
        }
        return Ok(None);
    }
    match bench::flush_when_idle(backend, wait).await {
        Ok(what) => {
            if !quiet {
                eprintln!("flush: {what} before every sample");
            }
            Ok(Some(what))
        }
        // Busy is temporary: flushing stays on (auto and always), each sample waits for
        // the server to go idle again, and a sample whose flush was still refused says so.
        Err(e @ ClientError::Busy { .. }) => {
            let note = format!(
                "the server stayed busy for {} s ({e}); flushing stays on and each sample waits for it to go idle (another client is using this server: timings may include its load)",
                wait.as_secs_f64()
            );
            eprintln!("warning: {note}");
            probe.notes.push(note);
            Ok(Some(format!("{} (busy at start)", backend.kind().as_str())))
        }
        Err(e) if mode == FlushMode::Auto => {
            let relying = if probe.cache_bypass {
                "the nonce, the per-request cache switch and cached-token verification"
            } else {
                "the nonce and cached-token verification"
            };
            let note = format!("no cache flush: {e}; relying on {relying}");
            eprintln!("note: {note}");
            probe.flush = None;
            probe.notes.push(note);
            Ok(None)
        }
        Err(e) => Err(UsageError::Invalid(format!(
            "--flush always, but the server's cache cannot be flushed: {e}; use --flush auto or never"
        ))
        .into()),
    }
}

/// The Prometheus scraper: `--metrics-url`, else the server's `/metrics` when it answered.
fn metrics_scraper(
    args: &SweepArgs,
    http: &Http,
    probe: &ServerProfile,
) -> Result<Option<Scraper>> {
    match args.metrics_url.as_deref() {
        Some("off") => Ok(None),
        Some(u) if u.starts_with('/') => Ok(Some(Scraper::new(http.clone(), u))),
        Some(u) => {
            // The API key goes only to the server it belongs to.
            let api_key = std::env::var(&args.api_key_env)
                .ok()
                .filter(|_| u.starts_with(http.base()));
            let h = Http::new(u, api_key, None).map_err(UsageError::Invalid)?;
            Ok(Some(Scraper::new(h, "")))
        }
        None if probe.metrics => Ok(Some(Scraper::new(http.clone(), "/metrics"))),
        None => Ok(None),
    }
}

/// `--tokenizer-url`: the OpenAI protocol makes its prompts through that server's
/// tokenizer; a usage error for other protocols or where no tokenizer answers there.
async fn adopt_tokenizer(p: &mut ServerProfile, url: &str) -> Result<(), ProbeError> {
    if p.backend != ctxbench::client::BackendKind::Openai {
        return Err(UsageError::Invalid(format!(
            "--tokenizer-url is for OpenAI-compatible servers that hide their tokenizer; this server was probed as {} ({}), whose own tokenizer is used",
            p.server_kind,
            p.backend.as_str()
        ))
        .into());
    }
    let h = Http::new(url, None, None).map_err(UsageError::Invalid)?;
    ctxbench::client::openai::adopt_tokenizer(p, &h)
        .await
        .map_err(|e| UsageError::Invalid(e.to_string()).into())
}

fn print_probe(p: &ServerProfile) {
    let yn = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    eprintln!(
        "server: {} {} at {}\nbackend: {} ({})\nmax context: {}\nmodel: {}\ncapabilities: tokenize {}, token-id prompts {}, per-request cache bypass {}, /metrics {}{}",
        p.server_kind,
        p.server_version.as_deref().unwrap_or(""),
        p.url,
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
        match (&p.token_id_test, p.token_id_prompts) {
            (Some(t), used) => format!("{} ({t})", yn(Some(used))),
            (None, used) => yn(Some(used)).to_owned(),
        },
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

/// The first tokens of the prompts earlier runs sent to one server (URL and model), kept
/// in `$XDG_STATE_HOME/ctxbench/nonce/` (else `~/.local/state/…`), oldest first, so that a
/// later run's nonces do not start like a prompt the server may still have cached. Best
/// effort: an unreadable or unwritable file only loses the history (verification remains).
struct NonceHistory {
    path: Option<PathBuf>,
}

impl NonceHistory {
    fn open(url: &str, model: Option<&str>) -> NonceHistory {
        let dir = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")));
        let key: String = format!("{url}-{}", model.unwrap_or(""))
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        NonceHistory {
            path: dir.map(|d| d.join("ctxbench/nonce").join(format!("{key}.txt"))),
        }
    }

    fn load(&self) -> Vec<u32> {
        let Some(p) = &self.path else {
            return Vec::new();
        };
        std::fs::read_to_string(p)
            .map(|t| {
                t.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Appends this run's first tokens, keeping at most `cap` (the nonce pool's size).
    fn save(&self, used: impl Iterator<Item = u32>, cap: usize) {
        let Some(p) = &self.path else { return };
        let mut all = self.load();
        let known: std::collections::HashSet<u32> = all.iter().copied().collect();
        all.extend(used.filter(|t| !known.contains(t)));
        let start = all.len().saturating_sub(cap);
        let text: Vec<String> = all[start..].iter().map(u32::to_string).collect();
        let _ = p
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| std::fs::write(p, text.join("\n") + "\n"));
    }
}

#[cfg(test)]
mod two_point_tests {
    use super::{api_key, output_label};

    #[test]
    fn the_plan_names_both_two_point_lengths() {
        assert_eq!(
            output_label(Some((1, 17)), 32),
            "1 and 17 output tokens (two-point)"
        );
        assert_eq!(output_label(None, 32), "32 output tokens");
    }

    #[test]
    fn a_named_api_key_variable_that_is_unset_or_empty_is_refused() {
        let unset = "CTXBENCH_TEST_SURELY_UNSET_VARIABLE";
        let e = api_key(unset).unwrap_err().to_string();
        assert!(e.contains(unset) && e.contains("unset or empty"), "{e}");
        // PATH is set in any test environment; the default variable may be unset.
        assert!(api_key("PATH").unwrap().is_some());
        if std::env::var_os(super::DEFAULT_API_KEY_ENV).is_none() {
            assert_eq!(api_key(super::DEFAULT_API_KEY_ENV).unwrap(), None);
        }
    }
}
