//! Routers and gateways in front of several workers (vLLM's router, SGLang's model gateway,
//! and any endpoint that lists its workers): how the probe tells one from a single server, and
//! how a flush that the router fans out to every worker is judged per worker.
//!
//! Behind a router, every path the router does not own is forwarded to one worker, so
//! `/props`, `/slots` and `/metrics` read through it describe one worker, not the fleet: the
//! idle guard and the flush must talk to each worker itself (`session::fleet`).

use serde_json::Value;

use super::family::Server;
use ctxbench_schema::error::ClientError;
use ctxbench_schema::record::{RouterInfo, WorkerFlush};

/// Recognises a router from its own endpoints: SGLang's gateway (`/get_server_info` with
/// `router_manager`), vLLM's router (`/list_workers` `{"urls": […]}`), or any endpoint whose
/// `/workers` lists workers with URLs. `None`: nothing says router. A path that fails or is
/// refused is "not this kind", never an error: a single server answers none of them.
pub async fn detect(s: &Server<'_>) -> Result<Option<RouterInfo>, ClientError> {
    let workers = match s.get("/workers").await {
        Ok((200, Some(v))) => worker_urls(&v),
        _ => Vec::new(),
    };
    if let Ok((200, Some(v))) = s.get("/get_server_info").await {
        if v.get("router_manager").and_then(Value::as_bool) == Some(true) {
            let count = v.get("workers_count").and_then(Value::as_u64);
            return Ok(Some(router(
                "sglang-router",
                format!(
                    "GET /get_server_info answered router_manager true{}",
                    count.map_or(String::new(), |n| format!(" with {n} worker(s)"))
                ),
                workers,
            )));
        }
    }
    if let Ok((200, Some(v))) = s.get("/list_workers").await {
        if let Some(urls) = v.get("urls").and_then(Value::as_array) {
            let listed: Vec<String> = urls
                .iter()
                .filter_map(Value::as_str)
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect();
            return Ok(Some(router(
                "vllm-router",
                format!("GET /list_workers listed {} worker URL(s)", listed.len()),
                listed,
            )));
        }
    }
    if !workers.is_empty() {
        return Ok(Some(router(
            "router",
            format!("GET /workers listed {} worker(s) with URLs", workers.len()),
            workers,
        )));
    }
    // No list: two reads of /metrics in a row whose counters go backwards came from two
    // servers (a router forwarding to different workers); one server's never decrease.
    let read = || async {
        s.text("/metrics")
            .await
            .ok()
            .and_then(|t| crate::metrics::parse(&t).ok())
    };
    if let (Some(a), Some(b)) = (read().await, read().await) {
        if let Some(why) = counters_disagree(&a, &b) {
            return Ok(Some(router("router", why, Vec::new())));
        }
    }
    Ok(None)
}

/// Evidence that two scrapes came from different servers: a counter that went backwards.
pub fn counters_disagree(
    first: &crate::metrics::Snapshot,
    second: &crate::metrics::Snapshot,
) -> Option<String> {
    first.counters.iter().find_map(|(k, a)| {
        let b = second.counters.get(k)?;
        (b < a).then(|| {
            format!(
                "two reads of /metrics in a row disagree ({k} went from {a} to {b}): the answers are forwarded to different servers"
            )
        })
    })
}

/// The worker URLs of a `/workers` answer (`{"workers": [{"url": …}, …]}`), in the order
/// given; both routers here answer this shape.
pub fn worker_urls(v: &Value) -> Vec<String> {
    v.get("workers")
        .and_then(Value::as_array)
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w.get("url").and_then(Value::as_str))
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn router(kind: &str, evidence: String, workers: Vec<String>) -> RouterInfo {
    RouterInfo {
        kind: kind.to_owned(),
        evidence,
        workers,
        ..RouterInfo::default()
    }
}

/// What being behind a router means for each check, said once (the header and the report):
/// `reachable` is how many workers ctxbench reads itself; `family` is what the forwarded
/// answers looked like.
pub fn meaning(r: &RouterInfo, reachable: usize, family: &str) -> String {
    let workers = match reachable {
        0 => "no worker can be read (give each with --worker URL): the idle state and the flush cannot be checked per worker, and which worker served a sample is unknown".to_owned(),
        n => format!(
            "idle and flush per worker: ctxbench reads and flushes each of the {n} worker(s) itself, before and after every sample, and records which worker served it"
        ),
    };
    format!(
        "{kind} forwards every path it does not own to one worker, so /props, /slots and /metrics read through it are one worker's; cold proof stays per sample, from the cached-token counts that come back through it; {workers}; the workers: {family}",
        kind = r.kind
    )
}

