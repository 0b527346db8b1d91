//! Whether a server is working on requests, as each family's server says it: the types the
//! families declare their busy signals with, and the one read the idle guard makes of them.
//! What each endpoint means is its family's (`llamacpp::SLOTS`, `sglang::LOADS`); this module
//! only fetches and hands the answer to the family's parser.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::http::Http;

use crate::scrape::Scraper;
use ctxbench_schema::error::ClientError;

/// Where a family's server says whether it is working on requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusySource {
    /// A JSON endpoint of the server's own (llama.cpp `/slots`, SGLang `/v1/loads`), read by
    /// its family's parser.
    Endpoint(&'static BusyEndpoint),
    /// Prometheus gauges on the metrics endpoint whose sum is the requests running or
    /// waiting (vLLM `vllm:num_requests_running` + `vllm:num_requests_waiting`).
    MetricsGauges(&'static [&'static str]),
}

/// A family's JSON endpoint that tells how busy its server is.
pub struct BusyEndpoint {
    /// The path (and query) to GET.
    pub path: &'static str,
    /// What it reads, for the header and messages.
    pub describe: &'static str,
    /// Reads one answer; `None`: not the shape the family knows.
    pub parse: fn(&Value) -> Option<Reading>,
    /// What is wrong with an answer `parse` refused.
    pub malformed: &'static str,
    /// What a non-200 status means on this server.
    pub refused: fn(u16) -> &'static str,
}

impl std::fmt::Debug for BusyEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.path)
    }
}

// One endpoint per path: comparing the paths, not the parser functions' addresses.
impl PartialEq for BusyEndpoint {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}
impl Eq for BusyEndpoint {}

impl BusySource {
    /// What this source reads, for the header and messages.
    pub fn describe(&self) -> String {
        match self {
            BusySource::Endpoint(e) => e.describe.to_owned(),
            BusySource::MetricsGauges(names) => format!("/metrics gauges {}", names.join(" + ")),
        }
    }
}

/// What a server's counter of finished work counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedUnit {
    /// Finished requests (vLLM `request_success_total`, SGLang `num_requests_total`).
    Requests,
    /// Generated tokens (llama.cpp `tokens_predicted_total`, which counts no requests).
    GeneratedTokens,
}

/// Work the server finished over a sample's counter deltas, server-wide.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Served {
    /// The counter read.
    pub counter: &'static str,
    /// What it counts.
    pub unit: ServedUnit,
    /// Its increase over the sample.
    pub count: f64,
}

/// One reading of the server's busy state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Requests running or waiting.
    pub active: u64,
    /// llama.cpp: the task each slot last took (slot id → task id); empty elsewhere.
    pub tasks: BTreeMap<u64, u64>,
}

/// The sum of the named gauges on a metrics page; `None` when none is there.
pub fn gauge_sum(snap: &crate::metrics::Snapshot, names: &[&str]) -> Option<u64> {
    let mut found = false;
    let mut sum = 0.0;
    for (name, _, v) in &snap.gauges {
        if names.contains(&name.as_str()) {
            found = true;
            sum += v;
        }
    }
    found.then_some(sum.max(0.0).round() as u64)
}

/// Reads `source` once on `http`'s server (gauges through `scraper`).
pub async fn read(
    http: &Http,
    source: BusySource,
    scraper: Option<&Scraper>,
) -> Result<Reading, ClientError> {
    let timeout = Duration::from_secs(10);
    let malformed = |endpoint: &str, detail: &str| ClientError::Malformed {
        endpoint: endpoint.to_owned(),
        detail: detail.to_owned(),
    };
    match source {
        BusySource::Endpoint(e) => {
            let (status, body) = http.get_probe(e.path, timeout).await?;
            match (status, body) {
                (200, Some(v)) => (e.parse)(&v).ok_or_else(|| malformed(e.path, e.malformed)),
                (s, _) => Err(ClientError::Http {
                    endpoint: e.path.to_owned(),
                    status: s,
                    message: (e.refused)(s).to_owned(),
                }),
            }
        }
        BusySource::MetricsGauges(names) => {
            let Some(m) = scraper else {
                return Err(malformed("/metrics", "metrics are off"));
            };
            let snap = m.scrape().await?;
            let active = gauge_sum(&snap, names)
                .ok_or_else(|| malformed("/metrics", &format!("none of {}", names.join(", "))))?;
            Ok(Reading {
                active,
                tasks: BTreeMap::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slots_read_busy_slots_and_their_tasks() {
        let v = json!([
            {"id": 0, "is_processing": true, "id_task": 12},
            {"id": 1, "is_processing": false, "id_task": 7},
            {"id": 2, "is_processing": false}
        ]);
        let r = crate::llamacpp::parse_slots(&v).unwrap();
        assert_eq!(r.active, 1);
        assert_eq!(r.tasks, BTreeMap::from([(0, 12), (1, 7)]));
        assert!(crate::llamacpp::parse_slots(&json!({"error": "x"})).is_none());
    }

    #[test]
    fn sglang_loads_add_running_and_waiting_over_ranks() {
        let v = json!({"loads": [
            {"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 2},
            {"dp_rank": 1, "num_running_reqs": 0, "num_waiting_reqs": 0}
        ]});
        assert_eq!(crate::sglang::parse_loads(&v).unwrap().active, 3);
        assert!(crate::sglang::parse_loads(&json!({"loads": [{}]})).is_none());
    }

    #[test]
    fn vllm_gauges_are_summed() {
        let page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1.0\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 2.0\n";
        let snap = crate::metrics::parse(page).unwrap();
        let names = &["vllm:num_requests_running", "vllm:num_requests_waiting"];
        assert_eq!(gauge_sum(&snap, names), Some(3));
        assert_eq!(gauge_sum(&snap, &["sglang:num_running_reqs"]), None);
    }
}
