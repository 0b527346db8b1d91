//! "Does speculation pay, and up to which length?" on the real reference llama-server, in
//! three cases whose answers are known before measuring. Each is one campaign
//! (`sweep --server-cmd '... {spec}' -F spec ',-md DRAFT ...'`): the same server with and
//! without a draft model, then the answer from the results files (`compare`).
//!
//! The directions are set by compute no host load can erase, not by timing luck:
//! - the tiny model drafted for by its deep identity twin (the same function behind 10
//!   zero-output layers): every draft is accepted, but each draft step costs several of the
//!   target's own steps: speculation must be slower, and the draft's own prefill, deeper
//!   than the target's, makes TTFT dearer;
//! - the wide deep identity model (the tiny model's function behind 10 zero-output layers,
//!   every FFN 16384 wide, so a step's cost is reading ~340 MB of weights, which a verify
//!   batch shares) as target with the tiny model as draft: every draft is accepted and a
//!   9-token verify costs little more than one plain step: speculation must pay;
//! - a draft with other random weights: nearly nothing is accepted, each step pays 8 draft
//!   steps and a 9-token verify for one token: speculation must cost.

use crate::common;

use std::path::{Path, PathBuf};

use common::{ref_paths, serial};
use serde_json::Value;

/// The results of one speculation campaign: its folder, its terminal output, and the
/// plain and speculative runs.
struct Campaign {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    stdout: String,
    plain: Vec<PathBuf>,
    spec: Vec<PathBuf>,
}

/// Serves `target` with and without `draft` as its draft model (one thread, so a loaded
/// host slows both variants alike), over `args`.
fn campaign(target: &Path, draft: &Path, args: &[&str]) -> Campaign {
    let tmp = tempfile::tempdir().unwrap();
    // Short names, so the variants read `spec=none` and `spec=-md …/draft.gguf …`.
    let models = tmp.path().join("m");
    std::fs::create_dir(&models).unwrap();
    std::os::unix::fs::symlink(target, models.join("target.gguf")).unwrap();
    std::os::unix::fs::symlink(draft, models.join("draft.gguf")).unwrap();
    let tpl = format!(
        "{} -m {}/target.gguf --host 127.0.0.1 --port {{port}} -c 8192 -np 1 -t 1 {{spec}}",
        ref_paths().server.display(),
        models.display()
    );
    let flags = format!(
        ",-md {}/draft.gguf --spec-type draft-simple --spec-draft-n-max 8",
        models.display()
    );
    let dir = tmp.path().join("c");
    let out = common::ctxbench()
        .args(["sweep", "--server-cmd", &tpl, "-F", "spec", &flags])
        .args(args)
        .args(["--out", dir.to_str().unwrap(), "-q"])
        .env_remove("CTXBENCH_URL")
        .output()
        .expect("run ctxbench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut plain = Vec::new();
    let mut spec = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") {
            continue;
        }
        if name.starts_with("spec=none-run") {
            plain.push(e.path());
        } else {
            spec.push(e.path());
        }
    }
    plain.sort();
    spec.sort();
    Campaign {
        _tmp: tmp,
        dir,
        stdout,
        plain,
        spec,
    }
}

