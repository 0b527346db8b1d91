//! Every `sweep` option checked in one place, before anything is sent: the command line
//! becomes a [`SweepPlan`] that holds every value the session needs, and exists only for a
//! command line that makes sense (ranges, conflicts, parsable values, a readable key and
//! certificate), so nothing is probed or tokenized for one that does not.

use std::time::Duration;

use crate::cmd::cli::{FlushMode, Method, SweepArgs};
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record::FlushChoice;
use ctxbench_session::adaptive::RepPolicy;
use ctxbench_session::corpus::CorpusSpec;
use ctxbench_session::plan;
use ctxbench_session::session::SweepPlan;

/// The two-point method's default request lengths.
const TWO_POINT_DEFAULT: (u32, u32) = (1, 17);

/// The validated plan of `args`. With `--server-cmd` the URL is left empty: the campaign
/// sets each started server's.
pub fn plan(args: &SweepArgs) -> Result<SweepPlan, UsageError> {
    let o = SweepOptions::from_args(args)?;
    let api_key = api_key(&args.api_key_env)?;
    let ca_cert = args
        .ca_cert
        .as_ref()
        .map(|p| {
            std::fs::read(p)
                .map_err(|e| UsageError::Invalid(format!("--ca-cert {}: {e}", p.display())))
        })
        .transpose()?;
    let (roofline, model_facts) = crate::cmd::report::roofline_inputs(&args.roofline, false)?;
    let out = match args.dry_run {
        true => None,
        false => Some(args.out.clone().unwrap_or_else(default_out)),
    };
    Ok(SweepPlan {
        url: args.url.clone().unwrap_or_default(),
        metrics_api_key: api_key.clone(),
        api_key_env: args.api_key_env.clone(),
        api_key,
        ca_cert,
        backend: args.backend,
        backend_requested: args.backend.as_str().to_owned(),
        model: args.model.clone(),
        endpoint: args.endpoint,
        tokenizer_url: args.tokenizer_url.clone(),
        metrics_url: args.metrics_url.clone(),
        wait_ready: o.wait_ready,
        out,
        resume: args.resume,
        dry_run: args.dry_run,
        label: args.label.clone(),
        managed_cmd: args.managed_cmd.clone(),
        spec_k: None,
        quiet: args.quiet,
        price_per_hour: args.price_per_hour,
        model_facts,
        roofline,
        output_tokens: o.output_tokens(args),
        contexts: o.contexts,
        corpus: o.corpus,
        corpus_by_default: o.corpus_by_default,
        seed: args.seed,
        prompt_seed: args.prompt_seed,
        nonce: args.nonce.is_on(),
        cache_bypass: args.cache_bypass.is_on(),
        flush: match args.flush {
            FlushMode::Auto => FlushChoice::Auto,
            FlushMode::Always => FlushChoice::Always,
            FlushMode::Never => FlushChoice::Never,
        },
        flush_wait: o.flush_wait,
        idle_check: args.idle_check == crate::cmd::cli::IdleCheckMode::Auto,
        idle_wait: o.idle_wait,
        two_point: o.two_point,
        policy: o.policy,
        length_tolerance: args.length_tolerance,
        timeout: o.timeout,
        timeout_per_1k: o.timeout_per_1k,
        stall_timeout: o.stall_timeout,
        on_error: args.on_error,
        decode_samples: args.decode_samples,
        needle_depths: o.needle_depths,
        concurrency: o.concurrency,
        warm: o.warm,
        prompts: args.prompts,
        workers: args.worker.clone(),
    })
}

/// The options that need parsing or cross-checking, as parsed.
#[derive(Debug, Clone)]
struct SweepOptions {
    contexts: Option<Vec<u64>>,
    corpus: CorpusSpec,
    corpus_by_default: bool,
    two_point: Option<(u32, u32)>,
    policy: RepPolicy,
    timeout: Duration,
    timeout_per_1k: Duration,
    stall_timeout: Duration,
    flush_wait: Duration,
    idle_wait: Duration,
    wait_ready: Duration,
    needle_depths: Option<Vec<u32>>,
    concurrency: Vec<u32>,
    warm: Option<ctxbench_schema::warm::WarmConfig>,
}

