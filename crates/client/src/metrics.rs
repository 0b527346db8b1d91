//! Prometheus `/metrics`: scraped before and after each sample; counter deltas are stored with
//! the sample (prompt, cached and speculative counters). What a server's names mean is its
//! family's (`client::MetricsVocabulary`). Parsing is `prometheus-parse`'s; fetching is
//! `client::Scraper`'s, so this module is pure.

use std::collections::BTreeMap;

use prometheus_parse::{Scrape, Value};

/// Counter names (substrings) any server may use that are worth keeping per sample: token
/// counts. The families add their own (`MetricsVocabulary::kept`: cache hits, speculative
/// decoding, preemptions); everything else on a busy server's page is noise for one request.
pub const GENERIC_KEEP: [&str; 3] = ["prompt_tokens", "generation_tokens", "skipped_tokens"];

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

/// Deltas of the counters whose names contain one of `keep`, `after − before`, as a JSON
/// object.
pub fn deltas(before: &Snapshot, after: &Snapshot, keep: &[&str]) -> BTreeMap<String, f64> {
    after
        .counters
        .iter()
        .filter(|(k, _)| keep.iter().any(|m| k.contains(m)))
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

/// Accepted drafts per draft position from `*spec_decode_num_accepted_tokens_per_pos*`
/// deltas (vLLM, and llama.cpp builds that use vLLM's names), summed over other labels
/// (engines), with the verify steps that carried a draft (`*spec_decode_num_drafts*`).
/// `None` when the server does not count per position or made no draft.
pub fn accepted_per_position(d: &BTreeMap<String, f64>) -> Option<(Vec<u64>, u64)> {
    let mut per: BTreeMap<usize, f64> = BTreeMap::new();
    let mut drafts = 0.0;
    for (k, v) in d {
        if k.contains("spec_decode_num_accepted_tokens_per_pos") {
            let pos = k
                .split_once("position=\"")
                .and_then(|(_, r)| r.split('"').next())
                .and_then(|p| p.parse::<usize>().ok())?;
            *per.entry(pos).or_default() += v;
        } else if k.contains("spec_decode_num_drafts") {
            drafts += v;
        }
    }
    if per.is_empty() || drafts <= 0.0 {
        return None;
    }
    // Positions are dense from 0 (a missing one would be a zero count).
    let n = per.keys().max().map_or(0, |m| m + 1);
    let counts = (0..n)
        .map(|i| per.get(&i).copied().unwrap_or(0.0).max(0.0) as u64)
        .collect();
    Some((counts, drafts as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_position_counts_sum_over_engines_and_fill_gaps() {
        let mut d = BTreeMap::new();
        let key = |e: u32, p: u32| {
            format!("vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"{e}\",position=\"{p}\"}}")
        };
        d.insert(key(0, 0), 7.0);
        d.insert(key(1, 0), 1.0);
        d.insert(key(0, 2), 2.0);
        d.insert(
            "vllm:spec_decode_num_drafts_total{engine=\"0\"}".into(),
            10.0,
        );
        assert_eq!(accepted_per_position(&d), Some((vec![8, 0, 2], 10)));
        d.insert(
            "vllm:spec_decode_num_drafts_total{engine=\"0\"}".into(),
            0.0,
        );
        assert_eq!(accepted_per_position(&d), None, "no draft, no rates");
    }

    #[test]
    fn deltas_keep_the_counters_asked_for_and_drop_the_rest() {
        let page = |n: u32| {
            format!("# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{engine=\"0\"}} {n}.0\n# TYPE vllm:other_total counter\nvllm:other_total 1.0\n")
        };
        let (a, b) = (parse(&page(1)).unwrap(), parse(&page(3)).unwrap());
        let d = deltas(&a, &b, &["num_preemptions"]);
        assert_eq!(
            d.get("vllm:num_preemptions_total{engine=\"0\"}"),
            Some(&2.0),
            "{d:?}"
        );
        assert!(
            d.keys().all(|k| !k.contains("other")),
            "noise dropped: {d:?}"
        );
    }
}
