//! Routers in front of two real llama-server workers (issue 31): vllm-router 0.1.17 and
//! sglang-router 0.3.2 (`smg`), both from PyPI (`scripts/reference-server routers setup`,
//! which `scripts/test` runs). Each test starts two reference llama-servers (one slot, slot
//! erase on) and a router with `--policy round_robin`, then checks what ctxbench makes of
//! it: the router named as a router with its workers, the router's fan-out flush judged per
//! worker, each worker flushed by ctxbench itself, the samples spread over the workers and
//! recorded with the one that served each, and work sent straight to one worker caught.
//! Cheap on purpose: 1k prompts, 16 output tokens, a few samples per sweep.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::real::{has_flag, http_post_json, read_lines};
use crate::common::{self, free_port, http_get, RefServer};

/// Where `scripts/reference-server routers --paths` put the two routers' binaries.
struct RouterPaths {
    vllm_router: PathBuf,
    smg: PathBuf,
}

fn router_paths() -> &'static RouterPaths {
    static P: OnceLock<RouterPaths> = OnceLock::new();
    P.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server");
        let out = Command::new(&script)
            .args(["routers", "--paths"])
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run scripts/reference-server routers --paths");
        assert!(
            out.status.success(),
            "scripts/reference-server routers --paths failed: vllm-router and sglang-router are required for these tests"
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).map(|v| PathBuf::from(v.trim())))
                .unwrap_or_else(|| panic!("no '{key}' in --paths output: {text}"))
        };
        RouterPaths {
            vllm_router: get("vllm-router "),
            smg: get("smg "),
        }
    })
}

/// Two reference llama-servers, one slot each, slot erase enabled (ctxbench's own flush).
pub(crate) struct Workers {
    servers: Vec<RefServer>,
    _slots: tempfile::TempDir,
}

impl Workers {
    pub(crate) fn start() -> Workers {
        let slots = tempfile::tempdir().unwrap();
        let dir = slots.path().to_str().unwrap().to_owned();
        let servers = (0..2)
            .map(|_| RefServer::start(4096, &["--slot-save-path", &dir, "-t", "1"]))
            .collect();
        Workers {
            servers,
            _slots: slots,
        }
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RefServer::url).collect()
    }
}

/// A router process, killed on drop.
pub(crate) struct Router {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Vllm,
    Sglang,
}

impl Router {
    /// Starts the router in front of `workers` with `--policy round_robin`, on loopback,
    /// and waits until it says both are healthy (`/readiness`).
    fn start(kind: Kind, workers: &[String]) -> Router {
        Self::start_with(kind, workers, "round_robin")
    }