/// `compare --a PLAIN --b SPEC --format json`: the speculation answer of the pair.
fn answer(c: &Campaign, extra: &[&str]) -> Value {
    let out = common::ctxbench()
        .arg("compare")
        .arg("--a")
        .args(&c.plain)
        .arg("--b")
        .args(&c.spec)
        .args(["--format", "json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).expect("compare JSON");
    let s = j["versus"][0]["speculation"].clone();
    assert_eq!(s["status"], "analysed", "{s}");
    assert_eq!(s["speculative_is_a"], false, "{s}");
    assert_eq!(s["detection"], "samples", "{s}");
    s
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Prints the per-length numbers (the test's evidence in its log).
fn show(name: &str, s: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    for p in s["points"].as_array().unwrap() {
        eprintln!(
            "{name} {}: speedup {:.3} ({:.3}–{:.3}) {}, TTFT cost {:.2}, accept length {:.2}, rate {:.2}",
            p["context_tokens"],
            f(&p["speedup"]),
            f(&p["speedup_interval"]["low"]),
            f(&p["speedup_interval"]["high"]),
            p["pays"],
            f(&p["ttft_cost"]),
            f(&p["accept_length"]["mean"]),
            f(&p["accept_rate"]["mean"]),
        );
    }
    eprintln!("{name}: {}", s["answer"]);
}

/// The campaign's own end: the answer on the terminal, the plots in the folder.
fn assert_campaign_end(c: &Campaign, s: &Value) {
    assert!(c.stdout.contains("does speculation pay?"), "{}", c.stdout);
    let answer = s["answer"].as_str().unwrap();
    assert!(
        c.stdout.contains(&format!("ANSWER: {answer}")),
        "{}",
        c.stdout
    );
    for svg in ["speedup.svg", "acceptance.svg"] {
        let text = std::fs::read_to_string(c.dir.join(svg)).expect(svg);
        assert!(text.starts_with("<svg"), "{svg}");
    }
    let md = std::fs::read_to_string(c.dir.join("compare.md")).unwrap();
    assert!(md.contains("### Does speculation pay?"), "{md}");
}

/// The tiny model as target, its deep identity twin (the same logits at 6× the layers) as
/// draft. It replaces the tiny model drafting for itself, whose margin a loaded host erased:
/// a draft as dear as its target costs only the verify on top (0.86×, 0.63–1.17 at 2k in a
/// full suite's run beside other jobs). Here each of the 8 draft steps costs several target
/// steps (12 layers' attention over the context against 2), so 9 tokens cost many times 9
/// plain steps, and the draft's prefill is deeper than the target's.
#[test]
fn a_deeper_twin_as_draft_is_always_accepted_yet_slower_with_a_dearer_ttft() {
    let _g = serial();
    let p = ref_paths();
    let c = campaign(
        &p.model,
        &p.deep_model,
        // Long enough that attention, which the deep draft does 6× over, outweighs a step's
        // fixed costs, short enough that its prefill stays quick (at 4k it took 23–35 s a
        // request on a loaded host, for 0.03×). One run, samples as the unit; the margin is
        // wide, so six samples of 32 tokens a side do.
        &[
            "--contexts",
            "1k,2k",
            "--reps",
            "6",
            "--output-tokens",
            "32",
        ],
    );
    let s = answer(&c, &[]);
    show("deep-draft", &s);
    assert_eq!(s["basis"], "samples_of_one_run");
    for p in s["points"].as_array().unwrap() {
        // The same function proposes what it will verify: nearly every draft is accepted.
        assert!(f(&p["accept_rate"]["mean"]) > 0.9, "{p}");
        assert!(f(&p["accept_length"]["mean"]) > 5.0, "{p}");
        assert!(p["draft_tokens"].as_u64() > Some(0), "{p}");
        // Yet slower: the whole interval below 1.
        assert_eq!(p["pays"], "slower", "{p}");
        assert!(f(&p["speedup_interval"]["high"]) < 1.0, "{p}");
        // The draft prefills the prompt too, through 6× the layers: the first token comes
        // later, the whole interval above 1.
        assert!(f(&p["ttft_cost"]) > 1.0, "{p}");
        assert!(f(&p["ttft_cost_interval"]["low"]) > 1.0, "{p}");
    }
    assert_eq!(s["l_star"]["kind"], "stops_paying", "{s}");
    assert!(s["l_star"]["last_paying"].is_null(), "{s}");
    assert_eq!(s["l_star"]["first_losing"]["context_tokens"], 1024);
    assert!(
        s["answer"]
            .as_str()
            .unwrap()
            .starts_with("speculation does not pay: slower from 1k on"),
        "{s}"
    );
    assert_campaign_end(&c, &s);
}

/// The wide deep identity target (the tiny model's function behind 10 identity layers, every
/// FFN 16384 wide: ~340 MB of f32 weights) with the tiny model as draft: every draft is
/// accepted, and a plain decode step's cost is reading the weights, which the 9-token verify
/// step shares, while the draft's 8 steps cost a fraction of one target step. So speculation
/// pays at short context by a margin no host load erases (by hand, 6 samples a side: 1.81× at
/// 512, 2.19× at 1k, falling to 1.22× at 4k as attention, which a batch does not share, grows;
/// docs/speculation.md). Its prefill is slow (~5 ms per token), so the lengths are short. The narrow
/// deep target (`deep-model`) did not pay: its steps were per-token work that scales with
/// context, so a 9-token verify cost ~9 plain steps. The run is the unit, and on a loaded
/// host the runs differ most (other jobs come and go on the cores and the memory bus: one
/// side's ms per token moved 2.5× from one run to the next): three runs a side at 256 and
/// 512 once left Welch's interval at 0.77–5.32 around 2.02× (a t of few degrees of freedom).
/// So six runs a side of one request per length, at 128 and 256: more runs and degrees of
/// freedom for the interval, in less time than three runs of two requests at twice the
/// lengths (the wide target's prefill and decode are most of the test's time).
#[test]
fn a_wide_deep_identity_target_accepts_every_draft_and_speculation_pays() {
    let _g = serial();
    let p = ref_paths();
    let c = campaign(
        &p.wide_model,
        &p.model,
        &[
            "--contexts",
            "128,256",
            "--runs",
            &RUNS.to_string(),
            "--reps",
            "1",
            "--output-tokens",
            "64",
        ],
    );
    assert_eq!((c.plain.len(), c.spec.len()), (RUNS, RUNS));
    let s = answer(&c, &[]);
    show("wide", &s);
    assert_eq!(s["basis"], "runs");
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{s}");
    for p in points {
        // Same logits: the draft is always right.
        assert!(f(&p["accept_rate"]["mean"]) > 0.9, "{p}");
        assert!(f(&p["accept_length"]["mean"]) > 5.0, "{p}");
        assert_eq!(
            (p["n_plain"].as_u64(), p["n_spec"].as_u64()),
            (Some(RUNS as u64), Some(RUNS as u64))
        );
        // Faster: the whole interval above 1, and the verdict is the interval's.
        let (lo, hi) = (
            f(&p["speedup_interval"]["low"]),
            f(&p["speedup_interval"]["high"]),
        );
        assert!(lo > 1.0, "{p}");
        assert!(lo <= f(&p["speedup"]) && f(&p["speedup"]) <= hi, "{p}");
        assert_eq!(p["pays"], "pays", "{p}");
    }
    assert_eq!(s["l_star"]["kind"], "pays_everywhere", "{s}");
    assert!(
        s["answer"]
            .as_str()
            .unwrap()
            .starts_with("speculation pays at every measured length: 128"),
        "{s}"
    );
    // The fit extrapolates to the server's maximum, and says so.
    assert_eq!(s["fit"]["max_context"], 8192, "{s}");
    assert_campaign_end(&c, &s);
    let out = common::ctxbench()
        .arg("compare")
        .arg("--a")
        .args(&c.plain)
        .arg("--b")
        .args(&c.spec)
        .args(["--format", "md"])
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("the run as the unit"), "{md}");
    assert!(md.contains("EXTRAPOLATED"), "{md}");
}

/// Runs a side of the wide target's campaign.
const RUNS: usize = 6;

#[test]
fn a_draft_of_another_seed_is_rarely_accepted_and_speculation_costs() {
    let _g = serial();
    let other = common::other_seed_model(99);
    let c = campaign(
        &ref_paths().model,
        &other,
        &[
            "--contexts",
            "2k,4k",
            "--reps",
            "6",
            "--output-tokens",
            "32",
        ],
    );
    let s = answer(&c, &[]);
    show("other-seed", &s);
    for p in s["points"].as_array().unwrap() {
        assert!(f(&p["accept_rate"]["mean"]) < 0.2, "{p}");
        assert_eq!(p["pays"], "slower", "{p}");
        assert!(f(&p["speedup_interval"]["high"]) < 1.0, "{p}");
    }
    assert_eq!(s["l_star"]["kind"], "stops_paying", "{s}");
    assert!(s["l_star"]["last_paying"].is_null(), "{s}");
    // The plots of the answer, from the results files.
    let plots = c.dir.join("plots-again");
    let out = common::ctxbench()
        .arg("compare")
        .args([&c.plain[0], &c.spec[0]])
        .arg("--spec-plots")
        .arg(&plots)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let speedup = std::fs::read_to_string(plots.join("speedup.svg")).unwrap();
    assert!(speedup.contains("L*"), "the L* span is marked");
    assert!(plots.join("acceptance.svg").exists());
    // Told the wrong side, the answer turns around: the speculative run taken as plain.
    let flipped = common::ctxbench()
        .arg("compare")
        .args([&c.spec[0], &c.plain[0]])
        .args(["--format", "json", "--spec-side", "b"])
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&flipped.stdout).unwrap();
    let sf = &j["versus"][0]["speculation"];
    assert_eq!(sf["detection"], "given", "{sf}");
    assert!(
        sf["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("report no speculative statistics")),
        "{sf}"
    );
    assert_campaign_end(&c, &s);
}
