//! `ctxbench sweep`: config → probe → plan → bench → record → stats → render.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use ctxbench::adaptive::RepPolicy;
use ctxbench::bench::{self, BenchSettings, Observer};
use ctxbench::cli::{FlushMode, Method, SweepArgs};
use ctxbench::client::llamacpp::LlamaCpp;
use ctxbench::client::ollama::Ollama;
use ctxbench::client::openai::OpenAi;
use ctxbench::client::sglang::Sglang;
use ctxbench::client::tgi::Tgi;
use ctxbench::client::vllm::Vllm;
use ctxbench::client::{Backend, BackendKind, Http};
use ctxbench::corpus::{Corpus, CorpusSpec};
use ctxbench::error::{RecordError, UsageError};
use ctxbench::metrics::Scraper;
use ctxbench::plan;
use ctxbench::probe::{self, Probe};
use ctxbench::prompt::{PromptBuilder, NONCE_TOKENS};
use ctxbench::record::{self, Host, ResultsWriter, RunHeader, SCHEMA_VERSION};
use ctxbench::render;
use ctxbench::stats;

use crate::cmd::progress::Terminal;
use crate::cmd::Ending;

/// Runs a sweep; the interrupt receiver turns true on Ctrl-C.
pub async fn run(
    args: SweepArgs,
    mut interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    let contexts_arg = args
        .contexts
        .as_deref()
        .map(plan::parse_contexts)
        .transpose()?;
    let corpus_spec = CorpusSpec::parse(&args.corpus).map_err(UsageError::Invalid)?;
    if args.method == Method::TwoPoint {
        parse_two_point(&args.two_point_tokens)?;
    }
    for (name, v) in [
        ("--timeout", args.timeout),
        ("--timeout-per-1k", args.timeout_per_1k),
        ("--stall-timeout", args.stall_timeout),
        ("--wait-ready", args.wait_ready),
    ] {
        if !v.is_finite()
            || v < 0.0
            || (name != "--timeout-per-1k" && name != "--wait-ready" && v == 0.0)
        {
            return Err(UsageError::Invalid(format!(
                "{name} {v}: must be a positive number of seconds"
            ))
            .into());
        }
    }
    let api_key = api_key(&args.api_key_env)?;
    let ca = args
        .ca_cert
        .as_ref()
        .map(|p| std::fs::read(p).with_context(|| format!("reading --ca-cert {}", p.display())))
        .transpose()?;
    let http = Http::new(&args.url, api_key, ca.as_deref()).map_err(UsageError::Invalid)?;

    // The results file is opened before any request, so an unwritable path costs nothing.
    let out_path = args.out.clone().unwrap_or_else(default_out);
    let mut output = if args.dry_run {
        None
    } else {
        Some(Output::open(&out_path, args.resume)?)
    };
    let started = std::time::Instant::now();

    let probe_result = probe::probe(
        &http,
        args.backend,
        args.model.as_deref(),
        Duration::from_secs_f64(args.wait_ready),
    )
    .await;
    let mut probe = match probe_result {
        Ok(p) => p,
        Err(e) => {
            if let Some(o) = output.as_mut() {
                o.discard_if_empty();
            }
            return Err(e).context("probing the server");
        }
    };
    if !args.quiet {
        print_probe(&probe);
    }

    let result = measure(
        &args,
        &http,
        &mut probe,
        contexts_arg,
        corpus_spec,
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

#[allow(clippy::too_many_arguments)]
async fn measure(
    args: &SweepArgs,
    http: &Http,
    probe: &mut Probe,
    contexts_arg: Option<Vec<u64>>,
    corpus_spec: CorpusSpec,
    output: Option<&mut Output>,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    started: std::time::Instant,
) -> Result<Ending> {
    let two_point = match args.method {
        Method::Stream => None,
        Method::TwoPoint => Some(parse_two_point(&args.two_point_tokens)?),
    };
    // The longest generation a point must hold.
    let output_tokens = two_point.map_or(args.output_tokens, |(_, b)| b) as u64;
    let contexts = match (contexts_arg, probe.max_context) {
        (Some(c), Some(limit)) => {
            plan::check_limit(&c, output_tokens, limit, probe.max_context_source.as_deref().unwrap_or("server"))?;
            c
        }
        (Some(c), None) => {
            eprintln!("warning: the server does not report its maximum context; points beyond it will fail when sent");
            c
        }
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
    };
    if !probe.token_id_prompts && !matches!(probe.backend, BackendKind::Tgi | BackendKind::Ollama) {
        bail!(
            "{} does not accept token-id prompts or has no /tokenize, so ctxbench cannot build prompts of exact length",
            probe.url
        );
    }

    let backend: Box<dyn Backend> = match probe.backend {
        BackendKind::Llamacpp => {
            Box::new(LlamaCpp::new(http.clone(), probe.total_slots.unwrap_or(1)))
        }
        BackendKind::Sglang => Box::new(Sglang::new(http.clone(), probe.model.clone())),
        BackendKind::Vllm => Box::new(Vllm::new(http.clone(), probe.model.clone())),
        BackendKind::Tgi => Box::new(Tgi::new(http.clone())),
        BackendKind::Ollama => {
            let model = probe.model.clone().ok_or_else(|| {
                UsageError::Invalid("Ollama lists no model: pull one, or give --model".into())
            })?;
            // One context for every request: Ollama reloads the model when num_ctx changes.
            let largest = contexts.last().copied().unwrap_or(0);
            let output = u64::from(args.output_tokens.max(17));
            Box::new(Ollama::new(http.clone(), model, largest + output + 64))
        }
        _ => {
            let o = OpenAi::new(
                http.clone(),
                probe.model.clone(),
                probe.tokenize,
                probe
                    .cache_bypass
                    .then(|| ("cache_prompt".to_owned(), json!(false))),
            );
            Box::new(if probe.cached_missing_means_zero {
                o.missing_cached_is_zero()
            } else {
                o
            })
        }
    };
    let cache_bypass = args.cache_bypass.is_on() && probe.cache_bypass;

    let needed = contexts.last().copied().unwrap_or(0) as usize;
    let mut corpus = Corpus::load(
        &corpus_spec,
        backend.as_ref(),
        needed,
        probe.n_vocab,
        args.seed,
    )
    .await
    .context("preparing the corpus")?;
    if probe.prompt_method == "token ids" {
        // Token-id prompts can start with any ordinary id: a vocabulary-wide nonce pool
        // makes a first-token match with an earlier run's cached prompt unlikely.
        if let Some(v) = probe.n_vocab {
            corpus.widen_nonce_pool(v);
        }
    }
    let policy = match args.precision {
        Some(p) if !(p.is_finite() && p > 0.0 && p < 1.0) => {
            return Err(UsageError::Invalid(format!(
                "--precision {p}: give a relative half-width between 0 and 1, e.g. 0.05 for ±5%"
            ))
            .into())
        }
        Some(p) => {
            if args.min_reps > args.max_reps {
                return Err(UsageError::Invalid(format!(
                    "--min-reps {} is larger than --max-reps {}",
                    args.min_reps, args.max_reps
                ))
                .into());
            }
            RepPolicy {
                precision: Some(p),
                min_reps: args.min_reps,
                max_reps: args.max_reps,
                point_budget_s: args.point_budget,
                run_budget_s: args.run_budget,
            }
        }
        None => RepPolicy {
            precision: None,
            min_reps: args.reps,
            max_reps: args.reps,
            point_budget_s: None,
            run_budget_s: None,
        },
    };
    let run_id = output
        .as_ref()
        .map_or_else(|| "dry-run".to_owned(), |o| o.run_id.clone());
    if two_point.is_some() && args.decode_samples > 0 {
        return Err(UsageError::Invalid(
            "--decode-samples needs --method stream (warm samples are timed per token)".into(),
        )
        .into());
    }
    // A dry run measures nothing, so it must not erase the server's cache either.
    let flush = match args.dry_run {
        true => None,
        false => decide_flush(args.flush, backend.as_ref(), args.quiet).await?,
    };
    let metrics = metrics_scraper(args, http, probe)?;
    let settings = BenchSettings {
        run_id: run_id.clone(),
        output_tokens: args.output_tokens,
        policy,
        cache_bypass,
        length_tolerance: args.length_tolerance,
        length_tolerance_pct: if probe.backend == BackendKind::Ollama {
            0.01
        } else {
            0.0
        },
        timeout_base: Duration::from_secs_f64(args.timeout),
        timeout_per_1k: Duration::from_secs_f64(args.timeout_per_1k),
        stall_timeout: Duration::from_secs_f64(args.stall_timeout),
        on_error: args.on_error,
        flush: flush.is_some(),
        metrics: metrics.clone(),
        two_point,
        decode_samples: args.decode_samples,
    };
    let mut builder = PromptBuilder::new(&corpus, args.nonce.is_on());
    let mut warm = bench::warmup(backend.as_ref(), &mut builder, &settings)
        .await
        .context("warmup request")?;
    if probe.backend == BackendKind::Ollama {
        // Calibration aims at the server's own count, BOS included.
        warm.server_added = 0;
    }
    if warm.server_added > 1 {
        bail!(
            "the server counted {} prompt tokens for {} token ids sent; it rewrites token-id prompts (a template?), so lengths cannot be exact",
            warm.reported.unwrap_or(0),
            warm.sent
        );
    }
    builder.set_server_added(warm.server_added);
    probe.server_added_tokens = Some(warm.server_added);
    probe.reports_cached_tokens = Some(warm.reports_cached_tokens);
    probe.reports_timings = Some(warm.reports_timings);

    if args.dry_run {
        return crate::cmd::dryrun::run(
            backend.as_ref(),
            &mut builder,
            &contexts,
            &settings,
            &corpus_spec,
            &corpus,
        )
        .await;
    }
    let Some(output) = output else {
        bail!("internal: no results file outside --dry-run");
    };

    let config = json!({
        "backend_requested": args.backend,
        "backend": probe.backend,
        "url": probe.url,
        "model": probe.model,
        "contexts": contexts,
        "output_tokens": args.output_tokens,
        "reps": policy,
        "corpus": corpus_spec,
        "seed": args.seed,
        "cache_bypass": cache_bypass,
        "nonce": args.nonce.is_on(),
        "nonce_tokens": if args.nonce.is_on() { NONCE_TOKENS } else { 0 },
        "length_tolerance": args.length_tolerance,
        "length_tolerance_pct": settings.length_tolerance_pct,
        "method": args.method,
        "two_point_tokens": two_point,
        "decode_samples": args.decode_samples,
        "flush": flush,
        "metrics_url": metrics.as_ref().map(|m| probe::redact_url(&m.url())),
    });
    let header = RunHeader {
        kind: "run".into(),
        schema: SCHEMA_VERSION,
        run_id: output.run_id.clone(),
        ctxbench_version: env!("CARGO_PKG_VERSION").into(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        host: Host::current(),
        config,
        server: serde_json::to_value(&*probe)?,
        corpus: json!({
            "spec": corpus_spec,
            "label": corpus_spec.label(),
            "tokens": corpus.tokens.len(),
            "wraps": corpus.wraps,
            "tokenize_requests": corpus.tokenize_requests,
        }),
        label: args.label.clone(),
    };
    let (mut writer, prior) = output.start(header)?;

    let mut observer = Terminal::new(args.quiet);
    if !args.quiet {
        eprintln!(
            "plan: {} context(s) [{}] × {}, {}, corpus: {}{}",
            contexts.len(),
            contexts
                .iter()
                .map(|&c| render::fmt_ctx(c))
                .collect::<Vec<_>>()
                .join(", "),
            reps_label(&policy),
            output_label(two_point, args.output_tokens),
            corpus_spec.label(),
            if corpus.wraps { " (wraps around)" } else { "" },
        );
        eprintln!("results: {}", output.path.display());
    }
    if !cache_bypass {
        observer.warn(if probe.cache_bypass {
            "--cache-bypass off: the server may reuse cached prompts; such samples are flagged and excluded"
        } else {
            "this API has no per-request cache switch; relying on the nonce and on verification"
        });
    }
    if !args.nonce.is_on() {
        observer.warn("--nonce off: repetitions send identical prompts, so the server may answer from its prefix cache (the trap this flag demonstrates)");
    }
    if !warm.reports_cached_tokens {
        let hint = match probe.backend {
            BackendKind::Vllm => " (start vLLM with --enable-prompt-tokens-details)",
            BackendKind::Sglang => " (start SGLang with --enable-cache-report)",
            _ => "",
        };
        observer.warn(&format!("the server does not report cached-token counts: cold prefill cannot be proven for this run (samples are marked cache_unverified){hint}"));
    }

    let mut tally = bench::run(
        backend.as_ref(),
        &mut builder,
        &contexts,
        &prior,
        &settings,
        &mut writer,
        &mut observer,
        interrupt,
    )
    .await?;
    tally.server_busy_ms += warm.server_busy_ms;
    let wall_s = started.elapsed().as_secs_f64();
    let busy_s = tally.server_busy_ms / 1000.0;
    let efficiency = tally.efficiency(wall_s);
    writer.append(&json!({
        "type": "end",
        "run_id": run_id,
        "wall_s": wall_s,
        "server_busy_s": busy_s,
        "efficiency": efficiency.as_ref().ok(),
        "recorded": tally.recorded,
        "failed": tally.failed,
        "interrupted": tally.interrupted,
    }))?;

    // The summary is built from the results file alone, like any later report.
    let results = record::read_results(&output.path, false)?;
    let points = stats::summarize(&results.samples);
    // Built first and written once: a closed stdout (`| head`) must not cost the report
    // files written below.
    let mut summary = String::new();
    writeln!(summary, "\n{}", render::summary_table(&points))?;
    if let Some(t) = render::warm_table(&points) {
        writeln!(
            summary,
            "decode at depth (warm: prefix reused on purpose, not in the table above):\n{t}"
        )?;
    }
    if let Some(t) = render::spec_table(&points) {
        writeln!(summary, "speculative decoding (medians per point):\n{t}")?;
    }
    writeln!(
        summary,
        "TTFT and decode are client-side medians (min–max) over usable samples; server columns are the server's own timings.\ncorpus: {}; results: {}",
        corpus_spec.label(),
        output.path.display()
    )?;
    match efficiency {
        Ok(e) => writeln!(
            summary,
            "sweep efficiency: {wall_s:.1} s wall / {busy_s:.1} s server busy (prompt + generation) = {e:.2}× (1.00 = no time lost outside the server)"
        )?,
        Err(why) => writeln!(summary, "sweep efficiency: not computed: {why}")?,
    }
    if let Some(line) = client_vs_server(&results.samples) {
        writeln!(summary, "{line}")?;
    }
    let _ = std::io::stdout().lock().write_all(summary.as_bytes());
    let inverted = results
        .samples
        .iter()
        .filter(|s| s.flags.iter().any(|f| f == "two_point_inverted"))
        .count();
    if inverted > 0 {
        eprintln!("WARNING: {inverted} two-point sample(s) had t_B ≤ t_A; no decode rate was computed for them (reason in each sample's two_point.reason)");
    }
    let total_contaminated: usize = points.iter().map(|p| p.contaminated).sum();
    let total_mismatch: usize = points.iter().map(|p| p.length_mismatch).sum();
    if total_contaminated > 0 {
        eprintln!(
            "WARNING: {total_contaminated} sample(s) hit the prefix cache (cached_tokens > 0). They are NOT cold prefills and were excluded from the table."
        );
    }
    if total_mismatch > 0 {
        eprintln!(
            "WARNING: {total_mismatch} sample(s) had a server-reported prompt length different from the target; excluded."
        );
    }
    // The report beside the results file (md, html, plots) and the fits on the terminal.
    if let Err(e) = crate::cmd::report::after_sweep(&output.path) {
        eprintln!("warning: could not write the report: {e:#}");
    }
    let resume_hint = format!(
        "resume with: ctxbench sweep --url {} --out {} --resume (plus the same options)",
        probe.url,
        output.path.display()
    );
    if tally.interrupted {
        eprintln!(
            "interrupted: {} sample(s) recorded this session are kept.\n{resume_hint}",
            tally.recorded
        );
        return Ok(Ending::Interrupted);
    }
    if let Some(reason) = &tally.stopped {
        eprintln!("the sweep stopped early: {reason}\n{resume_hint}");
        return Ok(Ending::Incomplete);
    }
    if tally.failed > 0 {
        eprintln!("{} sample(s) failed; {resume_hint}", tally.failed);
        return Ok(Ending::Incomplete);
    }
    Ok(Ending::Complete)
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
                let diff = record::config_diff(&r.header.config, &header.config);
                if !diff.is_empty() {
                    return Err(RecordError::ConfigMismatch {
                        path: self.path.display().to_string(),
                        diff: diff.join("\n"),
                    }
                    .into());
                }
                let prior = r.samples.clone();
                let mut w = ResultsWriter::append_to(&self.path)?;
                w.append(&json!({
                    "type": "resume",
                    "run_id": self.run_id,
                    "at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
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

/// "client vs server": median TTFT − server prompt_ms, and median client/server decode rate,
/// over usable samples that carry server timings.
pub fn client_vs_server(samples: &[record::Sample]) -> Option<String> {
    let usable = samples.iter().filter(|s| s.usable());
    let overhead = stats::Spread::of(
        usable
            .clone()
            .filter_map(|s| Some(s.ttft_ms? - s.server.as_ref()?.prompt_ms?)),
    )?;
    let ratio = stats::Spread::of(usable.filter_map(|s| {
        let server = s.server.as_ref()?.predicted_per_second?;
        let client = s.decode_tokens_per_s?;
        (server > 0.0).then(|| client / server)
    }));
    Some(format!(
        "client vs server: median TTFT − server prompt_ms = {:.2} ms; median decode rate client/server = {}",
        overhead.median,
        ratio.map_or("n/a".to_owned(), |r| format!("{:.3}", r.median))
    ))
}

/// What each request generates: two-point sends A and B tokens, not --output-tokens.
fn output_label(two_point: Option<(u32, u32)>, output_tokens: u32) -> String {
    match two_point {
        Some((a, b)) => format!("{a} and {b} output tokens (two-point)"),
        None => format!("{output_tokens} output tokens"),
    }
}

fn reps_label(p: &RepPolicy) -> String {
    match p.precision {
        None => format!("{} rep(s)", p.max_reps),
        Some(pr) => format!(
            "{}–{} reps until the median's 95% CI is within ±{:.1}%",
            p.min_reps,
            p.max_reps,
            pr * 100.0
        ),
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

/// Parses `A,B` for the two-point method.
fn parse_two_point(s: &str) -> Result<(u32, u32), UsageError> {
    let bad = || {
        UsageError::Invalid(format!(
            "--two-point-tokens '{s}': give two token counts A,B with 1 ≤ A < B, e.g. 1,17"
        ))
    };
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let a: u32 = a.trim().parse().map_err(|_| bad())?;
    let b: u32 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || b <= a {
        return Err(bad());
    }
    Ok((a, b))
}

/// Tries one flush up front and decides whether to flush before every sample.
async fn decide_flush(
    mode: FlushMode,
    backend: &dyn Backend,
    quiet: bool,
) -> Result<Option<String>> {
    if mode == FlushMode::Never {
        return Ok(None);
    }
    match backend.flush().await {
        Ok(what) => {
            if !quiet {
                eprintln!("flush: {what} before every sample");
            }
            Ok(Some(what))
        }
        Err(e) if mode == FlushMode::Auto => {
            eprintln!("note: no cache flush: {e}; relying on the nonce, the per-request cache switch and cached-token verification");
            Ok(None)
        }
        Err(e) => {
            Err(anyhow::Error::new(e)
                .context("--flush always: the server's cache cannot be flushed"))
        }
    }
}

/// The Prometheus scraper: `--metrics-url`, else the server's `/metrics` when it answered.
fn metrics_scraper(args: &SweepArgs, http: &Http, probe: &Probe) -> Result<Option<Scraper>> {
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

fn print_probe(p: &Probe) {
    let yn = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    };
    eprintln!(
        "server: {} {} at {}\nbackend: {} ({})\nmax context: {}\nmodel: {}\ncapabilities: tokenize {}, token-id prompts {}, per-request cache bypass {}, /metrics {}",
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
        yn(Some(p.tokenize.is_some())),
        yn(Some(p.token_id_prompts)),
        yn(Some(p.cache_bypass)),
        yn(Some(p.metrics)),
    );
    eprintln!(
        "prompts: {}; limits: KV pool {}; flush: {}; speculative stats: {}",
        p.prompt_method,
        p.kv_pool_tokens
            .map_or("not reported".to_owned(), |n| format!("{n} tokens")),
        p.flush.as_deref().unwrap_or("not available"),
        p.spec_stats.as_deref().unwrap_or("not exposed"),
    );
    for n in &p.notes {
        eprintln!("note: {n}");
    }
}

#[cfg(test)]
mod two_point_tests {
    use super::{api_key, output_label, parse_two_point};

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

    #[test]
    fn two_point_tokens_parse_and_reject_nonsense() {
        assert_eq!(parse_two_point("1,17").unwrap(), (1, 17));
        assert_eq!(parse_two_point(" 4 , 64 ").unwrap(), (4, 64));
        for bad in ["17,1", "0,5", "5,5", "1", "a,b", "1,2,3"] {
            assert!(parse_two_point(bad).is_err(), "{bad}");
        }
    }
}
