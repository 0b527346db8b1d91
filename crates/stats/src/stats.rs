//! Summaries of samples. No I/O here.

pub mod bootstrap;
pub mod cachehit;
pub mod drift;
pub mod fit;
pub mod metric;
pub mod noise;
pub mod precision;
pub mod predicted;
pub mod prompts;
pub mod quantile_target;
pub mod retention;
pub mod significance;
pub mod speculation;
pub mod spread;
pub mod tail;
pub mod warm;

pub use spread::{quantile, Spread};

use serde::Serialize;

use ctxbench_schema::record::{Flag, Phase, Sample, ServerTimings, Status};

/// Everything the summary table shows for one context length.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PointSummary {
    /// Target context length.
    pub context_tokens: u64,
    /// Samples recorded at this point.
    pub samples: usize,
    /// Samples used for the statistics below (ok, cold, right length).
    pub usable: usize,
    /// Samples that hit the prefix cache (excluded).
    pub contaminated: usize,
    /// Samples whose server-reported length was off (excluded).
    pub length_mismatch: usize,
    /// Samples without a cached-token count from the server.
    pub cache_unverified: usize,
    /// Unverified samples whose TTFT the cache-hit rule caught (excluded; see `cachehit`).
    pub suspected_cache_hit: usize,
    /// Failed requests.
    pub failed: usize,
    /// Client TTFT (ms).
    pub ttft_ms: Option<Spread>,
    /// Client prefill rate (tok/s).
    pub prefill_tokens_per_s: Option<Spread>,
    /// Client decode rate (tok/s).
    pub decode_tokens_per_s: Option<Spread>,
    /// Client ms per decode step (per token).
    pub ms_per_step: Option<Spread>,
    /// Server prompt processing time (ms).
    pub server_prompt_ms: Option<Spread>,
    /// Server prefill rate (tok/s).
    pub server_prefill_tokens_per_s: Option<Spread>,
    /// Server decode rate (tok/s).
    pub server_decode_tokens_per_s: Option<Spread>,
    /// Client TTFT minus server prompt time (ms): network, queueing, serialization.
    pub ttft_overhead_ms: Option<Spread>,
    /// Client decode rate ÷ the server's own, per sample where the server reports one
    /// (every usable sample, the disagreeing ones included: this is where they show).
    pub decode_client_over_server: Option<Spread>,
    /// Samples whose client decode rate strays from the server's by more than
    /// `sample::DISAGREE_MARGIN` (their decode is left out of the decode columns).
    pub client_server_disagree: usize,
    /// Speculative acceptance length (tokens per verify step).
    pub spec_accept_length: Option<Spread>,
    /// Speculative acceptance rate (accepted ÷ proposed drafts).
    pub spec_accept_rate: Option<Spread>,
    /// Client ms per verify step.
    pub ms_per_verify_step: Option<Spread>,
    /// Two-point samples with t_B ≤ t_A (no decode rate; the reason is in each sample).
    pub two_point_inverted: usize,
    /// Cold samples whose tokens arrived in a burst: TTFT kept, no decode rate.
    pub coalesced: usize,
    /// Samples another client's work overlapped (`foreign_load`): excluded.
    pub foreign_load: usize,
    /// Samples whose stream was held back to its end (`held_back_stream`): no TTFT, no
    /// decode rate, excluded.
    pub held_back: usize,
    /// Samples whose timings the server's own contradict (`impossible_timing`): no TTFT,
    /// prefill or decode figure, excluded.
    pub impossible: usize,
    /// Warm decode-at-depth samples (prefix reused on purpose), kept apart from the cold ones.
    pub warm: usize,
    /// Decode rate of the warm samples (tok/s).
    pub warm_decode_tokens_per_s: Option<Spread>,
    /// ms per token of the warm samples.
    pub warm_ms_per_step: Option<Spread>,
    /// p90/p95/p99 of the client TTFT (ms) with their order-statistic intervals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_tails: Option<tail::Tails>,
    /// The same for ms per decode step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_tails: Option<tail::Tails>,
}

impl PointSummary {
    /// What was left out of this point's statistics, for the "excluded" column.
    pub fn exclusions(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.contaminated > 0 {
            v.push(format!("{} cached", self.contaminated));
        }
        if self.suspected_cache_hit > 0 {
            v.push(format!("{} suspected cache hit", self.suspected_cache_hit));
        }
        if self.length_mismatch > 0 {
            v.push(format!("{} wrong length", self.length_mismatch));
        }
        if self.failed > 0 {
            v.push(format!("{} failed", self.failed));
        }
        if self.two_point_inverted > 0 {
            v.push(format!("{} t_B≤t_A (no decode)", self.two_point_inverted));
        }
        if self.coalesced > 0 {
            v.push(format!("{} bursty (no decode)", self.coalesced));
        }
        if self.foreign_load > 0 {
            v.push(format!("{} foreign load", self.foreign_load));
        }
        if self.held_back > 0 {
            v.push(format!("{} held back (no TTFT)", self.held_back));
        }
        if self.impossible > 0 {
            v.push(format!("{} impossible", self.impossible));
        }
        if self.client_server_disagree > 0 {
            v.push(format!(
                "{} client≠server decode",
                self.client_server_disagree
            ));
        }
        v
    }
}

