//! The real pair that does not pay: the real model's Q4_1 file drafting for the same weights
//! in F16 (`scripts/reference-server real-model-f16`), one campaign over K = 0, 4 at batch 1
//! on the reference llama-server. On this CPU a draft step costs about what a plain target
//! step costs (the same 135M weights, one thread: compute, not weight reads), so however
//! many drafts are accepted the speculative server is slower per token, and the schedule
//! must say K* = 0 with an interval wholly below 1 for K = 4, and deploy 0 everywhere. The
//! ratio is set by compute per step, which host load slows on both sides alike.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ref_paths, serial};
use serde_json::{json, Value};

/// The F16 copy of the real model, written once by the reference-server script.
fn real_model_f16() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/reference-server"))
        .arg("real-model-f16")
        .output()
        .expect("run scripts/reference-server real-model-f16");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It prints `model PATH`, as `--paths` does.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let path = PathBuf::from(text.trim().trim_start_matches("model").trim());
    assert!(path.exists(), "{}", path.display());
    path
}

#[test]
fn the_q4_1_draft_for_its_f16_target_does_not_pay_on_cpu_k_star_0_at_batch_1() {
    let _g = serial();
    let p = ref_paths();
    let f16 = real_model_f16();
    let tpl = format!(
        "{} -m {} --host 127.0.0.1 --port {{port}} -c 2048 -np 1 -t 1",
        p.server.display(),
        f16.display()
    );
    let flags = format!(
        "-md {} --spec-type draft-simple --spec-draft-n-max {{k}}",
        p.real_model.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let out = common::ctxbench()
        .args(["sweep", "--server-cmd", &tpl, "-L", "k", "0,4"])
        .args(["--spec-flags", &flags, "--contexts", "256", "--reps", "6"])
        // 24 tokens: five or so verify steps a sample, enough to time one; natural text,
        // on which real drafts are accepted ~90% of the time (docs/speculation.md).
        .args(["--output-tokens", "24", "--corpus", "natural"])
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
    eprintln!("{stdout}");
    let text = std::fs::read_to_string(dir.join("schedule/schedule.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let cell = &doc["measured"]["cells"][0];
    assert_eq!(
        (&cell["batch"], &cell["context_tokens"]),
        (&json!(1), &json!(256))
    );
    assert_eq!(cell["too_few"], false, "{cell}");
    // The drafts were accepted: the loss is cost, not a draft that never agrees.
    let spec = std::fs::read_to_string(dir.join("k=4-run0.jsonl")).unwrap();
    let accepted: u64 = spec
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|s| s["spec_accepted_tokens"].as_u64())
        .sum();
    assert!(accepted > 0, "no draft token accepted:\n{spec}");
    let k4 = &cell["ks"][1];
    assert_eq!(k4["k"], 4);
    let high = k4["speedup_interval"]["high"]
        .as_f64()
        .expect("an interval");
    assert!(high < 1.0, "K = 4 is not measurably slower: {cell}");
    assert_eq!((&cell["k_star"], &cell["deploy"]), (&json!(0), &json!(0)));
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("schedule/vllm-48944.json")).unwrap(),
    )
    .unwrap();
    let rows = v["speculative_token_schedule"].as_array().unwrap();
    assert!(rows.iter().all(|r| r[4] == 0), "{v}");
}