    /// Like [`Router::start`], with another `--policy`.
    pub(crate) fn start_with(kind: Kind, workers: &[String], policy: &str) -> Router {
        let p = router_paths();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("router.log");
        let port = free_port();
        let metrics_port = free_port().to_string();
        let mut cmd = match kind {
            Kind::Vllm => Command::new(&p.vllm_router),
            Kind::Sglang => {
                let mut c = Command::new(&p.smg);
                c.arg("launch");
                c
            }
        };
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--worker-urls")
            .args(workers)
            .args(["--policy", policy])
            // Both bind their Prometheus port on 0.0.0.0 unless told.
            .args(["--prometheus-host", "127.0.0.1"])
            .args(["--prometheus-port", &metrics_port]);
        let logf = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("cannot start the router");
        let mut r = Router {
            child,
            port,
            log,
            _dir: dir,
        };
        r.wait_ready(workers.len());
        r
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&mut self, workers: usize) {
        let start = Instant::now();
        let want = format!("\"healthy_workers\":{workers}");
        while start.elapsed() < Duration::from_secs(60) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the router exited with {status}: {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if http_get(self.port, "/readiness").is_some_and(|(c, b)| c == 200 && b.contains(&want))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the router did not report {workers} healthy worker(s) in 60 s: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SWEEP: &str = "--contexts 1k --reps 4 --output-tokens 16";

/// sglang-router (smg 0.3.2) holds the head of a stream on a kept-alive connection until the
/// client's delayed ACK of the response headers (40 ms here, up to 200 ms by the kernel's
/// rules): measured with a raw socket, 18 events of a 16-token answer in one read at 47 ms
/// after a first request on the same connection, streamed at 23-34 ms on a fresh one, and
/// streamed on the reused one once the client set TCP_QUICKACK (docs/fleets.md). A decode
/// shorter than that hold arrives in one burst, rightly flagged held_back_stream with no
/// TTFT: 1024 tokens outlast it on any host this model runs on (0.8 ms a token here, 200 ms
/// even at a quarter of that).
const SGLANG_SWEEP: &str = "--contexts 1k --reps 4 --output-tokens 1024";

/// A JSON list of strings, sorted (a router lists its workers in an order of its own).
fn sorted(v: &Value) -> Vec<String> {
    let mut l: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap_or_default().to_owned())
        .collect();
    l.sort();
    l
}

/// The samples' serving workers, in order (`None`: unknown).
fn served_by(samples: &[Value]) -> Vec<Option<String>> {
    samples
        .iter()
        .map(|s| s["fleet"]["served_by"].as_str().map(str::to_owned))
        .collect()
}

/// Each worker served at least one sample, and every sample's worker is known.
fn assert_spread(samples: &[Value], workers: &[String]) {
    let by = served_by(samples);
    assert!(
        by.iter().all(Option::is_some),
        "serving worker unknown: {by:?}"
    );
    for w in workers {
        assert!(
            by.iter().any(|b| b.as_deref() == Some(w.as_str())),
            "round_robin sent nothing to {w}: {by:?}"
        );
    }
}

#[test]
fn fleet_vllm_router_named_flushed_per_worker_and_samples_spread() {
    let _serial = common::serial();
    let workers = Workers::start();
    let urls = workers.urls();
    let router = Router::start(Kind::Vllm, &urls);
    let run = common::sweep(&router.url(), &common::argv(SWEEP)).ok();
    // The first line names the router and its workers, never one llama-server.
    let first = run.stderr.lines().next().unwrap_or("");
    assert!(
        first.starts_with("server: vllm-router at ") && first.contains(&urls[1]),
        "{first}"
    );
    assert!(!run.stderr.contains("server: llama.cpp"), "{}", run.stderr);
    let lines = read_lines(&run.out);
    let r = &lines.header["server"]["router"];
    assert_eq!(r["kind"], "vllm-router");
    assert_eq!(sorted(&r["workers"]), sorted(&json!(urls)));
    assert!(
        r["meaning"]
            .as_str()
            .unwrap()
            .contains("cold proof stays per sample"),
        "{r}"
    );
    // vllm-router's 500 names no worker: every worker's verdict is unknown, never a success.
    let fanout = r["fanout_flush"]
        .as_array()
        .expect("the router's flush judged");
    assert_eq!(fanout.len(), 2, "{r}");
    for v in fanout {
        assert_eq!(v["ok"], false, "{v}");
        assert!(
            v["detail"].as_str().unwrap().contains("answered 500"),
            "{v}"
        );
    }
    // ctxbench's own flush reached both workers, before the sweep and before every sample.
    let own = r["worker_flush"].as_array().expect("each worker flushed");
    assert!(own.iter().all(|v| v["ok"] == true), "{r}");
    for s in &lines.samples {
        let f = s["fleet"]["flush"].as_array().expect("per-sample flush");
        assert_eq!(f.len(), 2, "{s}");
        assert!(f.iter().all(|v| v["ok"] == true), "{s}");
        assert!(!has_flag(s, "foreign_load"), "a quiet fleet: {s}");
    }
    assert_spread(&lines.samples, &urls);
    // The report says how the samples spread.
    let (code, out, err) = common::run(&["report", run.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = format!("{out}{err}");
    assert!(
        text.contains("behind vllm-router: samples served per worker:"),
        "{text}"
    );

    // --worker adds a worker the router does not list: it is read (and serves nothing).
    let one = Router::start(Kind::Vllm, &urls[..1]);
    let args = [&common::argv(SWEEP)[..], &["--worker", &urls[1]]].concat();
    let run = common::sweep(&one.url(), &args).ok();
    let lines = read_lines(&run.out);
    assert_eq!(
        sorted(&lines.header["server"]["router"]["workers"]),
        sorted(&json!(urls))
    );
    for b in served_by(&lines.samples) {
        assert_eq!(b.as_deref(), Some(urls[0].as_str()));
    }
}

#[test]
fn fleet_sglang_router_measured_with_the_workers_context_and_per_worker_flush() {
    let _serial = common::serial();
    let workers = Workers::start();
    let urls = workers.urls();
    let router = Router::start(Kind::Sglang, &urls);
    let run = common::sweep(&router.url(), &common::argv(SGLANG_SWEEP)).ok();
    let first = run.stderr.lines().next().unwrap_or("");
    assert!(first.starts_with("server: sglang-router at "), "{first}");
    let lines = read_lines(&run.out);
    let server = &lines.header["server"];
    let r = &server["router"];
    assert_eq!(r["kind"], "sglang-router");
    assert_eq!(r["workers"].as_array().unwrap().len(), 2, "{r}");
    assert!(
        r["worker_family"]
            .as_str()
            .unwrap()
            .starts_with("llama.cpp"),
        "{r}"
    );
    // The router gives no context length: the workers' own is used.
    assert_eq!(server["max_context"], 4096, "{server}");
    assert!(
        server["max_context_source"]
            .as_str()
            .unwrap()
            .contains("workers"),
        "{server}"
    );
    // Its 206 lists each worker's refusal (llama-server has no /flush_cache).
    let fanout = r["fanout_flush"]
        .as_array()
        .expect("the router's flush judged");
    assert_eq!(fanout.len(), 2, "{r}");
    for v in fanout {
        assert_eq!(v["ok"], false, "{v}");
        let d = v["detail"].as_str().unwrap();
        assert!(d.contains("HTTP 404 Not Found") && d.contains("206"), "{v}");
    }
    // Token ids are refused (422): text calibrated against the server's own counts.
    assert!(
        server["prompt_method"]
            .as_str()
            .unwrap()
            .starts_with("text calibrated"),
        "{server}"
    );
    let ok: Vec<&Value> = lines
        .samples
        .iter()
        .filter(|s| s["status"] == "ok")
        .collect();
    assert_eq!(ok.len(), 4, "every sample measured");
    assert!(
        ok.iter().all(|s| s["cached_tokens"] == 0),
        "cold through the router"
    );
    assert_spread(&lines.samples, &urls);
}

/// Sends requests straight to `port` (a worker, past the router): after each odd sample
/// recorded, it waits until a worker is processing (the next sample is in flight) and sends
/// one request that generates more tokens than the sample. Returns how many it sent.
fn foreign_client(
    ports: Vec<u16>,
    target: u16,
    results: PathBuf,
    events: usize,
    stop: Arc<AtomicBool>,
) -> JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut seen = 0;
        let mut sent = Vec::new();
        while seen < events && !stop.load(Ordering::Relaxed) {
            let n = std::fs::read_to_string(&results)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("\"type\":\"sample\""))
                .count();
            if n <= seen {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            seen = n;
            if seen % 2 == 1 {
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(60) && !stop.load(Ordering::Relaxed) {
                    let busy = ports.iter().any(|p| {
                        http_get(*p, "/slots")
                            .is_some_and(|(_, b)| b.contains("\"is_processing\":true"))
                    });
                    if busy {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                let k = sent.len();
                sent.push(std::thread::spawn(move || {
                    let prompt: Vec<u32> = (0..200u32)
                        .map(|i| 300 + ((i * 37 + k as u32 * 911) % 20_000))
                        .collect();
                    let body = json!({"prompt": prompt, "n_predict": 64, "cache_prompt": false});
                    let r = http_post_json(target, "/completion", &body);
                    assert!(
                        r.as_ref().is_some_and(|(c, _)| *c == 200),
                        "foreign request failed: {r:?}"
                    );
                }));
            }
        }
        let n = sent.len();
        for h in sent {
            h.join().expect("foreign request thread");
        }
        n
    })
}

#[test]
fn fleet_foreign_work_sent_straight_to_one_worker_is_flagged() {
    let _serial = common::serial();
    let workers = Workers::start();
    let urls = workers.urls();
    let ports: Vec<u16> = workers.servers.iter().map(|s| s.port).collect();
    let router = Router::start(Kind::Vllm, &urls);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("busy.jsonl");
    let stop = Arc::new(AtomicBool::new(false));
    let client = foreign_client(ports.clone(), ports[0], out.clone(), 5, Arc::clone(&stop));
    let (code, _, stderr) = common::run(
        &[
            &[
                "sweep",
                "--url",
                &router.url(),
                "--out",
                out.to_str().unwrap(),
            ][..],
            &common::argv("--contexts 1k --reps 6 --output-tokens 16 --idle-wait 30"),
        ]
        .concat(),
    );
    stop.store(true, Ordering::Relaxed);
    let sent = client.join().expect("foreign client");
    assert_eq!(code, 0, "{stderr}");
    assert!(sent >= 2, "the foreign client sent {sent} request(s)");
    let lines = read_lines(&out);
    let flagged: Vec<&Value> = lines
        .samples
        .iter()
        .filter(|s| has_flag(s, "foreign_load"))
        .collect();
    // Each foreign request was sent into a sample in flight: that sample is flagged, with
    // the worker it went to named (whichever worker served the sample).
    assert!(
        flagged.len() >= sent,
        "{} flagged for {sent} foreign request(s): {:?}",
        flagged.len(),
        lines
            .samples
            .iter()
            .map(|s| (s["fleet"]["served_by"].clone(), s["foreign_load"].clone()))
            .collect::<Vec<_>>()
    );
    for s in &flagged {
        let why = s["foreign_load"].as_str().unwrap();
        assert!(why.contains(&urls[0]), "{why}");
    }
    // The samples no foreign request was sent into are clean.
    let clean = lines
        .samples
        .iter()
        .filter(|s| s["status"] == "ok" && !has_flag(s, "foreign_load"))
        .count();
    assert!(clean >= 2, "{clean} clean sample(s)");
}

#[test]
fn fleet_capacity_through_a_router_counts_every_workers_slots_and_records_each_waves_spread() {
    let _serial = common::serial();
    let workers = Workers::start();
    let urls = workers.urls();
    let router = Router::start(Kind::Vllm, &urls);
    let run = common::sweep(
        &router.url(),
        &common::argv("--contexts 1k --concurrency 1,2 --reps 1 --wave-output-tokens 32"),
    )
    .ok();
    let lines = read_lines(&run.out);
    // The pool is the fleet's: one slot per worker, two in all (through the router, /props
    // shows one worker's one slot).
    assert_eq!(lines.header["server"]["total_slots"], 2, "{}", lines.header);
    let pairs: Vec<&Value> = lines
        .samples
        .iter()
        .filter(|s| s["concurrency"] == 2)
        .collect();
    assert_eq!(pairs.len(), 2, "one wave of 2");
    for s in &pairs {
        let spread = &s["fleet"]["wave_spread"];
        // round_robin: two requests in a row go to both workers.
        for w in &urls {
            assert_eq!(spread[w.as_str()], 1, "{s}");
        }
    }
    let (code, out, err) = common::run(&["report", run.out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("concurrency 2: "), "{text}");
    // The capacity map predicts from the fleet's two slots: a wave of 2 fits, as 1 does
    // (one worker's slot would predict "queues" at 2).
    assert_eq!(text.matches("fits→").count(), 2, "{text}");
}
