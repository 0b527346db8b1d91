//! Faults against the real reference llama-server: a server killed mid-prefill, a stalled
//! (SIGSTOPped) server, Ctrl-C, and API keys. Nothing measured may be lost.

use crate::common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{ctxbench, run, serial, signal, sweep, wait_for_samples, RefServer};
use ctxbench_schema::record::{read_results, Status};

/// A sweep running in the background, writing to a fresh temporary results file.
struct Running {
    child: Child,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts `ctxbench sweep --url URL ARGS... --out <tmp>/r.jsonl` without waiting for it.
fn spawn_sweep(url: &str, args: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let child = ctxbench()
        .args(["sweep", "--url", url])
        .args(args)
        .arg("--out")
        .arg(&out)
        .env_remove("CTXBENCH_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ctxbench");
    Running {
        child,
        out,
        _dir: dir,
    }
}

fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_server_killed_mid_prefill_loses_nothing_and_resume_completes_the_run() {
    let _g = serial();
    let srv = RefServer::start(32768, &[]);
    let port = srv.port;
    let url = srv.url();
    let args = ["--contexts", "1k,16k", "--reps", "2"];
    let running = spawn_sweep(&url, &args);
    wait_for_samples(&running.out, 2, Duration::from_secs(60));
    // The 16k request is in flight once the server says it is processing: kill the server.
    srv.wait_processing(Duration::from_secs(60));
    drop(srv);
    let (code, _, stderr) = finish(running.child);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--resume"), "no resume hint: {stderr}");
    let before = read_results(&running.out, false).unwrap().samples;
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(before[..2]
        .iter()
        .all(|s| s.status == Status::Ok && s.context_tokens == 1024));
    let failed = &before[2];
    assert_eq!(failed.status, Status::Failed);
    let e = failed.error.as_ref().unwrap();
    assert!(matches!(e.kind.as_str(), "transport" | "connect"), "{e:?}");
    assert!(e.message.contains("server"), "cause not named: {e:?}");

    // Restart the server where it was and resume.
    let srv = RefServer::start_on(port, 32768, &[]);
    // The same command line, with --resume.
    let out = running.out.to_str().unwrap();
    let resume = [
        &["sweep", "--url", &url][..],
        &args,
        &["--out", out, "--resume"],
    ];
    let (code, stdout, stderr) = run(&resume.concat());
    assert_eq!(code, 0, "{stderr}");
    let after = read_results(&running.out, false).unwrap().samples;
    assert_eq!(after[..3], before[..], "resume changed earlier lines");
    let ok: Vec<_> = after.iter().filter(|s| s.status == Status::Ok).collect();
    let keys: HashSet<_> = ok.iter().map(|s| (s.context_tokens, s.rep)).collect();
    assert_eq!(ok.len(), 4, "each sample measured exactly once: {after:?}");
    assert_eq!(keys.len(), 4);
    assert!(ok.iter().all(|s| s.cached_tokens == Some(0)));
    // The retried failure no longer counts in the summary.
    let row = stdout.lines().find(|l| l.starts_with("16k ")).unwrap();
    assert!(!row.contains("failed"), "{row}");
    drop(srv);
}

#[test]
fn a_stalled_server_hits_the_stall_timeout_and_the_sweep_reports_it() {
    let _g = serial();
    let srv = RefServer::start(32768, &[]);
    let running = spawn_sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,16k",
            "--reps",
            "1",
            "--stall-timeout",
            "2",
        ],
    );
    wait_for_samples(&running.out, 1, Duration::from_secs(60));
    // Freeze the server while it works on the 16k request, once its stream has begun.
    srv.wait_prefill_progress(Duration::from_secs(60));
    signal(srv.pid(), "-STOP");
    let (code, _, stderr) = finish(running.child);
    signal(srv.pid(), "-CONT");
    assert_eq!(code, 1, "{stderr}");
    let s = read_results(&running.out, false).unwrap().samples;
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].status, Status::Ok);
    let e = s[1].error.as_ref().expect("16k sample failed");
    // The stall detector, not the request timeout (minutes at 16k), ended it.
    assert_eq!(e.kind, "stalled", "{e:?}");
    assert!(stderr.contains("FAILED"), "{stderr}");
}