impl SweepOptions {
    /// Checks the options; no request is sent and no file is written.
    fn from_args(args: &SweepArgs) -> Result<SweepOptions, UsageError> {
        let bad = |m: String| Err(UsageError::Invalid(m));
        check_url(args)?;
        let contexts = args
            .contexts
            .as_deref()
            .map(plan::parse_contexts)
            .transpose()?;
        if args.corpus.contains(',') {
            // `sweep --url` splits the list before planning; a campaign measures one corpus.
            return bad(format!(
                "--corpus {}: a list of corpora is measured by a sweep with --url (one results file per corpus); with --server-cmd run one campaign per corpus (--corpus repeat, then --corpus natural)",
                args.corpus
            ));
        }
        // `auto` left here is a server given by --url: the repeated sentence unless the
        // probe sees speculation (a --server-cmd's is resolved from its command line).
        let corpus_by_default = args.corpus == ctxbench_session::corpus::default::AUTO;
        let corpus = if corpus_by_default {
            CorpusSpec::Repeat
        } else {
            ctxbench_session::corpus::parse_spec(&args.corpus).map_err(UsageError::Invalid)?
        };
        if let CorpusSpec::Path(p) | CorpusSpec::Natural(p) = &corpus {
            // An empty or unreadable corpus is the user's to fix: said before any request.
            ctxbench_session::corpus::check_path(p)
                .map_err(|e| UsageError::Invalid(e.to_string()))?;
        }
        let two_point = match (args.method, args.two_point_tokens.as_deref()) {
            (Method::TwoPoint, Some(s)) => Some(parse_two_point(s)?),
            (Method::TwoPoint, None) => Some(TWO_POINT_DEFAULT),
            (Method::Stream, Some(s)) => {
                return bad(format!(
                    "--two-point-tokens {s} needs --method two-point (the stream method generates --output-tokens)"
                ))
            }
            (Method::Stream, None) => None,
        };
        if two_point.is_some() && args.decode_samples > 0 {
            return bad(
                "--decode-samples needs --method stream (warm samples are timed per token)".into(),
            );
        }
        let needle_depths = match args.needle {
            true => Some(
                ctxbench_session::needle::parse_depths(&args.needle_depths)
                    .map_err(UsageError::Invalid)?,
            ),
            false => None,
        };
        if needle_depths.is_some() && two_point.is_some() {
            return bad(
                "--needle needs --method stream (the answer is read from the stream)".into(),
            );
        }
        let concurrency = parse_concurrency(&args.concurrency)?;
        if let (Some(n), [1]) = (args.wave_output_tokens, concurrency.as_slice()) {
            return Err(UsageError::Invalid(format!(
                "--wave-output-tokens {n} sets the output of concurrent waves: add --concurrency with a level above 1 (e.g. 1,2,4), or use --output-tokens for one request at a time"
            )));
        }
        if concurrency != [1] && (two_point.is_some() || args.decode_samples > 0) {
            return bad(format!(
                "--concurrency {}: concurrent waves are streamed cold requests; drop --method two-point and --decode-samples, or measure them in a separate run",
                args.concurrency
            ));
        }
        let mut policy = rep_policy(args)?;
        if let Some(k) = args.prompts {
            if concurrency != [1] || two_point.is_some() {
                return bad(format!(
                    "--prompts {k}: distinct prompts are measured one request at a time with the stream method; drop --concurrency and --method two-point, or measure them in a separate run"
                ));
            }
            // Repetitions count per prompt; the loop counts samples per point, round-robin
            // over the prompts, so a point's repetition r sends prompt r mod K.
            policy.min_reps = policy.min_reps.saturating_mul(k);
            policy.max_reps = policy.max_reps.saturating_mul(k);
        }
        let warm = crate::cmd::warm_options::warm_config(args, &concurrency, two_point.is_some())?;
        if args.design.is_some() {
            design(
                &mut policy,
                &concurrency,
                two_point.is_some(),
                warm.is_some(),
            )?;
        }
        crate::cmd::precision_of::apply(args, &mut policy, &concurrency)?;
        check_metrics_url(args.metrics_url.as_deref())?;
        Ok(SweepOptions {
            contexts,
            corpus,
            corpus_by_default,
            two_point,
            policy,
            timeout: seconds("--timeout", args.timeout, false)?,
            timeout_per_1k: seconds("--timeout-per-1k", args.timeout_per_1k, true)?,
            stall_timeout: seconds("--stall-timeout", args.stall_timeout, false)?,
            flush_wait: seconds("--flush-wait", args.flush_wait, true)?,
            idle_wait: seconds("--idle-wait", args.idle_wait, true)?,
            wait_ready: seconds("--wait-ready", args.wait_ready, true)?,
            needle_depths,
            concurrency,
            warm,
        })
    }

