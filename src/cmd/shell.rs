//! `ctxbench completions` and `ctxbench man`: generated from the same clap definition as the
//! command line itself, so they cannot drift from it.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use super::cli::{Cli, CompletionsArgs, ManArgs};
use ctxbench_schema::error::UsageError;

/// Prints the completion script for one shell to standard output.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "ctxbench", &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the completion script")
}

/// Prints one man page, or writes every page into `--dir`.
pub fn man(args: &ManArgs) -> anyhow::Result<()> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Built, subcommands get their full names (`ctxbench-sweep`) for the pages' titles.
    cmd.build();
    if let Some(dir) = &args.dir {
        return write_all(cmd, dir);
    }
    let page = match &args.subcommand {
        None => cmd,
        Some(name) => cmd.find_subcommand(name).cloned().ok_or_else(|| {
            UsageError::Invalid(format!(
                "man: no subcommand '{name}' (one of: {})",
                subcommand_names().join(", ")
            ))
        })?,
    };
    let mut out = Vec::new();
    man_page(page)
        .render(&mut out)
        .context("cannot render the man page")?;
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the man page")
}

/// A page whose footer names ctxbench and its build (subcommands carry no version of their own).
fn man_page(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd).source(format!("ctxbench {}", ctxbench_session::VERSION))
}

fn subcommand_names() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect()
}

/// `ctxbench.1` and `ctxbench-<subcommand>.1` for every subcommand, into `dir` (created).
fn write_all(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    for page in pages {
        let path = man_page(page)
            .generate_to(dir)
            .with_context(|| format!("cannot write a man page into {}", dir.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}
