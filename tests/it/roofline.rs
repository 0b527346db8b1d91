//! The roofline's flags on `report`, `compare` and `sweep`, on a golden results file (a real
//! sweep of the reference llama-server, recorded before the header had model facts): the
//! usage errors come before anything is read or contacted, and an old run is re-reported
//! with `--hardware` and `--model-config`.

use crate::common::{run, unreachable_url};

use std::path::{Path, PathBuf};

/// The tiny reference model's shape (scripts/make-tiny-model.py's defaults).
const TINY_CONFIG: &str = r#"{"model_type": "llama", "num_hidden_layers": 2,
  "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 256, "vocab_size": 32000, "torch_dtype": "float16",
  "tie_word_embeddings": false}"#;

fn golden() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/schema/testdata/golden/sweep.jsonl")
        .display()
        .to_string()
}

fn config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("config.json");
    std::fs::write(&p, text).unwrap();
    p
}

fn usage_error(args: &[&str]) -> String {
    let (code, _, stderr) = run(args);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    stderr
}

#[test]
fn an_unknown_hardware_name_is_a_usage_error_listing_the_known_ones() {
    let url = unreachable_url();
    let g = golden();
    for args in [
        &["report", &g, "--hardware", "tpu-v5"][..],
        &["compare", &g, &g, "--hardware", "tpu-v5"],
        &["sweep", "--url", &url, "--hardware", "tpu-v5"],
    ] {
        let err = usage_error(args);
        for known in ["h100-sxm", "h200", "b200", "a100-80gb", "l40s", "mi300x"] {
            assert!(err.contains(known), "{args:?}: {err}");
        }
        assert!(!err.contains("cannot connect"), "{err}");
    }
    for bad in ["0", "-3", "fast"] {
        usage_error(&["report", &g, "--memory-bandwidth", bad]);
        usage_error(&["report", &g, "--peak-tflops", bad]);
    }
}

#[test]
fn a_model_config_that_cannot_be_read_is_a_usage_error_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = unreachable_url();
    let g = golden();
    let missing = TINY_CONFIG.replace(r#""num_hidden_layers": 2,"#, "");
    let cases: [(&str, &str); 3] = [
        (&missing, "num_hidden_layers"),
        ("{not json", "not JSON"),
        (&TINY_CONFIG.replace("float16", "int3"), "torch_dtype"),
    ];
    for (text, why) in cases {
        let p = config(dir.path(), text);
        let ps = p.to_str().unwrap();
        for args in [
            &["report", &g, "--hardware", "h100", "--model-config", ps][..],
            &["sweep", "--url", &url, "--model-config", ps],
        ] {
            let err = usage_error(args);
            assert!(err.contains(ps) && err.contains(why), "{args:?}: {err}");
            assert!(!err.contains("cannot connect"), "{err}");
        }
    }
    let err = usage_error(&[
        "report",
        &g,
        "--hardware",
        "h100",
        "--model-config",
        "/no/such.json",
    ]);
    assert!(err.contains("/no/such.json"), "{err}");
    // On a report, a config with no limit to hold it against would change nothing.
    let p = config(dir.path(), TINY_CONFIG);
    let err = usage_error(&["report", &g, "--model-config", p.to_str().unwrap()]);
    assert!(err.contains("--model-config needs --hardware"), "{err}");
}

#[test]
fn an_old_run_is_re_reported_against_an_accelerator_with_a_model_config() {
    let dir = tempfile::tempdir().unwrap();
    let p = config(dir.path(), TINY_CONFIG);
    let g = golden();
    let ps = p.to_str().unwrap();
    let (code, out, err) = run(&["report", &g, "--hardware", "h100", "--model-config", ps]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("roofline (how far from the hardware's limit)"),
        "{out}"
    );
    assert!(
        out.contains("--hardware h100-sxm (NVIDIA H100 SXM5 80GB: 3350 GB/s"),
        "{out}"
    );
    // The tiny model's 2 layers × 2 KV heads × 32 × 2 bytes × (K, V) = 512 B per token.
    assert!(out.contains("512 B of KV cache per token"), "{out}");
    assert!(out.contains("of the bandwidth bound: up to"), "{out}");
    assert!(out.contains("of peak FLOPs (MFU): up to"), "{out}");
    // Without --hardware's table: only what the flags give.
    let (code, md, err) = run(&[
        "report",
        &g,
        "--memory-bandwidth",
        "15",
        "--model-config",
        ps,
        "--format",
        "md",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains("### Roofline: how far from the hardware's limit"),
        "{md}"
    );
    assert!(
        md.contains("| context | ms/step | bound ms | bandwidth used |"),
        "{md}"
    );
    assert!(
        md.contains("no --peak-tflops or --hardware: no prefill MFU"),
        "{md}"
    );
    // Without model facts (the file predates them, no --model-config): said, no figure.
    let (code, out, _) = run(&["report", &g, "--peak-tflops", "100"]);
    assert_eq!(code, 0);
    assert!(out.contains("no model facts"), "{out}");
    assert!(!out.contains("bandwidth used"), "{out}");
}

#[test]
fn compare_shows_both_sides_fractions_and_the_headroom_taken() {
    let dir = tempfile::tempdir().unwrap();
    let p = config(dir.path(), TINY_CONFIG);
    let g = golden();
    let (code, out, err) = run(&[
        "compare",
        &g,
        &g,
        "--memory-bandwidth",
        "15",
        "--peak-tflops",
        "0.5",
        "--model-config",
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("A bandwidth used  B bandwidth used  headroom B took"),
        "{out}"
    );
    // A run against itself takes none of the headroom.
    assert!(
        out.contains("B took 0.0% of A's decode headroom at 2k"),
        "{out}"
    );
    let (code, json, _) = run(&[
        "compare",
        &g,
        &g,
        "--memory-bandwidth",
        "15",
        "--model-config",
        p.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = v["versus"][0]["roofline"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["a_decode"], r["b_decode"], "{r}");
        assert_eq!(r["headroom_taken"], 0.0, "{r}");
    }
}