    /// Output tokens per request: `--wave-output-tokens` in a grid, else `--output-tokens`.
    fn output_tokens(&self, args: &SweepArgs) -> u32 {
        match self.concurrency != [1] {
            true => args
                .wave_output_tokens
                .unwrap_or(ctxbench_stats::capacity::WAVE_OUTPUT_TOKENS),
            false => args.output_tokens,
        }
    }
}

/// Repetitions per point: fixed (`--reps`), or adaptive until `--precision` within the
/// repetition bounds and time budgets.
fn rep_policy(args: &SweepArgs) -> Result<RepPolicy, UsageError> {
    let bad = |m: String| Err(UsageError::Invalid(m));
    Ok(match args.precision {
        None => RepPolicy {
            precision: None,
            min_reps: args.reps,
            max_reps: args.reps,
            point_budget_s: None,
            run_budget_s: None,
            design: None,
            quantile: None,
        },
        Some(p) if !(p.is_finite() && p > 0.0 && p < 1.0) => {
            return bad(format!(
                "--precision {p}: give a relative half-width between 0 and 1, e.g. 0.05 for ±5%"
            ))
        }
        Some(_) if args.min_reps > max_reps(args) => {
            return bad(format!(
                "--min-reps {} is larger than --max-reps {}",
                args.min_reps,
                max_reps(args)
            ))
        }
        Some(p) => {
            for (name, v) in [
                ("--point-budget", args.point_budget),
                ("--run-budget", args.run_budget),
            ] {
                if let Some(v) = v {
                    seconds(name, v, false)?;
                }
            }
            RepPolicy {
                precision: Some(p),
                min_reps: args.min_reps,
                max_reps: max_reps(args),
                point_budget_s: args.point_budget,
                run_budget_s: args.run_budget,
                design: None,
                quantile: None,
            }
        }
    })
}

/// `--max-reps`, or its default for the median.
fn max_reps(args: &SweepArgs) -> u32 {
    args.max_reps
        .unwrap_or(crate::cmd::precision_of::DEFAULT_MAX_REPS)
}

/// `--url` is a base URL with its scheme and without /v1 (or `--server-cmd` gives one), and
/// `--resume` names the file it continues.
fn check_url(args: &SweepArgs) -> Result<(), UsageError> {
    let bad = |m: String| Err(UsageError::Invalid(m));
    // `--server-cmd` sets the URL of the server it starts.
    let url = args.url.as_deref().unwrap_or_default();
    let managed = args.server_cmd.is_some() && args.url.is_none();
    if !(managed || url.starts_with("http://") || url.starts_with("https://")) {
        return bad(format!(
            "--url {url}: give the server's base URL with its scheme, e.g. http://127.0.0.1:8080, or --server-cmd"
        ));
    }
    if let Some(base) = strip_v1(url) {
        return bad(format!(
            "--url {url}: give the server's base URL without /v1 (ctxbench adds the paths itself): --url {base}"
        ));
    }
    if args.resume && args.out.is_none() {
        // Without --out a new timestamped file would be made: there is nothing to resume.
        return bad(
            "--resume needs --out: name the results file (or, with --server-cmd, the folder) to continue, e.g. --out run.jsonl --resume".into(),
        );
    }
    Ok(())
}

/// `--metrics-url`: a URL, a path relative to `--url`, or `off`.
fn check_metrics_url(m: Option<&str>) -> Result<(), UsageError> {
    match m {
        Some(m)
            if !(m == "off"
                || m.starts_with('/')
                || m.starts_with("http://")
                || m.starts_with("https://")) =>
        {
            Err(UsageError::Invalid(format!(
                "--metrics-url {m}: give a URL (http://host:port/metrics), a path relative to --url (/metrics), or off"
            )))
        }
        _ => Ok(()),
    }
}

