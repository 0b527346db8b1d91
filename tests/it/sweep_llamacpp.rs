//! The core sweep against the real reference llama-server.

use crate::common;

use std::collections::HashSet;
use std::io::Write;

use common::{run, serial, sweep, RefServer};
use ctxbench_schema::record::{read_results, Sample, Status};

fn samples(path: &std::path::Path) -> Vec<Sample> {
    read_results(path, false).expect("results file").samples
}

#[test]
fn every_sample_has_exact_length_and_no_cache_hit_on_a_default_caching_server() {
    let _g = serial();
    // The server is left at its defaults: cache_prompt on, prompt cache on.
    let srv = RefServer::start(16384, &[]);
    let run = sweep(&srv.url(), &["--contexts", "1k,2k,4k,8k", "--reps", "2"]).ok();
    let s = run.results().samples;
    assert_eq!(s.len(), 8);
    for x in &s {
        assert_eq!(x.status, Status::Ok, "{x:?}");
        assert_eq!(
            x.prompt_tokens,
            Some(x.context_tokens),
            "server saw another length: {x:?}"
        );
        assert_eq!(x.cached_tokens, Some(0), "cache hit: {x:?}");
        assert!(x.cache_verified && !x.contaminated && x.length_ok == Some(true));
        assert_eq!(x.output_tokens, Some(32));
        assert!(x.ttft_ms.unwrap() > 0.0 && x.decode_tokens_per_s.unwrap() > 0.0);
        let server = x.server.as_ref().expect("server timings stored");
        assert_eq!(server.prompt_n, Some(x.context_tokens));
    }
    // One row per context in the summary table.
    for c in ["1k", "2k", "4k", "8k"] {
        assert!(
            run.stdout.lines().any(|l| l.starts_with(&format!("{c} "))),
            "{}",
            run.stdout
        );
    }
}

/// With the per-request cache switch off, the nonce alone must keep every prompt cold on a
/// server that caches prompts (the test above has both defences on at once).
#[test]
fn the_nonce_alone_keeps_samples_cold_with_the_cache_switch_off() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k",
            "--reps",
            "2",
            "--output-tokens",
            "4",
            "--cache-bypass",
            "off",
        ],
    )
    .ok();
    let r = run.results();
    assert!(!r.header.config.cache_bypass && r.header.config.nonce);
    assert_eq!(r.samples.len(), 4);
    for x in &r.samples {
        assert_eq!(
            x.cached_tokens,
            Some(0),
            "cache hit despite the nonce: {x:?}"
        );
        assert!(!x.contaminated, "{x:?}");
    }
}

