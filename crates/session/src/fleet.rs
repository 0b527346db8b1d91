//! The workers behind a router, read and flushed one by one. A router forwards `/slots` and
//! `/metrics` to one worker of its choosing, so the idle guard and the flush cannot go
//! through it: ctxbench reads each worker it can reach (the router's own list, and
//! `--worker URL`) before and after every sample, flushes each itself, and tells which
//! worker served the sample from the workers' own counters (llama-server: a slot taking a
//! new task, `llamacpp:tokens_predicted_total` rising). Work a worker did beyond the
//! sample's own (a request sent straight to it) flags the sample `foreign_load`.
//!
//! Judging is pure ([`judge`]); the reads go through [`Http`], one per worker.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use ctxbench_client::busy::Reading;
use ctxbench_client::Http;
use ctxbench_schema::record::WorkerFlush;

/// The counter a llama-server worker's generated tokens are read from.
const GENERATED: &str = "llamacpp:tokens_predicted_total";
const TIMEOUT: Duration = Duration::from_secs(10);

/// The workers ctxbench reads itself.
#[derive(Debug, Clone)]
pub struct Fleet {
    workers: Vec<(String, Http)>,
    /// Longest wait for every worker to be idle before a sample (`--idle-wait`).
    pub wait: Duration,
    /// Wait for idle and flag others' work (`false`: `--idle-check off`; the serving
    /// worker is still recorded).
    pub check: bool,
}

/// One worker's state at one moment; `None` fields could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerState {
    /// Its slots (llama-server `/slots`).
    pub busy: Option<Reading>,
    /// Tokens it has generated so far (`llamacpp:tokens_predicted_total`).
    pub generated: Option<f64>,
    /// Requests processing or waiting for a slot (`llamacpp:requests_processing` +
    /// `llamacpp:requests_deferred`): a request queued behind a finished one shows here
    /// before any slot takes it.
    pub queued: Option<u64>,
}

impl WorkerState {
    /// Requests the worker is running or holding, by whichever reading says more.
    fn active(&self) -> u64 {
        let slots = self.busy.as_ref().map_or(0, |r| r.active);
        slots.max(self.queued.unwrap_or(0))
    }
}

/// What the workers' states around a sample say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judged {
    /// The worker that served the sample, when exactly one did.
    pub served_by: Option<String>,
    /// How that was told, or why it could not be.
    pub how: String,
    /// Evidence of other work during the sample, one entry per sign.
    pub foreign: Vec<String>,
}

impl Fleet {
    /// The workers at `urls`, with the router's key (workers of a router that needs none
    /// take none).
    pub fn new(urls: &[String], api_key: Option<String>, wait: Duration) -> Result<Self, String> {
        let mut workers = Vec::new();
        for u in urls {
            let u = u.trim_end_matches('/');
            if workers.iter().any(|(w, _)| w == u) {
                continue;
            }
            workers.push((u.to_owned(), Http::new(u, api_key.clone(), None)?));
        }
        Ok(Fleet {
            workers,
            wait,
            check: true,
        })
    }