/// Summarises samples per context length, ascending.
pub fn summarize(samples: &[Sample]) -> Vec<PointSummary> {
    let mut contexts: Vec<u64> = samples.iter().map(|s| s.context_tokens).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let suspects = cachehit::suspects(samples);
    let suspect = |s: &Sample| {
        samples
            .iter()
            .position(|x| std::ptr::eq(x, s))
            .is_some_and(|i| suspects.contains(&i))
    };
    contexts
        .into_iter()
        .map(|c| {
            let at: Vec<&Sample> = samples.iter().filter(|s| s.context_tokens == c).collect();
            let ok: Vec<&Sample> = at
                .iter()
                .copied()
                .filter(|s| s.usable() && !suspect(s))
                .collect();
            let warm: Vec<&Sample> = at
                .iter()
                .copied()
                .filter(|s| s.phase == Phase::Warm && s.status == Status::Ok && s.clean())
                .collect();
            let cold: Vec<&Sample> = at
                .iter()
                .copied()
                .filter(|s| s.phase != Phase::Warm)
                .collect();
            let at = cold;
            // A decode rate the server's own contradicts is not averaged in, nor one of an
            // output that ended early.
            let decode_ok: Vec<&Sample> = ok
                .iter()
                .copied()
                .filter(|s| !s.has(&Flag::ClientServerDisagree))
                // An output that ended early (a server without EOS control) decoded fewer
                // steps than asked: its rate is not comparable, so it is not counted.
                .filter(|s| !s.has(&Flag::ShortOutput))
                .collect();
            let server = |f: fn(&ServerTimings) -> Option<f64>| {
                Spread::of(ok.iter().filter_map(|s| s.server.as_ref().and_then(f)))
            };
            PointSummary {
                context_tokens: c,
                samples: at.len(),
                usable: ok.len(),
                contaminated: at.iter().filter(|s| s.contaminated).count(),
                length_mismatch: at.iter().filter(|s| s.length_ok == Some(false)).count(),
                suspected_cache_hit: at.iter().filter(|s| suspect(s)).count(),
                cache_unverified: at
                    .iter()
                    .filter(|s| s.status == Status::Ok && !s.cache_verified)
                    .count(),
                // A failure later retried successfully (--resume) no longer counts.
                failed: at
                    .iter()
                    .filter(|s| {
                        s.status == Status::Failed
                            && !at.iter().any(|o| o.status == Status::Ok && o.rep == s.rep)
                    })
                    .count(),
                ttft_ms: Spread::of(ok.iter().filter_map(|s| s.ttft_ms)),
                prefill_tokens_per_s: Spread::of(ok.iter().filter_map(|s| s.prefill_tokens_per_s)),
                decode_tokens_per_s: Spread::of(
                    decode_ok.iter().filter_map(|s| s.decode_tokens_per_s),
                ),
                ms_per_step: Spread::of(decode_ok.iter().filter_map(|s| s.ms_per_step)),
                server_prompt_ms: server(|t| t.prompt_ms),
                server_prefill_tokens_per_s: server(|t| t.prompt_per_second),
                server_decode_tokens_per_s: server(|t| t.predicted_per_second),
                decode_client_over_server: Spread::of(
                    ok.iter()
                        .filter_map(|s| ctxbench_schema::record::decode_ratio(s)),
                ),
                client_server_disagree: at
                    .iter()
                    .filter(|s| s.has(&Flag::ClientServerDisagree))
                    .count(),
                ttft_overhead_ms: Spread::of(
                    ok.iter()
                        .filter_map(|s| Some(s.ttft_ms? - s.server.as_ref()?.prompt_ms?)),
                ),
                spec_accept_length: Spread::of(ok.iter().filter_map(|s| s.spec_accept_length)),
                spec_accept_rate: Spread::of(ok.iter().filter_map(|s| s.spec_accept_rate)),
                ms_per_verify_step: Spread::of(ok.iter().filter_map(|s| s.ms_per_verify_step)),
                two_point_inverted: at.iter().filter(|s| s.has(&Flag::TwoPointInverted)).count(),
                coalesced: at.iter().filter(|s| s.has(&Flag::CoalescedTokens)).count(),
                foreign_load: at.iter().filter(|s| s.has(&Flag::ForeignLoad)).count(),
                held_back: at.iter().filter(|s| s.has(&Flag::HeldBackStream)).count(),
                impossible: at.iter().filter(|s| s.has(&Flag::ImpossibleTiming)).count(),
                warm: warm.len(),
                warm_decode_tokens_per_s: Spread::of(
                    warm.iter().filter_map(|s| s.decode_tokens_per_s),
                ),
                warm_ms_per_step: Spread::of(warm.iter().filter_map(|s| s.ms_per_step)),
                ttft_tails: tail::Tails::of(ok.iter().filter_map(|s| s.ttft_ms)),
                step_tails: tail::Tails::of(decode_ok.iter().filter_map(|s| s.ms_per_step)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample(c: u64, ttft: f64, contaminated: bool) -> Sample {
        Sample {
            run_id: "r".into(),
            context_tokens: c,
            rep: 0,
            phase: Phase::Cold,
            status: Status::Ok,
            at: "t".into(),
            prompt_tokens_sent: c,
            prompt_tokens: Some(c),
            length_ok: Some(true),
            cached_tokens: Some(if contaminated { c - 1 } else { 0 }),
            cache_verified: true,
            contaminated,
            ttft_ms: Some(ttft),
            prefill_tokens_per_s: Some(c as f64 / ttft * 1000.0),
            decode_tokens_per_s: Some(100.0),
            ms_per_step: Some(10.0),
            output_tokens: Some(32),
            token_chunks: Some(32),
            e2e_ms: Some(ttft + 310.0),
            finish_reason: Some("limit".into()),
            flags: vec![],
            server: Some(ServerTimings {
                source: "test".into(),
                prompt_ms: Some(ttft - 2.0),
                ..Default::default()
            }),
            method: ctxbench_schema::record::Method::Stream,
            ..Default::default()
        }
    }

    #[test]
    fn quantiles_interpolate() {
        let s = Spread::of([4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!((s.min, s.max), (1.0, 4.0));
        assert_eq!(s.p25, 1.75);
        assert!(Spread::of([f64::NAN]).is_none());
    }

    #[test]
    fn contaminated_samples_are_counted_but_not_averaged() {
        let samples = vec![
            sample(1024, 50.0, false),
            sample(1024, 52.0, false),
            sample(1024, 1.0, true),
            sample(2048, 120.0, false),
        ];
        let s = summarize(&samples);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].samples, 3);
        assert_eq!(s[0].usable, 2);
        assert_eq!(s[0].contaminated, 1);
        assert_eq!(s[0].ttft_ms.unwrap().median, 51.0);
        assert_eq!(s[0].ttft_overhead_ms.unwrap().median, 2.0);
        assert_eq!(s[1].context_tokens, 2048);
    }

    #[test]
    fn failed_and_mismatched_samples_are_excluded() {
        let mut a = sample(1024, 50.0, false);
        a.status = Status::Failed;
        a.ttft_ms = None;
        let mut b = sample(1024, 60.0, false);
        b.length_ok = Some(false);
        b.rep = 2;
        let mut retried = sample(1024, 80.0, false);
        retried.status = Status::Failed;
        retried.rep = 1;
        let mut c = sample(1024, 70.0, false);
        c.rep = 1;
        let s = summarize(&[a, b, retried, c]);
        assert_eq!(
            s[0].failed, 1,
            "a failure retried successfully must not count"
        );
        assert_eq!(s[0].length_mismatch, 1);
        assert_eq!(s[0].usable, 1);
        assert_eq!(s[0].ttft_ms.unwrap().median, 70.0);
    }

    #[test]
    fn disagreeing_decode_is_shown_per_point_and_not_averaged() {
        let mut a = sample(1024, 50.0, false);
        a.server.as_mut().unwrap().predicted_per_second = Some(100.0);
        let mut b = sample(1024, 52.0, false);
        b.rep = 1;
        b.decode_tokens_per_s = Some(150.0);
        b.server.as_mut().unwrap().predicted_per_second = Some(100.0);
        b.flags.push(Flag::ClientServerDisagree);
        let s = summarize(&[a, b]);
        assert_eq!(s[0].usable, 2);
        assert_eq!(s[0].client_server_disagree, 1);
        assert_eq!(s[0].decode_tokens_per_s.unwrap().median, 100.0);
        assert_eq!(s[0].decode_client_over_server.unwrap().max, 1.5);
        assert!(s[0]
            .exclusions()
            .iter()
            .any(|e| e.contains("client≠server")));
    }

    #[test]
    fn warm_samples_are_summarised_apart_from_cold_ones() {
        let mut w = sample(1024, 1.0, false);
        w.phase = "warm".into();
        w.decode_tokens_per_s = Some(500.0);
        let s = summarize(&[sample(1024, 50.0, false), w]);
        assert_eq!((s[0].samples, s[0].usable, s[0].warm), (1, 1, 1));
        assert_eq!(s[0].ttft_ms.unwrap().median, 50.0);
        assert_eq!(s[0].decode_tokens_per_s.unwrap().median, 100.0);
        assert_eq!(s[0].warm_decode_tokens_per_s.unwrap().median, 500.0);
    }

    proptest::proptest! {
        #[test]
        fn median_lies_between_min_and_max(v in proptest::collection::vec(-1e9f64..1e9, 1..50)) {
            let s = Spread::of(v).unwrap();
            proptest::prop_assert!(s.min <= s.p25 && s.p25 <= s.median);
            proptest::prop_assert!(s.median <= s.p75 && s.p75 <= s.max);
        }
    }
}
