//! `--mode append`: the next turn of a long conversation. For each prefix length L (the
//! context ladder), each appended length N and each repetition: the cold prefill of L + N
//! (a fresh nonce, the cache switch and flush as in the cold sweep: the column beside),
//! then a prime that puts a new prefix of L tokens in the cache (its own fresh nonce at
//! token 0, so nothing before it shares it), then that prefix + N new tokens with reuse
//! allowed. The append's cached count must reach L (within the family's allowance,
//! [`ctxbench_schema::warm`]); a miss is flagged and kept out of the summaries.

use std::collections::HashMap;

use super::warm_steps::{cold, measure_warm, prime, request, WarmSettings};
use super::{
    protocol::{flush, record},
    RunCtx, Step, Tally,
};
use ctxbench_schema::error::RecordError;
use ctxbench_schema::record::Phase;
use ctxbench_schema::warm::WarmInfo;

/// Whether L + N plus the output fits the server's context.
fn fits(max_context: Option<u64>, total: u64, output: u32) -> bool {
    max_context.is_none_or(|m| total + u64::from(output) <= m)
}

/// Measures the append grid L × N; every sample is written as it is measured.
pub async fn run(
    mut ctx: RunCtx<'_>,
    contexts: &[u64],
    warm: &WarmSettings<'_>,
) -> Result<Tally, RecordError> {
    let settings = ctx.settings;
    let mut tally = Tally::default();
    let reps = settings.policy.min_reps.max(1);
    let levels: &[u32] = match warm.concurrency {
        [] => &[1],
        l => l,
    };
    let cells: Vec<(u64, u64, u32)> = contexts
        .iter()
        .flat_map(|&l| warm.config.appends.iter().map(move |&n| (l, n)))
        .filter(|&(l, n)| fits(warm.max_context, l + n, settings.output_tokens))
        .flat_map(|(l, n)| levels.iter().map(move |&c| (l, n, c)))
        .collect();
    let skipped = contexts.len() * warm.config.appends.len() * levels.len() - cells.len();
    if skipped > 0 {
        ctx.observer.warn(&format!(
            "{skipped} cell(s) of L × N left out: L + N + {} output tokens exceeds the server's context of {} tokens",
            settings.output_tokens,
            warm.max_context.unwrap_or(0)
        ));
    }
    let planned: usize = cells.iter().map(|&(_, _, c)| 3 * c as usize).sum();
    ctx.observer.start(planned * reps as usize, 0);
    let mut window = 0u64;
    // Cold repetitions (waves) are numbered per cold cell (L + N, c): two cells of the same
    // total share its cold column.
    let mut cold_reps: HashMap<(u64, u32), u32> = HashMap::new();
    'cells: for &(l, n, c) in &cells {
        for rep in 0..reps {
            let cold_rep = cold_reps.entry((l + n, c)).or_insert(0);
            let at = (l, n, rep);
            let step = match c {
                1 => cell(&mut ctx, warm, at, *cold_rep, &mut window, &mut tally).await?,
                _ => {
                    let at = (l, n, c, *cold_rep);
                    super::append_wave::cell(&mut ctx, warm, at, &mut window, &mut tally).await?
                }
            };
            *cold_rep += 1;
            if step.ends(&mut tally) {
                break 'cells;
            }
        }
    }
    ctx.observer.finish();
    Ok(tally)
}

/// One repetition of one cell: the cold L + N, the prime of L, the append of N.
async fn cell(
    ctx: &mut RunCtx<'_>,
    warm: &WarmSettings<'_>,
    (l, n, rep): (u64, u64, u32),
    cold_rep: u32,
    window: &mut u64,
    tally: &mut Tally,
) -> Result<Step, RecordError> {
    let (backend, settings) = (ctx.backend, ctx.settings);
    let total = l + n;
    // 1. The cold prefill of L + N, exactly as the cold sweep measures it.
    if let step @ (Step::Interrupted | Step::Stopped(_)) =
        cold(ctx, total, cold_rep, window, tally).await?
    {
        return Ok(step);
    }
    // 2. The prime: a new prefix of L tokens (fresh nonce at token 0), cold, into the cache.
    let full = ctx.builder.build(total, *window);
    *window += 1;
    let flushed = flush(backend, settings).await;
    let Some(prime) = prime(ctx, &full, (l, n, rep), flushed).await else {
        return Ok(Step::Interrupted);
    };
    let primed = prime.status == ctxbench_schema::record::Status::Ok;
    let prefix = prime.prompt_tokens.unwrap_or(l);
    if let Some(r) = record(ctx.writer, tally, ctx.observer, settings, &prime)? {
        return Ok(Step::Stopped(r));
    }
    if !primed {
        return Ok(Step::Go);
    }
    // 3. The append: the same prefix and N new tokens, reuse allowed (or, as the negative
    // control, refused).
    let req = request(
        full,
        settings.output_tokens,
        warm.config.negative_control,
        settings.timeouts_for(total),
    );
    ctx.observer.sample_started(total, rep);
    let s = measure_warm(
        ctx,
        warm,
        &req,
        (total, rep),
        WarmInfo {
            prefix_tokens: prefix,
            new_tokens: n,
            expected_cached: prefix,
            bypass: warm.config.negative_control,
            ..Default::default()
        },
        Phase::Append,
    )
    .await;
    let Some((s, _)) = s else {
        return Ok(Step::Interrupted);
    };
    if let Some(r) = record(ctx.writer, tally, ctx.observer, settings, &s)? {
        return Ok(Step::Stopped(r));
    }
    Ok(Step::Go)
}

#[cfg(test)]
mod tests {
    use super::fits;

    #[test]
    fn a_cell_fits_only_with_its_output_inside_the_context() {
        assert!(fits(Some(4096), 4000, 96));
        assert!(!fits(Some(4096), 4000, 97));
        assert!(fits(None, u64::MAX / 2, 32));
    }
}