    /// The workers' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.workers.iter().map(|(u, _)| u.clone()).collect()
    }

    /// Keeps only the workers that answer `/slots` or `/metrics`; returns the others with
    /// why they cannot be read.
    pub async fn keep_readable(&mut self) -> Vec<String> {
        let states = self.read().await;
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        for ((u, h), s) in self.workers.drain(..).zip(states) {
            match s.busy.is_some() || s.generated.is_some() {
                true => kept.push((u, h)),
                false => dropped.push(u),
            }
        }
        self.workers = kept;
        dropped
    }

    /// Every worker's state now, in the workers' order.
    pub async fn read(&self) -> Vec<WorkerState> {
        let mut out = Vec::with_capacity(self.workers.len());
        for (_, h) in &self.workers {
            out.push(read_worker(h).await);
        }
        out
    }

    /// Waits until no worker is busy (re-read once [`crate::idle::SETTLE`] later after a
    /// busy one), at most `self.wait`; returns the states the sample starts from, how long
    /// it waited and whether the wait ran out.
    pub async fn wait_idle(&self) -> (Vec<WorkerState>, Duration, bool) {
        let start = Instant::now();
        let mut was_busy = false;
        loop {
            let states = self.read().await;
            let busy = states.iter().any(|s| s.active() > 0);
            if !self.check || (!busy && !was_busy) {
                return (states, start.elapsed(), false);
            }
            if start.elapsed() >= self.wait {
                return (states, start.elapsed(), busy);
            }
            was_busy = busy;
            let pause = match busy {
                true => Duration::from_millis(100),
                false => crate::idle::SETTLE,
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Flushes every worker itself (llama-server: erase each of its slots) and returns
    /// each worker's verdict.
    pub async fn flush(&self) -> Vec<WorkerFlush> {
        let mut out = Vec::new();
        for (u, h) in &self.workers {
            let slots = match h.get_probe("/slots", TIMEOUT).await {
                Ok((200, Some(Value::Array(a)))) => a.len() as u64,
                _ => 1,
            };
            let (ok, detail) = match ctxbench_client::llamacpp::erase_slots(h, slots).await {
                Ok(what) => (true, what),
                Err(e) => (false, e.to_string()),
            };
            out.push(WorkerFlush {
                worker: u.clone(),
                ok,
                detail,
            });
        }
        out
    }

    /// The slots of all workers together (llama-server `/slots` entries): the fleet's
    /// pool of requests that run at once. `None` when no worker lists its slots.
    pub async fn slots(&self) -> Option<u64> {
        let mut total = None;
        for (_, h) in &self.workers {
            if let Ok((200, Some(Value::Array(a)))) = h.get_probe("/slots", TIMEOUT).await {
                *total.get_or_insert(0) += a.len() as u64;
            }
        }
        total
    }

    /// The workers' family from their own answers: llama.cpp when a worker's `/props`
    /// carries `default_generation_settings` (the only family read per worker so far).
    pub async fn family(&self) -> Option<String> {
        for (_, h) in &self.workers {
            if let Ok((200, Some(v))) = h.get_probe("/props", TIMEOUT).await {
                if v.get("default_generation_settings").is_some() {
                    return Some("llama.cpp (the workers' own /props)".to_owned());
                }
            }
        }
        None
    }

    /// The smallest context any worker serves (llama-server `/props`
    /// `default_generation_settings.n_ctx`), with where it was read.
    pub async fn max_context(&self) -> Option<(u64, String)> {
        let mut least: Option<(u64, String)> = None;
        for (u, h) in &self.workers {
            let Ok((200, Some(v))) = h.get_probe("/props", TIMEOUT).await else {
                continue;
            };
            let Some(n) = v
                .pointer("/default_generation_settings/n_ctx")
                .and_then(Value::as_u64)
            else {
                continue;
            };
            if least.as_ref().is_none_or(|(m, _)| n < *m) {
                least = Some((n, u.clone()));
            }
        }
        least.map(|(n, u)| {
            let from = format!(
                "the workers' /props default_generation_settings.n_ctx (the least of {}, at {u})",
                self.workers.len()
            );
            (n, from)
        })
    }
}

/// How many requests of a wave each worker served: its generated tokens across the wave over
/// the tokens each request generates (EOS is ignored, so every request generates the same).
/// Workers whose counter cannot be read are left out.
pub fn wave_spread(
    urls: &[String],
    before: &[WorkerState],
    after: &[WorkerState],
    per_request: u64,
) -> std::collections::BTreeMap<String, u64> {
    urls.iter()
        .zip(before.iter().zip(after))
        .filter_map(|(u, (b, a))| {
            let rose = a.generated? - b.generated?;
            Some((u.clone(), (rose / per_request.max(1) as f64).round() as u64))
        })
        .collect()
}

async fn read_worker(h: &Http) -> WorkerState {
    let busy = match h.get_probe("/slots", TIMEOUT).await {
        Ok((200, Some(v))) => ctxbench_client::llamacpp::parse_slots(&v),
        _ => None,
    };
    let snap = match h.get_text("/metrics", TIMEOUT).await {
        Ok(t) => ctxbench_client::metrics::parse(&t).ok(),
        Err(_) => None,
    };
    let generated = snap
        .as_ref()
        .and_then(|s| s.counters.get(GENERATED).copied());
    let queued = snap.as_ref().and_then(|s| {
        ctxbench_client::busy::gauge_sum(
            s,
            &["llamacpp:requests_processing", "llamacpp:requests_deferred"],
        )
    });
    WorkerState {
        busy,
        generated,
        queued,
    }
}

/// Which worker served a sample that sent `requests` request(s) and generated `generated`
/// tokens, and what other work the workers did meanwhile, from their states before and
/// after it. A worker served it when one of its slots took a new task or its generated
/// tokens rose; more serving workers than requests, a serving worker that generated more
/// than the sample, or any worker still busy after it, is foreign work.
pub fn judge(
    urls: &[String],
    before: &[WorkerState],
    after: &[WorkerState],
    requests: u64,
    generated: Option<u64>,
) -> Judged {
    let mut j = Judged::default();
    let mut serving = Vec::new();
    let mut unreadable = Vec::new();
    for ((u, b), a) in urls.iter().zip(before).zip(after) {
        let took = match (&b.busy, &a.busy) {
            (Some(b), Some(a)) => Some(
                a.tasks
                    .iter()
                    .filter(|(slot, task)| b.tasks.get(slot) != Some(task))
                    .count() as u64,
            ),
            _ => None,
        };
        let rose = match (b.generated, a.generated) {
            (Some(b), Some(a)) => Some(a - b),
            _ => None,
        };
        if took.is_none() && rose.is_none() {
            unreadable.push(u.clone());
            continue;
        }
        if a.active() > 0 {
            j.foreign.push(format!(
                "worker {u} was busy right after the sample ({} request(s) processing or waiting for a slot)",
                a.active()
            ));
        }
        if took.unwrap_or(0) > 0 || rose.unwrap_or(0.0) > 0.5 {
            serving.push((u.clone(), took, rose));
        }
    }
    let own = generated.map(|g| g as f64);
    // The worker whose generated tokens match the sample's own is the one that served it.
    let exact: Vec<&(String, Option<u64>, Option<f64>)> = serving
        .iter()
        .filter(|(_, _, r)| matches!((r, own), (Some(r), Some(o)) if (r - o).abs() < 0.5))
        .collect();
    let server = match (serving.len() as u64, exact.len()) {
        (n, _) if n == requests && requests == 1 => Some(serving[0].0.clone()),
        (_, 1) => Some(exact[0].0.clone()),
        _ => None,
    };
    for (u, took, rose) in &serving {
        let is_server = server.as_deref() == Some(u.as_str());
        if is_server {
            if let (Some(r), Some(o)) = (rose, own) {
                if *r > o + 0.5 {
                    j.foreign.push(format!(
                        "worker {u}, which served the sample, generated {r} tokens during it, of which the sample accounts for {o}"
                    ));
                }
            }
            if took.unwrap_or(0) > requests {
                j.foreign.push(format!(
                    "{} slots of worker {u} took new tasks during a sample of {requests} request(s)",
                    took.unwrap_or(0)
                ));
            }
        } else if server.is_some() || serving.len() as u64 > requests {
            j.foreign.push(format!(
                "worker {u}, which did not serve the sample, took work during it ({})",
                evidence(*took, *rose)
            ));
        }
    }
    j.how = match (&server, serving.len()) {
        (Some(_), _) => "its /slots took a new task and/or llamacpp:tokens_predicted_total rose by the sample's own tokens".to_owned(),
        (None, 0) => "unknown: no worker's /slots or generated-token counter changed".to_owned(),
        (None, n) => format!("unknown: {n} workers took work during a sample of {requests} request(s)"),
    };
    if !unreadable.is_empty() {
        j.how
            .push_str(&format!("; unreadable: {}", unreadable.join(", ")));
    }
    j.served_by = server;
    j
}

fn evidence(took: Option<u64>, rose: Option<f64>) -> String {
    let mut e = Vec::new();
    if let Some(t) = took.filter(|t| *t > 0) {
        e.push(format!("{t} slot(s) took a new task"));
    }
    if let Some(r) = rose.filter(|r| *r > 0.5) {
        e.push(format!("{GENERATED} rose by {r}"));
    }
    e.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn st(task: u64, generated: f64, active: u64) -> WorkerState {
        WorkerState {
            busy: Some(Reading {
                active,
                tasks: BTreeMap::from([(0, task)]),
            }),
            generated: Some(generated),
            queued: None,
        }
    }

    fn urls() -> Vec<String> {
        vec!["http://w1".to_owned(), "http://w2".to_owned()]
    }

    #[test]
    fn the_worker_whose_counters_moved_served_the_sample() {
        let before = [st(1, 100.0, 0), st(5, 50.0, 0)];
        let after = [st(1, 100.0, 0), st(9, 82.0, 0)];
        let j = judge(&urls(), &before, &after, 1, Some(32));
        assert_eq!(j.served_by.as_deref(), Some("http://w2"));
        assert!(j.foreign.is_empty(), "{:?}", j.foreign);
    }

    #[test]
    fn work_sent_straight_to_a_worker_is_foreign() {
        let before = [st(1, 100.0, 0), st(5, 50.0, 0)];
        // The other worker served a request of 16 tokens meanwhile.
        let after = [st(3, 116.0, 0), st(9, 82.0, 0)];
        let j = judge(&urls(), &before, &after, 1, Some(32));
        assert_eq!(j.served_by.as_deref(), Some("http://w2"));
        assert!(j.foreign[0].contains("did not serve"), "{:?}", j.foreign);
        // The serving worker itself served one more.
        let after = [st(1, 100.0, 0), st(9, 114.0, 0)];
        let j = judge(&urls(), &before, &after, 1, Some(32));
        assert!(j.foreign[0].contains("generated 64"), "{:?}", j.foreign);
        // Still busy after.
        let after = [st(1, 100.0, 1), st(9, 82.0, 0)];
        let j = judge(&urls(), &before, &after, 1, Some(32));
        assert!(j.foreign.iter().any(|f| f.contains("busy right after")));
        // Queued behind the sample on its own worker: no slot runs it yet, the gauges say so.
        let mut queued = st(9, 82.0, 0);
        queued.queued = Some(1);
        let j = judge(&urls(), &before, &[st(1, 100.0, 0), queued], 1, Some(32));
        assert!(j.foreign.iter().any(|f| f.contains("waiting for a slot")));
    }

    #[test]
    fn a_waves_requests_are_counted_per_worker() {
        let before = [st(1, 100.0, 0), st(5, 50.0, 0)];
        let after = [st(3, 132.0, 0), st(9, 114.0, 0)];
        let s = wave_spread(&urls(), &before, &after, 32);
        assert_eq!(s.get("http://w1"), Some(&1));
        assert_eq!(s.get("http://w2"), Some(&2));
    }

    #[test]
    fn no_change_or_no_reading_is_unknown() {
        let before = [st(1, 100.0, 0), WorkerState::default()];
        let after = [st(1, 100.0, 0), WorkerState::default()];
        let j = judge(&urls(), &before, &after, 1, Some(32));
        assert_eq!(j.served_by, None);
        assert!(j.how.starts_with("unknown") && j.how.contains("unreadable: http://w2"));
    }
}
