//! `--precision-of pNN`: a `--precision` target on a percentile instead of the median.
//! Checked before anything is measured: the repetitions a percentile's interval needs are
//! the floor, a cap below them is refused, and the default cap is raised to fit.

use crate::cmd::cli::SweepArgs;
use ctxbench_schema::error::UsageError;
use ctxbench_session::adaptive::RepPolicy;
use ctxbench_stats::stats::quantile_target;

/// `--max-reps` when not given, for a median target.
pub const DEFAULT_MAX_REPS: u32 = 30;

/// Sets the policy's quantile from `--precision-of`, with the floor and cap it needs;
/// nothing for the median.
pub fn apply(
    args: &SweepArgs,
    policy: &mut RepPolicy,
    concurrency: &[u32],
) -> Result<(), UsageError> {
    let Some(raw) = args.precision_of.as_deref() else {
        return Ok(());
    };
    let q = quantile_target::parse(raw)
        .map_err(|e| UsageError::Invalid(format!("--precision-of {e}")))?;
    let Some(q) = q else {
        return Ok(());
    };
    let name = quantile_target::name(q);
    let bad = |m: String| Err(UsageError::Invalid(m));
    if concurrency != [1] {
        return bad(format!(
            "--precision-of {name} with --concurrency: a wave's decode rate is one aggregate per wave, not a step time per request; drop --concurrency, or drop --precision-of"
        ));
    }
    let need = quantile_target::min_n(q);
    let cap = quantile_target::default_cap(q, DEFAULT_MAX_REPS);
    match args.max_reps {
        Some(m) if (m as usize) < need => {
            return bad(format!(
                "--max-reps {m} with --precision-of {name}: a {name}'s 95% interval (order statistics) needs at least {need} samples a point; give --max-reps {need} or more (without --max-reps, {cap})"
            ))
        }
        Some(_) => {}
        None => policy.max_reps = policy.max_reps.max(cap),
    }
    policy.min_reps = policy.min_reps.max(u32::try_from(need).unwrap_or(u32::MAX));
    policy.quantile = Some(q);
    Ok(())
}
