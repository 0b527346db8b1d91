//! A real drafter-window cliff (issue 45, point 2) on the reference llama-server: the real
//! model (SmolLM2-135M Q4_1) drafting for itself, once through a copy of its own weights whose
//! attention is a 128-token sliding window on every layer (`scripts/reference-server
//! real-model-window 128`, written by scripts/make-window-draft.py), once through the file
//! itself. Below the window the windowed copy computes exactly the target's function, so a
//! greedy target accepts its drafts; past it the draft loses the first tokens of the context
//! (the attention sink a trained model leans on) and acceptance falls (measured: 0.97 at 100
//! tokens, 0.41 at 600; the full-context copy accepts ~1.0 at both). ctxbench's cliff rule
//! must name the fall with its evidence for the windowed draft, and find none for the other.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{ref_paths, serial};
use serde_json::Value;

/// The draft's window, and the lengths measured: one inside it, one well past it.
const WINDOW: u32 = 128;
const CONTEXTS: &str = "96,768";

/// The real model with every layer's attention windowed to `window` tokens.
pub fn windowed_real_model(window: u32) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/reference-server");
    let out = Command::new(script)
        .args(["real-model-window", &window.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/reference-server real-model-window");
    assert!(out.status.success(), "real-model-window {window} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let p = text
        .lines()
        .find_map(|l| l.strip_prefix("model ").map(|v| PathBuf::from(v.trim())))
        .unwrap_or_else(|| panic!("no 'model' in real-model-window output: {text}"));
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// One speculative sweep of the real model with `draft` (greedy, 8 drafted tokens a step,
/// one thread), then its report as JSON.
fn sweep_report(draft: &Path) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    // A --server-cmd sweep writes a folder: one results file per run of its one variant.
    let out = tmp.path().join("c");
    let cmd = format!(
        "{} -m {} -md {} --spec-type draft-simple --spec-draft-n-max 8 --host 127.0.0.1 --port {{port}} -c 2048 -np 1 -t 1 -tb 1",
        ref_paths().server.display(),
        ref_paths().real_model.display(),
        draft.display()
    );
    let run = common::ctxbench()
        .args(["sweep", "--server-cmd", &cmd, "--contexts", CONTEXTS])
        .args([
            "--reps",
            "3",
            "--output-tokens",
            "24",
            "--corpus",
            "natural",
        ])
        .args(["--out", out.to_str().unwrap(), "-q"])
        .env_remove("CTXBENCH_URL")
        .output()
        .expect("run ctxbench sweep");
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let results = out.join("default-run0.jsonl");
    let rep = common::ctxbench()
        .args(["report", results.to_str().unwrap(), "--format", "json"])
        .output()
        .expect("run ctxbench report");
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    serde_json::from_slice(&rep.stdout).expect("report JSON")
}

fn cliff_warnings(rep: &Value) -> Vec<String> {
    rep["runs"][0]["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter(|w| w["kind"] == "acceptance_cliff")
        .map(|w| w["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_draft_windowed_to_128_tokens_falls_off_a_cliff_past_it_and_a_full_context_copy_does_not() {
    let _g = serial();
    let windowed = sweep_report(&windowed_real_model(WINDOW));
    let cliff = cliff_warnings(&windowed);
    eprintln!("windowed draft: {cliff:?}");
    assert_eq!(cliff.len(), 1, "{}", windowed["runs"][0]["warnings"]);
    // The evidence: the two lengths around the window, and the cause named.
    assert!(
        cliff[0].starts_with("acceptance falls from ") && cliff[0].contains("between 96 and 768"),
        "{}",
        cliff[0]
    );
    assert!(
        cliff[0].contains("a drafter window shorter than the context"),
        "{}",
        cliff[0]
    );

    let full = sweep_report(&ref_paths().real_model);
    assert_eq!(
        cliff_warnings(&full),
        Vec::<String>::new(),
        "the same weights without the window: {}",
        full["runs"][0]["warnings"]
    );
}
