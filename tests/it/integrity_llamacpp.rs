//! Needle checks, output fingerprints and agreement between runs (issue 12), against the
//! real reference llama-server. The pass path of the needle check needs a model that can
//! retrieve, which the tiny random model cannot: that one test uses a scripted server
//! (`scripted_*`) that answers with the value its prompt holds.

use crate::common;

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

use common::real::http_post_json;
use common::{run, serial, sweep, sweep_to, RefServer};
use ctxbench_schema::record::{Flag, NeedleVerdict, Phase, Results, Sample, Status};
use ctxbench_session::needle;
use serde_json::{json, Value};

fn needles(r: &Results) -> Vec<&Sample> {
    r.samples
        .iter()
        .filter(|s| s.phase == Phase::Needle)
        .collect()
}

/// The same tiny architecture with other random weights, written by the reference script.
fn other_model() -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server");
    let out = Command::new(script)
        .args(["other-model", "99"])
        .output()
        .expect("run scripts/reference-server other-model");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let p = text
        .lines()
        .find_map(|l| l.strip_prefix("model "))
        .map(|p| PathBuf::from(p.trim()))
        .expect("a model path");
    assert!(p.exists());
    p
}

fn tokenize(port: u16, text: &str) -> Vec<u32> {
    let (code, body) = http_post_json(
        port,
        "/tokenize",
        &json!({"content": text, "add_special": false, "parse_special": false}),
    )
    .expect("tokenize");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn detokenize(port: u16, ids: &[u32]) -> String {
    let (code, body) = http_post_json(port, "/detokenize", &json!({ "tokens": ids })).unwrap();
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["content"].as_str().unwrap().to_owned()
}

#[test]
fn the_tiny_model_fails_its_needle_checks_and_they_are_reported_as_failures() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "256,1k",
            "--reps",
            "1",
            "--needle",
            "--needle-depths",
            "10,50,90",
            "--prompt-seed",
            "5",
        ],
    )
    .ok();
    let r = run.results();
    let n = needles(&r);
    assert_eq!(n.len(), 6, "one needle sample per context × depth");
    for s in &n {
        let check = s.needle.as_ref().expect("needle record");
        assert_eq!(s.status, Status::Ok, "{s:?}");
        // Cold, verified, exact length: like every measured prompt.
        assert_eq!(s.prompt_tokens, Some(s.context_tokens), "{s:?}");
        assert_eq!(s.cached_tokens, Some(0), "{s:?}");
        assert!(s.cache_verified && !s.contaminated);
        // Random weights cannot retrieve: a failure, with the answer kept.
        assert_eq!(check.verdict, NeedleVerdict::Fail, "{check:?}");
        let answer = check.answer.as_deref().expect("answer kept");
        assert!(!answer.contains(&check.value), "{answer}");
        assert_eq!(s.output_tokens, Some(u64::from(needle::ANSWER_TOKENS)));
        // The fact sits at its depth: nonce, then depth% of the filler (any BOS is the
        // server's, not in the ids sent).
        let added = r
            .header
            .server
            .server_added_tokens
            .expect("measured by the warmup");
        let filler = s.context_tokens - added - 8 - check.fact_tokens - check.question_tokens;
        assert_eq!(check.fact_at, 8 + filler * u64::from(check.depth_pct) / 100);
    }
    // Needle samples never reach the speed numbers.
    let cold = r.samples.iter().filter(|s| s.phase == Phase::Cold).count();
    assert_eq!(cold, 2);
    assert!(!run.stdout.contains("pass"), "{}", run.stdout);
    assert!(run.stdout.contains("needle retrieval"), "{}", run.stdout);
    assert!(run.stdout.contains("0/1"), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("6 needle check(s) answered without the value"),
        "{}",
        run.stderr
    );
    let md = std::fs::read_to_string(run.out.with_extension("md")).unwrap();
    assert!(
        md.contains("### Needle retrieval") && md.contains("| 1k | 0/1 | 0/1 | 0/1 |"),
        "{md}"
    );
    let (code, json_out, _) = run_report_json(&run.out);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["runs"][0]["needle"].as_array().unwrap().len(), 6);
    assert_eq!(v["runs"][0]["needle"][0]["fail"], 1);
    assert_eq!(v["runs"][0]["needle"][0]["pass"], 0);
}

fn run_report_json(path: &std::path::Path) -> (i32, String, String) {
    run(&["report", path.to_str().unwrap(), "--format", "json"])
}