/// Judges a router's fan-out `POST /flush_cache` answer per worker: SGLang's gateway answers
/// 200 or 206 with `successful` and `failed` lists; vLLM's router answers 200 when every worker
/// flushed and 500 `Cache flush failed on one or more servers` when any did not, without
/// saying which (every listed worker is then "unknown", never a success).
pub fn judge_fanout_flush(status: u16, body: &str, workers: &[String]) -> Vec<WorkerFlush> {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let ok = list(&v, "successful");
        let failed = list(&v, "failed");
        if !ok.is_empty() || !failed.is_empty() {
            let mut out: Vec<WorkerFlush> = ok
                .into_iter()
                .map(|(w, _)| WorkerFlush {
                    worker: w,
                    ok: true,
                    detail: format!("flushed (the router's /flush_cache answered {status})"),
                })
                .collect();
            out.extend(failed.into_iter().map(|(w, e)| WorkerFlush {
                worker: w,
                ok: false,
                detail: format!("refused: {e} (the router's /flush_cache answered {status})"),
            }));
            return out;
        }
    }
    let detail = match status {
        200..=299 => format!("flushed: the router's /flush_cache answered {status} for all"),
        _ => format!(
            "unknown: the router's /flush_cache answered {status} ({}) without naming the workers that failed",
            crate::http::snippet(body)
        ),
    };
    workers
        .iter()
        .map(|w| WorkerFlush {
            worker: w.clone(),
            ok: (200..300).contains(&status),
            detail: detail.clone(),
        })
        .collect()
}

/// `(worker, error)` pairs of a fan-out answer's list: entries that are URL strings or
/// objects with `worker`/`url` and `error`.
fn list(v: &Value, key: &str) -> Vec<(String, String)> {
    let Some(items) = v.get(key).and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|i| match i {
            Value::String(u) => Some((u.clone(), String::new())),
            Value::Object(o) => {
                let w = o.get("worker").or_else(|| o.get("url"))?.as_str()?;
                let e = o.get("error").and_then(Value::as_str).unwrap_or("");
                Some((w.to_owned(), e.to_owned()))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_routers_206_is_judged_per_worker() {
        // Recorded from sglang-router 0.3.2 in front of two llama-servers.
        let body = r#"{"status":"partial_success","message":"Cache flush: 0 succeeded, 2 failed","workers_flushed":0,"total_http_workers":2,"total_workers":2,"successful":[],"failed":[{"worker":"http://127.0.0.1:18221","error":"HTTP 404 Not Found"},{"worker":"http://127.0.0.1:18222","error":"HTTP 404 Not Found"}]}"#;
        let v = judge_fanout_flush(206, body, &[]);
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|w| !w.ok), "{v:?}");
        assert!(v[0].detail.contains("HTTP 404 Not Found"), "{v:?}");
        assert_eq!(v[1].worker, "http://127.0.0.1:18222");
        let mixed = r#"{"successful":["http://a"],"failed":[{"worker":"http://b","error":"x"}]}"#;
        let v = judge_fanout_flush(206, mixed, &[]);
        assert_eq!(
            v.iter().map(|w| w.ok).collect::<Vec<_>>(),
            vec![true, false]
        );
    }

    #[test]
    fn vllm_routers_500_is_never_a_success() {
        let ws = vec!["http://a".to_owned(), "http://b".to_owned()];
        let v = judge_fanout_flush(500, "Cache flush failed on one or more servers", &ws);
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|w| !w.ok && w.detail.starts_with("unknown")));
        assert!(v[0].detail.contains("Cache flush failed"), "{v:?}");
        let v = judge_fanout_flush(200, "", &ws);
        assert!(v.iter().all(|w| w.ok));
    }

    #[test]
    fn counters_that_go_backwards_are_two_servers() {
        let page = |n: u64| {
            crate::metrics::parse(&format!(
                "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {n}\n"
            ))
            .unwrap()
        };
        assert!(counters_disagree(&page(70), &page(70)).is_none());
        assert!(counters_disagree(&page(70), &page(90)).is_none());
        let w = counters_disagree(&page(70), &page(16)).unwrap();
        assert!(w.contains("from 70 to 16"), "{w}");
    }

    #[test]
    fn worker_lists_are_read_from_workers() {
        let v =
            serde_json::json!({"workers": [{"url": "http://a/"}, {"url": "http://b"}, {"id": 3}]});
        assert_eq!(worker_urls(&v), vec!["http://a", "http://b"]);
    }
}
