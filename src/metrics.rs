//! Prometheus `/metrics`: scraped before and after each sample; counter deltas are stored with
//! the sample (prompt, cached and speculative counters), and vLLM's speculative statistics are
//! read from them. Parsing is `prometheus-parse`'s; fetching is `client::Scraper`'s, so this
//! module is pure.

use std::collections::BTreeMap;

use prometheus_parse::{Scrape, Value};

use crate::record::SpecStats;

/// Counter names (substrings) worth keeping per sample: token counts, cache hits, spec
/// decoding. Everything else on a busy server's page is noise for one request.
const KEEP: [&str; 9] = [
    "prompt_tokens",
    "generation_tokens",
    "tokens_predicted",
    "cached_tokens",
    "prefix_cache",
    "spec_decode",
    "n_decode",
    "prompt_seconds",
    "skipped_tokens",
];

/// One scrape: counter series (`name{labels}` → value) and gauge series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Monotonic counters.
    pub counters: BTreeMap<String, f64>,
    /// Gauges, labels kept (vLLM's `cache_config_info` carries its values in labels).
    pub gauges: Vec<(String, BTreeMap<String, String>, f64)>,
}

/// Parses Prometheus text. Series named `*_total` count as counters even when the `# TYPE`
/// line names the family without the suffix (Python's client does that).
pub fn parse(text: &str) -> Result<Snapshot, String> {
    let scrape = Scrape::parse(text.lines().map(|l| Ok(escape_colons(l))))
        .map_err(|e| format!("not Prometheus text: {e}"))?;
    let mut snap = Snapshot::default();
    for mut s in scrape.samples {
        s.metric = s.metric.replace(COLON, ":");
        let labels: BTreeMap<String, String> = s
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match s.value {
            Value::Counter(v) => {
                snap.counters.insert(series_key(&s.metric, &labels), v);
            }
            Value::Untyped(v) if s.metric.ends_with("_total") => {
                snap.counters.insert(series_key(&s.metric, &labels), v);
            }
            Value::Gauge(v) | Value::Untyped(v) => snap.gauges.push((s.metric, labels, v)),
            _ => {}
        }
    }
    Ok(snap)
}

/// prometheus-parse reads metric names as `\w+`, but every inference server namespaces
/// its metrics with a colon (`vllm:`, `sglang:`, `llamacpp:`), which the exposition format
/// allows. Names are escaped before parsing and restored after; label values are untouched.
const COLON: &str = "__ctxbench_colon__";

fn escape_colons(line: &str) -> String {
    let (prefix, rest) = match line.strip_prefix('#') {
        Some(r) => {
            let r = r.trim_start();
            match r.split_once(char::is_whitespace) {
                Some((kw, name)) if kw == "HELP" || kw == "TYPE" => {
                    (format!("# {kw} "), name.trim_start())
                }
                _ => return line.to_owned(),
            }
        }
        None => (String::new(), line),
    };
    let end = rest
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(rest.len());
    format!(
        "{prefix}{}{}",
        rest[..end].replace(':', COLON),
        &rest[end..]
    )
}

fn series_key(name: &str, labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", l.join(","))
}

/// Deltas of the counters worth keeping, `after − before`, as a JSON object.
pub fn deltas(before: &Snapshot, after: &Snapshot) -> BTreeMap<String, f64> {
    after
        .counters
        .iter()
        .filter(|(k, _)| KEEP.iter().any(|m| k.contains(m)))
        .map(|(k, v)| {
            (
                k.clone(),
                v - before.counters.get(k).copied().unwrap_or(0.0),
            )
        })
        .collect()
}

/// Sums the deltas of one counter over its labels (e.g. per engine).
pub fn sum(d: &BTreeMap<String, f64>, name: &str) -> Option<f64> {
    let hits: Vec<f64> = d
        .iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| *v)
        .collect();
    (!hits.is_empty()).then(|| hits.iter().sum())
}

/// Speculative statistics from `spec_decode_*` counter deltas (vLLM `vllm:`, recent
/// llama.cpp `llamacpp:`): drafts = verify steps, length = 1 + accepted ÷ drafts.
pub fn spec_from_deltas(d: &BTreeMap<String, f64>) -> Option<SpecStats> {
    for prefix in ["vllm:", "llamacpp:"] {
        let get = |n: &str| sum(d, &format!("{prefix}spec_decode_num_{n}_total"));
        let drafts = get("drafts");
        let draft_tokens = get("draft_tokens");
        let accepted = get("accepted_tokens");
        if let (Some(v), Some(a)) = (drafts, accepted) {
            if v <= 0.0 {
                return None;
            }
            return Some(
                SpecStats {
                    source: format!("{prefix}spec_decode_* metric deltas"),
                    verify_steps: Some(v as u64),
                    draft_tokens: draft_tokens.map(|x| x as u64),
                    accepted_tokens: Some(a as u64),
                    accept_length: None,
                    accept_rate: None,
                }
                .derive(),
            );
        }
    }
    None
}

/// vLLM's KV pool in tokens: `vllm:cache_config_info` `num_gpu_blocks × block_size`.
pub fn vllm_kv_pool_tokens(s: &Snapshot) -> Option<u64> {
    s.gauges
        .iter()
        .find(|(n, _, _)| n == "vllm:cache_config_info")
        .and_then(|(_, l, _)| {
            let blocks: u64 = l.get("num_gpu_blocks")?.parse().ok()?;
            let size: u64 = l.get("block_size")?.parse().ok()?;
            Some(blocks * size)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM_BEFORE: &str = r#"# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="0"} 1.0
"#;

    #[test]
    fn vllm_counter_deltas_give_spec_stats_and_kv_pool() {
        let before = parse(VLLM_BEFORE).unwrap();
        let after = parse(
            &VLLM_BEFORE
                .replace("} 100.0", "} 1124.0")
                .replace(
                    "drafts_total{engine=\"0\",model_name=\"m\"} 10.0",
                    "drafts_total{engine=\"0\",model_name=\"m\"} 18.0",
                )
                .replace("} 40.0", "} 72.0")
                .replace("} 20.0", "} 44.0"),
        )
        .unwrap();
        let d = deltas(&before, &after);
        assert_eq!(
            d.get("vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"}"),
            Some(&1024.0)
        );
        let s = spec_from_deltas(&d).unwrap();
        assert_eq!(s.verify_steps, Some(8));
        assert_eq!(s.draft_tokens, Some(32));
        assert_eq!(s.accepted_tokens, Some(24));
        assert_eq!(s.accept_length, Some(4.0));
        assert_eq!(s.accept_rate, Some(0.75));
        assert_eq!(vllm_kv_pool_tokens(&before), Some(16000));
    }

    #[test]
    fn no_spec_counters_or_no_drafts_means_no_spec_stats() {
        let s = parse(VLLM_BEFORE).unwrap();
        assert!(spec_from_deltas(&deltas(&s, &s)).is_none());
        let plain =
            parse("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 5\n")
                .unwrap();
        assert_eq!(
            plain.counters.get("llamacpp:prompt_tokens_total"),
            Some(&5.0)
        );
        assert!(spec_from_deltas(&deltas(&plain, &plain)).is_none());
    }
}