#[test]
fn the_needle_sits_where_it_is_placed_as_the_server_detokenizes_it() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let value = "48213";
    let fact = tokenize(srv.port, &needle::fact(value));
    let question = tokenize(srv.port, needle::QUESTION);
    let filler = tokenize(
        srv.port,
        &"The quick brown fox jumps over the lazy dog. ".repeat(80),
    );
    let len = 600usize;
    let mut base: Vec<u32> = vec![887, 1016, 1576, 4231, 5566, 7788, 9911, 1234];
    base.extend(filler.iter().cycle().take(len - 8));
    for depth in [0, 10, 50, 90, 100] {
        let placed = needle::place(&base, 8, &fact, &question, depth).unwrap();
        assert_eq!(placed.prompt.len(), len);
        assert_eq!(
            &placed.prompt[..8],
            &base[..8],
            "the nonce stays at token 0"
        );
        let at = placed.fact_at;
        let fact_text = detokenize(srv.port, &placed.prompt[at..at + fact.len()]);
        assert!(
            fact_text.contains(&format!("The secret number is {value}.")),
            "depth {depth}: {fact_text:?}"
        );
        let tail = detokenize(srv.port, &placed.prompt[len - question.len()..]);
        assert!(
            tail.trim_end().ends_with("The secret number is"),
            "{tail:?}"
        );
        // Before the fact: depth% of the filler.
        let before = at - 8;
        let filler_len = len - 8 - fact.len() - question.len();
        assert_eq!(before, filler_len * depth as usize / 100);
        // The server counts exactly the ids sent (it adds no BOS to token-id prompts of
        // this model; the sweep measures that in its warmup).
        let (code, body) = http_post_json(
            srv.port,
            "/completion",
            &json!({"prompt": placed.prompt, "n_predict": 1, "cache_prompt": false}),
        )
        .unwrap();
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["tokens_evaluated"], json!(len), "{body}");
    }
}