#[test]
fn ctrl_c_keeps_every_sample_prints_the_partial_summary_and_exits_130() {
    let _g = serial();
    let srv = RefServer::start(32768, &[]);
    let running = spawn_sweep(
        &srv.url(),
        &["--contexts", "1k,2k,4k,8k,16k", "--reps", "3"],
    );
    wait_for_samples(&running.out, 3, Duration::from_secs(60));
    signal(running.child.id(), "-INT");
    let (code, stdout, stderr) = finish(running.child);
    assert_eq!(code, 130, "{stderr}");
    assert!(
        stderr.contains("interrupted") && stderr.contains("--resume"),
        "{stderr}"
    );
    assert!(stdout.contains("1k "), "partial summary missing: {stdout}");
    let r = read_results(&running.out, false).unwrap();
    assert_eq!(r.torn_bytes, 0);
    assert!(r.samples.len() >= 3 && r.samples.len() < 15);
    assert!(r.samples.iter().all(|s| s.status == Status::Ok));
}

#[test]
fn a_second_ctrl_c_exits_at_once_where_a_single_one_cannot_finish() {
    let _g = serial();
    let srv = RefServer::start(32768, &[]);
    // A frozen server: the probe's request is in flight and can never be answered, so the
    // first Ctrl-C's orderly path (finish the request, save, report) cannot end the run.
    signal(srv.pid(), "-STOP");
    let mut running = spawn_sweep(&srv.url(), &["--contexts", "1k", "--reps", "1"]);
    // The results file is created before the probe, and after the Ctrl-C handler.
    let start = std::time::Instant::now();
    while !running.out.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "no results file");
        std::thread::sleep(Duration::from_millis(10));
    }
    // stderr line by line, so the second Ctrl-C goes only after the first was handled: two
    // sent closer than a loaded host handles one arrive as one, and the run never ends.
    let (tx, lines) = std::sync::mpsc::channel();
    let mut err = BufReader::new(running.child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        let mut line = String::new();
        while err.read_line(&mut line).is_ok_and(|n| n > 0) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            line.clear();
        }
        all
    });
    signal(running.child.id(), "-INT");
    let waited = std::time::Instant::now();
    let handled = loop {
        let left = Duration::from_secs(120).saturating_sub(waited.elapsed());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains("Ctrl-C again to quit now") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    if !handled {
        // Not left hanging on the frozen server.
        let _ = running.child.kill();
        signal(srv.pid(), "-CONT");
        panic!("the first Ctrl-C was not handled in 120 s");
    }
    // A run the first Ctrl-C could end would have ended by now (a loaded host only delays
    // that, so this check can miss such a run but never fails a good one).
    std::thread::sleep(Duration::from_secs(1));
    let after_one = running.child.try_wait().unwrap();
    signal(running.child.id(), "-INT");
    let (code, _, _) = finish(running.child);
    let stderr = reader.join().unwrap();
    signal(srv.pid(), "-CONT");
    assert!(after_one.is_none(), "one Ctrl-C ended the run: {stderr}");
    assert_eq!(code, 130, "{stderr}");
}

/// How one SIGTERM of a busy llama-server ended the sweep's request.
#[derive(Debug, PartialEq)]
enum ShutdownEnding {
    /// The sweep's own watch saw that nothing listened any more and ended the request.
    Watched,
    /// The server closed the stream itself before the watch looked (the stream's EOF).
    ClosedByServer,
}

/// One sweep whose 16k request is in flight when llama-server gets SIGTERM; asserts what
/// holds however the server shuts down, and says who ended the request.
fn shut_down_mid_request() -> ShutdownEnding {
    let mut srv = RefServer::start(32768, &[]);
    let running = spawn_sweep(&srv.url(), &["--contexts", "1k,16k", "--reps", "1"]);
    wait_for_samples(&running.out, 1, Duration::from_secs(60));
    srv.wait_processing(Duration::from_secs(60));
    signal(srv.pid(), "-TERM");
    let (code, stdout, stderr) = finish(running.child);
    let server_exited = srv.exited();
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("connection lost"), "{stderr}");
    assert!(
        stderr.contains("stopped early") && stderr.contains("--resume"),
        "{stderr}"
    );
    assert!(
        stdout.contains("sweep efficiency: not computed: the sweep stopped early"),
        "{stdout}"
    );
    let s = read_results(&running.out, false).unwrap().samples;
    assert_eq!(s.len(), 2, "{s:?}");
    let e = s[1].error.as_ref().unwrap();
    assert_eq!(e.kind, "transport");
    if e.message.contains("stopped accepting connections") {
        return ShutdownEnding::Watched;
    }
    // Otherwise the stream ended under the request: the server closed it on its way out,
    // and is gone.
    assert!(
        e.message.contains("unexpected EOF") && server_exited,
        "neither the watch nor the server ended the request: {e:?}; {stderr}"
    );
    ShutdownEnding::ClosedByServer
}

