//! Which context lengths to measure: parsing `--contexts`, the default ladder, limit checks.

use ctxbench_schema::error::UsageError;

/// Smallest context a prompt can have (the nonce alone takes 8 tokens).
pub const MIN_CONTEXT: u64 = 16;

pub use ctxbench_schema::units::parse_len;

/// Parses a comma-separated list, sorts it ascending (cheap points first) and drops repeats.
pub fn parse_contexts(s: &str) -> Result<Vec<u64>, UsageError> {
    let mut v = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_len)
        .collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() {
        return Err(UsageError::BadContext(s.to_owned()));
    }
    if let Some(&small) = v.iter().find(|&&c| c < MIN_CONTEXT) {
        return Err(UsageError::Invalid(format!(
            "context {small} is too small: the smallest measurable context is {MIN_CONTEXT} tokens"
        )));
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// The usable top of the ladder: the server's maximum minus the output and a 10% margin
/// (e.g. 180k under a 200k limit).
pub fn usable_max(limit: u64, output_tokens: u64) -> u64 {
    let margin = (limit / 10).max(64);
    limit.saturating_sub(margin).saturating_sub(output_tokens)
}

/// The default doubling ladder 1k, 2k, 4k, … up to [`usable_max`], plus the top itself
/// (rounded down to 1k) when it is well above the last rung.
pub fn default_ladder(limit: u64, output_tokens: u64) -> Vec<u64> {
    let top = usable_max(limit, output_tokens);
    let mut v = Vec::new();
    let mut c = 1024u64;
    while c <= top {
        v.push(c);
        c *= 2;
    }
    let top_k = top / 1024 * 1024;
    match v.last() {
        Some(&last) if top_k as f64 > last as f64 * 1.1 => v.push(top_k),
        None if top >= MIN_CONTEXT => v.push(top),
        _ => {}
    }
    v
}

/// Refuses any point whose prompt plus output does not fit the server's context.
pub fn check_limit(
    contexts: &[u64],
    output_tokens: u64,
    limit: u64,
    source_of_limit: &str,
) -> Result<(), UsageError> {
    for &c in contexts {
        if c + output_tokens > limit {
            return Err(UsageError::OverLimit {
                context: c,
                output: output_tokens,
                limit,
                source_of_limit: source_of_limit.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes_and_sorts() {
        assert_eq!(
            parse_contexts("8k, 1k,2048,1.5k,1k").unwrap(),
            vec![1024, 1536, 2048, 8192]
        );
        assert_eq!(parse_len("1M").unwrap(), 1 << 20);
    }

    #[test]
    fn rejects_garbage_zero_and_negative() {
        for bad in ["", "abc", "0", "-4k", "k", "1.5", "nan", "inf"] {
            assert!(parse_contexts(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_contexts("8").is_err()); // below MIN_CONTEXT
    }

    #[test]
    fn ladder_stops_under_the_limit_with_margin() {
        // 200k server: doubling to 128k, then the 10%-margin top (~175k).
        let l = default_ladder(200_000, 32);
        assert_eq!(
            &l[..8],
            &[1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
        );
        let top = *l.last().unwrap();
        assert!(top > 131072 && top <= 180_000 - 32, "top {top}");
        // 32k server: 1k..16k, then 28k.
        let l = default_ladder(32768, 32);
        assert_eq!(l, vec![1024, 2048, 4096, 8192, 16384, 28672]);
        for &c in &l {
            assert!(c + 32 <= 32768);
        }
    }

    #[test]
    fn over_limit_names_the_limit() {
        let e = check_limit(&[1024, 9000], 32, 8192, "llama.cpp /props n_ctx").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("9000") && msg.contains("8192") && msg.contains("/props"),
            "{msg}"
        );
        assert!(check_limit(&[8160], 32, 8192, "x").is_ok());
    }
}
