//! The warm modes' options (`--mode append|conversation|tiers`), checked before anything is
//! sent: what each mode takes, and what it refuses because it cannot do it yet.

use crate::cmd::cli::SweepArgs;
use ctxbench_schema::error::UsageError;
use ctxbench_schema::warm::{WarmConfig, WarmMode};

/// `--append` when not given: N of each append cell.
const DEFAULT_APPENDS: &str = "128,512,2048";

/// `--gaps` when not given: idle seconds.
const DEFAULT_GAPS: &str = "0,1,10,60,300";

/// `--pressure` when not given: fractions of the KV pool.
const DEFAULT_PRESSURE: &str = "0,0.25,0.5,1,2";

/// N of the retention append when `--append` is not given.
const RETENTION_APPEND: u64 = 128;

/// A retention axis: non-negative finite numbers, ascending and without repeats.
fn axis(list: &str, flag: &str) -> Result<Vec<f64>, UsageError> {
    let mut v = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => v.push(x),
            _ => {
                return Err(UsageError::Invalid(format!(
                    "{flag} {list}: `{part}` is not a number ≥ 0"
                )))
            }
        }
    }
    if v.is_empty() {
        return Err(UsageError::Invalid(format!(
            "{flag}: give at least one value"
        )));
    }
    v.sort_by(f64::total_cmp);
    v.dedup();
    Ok(v)
}

/// `--turn-tokens` when not given.
const DEFAULT_TURN_TOKENS: u64 = 512;

/// Without `--mode`, a warm mode's own flags are refused with the mode they belong to.
fn no_mode_flags(args: &SweepArgs) -> Result<(), UsageError> {
    let bad = |m: String| Err(UsageError::Invalid(m));
    if args.negative_control || args.ttft_target.is_some() {
        return bad(
            "--negative-control and --ttft-target belong to the warm modes: add --mode append (or conversation)".into(),
        );
    }
    if args.append.is_some() {
        return bad("--append belongs to the warm modes: add --mode append (or tiers)".into());
    }
    if args.turn_tokens.is_some() {
        return bad("--turn-tokens belongs to the warm modes: add --mode conversation".into());
    }
    if args.gaps.is_some() || args.pressure.is_some() || args.grid {
        return bad(
            "--gaps, --pressure and --grid belong to the retention map: add --mode retention"
                .into(),
        );
    }
    Ok(())
}

/// The warm plan of `args`, or `None` for the cold sweep.
pub fn warm_config(
    args: &SweepArgs,
    concurrency: &[u32],
    two_point: bool,
) -> Result<Option<WarmConfig>, UsageError> {
    let bad = |m: String| Err(UsageError::Invalid(m));
    let Some(mode) = args.mode else {
        no_mode_flags(args)?;
        return Ok(None);
    };
    let m = mode.as_str();
    if args.append.is_some() && mode == WarmMode::Conversation {
        return bad(
            "--append gives the N of --mode append and tiers; --mode conversation grows by --turn-tokens".into(),
        );
    }
    if args.turn_tokens.is_some() && mode != WarmMode::Conversation {
        return bad(format!(
            "--turn-tokens gives the turns of --mode conversation, not --mode {m} (which appends --append)"
        ));
    }
    if (args.gaps.is_some() || args.pressure.is_some() || args.grid) && mode != WarmMode::Retention
    {
        return bad(format!(
            "--gaps, --pressure and --grid give the axes of --mode retention, not --mode {m}"
        ));
    }
    // What the warm loops do not do (yet), refused with what to do instead.
    if concurrency != [1] && mode != WarmMode::Append {
        return bad(format!(
            "--mode {m} follows one session; --concurrency {} (several sessions at once, each with its own prefix) is for --mode append",
            args.concurrency
        ));
    }
    if two_point {
        return bad(format!(
            "--mode {m} times streamed requests; drop --method two-point"
        ));
    }
    for (given, flag) in [
        (args.decode_samples > 0, "--decode-samples"),
        (args.needle, "--needle"),
        (args.resume && mode != WarmMode::Retention, "--resume"),
        (args.dry_run, "--dry-run"),
        (args.prompts.is_some(), "--prompts"),
    ] {
        if given {
            return bad(format!(
                "--mode {m} does not take {flag} (yet): run it without, or as a cold sweep"
            ));
        }
    }
    if mode == WarmMode::Retention && args.negative_control {
        return bad(
            "--mode retention judges each append by the hit rule itself; --negative-control is for append and conversation".into(),
        );
    }
    if mode == WarmMode::Tiers && args.negative_control {
        return bad(
            "--mode tiers measures the cold tier itself; --negative-control is for append and conversation".into(),
        );
    }
    if args.ttft_target.is_some() && mode != WarmMode::Append {
        return bad(format!(
            "--ttft-target gives the turn budget of --mode append, not --mode {m}"
        ));
    }
    if let Some(t) = args.ttft_target {
        if !(t.is_finite() && t > 0.0) {
            return bad(format!(
                "--ttft-target {t}: give a positive number of milliseconds"
            ));
        }
    }
    let appends =
        ctxbench_session::plan::parse_contexts(args.append.as_deref().unwrap_or(DEFAULT_APPENDS))
            .map_err(|e| UsageError::Invalid(format!("--append: {e}")))?;
    if appends.contains(&0) {
        return bad("--append: every N must be at least 1 token".into());
    }
    let (gaps_s, pressure) = match mode {
        WarmMode::Retention => (
            axis(args.gaps.as_deref().unwrap_or(DEFAULT_GAPS), "--gaps")?,
            axis(
                args.pressure.as_deref().unwrap_or(DEFAULT_PRESSURE),
                "--pressure",
            )?,
        ),
        _ => (Vec::new(), Vec::new()),
    };
    Ok(Some(WarmConfig {
        mode,
        appends: match mode {
            WarmMode::Conversation => Vec::new(),
            // One N: the map's axes are the gap and the pressure.
            WarmMode::Retention => match args.append {
                Some(_) => appends.into_iter().take(1).collect(),
                None => vec![RETENTION_APPEND],
            },
            _ => appends,
        },
        gaps_s,
        pressure,
        grid: args.grid,
        turn_tokens: (mode == WarmMode::Conversation)
            .then_some(args.turn_tokens.unwrap_or(DEFAULT_TURN_TOKENS)),
        ttft_target_ms: args.ttft_target,
        negative_control: args.negative_control,
    }))
}
