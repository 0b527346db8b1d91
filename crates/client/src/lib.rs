//! The servers ctxbench speaks to: one module per server family (detection, capabilities,
//! protocol, cache policy, `/metrics` vocabulary, busy-state readers) behind the `Backend`
//! and `Family` traits, the HTTP client, the streaming driver and the probe.
#![warn(missing_docs)]

pub mod metrics;
pub mod probe;

pub mod backend;
pub mod busy;
pub mod dynamo;
pub mod event;
pub mod family;
pub mod http;
pub mod llamacpp;
pub mod loopback;
pub mod ndjson;
pub mod ollama;
pub mod openai;
pub mod router;
pub mod scrape;
pub mod sglang;
pub mod slots;
pub mod sse;
pub mod stream;
pub mod textprompt;
pub mod tgi;
pub mod timings;
pub mod tokenize;
pub mod vllm;

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod robustness_tests;

pub use backend::{
    Backend, BackendKind, GenOutcome, GenRequest, Negotiated, OnceOutcome, Timeouts,
};
pub use backend::{StreamStats, MAX_TOKEN_TIMES};
pub use ctxbench_schema::fingerprint::Generated;
pub use ctxbench_schema::record::{Counts, ServerTimings, SpecStats};
pub use family::{CapacityFlags, Family, MetricsVocabulary, ServerProfile};
pub use http::Http;
pub use scrape::Scraper;

/// Every server family, in detection order: the first whose detector recognises the server
/// names it, so the generic OpenAI family comes last.
pub static FAMILIES: &[&dyn Family] = &[
    &llamacpp::Family,
    &sglang::Family,
    &vllm::Family,
    &tgi::Family,
    &ollama::Family,
    &openai::Family,
];

/// The family that speaks `kind`; `None` for `auto`.
pub fn family(kind: BackendKind) -> Option<&'static dyn Family> {
    FAMILIES.iter().copied().find(|f| f.kind() == kind)
}

/// The family a recorded server kind (`server_kind` in a results header) names, matched as
/// the capacity advice always matched it: case-insensitively, the family's server name
/// contained in it; `None` for a kind no family names.
pub fn family_of_server(server_kind: &str) -> Option<&'static dyn Family> {
    let kind = server_kind.to_ascii_lowercase();
    FAMILIES
        .iter()
        .copied()
        .find(|f| kind.contains(&f.id().server.to_ascii_lowercase()))
}

/// The header's `server` for a probed profile, with the capacity advice of the family its
/// server kind names.
pub fn server_info(p: &ServerProfile) -> ctxbench_schema::record::ServerInfo {
    let mut info = ctxbench_schema::record::ServerInfo::from(p);
    info.capacity_flags = family_of_server(&p.server_kind)
        .map(|f| f.capacity_flags())
        .filter(|f| *f != CapacityFlags::default());
    info
}

/// The families' `/metrics` vocabularies in the order a page is read: vLLM's first (its
/// cache counters before SGLang's, its `spec_decode_*` before llama.cpp's copy of them),
/// then detection order. A page carries one server's names, so the order only settles a
/// page that mixes two.
/// The counter names (substrings) kept in a sample's `/metrics` deltas: the generic token
/// counts and every family's own.
pub fn kept_metric_names() -> Vec<&'static str> {
    let mut v = crate::metrics::GENERIC_KEEP.to_vec();
    for m in metrics_vocabularies() {
        v.extend(
            m.kept()
                .iter()
                .filter(|k| !v.contains(k))
                .collect::<Vec<_>>(),
        );
    }
    v
}

/// Every family's `/metrics` vocabulary, in the order their readings are tried.
pub fn metrics_vocabularies() -> impl Iterator<Item = &'static dyn MetricsVocabulary> {
    let mut families = FAMILIES.to_vec();
    // A stable sort: vLLM first, the rest keep their order.
    families.sort_by_key(|f| f.kind() != BackendKind::Vllm);
    // Dynamo's frontend is spoken to as a generic OpenAI server, but its page has names of
    // its own (`dynamo_frontend_*`), read last.
    let dynamo: &'static dyn MetricsVocabulary = &dynamo::Metrics;
    families
        .into_iter()
        .filter_map(|f| f.metrics())
        .chain(std::iter::once(dynamo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_advice_is_the_recognised_familys_and_none_for_a_family_without_advice() {
        let flags = |kind: &str| family_of_server(kind).map(|f| f.capacity_flags());
        let llama = flags("llama.cpp").unwrap_or_default();
        assert!(llama.slots.as_deref().is_some_and(|f| f.contains("-np")));
        let vllm = flags("vllm").unwrap_or_default();
        assert_eq!(
            vllm.kv_pool.as_deref(),
            Some("--gpu-memory-utilization or --num-gpu-blocks-override")
        );
        let sglang = flags("sglang").unwrap_or_default();
        assert!(sglang
            .kv_pool
            .as_deref()
            .is_some_and(|f| f.contains("--max-total-tokens")));
        for kind in [
            "tgi",
            "openai-compatible",
            "a server ctxbench does not know",
        ] {
            assert_eq!(
                flags(kind).unwrap_or_default(),
                CapacityFlags::default(),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_page_mixing_two_families_names_is_read_vllm_first() {
        let d = std::collections::BTreeMap::from([
            ("sglang:prompt_tokens_total".to_owned(), 100.0),
            ("sglang:cached_tokens_total".to_owned(), 7.0),
            ("vllm:prefix_cache_hits_total".to_owned(), 0.0),
            ("vllm:prefix_cache_queries_total".to_owned(), 100.0),
            ("llamacpp:spec_decode_num_drafts_total".to_owned(), 4.0),
            (
                "llamacpp:spec_decode_num_accepted_tokens_total".to_owned(),
                2.0,
            ),
            ("vllm:spec_decode_num_drafts_total".to_owned(), 0.0),
            ("vllm:spec_decode_num_accepted_tokens_total".to_owned(), 0.0),
        ]);
        let evidence = metrics_vocabularies().find_map(|v| v.cache_evidence(&d));
        assert_eq!(evidence, Some((0.0, 100.0)), "vLLM's counters first");
        let spec = metrics_vocabularies().find_map(|v| v.spec(&d));
        assert_eq!(spec, Some(None), "vLLM's zero drafts end the search");
    }

    #[test]
    fn the_header_records_the_familys_capacity_advice_and_none_without_one() {
        let mut p = ServerProfile::new("http://h:1".into(), BackendKind::Openai);
        p.server_kind = "vllm".into();
        let f = server_info(&p).capacity_flags.unwrap();
        assert!(f.kv_pool.unwrap().contains("--gpu-memory-utilization"));
        p.server_kind = "tgi".into();
        assert_eq!(server_info(&p).capacity_flags, None);
    }

    #[test]
    fn a_recorded_server_kind_names_its_family() {
        let kind = |k: &str| family_of_server(k).map(|f| f.kind());
        assert_eq!(kind("llama.cpp"), Some(BackendKind::Llamacpp));
        assert_eq!(kind("SGLang"), Some(BackendKind::Sglang));
        assert_eq!(kind("vllm"), Some(BackendKind::Vllm));
        assert_eq!(kind("openai-compatible"), Some(BackendKind::Openai));
        assert_eq!(kind(""), None);
    }
}
