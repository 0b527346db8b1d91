//! `ctxbench sweep --corpus repeat,natural`: the same ladder measured once per corpus, each
//! into its own results file (`OUT.repeat.jsonl`, `OUT.natural.jsonl`; one corpus per file
//! keeps every file's header, resume and report exactly as for a one-corpus sweep), then one
//! report over all of them, whose "Prompts and corpora" section gives the acceptance per
//! corpus and the inflation ratio.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::cmd::cli::SweepArgs;
use crate::cmd::{sweep, Ending};
use ctxbench_schema::error::UsageError;

/// `--corpus auto` with `--server-cmd`: text that does not repeat itself when the command line,
/// any value of its `-F`/`-L` lists or `--spec-flags` turns speculation on (natural text up to 128k, code
/// past it or when `--contexts` is not given; every variant of the campaign then measures the
/// same text, so compare accepts them), the repeated sentence otherwise; says so on stderr
/// when it chose another text. With `--url` the choice waits for the probe (the session).
pub fn resolve_auto(args: &mut SweepArgs) {
    use ctxbench_session::corpus::default;
    let Some(cmd) = args.server_cmd.as_deref() else {
        return;
    };
    if args.corpus != default::AUTO {
        return;
    }
    let words = std::iter::once(cmd)
        .chain(args.flag_list.iter().map(String::as_str))
        .chain(args.parameter_list.iter().map(String::as_str))
        .chain(args.spec_flags.as_deref());
    // The longest prompt of --contexts; without it the ladder waits for the server.
    let longest = args
        .contexts
        .as_deref()
        .and_then(|c| ctxbench_session::plan::parse_contexts(c).ok())
        .and_then(|c| c.into_iter().max());
    let (corpus, note) = default::choose(default::command_speculates(words), longest);
    if let Some(n) = note {
        eprintln!("{n}");
    }
    args.corpus = corpus.to_owned();
}

/// The corpora of a comma list, in order; one element for a single corpus.
pub fn split(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `OUT` with the corpus's short name before the extension: `run.jsonl` → `run.natural.jsonl`.
pub fn path_for(out: &Path, short: &str) -> PathBuf {
    let stem = out
        .file_stem()
        .map_or_else(|| "ctxbench".into(), |s| s.to_string_lossy().into_owned());
    let ext = out
        .extension()
        .map_or_else(|| "jsonl".into(), |e| e.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}.{short}.{ext}"))
}

/// Runs the sweep once per corpus (every plan is validated before anything is sent), then
/// prints the combined report's corpus section and writes `OUT.corpora.{md,html}`.
pub async fn run(
    args: SweepArgs,
    corpora: Vec<String>,
    interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<Ending> {
    if args.dry_run {
        return Err(UsageError::Invalid(format!(
            "--corpus {} with --dry-run: give one corpus for a dry run",
            args.corpus
        ))
        .into());
    }
    let out = args.out.clone().unwrap_or_else(|| {
        let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace(':', "");
        PathBuf::from(format!("ctxbench-{t}.jsonl"))
    });
    let mut plans = Vec::new();
    let mut shorts: Vec<String> = Vec::new();
    for c in &corpora {
        let spec = ctxbench_session::corpus::parse_spec(c).map_err(UsageError::Invalid)?;
        let short = spec.short_name();
        if shorts.contains(&short) {
            return Err(UsageError::Invalid(format!(
                "--corpus {}: two corpora are both called '{short}'; give each once",
                args.corpus
            ))
            .into());
        }
        let mut one = args.clone();
        one.corpus = c.clone();
        one.out = Some(path_for(&out, &short));
        plans.push(crate::cmd::sweep_options::plan(&one)?);
        shorts.push(short);
    }
    let mut paths = Vec::new();
    let mut ending = Ending::Complete;
    for plan in plans {
        let path = plan.out.clone().unwrap_or_default();
        if !plan.quiet {
            eprintln!("corpus {}: {}", plan.corpus.label(), path.display());
        }
        let e = sweep::run_plan(plan, interrupt.clone()).await?;
        paths.push(path);
        if e != Ending::Complete {
            ending = e;
        }
        if e == Ending::Interrupted {
            break;
        }
    }
    if let Err(e) = combined_report(&paths, &out) {
        eprintln!("warning: could not write the corpus report: {e:#}");
    }
    Ok(ending)
}

/// The report over every corpus's file: its corpus section on stdout, the whole report
/// (`OUT.corpora.{md,html}`, and `OUT.corpora-plots/` with acceptance per corpus) beside
/// the results files.
fn combined_report(paths: &[PathBuf], out: &Path) -> Result<()> {
    let loaded = crate::cmd::report::load(paths)?;
    let report = ctxbench_stats::report::build(&loaded);
    let text = ctxbench_render::prompts::text(&report.prompts);
    if !text.is_empty() {
        println!("\n{text}");
    }
    // Named like a results file, so the report lands where a single run's would.
    crate::cmd::report::after_sweep(&report, &path_for(out, "corpora"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_per_corpus_beside_out() {
        assert_eq!(split("repeat, natural,"), vec!["repeat", "natural"]);
        assert_eq!(
            path_for(Path::new("d/run.jsonl"), "natural"),
            PathBuf::from("d/run.natural.jsonl")
        );
    }

    fn sweep(argv: &[&str]) -> SweepArgs {
        use crate::cmd::cli::{Cli, Command};
        use clap::Parser;
        let argv = std::iter::once("ctxbench").chain(argv.iter().copied());
        let Command::Sweep(mut args) = Cli::try_parse_from(argv).expect("clap accepts").command
        else {
            panic!("not a sweep")
        };
        resolve_auto(&mut args);
        *args
    }

    #[test]
    fn the_default_corpus_is_natural_text_for_a_campaign_that_speculates_and_repeat_otherwise() {
        use ctxbench_session::corpus::default;
        let spec = sweep(&[
            "sweep",
            "--server-cmd",
            "llama-server -m t --port {port} {spec}",
            "-F",
            "spec",
            ",-md d.gguf --spec-type draft-simple",
        ]);
        // No --contexts: the text that cannot wrap (else what this host has, said on stderr).
        assert_eq!(spec.corpus, default::choose(true, None).0);
        let plain = sweep(&["sweep", "--server-cmd", "llama-server -m t --port {port}"]);
        assert_eq!(plain.corpus, "repeat");
        // A campaign over K: --spec-flags turns speculation on for K > 0.
        let over_k = sweep(&[
            "sweep",
            "--server-cmd",
            "llama-server -m t --port {port}",
            "-L",
            "k",
            "0,4",
            "--spec-flags",
            "-md d.gguf --spec-draft-n-max {k}",
        ]);
        assert_eq!(over_k.corpus, default::choose(true, None).0);
        // Asked for, the repeated sentence stays; with --url the probe decides later.
        let asked = sweep(&[
            "sweep",
            "--server-cmd",
            "llama-server -m t -md d --port {port}",
            "--corpus",
            "repeat",
        ]);
        assert_eq!(asked.corpus, "repeat");
        let url = sweep(&["sweep", "--url", "http://127.0.0.1:1"]);
        assert_eq!(url.corpus, default::AUTO);
    }
}