#[test]
fn the_seeds_repeated_prompt_trap_is_detected_and_excluded() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    // No nonce and cache reuse allowed: the seed's two identical requests.
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "2k",
            "--reps",
            "3",
            "--nonce",
            "off",
            "--cache-bypass",
            "off",
        ],
    );
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    // Every sample hit the cache (the first reuses the warmup's prefix too): the point has
    // no usable sample, so the run exits 1 and says why.
    assert_eq!(run.code, 1, "{stderr}");
    assert!(stderr.contains("no usable sample at 2k"), "{stderr}");
    let s = run.results().samples;
    assert_eq!(s.len(), 3);
    // Repetitions after the first send the same prompt: the server reuses its cache.
    for x in &s[1..] {
        assert!(x.contaminated, "repeat not detected: {x:?}");
        assert!(x.cached_tokens.unwrap() >= 2000, "{x:?}");
        assert!(x.has(&ctxbench_schema::record::Flag::Contaminated));
        assert!(!x.usable());
    }
    assert!(
        stderr.contains("hit the prefix cache"),
        "no loud warning: {stderr}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("2k "))
        .expect("2k row");
    assert!(row.contains("cached"), "exclusion not shown: {row}");
    // Contaminated TTFTs (cache hits) must not be in the median.
    let summary = ctxbench_stats::stats::summarize(&s);
    let usable = summary[0].usable;
    assert_eq!(usable, s.iter().filter(|x| x.usable()).count());
    assert!(usable <= 1);
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Client and server time the same request, so a loaded host delays both alike: each sample
/// is compared with its own server figures, and the bounds sit halfway to what a real defect
/// would produce, not at a tight percentage (measured spread on a loaded 2-core host: TTFT
/// overhead 1.7–43 ms, ≤ 0.06 of the server's decode time; decode client/server 0.995–1.032).
#[test]
fn client_timing_agrees_with_the_servers_own_timings() {
    let _g = serial();
    // One thread: two stall each other at every decode step when another process takes a
    // core, which makes decode slow next to prefill on a busy host.
    let srv = RefServer::start(16384, &["-t", "1"]);
    let s = sweep(
        &srv.url(),
        &[
            "--contexts",
            "2k,8k",
            "--reps",
            "3",
            "--output-tokens",
            "64",
        ],
    )
    .ok()
    .results()
    .samples;
    assert_eq!(s.len(), 6);
    let mut discriminating = 0;
    for c in [2048, 8192] {
        let at: Vec<_> = s.iter().filter(|x| x.context_tokens == c).collect();
        let server = |x: &Sample| x.server.clone().expect("server timings");
        // TTFT = the server's prompt time + the client's overhead (HTTP, first event).
        let mut overhead_share = Vec::new();
        for x in &at {
            let t = server(x);
            let (ttft, prompt_ms) = (x.ttft_ms.unwrap(), t.prompt_ms.unwrap());
            // The client can never see the first token before the server made it (−1 ms for
            // clock rounding): a TTFT taken on an earlier event (the response headers, a
            // prefill progress event) or in seconds instead of ms is below this.
            assert!(
                ttft > prompt_ms - 1.0,
                "TTFT {ttft:.2} ms before the server's prompt_ms {prompt_ms:.2} ms at {c}"
            );
            overhead_share.push((ttft - prompt_ms) / t.predicted_ms.unwrap());
        }
        // A TTFT taken on the last token instead of the first adds the whole generation
        // (share ≈ 1; a µs/ms slip far more): the median share must stay below half of that.
        let share = median(overhead_share.clone());
        assert!(
            share < 0.5,
            "TTFT − prompt_ms is {share:.3} of the server's decode time at {c}: {overhead_share:?}"
        );

        // Decode: client (n−1)/(t_last − t_first) against the server's predicted_per_second
        // for the same request.
        let ratios: Vec<f64> = at
            .iter()
            .map(|x| x.decode_tokens_per_s.unwrap() / server(x).predicted_per_second.unwrap())
            .collect();
        // A rate that counts the prefill in its time (timed from the send, not the first
        // token) would be this much of the true one: predicted_ms / (prompt_ms + predicted_ms).
        let with_prefill = median(
            at.iter()
                .map(|x| {
                    let t = server(x);
                    t.predicted_ms.unwrap() / (t.prompt_ms.unwrap() + t.predicted_ms.unwrap())
                })
                .collect(),
        );
        let ratio = median(ratios.clone());
        // Low: halfway to the prefill defect, where the prefill is long enough to tell it
        // apart (a busy host can slow decode more than prefill). High: halfway (in ratio) to
        // a double count of tokens (×2); a ms/s slip (×1000) is far beyond both.
        let low = match with_prefill < 0.9 {
            true => {
                discriminating += 1;
                (1.0 + with_prefill) / 2.0
            }
            false => 0.5,
        };
        assert!(
            (low..1.4).contains(&ratio),
            "decode client/server median {ratio:.3} outside {low:.3}..1.4 at {c}: {ratios:?}"
        );
    }
    assert!(
        discriminating >= 1,
        "at no length was the prefill long enough to tell a rate timed from the send apart"
    );
}

#[test]
fn an_over_limit_context_is_refused_before_any_request() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let run = sweep(&srv.url(), &["--contexts", "1k,8k"]);
    let stderr = &run.stderr;
    assert_eq!(run.code, 2, "usage error expected; stderr: {stderr}");
    assert!(
        stderr.contains("8192") && stderr.contains("4096"),
        "{stderr}"
    );
    assert!(stderr.contains("maximum context"), "{stderr}");
    assert_eq!(
        srv.metric("llamacpp:prompt_tokens_total"),
        0.0,
        "a prompt was sent"
    );
    assert!(!run.out.exists(), "an empty results file was left behind");
}