/// `--design auto`: the designed sweep measures cold streamed requests one at a time (its
/// noise model is of their TTFT and decode rate); its floor is two samples a length.
fn design(
    policy: &mut RepPolicy,
    concurrency: &[u32],
    two_point: bool,
    warm: bool,
) -> Result<(), UsageError> {
    let conflict = match () {
        _ if concurrency != [1] => Some("--concurrency"),
        _ if two_point => Some("--method two-point"),
        _ if warm => Some("--mode"),
        _ => None,
    };
    if let Some(flag) = conflict {
        return Err(UsageError::Invalid(format!(
            "--design auto designs a cold sweep of streamed requests sent one at a time: it needs the default --method stream and no {flag}; drop {flag}, or drop --design"
        )));
    }
    policy.design = Some(ctxbench_schema::record::DesignMode::Auto);
    policy.min_reps = ctxbench_session::design::FLOOR;
    Ok(())
}

/// A number of seconds from the command line: finite and positive (or zero where allowed).
fn seconds(name: &str, v: f64, zero_ok: bool) -> Result<Duration, UsageError> {
    if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(UsageError::Invalid(format!(
            "{name} {v}: must be a positive number of seconds"
        )))
    }
}

/// The URL without its trailing `/v1` (or `/v1/`), when it has one.
fn strip_v1(url: &str) -> Option<&str> {
    let u = url.trim_end_matches('/');
    u.strip_suffix("/v1").filter(|b| b.contains("://"))
}

/// Parses `--concurrency 1,2,4,8`: positive counts, sorted, duplicates dropped.
fn parse_concurrency(s: &str) -> Result<Vec<u32>, UsageError> {
    let bad = |why: &str| {
        UsageError::Invalid(format!(
            "--concurrency '{s}': {why}; give request counts separated by commas, e.g. 1,2,4,8"
        ))
    };
    let mut v = Vec::new();
    for part in s.split(',') {
        let n: u32 = part
            .trim()
            .parse()
            .map_err(|_| bad(&format!("'{}' is not a whole number", part.trim())))?;
        if n == 0 || n > 4096 {
            return Err(bad(&format!("{n} is outside 1..=4096")));
        }
        v.push(n);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
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

/// The API key from the variable `--api-key-env` names. A variable the user named
/// explicitly must hold a key: unset or empty is refused before any request (an unset
/// default just means no key).
pub fn api_key(name: &str) -> Result<Option<String>, UsageError> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty());
    if value.is_none() && name != DEFAULT_API_KEY_ENV {
        return Err(UsageError::Invalid(format!(
            "--api-key-env {name}: the environment variable {name} is unset or empty; export the key in it, or drop --api-key-env to use {DEFAULT_API_KEY_ENV}"
        )));
    }
    Ok(value)
}

/// The variable the API key is read from when `--api-key-env` is not given.
pub const DEFAULT_API_KEY_ENV: &str = "CTXBENCH_API_KEY";