#[test]
fn the_same_prompt_seed_twice_agrees_fully_and_another_model_does_not() {
    let _g = serial();
    let args = [
        "--contexts",
        "256,1k",
        "--reps",
        "2",
        "--decode-samples",
        "1",
        "--needle",
        "--prompt-seed",
        "7",
        "--output-tokens",
        "16",
    ];
    let srv = RefServer::start(8192, &[]);
    let a = sweep_to("a.jsonl", &srv.url(), &args).ok();
    let b = sweep_to("b.jsonl", &srv.url(), &args).ok();
    drop(srv);
    let other = other_model();
    let srv2 = RefServer::start(8192, &["-m", other.to_str().unwrap()]);
    let c = sweep_to("other.jsonl", &srv2.url(), &args).ok();
    let (ra, rb, rc) = (a.results(), b.results(), c.results());

    // Every sample carries an id fingerprint and its first ids.
    for s in ra.samples.iter().filter(|s| s.status == Status::Ok) {
        assert_eq!(
            s.fingerprint_of.as_ref().map(|f| f.as_str()),
            Some("token_ids")
        );
        assert!(s
            .output_fingerprint
            .as_deref()
            .unwrap()
            .starts_with("fnv1a64:"));
        assert!(!s.output_ids.as_ref().unwrap().is_empty());
    }
    // Same seed, same server: the same prompts (needle values too) and the same outputs.
    let values = |r: &Results| -> Vec<String> {
        needles(r)
            .iter()
            .map(|s| s.needle.as_ref().unwrap().value.clone())
            .collect()
    };
    assert_eq!(values(&ra), values(&rb));
    let same = common::agreement_rows(&ra, &rb);
    assert_eq!(same.len(), 2);
    for r in &same {
        // 2 cold + 2 warm + 3 needle pairs per context.
        assert_eq!(r.pairs, 7, "{r:?}");
        assert_eq!(r.identical, r.pairs, "{r:?}");
    }
    // Whether a warm sample differs from its cold one is a property of the computation,
    // so both runs flag the same samples.
    let flagged = |r: &Results| -> Vec<(u64, u32)> {
        r.samples
            .iter()
            .filter(|s| s.has(&Flag::Nondeterministic))
            .map(|s| (s.context_tokens, s.rep))
            .collect()
    };
    assert_eq!(flagged(&ra), flagged(&rb));
    let (code, text, err) = run(&["compare", a.out.to_str().unwrap(), b.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("output agreement"), "{text}");
    assert!(!text.contains("OUTPUTS DIFFER"), "{text}");

    // Another model file: the outputs differ, and compare says so beside the speed.
    let diff = common::agreement_rows(&ra, &rc);
    let (pairs, identical) = diff
        .iter()
        .fold((0, 0), |(p, i), r| (p + r.pairs, i + r.identical));
    assert_eq!(pairs, 14);
    assert!(identical <= 1, "near-zero agreement expected: {diff:?}");
    let (code, text, err) = run(&["compare", a.out.to_str().unwrap(), c.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("OUTPUTS DIFFER"), "{text}");
    assert!(text.contains("outputs differ"), "{text}");
    assert!(!text.to_lowercase().contains("wrong"), "{text}");
}

/// The deep identity model (`deep-model` of scripts/reference-server: 10 layers that add
/// exactly 0, in front of the base model's 2) computes the base model's function: its greedy
/// output and the log-probabilities behind it are the base model's, bit for bit. So does its
/// wide twin (`wide-model`: every FFN 16384 wide, the base layers' padded with units that add
/// exactly 0). A campaign's slower variant with the same output, and a speculative target
/// whose draft (the base model) is always right, rest on that.
#[test]
fn the_deep_identity_model_answers_exactly_as_the_base_model_does() {
    let _g = serial();
    let p = common::ref_paths();
    // Fixed token ids (no tokenizer in between), three lengths.
    let prompts: Vec<Vec<u32>> = [64u32, 300, 1000]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| 500 + (1000 + i * 37 * (k as u32 + 1)) % 31000)
                .collect()
        })
        .collect();
    // (model path the server reports, its parameter count, per prompt: tokens and probs)
    let answers = |model: &std::path::Path| -> (Value, u64, Vec<Value>) {
        let srv = RefServer::start(4096, &["-m", model.to_str().unwrap()]);
        let (_, props) = common::http_get(srv.port, "/props").expect("GET /props");
        let (_, models) = common::http_get(srv.port, "/v1/models").expect("GET /v1/models");
        let props: Value = serde_json::from_str(&props).unwrap();
        let models: Value = serde_json::from_str(&models).unwrap();
        let n_params = models["data"][0]["meta"]["n_params"].as_u64().unwrap();
        let out = prompts
            .iter()
            .map(|prompt| {
                let (code, body) = http_post_json(
                    srv.port,
                    "/completion",
                    &json!({"prompt": prompt, "n_predict": 16, "temperature": 0,
                            "cache_prompt": false, "return_tokens": true, "n_probs": 2}),
                )
                .expect("POST /completion");
                assert_eq!(code, 200, "{body}");
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["tokens"].as_array().map(Vec::len), Some(16), "{body}");
                json!({"tokens": v["tokens"], "probs": v["completion_probabilities"]})
            })
            .collect();
        (props["model_path"].clone(), n_params, out)
    };
    let (base_path, base_params, base) = answers(&p.model);
    let (deep_path, deep_params, deep) = answers(&p.deep_model);
    // Two servers, two models: the deep one really served, with its extra layers.
    assert_eq!(base_path, json!(p.model.to_str().unwrap()));
    assert_eq!(deep_path, json!(p.deep_model.to_str().unwrap()));
    assert!(deep_params > base_params, "{deep_params} vs {base_params}");
    for (i, (b, d)) in base.iter().zip(&deep).enumerate() {
        assert_eq!(b, d, "prompt {i}: the deep model answered otherwise");
    }
    let (wide_path, wide_params, wide) = answers(&p.wide_model);
    assert_eq!(wide_path, json!(p.wide_model.to_str().unwrap()));
    // ~85M parameters against the deep model's ~10M: the wide FFNs are really there.
    assert!(
        wide_params > 8 * deep_params,
        "{wide_params} vs {deep_params}"
    );
    for (i, (b, w)) in base.iter().zip(&wide).enumerate() {
        assert_eq!(b, w, "prompt {i}: the wide model answered otherwise");
    }
}

