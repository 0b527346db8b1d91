//! Cache hits the server does not report. Where a sample has no cached-token count
//! (`cache_unverified`), a TTFT far below what the run's own cold samples predict is not a
//! cold prefill: a prefix cache served it (llama-cpp-python reuses the previous request's
//! prefix silently). The rule, applied as each sample is recorded and again over the whole
//! results file:
//!
//! a cold, completed, unverified sample is a **suspected cache hit** when its TTFT is below
//! ¼ of the reference, the reference being the larger of (a) the slowest other unverified
//! cold sample at the same length and (b) the median TTFT of the kept samples at the nearest
//! shorter length (prefill never gets faster with more tokens). Such samples carry the flag
//! [`FLAG`] and are excluded from summaries. A cold sample slower than 4× another is far
//! outside run-to-run noise, so a false positive costs one sample, never a wrong number.
//!
//! The limit: only a reuse of more than about ¾ of the prompt is caught. A partial hit (say
//! half the prompt served from the cache) leaves TTFT at about half the cold one or more
//! (the rest still attends to the whole context), and honest cold samples on a shared or
//! busy host differ by 2× (the reference is the slowest of them), so no threshold above ¼
//! separates a half hit from noise without flagging honest samples. Only a server that
//! reports cached tokens, or a flush before each sample, proves a cold prefill.

use std::collections::{BTreeMap, HashSet};

use ctxbench_schema::record::{Sample, Status};

/// The sample flag.
pub const FLAG: &str = "suspected_cache_hit";

/// A TTFT below this fraction of the reference is suspected.
pub const FACTOR: f64 = 0.25;

/// The rule for one TTFT: `others_same` are the other unverified cold TTFTs at its length,
/// `shorter_median` the median kept TTFT at the nearest shorter length.
pub fn is_suspect(ttft_ms: f64, others_same: &[f64], shorter_median: Option<f64>) -> bool {
    let slowest = others_same
        .iter()
        .copied()
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    let reference = match (slowest, shorter_median) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => match a.or(b) {
            Some(r) => r,
            None => return false,
        },
    };
    ttft_ms < FACTOR * reference
}

fn candidate(s: &Sample) -> bool {
    s.status == Status::Ok
        && s.phase == ctxbench_schema::record::Phase::Cold
        && !s.cache_verified
        && s.ttft_ms.is_some()
}

/// Indices of the samples the rule catches over a whole run (flagged ones included), from
/// the results alone.
pub fn suspects(samples: &[Sample]) -> HashSet<usize> {
    let mut by_len: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        if s.status == Status::Ok && s.phase == ctxbench_schema::record::Phase::Cold {
            by_len.entry(s.context_tokens).or_default().push(i);
        }
    }
    let mut out = HashSet::new();
    let mut shorter_median: Option<f64> = None;
    for idx in by_len.values() {
        let unverified: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| candidate(&samples[i]))
            .collect();
        for &i in idx {
            let s = &samples[i];
            let flagged = s.flags.iter().any(|f| f == FLAG);
            let caught = candidate(s) && {
                let others: Vec<f64> = unverified
                    .iter()
                    .filter(|&&j| j != i)
                    .filter_map(|&j| samples[j].ttft_ms)
                    .collect();
                is_suspect(s.ttft_ms.unwrap_or(0.0), &others, shorter_median)
            };
            if flagged || caught {
                out.insert(i);
            }
        }
        let kept: Vec<f64> = idx
            .iter()
            .filter(|i| !out.contains(i) && samples[**i].usable())
            .filter_map(|&i| samples[i].ttft_ms)
            .collect();
        if let Some(m) = crate::stats::spread::Spread::of(kept).map(|s| s.median) {
            shorter_median = Some(m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_needs_a_four_fold_gap() {
        assert!(is_suspect(11.0, &[2046.0], None));
        assert!(!is_suspect(600.0, &[2046.0], None));
        assert!(is_suspect(11.0, &[], Some(100.0)), "shorter length");
        assert!(!is_suspect(11.0, &[], None), "nothing to compare with");
        // The slowest other sample is the reference: a majority of hits cannot hide.
        assert!(is_suspect(11.0, &[2046.0, 11.0, 11.0, 11.0], None));
        assert!(!is_suspect(2046.0, &[11.0, 11.0], None));
    }

    #[test]
    fn the_boundary_is_a_quarter_of_the_reference_so_a_half_hit_is_not_caught() {
        let cold = 2000.0;
        // At ¼ exactly: kept; just below: caught.
        assert!(!is_suspect(FACTOR * cold, &[cold], None));
        assert!(is_suspect(FACTOR * cold - 0.1, &[cold], None));
        // A reuse of 80% of the prompt (TTFT ≈ 0.2 × cold) is caught…
        assert!(is_suspect(0.2 * cold, &[cold], None));
        // …a reuse of half (TTFT ≈ 0.5 × cold) is not: the rule's stated limit.
        assert!(!is_suspect(0.5 * cold, &[cold], None));
        // Why not lower the bar: honest cold samples 2× apart on a busy host (and one at
        // 0.4× of a stalled one) must not be flagged.
        assert!(!is_suspect(1000.0, &[2000.0, 1200.0], None));
        assert!(!is_suspect(800.0, &[2000.0], Some(700.0)));
        // The shorter length's median is a floor too: a half-hit 4k sample (≈ the 2k cold
        // TTFT) is above it, so it cannot catch partial hits either.
        assert!(!is_suspect(1100.0, &[], Some(1000.0)));
    }
}