/// Where results go without `--out`: a timestamped file in the working directory.
pub fn default_out() -> std::path::PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = now
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    std::path::PathBuf::from(format!("ctxbench-{}-{}.jsonl", &stamp[..8], &stamp[8..]))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    use crate::cmd::cli::{Cli, Command};
    use clap::Parser;

    fn options(extra: &[&str]) -> Result<SweepPlan, UsageError> {
        let argv = [
            &["ctxbench", "sweep", "--url", "http://127.0.0.1:9"][..],
            extra,
        ]
        .concat();
        let Command::Sweep(args) = Cli::try_parse_from(argv).expect("clap accepts").command else {
            panic!("not a sweep");
        };
        plan(&args)
    }

    fn refused(extra: &[&str], needle: &str) {
        let e = options(extra).expect_err("must be refused").to_string();
        assert!(e.contains(needle), "{extra:?}: {e}");
    }

    #[test]
    fn defaults_are_valid() {
        let o = options(&[]).unwrap();
        assert_eq!(o.contexts, None);
        assert_eq!(o.two_point, None);
        assert_eq!((o.policy.min_reps, o.policy.max_reps), (3, 3));
        assert_eq!(o.wait_ready, Duration::from_secs(60));
        assert_eq!(o.longest_output(), u64::from(o.output_tokens));
    }

    #[test]
    fn concurrency_lists_parse_and_refuse_what_a_wave_cannot_do() {
        assert_eq!(options(&[]).unwrap().concurrency, vec![1]);
        let o = options(&["--concurrency", "8,1, 4,2,4"]).unwrap();
        assert_eq!(o.concurrency, vec![1, 2, 4, 8]);
        assert!(o.grid());
        refused(&["--concurrency", "0,2"], "outside 1..=4096");
        refused(&["--concurrency", "two"], "'two' is not a whole number");
        refused(
            &["--concurrency", "2", "--method", "two-point"],
            "drop --method two-point",
        );
        refused(
            &["--concurrency", "2", "--decode-samples", "1"],
            "--decode-samples",
        );
    }

    #[test]
    fn two_point_tokens_parse_and_reject_nonsense() {
        assert_eq!(parse_two_point("1,17").unwrap(), (1, 17));
        assert_eq!(parse_two_point(" 4 , 64 ").unwrap(), (4, 64));
        for bad in ["17,1", "0,5", "5,5", "1", "a,b", "1,2,3"] {
            assert!(parse_two_point(bad).is_err(), "{bad}");
        }
        let o = options(&["--method", "two-point"]).unwrap();
        assert_eq!(o.two_point, Some((1, 17)));
        assert_eq!(o.longest_output(), 17);
        refused(
            &["--method", "two-point", "--two-point-tokens", "9,3"],
            "1 ≤ A < B",
        );
    }

    #[test]
    fn conflicting_options_are_refused() {
        refused(&["--two-point-tokens", "1,9"], "needs --method two-point");
        refused(
            &["--method", "two-point", "--decode-samples", "2"],
            "--decode-samples needs --method stream",
        );
        refused(
            &["--precision", "0.05", "--min-reps", "5", "--max-reps", "3"],
            "--min-reps 5 is larger than --max-reps 3",
        );
    }

    #[test]
    fn design_auto_needs_precision_and_a_cold_one_at_a_time_sweep() {
        let o = options(&["--precision", "0.05", "--design", "auto"]).unwrap();
        assert_eq!(
            o.policy.design,
            Some(ctxbench_schema::record::DesignMode::Auto)
        );
        assert_eq!(o.policy.min_reps, ctxbench_session::design::FLOOR);
        assert_eq!(o.policy.max_reps, 30);
        for (extra, needle) in [
            (["--concurrency", "1,2"], "no --concurrency"),
            (["--method", "two-point"], "no --method two-point"),
            (["--mode", "append"], "no --mode"),
        ] {
            let args = [&["--precision", "0.05", "--design", "auto"][..], &extra].concat();
            refused(&args, needle);
        }
        // Without --design the policy is the per-point one.
        assert_eq!(
            options(&["--precision", "0.05"]).unwrap().policy.design,
            None
        );
    }

    #[test]
    fn bad_ranges_and_values_are_refused() {
        refused(&["--precision", "1.5"], "--precision 1.5");
        refused(
            &["--precision", "0.05", "--point-budget", "0"],
            "--point-budget 0",
        );
        refused(&["--timeout", "0"], "--timeout 0");
        refused(&["--stall-timeout", "-2"], "--stall-timeout");
        refused(&["--wait-ready", "NaN"], "--wait-ready");
        refused(&["--contexts", "1k,x"], "'x'");
        refused(&["--corpus", "/nonexistent/ctxbench"], "--corpus");
        refused(&["--metrics-url", "gpu:9090"], "--metrics-url gpu:9090");
        assert!(options(&["--timeout-per-1k", "0", "--wait-ready", "0"]).is_ok());
        assert!(options(&["--metrics-url", "/metrics"]).is_ok());
    }

    #[test]
    fn a_url_without_scheme_is_refused() {
        let argv = ["ctxbench", "sweep", "--url", "127.0.0.1:8080"];
        let Command::Sweep(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not a sweep");
        };
        let e = plan(&args).unwrap_err().to_string();
        assert!(e.contains("with its scheme"), "{e}");
    }

    #[test]
    fn a_v1_url_is_refused_with_the_base_url_to_use() {
        for url in ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/"] {
            let argv = ["ctxbench", "sweep", "--url", url];
            let Command::Sweep(args) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not a sweep");
            };
            let e = plan(&args).unwrap_err().to_string();
            assert!(
                e.contains("without /v1") && e.contains("--url http://127.0.0.1:8000"),
                "{e}"
            );
        }
        assert_eq!(strip_v1("http://h/api/v1x"), None);
    }
}