#[test]
fn a_resumed_run_with_the_cache_flush_on_does_not_repeat_samples_and_tolerates_a_torn_line() {
    let _g = serial();
    // With --slot-save-path the default --flush auto erases the slots before every sample,
    // and each erase frees a different number of tokens: that must not change the run's
    // identity, or resume would always be refused.
    let slots = tempfile::tempdir().unwrap();
    let srv = RefServer::start(
        8192,
        &[
            "--slot-save-path",
            slots.path().to_str().unwrap(),
            "-np",
            "2",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "sweep",
            "--url",
            "URL",
            "--contexts",
            "1k,2k",
            "--reps",
            "2",
            "--out",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let url = srv.url();
    let with_url = |v: Vec<String>| {
        v.into_iter()
            .map(|s| if s == "URL" { url.clone() } else { s })
            .collect::<Vec<_>>()
    };
    let a = with_url(args(&[]));
    let (code, _, stderr) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    let full = samples(&out);
    assert_eq!(full.len(), 4);
    // The sweep's summary warns as `ctxbench report` does (one report model, one wording).
    assert!(
        stderr.contains(
            "WARNING: TTFT: 2 context length(s) with cold usable samples; a quadratic fit needs 3"
        ),
        "{stderr}"
    );
    let header = ctxbench_schema::record::read_results(&out, false)
        .unwrap()
        .header;
    assert!(
        header
            .server
            .flush_check
            .as_deref()
            .is_some_and(|f| f.contains("slot erase")),
        "{:?}",
        header.server
    );
    assert!(
        full.iter().all(|s| s.flush.is_some()),
        "flushed before each sample"
    );

    // Keep the header and two samples, then a torn half line: the writer died mid-write.
    let text = std::fs::read_to_string(&out).unwrap();
    let keep: Vec<&str> = text.lines().take(3).collect();
    let mut f = std::fs::File::create(&out).unwrap();
    writeln!(f, "{}", keep.join("\n")).unwrap();
    write!(f, "{{\"type\":\"sample\",\"run_id\":\"x\",\"conte").unwrap();
    drop(f);

    let a = with_url(args(&["--resume"]));
    let (code, _, stderr) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("torn line"),
        "torn line not reported: {stderr}"
    );
    assert!(stderr.contains("2 sample(s) already recorded"), "{stderr}");
    let after = samples(&out);
    assert_eq!(after.len(), 4, "resume repeated or lost samples");
    let keys: HashSet<_> = after.iter().map(|s| (s.context_tokens, s.rep)).collect();
    assert_eq!(keys.len(), 4);
    assert_eq!(after[..2], full[..2], "earlier samples were changed");
    assert!(after.iter().all(|s| s.run_id == full[0].run_id));

    // Resuming with another configuration is refused, with what changed.
    let mut a = with_url(args(&["--resume"]));
    let i = a.iter().position(|s| s == "2").unwrap();
    a[i] = "5".into();
    let (code, _, stderr) = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        code, 2,
        "the user's options differ from the file's: {stderr}"
    );
    let changed: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(" -> "))
        .collect();
    assert_eq!(
        changed,
        ["reps.max_reps: 2 -> 5", "reps.min_reps: 2 -> 5"],
        "{stderr}"
    );
    assert_eq!(samples(&out).len(), 4);
}

