//! The scripted SGLang and vLLM servers are imitations; this checks them against what the
//! real servers answered (tests/fixtures/recorded/<family>-<version>/, recorded by
//! scripts/record-real-fixtures). Every recorded request is replayed to the imitation and the
//! answers must have the same status, content type and shape: every key the imitation sends
//! exists in the real answer with the same JSON type, and for the exchanges ctxbench measures
//! with (completions, generate, streams, tokenize, flush, models, errors) every key the real
//! server sent is sent by the imitation too. A real server upgrade that changes a field, or
//! an imitation that drifts, fails here.

use crate::scripted;

use std::path::Path;

use scripted::{Config, Flavor, Scripted};
use serde_json::Value;

/// Exchanges the imitations do not reproduce, and why.
const NOT_IMITATED: &[(&str, &str)] = &[
    (
        "unauthorized_",
        "the scripted servers run without an API key",
    ),
    ("metrics", "Prometheus text, checked by metric name below"),
];

/// Real answers with hundreds of configuration keys: only the imitation's keys are checked.
const CONFIG_DUMPS: &[&str] = &["server_info", "get_server_info", "model_info"];

fn replay_body(req: &Value) -> Option<Value> {
    let mut body = req.get("body")?.clone();
    // Long id lists are stored as {"ids_len", "first"}; any ids of that length will do.
    for key in ["prompt", "input_ids"] {
        if let Some(n) = body[key].get("ids_len").and_then(Value::as_u64) {
            body[key] = Value::from((0..n).map(|i| 100 + i % 200).collect::<Vec<_>>());
        }
    }
    if body["model"] == "tiny-llama" {
        body["model"] = "scripted-model".into();
    }
    Some(body)
}

struct Answer {
    status: u16,
    content_type: Option<String>,
    body: String,
}

fn send(srv: &Scripted, req: &Value) -> Answer {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let url = format!("{}{}", srv.url(), req["path"].as_str().unwrap());
        let r = match (req["method"].as_str().unwrap(), replay_body(req)) {
            ("GET", _) => c.get(url),
            (_, Some(b)) => c.post(url).json(&b),
            (_, None) => c.post(url),
        };
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        Answer {
            status,
            content_type,
            body: resp.text().await.unwrap(),
        }
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Differences in shape between a real and an imitated JSON value. A real `null` matches
/// anything (the recorded server left an optional setting unset); a float matches an
/// integer-valued number (Python writes 0.0, JSON readers do not care).
fn shape(real: &Value, fake: &Value, at: &str, both_ways: bool, out: &mut Vec<String>) {
    let (rk, fk) = (kind(real), kind(fake));
    let numbers = matches!(rk, "float" | "integer") && matches!(fk, "float" | "integer");
    if rk == "null" || (numbers && rk == "integer" && fk == "float") {
        return;
    }
    if rk != fk && !(numbers && rk == "float") {
        out.push(format!("{at}: real {rk}, imitation {fk}"));
        return;
    }
    match (real, fake) {
        (Value::Object(r), Value::Object(f)) => {
            for (k, fv) in f {
                match r.get(k) {
                    Some(rv) => shape(rv, fv, &format!("{at}.{k}"), both_ways, out),
                    None => out.push(format!("{at}.{k}: sent by the imitation only")),
                }
            }
            if both_ways {
                for k in r.keys().filter(|k| !f.contains_key(*k)) {
                    out.push(format!("{at}.{k}: sent by the real server only"));
                }
            }
        }
        (Value::Array(r), Value::Array(f)) => {
            if let (Some(rv), Some(fv)) = (r.first(), f.first()) {
                shape(rv, fv, &format!("{at}[0]"), both_ways, out);
            }
        }
        _ => {}
    }
}

/// `data:` payloads of an SSE body (the fixture's cut comment lines are skipped).
fn events(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.trim().to_owned())
        .collect()
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()))
}

