//! The speculation schedule on the real reference llama-server: one campaign over the draft
//! length K (`-L k 0,4 --spec-flags '… {k}'`) and the batch (`--concurrency 1,2`) with the
//! wide deep identity target and the tiny model as its draft, the pair that pays
//! (tests/it/speculation_llamacpp.rs says why: every draft is accepted and a verify step
//! shares the wide weights' read). One request at a time K = 4 must beat the plain server
//! at both lengths by compute no host load erases; at a batch of 2 the answer is whatever
//! was measured, and the schedule must cover every batch and length either way.

use crate::common;

use std::path::Path;

use common::{ref_paths, serial};
use serde_json::Value;

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn a_campaign_over_k_and_batch_picks_k_star_per_cell_and_writes_the_schedule_in_every_dialect() {
    let _g = serial();
    let p = ref_paths();
    let tmp = tempfile::tempdir().unwrap();
    let models = tmp.path().join("m");
    std::fs::create_dir(&models).unwrap();
    std::os::unix::fs::symlink(&p.wide_model, models.join("target.gguf")).unwrap();
    std::os::unix::fs::symlink(&p.model, models.join("draft.gguf")).unwrap();
    let tpl = format!(
        "{} -m {}/target.gguf --host 127.0.0.1 --port {{port}} -c 4096 -np 2 -t 1",
        p.server.display(),
        models.display()
    );
    let flags = format!(
        "-md {}/draft.gguf --spec-type draft-simple --spec-draft-n-max {{k}}",
        models.display()
    );
    let dir = tmp.path().join("c");
    let out = common::ctxbench()
        .args([
            "sweep",
            "--server-cmd",
            &tpl,
            "-L",
            "k",
            "0,4",
            "--spec-flags",
            &flags,
        ])
        .args([
            "--concurrency",
            "1,2",
            "--contexts",
            "128,256",
            "--reps",
            "6",
        ])
        .args([
            // 16 tokens: a few verify steps at K = 4 still separate the two by far, and the
            // suite's time stays small (48 took 15 min on a loaded host).
            "--output-tokens",
            "16",
            "--wave-output-tokens",
            "16",
            "--corpus",
            "repeat",
        ])
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
    // Each file records its K; K = 0 ran without the draft model.
    for (file, k) in [("k=0-run0.jsonl", 0), ("k=4-run0.jsonl", 4)] {
        let header: Value = serde_json::from_str(
            std::fs::read_to_string(dir.join(file))
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["config"]["spec_k"], k, "{file}");
        let cmd = header["config"]["server_cmd"].as_str().unwrap();
        assert_eq!(cmd.contains("draft.gguf"), k > 0, "{cmd}");
    }
    let doc = read_json(&dir.join("schedule/schedule.json"));
    let m = &doc["measured"];
    assert_eq!(m["ks"], serde_json::json!([0, 4]));
    assert_eq!(m["batches"], serde_json::json!([1, 2]));
    assert_eq!(m["contexts"], serde_json::json!([128, 256]));
    let cells = m["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    for c in cells {
        // Six samples (batch 1) or six waves (batch 2) per K: the wave is the unit.
        for k in c["ks"].as_array().unwrap() {
            assert_eq!(k["n"], 6, "{c}");
        }
        if c["batch"] == 1 {
            assert_eq!(c["k_star"], 4, "{c}");
            assert_eq!(c["deploy"], 4, "{c}");
            assert!(
                c["ks"][1]["speedup_interval"]["low"].as_f64().unwrap() > 1.0,
                "{c}"
            );
        }
    }
    assert_eq!(m["last_paying"][0], serde_json::json!([1, 256]));
    // The neutral schedule covers batch from 1 and length from 1, open at the top.
    let rows = doc["schedule"].as_array().unwrap();
    assert_eq!(rows[0]["batch_lo"], 1);
    assert_eq!(rows[0]["ctx_lo"], 1);
    assert!(rows
        .iter()
        .any(|r| r["batch_hi"].is_null() && r["ctx_hi"].is_null()));
    // Batch 1 deploys K = 4 at every length: one row, measured at 128 and 256.
    let b1: Vec<&Value> = rows.iter().filter(|r| r["batch_lo"] == 1).collect();
    assert_eq!(b1.len(), 1, "{b1:?}");
    assert_eq!(b1[0]["k"], 4);
    assert_eq!(b1[0]["measured_contexts"], serde_json::json!([128, 256]));
    // Each dialect is written, marked with the proposal it follows.
    let v = read_json(&dir.join("schedule/vllm-48944.json"));
    let first = &v["speculative_token_schedule"][0];
    assert_eq!(
        (
            first[0].as_u64(),
            first[1].as_u64(),
            first[2].as_u64(),
            first[4].as_u64()
        ),
        (Some(1), Some(1), Some(0), Some(4))
    );
    let s = read_json(&dir.join("schedule/sglang-31716.json"));
    assert_eq!(
        s["1"]["ctx_buckets"]["1-inf"]["candidate_steps"],
        serde_json::json!([4])
    );
    let l = read_json(&dir.join("schedule/vllm-54801.json"));
    assert_eq!(l["num_speculative_tokens_per_seq_len"][0][2], 4);
    for key in ["vllm_48944", "vllm_54801", "sglang_31716"] {
        let f = doc["dialects"][key]["follows"].as_str().unwrap();
        assert!(f.contains("unmerged"), "{f}");
    }
    // `report --format schedule` over the files says what the campaign wrote.
    let files: Vec<String> = ["k=0-run0.jsonl", "k=4-run0.jsonl"]
        .iter()
        .map(|f| dir.join(f).display().to_string())
        .collect();
    let rep = common::ctxbench()
        .arg("report")
        .args(&files)
        .args(["--format", "schedule"])
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let md = std::fs::read_to_string(dir.join("schedule/schedule.md")).unwrap();
    assert_eq!(String::from_utf8_lossy(&rep.stdout), md);
    assert!(md.contains("| 1 | 128 |") && md.contains("K* = 4"), "{md}");
}