#[test]
fn the_openai_backend_measures_the_same_server_exactly() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let r = sweep(
        &srv.url(),
        &["--backend", "openai", "--contexts", "1k,2k", "--reps", "2"],
    )
    .ok()
    .results();
    assert_eq!(r.header.config.backend, "openai");
    assert_eq!(r.samples.len(), 4);
    for x in &r.samples {
        assert_eq!(x.prompt_tokens, Some(x.context_tokens), "{x:?}");
        assert_eq!(x.cached_tokens, Some(0), "{x:?}");
        assert_eq!(x.output_tokens, Some(32));
        assert!(x.server.as_ref().and_then(|t| t.prompt_ms).is_some());
    }
}

/// Files under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        match p.is_dir() {
            true => out.extend(files_under(&p)),
            false => out.push(p),
        }
    }
    out
}

/// The nonce history (first tokens earlier runs sent) is the only state ctxbench keeps: in
/// `$XDG_STATE_HOME/ctxbench/nonce/`, else `~/.local/state/ctxbench/nonce/`, and nothing
/// else in the home folder. The test harness points XDG_STATE_HOME at its own folder, so
/// the suite never writes the user's home.
#[test]
fn the_nonce_history_is_the_only_state_and_tests_keep_it_out_of_the_home_folder() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    let port = srv.port.to_string();
    let names_this_server = |p: &std::path::Path| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains(&format!("_{port}_")))
    };
    let sweep_args = ["--contexts", "1k", "--reps", "1", "--output-tokens", "16"];

    // Through the harness: the history lands in the harness's folder.
    sweep(&srv.url(), &sweep_args).ok();
    let harness = common::state_home().join("ctxbench/nonce");
    let kept: Vec<_> = files_under(&harness)
        .into_iter()
        .filter(|p| names_this_server(p))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let ids = std::fs::read_to_string(&kept[0]).unwrap();
    assert!(!ids.trim().is_empty(), "no first tokens kept");

    // With XDG_STATE_HOME set, a run writes nothing in HOME; without it, only the history
    // under HOME/.local/state.
    let home = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, xdg) in [Some(state.path()), None].into_iter().enumerate() {
        let out = dir.path().join(format!("r{i}.jsonl"));
        let mut cmd = common::ctxbench();
        cmd.args(["sweep", "--url", &srv.url()])
            .args(sweep_args)
            .args(["--out", out.to_str().unwrap()])
            .env("HOME", home.path())
            .env_remove("CTXBENCH_URL")
            .env_remove("CTXBENCH_API_KEY");
        match xdg {
            Some(x) => cmd.env("XDG_STATE_HOME", x),
            None => cmd.env_remove("XDG_STATE_HOME"),
        };
        let o = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        let in_home = files_under(home.path());
        match xdg {
            Some(x) => {
                assert!(in_home.is_empty(), "written in HOME: {in_home:?}");
                let f = files_under(x);
                assert!(
                    f.len() == 1 && f[0].starts_with(x.join("ctxbench/nonce")),
                    "{f:?}"
                );
            }
            None => {
                assert_eq!(in_home.len(), 1, "{in_home:?}");
                assert!(
                    in_home[0].starts_with(home.path().join(".local/state/ctxbench/nonce"))
                        && names_this_server(&in_home[0]),
                    "{in_home:?}"
                );
            }
        }
    }
}

/// A `--backend` that does not fit the server is the user's mistake: exit 2, naming what the
/// server looks like, before any results file is made.
#[test]
fn a_backend_that_does_not_fit_the_real_server_is_a_usage_error() {
    let _g = serial();
    let srv = RefServer::start(4096, &[]);
    for backend in ["sglang", "vllm"] {
        let run = sweep(&srv.url(), &["--backend", backend, "--contexts", "1k"]);
        assert_eq!(run.code, 2, "{backend}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "--backend {backend} does not fit this server: it looks like llama.cpp"
            )),
            "{}",
            run.stderr
        );
        assert!(
            !run.out.exists(),
            "{backend}: a results file was left behind"
        );
    }
    assert_eq!(
        srv.metric("llamacpp:prompt_tokens_total"),
        0.0,
        "a prompt was sent"
    );
}
