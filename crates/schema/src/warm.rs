//! Warm context at depth: the types the warm modes record (`--mode append`, `conversation`,
//! `tiers`) and the rule that proves a sample was served from the cache — the mirror image
//! of the cold rule: a warm sample's server-reported cached count must reach the cached
//! prefix, within the tokens the server always recomputes; one that does not is flagged
//! `cache_miss` and kept out of the warm summaries. Pure: no I/O.

use crate::record::{Flag, Sample, Status};

pub use crate::record::warm_plan::{MissCause, Retention, Tier, WarmConfig, WarmInfo, WarmMode};

/// Judges a warm sample's reuse from its server-reported cached count: below
/// [`WarmInfo::least_cached`] is a miss (flag `cache_miss`), no count at all is unproven
/// (flag `cache_unverified`, already set by the cold rule's common flags).
pub fn judge(s: &mut Sample) {
    // The cold rule's verdicts mean nothing for a sample that reuses on purpose.
    s.contaminated = false;
    s.prefill_tokens_per_s = None;
    s.flags
        .retain(|f| *f != Flag::Contaminated && *f != Flag::CachedBeforeNonceEnd);
    let Some(w) = &s.warm else { return };
    if s.status != Status::Ok {
        return;
    }
    if let Some(c) = s.cached_tokens {
        if c < w.least_cached() {
            s.flags.push(Flag::CacheMiss);
        }
    }
}

/// Usable for the warm summaries: completed, reuse proven (a cached count that reaches the
/// prefix), of the right length, its timings its own (no foreign load, not held back).
pub fn usable(s: &Sample) -> bool {
    s.status == Status::Ok
        && s.warm.is_some()
        && s.cached_tokens.is_some()
        && !s.has(&Flag::CacheMiss)
        && s.length_ok != Some(false)
        && s.clean()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warm(cached: Option<u64>) -> Sample {
        Sample {
            cached_tokens: cached,
            prompt_tokens: Some(2100),
            length_ok: Some(true),
            contaminated: true,
            flags: vec![Flag::Contaminated],
            warm: Some(WarmInfo {
                prefix_tokens: 2000,
                new_tokens: 100,
                expected_cached: 2000,
                allowance: 1,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_warm_sample_is_a_hit_only_when_its_cached_count_reaches_the_prefix() {
        let mut s = warm(Some(2000));
        judge(&mut s);
        assert!(usable(&s) && !s.contaminated && s.flags.is_empty(), "{s:?}");
        let mut s = warm(Some(1999));
        judge(&mut s);
        assert!(usable(&s), "within the allowance of 1");
        let mut s = warm(Some(1998));
        judge(&mut s);
        assert!(s.has(&Flag::CacheMiss) && !usable(&s));
        let mut s = warm(Some(0));
        judge(&mut s);
        assert!(
            s.has(&Flag::CacheMiss) && !usable(&s),
            "the negative control"
        );
        let mut s = warm(None);
        judge(&mut s);
        assert!(!usable(&s), "no count: reuse not proven");
    }
}
