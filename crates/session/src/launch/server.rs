//! A server process that ctxbench starts, waits for, and always stops.
//!
//! Lifecycle: pick a free port → spawn the variant's argv (no shell) in its own process group
//! with stdout and stderr appended to a log file → poll until ready → hand out the URL →
//! [`ManagedServer::stop`]: SIGTERM to the group, a grace period, then SIGKILL.
//!
//! Nothing is left running, whatever happens to ctxbench:
//! - returns early or panics: the [`ManagedServer`] `Drop` kills the group;
//! - Ctrl-C: the server is in its own process group, so the terminal's SIGINT does not reach
//!   it (ctxbench decides when it stops: the first Ctrl-C lets the sweep save what it measured
//!   and then stops the server normally). A handler that exits the process at once must call
//!   [`kill_all`] first, because `std::process::exit` runs no destructors;
//! - killed outright (SIGKILL, OOM killer): on Linux the server is spawned with
//!   `PR_SET_PDEATHSIG = SIGTERM`, so the kernel terminates it when the thread that spawned it
//!   dies. Start servers from a long-lived thread (the binary's runtime thread), not from a
//!   `spawn_blocking` worker that may exit while the server is still needed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::template::Variant;

/// How many log lines an error carries.
pub const TAIL_LINES: usize = 20;

/// Why a managed server could not be started, or died.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The log file could not be created or written.
    #[error("cannot write the server log {}: {source}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No free local port could be reserved.
    #[error("cannot reserve a free port on 127.0.0.1: {0}")]
    Port(std::io::Error),
    /// The program could not be executed at all.
    #[error("cannot start '{program}': {source} (check the path in --server-cmd)")]
    Spawn {
        /// The program (first word of the command).
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server exited before it was ready.
    #[error("the server exited with {status} before it was ready: {command}\nlast lines of {}:\n{tail}", log.display())]
    Exited {
        /// The exact command line.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// The log file.
        log: PathBuf,
        /// Its last lines from this start.
        tail: String,
    },
    /// The server kept running but never answered ready in time; it has been stopped.
    #[error("the server was not ready after {waited:?} (none of {paths} answered 200): {command}\nlast lines of {}:\n{tail}\n(raise the start timeout if the model takes longer to load)", log.display())]
    NotReady {
        /// The exact command line.
        command: String,
        /// How long ctxbench waited.
        waited: Duration,
        /// The readiness paths tried.
        paths: String,
        /// The log file.
        log: PathBuf,
        /// Its last lines from this start.
        tail: String,
    },
    /// The server died after it was ready (mid-run).
    #[error("the server died with {status}: {command}\nlast lines of {}:\n{tail}", log.display())]
    Died {
        /// The exact command line.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// The log file.
        log: PathBuf,
        /// Its last lines from this start.
        tail: String,
    },
    /// Waiting for or signalling the process failed.
    #[error("cannot control the server process {pid}: {source}")]
    Process {
        /// Its process id.
        pid: u32,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Timeouts and readiness checks for managed servers.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// How long a server may take to become ready (model loading can take minutes).
    pub ready_timeout: Duration,
    /// Paths polled for readiness, in order: the first that exists (answers anything but 404)
    /// decides, and ready means it answered 200. llama-server answers 503 on all of them while
    /// it loads; vLLM and SGLang have `/health`; Ollama has only `/v1/models`.
    pub ready_paths: Vec<String>,
    /// Pause between polls.
    pub poll_interval: Duration,
    /// How long [`ManagedServer::stop`] waits after SIGTERM before SIGKILL.
    pub grace: Duration,
    /// Starts on a fresh port after the server reported its port taken (see [`port_taken`]).
    pub port_attempts: u32,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            ready_timeout: Duration::from_secs(600),
            ready_paths: vec!["/health".into(), "/v1/models".into(), "/props".into()],
            poll_interval: Duration::from_millis(200),
            grace: Duration::from_secs(10),
            port_attempts: 3,
        }
    }
}

/// How a server ended after [`ManagedServer::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Its exit status.
    pub status: ExitStatus,
    /// SIGTERM was not enough within the grace period: it was killed.
    pub forced: bool,
}

