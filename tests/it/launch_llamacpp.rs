//! The server manager (`ctxbench_session::launch`) against the real reference llama-server: variants
//! start on free ports and answer, stop leaves nothing running, a bad flag fails with the log
//! tail, dropping the guard or killing the parent process kills the server.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use ctxbench_session::launch::{
    LaunchError, LaunchOptions, ManagedServer, ParameterList, ServerTemplate, Variant,
};

/// A marker no other process has, so "nothing left running" can be checked in /proc.
fn marker(tag: &str) -> String {
    format!("ctxbench-launch-{tag}-{}", std::process::id())
}

/// Live (not zombie) processes whose command line contains `needle`.
fn live_with(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmd).contains(needle) {
            continue;
        }
        if is_alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// The process exists and is not a zombie (an orphan's zombie may wait for a non-reaping
/// init in a container; it runs nothing).
fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits (generously) until `cond` holds; the bound only stops a hung test.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still not true after 60 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn template(tag: &str, extra: &str, lists: Vec<ParameterList>) -> ServerTemplate {
    let p = common::ref_paths();
    let cmd = format!(
        "{} -m {} --host 127.0.0.1 --port {{port}} -c 4096 -np 1 --alias {} {extra}",
        shell_words::quote(&p.server.to_string_lossy()),
        shell_words::quote(&p.model.to_string_lossy()),
        marker(tag),
    );
    ServerTemplate::new(&cmd, lists).expect("valid template")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn start(v: &Variant, log: &Path) -> Result<ManagedServer, LaunchError> {
    rt().block_on(ManagedServer::start(v, log, &LaunchOptions::default()))
}

#[test]
fn each_variant_of_a_threads_grid_starts_answers_and_stops() {
    let _s = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let t = template(
        "grid",
        "-t {threads}",
        vec![ParameterList::parse("threads", "1,2").unwrap()],
    );
    let variants = t.variants();
    assert_eq!(variants.len(), 2);
    for (v, threads) in variants.iter().zip(["1", "2"]) {
        let log = dir.path().join(format!("server-{}.log", v.index));
        let server = start(v, &log).unwrap_or_else(|e| panic!("{e}"));
        let (pid, port) = (server.pid(), server.port());
        assert!(is_alive(pid));
        // It is the variant's process: the exact command line, on the port it was given.
        assert_eq!(server.command_line(), v.command_line(server.port()));
        assert!(
            server.command_line().ends_with(&format!(
                "--port {} -c 4096 -np 1 --alias {} -t {threads}",
                server.port(),
                marker("grid")
            )),
            "{}",
            server.command_line()
        );
        assert!(v.label().contains("--port {port}"), "{}", v.label());
        let (code, _) = common::http_get(server.port(), "/health").expect("GET /health");
        assert_eq!(code, 200);
        let (code, body) = common::http_get(server.port(), "/v1/models").expect("GET /v1/models");
        assert_eq!(code, 200);
        assert!(body.contains(&marker("grid")), "{body}");
        // The log beside the results holds the server's own output.
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("==> ctxbench: starting:"), "{text}");
        assert!(
            text.contains(&format!("listening on http://127.0.0.1:{port}")),
            "{text}"
        );

        let stopped = rt().block_on(server.stop(Duration::from_secs(30))).unwrap();
        assert!(!stopped.forced, "llama-server ignored SIGTERM for 30 s");
        assert!(!is_alive(pid), "pid {pid} still running after stop");
        assert!(common::http_get(port, "/health").is_none());
    }
    assert_eq!(live_with(&marker("grid")), Vec::<u32>::new());
}