fn check_family(dir: &str, flavor: Flavor) -> Vec<String> {
    // Started the way the recorded servers were: SGLang with --enable-metrics and without
    // --enable-cache-report, vLLM with --enable-per-request-metrics,
    // --enable-prompt-tokens-details and VLLM_SERVER_DEV_MODE=1.
    let recorded = Config {
        cache_report: flavor == Flavor::Vllm,
        per_request_metrics: flavor == Flavor::Vllm,
        ..Config::new(flavor)
    };
    let idle = Scripted::start(recorded.clone());
    let busy = Scripted::start(Config {
        busy_from_flush: Some(1),
        ..recorded
    });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recorded");
    let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    let mut checked = 0;
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if NOT_IMITATED.iter().any(|(p, _)| name.starts_with(p)) {
            continue;
        }
        let rec: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let srv = if name.contains("busy") { &busy } else { &idle };
        let got = send(srv, &rec["request"]);
        let resp = &rec["response"];
        let at = format!("{dir}/{name}");
        checked += 1;
        let want_status = resp["status"].as_u64().unwrap() as u16;
        if got.status != want_status {
            out.push(format!(
                "{at}: status {want_status}, imitation {}",
                got.status
            ));
            continue;
        }
        let want_ct = resp["headers"]["content-type"].as_str();
        if want_ct != got.content_type.as_deref() {
            out.push(format!(
                "{at}: content-type {want_ct:?}, imitation {:?}",
                got.content_type
            ));
        }
        let both_ways = !CONFIG_DUMPS.contains(&name.as_str());
        match resp.get("body_text").and_then(Value::as_str) {
            Some(text) if want_ct.is_some_and(|c| c.starts_with("text/event-stream")) => {
                let (real, fake) = (events(text), events(&got.body));
                if real.last() != fake.last() {
                    out.push(format!(
                        "{at}: stream ends {:?}, imitation {:?}",
                        real.last(),
                        fake.last()
                    ));
                }
                // First event, the last content event and the final record.
                let json = |v: &[String]| -> Vec<Value> {
                    v.iter()
                        .filter(|e| *e != "[DONE]")
                        .map(|e| parse(e))
                        .collect()
                };
                let (r, f) = (json(&real), json(&fake));
                if r.len() < 2 || f.len() < 2 {
                    out.push(format!(
                        "{at}: {} real events, {} imitated",
                        r.len(),
                        f.len()
                    ));
                    continue;
                }
                shape(
                    &r[0],
                    &f[0],
                    &format!("{at} first event"),
                    both_ways,
                    &mut out,
                );
                let (rl, fl) = (r.len(), f.len());
                shape(
                    &r[rl - 1],
                    &f[fl - 1],
                    &format!("{at} last event"),
                    both_ways,
                    &mut out,
                );
                shape(
                    &r[rl - 2],
                    &f[fl - 2],
                    &format!("{at} event before last"),
                    both_ways,
                    &mut out,
                );
            }
            Some(text) => {
                if text != got.body && !name.contains("metrics") {
                    out.push(format!("{at}: body {text:?}, imitation {:?}", got.body));
                }
            }
            None => shape(&resp["body"], &parse(&got.body), &at, both_ways, &mut out),
        }
    }
    assert!(checked >= 10, "{dir}: only {checked} exchanges replayed");
    out
}

/// Metric names the imitation exposes must be ones the real server exposes.
fn metric_names(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_owned))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn check_metrics(dir: &str, flavor: Flavor) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recorded")
        .join(dir)
        .join("metrics.json");
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let real = metric_names(rec["response"]["body_text"].as_str().unwrap());
    let srv = Scripted::start(Config::new(flavor));
    let got = send(&srv, &rec["request"]);
    metric_names(&got.body)
        .into_iter()
        .filter(|m| !real.contains(m))
        .map(|m| format!("{dir}/metrics: {m} is not exposed by the real server"))
        .collect()
}

#[test]
fn scripted_sglang_answers_every_recorded_exchange_in_the_real_servers_shape() {
    let mut d = check_family("sglang-0.5.23", Flavor::Sglang);
    d.extend(check_metrics("sglang-0.5.23", Flavor::Sglang));
    assert!(d.is_empty(), "{} difference(s):\n{}", d.len(), d.join("\n"));
}

#[test]
fn scripted_vllm_answers_every_recorded_exchange_in_the_real_servers_shape() {
    let mut d = check_family("vllm-0.32.0", Flavor::Vllm);
    d.extend(check_metrics("vllm-0.32.0", Flavor::Vllm));
    assert!(d.is_empty(), "{} difference(s):\n{}", d.len(), d.join("\n"));
}

#[test]
fn scripted_shape_check_catches_a_renamed_or_retyped_field() {
    let real = serde_json::json!({"a": 1, "b": {"c": "x"}, "d": null});
    let mut out = Vec::new();
    shape(
        &real,
        &serde_json::json!({"a": 1, "b": {"c": "x"}, "d": 3}),
        "",
        true,
        &mut out,
    );
    assert!(out.is_empty(), "{out:?}");
    shape(
        &real,
        &serde_json::json!({"a": "1", "b": {"k": "x"}}),
        "",
        true,
        &mut out,
    );
    assert_eq!(
        out,
        [
            ".a: real integer, imitation string",
            ".b.k: sent by the imitation only",
            ".b.c: sent by the real server only",
            ".d: sent by the real server only",
        ]
    );
}
