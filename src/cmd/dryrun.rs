//! `ctxbench sweep --dry-run`: the plan, each prompt's size and a predicted duration, from
//! two small calibration requests; nothing is recorded.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cmd::progress::fmt_secs;
use crate::cmd::Ending;
use ctxbench::bench::BenchSettings;
use ctxbench::client::{Backend, GenRequest};
use ctxbench::corpus::{Corpus, CorpusSpec};
use ctxbench::costmodel::{CostModel, Observation};
use ctxbench::prompt::PromptBuilder;
use ctxbench::render;

/// `--dry-run`: the plan, prompt sizes and a predicted duration from two calibration
/// requests; nothing is recorded.
pub async fn run(
    backend: &dyn Backend,
    builder: &mut PromptBuilder<'_>,
    contexts: &[u64],
    settings: &BenchSettings,
    corpus_spec: &CorpusSpec,
    corpus: &Corpus,
) -> Result<Ending> {
    // Calibrate as large as cheaply possible (4k, or the plan's largest point if smaller):
    // at small sizes fixed overhead hides how cost grows.
    let top = contexts.last().copied().unwrap_or(1024).clamp(64, 4096);
    let cal_sizes = [top / 2, top];
    let mut obs = Vec::new();
    for (i, &c) in cal_sizes.iter().enumerate() {
        let prompt = builder.build(c, u64::MAX / 4 + i as u64);
        let out = backend
            .generate(&GenRequest {
                prompt,
                max_tokens: 8,
                cache_bypass: settings.cache_bypass,
                timeouts: settings.timeouts_unmeasured(c),
            })
            .await
            .context("calibration request")?;
        let s = ctxbench::sample::make_sample(&settings.target(c), c, 0, c, String::new(), Ok(out));
        if let (Some(t), Some(st)) = (s.ttft_ms, s.ms_per_step) {
            obs.push(Observation {
                context: c as f64,
                ttft_s: t / 1000.0,
                step_s: st / 1000.0,
            });
        }
    }
    let model = CostModel::new(obs);
    let reps = settings.policy.min_reps.max(1);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "dry run: nothing measured or recorded. corpus: {} ({} tokens, tokenized once)",
        corpus_spec.label(),
        corpus.tokens.len()
    )?;
    writeln!(
        out,
        "{:>8}  {:>5}  {:>13}  {:>13}  {:>15}",
        "context", "reps", "prompt tokens", "request bytes", "predicted s/req"
    )?;
    let mut total = 0.0;
    for (i, &c) in contexts.iter().enumerate() {
        // Build the real prompt and body once, to size it; dropped before the next one.
        let prompt = builder.build(c, i as u64);
        let body_bytes = serde_json::to_vec(&prompt).map(|v| v.len()).unwrap_or(0) + 200;
        let pred = model.request_s(c as f64, settings.output_tokens);
        total += pred.unwrap_or(0.0) * reps as f64;
        writeln!(
            out,
            "{:>8}  {:>5}  {:>13}  {:>13}  {:>15}",
            render::fmt_ctx(c),
            reps,
            prompt.len() as u64 + builder.server_added(),
            body_bytes,
            pred.map_or("?".to_owned(), |p| format!("{p:.2}"))
        )?;
    }
    writeln!(
        out,
        "predicted duration: {} (from calibration requests at {} and {} tokens; points far beyond them are extrapolated, prefill at least linearly, so treat long points as a lower bound){}",
        fmt_secs(total),
        cal_sizes[0],
        cal_sizes[1],
        if settings.policy.precision.is_some() {
            "; adaptive repetitions may add more"
        } else {
            ""
        }
    )?;
    if let Some(kib) = peak_rss_kib() {
        writeln!(out, "peak memory (RSS): {:.1} MiB", kib as f64 / 1024.0)?;
    }
    Ok(Ending::Complete)
}

/// Peak resident set size of this process (Linux `VmHWM`), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