#[test]
fn a_bad_flag_fails_with_the_log_tail_and_a_nonzero_status_and_leaves_nothing() {
    let _s = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let t = template("badflag", "--no-such-flag-xyz", vec![]);
    let log = dir.path().join("server.log");
    let err = start(&t.variants()[0], &log).expect_err("a bad flag must not start");
    match &err {
        LaunchError::Exited {
            status,
            tail,
            log: l,
            ..
        } => {
            assert!(!status.success(), "{status}");
            assert!(status.code().is_some_and(|c| c != 0), "{status}");
            assert!(tail.contains("--no-such-flag-xyz"), "tail: {tail}");
            assert!(tail.lines().count() <= ctxbench_session::launch::server::TAIL_LINES);
            assert_eq!(l, &log);
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(
        msg.contains("exited with") && msg.contains("--no-such-flag-xyz"),
        "{msg}"
    );
    assert_eq!(live_with(&marker("badflag")), Vec::<u32>::new());
}

#[test]
fn dropping_the_guard_kills_the_server() {
    let _s = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let t = template("drop", "", vec![]);
    let server =
        start(&t.variants()[0], &dir.path().join("s.log")).unwrap_or_else(|e| panic!("{e}"));
    let pid = server.pid();
    assert!(is_alive(pid));
    assert_eq!(live_with(&marker("drop")), vec![pid]);
    drop(server);
    assert!(!is_alive(pid), "pid {pid} survived the drop");
    assert_eq!(live_with(&marker("drop")), Vec::<u32>::new());
}

#[test]
fn kill_all_stops_every_live_server() {
    let _s = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let t = template("killall", "", vec![]);
    let server =
        start(&t.variants()[0], &dir.path().join("s.log")).unwrap_or_else(|e| panic!("{e}"));
    let pid = server.pid();
    ctxbench_session::launch::kill_all();
    // The binary exits right after kill_all; here the guard still reaps it.
    eventually("server gone after kill_all", || {
        live_with(&marker("killall")).is_empty()
    });
    drop(server);
    assert!(!is_alive(pid));
}

const HOLDER: &str = "CTXBENCH_TEST_LAUNCH_HOLDER";

/// Both roles in one test: run plainly, it re-runs itself as a child process (the "holder")
/// that starts a server and then waits forever; it SIGKILLs the holder (no destructor, no
/// handler runs) and checks that the server goes too (PR_SET_PDEATHSIG).
#[test]
fn killing_the_parent_process_leaves_no_server() {
    if let Ok(pidfile) = std::env::var(HOLDER) {
        let dir = tempfile::tempdir().unwrap();
        let t = template("holder", "", vec![]);
        let runtime = rt();
        let server = runtime
            .block_on(ManagedServer::start(
                &t.variants()[0],
                &dir.path().join("s.log"),
                &LaunchOptions::default(),
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&pidfile, server.pid().to_string()).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let _s = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("server.pid");
    let mut holder = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            // Its full path in the one integration-test binary.
            concat!(
                module_path!(),
                "::killing_the_parent_process_leaves_no_server"
            )
            .trim_start_matches("it::"),
            "--nocapture",
        ])
        .env(HOLDER, &pidfile)
        .spawn()
        .unwrap();
    eventually("holder wrote the server pid", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.is_empty())
            || holder.try_wait().unwrap().is_some()
    });
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder failed to start its server"
    );
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(is_alive(pid));
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let start = Instant::now();
    while is_alive(pid) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_alive(pid) {
        // Do not leave it running for the next test; then fail.
        common::signal(pid, "-KILL");
        panic!("server {pid} still running 60 s after its parent was killed");
    }
    assert_eq!(live_with(&marker("holder")), Vec::<u32>::new());
}

#[test]
fn a_command_that_never_answers_times_out_and_its_whole_group_is_killed() {
    // Not a server at all: a shell whose child sleeps, to show the group (not only the
    // direct child) is killed when readiness times out.
    let _s = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let t = ServerTemplate::new("sh -c 'sleep 987.654; true' {port}", vec![]).unwrap();
    let opts = LaunchOptions {
        ready_timeout: Duration::from_millis(500),
        ..LaunchOptions::default()
    };
    let err = rt()
        .block_on(ManagedServer::start(
            &t.variants()[0],
            &dir.path().join("s.log"),
            &opts,
        ))
        .expect_err("never ready");
    assert!(matches!(err, LaunchError::NotReady { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/health, /v1/models, /props"),
        "{err}"
    );
    eventually("sleep 987.654 gone", || live_with("987.654").is_empty());
}

#[test]
fn a_missing_program_is_a_spawn_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = ServerTemplate::new("/nonexistent/llama-server --port {port}", vec![]).unwrap();
    let err = start(&t.variants()[0], &dir.path().join("s.log")).expect_err("no such program");
    assert!(matches!(err, LaunchError::Spawn { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/llama-server"),
        "{err}"
    );
}
