//! `ctxbench import`: reads another tool's result files, writes them as one ctxbench results
//! file (whole or not at all: a temporary file renamed into place) and prints the audit.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ctxbench_render::import_audit;
use ctxbench_schema::record::Line;
use ctxbench_stats::import::{self, common::SourceFile};

use crate::cmd::cli::ImportArgs;
use crate::cmd::Ending;

/// `ctxbench import FILE… --out RESULTS.jsonl`.
pub fn run(args: &ImportArgs) -> Result<Ending> {
    let mut files = Vec::new();
    for p in &args.files {
        files.extend(gather(p)?);
    }
    let mut imported = import::import(&files, env!("CARGO_PKG_VERSION"))?;
    // The audit's words are render's; they go into the file as well as to the terminal.
    import_audit::word(&mut imported);
    write_whole(&args.out, &imported.lines())?;
    let mut out = std::io::stdout().lock();
    if let Some(src) = imported.source() {
        for line in import_audit::lines(src) {
            writeln!(out, "{line}")?;
        }
    }
    writeln!(
        out,
        "wrote {} ({} samples)",
        args.out.display(),
        imported.samples.len()
    )?;
    Ok(Ending::Complete)
}

/// The files one argument stands for: a file (AIPerf's export with its `profile_export.jsonl`
/// beside it), or a folder holding a tool's output.
fn gather(p: &Path) -> Result<Vec<SourceFile>> {
    let read = |p: &Path| -> Result<SourceFile> {
        Ok(SourceFile {
            name: p.display().to_string(),
            bytes: std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
        })
    };
    if p.is_dir() {
        let known = [
            "profile_export_aiperf.json",
            "benchmarks.json",
            "summary_lifecycle_metrics.json",
        ];
        for k in known {
            let f = p.join(k);
            if f.is_file() {
                return gather(&f);
            }
        }
        anyhow::bail!(
            "{}: a folder with none of {} in it",
            p.display(),
            known.join(", ")
        );
    }
    let mut out = vec![read(p)?];
    let sibling = |name: &str| p.parent().map(|d| d.join(name)).filter(|f| f.is_file());
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if name.ends_with("_aiperf.json") {
        if let Some(j) = sibling(&name.replace("_aiperf.json", ".jsonl")) {
            out.push(read(&j)?);
        }
    }
    if name == "summary_lifecycle_metrics.json" {
        if let Some(j) = sibling("per_request_lifecycle_metrics.json") {
            out.push(read(&j)?);
        }
    }
    Ok(out)
}

/// Writes `lines` to `path` whole: into a temporary file beside it, synced, then renamed, so
/// a failure leaves no half-written results file (and an older file at `path` untouched).
pub fn write_whole(path: &Path, lines: &[Line]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("import"),
        std::process::id()
    ));
    let result = (|| -> Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        for l in lines {
            serde_json::to_writer(&mut f, l)?;
            f.write_all(b"\n")?;
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", path.display()))
}