#[test]
fn a_server_shutting_down_mid_request_stops_the_sweep_before_the_server_is_gone() {
    let _g = serial();
    // On SIGTERM llama-server stops listening at once, then ends in one of two ways, a race
    // between its threads that host load tips either way (measured: either one on an idle
    // host): its HTTP thread takes the last result after the listener closed, and the server
    // closes the stream and exits within ~0.1 s; or that thread was already waiting for the
    // next one, and the server holds the request open, silent, until its 30 s SSE ping, then
    // exits. Only the hold needs the sweep's watch (a TCP connect each second): it must end
    // the request, not the server's exit. So each attempt asserts what holds both ways, and
    // an attempt the server ended itself is made again, until the watch has ended one.
    const ATTEMPTS: usize = 8;
    let mut endings = Vec::new();
    while endings.len() < ATTEMPTS {
        let e = shut_down_mid_request();
        eprintln!("shutdown {}: {e:?}", endings.len() + 1);
        if e == ShutdownEnding::Watched {
            return;
        }
        endings.push(e);
    }
    panic!(
        "in {ATTEMPTS} shutdowns the sweep's watch never ended the request (each time the stream's end did: {endings:?})"
    );
}

const KEY: &str = "sk-ctxbench-SECRET-4f7a9c1e";

#[test]
fn the_api_key_authenticates_and_appears_in_no_output() {
    let _g = serial();
    let srv = RefServer::start(8192, &["--api-key", KEY]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("key.jsonl");
    let url = srv.url();
    let o = ctxbench()
        .args([
            "sweep",
            "--url",
            &url,
            "--contexts",
            "1k",
            "--reps",
            "1",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("CTXBENCH_API_KEY", KEY)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    // Every file the sweep wrote (results, Markdown and HTML reports, SVG plots), and the
    // terminal output.
    let mut outputs = vec![
        ("stdout".to_owned(), stdout.to_string()),
        ("stderr".to_owned(), stderr.to_string()),
    ];
    let mut dirs = vec![dir.path().to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                outputs.push((
                    p.display().to_string(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ));
            }
        }
    }
    assert!(
        outputs.len() >= 5,
        "expected results, reports and plots: {:?}",
        outputs.iter().map(|o| &o.0).collect::<Vec<_>>()
    );
    for (name, text) in &outputs {
        assert!(!text.contains(KEY), "the API key leaked into {name}");
        assert!(
            !text.contains("SECRET"),
            "part of the API key leaked into {name}"
        );
    }
    // The report subcommand, run on the results, prints no key either.
    let (code, report, _) = run(&["report", out.to_str().unwrap(), "--format", "html"]);
    assert_eq!(code, 0);
    assert!(!report.contains("SECRET"));
    // --api-key-env names another variable; a wrong key is a one-line usage error.
    let wrong = "sk-wrong-SECRET-000";
    let o = ctxbench()
        .args([
            "sweep",
            "--url",
            &url,
            "--contexts",
            "1k",
            "--api-key-env",
            "MY_KEY",
            "--out",
            dir.path().join("w.jsonl").to_str().unwrap(),
        ])
        .env("MY_KEY", wrong)
        .env("CTXBENCH_API_KEY", KEY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("API key"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRET"), "a key leaked into the error");
    // Without any key the server refuses too, with the same advice.
    let keyless = sweep(&url, &["--contexts", "1k"]);
    assert_eq!(keyless.code, 2, "{}", keyless.stderr);
    assert!(
        keyless.stderr.contains("401") && keyless.stderr.contains("--api-key-env"),
        "{}",
        keyless.stderr
    );
}