/// Process groups of the servers alive now, for [`kill_all`].
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<i32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// SIGKILLs every managed server's process group. For the binary's "quit now" path (second
/// Ctrl-C), which leaves through `std::process::exit` where no destructor runs. Safe to call
/// more than once.
pub fn kill_all() {
    for pgid in live().drain(..) {
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: killpg has no memory-safety preconditions; ESRCH (already gone) is fine.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

/// The server's log shows it could not bind its port (someone took it between ctxbench
/// releasing it and the server binding it).
pub fn port_taken(log_tail: &str) -> bool {
    let t = log_tail.to_ascii_lowercase();
    t.contains("address already in use")
        || t.contains("couldn't bind")
        || t.contains("could not bind")
        || t.contains("eaddrinuse")
}

/// The last `n` lines of `path` from byte `from` on (at most the last 64 KiB of it).
pub fn log_tail(path: &Path, from: u64, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = from.max(len.saturating_sub(64 * 1024));
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A server started by ctxbench. Dropping it kills its process group.
#[derive(Debug)]
pub struct ManagedServer {
    child: Child,
    pgid: i32,
    port: u16,
    command: String,
    log: PathBuf,
    log_start: u64,
    reaped: bool,
}

impl ManagedServer {
    /// Starts `variant` on a free port, its output appended to `log`, and waits until it is
    /// ready. Retries on a fresh port when the server says its port was taken. On failure the
    /// process group is gone and the error carries the exit status and the log's last lines.
    pub async fn start(
        variant: &Variant,
        log: &Path,
        opts: &LaunchOptions,
    ) -> Result<ManagedServer, LaunchError> {
        let mut attempt = 1;
        loop {
            let server = Self::spawn(variant, log)?;
            match server.wait_ready(opts).await {
                Err(LaunchError::Exited { command, tail, .. })
                    if port_taken(&tail) && attempt < opts.port_attempts =>
                {
                    let _ = append_line(
                        log,
                        &format!(
                            "==> ctxbench: port taken ({command}), retrying on another port (attempt {})",
                            attempt + 1
                        ),
                    );
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn spawn(variant: &Variant, log: &Path) -> Result<ManagedServer, LaunchError> {
        let log_err = |source| LaunchError::Log {
            path: log.to_owned(),
            source,
        };
        // Hold the port until the last moment: the kernel hands out ephemeral ports in
        // sequence, so one just released is rarely handed out again at once; the remaining
        // race (another process binding it before the server does) is caught by `port_taken`.
        let listener = TcpListener::bind("127.0.0.1:0").map_err(LaunchError::Port)?;
        let port = listener.local_addr().map_err(LaunchError::Port)?.port();
        let argv = variant.argv(port);
        let command = variant.command_line(port);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(log_err)?;
        let log_start = file.metadata().map_err(log_err)?.len();
        writeln!(file, "==> ctxbench: starting: {command}").map_err(log_err)?;
        let log_start = log_start.max(file.metadata().map_err(log_err)?.len());
        let err = file.try_clone().map_err(log_err)?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .process_group(0);
        #[cfg(target_os = "linux")]
        {
            // SAFETY: getpid is called before the fork; the closure runs between fork and
            // exec and only calls async-signal-safe functions (prctl, getppid, _exit).
            let parent = unsafe { libc::getpid() };
            unsafe {
                cmd.pre_exec(move || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    // The parent may have died before prctl took effect.
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
        }
        drop(listener);
        let child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            program: argv[0].clone(),
            source,
        })?;
        let pgid = child.id() as i32;
        live().push(pgid);
        Ok(ManagedServer {
            child,
            pgid,
            port,
            command,
            log: log.to_owned(),
            log_start,
            reaped: false,
        })
    }

    async fn wait_ready(mut self, opts: &LaunchOptions) -> Result<ManagedServer, LaunchError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| LaunchError::Port(std::io::Error::other(e)))?;
        let started = Instant::now();
        loop {
            if let Some(status) = self.try_wait()? {
                self.kill_group();
                return Err(LaunchError::Exited {
                    command: self.command.clone(),
                    status,
                    log: self.log.clone(),
                    tail: self.tail(),
                });
            }
            if self.ready_once(&http, &opts.ready_paths).await {
                return Ok(self);
            }
            if started.elapsed() >= opts.ready_timeout {
                self.kill_group();
                let _ = self.reap(Duration::from_secs(5)).await;
                return Err(LaunchError::NotReady {
                    command: self.command.clone(),
                    waited: started.elapsed(),
                    paths: opts.ready_paths.join(", "),
                    log: self.log.clone(),
                    tail: self.tail(),
                });
            }
            tokio::time::sleep(opts.poll_interval).await;
        }
    }

    /// The first readiness path that exists decides.
    async fn ready_once(&self, http: &reqwest::Client, paths: &[String]) -> bool {
        for p in paths {
            match http.get(format!("{}{p}", self.base_url())).send().await {
                Ok(r) if r.status().as_u16() == 404 => continue,
                Ok(r) => return r.status().as_u16() == 200,
                // Not listening yet.
                Err(_) => return false,
            }
        }
        false
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`, for the sweep's `--url`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The exact command line that runs (secrets redacted), for the results header.
    pub fn command_line(&self) -> &str {
        &self.command
    }

    /// Process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last [`TAIL_LINES`] lines the server logged since this start.
    pub fn tail(&self) -> String {
        log_tail(&self.log, self.log_start, TAIL_LINES)
    }

    /// std's `Child` keeps the status once reaped, so this can be called again after exit.
    fn try_wait(&mut self) -> Result<Option<ExitStatus>, LaunchError> {
        match self.child.try_wait() {
            Ok(Some(s)) => {
                self.reaped = true;
                Ok(Some(s))
            }
            Ok(None) => Ok(None),
            Err(source) => Err(LaunchError::Process {
                pid: self.pid(),
                source,
            }),
        }
    }

    /// `Err(Died)` with the log tail if the server has exited (call between sweep points,
    /// or after a request failed, to tell a dead server from a slow one).
    pub fn check_alive(&mut self) -> Result<(), LaunchError> {
        match self.try_wait()? {
            None => Ok(()),
            Some(status) => {
                self.kill_group();
                Err(LaunchError::Died {
                    command: self.command.clone(),
                    status,
                    log: self.log.clone(),
                    tail: self.tail(),
                })
            }
        }
    }

    /// Stops the server: SIGTERM to its group, up to `grace` to exit, then SIGKILL.
    pub async fn stop(mut self, grace: Duration) -> Result<Stopped, LaunchError> {
        if !self.reaped {
            signal_group(self.pgid, libc::SIGTERM);
        }
        if let Some(status) = self.reap(grace).await? {
            // Helpers the server started may outlive it; the group goes with it.
            self.kill_group();
            return Ok(Stopped {
                status,
                forced: false,
            });
        }
        self.kill_group();
        let status = match self.reap(Duration::from_secs(30)).await? {
            Some(s) => s,
            None => self.child.wait().map_err(|source| LaunchError::Process {
                pid: self.child.id(),
                source,
            })?,
        };
        self.reaped = true;
        Ok(Stopped {
            status,
            forced: true,
        })
    }

    /// Waits up to `limit` for the process to exit; `None` if it is still running.
    async fn reap(&mut self, limit: Duration) -> Result<Option<ExitStatus>, LaunchError> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if start.elapsed() >= limit {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn kill_group(&mut self) {
        signal_group(self.pgid, libc::SIGKILL);
        live().retain(|&g| g != self.pgid);
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        if self.reaped {
            live().retain(|&g| g != self.pgid);
            return;
        }
        self.kill_group();
        // SIGKILL cannot be ignored: this wait is short. Reaping leaves no zombie.
        let _ = self.child.wait();
    }
}

fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    writeln!(f, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_taken_reads_llama_server_and_generic_messages() {
        assert!(port_taken(
            "srv    operator(): couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"
        ));
        assert!(port_taken("OSError: [Errno 98] Address already in use"));
        assert!(!port_taken("error: invalid argument: --bogus"));
    }

    #[test]
    fn log_tail_keeps_the_last_lines_after_the_start_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.log");
        let mut text = String::from("old run line\n");
        let from = text.len() as u64;
        for i in 0..30 {
            text.push_str(&format!("line {i}\n"));
        }
        std::fs::write(&p, &text).unwrap();
        let t = log_tail(&p, from, 20);
        assert_eq!(t.lines().count(), 20);
        assert!(t.starts_with("line 10") && t.ends_with("line 29"), "{t}");
        assert_eq!(log_tail(&p, from, 100).lines().count(), 30);
        assert!(!log_tail(&p, from, 100).contains("old run"));
        assert_eq!(log_tail(&dir.path().join("none"), 0, 5), "");
    }
}
