//! `ctxbench sweep --dry-run`: the plan, each prompt's size and a predicted duration, from
//! two small calibration requests; nothing is recorded.

use std::fmt::Write as _;
use std::io::Write;

use anyhow::{Context, Result};

use crate::cmd::progress::fmt_secs;
use crate::cmd::Ending;
use ctxbench_client::{Backend, GenRequest};
use ctxbench_session::bench::BenchSettings;
use ctxbench_session::costmodel::{CostModel, Observation};
use ctxbench_session::prompt::PromptBuilder;
use ctxbench_session::session::Session;
use ctxbench_stats::capacity::{Fit, Limits};

/// What the dry run's plan shows besides the calibration.
struct Shown {
    contexts: Vec<u64>,
    levels: Vec<u32>,
    limits: Limits,
    corpus_label: String,
    corpus_tokens: usize,
}

/// `--dry-run`: the plan, prompt sizes and a predicted duration from two calibration
/// requests on the prepared session; nothing is recorded.
pub async fn run(session: &mut Session) -> Result<Ending> {
    let shown = Shown {
        contexts: session.contexts().to_vec(),
        levels: session.plan.concurrency.clone(),
        limits: session.limits(),
        corpus_label: session.plan.corpus.label(),
        corpus_tokens: session.corpus().map_or(0, |c| c.tokens.len()),
    };
    let (backend, builder, settings) = session.parts().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (model, cal_sizes) = calibrate(backend, builder, settings, &shown.contexts).await?;
    print_plan(builder, settings, &model, cal_sizes, &shown)?;
    Ok(Ending::Complete)
}

/// A cost model from two calibration requests, as large as cheaply possible (4k, or the
/// plan's largest point if smaller): at small sizes fixed overhead hides how cost grows.
async fn calibrate(
    backend: &dyn Backend,
    builder: &mut PromptBuilder,
    settings: &BenchSettings,
    contexts: &[u64],
) -> Result<(CostModel, [u64; 2])> {
    let top = contexts.last().copied().unwrap_or(1024).clamp(64, 4096);
    let cal_sizes = [top / 2, top];
    let mut obs = Vec::new();
    for (i, &c) in cal_sizes.iter().enumerate() {
        let prompt = builder.build(c, u64::MAX / 4 + i as u64);
        let out = backend
            .generate(&GenRequest {
                prompt,
                prepared: None,
                max_tokens: 8,
                cache_bypass: settings.cache_bypass,
                timeouts: settings.timeouts_unmeasured(c),
            })
            .await
            .context("calibration request")?;
        let s = ctxbench_session::sample::make_sample(
            &settings.target(c),
            c,
            0,
            c,
            String::new(),
            Ok(out),
        );
        if let (Some(t), Some(st)) = (s.ttft_ms, s.ms_per_step) {
            obs.push(Observation {
                context: c as f64,
                ttft_s: t / 1000.0,
                step_s: st / 1000.0,
            });
        }
    }
    Ok((CostModel::new(obs), cal_sizes))
}

/// The plan on stdout: each point's prompt size and predicted time, the grid's prediction,
/// the predicted duration and the client's memory.
fn print_plan(
    builder: &mut PromptBuilder,
    settings: &BenchSettings,
    model: &CostModel,
    cal_sizes: [u64; 2],
    shown: &Shown,
) -> Result<()> {
    let Shown {
        contexts,
        levels,
        limits,
        ..
    } = shown;
    let (contexts, levels) = (contexts.as_slice(), levels.as_slice());
    let reps = settings.policy.min_reps.max(1);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "dry run: nothing measured or recorded. corpus: {} ({} tokens, tokenized once)",
        shown.corpus_label, shown.corpus_tokens
    )?;
    writeln!(
        out,
        "{:>8}  {:>5}  {:>13}  {:>13}  {:>15}",
        "context", "reps", "prompt tokens", "request bytes", "predicted s/req"
    )?;
    let grid = levels != [1];
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
            ctxbench_schema::units::fmt_ctx(c),
            reps,
            prompt.len() as u64 + builder.server_added(),
            body_bytes,
            pred.map_or("?".to_owned(), |p| format!("{p:.2}"))
        )?;
    }
    if grid {
        // A wave costs c requests' work (no gain from batching assumed: an upper estimate).
        total = ctxbench_session::bench::wave::predicted_grid_s(model, contexts, levels, settings)
            .unwrap_or(total);
        writeln!(
            out,
            "grid: {} context(s) × concurrency {} = {} cells, {} wave(s) each",
            contexts.len(),
            levels
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            contexts.len() * levels.len(),
            reps
        )?;
        write!(
            out,
            "{}",
            prediction(contexts, levels, settings.output_tokens, limits)
        )?;
    }
    writeln!(
        out,
        "predicted duration: {} (from calibration requests at {} and {} tokens; points far beyond them are extrapolated, prefill at least linearly, so treat long points as a lower bound){}{}",
        fmt_secs(total),
        cal_sizes[0],
        cal_sizes[1],
        if settings.policy.precision.is_some() {
            "; adaptive repetitions may add more"
        } else {
            ""
        },
        if grid {
            "; each wave counted as c requests' work, as on a server that gains nothing from batching (one that batches finishes sooner)"
        } else {
            ""
        }
    )?;
    if let Some(kib) = peak_rss_kib() {
        writeln!(out, "peak memory (RSS): {:.1} MiB", kib as f64 / 1024.0)?;
    }
    Ok(())
}

/// What the server's limits predict for each cell of a concurrency grid: a table (context
/// down, concurrency across: `fits` or `queues`) and the limit behind each `queues`.
pub fn prediction(contexts: &[u64], levels: &[u32], output: u32, limits: &Limits) -> String {
    let mut s = String::new();
    let src = match (limits.slots, limits.kv_pool_tokens) {
        (None, None) => {
            "the server reports no slot count or KV pool: nothing to predict".to_owned()
        }
        (slots, pool) => format!(
            "prediction from the server's limits ({}{}{}):",
            slots.map_or(String::new(), |n| format!("{n} slot(s)")),
            if slots.is_some() && pool.is_some() {
                ", "
            } else {
                ""
            },
            pool.map_or(String::new(), |p| format!("KV pool {p} tokens")),
        ),
    };
    let _ = writeln!(s, "{src}");
    let _ = write!(s, "{:>8}", "context");
    for c in levels {
        let _ = write!(s, "  {:>6}", format!("c={c}"));
    }
    let _ = writeln!(s);
    let mut why = Vec::new();
    for &ctx in contexts {
        let _ = write!(s, "{:>8}", ctxbench_schema::units::fmt_ctx(ctx));
        for &c in levels {
            let fit = limits.predict(ctx, output, c);
            let _ = write!(s, "  {:>6}", fit.word());
            if let Fit::Queues(w) = fit {
                if !why.contains(&w) {
                    why.push(w);
                }
            }
        }
        let _ = writeln!(s);
    }
    for w in why {
        let _ = writeln!(s, "  queues: {w}");
    }
    s
}

/// Peak resident set size of this process (Linux `VmHWM`), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
