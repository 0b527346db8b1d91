//! The warm modes in a session: what they need from the server (checked before anything is
//! measured) and which loop runs.

use crate::bench::warm_steps::WarmSettings;
use crate::bench::{self, RunCtx, Tally};
use ctxbench_client::{family, ServerProfile};
use ctxbench_schema::error::{RecordError, UsageError};
use ctxbench_schema::warm::{WarmConfig, WarmMode};

/// Refuses, before anything is sent, what a warm mode cannot do with the plan's
/// `--concurrency` levels or this server.
pub fn check(
    w: &WarmConfig,
    concurrency: &[u32],
    profile: &ServerProfile,
) -> Result<(), UsageError> {
    let bad = |m: String| Err(UsageError::Invalid(m));
    let mode = w.mode.as_str();
    if w.negative_control && !profile.cache_bypass {
        return bad(format!(
            "--mode {mode} --negative-control needs a per-request cache switch (llama.cpp's cache_prompt); {} has none: compare with a server started without its prefix cache instead (--server-cmd with -L)",
            profile.server_kind
        ));
    }
    let tiered = [
        ctxbench_client::BackendKind::Llamacpp,
        ctxbench_client::BackendKind::Sglang,
    ];
    if w.mode == WarmMode::Tiers && !tiered.contains(&profile.backend) {
        return bad(format!(
            "--mode tiers drives llama.cpp's llama-server (slot save/restore, --cache-ram) and SGLang's native /generate (HiCache host memory, proven per request by meta_info.cached_tokens_details); this server is {} ({}): use --mode append{}",
            profile.server_kind,
            profile.backend.as_str(),
            match profile.detected {
                Some(ctxbench_client::BackendKind::Sglang) => " (or --backend sglang)",
                _ => "",
            }
        ));
    }
    if w.mode == WarmMode::Tiers && profile.total_slots.is_some_and(|s| s > 1) {
        return bad(format!(
            "--mode tiers needs llama-server with one slot (-np 1): with {} slots the tier of a sample cannot be proven from the slot's state",
            profile.total_slots.unwrap_or(0)
        ));
    }
    if profile.reports_cached_tokens == Some(false) {
        let hint = profile
            .detected
            .and_then(family)
            .and_then(|f| f.cached_tokens_hint())
            .map_or(String::new(), |h| format!(" ({h})"));
        return bad(format!(
            "--mode {mode} proves every sample's reuse from the server's cached-token count, and this server reports none{hint}"
        ));
    }
    if concurrency != [1] && w.mode != WarmMode::Append {
        return bad(format!(
            "--mode {mode} follows one session; --concurrency {} (several sessions, each with its own prefix) is for --mode append",
            concurrency
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    Ok(())
}

/// Runs the plan's warm mode.
pub async fn run(
    ctx: RunCtx<'_>,
    contexts: &[u64],
    (w, levels): (&WarmConfig, &[u32]),
    profile: &ServerProfile,
    prior: &[ctxbench_schema::record::Sample],
) -> Result<Tally, RecordError> {
    // More sessions than slots: a prime evicts another session's prefix unless a host
    // cache (llama.cpp --cache-ram) keeps it. That is a finding, so it is measured, and
    // each evicted append is a flagged miss.
    if let (Some(&c), Some(slots)) = (levels.iter().max(), profile.total_slots) {
        if u64::from(c) > slots {
            ctx.observer.warn(&format!(
                "--concurrency {c} sessions but the server has {slots} slot(s): a session's prefix may be evicted by another's prime (each such append is flagged cache_miss); start llama-server with -np {c} to give each its own slot"
            ));
        }
    }
    let fam = profile.detected.and_then(family);
    let allowance = move |l: u64| {
        fam.map_or(
            (
                1,
                "the last token of the prefix may be recomputed for the next logits",
            ),
            |f| f.reuse_allowance(l),
        )
    };
    let settings = WarmSettings {
        config: w,
        allowance: &allowance,
        max_context: profile.max_context,
        concurrency: levels,
        backend: profile.backend,
        kv_pool_tokens: profile.kv_pool_tokens,
        slots: profile.total_slots,
    };
    match w.mode {
        WarmMode::Append => bench::append::run(ctx, contexts, &settings).await,
        WarmMode::Conversation => bench::conversation::run(ctx, &settings).await,
        WarmMode::Tiers => bench::tiers::run(ctx, contexts, &settings).await,
        WarmMode::Retention => bench::retention::run(ctx, contexts, &settings, prior).await,
    }
}
