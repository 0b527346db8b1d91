//! The speculation schedule (`report --format schedule`, and at the end of a campaign with
//! `--spec-flags`) and the A/B of one numeric speculative setting (at the end of a campaign
//! over one `-L` list whose variants all speculate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ctxbench_render::spec_schedule;
use ctxbench_schema::error::UsageError;
use ctxbench_schema::record::Results;
use ctxbench_stats::stats::significance::Settings;
use ctxbench_stats::stats::speculation::ab::{self, ValueSide};
use ctxbench_stats::stats::speculation::schedule::{self, KSchedule, KSide};

/// The files of each K (from the header's `spec_k`), or a usage error saying what is missing.
fn by_k(loaded: &[(String, String, Results)]) -> Result<BTreeMap<u32, Vec<&Results>>, UsageError> {
    let mut out: BTreeMap<u32, Vec<&Results>> = BTreeMap::new();
    for (_, path, r) in loaded {
        let k = r.header.config.spec_k.ok_or_else(|| {
            UsageError::Invalid(format!(
                "--format schedule: {path} records no draft length K; the schedule is built from a campaign over K (sweep --server-cmd … -L k 0,2,4 --spec-flags '… {{k}}')"
            ))
        })?;
        out.entry(k).or_default().push(r);
    }
    if out.len() < 2 {
        return Err(UsageError::Invalid(format!(
            "--format schedule: these files hold one draft length (K = {}); give the files of every K of the campaign (DIR/*.jsonl)",
            out.keys().next().copied().unwrap_or_default()
        )));
    }
    Ok(out)
}

/// The schedule of the files of a K campaign.
pub fn build(loaded: &[(String, String, Results)]) -> Result<KSchedule, UsageError> {
    let groups = by_k(loaded)?;
    let sides: Vec<KSide> = groups.iter().map(|(&k, runs)| KSide { k, runs }).collect();
    Ok(schedule::build(&sides, &Settings::default()))
}

/// Writes the schedule's forms into `dir`: `schedule.md`, `schedule.json` and one file per
/// dialect; returns the files written.
pub fn write(dir: &Path, s: &KSchedule) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let doc = spec_schedule::json_document(s);
    let mut files = vec![
        ("schedule.md".to_owned(), spec_schedule::markdown(s)),
        (
            "schedule.json".to_owned(),
            serde_json::to_string_pretty(&doc)?,
        ),
    ];
    for (key, name) in [
        ("vllm_48944", "vllm-48944.json"),
        ("vllm_54801", "vllm-54801.json"),
        ("sglang_31716", "sglang-31716.json"),
    ] {
        files.push((
            name.to_owned(),
            serde_json::to_string_pretty(&doc["dialects"][key]["config"])?,
        ));
    }
    let mut out = Vec::new();
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// `report --format schedule`: Markdown on standard output, or every form in `--out DIR`.
pub fn report(out: Option<&Path>, loaded: &[(String, String, Results)]) -> Result<()> {
    let s = build(loaded)?;
    match out {
        Some(dir) => {
            for p in write(dir, &s)? {
                eprintln!("schedule: {}", p.display());
            }
        }
        None => {
            use std::io::Write;
            std::io::stdout()
                .lock()
                .write_all(spec_schedule::markdown(&s).as_bytes())?;
        }
    }
    Ok(())
}

/// The A/B of one numeric setting in Markdown: per length, acceptance and decode per value
/// and the verdict per step up; `None` when the sides are not one numeric list.
pub fn ab_markdown(name: &str, sides: &[(f64, Vec<&Results>)]) -> Option<String> {
    if sides.len() < 2 {
        return None;
    }
    let vs: Vec<ValueSide> = sides
        .iter()
        .map(|(v, runs)| ValueSide { value: *v, runs })
        .collect();
    let rows = ab::build(name, &vs, &Settings::default());
    if rows.is_empty() {
        return None;
    }
    let mut out = format!(
        "## A/B over {name}: does the larger value pay?\n\n| context | {name} | ms/token | acceptance rate | acceptance length |\n|---|---|---|---|---|\n"
    );
    let mi = |m: Option<ctxbench_stats::stats::speculation::MeanInterval>| match m {
        Some(m) => match (m.low, m.high) {
            (Some(l), Some(h)) => format!("{:.2} ({l:.2}–{h:.2})", m.mean),
            _ => format!("{:.2}", m.mean),
        },
        None => "–".into(),
    };
    for r in &rows {
        for v in &r.values {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                ctxbench_schema::units::fmt_ctx(r.context_tokens),
                ab::value_text(v.value),
                v.ms_per_token.map_or("–".into(), |x| format!("{x:.2}")),
                mi(v.accept_rate),
                mi(v.accept_length)
            ));
        }
    }
    out.push('\n');
    for r in &rows {
        out.push_str(&format!("- {}\n", r.sentence));
    }
    Some(out)
}