#[test]
fn a_seeded_prompt_replayed_on_a_caching_server_without_flush_is_flagged_never_counted() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let args = [
        "--contexts",
        "256,1k",
        "--reps",
        "2",
        "--prompt-seed",
        "11",
        "--output-tokens",
        "8",
        "--flush",
        "never",
        "--cache-bypass",
        "off",
    ];
    let first = sweep_to("first.jsonl", &srv.url(), &args).ok();
    // Every point of the replay is unusable, so the run exits 1 and says why.
    let second = sweep_to("second.jsonl", &srv.url(), &args);
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(
        second.stderr.contains("no usable sample at"),
        "{}",
        second.stderr
    );
    let (r1, r2) = (first.results(), second.results());
    // The first run is cold: nothing cached, nothing contaminated. An 8-token sample may
    // lose its timing to a loaded host (CI once had one such sample here), never its cache
    // verdict, which is what this test is about.
    let all_cold = |r: &Results| {
        let ok = r
            .samples
            .iter()
            .all(|s| s.cached_tokens == Some(0) && common::usable_but_for_the_host(s));
        assert!(ok, "{:?}", common::flags_of(&r.samples));
    };
    all_cold(&r1);
    // The replayed prompts hit llama-server's prompt cache: each one is flagged and left
    // out of every summary.
    assert_eq!(r2.samples.len(), 4);
    for s in &r2.samples {
        assert!(s.cached_tokens.unwrap() > 0, "{s:?}");
        assert!(
            s.contaminated && s.has(&Flag::Contaminated) && !s.usable(),
            "{s:?}"
        );
    }
    assert!(second.stdout.contains("0/2"), "{}", second.stdout);
    assert!(
        second.stderr.contains("hit the prefix cache"),
        "{}",
        second.stderr
    );
    // With the defence on (per-request switch and flush), the same seed replays cleanly.
    let third = sweep_to(
        "third.jsonl",
        &srv.url(),
        &[
            "--contexts",
            "256,1k",
            "--reps",
            "2",
            "--prompt-seed",
            "11",
            "--output-tokens",
            "8",
        ],
    )
    .ok();
    all_cold(&third.results());
}

/// A llama.cpp-shaped server with a byte-level tokenizer (id = 1000 + byte), so it can
/// read its prompt back and answer with the secret number the prompt holds. `fail_nth`:
/// the n-th needle request gets an HTTP 500. Warm requests (cache reuse allowed) answer
/// other tokens than cold ones when `nondeterministic`.
fn scripted_reader(fail_nth: Option<usize>, nondeterministic: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let needle_calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let calls = needle_calls.clone();
            std::thread::spawn(move || {
                let _ = serve(conn, &calls, fail_nth, nondeterministic);
            });
        }
    });
    port
}

fn serve(
    mut conn: std::net::TcpStream,
    calls: &std::sync::atomic::AtomicUsize,
    fail_nth: Option<usize>,
    nondeterministic: bool,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let common::Request {
        method: _,
        path,
        body: v,
    } = common::read_json_request(&mut reader)?;
    let reply = |conn: &mut std::net::TcpStream, status: u16, ct: &str, b: String| {
        write!(
            conn,
            "HTTP/1.1 {status} X\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
    };
    match path.as_str() {
        "/props" => reply(
            &mut conn,
            200,
            "application/json",
            json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1, "build_info": "scripted", "model_path": "scripted.gguf"}).to_string(),
        ),
        "/v1/models" => reply(
            &mut conn,
            200,
            "application/json",
            json!({"data": [{"id": "scripted", "meta": {"n_vocab": 1300}}]}).to_string(),
        ),
        "/tokenize" => {
            let text = v["content"].as_str().unwrap_or("");
            let ids: Vec<u32> = text.bytes().map(|b| 1000 + u32::from(b)).collect();
            reply(&mut conn, 200, "application/json", json!({"tokens": ids}).to_string())
        }
        "/completion" => {
            let ids: Vec<u64> = v["prompt"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let text: String = ids
                .iter()
                .filter(|&&t| (1000..1256).contains(&t))
                .map(|&t| char::from((t - 1000) as u8))
                .collect();
            let n = v["n_predict"].as_u64().unwrap_or(1);
            let secret = text
                .split("The secret number is ")
                .nth(1)
                .map(|r| r.chars().take_while(char::is_ascii_digit).collect::<String>())
                .filter(|d| !d.is_empty());
            if secret.is_some() {
                let i = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if Some(i) == fail_nth {
                    return reply(&mut conn, 500, "application/json", json!({"error": {"message": "scripted failure"}}).to_string());
                }
            }
            let warm = v["cache_prompt"].as_bool() == Some(true);
            // The answer: " <digits>" as one token per byte, then filler.
            let answer = secret.map(|d| format!(" {d}.")).unwrap_or_default();
            let mut toks: Vec<(u32, String)> = answer
                .bytes()
                .map(|b| (1000 + u32::from(b), char::from(b).to_string()))
                .collect();
            let filler = if warm && nondeterministic { 1066 } else { 1065 };
            while (toks.len() as u64) < n {
                toks.push((filler, char::from((filler - 1000) as u8).to_string()));
            }
            toks.truncate(n as usize);
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            )?;
            // One event per decode step, a step apart, as a real server streams them: tokens
            // written all at once would be a held-back stream, with no TTFT to compare.
            for (i, (id, piece)) in toks.iter().enumerate() {
                std::thread::sleep(std::time::Duration::from_millis(2));
                write!(conn, "data: {}\n\n", json!({"content": piece, "tokens": [id], "stop": false, "tokens_predicted": i + 1}))?;
            }
            let p = ids.len() as u64 + 1;
            let cache_n = if warm { p - 1 } else { 0 };
            write!(conn, "data: {}\n\n", json!({"content": "", "tokens": [], "stop": true, "tokens_predicted": n, "tokens_evaluated": p, "stop_type": "limit", "timings": {"cache_n": cache_n, "prompt_n": p - cache_n, "prompt_ms": 2.0, "predicted_n": n, "predicted_ms": 2.0 * n as f64}}))
        }
        _ => reply(&mut conn, 404, "text/plain", "not found".into()),
    }?;
    conn.flush()?;
    conn.shutdown(std::net::Shutdown::Both)
}

#[test]
fn scripted_needle_pass_path_and_a_failed_request_is_an_error_not_a_fail() {
    // The second needle request fails with HTTP 500.
    let port = scripted_reader(Some(1), false);
    let url = format!("http://127.0.0.1:{port}");
    let run = sweep(
        &url,
        &[
            "--contexts",
            "512",
            "--reps",
            "1",
            "--needle",
            "--needle-depths",
            "10,50,90",
            "--prompt-seed",
            "2",
            "--flush",
            "never",
        ],
    );
    assert_eq!(
        run.code, 1,
        "a failed request leaves the sweep incomplete: {}",
        run.stderr
    );
    let r = run.results();
    let n = needles(&r);
    assert_eq!(n.len(), 3);
    let verdicts: Vec<_> = n
        .iter()
        .map(|s| s.needle.as_ref().unwrap().verdict.clone())
        .collect();
    assert_eq!(
        verdicts,
        vec![
            NeedleVerdict::Pass,
            NeedleVerdict::Error,
            NeedleVerdict::Pass
        ]
    );
    let failed = &n[1];
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(
        failed.needle.as_ref().unwrap().answer,
        None,
        "no answer was seen"
    );
    let passed = n[0].needle.as_ref().unwrap();
    assert!(passed.answer.as_deref().unwrap().contains(&passed.value));
    assert!(run.stdout.contains("1/1"), "{}", run.stdout);
    assert!(run.stdout.contains("0/0 1err"), "{}", run.stdout);
    assert!(
        run.stderr.contains("1 needle check(s) without a verdict"),
        "{}",
        run.stderr
    );
    // Text fingerprints are not used where ids stream.
    assert_eq!(passed.depth_pct, 10);
    assert_eq!(
        n[0].fingerprint_of.as_ref().map(|f| f.as_str()),
        Some("token_ids")
    );
}

#[test]
fn scripted_warm_output_that_differs_from_its_cold_sample_is_flagged_nondeterministic() {
    let port = scripted_reader(None, true);
    let url = format!("http://127.0.0.1:{port}");
    let run = sweep(
        &url,
        &[
            "--contexts",
            "512",
            "--reps",
            "2",
            "--decode-samples",
            "1",
            "--output-tokens",
            "8",
            "--flush",
            "never",
        ],
    )
    .ok();
    let r = run.results();
    let warm: Vec<_> = r
        .samples
        .iter()
        .filter(|s| s.phase == Phase::Warm)
        .collect();
    assert_eq!(warm.len(), 2);
    assert!(
        warm.iter().all(|s| s.has(&Flag::Nondeterministic)),
        "{warm:?}"
    );
    assert!(!r
        .samples
        .iter()
        .any(|s| s.phase == Phase::Cold && s.has(&Flag::Nondeterministic)));
    assert!(
        run.stderr.contains("outputs differ: warm samples"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("512 (2 of 2)"), "{}", run.stderr);
}
